"""Criterion spans: cutting (spans.py), the span index, span fusion and the span re-ranker.

Oracles: the node text itself (every span's offsets point at its own words), the reader's
``load_tables`` grid (every table-row span names the cells of that row), brute-force float64
cosines, and the span-fusion formula written out.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader
from llama_index.readers.hwpx.writer import HWPXBuilder

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car.demo import demo_corpus_dir
from llama_index_car.fusion import span_fusion, span_zscore_fusion
from llama_index_car.postprocessors import SpanReranker
from llama_index_car.postprocessors.criterion_spans import span_candidates
from llama_index_car.span_index import SpanIndex
from llama_index_car.spans import (
    MAX_CHARS,
    MIN_CHARS,
    TableHeader,
    node_spans,
    table_header,
    text_spans,
)
from tests.fakes.embeddings import HashedBigramEmbedding


def _words(s: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", s).split())


@pytest.fixture(scope="module")
def demo_nodes() -> list:
    docs = HWPXReader().load_data(demo_corpus_dir())
    return HWPXNodeParser().get_nodes_from_documents(docs)


# ------------------------------------------------------------------------ cutting
def test_sentence_offsets_point_at_the_span_words() -> None:
    body = (
        "## 깎기 비탈면 경사 조정방안\n\n"
        "깎기 비탈면의 경사는 토질에 따라 1:1.0 ~ 1:1.5 이하로 하며 소단을 설치한다. "
        "소단 폭은 1.0m 이상으로 한다.\n"
        "짧은 줄\n"
        "배수구는 비탈 어깨에서 1.0m 이상 떨어진 위치에 두고 유수를 측구로 유도한다."
    )
    spans = text_spans(body)
    assert spans and all(s.kind == "sentence" for s in spans)
    for s in spans:
        assert " ".join(body[s.start : s.end].split()) == s.text
    assert all("깎기 비탈면 경사 조정방안" != s.text for s in spans)  # the title is no span
    assert not any(s.text.startswith("##") for s in spans)
    # a short line (< MIN_CHARS) joins the next piece instead of standing alone
    assert not any(s.text == "짧은 줄" for s in spans)
    assert any("짧은 줄 배수구는" in s.text for s in spans)


def test_long_pieces_are_cut_below_max_chars() -> None:
    text = " ".join(["기준값은 이상이어야 한다"] * 80)  # no sentence end: one long line
    spans = text_spans(text, skip_title=False)
    assert len(spans) > 1
    assert all(len(s.text) <= MAX_CHARS for s in spans)
    assert all(len(s.text) >= MIN_CHARS for s in spans[:-1])
    assert _words(" ".join(s.text for s in spans)) == _words(text)


def test_table_rows_match_the_reader_grid(demo_nodes: list) -> None:
    """Every row span's cell texts are the cells of that row in load_tables (twin oracle)."""
    reader = HWPXReader()
    checked = 0
    for node in demo_nodes:
        rows = [s for s in node_spans(node) if s.kind == "row" and s.table_index is not None]
        if not rows:
            continue
        tables = reader.load_tables(node.metadata["file_path"])
        text = node.get_content()
        for s in rows:
            table = tables[s.table_index]
            in_row = [
                c for c in table.cells
                if c.row <= s.row < c.row + c.row_span and " ".join(c.text.split())
            ]
            assert in_row, (s, table)
            for c in in_row:
                assert " ".join(c.text.split()) in s.text
            assert text[s.start : s.end].lower().startswith(("<tr", "|"))  # its own rendering
            assert s.col == 0 and s.row_span == 1 and s.col_span >= len({c.col for c in in_row})
            checked += 1
    assert checked >= 3


def test_rows_read_as_header_value_pairs(demo_nodes: list) -> None:
    node = next(n for n in demo_nodes if "750m" in n.get_content())
    row = next(s for s in node_spans(node) if s.kind == "row" and "750m" in s.text)
    assert row.text == "항목: 설치 간격 · 기준: 750m 이내"  # a colspan cell is read once
    assert row.header == "항목 | 기준"  # each label once


def _table_nodes(rows: list[list[str]], spans: dict | None = None) -> list:
    """The nodes of a one-table HWPX document built in code (read by the reader)."""
    builder = HWPXBuilder()
    builder.add_section().heading("기준", 1).paragraph("아래 표에 따른다.").table(rows, spans)
    docs = HWPXReader().load_bytes(builder.to_bytes(), "t.hwpx")
    return HWPXNodeParser().get_nodes_from_documents(docs)


