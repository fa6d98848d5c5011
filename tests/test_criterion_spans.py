"""Criterion spans on every hit: ``CriterionSpanPostprocessor`` and CAR's ``criterion_spans``.

Oracles: the reader's ``node_cells()`` for every table span's coordinates and text (over the
shared corpus), the node text itself for every offset, and the score formula written out by
hand for a tiny node (BM25 from its definition, vectors chosen in the test).
"""

from __future__ import annotations

import copy
import html
import math
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader, node_cells

from llama_index_car._errors import ConfigurationError
from llama_index_car.demo import demo_corpus_dir
from llama_index_car.postprocessors import CriterionSpanPostprocessor
from llama_index_car.postprocessors.criterion_spans import (
    BM25_B,
    BM25_K1,
    CRITERION_SPANS_KEY,
    span_candidates,
)
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from llama_index_car.span_index import SpanIndex
from llama_index_car.spans import node_spans
from tests.fakes.embeddings import HashedBigramEmbedding

TABLE_KEYS = ("table_index", "row", "col", "row_span", "col_span", "header")


def _ws(text: str) -> str:
    return " ".join(str(text).split())


def _nodes_of(files: list[Path]) -> list:
    reader, parser = HWPXReader(), HWPXNodeParser()
    nodes: list = []
    for f in files:
        nodes.extend(parser.get_nodes_from_documents(reader.load_data(f)))
    return nodes


@pytest.fixture(scope="module")
def embed() -> HashedBigramEmbedding:
    return HashedBigramEmbedding()


@pytest.fixture(scope="module")
def corpus_nodes(shared_dir: Path) -> list:
    files = sorted((shared_dir / "corpus" / "hwpx").glob("*.hwpx"))
    if not files:
        pytest.skip("no .hwpx files in the shared corpus")
    return _nodes_of(files)


@pytest.fixture(scope="module")
def demo_nodes() -> list:
    return _nodes_of(sorted(demo_corpus_dir().glob("*.hwpx")))


# ----------------------------------------------------------------------------- oracle
def _check_against_cells(node: object, span: dict, row_offsets: dict) -> None:
    """One attached/candidate span against node_cells() and the node text."""
    text = node.get_content()  # type: ignore[attr-defined]
    start, end = span["start"], span["end"]
    assert 0 <= start <= end <= len(text)
    if span["kind"] == "sentence":
        assert _ws(text[start:end]).startswith(span["text"]), span
        return
    assert all(k in span for k in TABLE_KEYS), span
    if span["table_index"] is None:  # a table known only from its HTML: no cells to compare
        return
    cells = [c for c in node_cells(node) if c.table == span["table_index"]]
    assert cells, span
    if span["kind"] == "row":
        in_row = [c for c in cells if c.row <= span["row"] < c.row + c.row_span and _ws(c.text)]
        assert in_row and any(c.row == span["row"] for c in cells), span
        for c in in_row:
            assert _ws(c.text) in span["text"]
        width = max(c.col + c.col_span for c in cells)
        assert (span["col"], span["row_span"], span["col_span"]) == (0, 1, width)
        # its own rendered row: one <tr>…</tr> or one line, never the table
        seg = text[start:end]
        assert (seg.startswith("<tr") and seg.count("<tr") == 1 and seg.endswith("</tr>")) or (
            "\n" not in seg and seg.strip()), span
        row_offsets[(span["table_index"], span["row"])] = (start, end)
        return
    assert span["kind"] == "cell"
    same = [
        c for c in cells
        if (c.row, c.col, c.row_span, c.col_span)
        == (span["row"], span["col"], span["row_span"], span["col_span"])
    ]
    assert len(same) == 1 and _ws(same[0].text) == span["text"], (span, same)
    # the header: labels of cells above it over its columns, never a caption merged over
    # the whole table
    above = [_ws(c.text) for c in cells if c.row + c.row_span <= span["row"]
             and c.col < span["col"] + span["col_span"] and span["col"] < c.col + c.col_span]
    for part in (span["header"] or "").split(" | ") if span["header"] else []:
        rest = part
        for h in sorted(set(above), key=len, reverse=True):
            rest = rest.replace(h, " ") if h else rest
        assert part and not rest.strip(), (span, above)
    width = max(c.col + c.col_span for c in cells)
    caption = [c for c in cells if c.row == 0]
    if width > 1 and len(caption) == 1 and caption[0].col_span == width and _ws(caption[0].text):
        assert _ws(caption[0].text) not in (span["header"] or "").split(" | "), span
    row = row_offsets[(span["table_index"], span["row"])]
    # the cell's own rendered text (HTML/markdown escapes undone), else its row's rendering
    assert (start, end) == row or (_unrendered(text[start:end]) == span["text"]
                                   and row[0] <= start <= end <= row[1])


