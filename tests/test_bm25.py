"""BM25Okapi against the independent oracle rank_bm25 (BM25Okapi, same parameters, same tokens).

Parameter mapping: ours ``BM25Okapi(corpus, k1, b, epsilon)`` == rank_bm25
``BM25Okapi(corpus, k1=k1, b=b, epsilon=epsilon)``; ``get_scores`` on the same token list.
Tolerance: ``|ours - theirs| <= 1e-9 * max(1, |theirs|)``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import rank_bm25
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_car._errors import ConfigurationError
from llama_index_car.bm25 import BM25Okapi, top_k_from_scores

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"


def assert_parity(ours: np.ndarray, theirs: np.ndarray) -> None:
    theirs = np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape
    tol = 1e-9 * np.maximum(1.0, np.abs(theirs))
    diff = np.abs(ours - theirs)
    assert (diff <= tol).all(), f"max diff {diff.max()} at {int(diff.argmax())}"


def random_corpus(rng: np.random.Generator, n_docs: int, vocab: int, max_len: int) -> list:
    # Zipf-like term draws, so some terms are in more than half of the documents.
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    return [
        [f"t{j}" for j in rng.choice(vocab, size=int(rng.integers(0, max_len + 1)), p=p)]
        for _ in range(n_docs)
    ]


@pytest.mark.parametrize("seed", range(12))
def test_random_corpora_match_rank_bm25(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(1, 120))
    corpus = random_corpus(rng, n_docs, vocab=int(rng.integers(3, 60)), max_len=30)
    if not any(corpus):  # rank_bm25 raises on an all-empty corpus (tested separately)
        corpus[0] = ["t0"]
    k1 = float(rng.uniform(0.1, 3.0))
    b = float(rng.uniform(0.0, 0.99))
    eps = float(rng.uniform(0.0, 1.0))
    ours = BM25Okapi(corpus, k1=k1, b=b, epsilon=eps)
    theirs = rank_bm25.BM25Okapi(corpus, k1=k1, b=b, epsilon=eps)
    assert ours.avgdl == pytest.approx(theirs.avgdl, rel=1e-12)
    assert ours.average_idf == pytest.approx(theirs.average_idf, rel=1e-12, abs=1e-12)
    for t, j in ours.vocab.items():
        assert ours.idf[j] == pytest.approx(theirs.idf[t], rel=1e-12, abs=1e-12)
    queries = [
        [f"t{j}" for j in rng.integers(0, 70, size=int(rng.integers(0, 8)))] for _ in range(15)
    ]
    queries.append(["t0", "t0", "t0", "t1"])  # repeated tokens count each time
    for q in queries:
        assert_parity(ours.get_scores(q), theirs.get_scores(q))
    batch = ours.get_batch_scores(queries)
    for row, q in zip(batch, queries, strict=True):
        assert_parity(row, theirs.get_scores(q))


tokens = st.sampled_from(["가", "나", "다", "라", "마", "바", "설치기준", "0.6m", "II"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=st.lists(st.lists(tokens, max_size=12), min_size=1, max_size=25).filter(any),
    query=st.lists(st.sampled_from(["가", "나", "설치기준", "II", "없음"]), max_size=6),
    k1=st.floats(0.01, 5.0),
    b=st.floats(0.0, 0.999),
    eps=st.floats(-1.0, 1.0),
)
def test_property_parity_with_rank_bm25(
    corpus: list[list[str]], query: list[str], k1: float, b: float, eps: float
) -> None:
    ours = BM25Okapi(corpus, k1=k1, b=b, epsilon=eps)
    theirs = rank_bm25.BM25Okapi(corpus, k1=k1, b=b, epsilon=eps)
    assert_parity(ours.get_scores(query), theirs.get_scores(query))


@settings(max_examples=60, deadline=None)
@given(
    corpus=st.lists(st.lists(tokens, max_size=8), min_size=1, max_size=20).filter(any),
    query=st.lists(tokens, max_size=5),
    k=st.integers(0, 25),
)
def test_property_top_k_is_sorted_prefix_of_full_ranking(
    corpus: list[list[str]], query: list[str], k: int
) -> None:
    bm = BM25Okapi(corpus)
    scores = bm.get_scores(query)
    expected = sorted(range(len(corpus)), key=lambda i: (-scores[i], i))[:k]
    idx, sc = bm.top_k(query, k)
    assert idx.tolist() == expected
    assert sc.tolist() == [scores[i] for i in expected]


def test_formula_by_hand() -> None:
    corpus = [["a", "b", "a"], ["b"], ["c", "d"], ["e"], ["f"]]
    bm = BM25Okapi(corpus, k1=1.2, b=0.5, epsilon=0.25)
    n, avgdl = 5, 8 / 5  # lengths 3, 1, 2, 1, 1
    idf_a = math.log(n - 1 + 0.5) - math.log(1 + 0.5)
    tf, dl = 2, 3
    expected = idf_a * tf * 2.2 / (tf + 1.2 * (1 - 0.5 + 0.5 * dl / avgdl))
    assert bm.get_scores(["a"])[0] == pytest.approx(expected, rel=1e-14)
    assert bm.get_scores(["a", "a"])[0] == pytest.approx(2 * expected, rel=1e-14)


def test_negative_idf_floor_uses_mean_of_all_unfloored_idf() -> None:
    corpus = [["x", "a"], ["x", "b"], ["x"], ["c"]]  # df(x)=3 > N/2 -> negative idf
    bm = BM25Okapi(corpus, epsilon=0.25)
    raw = {
        t: math.log(4 - df + 0.5) - math.log(df + 0.5)
        for t, df in {"x": 3, "a": 1, "b": 1, "c": 1}.items()
    }
    mean = sum(raw.values()) / 4
    assert bm.average_idf == pytest.approx(mean, rel=1e-14)
    assert bm.idf[bm.vocab["x"]] == pytest.approx(0.25 * mean, rel=1e-14)
    assert_parity(bm.get_scores(["x"]), rank_bm25.BM25Okapi(corpus).get_scores(["x"]))


def test_term_in_every_document_gets_epsilon_floor() -> None:
    corpus = [["x", "a"], ["x", "b"], ["x", "c", "d"]]
    bm = BM25Okapi(corpus)
    assert_parity(bm.get_scores(["x"]), rank_bm25.BM25Okapi(corpus).get_scores(["x"]))
    assert bm.idf[bm.vocab["x"]] == pytest.approx(0.25 * bm.average_idf)


def test_df_half_of_n_has_zero_idf() -> None:
    corpus = [["x"], ["x", "y"], ["z"], ["w"]]  # df(x) = 2 = N/2
    bm = BM25Okapi(corpus)
    assert bm.idf[bm.vocab["x"]] == 0.0
    assert (bm.get_scores(["x"]) == 0).all()
    assert_parity(bm.get_scores(["x", "y"]), rank_bm25.BM25Okapi(corpus).get_scores(["x", "y"]))


def test_single_document() -> None:
    corpus = [["a", "b", "b"]]
    bm = BM25Okapi(corpus)
    assert_parity(bm.get_scores(["b", "a"]), rank_bm25.BM25Okapi(corpus).get_scores(["b", "a"]))
    assert bm.get_scores(["b"])[0] < 0  # N = 1: every idf is floored to eps * (negative mean)


def test_empty_document_and_empty_query() -> None:
    corpus = [[], ["a"], ["b", "c"], []]
    bm = BM25Okapi(corpus)
    rb = rank_bm25.BM25Okapi(corpus)
    assert_parity(bm.get_scores(["a", "c"]), rb.get_scores(["a", "c"]))
    assert bm.get_scores([]).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert bm.doc_len.tolist() == [0, 1, 2, 0]


def test_empty_corpus_returns_empty_arrays() -> None:
    with pytest.raises(ZeroDivisionError):  # the oracle cannot do this; we define it
        rank_bm25.BM25Okapi([])
    bm = BM25Okapi([])
    assert bm.get_scores(["a"]).shape == (0,)
    idx, sc = bm.top_k(["a"], 5)
    assert idx.shape == (0,) and sc.shape == (0,)
    assert bm.get_batch_scores([["a"], []]).shape == (2, 0)


def test_all_empty_documents_score_zero() -> None:
    bm = BM25Okapi([[], []])
    assert bm.get_scores(["a"]).tolist() == [0.0, 0.0]
    assert bm.avgdl == 0.0 and bm.average_idf == 0.0


def test_top_k_ties_broken_by_index_and_k_clamped() -> None:
    bm = BM25Okapi([["a"], ["b"], ["a"], ["c"], ["a"], ["d"], ["e"]])
    idx, sc = bm.top_k(["a"], 2)
    assert idx.tolist() == [0, 2]
    assert sc[0] == sc[1] > 0
    idx, _ = bm.top_k(["a"], 100)
    assert idx.tolist() == [0, 2, 4, 1, 3, 5, 6]
    assert bm.top_k(["a"], 0)[0].size == 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 3, 10, 57])
def test_top_k_from_scores_large_arrays_with_ties(seed: int, k: int) -> None:
    # n large enough for the sampled-threshold path (sqrt(n / k) >= 4), many exact ties
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1000, 6000))
    kind = seed % 3
    if kind == 0:  # mostly zeros, a few positive ties
        scores = np.where(rng.random(n) < 0.01, rng.choice([1.0, 2.0], n), 0.0)
    elif kind == 1:  # dense positives with heavy ties
        scores = rng.choice([0.5, 1.0, 1.5, 2.0, 2.5], n)
    else:  # positives, zeros and negatives
        scores = rng.choice([-1.0, -0.5, 0.0, 0.25, 3.0], n, p=[0.3, 0.3, 0.38, 0.015, 0.005])
    expected = sorted(range(n), key=lambda i: (-scores[i], i))[:k]
    idx, sc = top_k_from_scores(scores, k)
    assert idx.tolist() == expected
    assert sc.tolist() == scores[expected].tolist()


def test_top_k_on_a_larger_corpus_matches_brute_force() -> None:
    rng = np.random.default_rng(11)
    bm = BM25Okapi(random_corpus(rng, 2500, 300, 25))
    for _ in range(20):
        q = [f"t{j}" for j in rng.integers(0, 320, size=int(rng.integers(1, 6)))]
        scores = bm.get_scores(q)
        for k in (1, 10, 100):
            expected = sorted(range(bm.corpus_size), key=lambda i: (-scores[i], i))[:k]
            assert bm.top_k(q, k)[0].tolist() == expected


def test_top_k_batch_equals_single() -> None:
    rng = np.random.default_rng(7)
    corpus = random_corpus(rng, 300, 80, 20)
    bm = BM25Okapi(corpus)
    queries = [[f"t{j}" for j in rng.integers(0, 90, size=4)] for _ in range(40)]
    batch = bm.top_k_batch(queries, 10)
    for q, (bi, bs) in zip(queries, batch, strict=True):
        si, ss = bm.top_k(q, 10)
        assert bi.tolist() == si.tolist()
        np.testing.assert_allclose(bs, ss, rtol=1e-12, atol=0)


def test_add_and_remove_equal_fresh_build_exactly() -> None:
    rng = np.random.default_rng(3)
    corpus = random_corpus(rng, 60, 40, 15)
    extra = random_corpus(rng, 25, 55, 15)
    queries = [[f"t{j}" for j in rng.integers(0, 60, size=5)] for _ in range(20)]
    grown = BM25Okapi(corpus).add_documents(extra)
    fresh = BM25Okapi(corpus + extra)
    for q in queries:
        assert grown.get_scores(q).tolist() == fresh.get_scores(q).tolist()
    drop = [0, 5, 6, 70, 84]
    shrunk = grown.remove_documents(drop)
    kept = [d for i, d in enumerate(corpus + extra) if i not in set(drop)]
    fresh2 = BM25Okapi(kept)
    assert sorted(shrunk.vocab) == sorted(fresh2.vocab)  # vanished terms leave the vocabulary
    for q in queries:
        assert shrunk.get_scores(q).tolist() == fresh2.get_scores(q).tolist()
        assert_parity(shrunk.get_scores(q), rank_bm25.BM25Okapi(kept).get_scores(q))


def test_from_counts_roundtrip_and_inputs_not_mutated() -> None:
    corpus = [["a", "b"], ["b", "c", "c"], ["d"]]
    snapshot = json.dumps(corpus)
    bm = BM25Okapi(corpus)
    assert json.dumps(corpus) == snapshot
    counts = bm.counts
    again = BM25Okapi.from_counts(counts, bm.terms, bm.k1, bm.b, bm.epsilon)
    assert again.get_scores(["c", "a"]).tolist() == bm.get_scores(["c", "a"]).tolist()
    assert (counts != bm.counts).nnz == 0
    with pytest.raises(ConfigurationError, match="columns"):
        BM25Okapi.from_counts(counts, ["a"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"k1": -1.0}, "k1"), ({"b": 1.5}, "b must"), ({"epsilon": math.nan}, "epsilon")],
)
def test_invalid_parameters_name_the_value(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        BM25Okapi([["a"]], **kwargs)


def test_string_instead_of_tokens_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="document 1 is a string"):
        BM25Okapi([["a"], "not tokens"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="query is a string"):
        BM25Okapi([["a"]]).get_scores("a b")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="document indices"):
        BM25Okapi([["a"]]).remove_documents([3])


@pytest.mark.corpus
def test_real_corpus_parity_whitespace_tokens() -> None:
    path = SHARED / "eval" / "lhcs_construction" / "corpus.jsonl"
    if not path.is_file():
        pytest.skip("../shared/eval is not present")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:400]]
    corpus = [(r.get("title", "") + " " + r["text"]).split() for r in rows]
    ours = BM25Okapi(corpus)
    theirs = rank_bm25.BM25Okapi(corpus)
    rng = np.random.default_rng(0)
    for i in rng.integers(0, len(corpus), size=25):
        q = list(rng.choice(corpus[i], size=min(6, len(corpus[i])))) if corpus[i] else ["x"]
        assert_parity(ours.get_scores(q), theirs.get_scores(q))
