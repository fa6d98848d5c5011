"""The lexical channel kept in Milvus Lite / Qdrant local or a Milvus / Qdrant server on
127.0.0.1 (issue 39, item 3, wired).

``llama-car index --store milvus|qdrant`` writes the Kiwi BM25 postings into the store as
sparse rows and keeps only the document-frequency table (``bm25_df.json``) in the folder; a
query is exact. The oracle is ``rank_bm25.BM25Okapi`` over the same Kiwi tokens of the
folder's nodes: every query's top-10 ids and scores equal (ties by id), before and after an
``--update`` that inserts a tenth of the documents and deletes another tenth; a filter gives
the oracle restricted to the nodes that pass it. A hostile df table is an
``IndexPersistError`` naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import MetadataMode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_car._errors import IndexPersistError
from llama_index_car.bm25_sparse import drift_bounds
from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from llama_index_car.demo.spec import QUESTIONS
from llama_index_car.folder import load_index
from llama_index_car.indices._store_bm25 import DF_NAME, StoreBM25

rank_bm25 = pytest.importorskip("rank_bm25")

FILES = sorted(p.name for p in DEMO_CORPUS_DIR.glob("*.hwpx"))
MODULES = {"milvus": ("pymilvus", "milvus_lite"), "qdrant": ("qdrant_client",)}
EXTRA = ("측구 깊이", "설치기준 높이 이상", "교량 점검통로 폭", "터널 조명 휘도", "포장 두께")


def _needs(kind: str) -> None:
    for module in MODULES[kind]:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} not installed ([stores] extra)")


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    assert rc == 0, out.getvalue()
    return out.getvalue()


def _store_index(tmp_path: Path, files: Sequence[str], store: str) -> tuple[Path, Path]:
    """``(src, idx)``: ``files`` of the demo corpus copied to ``src`` and indexed into ``idx``
    with ``--store store`` (USE embedding)."""
    src, idx = tmp_path / "src", tmp_path / "idx"
    src.mkdir()
    for name in files:
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    _cli("index", str(src), "--persist", str(idx), "--embed", "use", "--store", store,
         "--no-progress")
    return src, idx


def _generation(idx: Path) -> Path:
    """The live generation (``CURRENT``); no generation of the folder holds BM25 arrays."""
    assert not list(idx.glob("gen-*/bm25.*"))
    return idx / json.loads((idx / "CURRENT").read_text())["generation"]


def _oracle(index, query: str, k: int, keep=None) -> list[tuple[str, float]]:  # type: ignore[no-untyped-def]
    nodes = [n for n in index.nodes if keep is None or keep(n)]
    tok = index.tokenizer
    corpus = [tok.tokenize(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in index.nodes]
    full = rank_bm25.BM25Okapi(corpus)  # idf over every node, as the index's channel
    pos = {n.node_id: i for i, n in enumerate(index.nodes)}
    scores = full.get_scores(tok.tokenize(query))
    got = [(n.node_id, float(scores[pos[n.node_id]])) for n in nodes]
    got = [g for g in got if g[1] != 0]
    return sorted(got, key=lambda t: (-t[1], t[0]))[:k]


def _agree(index, k: int = 10, filters=None, keep=None) -> int:  # type: ignore[no-untyped-def]
    retriever = index.as_retriever("bm25", similarity_top_k=k, filters=filters)
    n = 0
    for q in [s.question for s in QUESTIONS] + list(EXTRA):
        got = [(h.node.node_id, float(h.score)) for h in retriever.retrieve(q)]
        want = _oracle(index, q, k, keep)
        assert [g[0] for g in got] == [w[0] for w in want], q
        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-6)
        n += bool(want)
    return n


@pytest.mark.parametrize("kind", [
    "milvus", "qdrant",
    # a server on 127.0.0.1 (tests/fakes): the URI is given again to update and query
    pytest.param("milvus_server", marks=pytest.mark.slow),
    pytest.param("qdrant_server", marks=pytest.mark.slow),
])
def test_store_bm25_is_exact_before_and_after_an_update(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: str | None = None
    if kind.endswith("_server"):
        server = request.getfixturevalue(kind)
        store = server if isinstance(server, str) else server.uri
    else:
        _needs(kind)
    again = ["--store", store] if store else []
    src, idx = _store_index(tmp_path, FILES[1:], store or kind)  # nine of the ten
    gen = _generation(idx)
    assert not list(gen.glob("bm25.*")) and (gen / DF_NAME).is_file()
    index = load_index(idx, store=store)
    assert isinstance(index.snapshot.lexical.bm25, StoreBM25)
    assert _agree(index) >= 15
    one = FILES[1]  # a filter: the BM25 channel's meaning, exact in the store too
    meta_key = "file_name"
    assert index.nodes[0].metadata.get(meta_key)
    filters = MetadataFilters(filters=[MetadataFilter(key=meta_key, value=one)])
    _agree(index, 5, filters, keep=lambda n: n.metadata.get(meta_key) == one)

    shutil.copy(DEMO_CORPUS_DIR / FILES[0], src / FILES[0])  # a tenth in, another out
    (src / FILES[5]).unlink()
    out = _cli("index", str(src), "--persist", str(idx), "--update", *again, "--no-progress")
    assert "1 changed or new, 1 removed, 8 unchanged" in out
    gen = _generation(idx)
    assert not list(gen.glob("bm25.*")) and (gen / DF_NAME).is_file()
    index = load_index(idx, store=store)
    assert not any(n.metadata.get(meta_key) == FILES[5] for n in index.nodes)
    assert any(n.metadata.get(meta_key) == FILES[0] for n in index.nodes)
    assert _agree(index) >= 15
    # every retriever works over it, from the CLI
    for kind_ in ("bm25", "hybrid", "car"):
        hits = json.loads(_cli("query", str(idx), "터널 조명 기준", "--retriever", kind_,
                               "--top-k", "5", "--json", *again))["hits"]
        assert hits


def _rewrite(gen: Path, name: str, raw: bytes) -> None:
    """Replace ``gen/name`` and its manifest entry (the loader's own checks must catch it)."""
    (gen / name).write_bytes(raw)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}
    (gen / "manifest.json").write_text(json.dumps(manifest))


