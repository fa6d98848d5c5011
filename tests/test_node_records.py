"""Issue 39, phase 2 (b): a folder's nodes are a record set (``nodes.*``) read when used.

Hostile folders: the record files truncated, offsets out of range, a record that is not JSON,
not a node, or a node of another id, a record set of another size — each with the
generation's manifest bound again (as whoever controls the folder can), both under the
default verification (a small folder: tables checked whole at load) and with the hashing
threshold at 0 (a large folder: checks at each read). Every case is an
:class:`IndexPersistError` naming the file, never another exception or a wrong node.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from llama_index_car import _persist
from llama_index_car._errors import IndexPersistError
from llama_index_car._records import RecordFile, write_records
from tests.fakes.embeddings import HashedBigramEmbedding
from tests.fakes.folders import tunnel_folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tunnel_folder(tmp_path_factory, "records")


def _hits(folder: Path) -> dict[str, list[tuple[str, str]]]:
    from llama_index_car.folder import load_index

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = load_index(folder, embed_model=HashedBigramEmbedding())
        return {kind: [(h.node.node_id, h.node.get_content()[:40])
                       for h in index.as_retriever(kind).retrieve("터널 조명 기준")]
                for kind in ("bm25", "dense", "hybrid", "car")}


def _records(gen: Path) -> list[tuple[str, bytes]]:
    rf = RecordFile.open(gen, "nodes")
    return [(rf.key(i), rf.payload(i)) for i in range(len(rf))]


def _rewrite(gen: Path, items: list[tuple[str, bytes]]) -> None:
    for p in gen.glob("nodes.*"):
        p.unlink()
    write_records(gen, "nodes", items)


def _truncate_blob(gen: Path) -> None:
    blob = gen / "nodes.blob"
    blob.write_bytes(blob.read_bytes()[:-100])


def _offsets_out_of_range(gen: Path) -> None:
    path = gen / "nodes.offsets.npy"
    arr = np.load(path)
    arr[len(arr) // 2] = arr[-1] + 10_000
    np.save(path, arr)


def _bad_json(gen: Path) -> None:
    _rewrite(gen, [(k, b"{not json") for k, _ in _records(gen)])


def _not_a_node(gen: Path) -> None:
    _rewrite(gen, [(k, json.dumps({"h": "0" * 64, "n": {"x": 1}}).encode())
                   for k, _ in _records(gen)])


def _another_id(gen: Path) -> None:
    items = _records(gen)
    payloads = [p for _, p in items]
    _rewrite(gen, [(k, p) for (k, _), p in zip(items, payloads[1:] + payloads[:1], strict=True)])


def _one_record_less(gen: Path) -> None:
    _rewrite(gen, _records(gen)[:-1])


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated blob": (_truncate_blob, "nodes.blob"),
    "offsets out of range": (_offsets_out_of_range, "nodes"),
    "bad JSON inside a record": (_bad_json, "nodes.blob"),
    "a record that is not a node": (_not_a_node, "nodes.blob"),
    "a record of another id": (_another_id, "nodes.blob"),
    "one record less": (_one_record_less, "nodes"),
}


@pytest.mark.parametrize("threshold", ["default", "zero"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_node_records_are_named(
    base: Path, tmp_path: Path, case: str, threshold: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if threshold == "zero":  # a folder above the hashing threshold: checked at each read
        from llama_index_car import _bm25_storage

        monkeypatch.setattr(_bm25_storage, "AUTO_VERIFY_BYTES", 0)
    folder = tmp_path / "case"
    shutil.copytree(base, folder)
    gen = _persist.live_dir(folder)
    damage, name = CASES[case]
    damage(gen)
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    with pytest.raises(IndexPersistError, match=name):
        _hits(folder)


def test_the_nodes_are_read_when_used_not_at_load(base: Path) -> None:
    """A loaded folder holds a table over the record files, not parsed nodes; a query parses
    only the nodes it returns, whose text is the record's."""
    from llama_index_car.folder import load_index
    from llama_index_car.indices._node_records import NodeTable

    index = load_index(base, embed_model=HashedBigramEmbedding())
    lex = index.snapshot.lexical
    assert isinstance(lex.nodes, NodeTable)
    assert not lex.nodes._cache  # nothing parsed by the load
    items = _records(_persist.live_dir(base))
    assert [lex.node_id(i) for i in range(len(items))] == [k for k, _ in items]
    got = index.as_retriever("bm25", similarity_top_k=3).retrieve("터널 조명 기준")
    assert got and 0 < len(lex.nodes._cache) <= 3
    for h in got:
        stored = json.loads(dict(items)[h.node.node_id])["n"]
        assert h.node.get_content() == stored["__data__"]["text"]