JOYSTICK = [
    ["[ 표 6. 조이스틱 운전장치 ]", "", ""],
    ["구 분", "운전장치", "비고"],
    ["작동력", "2.5 N ∼ 5.0 N", "-"],
    ["행정 & 복귀", "10 ㎜ 이하", "<손잡이>"],
]


def test_a_caption_row_over_the_table_is_not_its_header() -> None:
    """Row 0 merged over the whole table is a caption: the header is row 1 (the first row
    with several distinct cells), as the table reads; the caption row is a span of its own
    without a header, the header row none."""
    (node,) = _table_nodes(JOYSTICK, {(0, 0): (1, 3)})
    rows = {s.row: s for s in node_spans(node) if s.kind == "row"}
    assert sorted(rows) == [0, 2, 3]
    assert rows[2].text == "구 분: 작동력 · 운전장치: 2.5 N ∼ 5.0 N · 비고: -"
    assert rows[2].header == rows[3].header == "구 분 | 운전장치 | 비고"
    assert rows[0].text == "[ 표 6. 조이스틱 운전장치 ]" and rows[0].header is None
    cells = {c.text: c for c in span_candidates(node) if c.kind == "cell"}
    assert cells["2.5 N ∼ 5.0 N"].table["header"] == "운전장치"  # type: ignore[index]
    assert cells["<손잡이>"].table["header"] == "비고"  # type: ignore[index]


def test_row_and_cell_spans_point_at_their_own_rendering() -> None:
    """A row span's offsets are its own ``<tr>…</tr>`` (merged table, HTML) or ``| … |`` line
    (markdown), a cell's its own rendered text (escaped as rendered), never the table."""
    for rows, spans, form in ((JOYSTICK, {(0, 0): (1, 3)}, "<tr>"), (JOYSTICK[1:], None, "|")):
        (node,) = _table_nodes(rows, spans)
        text = node.get_content()
        for s in node_spans(node):
            if s.kind != "row":
                continue
            seg = text[s.start : s.end]
            assert seg.startswith(form) and seg.count(form[:3]) <= (1 if form == "<tr>" else 99)
            assert "\n" not in seg and (seg.endswith("</tr>") or seg.endswith("|"))
            # the segment holds exactly this row's own cells, in order (the oracle: the rows
            # the test wrote)
            own = [v for v in rows[s.row] if v]
            if form == "<tr>":
                found = re.findall(r"<td[^>]*>(.*?)</td>", seg)
            else:
                found = re.split(r"(?<!\\)\|", seg)[1:-1]
            assert [_unrendered(x) for x in found if x.strip()] == own, seg
        for c in span_candidates(node):
            if c.kind == "cell":
                assert _unrendered(text[c.start : c.end]) == c.text, (c, text[c.start : c.end])


def _unrendered(segment: str) -> str:
    """A rendered cell back to its text (HTML unescaped, ``<br>`` and markdown ``\\|``)."""
    import html

    return " ".join(html.unescape(segment.replace("<br>", "\n")).replace("\\|", "|").split())


def test_a_multi_row_header_labels_each_column_with_both_rows() -> None:
    """``구분`` over two rows beside ``비용`` / ``편익`` each over ``직접 | 간접``: the header is
    both rows; a row label spanning down beside a header is not a second header row."""
    rows = [
        ["구분", "비용", "", "편익", ""],
        ["", "직접", "간접", "직접", "간접"],
        ["A안", "1억", "2억", "3억", "4억"],
    ]
    (node,) = _table_nodes(rows, {(0, 0): (2, 1), (0, 1): (1, 2), (0, 3): (1, 2)})
    (row,) = [s for s in node_spans(node) if s.kind == "row"]
    assert row.row == 2
    assert row.text == "구분: A안 · 비용 직접: 1억 · 비용 간접: 2억 · 편익 직접: 3억 · 편익 간접: 4억"
    form = [  # a form: 기본 정보 labels rows 0-2 down the left; row 1 is data, not header
        ["기본 정보", "규제사무명", "사업시행자의 결정", ""],
        ["", "규제조문", "제5조", "제6조"],
        ["", "유형", "신설", "신설"],
    ]
    (node,) = _table_nodes(form, {(0, 0): (3, 1), (0, 2): (1, 2)})
    assert {s.row for s in node_spans(node) if s.kind == "row"} == {1, 2}


