"""Nodes any vector store accepts: scalar metadata, cells as one JSON string that decodes back
to ``load_tables`` cells, stable UUID ids, ``id_func``, clean titles, size and linearity."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import BaseNode, Document, NodeRelationship, TextNode
from llama_index.readers.hwpx import (
    STRUCTURE_KEY,
    HWPXCell,
    HWPXError,
    HWPXNodeParser,
    HWPXReader,
    NodeCell,
    clean_title,
    node_cells,
    stable_node_id,
)
from llama_index.readers.hwpx._node_meta import NODE_ID_NAMESPACE, encode_cells
from llama_index.readers.hwpx.writer import HWPXBuilder

Write = Callable[..., Path]
SCALAR = (str, int, float, type(None))


# ----------------------------------------------------------------------------- helpers
def _read(write: Write, build: Callable[[HWPXBuilder], None], name: str = "doc.hwpx") -> list[Document]:
    b = HWPXBuilder()
    build(b)
    return HWPXReader().load_data(write(b, name))


def _assert_storable(node: BaseNode) -> None:
    """What Chroma/Qdrant/Milvus/pgvector accept: scalar metadata, no structure anywhere."""
    for key, value in node.metadata.items():
        assert isinstance(value, SCALAR), (node.node_id, key, type(value))
    assert STRUCTURE_KEY not in node.metadata
    for rel in node.relationships.values():
        infos = rel if isinstance(rel, list) else [rel]
        for info in infos:
            assert STRUCTURE_KEY not in info.metadata
            assert all(isinstance(v, SCALAR) for v in info.metadata.values())
    uuid.UUID(node.node_id)  # Qdrant / Milvus point ids


def _cell_key(c: NodeCell) -> tuple[object, ...]:
    return (c.table, c.row, c.col, c.row_span, c.col_span, c.text, c.depth, c.parent)


def _grid(rows: int) -> list[list[str]]:
    return [["구분", "기준"]] + [[f"설비{i}", f"{i}.5 m 이하"] for i in range(rows)]


# ----------------------------------------------------------------------------- format
def test_cells_are_one_json_string_that_decodes_to_coordinates_and_text(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section().heading("설치기준", 1)
        s.table([["구분", "기준"], ["옥내", "2.5 m"]], spans={(0, 0): (1, 2)})

    docs = _read(write, build)
    (node,) = HWPXNodeParser().get_nodes_from_documents(docs)
    _assert_storable(node)
    raw = node.metadata["cells"]
    assert isinstance(raw, str) and json.loads(raw)["v"] == 1
    assert node.metadata["table_index"] == 0 and json.loads(node.metadata["table_ids"]) == [0]
    (table,) = HWPXReader().load_tables(Path(docs[0].metadata["file_path"]))
    cells = node_cells(node)
    assert [c.to_cell() for c in cells] == table.cells  # HWPXCell equality, text included
    assert node_cells(node.metadata) == cells  # metadata mapping works too
    assert cells[0] == NodeCell(0, 0, 0, 1, 2, table.cells[0].text, 0, None)
    assert cells[0].to_dict()["col_span"] == 2
    for key in ("cells", "table_ids", "table_index"):
        assert key in node.excluded_embed_metadata_keys and key in node.excluded_llm_metadata_keys


def test_node_cells_reads_the_legacy_list_and_rejects_garbage() -> None:
    assert node_cells({"cells": [[2, 1, 0, 1, 3]]}) == [NodeCell(2, 1, 0, 1, 3)]
    assert node_cells({}) == [] and node_cells(TextNode(text="x")) == []
    meta = {"cells": encode_cells([(1, 1, (0, 2, 3), [(0, 0, 1, 1, "내부")])])}
    assert node_cells(meta) == [NodeCell(1, 0, 0, 1, 1, "내부", 1, (0, 2, 3))]
    with pytest.raises(ValueError, match="cells"):
        node_cells({"cells": '{"v": 99}'})
    with pytest.raises(ValueError, match="cells"):
        node_cells({"cells": "not json"})
    with pytest.raises(TypeError):
        node_cells(42)


def test_nested_table_cells_carry_depth_and_parent(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section().heading("중첩 표", 1)
        s.table([["바깥", "셀"], ["둘째", "셋째"]], nested={(1, 1): [["안", "쪽"]]})

    docs = _read(write, build)
    tables = HWPXReader().load_tables(Path(docs[0].metadata["file_path"]))
    inner = next(t for t in tables if t.depth == 1)
    assert inner.parent is not None
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    got = [c for n in nodes for c in node_cells(n) if c.table == inner.index]
    assert got and all(
        c.depth == 1 and c.parent == (inner.parent.table_index, 1, 1) for c in got
    )
    assert [c.to_cell() for c in got] == inner.cells


# ----------------------------------------------------------------------------- ids
def test_default_ids_are_uuid5_of_document_id_and_chunk_index(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        for i in range(3):
            s.heading(f"{i + 1}장", 1).paragraph(f"본문 {i}")

    docs = _read(write, build)
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    doc_id = docs[0].id_
    assert [n.node_id for n in nodes] == [
        str(uuid.uuid5(NODE_ID_NAMESPACE, f"{doc_id}#chunk{k}")) for k in range(3)
    ]
    assert NODE_ID_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "llama-index-readers-hwpx/node")
    assert [n.node_id for n in nodes] == [stable_node_id(doc_id, k) for k in range(3)]
    assert [n.metadata["chunk_index"] for n in nodes] == [0, 1, 2]
    # a fresh reader and parser give the same ids; id_func=None means the default
    again = HWPXNodeParser(id_func=None).get_nodes_from_documents(
        HWPXReader().load_data(docs[0].metadata["file_path"])
    )
    assert [n.node_id for n in again] == [n.node_id for n in nodes]
    with pytest.raises(ValueError):
        stable_node_id(doc_id, -1)


def test_id_func_is_honoured_in_ids_and_links(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        for i in range(3):
            s.heading(f"{i + 1}장", 1).paragraph(f"본문 {i}")

    docs = _read(write, build)
    calls: list[tuple[int, str]] = []

    def name(i: int, doc: BaseNode) -> str:
        calls.append((i, doc.node_id))
        return f"{Path(doc.metadata['file_name']).stem}-{i:04d}"

    nodes = HWPXNodeParser(id_func=name).get_nodes_from_documents(docs)
    assert [n.node_id for n in nodes] == ["doc-0000", "doc-0001", "doc-0002"]
    assert calls == [(0, docs[0].id_), (1, docs[0].id_), (2, docs[0].id_)]
    assert nodes[1].relationships[NodeRelationship.PREVIOUS].node_id == "doc-0000"
    assert nodes[1].relationships[NodeRelationship.NEXT].node_id == "doc-0002"
    assert nodes[0].ref_doc_id == docs[0].id_
    # the standard IngestionPipeline (it hashes the transformation) accepts it too
    piped = IngestionPipeline(transformations=[HWPXNodeParser(id_func=name)]).run(documents=docs)
    assert [n.node_id for n in piped] == ["doc-0000", "doc-0001", "doc-0002"]
    with pytest.raises(TypeError, match="id_func"):
        HWPXNodeParser(id_func=lambda i, d: i).get_nodes_from_documents(docs)


def test_links_carry_no_metadata_copies(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        for i in range(3):
            s.heading(f"{i + 1}장", 1).table(_grid(3))

    docs = _read(write, build)
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    mid = nodes[1]
    assert mid.relationships[NodeRelationship.PREVIOUS].metadata == {}
    assert mid.relationships[NodeRelationship.NEXT].metadata == {}
    assert mid.relationships[NodeRelationship.PREVIOUS].hash == nodes[0].hash
    src = mid.relationships[NodeRelationship.SOURCE]
    assert src.node_id == docs[0].id_ and src.hash == docs[0].hash
    assert src.metadata == {k: v for k, v in docs[0].metadata.items() if k != STRUCTURE_KEY}
    for n in nodes:
        _assert_storable(n)


# ----------------------------------------------------------------------------- titles, spans
def test_section_titles_lose_private_use_glyphs_and_stray_spaces() -> None:
    assert clean_title("\uf06c 기구 및 조직 \u200b ") == "기구 및 조직"
    assert clean_title("\U000f0041제1장  총칙") == "제1장 총칙"
    structure = {
        "version": 1,
        "blocks": [
            {"type": "heading", "kind": "circled", "level": 1, "text": "\uf06c 추진 배경 ",
             "section": 0, "path": ["\uf06c 추진 배경 "]},
            {"type": "paragraph", "text": "본문", "section": 0, "location": "body"},
        ],
    }
    doc = Document(
        text="# \uf06c 추진 배경 \n\n본문",
        metadata={"title": " \ue000보고서 ", STRUCTURE_KEY: json.dumps(structure)},
    )
    (node,) = HWPXNodeParser().get_nodes_from_documents([doc])
    assert node.metadata["section_title"] == "추진 배경"
    assert node.metadata["heading_path"] == "추진 배경"
    assert node.metadata["title"] == "보고서"
    assert node.get_content() == "## 추진 배경\n\n본문"


def test_char_spans_point_into_the_document_text(write: Write) -> None:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section().heading("1장", 1).paragraph("첫째 본문").table(_grid(2))
        s.heading("2장", 1).paragraph("둘째 본문")

    docs = _read(write, build)
    text = docs[0].text
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    assert len(nodes) == 2
    for n in nodes:
        assert isinstance(n, TextNode) and n.start_char_idx is not None
        span = text[n.start_char_idx : n.end_char_idx]
        body = n.get_content().split("\n\n", 1)[1]  # without the "## title" line
        assert span == body


# ----------------------------------------------------------------------------- size, linearity
def _long_doc(write: Write, n_sections: int, name: str) -> list[Document]:
    def build(b: HWPXBuilder) -> None:
        s = b.add_section()
        for i in range(n_sections):
            s.heading(f"{i + 1}. 기준", 1).paragraph(f"제{i}항 배관은 {i}.5 m 이하로 지지한다.")
            s.table(_grid(4))

    return _read(write, build, name)


def test_a_node_does_not_grow_with_its_document(write: Write) -> None:
    small = HWPXNodeParser().get_nodes_from_documents(_long_doc(write, 3, "s.hwpx"))
    big = HWPXNodeParser().get_nodes_from_documents(_long_doc(write, 60, "b.hwpx"))
    size_small = len(small[1].to_json())
    size_big = len(big[1].to_json())
    assert small[1].get_content() == big[1].get_content()
    # only counts in the SOURCE metadata (table_count) and the hashes may differ
    assert abs(size_big - size_small) <= 16
    total_json = sum(len(n.to_json().encode()) for n in big)
    total_text = sum(len(n.get_content().encode()) for n in big)
    assert total_json <= 8 * total_text + 4096 * len(big)


def test_source_document_hashed_once_not_per_node(write: Write) -> None:
    docs = _long_doc(write, 30, "h.hwpx")

    class CountingDocument(Document):
        """A Document that counts how often its hash (text + all metadata) is computed."""

        @property
        def hash(self) -> str:
            hashes.append(1)
            return super().hash

    hashes: list[int] = []
    doc = CountingDocument(
        id_=docs[0].id_, text=docs[0].text, metadata=dict(docs[0].metadata),
        excluded_embed_metadata_keys=docs[0].excluded_embed_metadata_keys,
        excluded_llm_metadata_keys=docs[0].excluded_llm_metadata_keys,
    )
    nodes = HWPXNodeParser().get_nodes_from_documents([doc])
    assert len(nodes) == 30 and len(hashes) == 1


def test_declared_grid_without_cells_costs_nothing() -> None:
    """An empty table declaring 10^9 rows (issue 13 #1) neither allocates nor slows down."""
    table = {"index": 0, "n_rows": 1_000_000_000, "n_cols": 1, "depth": 0, "section": 0,
             "caption": None, "parent": None, "cells": []}
    structure = {"version": 1, "blocks": [
        {"type": "paragraph", "text": "본문", "section": 0, "location": "body"},
        {"type": "table", "index": 0, "section": 0, "table": table},
    ]}
    doc = Document(text="본문", metadata={"title": "t", STRUCTURE_KEY: json.dumps(structure)})
    t0 = time.perf_counter()
    (node,) = HWPXNodeParser(chunk_size=64, chunk_overlap=0).get_nodes_from_documents([doc])
    assert time.perf_counter() - t0 < 5
    assert node_cells(node) == [] and node.metadata["table_index"] == 0


# ----------------------------------------------------------------------------- shared corpus
def _corpus_files(corpus_dir: Path) -> list[Path]:
    return sorted(p for p in corpus_dir.rglob("*.hwpx") if p.is_file())


@pytest.mark.corpus
def test_corpus_nodes_round_trip_cells_and_are_storable(corpus_dir: Path) -> None:
    reader, parser = HWPXReader(), HWPXNodeParser()
    ids: list[str] = []
    checked = 0
    for path in _corpus_files(corpus_dir):
        try:
            docs = reader.load_data(path)
        except HWPXError:
            continue  # the bad/ cases
        nodes = parser.get_nodes_from_documents(docs)
        for n in nodes:
            _assert_storable(n)
        ids += [n.node_id for n in nodes]
        got: dict[int, set[tuple[object, ...]]] = {}
        for n in nodes:
            for c in node_cells(n):
                got.setdefault(c.table, set()).add(_cell_key(c))
        # tables the text shows as tables (not boxed titles, not page headers)
        shown = {
            b["index"]
            for d in docs
            for b in json.loads(d.metadata[STRUCTURE_KEY])["blocks"]
            if b["type"] == "table" and "heading" not in b
        }
        assert set(got) == shown, path.name
        for t in reader.load_tables(path):
            if t.index not in shown:
                continue
            parent = None if t.parent is None else (
                t.parent.table_index, t.parent.cell.row, t.parent.cell.col
            )
            expected = {
                _cell_key(NodeCell(t.index, c.row, c.col, c.row_span, c.col_span, c.text,
                                   t.depth, parent))
                for c in t.cells
            }
            assert got[t.index] == expected, (path.name, t.index)
            checked += 1
    assert checked > 0 and ids
    assert len(set(ids)) == len(ids)  # unique over the corpus


@pytest.mark.corpus
def test_corpus_ids_are_stable_across_runs_and_nodes_stay_small(corpus_dir: Path) -> None:
    files = [p for p in _corpus_files(corpus_dir) if "bad" not in p.parts]
    runs = []
    for _ in range(2):
        docs = HWPXReader().load_data(files)
        runs.append(HWPXNodeParser().get_nodes_from_documents(docs))
    assert [n.node_id for n in runs[0]] == [n.node_id for n in runs[1]]
    assert [n.hash for n in runs[0]] == [n.hash for n in runs[1]]
    total_json = sum(len(n.to_json().encode()) for n in runs[0])
    total_text = sum(len(n.get_content().encode()) for n in runs[0])
    # before: 225 bytes of node JSON per text byte (the structure copies); now ~4.3
    assert total_json <= 6 * total_text, (total_json, total_text)
    cells = [HWPXCell(c.row, c.col, c.row_span, c.col_span, c.text)
             for n in runs[0] for c in node_cells(n)]
    assert cells