def test_a_filter_on_a_loaded_folder_reads_metadata_once_and_means_the_same(base: Path) -> None:
    """A filtered BM25 query on a loaded folder returns the unfiltered ranking restricted to
    the nodes whose metadata matches (the oracle), without parsing the nodes it does not
    return; the mask is kept for the state (a second view reuses it)."""
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

    from llama_index_car.folder import load_index

    index = load_index(base, embed_model=HashedBigramEmbedding())
    lex = index.snapshot.lexical
    titles = sorted({lex.nodes.metadata(i).get("section_title") for i in range(len(lex.nodes))}
                    - {None})
    assert len(titles) > 1
    want_title = titles[len(titles) // 2]
    only = MetadataFilters(filters=[MetadataFilter(key="section_title", value=want_title)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = index.as_retriever("bm25", similarity_top_k=len(lex.nodes)).retrieve("터널 기준")
        lex.nodes._cache.clear()
        got = index.as_retriever("bm25", similarity_top_k=5, filters=only).retrieve("터널 기준")
    oracle = [(h.node.node_id, h.score) for h in full
              if h.node.metadata.get("section_title") == want_title][:5]
    assert got and [(h.node.node_id, h.score) for h in got] == oracle
    assert len(lex.nodes._cache) == len(got)  # only the hits were parsed
    mask = lex.mask(only)
    assert mask is lex.mask(only) and int(mask.sum()) == sum(
        lex.nodes.metadata(i).get("section_title") == want_title for i in range(len(lex.nodes)))


def _span_records(gen: Path) -> list[tuple[str, bytes]]:
    rf = RecordFile.open(gen, "spans")
    return [(rf.key(i), rf.payload(i)) for i in range(len(rf))]


def _rewrite_spans(gen: Path, items: list[tuple[str, bytes]]) -> None:
    for p in gen.glob("spans.*"):
        if not p.name.startswith(("spans.rows", "spans.vectors")):
            p.unlink()
    write_records(gen, "spans", items)


def _spans_truncated(gen: Path) -> None:
    blob = gen / "spans.blob"
    blob.write_bytes(blob.read_bytes()[:-100])


def _spans_bad_json(gen: Path) -> None:
    _rewrite_spans(gen, [(k, b"[{") for k, _ in _span_records(gen)])


def _spans_one_short(gen: Path) -> None:
    _rewrite_spans(gen, [(k, json.dumps(json.loads(p)[:-1]).encode())
                         for k, p in _span_records(gen)])


def _spans_not_finite(gen: Path) -> None:
    path = gen / "spans.vectors.npy"
    arr = np.load(path)
    arr[:] = np.nan
    np.save(path, arr)


def _spans_of_one_node_less(gen: Path) -> None:
    _rewrite_spans(gen, _span_records(gen)[:-1])


SPAN_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated blob": (_spans_truncated, "spans.blob"),
    "bad JSON inside a record": (_spans_bad_json, "spans.blob"),
    "a record one span short": (_spans_one_short, "spans.blob"),
    "non-finite vectors": (_spans_not_finite, "span"),
    "one node less": (_spans_of_one_node_less, "spans"),
}


@pytest.mark.parametrize("threshold", ["default", "zero"])
@pytest.mark.parametrize("case", sorted(SPAN_CASES))
def test_hostile_span_records_are_named(
    base: Path, tmp_path: Path, case: str, threshold: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if threshold == "zero":
        from llama_index_car import _bm25_storage

        monkeypatch.setattr(_bm25_storage, "AUTO_VERIFY_BYTES", 0)
    folder = tmp_path / "case"
    shutil.copytree(base, folder)
    gen = _persist.live_dir(folder)
    damage, name = SPAN_CASES[case]
    damage(gen)
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    with pytest.raises(IndexPersistError, match=name):
        _hits(folder)


def test_the_spans_are_read_when_used_not_at_load(base: Path) -> None:
    """A loaded folder's span index maps its files: no span record is parsed by the load, a
    CAR query parses the records of its pool's nodes only, and the spans read are the ones
    stored (the oracle: the record payloads)."""
    from llama_index_car.folder import load_index

    index = load_index(base, embed_model=HashedBigramEmbedding())
    spans = index.spans
    assert spans is not None and not spans._spans._cache
    stored = dict(_span_records(_persist.live_dir(base)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index.as_retriever("car", similarity_top_k=3, pool_top_k=5).retrieve("터널 조명 기준은?")
    assert 0 < len(spans._spans._cache) <= 5  # the pool's nodes
    for node_id in list(stored)[:5]:
        assert [s.to_dict() for s in spans.spans_of(node_id)] == json.loads(stored[node_id])
