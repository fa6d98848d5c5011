"""FlatVectorStore: exact top-k against float64 brute force and SimpleVectorStore, filters with
the BM25 channel's meaning, snapshots across updates, persistence and hostile folders."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from llama_index_car import _flat_math as fm
from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._filters import matches
from llama_index_car._persist import live_dir
from llama_index_car.flat_store import FlatVectorStore, resolve_scan

SCANS = ["float32"] + (["int8"] if resolve_scan("auto", 384) == "int8" else [])


def _data(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Clustered unit vectors (near-ties, as in real embeddings) plus exact duplicates."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((8, d))
    x = centers[rng.integers(0, 8, n)] + 0.15 * rng.standard_normal((n, d))
    x[5] = x[4]  # a tie: broken by id
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def _nodes(x: np.ndarray, prefix: str = "n") -> list[TextNode]:
    out = []
    for i, v in enumerate(x):
        node = TextNode(
            id_=f"{prefix}{i:05d}", text="t", embedding=v.tolist(),
            metadata={"file_name": f"f{i % 5}.hwpx", "year": 2000 + i % 20, "kind": ["a", "b"][i % 2]},
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i % 10}")
        out.append(node)
    return out


def _oracle(x: np.ndarray, ids: list[str], q: np.ndarray, k: int, allowed=None) -> list[tuple[str, float]]:
    x64 = x.astype(np.float64)
    q64 = q.astype(np.float64)
    cos = (x64 @ q64) / (np.linalg.norm(x64, axis=1) * np.linalg.norm(q64))
    rows = [i for i in range(len(ids)) if allowed is None or allowed(i)]
    return sorted(((ids[i], float(cos[i])) for i in rows), key=lambda t: (-t[1], t[0]))[:k]


def _same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=0, atol=1e-12)


@pytest.mark.parametrize("scan", SCANS)
def test_exact_top_k_equals_float64_brute_force(scan: str) -> None:
    x = _data(3000, 48)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=48, scan=scan)
    store.add(nodes)
    ids = [n.node_id for n in nodes]
    rng = np.random.default_rng(1)
    for t in range(25):
        q = x[rng.integers(0, len(x))] + 0.05 * rng.standard_normal(48).astype(np.float32)
        k = [1, 10, 100, 3000, 5000][t % 5]
        _same(store.snapshot().search(q, k), _oracle(x, ids, q, k))


@pytest.mark.parametrize("dim", [1536, 3072])
def test_wide_vectors_are_exact_too(dim: int) -> None:
    """OpenAI's 1536-d (the `--embed openai` default) and 3072-d vectors: past the int8 pass's
    exact range the store scans in float32, still the exact float64 top-k."""
    x = _data(400, dim, seed=dim)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=dim)
    assert store.snapshot().scan == "float32"
    store.add(nodes)
    ids = [n.node_id for n in nodes]
    rng = np.random.default_rng(2)
    for k in (1, 10, 400):
        q = x[rng.integers(0, len(x))] + 0.05 * rng.standard_normal(dim).astype(np.float32)
        _same(store.snapshot().search(q, k), _oracle(x, ids, q, k))


def test_int8_scan_refuses_vectors_past_its_exact_range() -> None:
    with pytest.raises(ConfigurationError, match="at most 1040 dimensions"):
        resolve_scan("int8", 1041)
    assert resolve_scan("float32", 1041) == "float32"


def test_ties_are_broken_by_id() -> None:
    x = _data(200, 16)
    store = FlatVectorStore(dim=16)
    store.add(_nodes(x))
    hits = store.snapshot().search(x[4], 2)
    assert [h[0] for h in hits] == ["n00004", "n00005"] and hits[0][1] == hits[1][1]


def test_agrees_with_simple_vector_store_top_k() -> None:
    x = _data(1500, 32, seed=3)
    nodes = _nodes(x)
    ours, simple = FlatVectorStore(dim=32), SimpleVectorStore()
    ours.add(nodes)
    simple.add(nodes)
    rng = np.random.default_rng(4)
    f = MetadataFilters(filters=[MetadataFilter(key="year", value=2010, operator=FilterOperator.GTE)])
    for _ in range(15):
        q = rng.standard_normal(32).tolist()
        for filters in (None, f):
            vq = VectorStoreQuery(query_embedding=q, similarity_top_k=20, filters=filters)
            a, b = ours.query(vq), simple.query(vq)
            assert a.ids == b.ids
            np.testing.assert_allclose(a.similarities, b.similarities, atol=1e-9)


FILTERS = [
    MetadataFilters(filters=[MetadataFilter(key="file_name", value="f2.hwpx")]),
    MetadataFilters(filters=[MetadataFilter(key="year", value=[2001, 2003, 2019], operator=FilterOperator.IN)]),
    MetadataFilters(
        filters=[
            MetadataFilter(key="kind", value="a"),
            MetadataFilters(filters=[MetadataFilter(key="year", value=2015, operator=FilterOperator.GT),
                                     MetadataFilter(key="file_name", value="f0.hwpx")],
                            condition=FilterCondition.OR),
        ]
    ),
    MetadataFilters(filters=[MetadataFilter(key="kind", value="b")], condition=FilterCondition.NOT),
    MetadataFilters(filters=[MetadataFilter(key="year", value=1900, operator=FilterOperator.LT)]),
]


@pytest.mark.parametrize("filters", FILTERS)
def test_filters_mean_what_they_mean_on_the_bm25_channel(filters: MetadataFilters) -> None:
    x = _data(2000, 24, seed=5)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=24)
    store.add(nodes)
    ids = [n.node_id for n in nodes]
    q = np.random.default_rng(6).standard_normal(24)
    want = _oracle(x, ids, q, 30, allowed=lambda i: matches(filters, nodes[i].metadata))
    _same(store.snapshot().search(q, 30, filters), want)


def test_bad_filters_and_queries_are_refused() -> None:
    store = FlatVectorStore(dim=4)
    store.add(_nodes(_data(10, 4)))
    with pytest.raises(ConfigurationError):
        store.snapshot().search([1, 0, 0, 0], 3, MetadataFilters(filters=[MetadataFilter(key="a'b", value=1)]))
    with pytest.raises(ConfigurationError, match="dimensions"):
        store.snapshot().search([1, 0, 0], 3)
    with pytest.raises(ConfigurationError, match="NaN"):
        store.snapshot().search([np.nan, 0, 0, 0], 3)
    with pytest.raises(ConfigurationError):
        store.add([TextNode(id_="z", embedding=[np.inf, 0, 0, 0])])
    with pytest.raises(ValueError, match="scan"):  # pydantic's validation names the field
        FlatVectorStore(dim=4, scan="gpu")  # type: ignore[arg-type]


def test_snapshot_pinned_before_updates_stays_correct() -> None:
    x = _data(600, 16, seed=7)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=16)
    store.add(nodes[:400])
    q = x[10]
    pinned = store.snapshot()
    before = pinned.search(q, 50)
    store.delete_nodes(node_ids=[h[0] for h in before[:10]])
    store.add(nodes[400:])
    store.delete("doc3")
    ids = [n.node_id for n in nodes]
    assert pinned.search(q, 50) == before
    _same(before, _oracle(x[:400], ids[:400], q, 50))
    gone = {h[0] for h in before[:10]} | {n.node_id for n in nodes[:400] if n.ref_doc_id == "doc3"}
    gone |= {n.node_id for n in nodes[400:] if n.ref_doc_id == "doc3"}
    want = _oracle(x, ids, q, 50, allowed=lambda i: ids[i] not in gone)
    _same(store.snapshot().search(q, 50), want)
    assert len(store) == 600 - len(gone)


def test_add_replaces_an_existing_id_and_node_ids_restrict() -> None:
    x = _data(50, 8, seed=8)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=8)
    store.add(nodes)
    moved = TextNode(id_="n00003", text="t", embedding=(-x[0]).tolist())
    store.add([moved])
    assert len(store) == 50
    assert store.snapshot().search(-x[0], 1)[0][0] == "n00003"
    res = store.query(VectorStoreQuery(query_embedding=x[7].tolist(), similarity_top_k=3,
                                       node_ids=["n00001", "n00007", "nope"]))
    assert res.ids == ["n00007", "n00001"]
    res = store.query(VectorStoreQuery(query_embedding=x[7].tolist(), similarity_top_k=100,
                                       doc_ids=["doc7"]))
    assert sorted(res.ids) == sorted(n.node_id for n in nodes if n.ref_doc_id == "doc7")


def test_delete_nodes_by_filter() -> None:
    x = _data(100, 8, seed=9)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=8)
    store.add(nodes)
    store.delete_nodes(filters=FILTERS[0])
    assert len(store) == 80
    assert all(nodes[int(h[0][1:])].metadata["file_name"] != "f2.hwpx"
               for h in store.snapshot().search(x[2], 100))


def test_persist_and_load_round_trip_then_update(tmp_path: Path) -> None:
    x = _data(800, 32, seed=10)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=32)
    store.add(nodes)
    store.delete("doc1")
    store.persist(str(tmp_path / "flat"))
    loaded = FlatVectorStore.from_persist_dir(str(tmp_path / "flat"), verify="full")
    rng = np.random.default_rng(11)
    for _ in range(5):
        q = rng.standard_normal(32)
        for f in (None, FILTERS[1]):
            assert loaded.snapshot().search(q, 40, f) == store.snapshot().search(q, 40, f)
    loaded.delete("doc2")
    loaded.add(_nodes(_data(30, 32, seed=12), prefix="m"))
    loaded.persist(str(tmp_path / "flat"))
    again = FlatVectorStore.from_persist_dir(str(tmp_path / "flat"))
    assert len(again) == 800 - 160 + 30
    q = rng.standard_normal(32)
    assert again.snapshot().search(q, 60) == loaded.snapshot().search(q, 60)


def _saved(tmp_path: Path) -> Path:
    store = FlatVectorStore(dim=8)
    store.add(_nodes(_data(40, 8)))
    store.persist(str(tmp_path / "flat"))
    return live_dir(tmp_path / "flat")


def _rewrite_npy(path: Path, arr: np.ndarray) -> None:
    np.save(path, arr)


@pytest.mark.parametrize(
    "damage",
    [
        lambda g: (g / "vectors.npy").write_bytes((g / "vectors.npy").read_bytes()[:-4]),
        lambda g: (g / "codes.npy").write_bytes(b"\x93NUMPY\x01\x00garbage"),
        lambda g: (g / "flat.json").write_text('{"dim": 0, "count": 40}'),
        lambda g: (g / "nodes.blob").unlink(),
    ],
)
def test_damaged_folders_are_typed_errors(tmp_path: Path, damage) -> None:
    gen = _saved(tmp_path)
    damage(gen)
    with pytest.raises(IndexPersistError):
        FlatVectorStore.from_persist_dir(str(tmp_path / "flat"))


def test_arrays_that_pass_the_manifest_sizes_are_still_checked(tmp_path: Path) -> None:
    gen = _saved(tmp_path)
    # same byte size, wrong dtype / shape: caught by the header checks, naming the file
    np.save(gen / "scale.npy", np.zeros(40, dtype=np.int32))
    with pytest.raises(IndexPersistError, match="scale.npy"):
        FlatVectorStore.from_persist_dir(str(tmp_path / "flat"))
    shutil.rmtree(tmp_path / "flat")
    gen = _saved(tmp_path)
    np.save(gen / "codes.npy", np.zeros((20, 16), dtype=np.int8))
    with pytest.raises(IndexPersistError, match="codes.npy"):
        FlatVectorStore.from_persist_dir(str(tmp_path / "flat"))


def test_non_finite_vectors_are_refused_when_read(tmp_path: Path) -> None:
    gen = _saved(tmp_path)
    v = np.load(gen / "vectors.npy")
    v[:] = np.nan
    np.save(gen / "vectors.npy", v)
    with pytest.raises(IndexPersistError):
        FlatVectorStore.from_persist_dir(str(tmp_path / "flat"), verify="full")
    lazy = FlatVectorStore.from_persist_dir(str(tmp_path / "flat"))
    with pytest.raises(IndexPersistError, match="not finite"):
        lazy.snapshot().search(np.ones(8), 3)


def test_error_bound_holds_on_adversarial_rows() -> None:
    rng = np.random.default_rng(13)
    x = rng.standard_normal((5000, 64)).astype(np.float32)
    x[:100] *= 1e-30  # tiny rows, and rows with one spike
    x[100:200, 0] = 1e3
    q = rng.standard_normal(64).astype(np.float32)
    c, s, cn, r, _ = fm.quantize_rows(x)
    qc, qs, qr, qn = fm.quantize_query(q)
    approx = fm.approx_scores(c.astype(np.int64) @ qc.astype(np.int64), s, qs)
    exact = x.astype(np.float64) @ q.astype(np.float64)
    assert (np.abs(exact - approx) <= fm.dot_error_bound(cn, r, qr, qn)).all()


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("spread", [1e-3, 1e-6])
def test_near_duplicates_below_the_first_pass_resolution(scan: str, spread: float) -> None:
    # cosines differ far below int8 (and, at 1e-6, float32) resolution: the first pass cannot
    # order them, so only the certified rescoring finds the exact top-k
    rng = np.random.default_rng(14)
    base = rng.standard_normal(64)
    x = base + spread * rng.standard_normal((4000, 64))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    nodes = _nodes(x)
    store = FlatVectorStore(dim=64, scan=scan)
    store.add(nodes)
    ids = [n.node_id for n in nodes]
    for _ in range(3):
        q = base + 0.5 * rng.standard_normal(64)
        _same(store.snapshot().search(q, 10), _oracle(x, ids, q, 10))


def test_an_empty_store_persists_and_loads(tmp_path: Path) -> None:
    store = FlatVectorStore(dim=8)
    store.persist(str(tmp_path / "empty"))
    loaded = FlatVectorStore.from_persist_dir(str(tmp_path / "empty"), verify="full")
    assert len(loaded) == 0 and loaded.snapshot().search(np.ones(8), 5) == []
    loaded.add(_nodes(_data(10, 8)))
    assert [h[0] for h in loaded.snapshot().search(_data(10, 8)[2], 1)] == ["n00002"]


def test_add_vectors_equals_add_of_nodes() -> None:
    x = _data(300, 16, seed=15)
    nodes = _nodes(x)
    a, b = FlatVectorStore(dim=16), FlatVectorStore(dim=16)
    a.add(nodes)
    b.add_vectors([n.node_id for n in nodes], x, [n.metadata for n in nodes], [n.ref_doc_id for n in nodes])
    q = np.random.default_rng(16).standard_normal(16)
    for f in (None, FILTERS[2]):
        assert a.snapshot().search(q, 20, f) == b.snapshot().search(q, 20, f)
    b.delete("doc4")
    a.delete("doc4")
    assert a.snapshot().search(q, 50) == b.snapshot().search(q, 50)
    with pytest.raises(ConfigurationError, match="shape"):
        b.add_vectors(["z"], np.zeros((1, 15)))


@pytest.mark.skipif("int8" not in SCANS, reason="the int8 scan needs numkong (dev dependency)")
def test_rows_are_read_bounds_checked_after_open(tmp_path: Path) -> None:
    # the int8 pass maps only the codes; rescored rows are read with pread, so a vectors file
    # truncated under an open store is a typed error (a mapped read would be SIGBUS)
    store = FlatVectorStore(dim=8, scan="int8")
    store.add(_nodes(_data(40, 8)))
    store.persist(str(tmp_path / "flat"))
    loaded = FlatVectorStore.from_persist_dir(str(tmp_path / "flat"), scan="int8")
    vec = live_dir(tmp_path / "flat") / "vectors.npy"
    with open(vec, "r+b") as fh:
        fh.truncate(200)
    with pytest.raises(IndexPersistError, match="vectors.npy"):
        loaded.snapshot().search(np.ones(8), 5)