def test_a_hostile_df_table_is_refused_naming_it(tmp_path: Path) -> None:
    _needs("milvus")
    src, idx = _store_index(tmp_path, FILES[:2], "milvus")
    gen = _generation(idx)
    good = (gen / DF_NAME).read_bytes()
    table = json.loads(good)
    assert table["df"] and table["n_docs"] > 1
    wrong_dtype = dict(table, df=[float(d) + 0.5 for d in table["df"]])
    negative = dict(table, df=[-1, *table["df"][1:]])
    short = dict(table, df=table["df"][:-1])
    fewer_docs = dict(table, n_docs=table["n_docs"] - 1)
    hostile = [good[: len(good) // 2]] + [json.dumps(t).encode() for t in
                                          (wrong_dtype, negative, short, fewer_docs)]
    for raw in hostile:
        _rewrite(gen, DF_NAME, raw)
        with pytest.raises(IndexPersistError, match=DF_NAME):
            load_index(idx)
    (gen / DF_NAME).write_bytes(b"{}")  # the manifest's hash first
    with pytest.raises(IndexPersistError, match=DF_NAME):
        load_index(idx)
    _rewrite(gen, DF_NAME, good)
    assert len(load_index(idx).nodes) == table["n_docs"]


@pytest.mark.slow
def test_a_large_drift_stays_exact(tmp_path: Path) -> None:
    _needs("milvus")
    from llama_index.core.schema import TextNode

    src, idx = _store_index(tmp_path, FILES[:3], "milvus")
    index = load_index(idx)
    before = index.snapshot.lexical.bm25
    assert isinstance(before, StoreBM25) and len(before.stats.versions) == 1
    long = "터널 조명 휘도는 설치기준 이상으로 하고 측구 깊이는 0.3m 이상으로 한다. " * 40
    index.insert_nodes([TextNode(text=long + str(i), id_=f"long-{i}") for i in range(4)])
    after = index.snapshot.lexical.bm25
    assert isinstance(after, StoreBM25)
    # the old rows keep their weights: exact through the drift bound and exact rescoring
    lo, hi = drift_bounds(after.stats.avgdl, after.stats.versions)
    assert len(after.stats.versions) == 2 and hi / lo > 1.5
    for k in (1, 2, 3, 10):  # small k: the first fetch (4k rows) does not hold every node
        assert _agree(index, k) >= 15
    index.delete_nodes(["long-0", "long-1"])  # a delete leaves the rows as written: the bound
    assert _agree(index) >= 15


@pytest.mark.parametrize("kind", ["milvus", pytest.param("qdrant", marks=pytest.mark.slow)])
def test_stale_rows_after_inserts_and_deletes_through_the_index(kind: str, tmp_path: Path) -> None:
    """The index's own update path (pending rows, deletes with the vectors) on a corpus whose
    avgdl triples: the first fetch (``over_fetch=1``) is often not enough, the bound decides."""
    _needs(kind)
    import random
    import uuid

    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode

    from llama_index_car.folder.store import open_store_index
    from llama_index_car.indices import CriterionAwareIndex
    from llama_index_car.indices._lexical import Lexical, Tokens
    from llama_index_car.sparse_stores import sparse_backend
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    rng = random.Random(7)
    words = ["배수", "측구", "터널", "조명", "교량", "포장", "기준", "설치", "높이", "깊이", "휘도",
             "두께", "점검", "통로", "낙석", "방지", "울타리", "휴게소", "주차", "요금"]

    def text(n: int) -> str:
        return " ".join(words[min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)]
                        for _ in range(n))

    def nid(name: str) -> str:  # Qdrant takes UUID ids
        return str(uuid.uuid5(uuid.NAMESPACE_URL, name))

    nodes = [TextNode(text=text(rng.randint(1, 20)), id_=nid(f"d{i}")) for i in range(150)]
    model = MockEmbedding(embed_dim=8)
    uri = f"milvus://{tmp_path / 'm.db'}" if kind == "milvus" else f"qdrant://{tmp_path / 'q'}"
    vi = open_store_index(uri, model, 8, create=True)
    vi.insert_nodes(nodes)
    tokens = Tokens(KiwiTokenizer())
    backend = sparse_backend(vi.vector_store, create=True)
    assert backend is not None
    lexical = Lexical.build(nodes, tokens).into_store(backend, over_fetch=1)
    index = CriterionAwareIndex.from_parts(lexical, tokens, vector_index=vi, embed_model=model)
    queries = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(20)]

    def agree(k: int) -> None:
        retriever = index.as_retriever("bm25", similarity_top_k=k)
        for q in queries:
            got = [(h.node.node_id, float(h.score)) for h in retriever.retrieve(q)]
            want = _oracle(index, q, k)
            assert [g[0] for g in got] == [w[0] for w in want], q
            np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-6)

    agree(5)
    index.insert_nodes([TextNode(text=text(rng.randint(150, 250)), id_=nid(f"long{i}"))
                        for i in range(15)])  # a tenth in, long: avgdl about triples
    index.delete_nodes([nid(f"d{i}") for i in range(0, 150, 10)])  # a tenth out
    st = index.snapshot.lexical.bm25.stats  # type: ignore[union-attr]
    lo, hi = drift_bounds(st.avgdl, st.versions)
    assert hi > 2
    assert sorted(backend.ids()) == sorted(index.snapshot.ids)  # rows follow the vectors
    for k in (1, 3, 5):
        agree(k)
