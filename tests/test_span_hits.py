"""Span hit metrics (``llama_index_car.evaluation.span_hits``) against hand-computed values,
brute-force enumeration and scipy (binomtest, poisson_binom) as oracles."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binomtest, poisson_binom

from llama_index_car._errors import ConfigurationError
from llama_index_car.evaluation.span_hits import (
    SpanQuery,
    best_rank,
    best_set,
    first_span_test,
    hit_at,
    overlap_shares,
    random_hit_expectation,
    random_order_test,
    random_rr_expectation,
    summarize,
)


def test_overlap_shares_are_exact_set_fractions() -> None:
    answer = ["경사", "이하", "경사", "1:1.5"]  # a set of 3
    spans = [["경사"], ["1:1.5", "이하", "경사", "기준"], [], ["이하", "이하"]]
    assert overlap_shares(answer, spans) == [
        Fraction(1, 3), Fraction(3, 3), Fraction(0), Fraction(1, 3)
    ]
    assert overlap_shares([], spans) == [Fraction(0)] * 4


def test_best_set_ties_and_skips() -> None:
    assert best_set([Fraction(1, 3), Fraction(2, 3), Fraction(2, 3)]) == {1, 2}
    assert best_set([Fraction(0), Fraction(0)]) == frozenset()  # zero overlap everywhere
    assert best_set([Fraction(1)]) == frozenset()  # one span: nothing to rank
    assert best_set([]) == frozenset()
    # exact fractions: 1/3 + 1/3 + 1/3 ties with 1 where floats would not
    assert best_set([Fraction(1, 3) * 3, Fraction(1)]) == {0, 1}


def test_hit_at_and_best_rank() -> None:
    ranking = (3, 1, 0, 2)
    assert not hit_at(ranking, {0, 2}, 1)
    assert not hit_at(ranking, {0, 2}, 2)
    assert hit_at(ranking, {0, 2}, 3)
    assert best_rank(ranking, {0, 2}) == 3
    assert best_rank(ranking, {3}) == 1
    with pytest.raises(ConfigurationError):
        hit_at(ranking, {0}, 0)
    with pytest.raises(ConfigurationError):
        best_rank(ranking, {7})


@pytest.mark.parametrize("n", range(1, 8))
def test_random_expectations_equal_enumeration(n: int) -> None:
    """Over every permutation of n spans with the first b best: E[hit@k] and E[1/rank]."""
    for b in range(1, n + 1):
        best = set(range(b))
        perms = list(itertools.permutations(range(n)))
        for k in (1, 2, 3):
            brute = sum(hit_at(p, best, k) for p in perms) / len(perms)
            assert random_hit_expectation(n, b, k) == pytest.approx(brute, abs=1e-12)
        brute_rr = sum(1.0 / best_rank(p, best) for p in perms) / len(perms)
        assert random_rr_expectation(n, b) == pytest.approx(brute_rr, abs=1e-12)


def test_random_hit_expectation_formula() -> None:
    assert random_hit_expectation(10, 2, 1) == 2 / 10
    # hypergeometric: 1 - C(8,3)/C(10,3) = 1 - 56/120
    assert random_hit_expectation(10, 2, 3) == pytest.approx(1 - 56 / 120)
    assert random_hit_expectation(2, 1, 3) == 1.0  # k clipped to n
    with pytest.raises(ConfigurationError):
        random_hit_expectation(3, 0, 1)
    with pytest.raises(ConfigurationError):
        random_hit_expectation(3, 4, 1)


def test_first_span_test_is_exact_mcnemar() -> None:
    a = [True] * 7 + [False] * 2 + [True] * 5 + [False] * 3
    b = [False] * 7 + [True] * 2 + [True] * 5 + [False] * 3
    res = first_span_test(a, b)
    assert (res["n10"], res["n01"]) == (7, 2)
    assert res["p"] == pytest.approx(binomtest(7, 9, 0.5, alternative="greater").pvalue)
    # by hand: P(X >= 7 | n = 9, p = 1/2) = (C(9,7) + C(9,8) + C(9,9)) / 2^9
    assert res["p"] == pytest.approx((36 + 9 + 1) / 512)
    assert first_span_test([True, False], [True, False])["p"] == 1.0
    with pytest.raises(ConfigurationError):
        first_span_test([True], [True, False])


def test_random_order_test_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    probs = rng.uniform(0.02, 0.6, size=60).tolist()
    hits = (rng.uniform(size=60) < 0.5).tolist()
    s = sum(hits)
    assert random_order_test(hits, probs) == pytest.approx(
        float(poisson_binom(probs).sf(s - 1)), rel=1e-9
    )
    # equal probabilities: the binomial test
    eq = [0.2] * 30
    h = [True] * 12 + [False] * 18
    assert random_order_test(h, eq) == pytest.approx(
        binomtest(12, 30, 0.2, alternative="greater").pvalue, rel=1e-9
    )
    assert random_order_test([False, False], [0.5, 0.5]) == 1.0
    with pytest.raises(ConfigurationError):
        random_order_test([True], [1.5])


def test_summarize_by_hand() -> None:
    queries = [
        SpanQuery("a", 4, frozenset({2}), (2, 0, 1, 3)),  # top-1 hit, first span missed
        SpanQuery("b", 3, frozenset({0, 1}), (2, 1, 0)),  # rank 2, first span hit
        SpanQuery("c", 5, frozenset({4}), (0, 1, 2, 3, 4)),  # rank 5, nothing
    ]
    s = summarize(queries)
    assert s["n"] == 3
    assert s["top1"] == pytest.approx(1 / 3)
    assert s["top3"] == pytest.approx(2 / 3)
    assert s["first"] == pytest.approx(1 / 3)
    assert s["random_top1"] == pytest.approx((1 / 4 + 2 / 3 + 1 / 5) / 3)
    e3 = [1 - math.comb(3, 3) / math.comb(4, 3), 1.0, 1 - math.comb(4, 3) / math.comb(5, 3)]
    assert s["random_top3"] == pytest.approx(sum(e3) / 3)
    assert s["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 5) / 3)
    assert s["median_rank"] == 2.0
    assert s["top1_vs_first"] == {"n10": 1, "n01": 1, "p": 0.75}
    assert s["p_top1_vs_random"] == pytest.approx(
        float(poisson_binom([1 / 4, 2 / 3, 1 / 5]).sf(0))
    )
    empty = summarize([])
    assert empty["n"] == 0 and empty["top1"] is None and empty["p_top1_vs_first"] is None


def test_span_query_validates() -> None:
    with pytest.raises(ConfigurationError):
        SpanQuery("q", 3, frozenset({1}), (0, 1))  # not every span ranked
    with pytest.raises(ConfigurationError):
        SpanQuery("q", 3, frozenset(), (0, 1, 2))  # empty best set