def test_table_header_rules() -> None:
    from collections import namedtuple

    cell = namedtuple("cell", "row col row_span col_span text")
    one_col = [cell(0, 0, 1, 1, "목록"), cell(1, 0, 1, 1, "가"), cell(2, 0, 1, 1, "나")]
    assert table_header(one_col) == TableHeader((0,), ("목록",))
    no_header = [cell(r, 0, 1, 2, f"문단 {r}") for r in range(6)]
    assert table_header(no_header) == TableHeader((), ("", ""))
    # a caption and a subtitle merged over the table, then the header at row 2
    titled = [cell(0, 0, 1, 2, "표 1"), cell(1, 0, 1, 2, "1. 제조업자"), cell(2, 0, 1, 1, "구분"),
              cell(2, 1, 1, 1, "금액"), cell(3, 0, 1, 1, "1"), cell(3, 1, 1, 1, "5만원")]
    header = table_header(titled)
    assert header.rows == (2,) and header.over(0, 2) == "구분 | 금액"
    assert not header.labels(2) and header.labels(3) and not header.labels(0)
    # past MAX_HEADER_SKIP rows of captions: no header
    deep = [cell(r, 0, 1, 2, f"제목 {r}") for r in range(4)] + titled[2:]
    assert table_header([c._replace(row=c.row + 2) if c.row >= 2 else c for c in deep]).rows == ()


@pytest.mark.corpus
def test_caption_row_headers_agree_with_the_hwpx_xml() -> None:
    """Every table of ../shared/corpus HWPX files whose first ``hp:tr`` is one cell merged
    over the table: the row spans' header is the texts of the table's second ``hp:tr`` in the
    section XML (read here with lxml, not the reader), when that row has two distinct texts."""
    import zipfile

    from lxml import etree

    corpus = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus"
    files = sorted(p for p in corpus.rglob("*.hwpx") if "bad" not in p.parts) if \
        corpus.is_dir() else []
    if not files:
        pytest.skip("../shared/corpus is not present")
    checked = 0
    for path in files:
        expected: list[str] = []
        with zipfile.ZipFile(path) as z:
            for name in sorted(n for n in z.namelist() if re.match(r"Contents/section\d+\.xml", n)):
                root = etree.fromstring(z.read(name))
                for tbl in root.iter("{*}tbl"):
                    trs = tbl.findall("{*}tr")
                    if len(trs) < 3:
                        continue
                    first = trs[0].findall("{*}tc")
                    span = first[0].find("{*}cellSpan") if len(first) == 1 else None
                    if span is None or span.get("colSpan") != tbl.get("colCnt") or not _xml_text(
                            first[0]):
                        continue  # not a caption row merged over the table
                    second = trs[1].findall("{*}tc")
                    if any(tc.find("{*}cellSpan") is not None
                           and tc.find("{*}cellSpan").get("rowSpan", "1") != "1" for tc in second):
                        continue  # a multi-row header: labels joined from two rows
                    distinct = [t for t in dict.fromkeys(_xml_text(tc) for tc in second) if t]
                    data = any(_xml_text(tc) for tr in trs[2:] for tc in tr.findall("{*}tc"))
                    if len(distinct) >= 2 and data:  # a template's empty rows are no spans
                        expected.append(" | ".join(distinct))
        if not expected:
            continue
        nodes = HWPXNodeParser().get_nodes_from_documents(HWPXReader().load_data(path))
        headers = {s.header for n in nodes for s in node_spans(n) if s.kind == "row"}
        for want in expected:
            assert want in headers, (path.name, want)
            checked += 1
    assert checked >= 20


def _xml_text(tc: Any) -> str:
    """A cell's text from its XML: its paragraphs' ``hp:t`` texts, paragraphs and line breaks
    as spaces, whitespace collapsed."""
    words: list[str] = []
    for p in tc.iter("{*}p"):
        for t in p.iter("{*}t"):
            words.append(t.text or "")
            words.extend(" " + (child.tail or "") for child in t)
        words.append(" ")
    return " ".join("".join(words).split())


def test_every_node_with_text_has_a_span() -> None:
    assert node_spans(TextNode(text="## 제목만\n")) != []
    assert node_spans(TextNode(text="   ")) == []


# ------------------------------------------------------------------------ span index
@pytest.fixture(scope="module")
def embed() -> HashedBigramEmbedding:
    return HashedBigramEmbedding()


def _nodes(n: int) -> list[TextNode]:
    return [
        TextNode(
            id_=f"n{i}",
            text=f"## 절 {i}\n\n" + " ".join(
                f"{i}번 기준 문장 {j}: 간격은 {i * j + 1}m 이내로 한다." for j in range(1 + i % 4)
            ),
        )
        for i in range(n)
    ]


