"""Reweighting the store-kept BM25 rows on ``--update`` (issue 39, item 3), in Milvus Lite and
Qdrant local mode.

Rows keep the mean length they were written at; past the drift threshold an update writes
every live row at today's mean length into a new collection, the new generation names it
(one write version) and the previous collection is dropped after the commit. Oracle:
``rank_bm25.BM25Okapi`` over the same Kiwi tokens (top-k ids and scores, ties by id). A crash
between the new collection and the commit leaves the previous generation answering as
before; the next update drops the orphan. A search the store's cap stops before it is
certified answers exactly (no error).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from llama_index_car.bm25_sparse import REWEIGHT_AT, SearchTrace, drift_bounds, exact_search
from llama_index_car.folder import BuildOptions, load_index, update_index
from llama_index_car.indices import CriterionAwareIndex
from llama_index_car.indices._store_bm25 import StoreBM25
from llama_index_car.sparse_stores import BM25_COLLECTION, bm25_collections
from tests.test_store_lexical import _cli, _needs, _oracle

sys.path.insert(0, str(Path(__file__).parent))
from fakes.hostile_hwpx import package, para  # noqa: E402

WORDS = ["배수", "측구", "터널", "조명", "교량", "포장", "기준", "설치", "높이", "깊이", "휘도", "두께"]
QUERIES = ["터널 조명 기준", "배수 측구 깊이", "교량 높이", "포장 두께 기준", "휘도", "설치 기준 높이"]


def _tiny(src: Path, n: int) -> None:
    """``n`` one-node files of a few words each (a short mean length)."""
    for i in range(n):
        words = " ".join(WORDS[(i * j + i) % len(WORDS)] for j in range(1, 2 + i % 4))
        (src / f"s{i:02d}.hwpx").write_bytes(package([para(f"{words} 기준은 {i}m 이상으로 한다.")]))


def _long(src: Path) -> None:
    """One file of long articles: the mean length grows far past the threshold."""
    arts = [para(f"제{i}조 " + " ".join(f"{WORDS[(i + j) % len(WORDS)]} 설치 {j}" for j in range(80)))
            for i in range(4)]
    (src / "long.hwpx").write_bytes(package(["".join(arts)]))


def _agree(index: CriterionAwareIndex, ks: tuple[int, ...] = (1, 3, 10)) -> list[list[tuple[str, float]]]:
    out = []
    for k in ks:
        retriever = index.as_retriever("bm25", similarity_top_k=k)
        for q in QUERIES:
            got = [(h.node.node_id, float(h.score)) for h in retriever.retrieve(q)]
            want = _oracle(index, q, k)
            assert want, q
            assert [g[0] for g in got] == [w[0] for w in want], (k, q)
            np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-6)
            out.append(got)
    return out


def _record(idx: Path) -> dict:  # type: ignore[type-arg]
    gen = idx / json.loads((idx / "CURRENT").read_text())["generation"]
    return json.loads((gen / "index.json").read_text())["bm25"]


def _collections(index: CriterionAwareIndex) -> list[str]:
    return bm25_collections(index.vector_index.vector_store)


def _built(kind: str, tmp_path: Path) -> tuple[Path, Path]:
    _needs(kind)
    src, idx = tmp_path / "src", tmp_path / "idx"
    src.mkdir()
    _tiny(src, 14)
    _cli("index", str(src), "--persist", str(idx), "--embed", "use", "--store", kind,
         "--no-progress")
    assert _record(idx)["collection"] == BM25_COLLECTION
    return src, idx


@pytest.mark.parametrize("kind", ["milvus", pytest.param("qdrant", marks=pytest.mark.slow)])
def test_update_past_the_drift_reweights_into_a_new_collection(kind: str, tmp_path: Path) -> None:
    src, idx = _built(kind, tmp_path)
    before = load_index(idx)
    rows = before.snapshot.lexical.bm25
    assert isinstance(rows, StoreBM25) and len(rows.stats.versions) == 1
    a0 = rows.stats.avgdl
    _agree(before)
    del before, rows

    _long(src)
    out = _cli("index", str(src), "--persist", str(idx), "--update", "--no-progress")
    assert "1 changed or new, 0 removed" in out
    index = load_index(idx)
    rows = index.snapshot.lexical.bm25
    assert isinstance(rows, StoreBM25)
    assert rows.stats.avgdl / a0 > REWEIGHT_AT  # the old rows' ρ: past the threshold
    name = _record(idx)["collection"]
    assert name != BM25_COLLECTION and rows.backend.collection == name
    assert rows.stats.versions == {rows.stats.avgdl: len(index.nodes)}  # one write version
    assert drift_bounds(rows.stats.avgdl, rows.stats.versions) == (1.0, 1.0)
    assert _collections(index) == [name]  # the previous one dropped after the commit
    assert sorted(rows.backend.ids()) == sorted(n.node_id for n in index.nodes)  # type: ignore[attr-defined]
    _agree(index)

    (src / "s03.hwpx").unlink()  # a small update: no drift worth a rewrite, no new collection
    _cli("index", str(src), "--persist", str(idx), "--update", "--no-progress")
    index = load_index(idx)
    assert _record(idx)["collection"] == name and _collections(index) == [name]
    _agree(index)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("kind", ["milvus", pytest.param("qdrant", marks=pytest.mark.slow)])
def test_a_crash_before_the_commit_leaves_the_previous_generation_exact(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, idx = _built(kind, tmp_path)
    before = load_index(idx)
    answers = _agree(before)
    n_before = len(before.nodes)
    del before

    _long(src)
    model = None

    def crash(self: CriterionAwareIndex, *args: object, **kwargs: object) -> None:
        nonlocal model
        model = self.embed_model
        rows = self.snapshot.lexical.bm25
        assert isinstance(rows, StoreBM25) and rows.backend.collection != BM25_COLLECTION
        raise _Crash("killed at the commit point (simulated)")

    monkeypatch.setattr(CriterionAwareIndex, "persist", crash)  # the commit point
    with pytest.raises(_Crash):
        update_index(src, idx)
    monkeypatch.undo()

    index = load_index(idx)  # the previous generation, over its untouched collection
    assert len(index.nodes) == n_before and _record(idx)["collection"] == BM25_COLLECTION
    orphans = [c for c in _collections(index) if c != BM25_COLLECTION]
    assert len(orphans) == 1  # the crashed update's rows, fully written
    assert _agree(index) == answers  # exactly as before
    load_index(idx)
    assert [c for c in _collections(index) if c != BM25_COLLECTION] == orphans  # a read drops nothing
    del index

    # the next update, one that does not reweight (the long file gone again, another too)
    (src / "long.hwpx").unlink()
    (src / "s03.hwpx").unlink()
    summary = update_index(src, idx, BuildOptions(embed_model=model))
    assert summary.removed == 1
    index = load_index(idx)
    assert _record(idx)["collection"] == BM25_COLLECTION
    assert _collections(index) == [BM25_COLLECTION]  # the orphan is gone
    _agree(index)


def test_the_store_cap_never_fails_a_query(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A search whose certificate the store's cap (here 8 results per search) comes before
    rescores every document of the query's terms (one search per term), or scans every row
    when a term has more rows than one search returns: exact either way."""
    _needs("milvus")
    import random
    import uuid

    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode

    from llama_index_car.folder.store import open_store_index
    from llama_index_car.indices._lexical import Lexical, Tokens
    from llama_index_car.sparse_stores import sparse_backend
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    rng = random.Random(3)

    def text(n: int) -> str:
        return " ".join(WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)]
                        for _ in range(n))

    def nid(name: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, name))

    nodes = [TextNode(text=text(rng.randint(1, 12)), id_=nid(f"d{i}")) for i in range(80)]
    nodes += [TextNode(text="낙석 방지 울타리", id_=nid("rare"))]  # a term of one row
    model = MockEmbedding(embed_dim=8)
    vi = open_store_index(f"milvus://{tmp_path / 'm.db'}", model, 8, create=True)
    vi.insert_nodes(nodes)
    tokens = Tokens(KiwiTokenizer())
    backend = sparse_backend(vi.vector_store, create=True, max_limit=8)
    assert backend is not None and backend.max_limit == 8
    lexical = Lexical.build(nodes, tokens).into_store(backend, over_fetch=1)
    index = CriterionAwareIndex.from_parts(lexical, tokens, vector_index=vi, embed_model=model)
    index.insert_nodes([TextNode(text=text(rng.randint(100, 150)), id_=nid(f"long{i}"))
                        for i in range(8)])  # the old rows' ρ ≈ 3: K = 8 rows never certify
    rows = index.snapshot.lexical.bm25
    assert isinstance(rows, StoreBM25) and drift_bounds(rows.stats.avgdl, rows.stats.versions)[1] > 2
    with caplog.at_level(logging.WARNING, logger="llama_index_car.bm25_sparse"):
        for k in (3, 5):
            retriever = index.as_retriever("bm25", similarity_top_k=k)
            for q in [*QUERIES, "낙석 방지", "낙석 터널"]:
                got = [(h.node.node_id, float(h.score)) for h in retriever.retrieve(q)]
                want = _oracle(index, q, k)
                assert [g[0] for g in got] == [w[0] for w in want], (k, q)
                np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-6)
    assert any("rescoring every document" in r.message for r in caplog.records)
    # both fallbacks: a rare term's rows in one search each, a common term's by a scan
    st = rows.stats
    for q, scanned in (("낙석 방지", False), ("터널 조명 기준", True)):
        trace = SearchTrace()
        exact_search(rows.backend, st, st.idf(), tokens.tokenizer.tokenize(q), 1,
                     over_fetch=1, trace=trace)
        assert trace.scanned is scanned, q