def _unrendered(segment: str) -> str:
    return _ws(html.unescape(segment.replace("<br>", "\n")).replace("\\|", "|"))


def _candidate_dict(c: object) -> dict:
    d = {"kind": c.kind, "text": c.text, "start": c.start, "end": c.end}  # type: ignore[attr-defined]
    d.update(c.table or {})  # type: ignore[attr-defined]
    return d


@pytest.mark.corpus
def test_every_table_span_matches_node_cells_over_the_shared_corpus(corpus_nodes: list) -> None:
    checked = {"row": 0, "cell": 0, "sentence": 0}
    for node in corpus_nodes:
        row_offsets: dict = {}
        for c in span_candidates(node):
            _check_against_cells(node, _candidate_dict(c), row_offsets)
            checked[c.kind] += 1
    assert checked["row"] >= 100 and checked["cell"] >= 100 and checked["sentence"] >= 100


@pytest.mark.corpus
def test_attached_spans_over_the_shared_corpus(corpus_nodes: list, embed: object) -> None:
    """Every hit gets spans; each is a candidate of its node, checked against node_cells()."""
    index = SpanIndex.from_nodes(corpus_nodes, embed)
    post = CriterionSpanPostprocessor(span_index=index, embed_model=embed, top_n=4)
    hits = [NodeWithScore(node=n, score=1.0) for n in corpus_nodes]
    out = post.postprocess_nodes(hits, query_bundle=QueryBundle("설치 기준 높이 1.5m 이상"))
    kinds: set = set()
    for hit, nws in zip(hits, out, strict=True):
        spans = nws.node.metadata[CRITERION_SPANS_KEY]
        assert nws.node.node_id == hit.node.node_id and nws.score == hit.score
        if not node_spans(hit.node):
            assert spans == []
            continue
        assert 1 <= len(spans) <= 4
        scores = [s["score"] for s in spans]
        assert scores == sorted(scores, reverse=True)
        candidates = [_candidate_dict(c) for c in span_candidates(hit.node)]
        row_offsets = {
            (c["table_index"], c["row"]): (c["start"], c["end"])
            for c in candidates if c["kind"] == "row"
        }
        for s in spans:
            kinds.add(s["kind"])
            plain = {k: v for k, v in s.items() if k not in ("score", "parts")}
            assert plain in candidates
            _check_against_cells(hit.node, s, dict(row_offsets))
    assert {"sentence", "row", "cell"} <= kinds