def _brute(nodes: list[TextNode], embed: HashedBigramEmbedding, q: np.ndarray) -> list[float]:
    out = []
    for node in nodes:
        best = -math.inf
        for s in node_spans(node):
            v = np.asarray(embed.get_text_embedding(s.text), dtype=np.float64)
            best = max(best, float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q))))
        out.append(best)
    return out


def test_best_spans_equal_brute_force_cosines(embed: HashedBigramEmbedding) -> None:
    nodes = _nodes(12)
    index = SpanIndex.from_nodes(nodes, embed)
    q = np.asarray(embed.get_query_embedding("간격은 7m 이내"), dtype=np.float64)
    ids = [n.node_id for n in nodes][::-1] + ["missing"]
    hits = index.best_spans(q, ids)
    assert hits[-1] is None
    expected = _brute(nodes[::-1], embed, q)
    for hit, want in zip(hits[:-1], expected, strict=True):
        assert hit is not None
        assert hit.score == pytest.approx(want, abs=2e-3)  # float16 storage
    assert index.dim == 64 and index.nbytes == index.n_spans * 64 * 2


def test_updates_equal_a_fresh_build(embed: HashedBigramEmbedding) -> None:
    nodes = _nodes(10)
    changed = TextNode(id_="n3", text="## 바뀐 절\n\n바뀐 문장은 폭 3.0m 이상으로 한다고 정한다.")
    added = TextNode(id_="n99", text="새 절의 기준은 높이 2.0m 이상이다. 그리고 간격은 1.5m이다.")
    updated = SpanIndex.from_nodes(nodes, embed).without(["n5", "nope"]).with_nodes(
        [changed, added], embed
    )
    final = [n for n in nodes if n.node_id not in ("n3", "n5")] + [changed, added]
    fresh = SpanIndex.from_nodes(final, embed)
    assert sorted(updated.node_ids) == sorted(fresh.node_ids)
    q = embed.get_query_embedding("높이 2.0m 이상")
    got = dict(zip(updated.node_ids, updated.best_spans(q, updated.node_ids), strict=True))
    want = dict(zip(fresh.node_ids, fresh.best_spans(q, fresh.node_ids), strict=True))
    for d in fresh.node_ids:
        assert got[d].span == want[d].span and got[d].score == pytest.approx(want[d].score)
    assert "n5" not in updated and updated.spans_of("n3")[0].text.startswith("바뀐 문장")


def test_concat_of_shards_equals_one_build(embed: HashedBigramEmbedding) -> None:
    nodes = _nodes(9)
    whole = SpanIndex.from_nodes(nodes, embed)
    parts = SpanIndex.concat(
        [SpanIndex.from_nodes(nodes[:4], embed), SpanIndex.from_nodes([], embed),
         SpanIndex.from_nodes(nodes[4:], embed)]
    )
    assert parts.node_ids == whole.node_ids and parts.n_spans == whole.n_spans
    with pytest.raises(ConfigurationError):
        SpanIndex.concat([whole, SpanIndex.from_nodes(nodes[:1], embed)]).best_spans([0.0], [])


def test_persist_load_roundtrip(tmp_path: Path, embed: HashedBigramEmbedding) -> None:
    index = SpanIndex.from_nodes(_nodes(6), embed)
    index.persist(tmp_path / "spans")
    back = SpanIndex.load(tmp_path / "spans")
    assert back.node_ids == index.node_ids
    q = embed.get_query_embedding("기준 문장")
    assert back.best_spans(q, back.node_ids) == index.best_spans(q, index.node_ids)


def _save(path: Path, arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize(
    "damage",
    ["truncated", "float32", "shape", "nan", "offsets", "kind", "format", "pickle", "missing"],
)
def test_hostile_span_folder_is_a_named_error(
    tmp_path: Path, embed: HashedBigramEmbedding, damage: str
) -> None:
    folder = tmp_path / "spans"
    index = SpanIndex.from_nodes(_nodes(5), embed)
    index.persist(folder)
    vectors, records = folder / "vectors.npy", folder / "spans.json"
    arr = np.load(vectors)
    data = json.loads(records.read_text())
    if damage == "truncated":
        vectors.write_bytes(vectors.read_bytes()[:-100])
    elif damage == "float32":
        _save(vectors, arr.astype(np.float32))
    elif damage == "shape":
        _save(vectors, arr[:-1])
    elif damage == "nan":
        arr[0, 0] = np.nan
        _save(vectors, arr)
    elif damage == "offsets":
        data["offsets"][2] = data["offsets"][1] - 1
        records.write_text(json.dumps(data))
    elif damage == "kind":
        data["spans"][0]["kind"] = "paragraph"
        records.write_text(json.dumps(data))
    elif damage == "format":
        data["format_version"] = 99
        records.write_text(json.dumps(data))
    elif damage == "pickle":
        vectors.write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False, "
                            b"'shape': (1,), }" + b" " * 40 + b"\n" + b"\x80\x04N.")
    else:
        vectors.unlink()
    with pytest.raises(IndexPersistError) as err:
        SpanIndex.load(folder)
    assert str(folder) in str(err.value)


