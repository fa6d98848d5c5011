"""HWPXNodeParser: section nodes, token limits, table splitting, pipeline integration."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import tiktoken
from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import Document, MetadataMode, TextNode
from llama_index.readers.hwpx import (
    STRUCTURE_KEY,
    HWPXNodeParser,
    HWPXReader,
    node_cells,
)
from llama_index.readers.hwpx.node_parser import row_groups
from llama_index.readers.hwpx.writer import HWPXBuilder

Write = Callable[..., Path]


def _tokens(text: str) -> int:
    # independent count: tiktoken directly (llama-index-core bundles the cl100k cache)
    from llama_index.core.utils import get_tokenizer

    get_tokenizer()  # points TIKTOKEN_CACHE_DIR at the bundled cache
    return len(tiktoken.get_encoding("cl100k_base").encode(text))


def _doc(write: Write, build: Callable[[HWPXBuilder], None], **kw: object) -> list[Document]:
    b = HWPXBuilder()
    build(b)
    return HWPXReader(**kw).load_data(write(b))  # type: ignore[arg-type]


def test_section_nodes_have_paper_form_and_metadata(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        s.paragraph("Ⅰ. 총칙").paragraph("1. 목적").paragraph("이 기준은 설치기준을 정한다.")
        s.paragraph("2. 적용범위").paragraph("모든 건축물에 적용한다.")

    docs = _doc(write, build)
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    assert [n.get_content() for n in nodes] == [
        "## 1. 목적\n\n이 기준은 설치기준을 정한다.",
        "## 2. 적용범위\n\n모든 건축물에 적용한다.",
    ]
    assert [n.metadata["section_title"] for n in nodes] == ["1. 목적", "2. 적용범위"]
    assert nodes[0].metadata["heading_path"] == "Ⅰ. 총칙 > 1. 목적"
    for n in nodes:
        assert STRUCTURE_KEY not in n.metadata
        assert n.metadata["file_name"] == "doc.hwpx"
        assert n.ref_doc_id == docs[0].id_
        assert "table_index" not in n.metadata
        embed = n.get_content(metadata_mode=MetadataMode.EMBED)
        assert STRUCTURE_KEY not in embed and "cells" not in embed


def test_split_level_keeps_deeper_headings_in_the_body(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        s.heading("총칙", 1).heading("목적", 2).paragraph("본문 하나").heading("범위", 2)
        s.paragraph("본문 둘")

    nodes = HWPXNodeParser(split_level=1).get_nodes_from_documents(_doc(write, build))
    assert [n.get_content() for n in nodes] == [
        "## 총칙\n\n## 목적\n\n본문 하나\n\n## 범위\n\n본문 둘"
    ]


def test_chunks_respect_token_budget_and_overlap(write: Write) -> None:
    sentences = [f"제{i}항 소화설비의 배관은 {i}.5 m 이하의 간격으로 지지하여야 한다." for i in range(60)]

    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        s.heading("배관 기준", 1)
        for text in sentences:
            s.paragraph(text)

    parser = HWPXNodeParser(chunk_size=120, chunk_overlap=40)
    nodes = parser.get_nodes_from_documents(_doc(write, build))
    assert len(nodes) > 5
    for n in nodes:
        assert _tokens(n.get_content()) <= 120
        assert n.get_content().startswith("## 배관 기준\n\n")
    bodies = [n.get_content().removeprefix("## 배관 기준\n\n").split("\n\n") for n in nodes]
    # every paragraph appears, whole, in order; consecutive chunks share a tail paragraph
    seen = [p for body in bodies for p in body]
    assert [p for p in dict.fromkeys(seen)] == sentences
    for prev, nxt in zip(bodies, bodies[1:], strict=False):
        assert nxt[0] == prev[-1]
        assert _tokens(prev[-1]) + 1 <= 40


def test_long_table_split_between_rows_with_header_repeated(write: Write) -> None:
    header = ["구분", "설치기준", "비고"]
    rows = [header] + [[f"설비{i}", f"{i}.5 m 이하로 설치할 것", f"참고{i}"] for i in range(40)]

    def build(b: HWPXBuilder) -> None:
        b.add_section().heading("설치기준표", 1).table(rows, caption="표 1 기준")

    parser = HWPXNodeParser(chunk_size=150, chunk_overlap=20)
    nodes = parser.get_nodes_from_documents(_doc(write, build))
    assert len(nodes) > 3
    got_rows: list[int] = []
    for n in nodes:
        text = n.get_content()
        assert _tokens(text) <= 150
        assert "표 1 기준\n\n| 구분 | 설치기준 | 비고 |\n|---|---|---|" in text
        lines = [ln for ln in text.split("\n") if ln.startswith("| 설비")]
        got_rows += [int(re.match(r"\| 설비(\d+) \|", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
        assert n.metadata["table_index"] == 0
        cells = node_cells(n)
        table_rows = sorted({c.row for c in cells})
        assert table_rows[0] == 0  # header row's cells are listed too
        assert [r - 1 for r in table_rows[1:]] == [int(x) for x in re.findall(r"\| 설비(\d+) \|", text)]
        assert "cells" in n.excluded_embed_metadata_keys and "cells" in n.excluded_llm_metadata_keys
    assert got_rows == list(range(40))  # each row exactly once, whole, in order


def test_rows_tied_by_a_row_span_stay_together(write: Write) -> None:
    rows = [["h1", "h2"]] + [[f"그룹{i // 3}", f"값{i}"] for i in range(30)]
    spans = {(1 + 3 * g, 0): (3, 1) for g in range(10)}

    def build(b: HWPXBuilder) -> None:
        b.add_section().table(rows, spans=spans)

    docs = _doc(write, build)
    table = HWPXReader().load_tables(Path(docs[0].metadata["file_path"]))[0]
    assert row_groups(table) == [[0]] + [[1 + 3 * g, 2 + 3 * g, 3 + 3 * g] for g in range(10)]
    nodes = HWPXNodeParser(chunk_size=120, chunk_overlap=0).get_nodes_from_documents(docs)
    assert len(nodes) > 2
    for n in nodes:
        body_rows = sorted({c.row for c in node_cells(n)} - {0})
        assert len(body_rows) % 3 == 0 and body_rows[0] % 3 == 1
        assert '<td rowspan="3">' in n.get_content()


def test_plain_documents_fall_back_to_paragraphs() -> None:
    doc = Document(text="첫 문단\n\n둘째 문단", metadata={"title": "제목"})
    nodes = HWPXNodeParser().get_nodes_from_documents([doc])
    assert [n.get_content() for n in nodes] == ["## 제목\n\n첫 문단\n\n둘째 문단"]


def test_overlap_must_be_smaller_than_chunk(write: Write) -> None:
    with pytest.raises(ValueError, match="chunk_overlap"):
        HWPXNodeParser(chunk_size=100, chunk_overlap=100).get_nodes_from_documents(
            [Document(text="x")]
        )


def test_ingestion_pipeline_and_simple_directory_reader(tmp_path: Path) -> None:
    for name, title in (("a.hwpx", "1. 목적"), ("b.hwpx", "1. 범위")):
        b = HWPXBuilder()
        b.add_section().paragraph(title).paragraph("본문입니다").table([["가", "나"], ["1", "2"]])
        (tmp_path / name).write_bytes(b.to_bytes())
    (tmp_path / "c.hwpx").write_bytes(b"broken")
    sdr = SimpleDirectoryReader(str(tmp_path), file_extractor={".hwpx": HWPXReader()})
    docs = sdr.load_data()
    assert sorted(d.metadata["file_name"] for d in docs) == ["a.hwpx", "b.hwpx"]
    assert all(STRUCTURE_KEY in d.metadata and d.metadata["file_size"] > 0 for d in docs)
    pipeline = IngestionPipeline(transformations=[HWPXNodeParser(chunk_size=200)])
    nodes = pipeline.run(documents=docs)
    assert len(nodes) == 2
    for n in nodes:
        assert isinstance(n, TextNode)
        assert STRUCTURE_KEY not in n.metadata
        assert n.metadata["section_title"] in ("1. 목적", "1. 범위")
        assert n.metadata["table_index"] == 0
        assert isinstance(n.metadata["cells"], str)
        assert [(c.table, c.row, c.col, c.row_span, c.col_span, c.text) for c in node_cells(n)] == [
            (0, 0, 0, 1, 1, "가"), (0, 0, 1, 1, 1, "나"), (0, 1, 0, 1, 1, "1"), (0, 1, 1, 1, 1, "2")
        ]
        assert "| 가 | 나 |" in n.get_content()


def test_embedding_text_is_the_paper_form_and_llm_text_cites_the_source(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        b.add_section().paragraph("1. 설치기준").paragraph("배관은 2.5 m 이하로 한다.").table(
            [["구분", "기준"], ["옥내", "2.5 m"]]
        )

    docs = _doc(write, build)
    (node,) = HWPXNodeParser().get_nodes_from_documents(docs)
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == node.get_content()
    assert node.get_content().startswith("## 1. 설치기준\n\n배관은")
    llm = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "file_name: doc.hwpx" in llm and "section_title: 1. 설치기준" in llm
    assert "cells" not in llm and STRUCTURE_KEY not in llm and "table_index" not in llm
    assert docs[0].get_content(metadata_mode=MetadataMode.EMBED) == docs[0].text
