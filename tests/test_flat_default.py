"""Issue 39, phase 2 (a): the index's own vectors are a ``FlatVectorStore`` (exact cosine,
memory-mapped once persisted), kept in the snapshot; no ``SimpleVectorStore`` and no
``embeddings.npy``.

Oracle: a float64 brute-force cosine over every node's vector, ranked by score descending
then node id ascending, filtered by the node's metadata as the BM25 channel filters.
Vectors are clustered with exact and near duplicates, and node ids are in the reverse order
of the rows, so a ranking that breaks ties by row order or loses precision fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_car import CriterionAwareIndex, IndexPersistError, _persist
from llama_index_car.flat_store import FlatVectorStore
from tests.fakes.embeddings import HashedBigramEmbedding

DIM = 24
FILES = ("a.hwpx", "b.hwpx", "c.hwpx")


def _vectors(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(4, DIM))
    x = centers[rng.integers(0, 4, n)] + 0.05 * rng.normal(size=(n, DIM))
    dup = x[0::7][: len(x[1::7])]
    x[1::7][: len(dup)] = dup  # exact duplicates: ties broken by id
    near = x[3::11]
    x[2::11][: len(near)] = near + 1e-6 * rng.normal(size=near.shape)  # below int8 resolution
    return x.astype(np.float32)


def _nodes(n: int, seed: int = 0, prefix: str = "") -> list[TextNode]:
    vecs = _vectors(n, seed)
    return [TextNode(id_=f"{prefix}{n - i:04d}", text=f"기준 {prefix}{i}",
                     metadata={"file_name": FILES[i % 3]}, embedding=vecs[i].tolist())
            for i in range(n)]


def _oracle(nodes: list[TextNode], q: np.ndarray, k: int,
            file_name: str | None = None) -> list[tuple[str, float]]:
    keep = [n for n in nodes if file_name is None or n.metadata["file_name"] == file_name]
    m = np.asarray([n.embedding for n in keep], dtype=np.float32).astype(np.float64)
    qq = q.astype(np.float64)
    cos = (m @ qq) / (np.linalg.norm(m, axis=1) * np.linalg.norm(qq))
    ranked = sorted(zip([n.node_id for n in keep], cos.tolist(), strict=True),
                    key=lambda t: (-t[1], t[0]))
    return ranked[:k]


def _dense(index: CriterionAwareIndex, q: np.ndarray, k: int,
           file_name: str | None = None) -> list[tuple[str, float]]:
    filters = None if file_name is None else MetadataFilters(
        filters=[MetadataFilter(key="file_name", value=file_name)])
    view = index.as_retriever("dense", similarity_top_k=k, filters=filters)
    hits = view.retrieve(QueryBundle("기준", embedding=q.tolist()))
    return [(h.node.node_id, float(h.score or 0.0)) for h in hits]


def _same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    assert np.allclose([g[1] for g in got], [w[1] for w in want], rtol=0, atol=1e-9)


def _queries(seed: int = 9) -> list[np.ndarray]:
    base = _vectors(40, 0)
    rng = np.random.default_rng(seed)
    return [base[i] + 0.01 * rng.normal(size=DIM).astype(np.float32) for i in range(0, 40, 4)]


@pytest.fixture(scope="module")
def nodes() -> list[TextNode]:
    return _nodes(300)


def test_the_default_dense_channel_is_the_exact_flat_store(nodes: list[TextNode]) -> None:
    index = CriterionAwareIndex.from_defaults(nodes, embed_model=HashedBigramEmbedding())
    assert isinstance(index.vector_index.vector_store, FlatVectorStore)
    assert index.snapshot.dense is index.vector_index.vector_store.snapshot()
    for q in _queries():
        _same(_dense(index, q, 25), _oracle(nodes, q, 25))
        _same(_dense(index, q, 10, "b.hwpx"), _oracle(nodes, q, 10, "b.hwpx"))


def test_a_persisted_index_maps_its_vectors_and_updates_like_a_fresh_build(
    nodes: list[TextNode], tmp_path: Path
) -> None:
    index = CriterionAwareIndex.from_defaults(nodes, embed_model=HashedBigramEmbedding())
    index.persist(tmp_path / "idx")
    gen = _persist.live_dir(tmp_path / "idx")
    assert (gen / "flat" / "vectors.npy").is_file() and not list(gen.rglob("embeddings.npy"))
    loaded = CriterionAwareIndex.load(tmp_path / "idx", embed_model=HashedBigramEmbedding())
    state = loaded.snapshot.dense
    assert state is not None and all(seg.records is not None for seg in state.segments)
    qs = _queries()
    for q in qs:
        _same(_dense(loaded, q, 25), _oracle(nodes, q, 25))
    # a tenth inserted and a tenth deleted: equal to the oracle over the final nodes, before
    # and after persisting again
    added = _nodes(30, seed=5, prefix="new-")
    gone = [n.node_id for n in nodes[::10]]
    loaded.update(delete=gone, insert=added)
    final = [n for n in nodes if n.node_id not in set(gone)] + added
    assert loaded.vector_index.vector_store.snapshot() is loaded.snapshot.dense
    for q in qs:
        _same(_dense(loaded, q, 25), _oracle(final, q, 25))
        _same(_dense(loaded, q, 10, "c.hwpx"), _oracle(final, q, 10, "c.hwpx"))
    loaded.persist(tmp_path / "idx")
    again = CriterionAwareIndex.load(tmp_path / "idx", embed_model=HashedBigramEmbedding())
    assert len(again.snapshot.dense.segments) == 1
    for q in qs:
        _same(_dense(again, q, 25), _oracle(final, q, 25))


def _rebind(gen: Path) -> None:
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])


def test_flat_files_that_do_not_belong_to_the_index_are_refused(
    nodes: list[TextNode], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = HashedBigramEmbedding()
    CriterionAwareIndex.from_defaults(nodes, embed_model=model).persist(tmp_path / "a")
    CriterionAwareIndex.from_defaults(nodes[:50], embed_model=model).persist(tmp_path / "b")
    gen_a, gen_b = _persist.live_dir(tmp_path / "a"), _persist.live_dir(tmp_path / "b")

    # another index's flat store, its manifest bound again: the row count gives it away
    shutil.rmtree(gen_a / "flat")
    shutil.copytree(gen_b / "flat", gen_a / "flat")
    _rebind(gen_a)
    with pytest.raises(IndexPersistError, match="flat"):
        CriterionAwareIndex.load(tmp_path / "a", embed_model=model)

    # a small folder is hashed: rows swapped in place (same size) are named
    CriterionAwareIndex.from_defaults(nodes, embed_model=model).persist(tmp_path / "c")
    vec = _persist.live_dir(tmp_path / "c") / "flat" / "vectors.npy"
    raw = np.load(vec)
    np.save(vec, raw[::-1].copy())
    with pytest.raises(IndexPersistError, match="vectors.npy"):
        CriterionAwareIndex.load(tmp_path / "c", embed_model=model)

    # above the hashing threshold only sizes, headers and reads are checked: a cut file is
    # named before anything is mapped
    from llama_index_car import _bm25_storage

    monkeypatch.setattr(_bm25_storage, "AUTO_VERIFY_BYTES", 0)
    CriterionAwareIndex.from_defaults(nodes, embed_model=model).persist(tmp_path / "d")
    codes = _persist.live_dir(tmp_path / "d") / "flat" / "codes.npy"
    codes.write_bytes(codes.read_bytes()[:-5])
    with pytest.raises(IndexPersistError, match="codes.npy"):
        CriterionAwareIndex.load(tmp_path / "d", embed_model=model)
