"""Exact Kiwi BM25 in Milvus Lite and Qdrant local mode (``bm25_sparse``, ``sparse_stores``):
the split formulas against rank_bm25, the avgdl drift bound, and top-k and scores equal to the
local ``BM25Okapi`` before and after inserting and deleting a tenth of the corpus."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import rank_bm25

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car.bm25 import BM25Okapi
from llama_index_car.bm25_sparse import (
    BM25Stats,
    SparseBM25,
    certified_over_fetch,
    doc_weights,
    drift_bounds,
)

TOL = 1e-9


def oracle(docs: Sequence[tuple[str, Sequence[str]]], query: Sequence[str]) -> list[tuple[str, float]]:
    """Every nonzero local BM25 score, score desc then id asc."""
    bm = BM25Okapi([list(t) for _, t in docs])
    s = bm.get_scores(list(query))
    return sorted(((docs[i][0], float(s[i])) for i in np.flatnonzero(s).tolist()), key=lambda t: (-t[1], t[0]))


def agree(got: list[tuple[str, float]], full: list[tuple[str, float]], k: int) -> None:
    """``got`` is the top-k of ``full``: scores equal within TOL at every rank, ids equal up to
    the order inside groups of scores equal within TOL (float64 summation order)."""
    want = full[:k]
    assert len(got) == len(want)
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=0, atol=TOL)
    for (gid, gs), (wid, _) in zip(got, want, strict=True):
        if gid != wid:
            group = {d for d, s in full if abs(s - gs) <= TOL}
            assert gid in group and wid in group, (gid, wid)


# ----------------------------------------------------------------------------- pure maths
def test_split_weights_multiply_to_rank_bm25_scores() -> None:
    corpus = [["설치", "기준", "기준"], ["배수", "시설"], ["설치", "시설", "기준", "측구"], ["기준"], []]
    ref = rank_bm25.BM25Okapi(corpus[:4])  # rank_bm25 raises on an all-empty corpus only
    st = BM25Stats()
    eng_idf = dict(zip(["설치", "기준", "배수", "시설", "측구"], range(5), strict=True))
    st.term_ids = eng_idf
    st.n_docs, st.total_len = 4, sum(len(d) for d in corpus[:4])
    for doc in corpus[:4]:
        for t in set(doc):
            st.df[eng_idf[t]] = st.df.get(eng_idf[t], 0) + 1
    idf = st.idf()
    q = ["기준", "설치", "기준"]
    for j, doc in enumerate(corpus[:4]):
        s = 0.0
        for t in set(q):
            tf = doc.count(t)
            if tf:
                w = doc_weights(np.array([tf]), len(doc), st.avgdl, 1.5, 0.75)[0]
                s += q.count(t) * idf[eng_idf[t]] * w
        assert s == pytest.approx(ref.get_scores(q)[j], abs=1e-12)


def test_doc_weight_is_the_formula() -> None:
    tf, dl, a, k1, b = 3.0, 17, 11.5, 1.2, 0.6
    assert doc_weights(np.array([tf]), dl, a, k1, b)[0] == pytest.approx(
        tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / a)), abs=1e-15
    )


def test_drift_bound_holds_for_every_length_and_count() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        k1, b = rng.uniform(0, 3), rng.uniform(0, 1)
        a_d, a = rng.uniform(1, 500), rng.uniform(1, 500)
        tf, dl = int(rng.integers(1, 50)), int(rng.integers(1, 5000))
        lo, hi = drift_bounds(a, {a_d: 1})
        ratio = doc_weights(np.array([tf]), dl, a, k1, b)[0] / doc_weights(np.array([tf]), dl, a_d, k1, b)[0]
        assert lo * (1 - 1e-12) <= ratio <= hi * (1 + 1e-12)
    assert drift_bounds(10.0, {10.0: 4}) == (1.0, 1.0)
    assert drift_bounds(10.0, {20.0: 0, 5.0: 2}) == (1.0, 2.0)


def test_certification_is_strict() -> None:
    assert certified_over_fetch(2.0, 1.0, 1.5, 3, exhausted=False)
    assert not certified_over_fetch(1.5, 1.0, 1.5, 3, exhausted=False)  # a tie: fetch more
    assert not certified_over_fetch(None, 1.0, 1.0, 3, exhausted=False)
    assert certified_over_fetch(None, None, 1.0, 3, exhausted=True)


def test_stats_round_trip_and_damaged_files(tmp_path: Path) -> None:
    st = BM25Stats(k1=1.2, b=0.7, epsilon=0.2, n_docs=3, total_len=9,
                   term_ids={"가": 0, "나": 1, "다": 2}, df={0: 3, 2: 1}, versions={3.0: 3})
    st.save(tmp_path / "s.json")
    back = BM25Stats.load(tmp_path / "s.json")
    assert back == st and back.idf() == st.idf()
    good = json.loads((tmp_path / "s.json").read_text())
    for patch in ({"df": [3, 0, 9]}, {"terms": ["가", "가", "다"]}, {"k1": -1}, {"n_docs": True},
                  {"versions": [[float("nan"), 1]]}, {"kind": "x"}):
        (tmp_path / "bad.json").write_text(json.dumps({**good, **patch}))
        with pytest.raises(IndexPersistError, match="bad.json"):
            BM25Stats.load(tmp_path / "bad.json")


# ----------------------------------------------------------------------------- stores
def _corpus(n: int, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    vocab = [a + b for a in "가나다라마바사아자차카타파하" for b in "기준시설측구배수"]
    docs = []
    for i in range(n):
        length = rng.randint(0, 30) if i % 10 else rng.randint(60, 120)  # some long documents
        docs.append((f"d{i:04d}", [vocab[min(int(rng.paretovariate(1.05)) - 1, len(vocab) - 1)]
                                   for _ in range(length)]))
    return docs


def _queries(seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [d[1] for d in _corpus(50, seed)]
    return [rng.sample([t for v in vocab for t in v], rng.randint(1, 4)) for _ in range(25)]


@pytest.fixture(params=["qdrant", "milvus"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    if request.param == "qdrant":
        pytest.importorskip("qdrant_client")
        from qdrant_client import QdrantClient

        from llama_index_car.sparse_stores import QdrantSparse

        client = QdrantClient(path=str(tmp_path / "qdrant"))
        yield QdrantSparse(client, create=True)
        client.close()
    else:
        pytest.importorskip("milvus_lite")
        from llama_index_car.sparse_stores import MilvusSparse

        store = MilvusSparse(str(tmp_path / "milvus.db"), create=True)
        yield store
        store.close()


def test_nothing_is_created_on_open(tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    from llama_index_car.sparse_stores import QdrantSparse

    client = QdrantClient(path=str(tmp_path / "q"))
    with pytest.raises(ConfigurationError, match="nothing is created"):
        QdrantSparse(client)
    assert not client.collection_exists("car_bm25")
    client.close()


def test_store_bm25_equals_local_bm25_through_inserts_and_deletes(backend: object) -> None:
    docs = _corpus(300, 1)
    queries = _queries(2)
    first, extra = docs[:270], docs[270:]
    eng = SparseBM25(backend, over_fetch=1)  # type: ignore[arg-type]
    eng.insert(first[:150])
    eng.insert(first[150:])
    for q in queries:
        agree(eng.search(q, 10), oracle(first, q), 10)
    # a tenth in (long documents: avgdl triples), a tenth out
    long_docs = [(d, t * 30) for d, t in extra]
    eng.insert(long_docs)
    gone = [d for d, _ in first[::10]]
    eng.delete(gone)
    live = [x for x in first if x[0] not in set(gone)] + long_docs
    lo, hi = drift_bounds(eng.stats.avgdl, eng.stats.versions)
    assert hi > 2  # the stored weights are stale: the bound is in play
    fetches = []
    for q in queries:
        agree(eng.search(q, 10), oracle(live, q), 10)
        fetches.append(eng.last_fetches)
    assert max(fetches) > 1  # some query needed more than the store's stale top-k
    eng.reweight()
    assert drift_bounds(eng.stats.avgdl, eng.stats.versions) == (1.0, 1.0)
    for q in queries:
        agree(eng.search(q, 10), oracle(live, q), 10)
    with pytest.raises(ConfigurationError, match="unknown"):
        eng.delete(["nope"])


def test_stats_persist_and_a_new_engine_reads_the_same_store(backend: object, tmp_path: Path) -> None:
    docs = _corpus(120, 3)
    eng = SparseBM25(backend)  # type: ignore[arg-type]
    eng.insert(docs)
    eng.stats.save(tmp_path / "df.json")
    again = SparseBM25(backend, BM25Stats.load(tmp_path / "df.json"))  # type: ignore[arg-type]
    for q in _queries(4)[:10]:
        assert again.search(q, 5) == eng.search(q, 5)


# ----------------------------------------------------------------------------- the eval sets
EVAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "eval"


@pytest.mark.corpus
@pytest.mark.slow
# legal_prec2statute (6,472 passages, 1,721 queries, twice per store) takes too long for CI's
# slow tier; benchmarks/sparse_store_bench.py checks it query by query (docs/SCALE.md)
@pytest.mark.parametrize("name", ["lhcs_construction", "autorag_ko"])
def test_eval_sets_equal_local_bm25(name: str, backend: object) -> None:
    from llama_index_car.evaluation.io import load_beir
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    if not (EVAL / name).is_dir():
        pytest.fail(f"{EVAL / name} is missing (corpus tests need ../shared)")
    ds = load_beir(EVAL / name)
    tok = KiwiTokenizer()
    ids = list(ds.corpus)
    texts = [f"## {ds.corpus[d]['title']}\n\n{ds.corpus[d]['text']}" if ds.corpus[d]["title"]
             else ds.corpus[d]["text"] for d in ids]
    docs = list(zip(ids, tok.tokenize_batch(texts), strict=True))
    queries = tok.tokenize_batch(list(ds.queries.values()))
    held = docs[::10]
    base = [d for i, d in enumerate(docs) if i % 10]
    eng = SparseBM25(backend)  # type: ignore[arg-type]
    for i in range(0, len(base), 2000):
        eng.insert(base[i : i + 2000])
    local = BM25Okapi([t for _, t in base])
    for q in queries:
        agree(eng.search(q, 10), _full(local, base, q), 10)
    eng.insert(held)
    gone = [d for d, _ in base[::9]]
    eng.delete(gone)
    live = [x for x in base if x[0] not in set(gone)] + held
    local = BM25Okapi([t for _, t in live])
    for q in queries:
        agree(eng.search(q, 10), _full(local, live, q), 10)


def _full(bm: BM25Okapi, docs: Sequence[tuple[str, Sequence[str]]], q: Sequence[str]) -> list[tuple[str, float]]:
    s = bm.get_scores(list(q))
    return sorted(((docs[i][0], float(s[i])) for i in np.flatnonzero(s).tolist()), key=lambda t: (-t[1], t[0]))


@pytest.fixture(scope="module")
def demo_tokens() -> tuple[list[tuple[str, list[str]]], list[list[str]]]:
    """The built demo corpus (HWPX reader, node parser, Kiwi): ``(docs, query tokens)``."""
    from llama_index.core.schema import MetadataMode
    from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

    from llama_index_car.demo.loader import demo_corpus_files, load_demo_questions
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    reader, parser = HWPXReader(split_sections=True), HWPXNodeParser()
    nodes = [n for f in demo_corpus_files() for n in parser.get_nodes_from_documents(reader.load_data(f))]
    tok = KiwiTokenizer()
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    docs = list(zip([n.node_id for n in nodes], tok.tokenize_batch(texts), strict=True))
    return docs, tok.tokenize_batch([q.question for q in load_demo_questions()])


def test_demo_corpus_kiwi_bm25_in_the_store_equals_local(
    backend: object, demo_tokens: tuple[list[tuple[str, list[str]]], list[list[str]]]
) -> None:
    """A tenth of the demo corpus inserted and a tenth deleted: every demo question equal to
    the local BM25 channel."""
    docs, queries = demo_tokens
    held, base = docs[::10], [d for i, d in enumerate(docs) if i % 10]
    eng = SparseBM25(backend)  # type: ignore[arg-type]
    eng.insert(base)
    for q in queries:
        agree(eng.search(q, 5), oracle(base, q), 5)
    eng.insert(held)
    eng.delete([d for d, _ in base[::10]])
    live = [x for x in base if x not in base[::10]] + held
    for q in queries:
        agree(eng.search(q, 5), oracle(live, q), 5)