# ----------------------------------------------------------------------------- formula
class _Whitespace:
    """A tokenizer with the KiwiTokenizer interface that splits at whitespace (hand maths)."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def tokenize_batch(self, texts: list[str]) -> list[list[str]]:
        return [t.split() for t in texts]


S1 = "pump pump room floor shall drain into the sump quickly"
S2 = "valve pit depth is 1.5m 이상 and the 기준 applies to it"


def _tiny() -> tuple[TextNode, SpanIndex]:
    node = TextNode(id_="tiny", text=f"## 제목\n\n{S1}\n{S2}")
    spans = node_spans(node)
    assert [s.text for s in spans] == [S1, S2]  # precondition of the hand computation
    index = SpanIndex.from_span_vectors([node], [[[1.0, 0.0], [0.6, 0.8]]])
    return node, index


def test_score_is_the_documented_combination_by_hand(embed: object) -> None:
    node, index = _tiny()
    post = CriterionSpanPostprocessor(span_index=index, embed_model=embed,
                                      tokenizer=_Whitespace(), top_n=5)
    bundle = QueryBundle("pump valve", embedding=[1.0, 0.0])
    spans = post.postprocess_nodes([NodeWithScore(node=node, score=0.5)],
                                   query_bundle=bundle)[0].node.metadata[CRITERION_SPANS_KEY]
    d1, d2 = S1.split(), S2.split()
    avgdl, idf = (len(d1) + len(d2)) / 2, math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))

    def bm25(tf: int, dl: int) -> float:
        return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl))

    b1, b2 = bm25(2, len(d1)), bm25(1, len(d2))  # "pump" twice in S1, "valve" once in S2
    top = max(b1, b2)
    want1 = 1.0 * 1.0 + 0.3 * b1 / top + 0.1 * 0.0  # no cue in S1
    want2 = 1.0 * 0.6 + 0.3 * b2 / top + 0.1 * min(3, 2) / 2  # 1.5m, 이상, 기준
    assert [s["text"] for s in spans] == [S1, S2]  # best first
    assert spans[0]["score"] == pytest.approx(want1, abs=1e-3)  # float16 vectors
    assert spans[1]["score"] == pytest.approx(want2, abs=1e-3)
    assert spans[1]["parts"]["cue"] == 1.0 and spans[0]["parts"]["lexical"] == pytest.approx(
        b1 / top
    )


def test_top_n_order_copies_and_excluded_keys(demo_nodes: list, embed: object) -> None:
    index = SpanIndex.from_nodes(demo_nodes, embed)
    hits = [NodeWithScore(node=n, score=float(i)) for i, n in enumerate(demo_nodes[:8])]
    before = [copy.deepcopy((h.node.metadata, h.node.excluded_llm_metadata_keys,
                             h.node.excluded_embed_metadata_keys, h.score)) for h in hits]
    for top_n in (1, 2):
        post = CriterionSpanPostprocessor(span_index=index, embed_model=embed, top_n=top_n)
        out = post.postprocess_nodes(hits, query_str="비상주차대 설치 간격 750m")
        for h, o in zip(hits, out, strict=True):
            spans = o.node.metadata[CRITERION_SPANS_KEY]
            assert 1 <= len(spans) <= top_n and len(spans) == min(
                top_n, len({c.place for c in span_candidates(h.node)}))
            assert [s["score"] for s in spans] == sorted((s["score"] for s in spans),
                                                         reverse=True)
            assert o.node is not h.node and o.score == h.score
            for attr in ("excluded_embed_metadata_keys", "excluded_llm_metadata_keys"):
                assert CRITERION_SPANS_KEY in getattr(o.node, attr)
            assert spans[0]["text"] not in o.node.get_metadata_str(MetadataMode.LLM)
            assert CRITERION_SPANS_KEY not in o.node.get_content(MetadataMode.EMBED)
    after = [(h.node.metadata, h.node.excluded_llm_metadata_keys,
              h.node.excluded_embed_metadata_keys, h.score) for h in hits]
    assert after == before  # inputs unmodified


def test_a_row_and_its_cells_are_one_place(demo_nodes: list, embed: object) -> None:
    node = next(n for n in demo_nodes if "750m" in n.get_content())
    index = SpanIndex.from_nodes([node], embed)
    post = CriterionSpanPostprocessor(span_index=index, embed_model=embed, top_n=50)
    spans = post.postprocess_nodes([NodeWithScore(node=node)], query_str="750m 이내 설치 간격")[
        0].node.metadata[CRITERION_SPANS_KEY]
    rows = [(s["table_index"], s["row"]) for s in spans if s["kind"] in ("row", "cell")]
    assert len(rows) == len(set(rows))
    assert len(spans) == len({c.place for c in span_candidates(node)})


def test_node_outside_the_span_index_is_cut_on_the_fly(demo_nodes: list, embed: object) -> None:
    node = next(n for n in demo_nodes if "750m" in n.get_content())
    empty = SpanIndex.from_nodes([demo_nodes[0] if demo_nodes[0] is not node else demo_nodes[1]],
                                 embed)
    post = CriterionSpanPostprocessor(span_index=empty, embed_model=embed, top_n=3)
    spans = post.postprocess_nodes([NodeWithScore(node=node)], query_str="설치 간격")[
        0].node.metadata[CRITERION_SPANS_KEY]
    assert spans and all(s["parts"]["vector"] == 0.0 for s in spans)


def test_validation(embed: object) -> None:
    _, index = _tiny()
    with pytest.raises(ConfigurationError, match="SpanIndex"):
        CriterionSpanPostprocessor(span_index=[], embed_model=embed)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="BaseEmbedding"):
        CriterionSpanPostprocessor(span_index=index, embed_model=None)
    post = CriterionSpanPostprocessor(span_index=index, embed_model=embed)
    with pytest.raises(ConfigurationError, match="query_bundle"):
        post.postprocess_nodes([NodeWithScore(node=TextNode(text="x"))])
    assert post.postprocess_nodes([], query_str="x") == []


# ----------------------------------------------------------------------------- CAR
class _Counting(HashedBigramEmbedding):
    """Counts query embeddings (the one vector CAR should compute per query)."""

    calls: int = 0

    def _get_query_embedding(self, query: str) -> list[float]:
        self.calls += 1
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self.calls += 1
        return self._vec(query)


def _car(nodes: list, embed: object, **kwargs: object) -> CriterionAwareRetriever:
    return CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=embed, similarity_top_k=5, **kwargs
    )


def test_car_attaches_spans_by_default_with_one_query_vector(demo_nodes: list) -> None:
    embed = _Counting()
    car = _car(demo_nodes, embed)
    assert car.criterion_spans == 3 and car.span_index is not None
    embed.calls = 0
    hits = car.retrieve("비상주차대 설치 간격")
    assert embed.calls == 1  # dense channel, span re-ranking and criterion spans share it
    assert len(hits) == 5
    vector = embed._vec("비상주차대 설치 간격")
    post = CriterionSpanPostprocessor(span_index=car.span_index, embed_model=embed,
                                      tokenizer=car.lexical_retriever.tokenizer)
    # the spans CAR attached are what the postprocessor gives for the same query vector
    plain = [NodeWithScore(node=h.node.model_copy(), score=h.score) for h in hits]
    again = post.postprocess_nodes(
        plain, query_bundle=QueryBundle("비상주차대 설치 간격", embedding=vector))
    for h, a in zip(hits, again, strict=True):
        spans = h.node.metadata[CRITERION_SPANS_KEY]
        assert 1 <= len(spans) <= 3
        assert spans == a.node.metadata[CRITERION_SPANS_KEY]


async def test_car_async_attaches_the_same_spans(demo_nodes: list) -> None:
    embed = _Counting()
    car = _car(demo_nodes, embed, criterion_spans=2)
    sync = car.retrieve("하이패스 차로 폭")
    embed.calls = 0
    hits = await car.aretrieve("하이패스 차로 폭")
    assert embed.calls == 1
    assert [h.node.node_id for h in hits] == [h.node.node_id for h in sync]
    for a, s in zip(hits, sync, strict=True):
        assert a.node.metadata[CRITERION_SPANS_KEY] == s.node.metadata[CRITERION_SPANS_KEY]
        assert len(a.node.metadata[CRITERION_SPANS_KEY]) <= 2


def test_car_without_span_index_attaches_nothing(demo_nodes: list, embed: object) -> None:
    car = _car(demo_nodes, embed, spans=False)
    assert car.criterion_spans == 0
    assert all(CRITERION_SPANS_KEY not in h.node.metadata for h in car.retrieve("졸음쉼터"))
    with pytest.raises(ConfigurationError, match="criterion_spans"):
        _car(demo_nodes, embed, spans=False, criterion_spans=3)
    off = _car(demo_nodes, embed, criterion_spans=0)
    assert all(CRITERION_SPANS_KEY not in h.node.metadata for h in off.retrieve("졸음쉼터"))


def test_span_cosines_equal_numpy(demo_nodes: list, embed: object) -> None:
    index = SpanIndex.from_nodes(demo_nodes[:5], embed)
    q = np.asarray(embed.get_query_embedding("설치 기준"), dtype=np.float64)
    ids = [n.node_id for n in demo_nodes[:5]] + ["missing"]
    got = index.span_cosines(q, ids)
    assert got[-1] is None
    for node, cos in zip(demo_nodes[:5], got[:-1], strict=True):
        want = [
            float(np.dot(v := np.asarray(embed.get_text_embedding(s.text)), q)
                  / (np.linalg.norm(v) * np.linalg.norm(q)))
            for s in node_spans(node)
        ]
        assert cos is not None and np.allclose(cos, want, atol=2e-3)


def test_cached_nodes_give_the_fresh_result_and_never_a_stale_one(
    demo_nodes: list, embed: object
) -> None:
    index = SpanIndex.from_nodes(demo_nodes, embed)
    hits = [NodeWithScore(node=n, score=1.0) for n in demo_nodes[:6]]
    warm = CriterionSpanPostprocessor(span_index=index, embed_model=embed)
    first = warm.postprocess_nodes(hits, query_str="설치 기준 간격")
    again = warm.postprocess_nodes(hits, query_str="설치 기준 간격")
    fresh = CriterionSpanPostprocessor(span_index=index, embed_model=embed).postprocess_nodes(
        hits, query_str="설치 기준 간격")
    for a, b, c in zip(first, again, fresh, strict=True):
        assert a.node.metadata[CRITERION_SPANS_KEY] == b.node.metadata[CRITERION_SPANS_KEY]
        assert a.node.metadata[CRITERION_SPANS_KEY] == c.node.metadata[CRITERION_SPANS_KEY]
    # the same id with another text (an update): cut again, offsets into the new text
    node = demo_nodes[0]
    changed = node.model_copy(update={"text": "## 새 절\n\n" + "교체된 문장은 폭 2.5m 이상으로 한다. " * 3})
    other = warm.postprocess_nodes([NodeWithScore(node=changed)], query_str="폭 2.5m")
    for s in other[0].node.metadata[CRITERION_SPANS_KEY]:
        assert _ws(changed.get_content()[s["start"]:s["end"]]).startswith(s["text"])
        assert "교체된" in s["text"] and s["parts"]["vector"] == 0.0  # not the old vectors


def test_car_persist_keeps_criterion_spans(
    demo_nodes: list, embed: object, tmp_path: Path
) -> None:
    car = _car(demo_nodes, embed, criterion_spans=2)
    from llama_index_car.indices import CriterionAwareIndex

    car.index.persist(tmp_path / "car")
    loaded = CriterionAwareIndex.load(tmp_path / "car", vector_index=car.index.vector_index)
    again = loaded.as_retriever("car", criterion_spans=2, similarity_top_k=car.similarity_top_k,
                                pool_top_k=car.pool_top_k)
    assert again.criterion_spans == 2 and again.span_index is not None
    want = car.retrieve("하이패스 차로 폭")
    got = again.retrieve("하이패스 차로 폭")
    assert [h.node.metadata[CRITERION_SPANS_KEY] for h in got] == [
        h.node.metadata[CRITERION_SPANS_KEY] for h in want
    ]


def test_an_llm_hypothesis_joins_the_lexical_part(demo_nodes: list, embed: object) -> None:
    """With a hypothesizer the hypothesis's criterion terms join the query's tokens: a query
    sharing no word with the node still gets a lexical part from them."""
    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

    class Fixed(BaseCriterionHypothesizer):
        def hypothesize(self, query: str) -> CriterionHypothesis:
            return CriterionHypothesis(text="비상주차대 설치 간격 750m", criteria=("비상주차대", "750m"),
                                       source="test")

    index = SpanIndex.from_nodes(demo_nodes, embed)
    car = _car(demo_nodes, embed, hypothesizer=Fixed(), span_index=index)
    assert car.criterion_spans == 3 and not hasattr(car, "span_weight")  # no span ranking
    hits = car.retrieve("qqq zzz")  # no Korean word: only the hypothesis can match
    assert hits[0].node.metadata["car_explain"]["hypothesis_source"] == "test"
    assert all("span" not in h.node.metadata["car_explain"] for h in hits)  # attached only
    tunnel = next(h for h in hits if "750m" in h.node.get_content())
    spans = tunnel.node.metadata[CRITERION_SPANS_KEY]
    assert max(s["parts"]["lexical"] for s in spans) == 1.0
    assert any("750m" in s["text"] for s in spans)