# ------------------------------------------------------------------------ fusion
def test_span_fusion_is_the_formula() -> None:
    pool = ["a", "b", "c", "d"]
    span = [0.2, 0.9, None, 0.5]  # span ranks: b 1, d 2, a 3, c none
    w, k = 0.6, 60
    want = {
        "a": (1 - w) / (k + 1) + w / (k + 3),
        "b": (1 - w) / (k + 2) + w / (k + 1),
        "c": (1 - w) / (k + 3),
        "d": (1 - w) / (k + 4) + w / (k + 2),
    }
    got = span_fusion(pool, span, w, k)
    assert [d for d, _ in got] == sorted(want, key=lambda d: -want[d])
    for d, s in got:
        assert s == pytest.approx(want[d])
    assert [d for d, _ in span_fusion(pool, span, 0.0)] == pool
    with pytest.raises(ConfigurationError):
        span_fusion(pool, span[:2], w)
    with pytest.raises(ConfigurationError):
        span_fusion(pool, span, 1.5)


def test_reranker_orders_by_fusion_and_explains(embed: HashedBigramEmbedding) -> None:
    nodes = _nodes(8)
    index = SpanIndex.from_nodes(nodes, embed)
    query = "7번 기준 문장 2: 간격은 15m 이내로 한다."
    pool = [NodeWithScore(node=n, score=1.0 / (i + 1)) for i, n in enumerate(nodes)]
    out = SpanReranker(span_index=index, embed_model=embed, weight=0.6, pool=5).postprocess_nodes(
        pool, query_bundle=QueryBundle(query)
    )
    q = embed.get_query_embedding(query)
    hits = index.best_spans(q, [n.node_id for n in nodes[:5]])
    want = span_fusion([n.node_id for n in nodes[:5]], [h.score for h in hits], 0.6)
    assert [n.node.node_id for n in out] == [d for d, _ in want] + ["n5", "n6", "n7"]
    top = out[0].node
    span = top.metadata["car_explain"]["span"]
    assert span["text"] in {s.text for s in node_spans(top)}
    assert top.get_content()[span["start"] : span["end"]].split()[0] == span["text"].split()[0]
    assert "car_explain" in top.excluded_llm_metadata_keys
    assert "car_explain" not in nodes[0].metadata  # inputs untouched
    with pytest.raises(ConfigurationError):
        SpanReranker(span_index=index, embed_model=embed).postprocess_nodes(pool)


def test_car_reranks_its_pool_by_spans(embed: HashedBigramEmbedding) -> None:
    from llama_index_car import CriterionAwareRetriever, OfflineCriterionRetriever

    nodes = _nodes(30)
    plain = CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=embed, spans=False, similarity_top_k=30
    )
    spans = CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=embed, similarity_top_k=30
    )
    assert plain.span_index is None and spans.span_index is not None
    query = "간격은 43m 이내로 하나요?"  # a question: the span step counts
    base = plain.retrieve(query)
    ranked = spans.retrieve(query)
    q = embed.get_query_embedding(query)
    ids = [h.node.node_id for h in base]
    head = ids[: spans.span_pool]  # the first span_pool are re-ranked, the rest follow
    hits = spans.span_index.best_spans(q, head)
    assert spans.span_weight == 1.2
    want = span_zscore_fusion(head, [float(h.score or 0) for h in base[: spans.span_pool]],
                              [h.score for h in hits], spans.span_weight)
    assert [h.node.node_id for h in ranked] == [d for d, _ in want] + ids[spans.span_pool :]
    assert all(h.node.metadata["car_explain"].get("span") is not None for h in ranked[:20])
    assert ranked[0].node.metadata["car_explain"]["question"] is True
    # a statement asks for no one sentence: the fusion's order, no span step
    statement = "간격은 43m 이내로 한다"
    assert [h.node.node_id for h in spans.retrieve(statement)] == [
        h.node.node_id for h in plain.retrieve(statement)]
    assert "span" not in spans.retrieve(statement)[0].node.metadata["car_explain"]
    with pytest.raises(ConfigurationError):
        OfflineCriterionRetriever(plain.dense_retriever, plain.lexical_retriever, span_weight=0.5)
