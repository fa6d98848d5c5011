"""Span hit metrics: does the span ranker put the span that best covers the answer first?

For one query whose gold passage was retrieved, the passage is cut into ``n`` spans
(:func:`~llama_index_car.spans.node_spans`) and the span ranker orders them. The *best set*
is the set of spans that best cover the reference answer:

    share(s) = |M(answer) ∩ M(s)| / |M(answer)|
    best     = {s : share(s) = max_t share(t)}       (ties: several best spans)

where ``M(·)`` is the *set* of Kiwi content morphemes (the overlap definition of
:mod:`llama_index_car.evaluation.overlap`). Shares are exact fractions, so ties are exact.
A passage is not scored when it has one span (nothing to rank) or when every share is 0
(no span covers any of the answer); :func:`best_set` returns an empty set then.

Per query, with ``b = |best|`` and the ranker's order ``r_1, r_2, …`` (span indices):

* ``hit@k``          = 1 if any of ``r_1 … r_k`` is in ``best`` (:func:`hit_at`);
* first-span baseline = 1 if span 0 (the passage's first span) is in ``best``;
* random baseline     = the expectation of ``hit@k`` for a uniformly random order:
  ``1 − C(n − b, k) / C(n, k)`` (hypergeometric: no best span among ``k`` drawn without
  replacement); ``b / n`` for ``k = 1`` (:func:`random_hit_expectation`);
* best-span rank      = the 1-based position of the first best span (:func:`best_rank`);
  its random expectation of ``1 / rank`` is ``Σ_r P(R = r) / r`` with
  ``P(R = r) = C(n − r, b − 1) / C(n, b)`` (:func:`random_rr_expectation`).

Paired tests over queries (:func:`summarize`), one-sided "ranker better":

* ranker ``hit@1`` vs first-span hit — exact McNemar: ``scipy.stats.binomtest(n10, n10 + n01,
  0.5, alternative="greater")`` on the discordant pairs (n10: ranker hit, first span missed);
* ranker ``hit@k`` vs a random span order — the exact test of the null "the ranker's top ``k``
  is a uniformly random draw of the passage's spans": then ``hit_i ~ Bernoulli(E_i)``
  independently, the hit count is Poisson-binomial, and ``p = P(Σ hit_i ≥ observed)``
  (:func:`random_order_test`; with equal ``E_i`` it is ``scipy.stats.binomtest``'s
  ``alternative="greater"`` p). It is the exact form of the randomization test that reorders
  each passage's spans at random. A Wilcoxon signed-rank test of ``hit − E`` is not used: it
  tests the *median* difference, which is negative whenever most queries miss, however far
  above chance the hit rate is.

>>> from fractions import Fraction
>>> shares = overlap_shares(["경사", "1:1.5", "이하"], [["배수"], ["경사", "이하"], ["이하"]])
>>> shares
[Fraction(0, 1), Fraction(2, 3), Fraction(1, 3)]
>>> best_set(shares)
frozenset({1})
>>> random_hit_expectation(3, 1, 1), round(random_hit_expectation(4, 1, 3), 4)
(0.3333333333333333, 0.75)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from llama_index_car._errors import ConfigurationError

#: the ``k`` of the top-k hit rates reported
TOP_KS: tuple[int, ...] = (1, 3)


def overlap_shares(answer: Iterable[str], spans: Sequence[Iterable[str]]) -> list[Fraction]:
    """``|set(answer) ∩ set(span)| / |set(answer)|`` for every span (0 for an empty answer).

    >>> overlap_shares(["a", "b", "a"], [["a"], ["b", "a", "c"], []])
    [Fraction(1, 2), Fraction(1, 1), Fraction(0, 1)]
    """
    a = set(answer)
    if not a:
        return [Fraction(0)] * len(spans)
    return [Fraction(len(a & set(s)), len(a)) for s in spans]


def best_set(shares: Sequence[Fraction | float]) -> frozenset[int]:
    """Indices of the spans with the maximal share; empty when there are fewer than two spans
    or every share is 0 (the passage is skipped).

    >>> best_set([0.5, 0.5, 0.25]), best_set([0.0, 0.0]), best_set([1.0])
    (frozenset({0, 1}), frozenset(), frozenset())
    """
    if len(shares) < 2:
        return frozenset()
    top = max(shares)
    if top <= 0:
        return frozenset()
    return frozenset(i for i, s in enumerate(shares) if s == top)


def hit_at(ranking: Sequence[int], best: Iterable[int], k: int) -> bool:
    """Whether any of the first ``k`` span indices of ``ranking`` is in ``best``.

    >>> hit_at([2, 0, 1], {0}, 1), hit_at([2, 0, 1], {0}, 2)
    (False, True)
    """
    if k < 1:
        raise ConfigurationError(f"k={k} must be >= 1")
    chosen = set(best)
    return any(i in chosen for i in ranking[:k])


def best_rank(ranking: Sequence[int], best: Iterable[int]) -> int:
    """1-based position in ``ranking`` of its first span in ``best``.

    >>> best_rank([2, 0, 1], {0, 1})
    2
    """
    chosen = set(best)
    for pos, i in enumerate(ranking, start=1):
        if i in chosen:
            return pos
    raise ConfigurationError("no span of the best set is in the ranking")


def _check(n: int, b: int) -> None:
    if not 1 <= b <= n:
        raise ConfigurationError(f"need 1 <= best ({b}) <= spans ({n})")


def random_hit_expectation(n: int, b: int, k: int) -> float:
    """``E[hit@k]`` of a uniformly random order of ``n`` spans, ``b`` of them best:
    ``1 − C(n − b, k) / C(n, k)`` (``k`` clipped to ``n``); ``b / n`` for ``k = 1``.

    >>> random_hit_expectation(5, 2, 1), random_hit_expectation(5, 2, 3)
    (0.4, 0.9)
    """
    _check(n, b)
    if k < 1:
        raise ConfigurationError(f"k={k} must be >= 1")
    k = min(k, n)
    return float(1 - Fraction(math.comb(n - b, k), math.comb(n, k)))


def random_rr_expectation(n: int, b: int) -> float:
    """``E[1 / rank]`` of the first best span under a uniformly random order:
    ``Σ_{r=1}^{n−b+1} C(n − r, b − 1) / C(n, b) / r``.

    >>> random_rr_expectation(2, 1), random_rr_expectation(3, 3)
    (0.75, 1.0)
    """
    _check(n, b)
    total = math.comb(n, b)
    return float(sum(Fraction(math.comb(n - r, b - 1), total * r) for r in range(1, n - b + 2)))


@dataclass(frozen=True)
class SpanQuery:
    """One scored query: its gold passage's span count, best set and the ranker's order of
    the span indices (best first)."""

    qid: str
    n_spans: int
    best: frozenset[int]
    ranking: tuple[int, ...]

    def __post_init__(self) -> None:
        _check(self.n_spans, len(self.best))
        if sorted(self.ranking) != list(range(self.n_spans)):
            raise ConfigurationError(f"{self.qid}: the ranking must order every span once")


def first_span_test(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar (one-sided "a better") on paired hits: the binomial test of ``n10`` (a
    hit, b missed) among the ``n10 + n01`` discordant pairs at ``p = 0.5``
    (``scipy.stats.binomtest``, ``alternative="greater"``); ``p = 1`` with no discordant pair.

    >>> first_span_test([True, True, True, False], [False, False, False, True])
    {'n10': 3, 'n01': 1, 'p': 0.3125}
    """
    if len(a) != len(b):
        raise ConfigurationError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    n10 = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    n01 = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    if n10 + n01 == 0:
        return {"n10": 0, "n01": 0, "p": 1.0}
    from scipy.stats import binomtest

    return {"n10": n10, "n01": n01,
            "p": float(binomtest(n10, n10 + n01, 0.5, alternative="greater").pvalue)}


def random_order_test(hits: Sequence[bool], probs: Sequence[float]) -> float:
    """``P(S ≥ Σ hits)`` for ``S = Σ Bernoulli(probs_i)`` independent (Poisson-binomial upper
    tail, by convolution): the one-sided p of hits above what a random order gives.

    >>> random_order_test([True, False], [0.5, 0.5])   # P(S >= 1) = 1 - 1/4
    0.75
    >>> random_order_test([True, True], [0.5, 0.25])   # P(S = 2) = 1/8
    0.125
    """
    if len(hits) != len(probs):
        raise ConfigurationError(f"paired samples differ in length: {len(hits)} vs {len(probs)}")
    if any(not 0.0 <= p <= 1.0 for p in probs):
        raise ConfigurationError("probabilities must be in [0, 1]")
    import numpy as np

    dist = np.ones(1)
    for p in probs:
        dist = np.concatenate([dist * (1.0 - p), [0.0]]) + np.concatenate([[0.0], dist * p])
    observed = sum(1 for h in hits if h)
    return float(min(1.0, dist[observed:].sum()))


def _mean(x: Sequence[float]) -> float | None:
    return statistics.fmean(x) if x else None


def summarize(queries: Sequence[SpanQuery]) -> dict[str, Any]:
    """Hit rates, baselines, best-span ranks and the paired tests (module docstring) over
    ``queries``; ``None`` for a mean or p over no query.

    >>> q = [SpanQuery("a", 3, frozenset({1}), (1, 0, 2)), SpanQuery("b", 2, frozenset({0}), (1, 0))]
    >>> s = summarize(q)
    >>> s["n"], s["top1"], s["first"], round(s["random_top1"], 4), s["mrr"], s["median_rank"]
    (2, 0.5, 0.5, 0.4167, 0.75, 1.5)
    """
    out: dict[str, Any] = {"n": len(queries)}
    first = [0 in q.best for q in queries]
    out["first"] = _mean([float(x) for x in first])
    hits: dict[int, list[bool]] = {}
    for k in TOP_KS:
        hits[k] = [hit_at(q.ranking, q.best, k) for q in queries]
        expected = [random_hit_expectation(q.n_spans, len(q.best), k) for q in queries]
        out[f"top{k}"] = _mean([float(x) for x in hits[k]])
        out[f"random_top{k}"] = _mean(expected)
        out[f"p_top{k}_vs_random"] = random_order_test(hits[k], expected) if queries else None
    ranks = [best_rank(q.ranking, q.best) for q in queries]
    out["mrr"] = _mean([1.0 / r for r in ranks])
    out["random_mrr"] = _mean([random_rr_expectation(q.n_spans, len(q.best)) for q in queries])
    out["median_rank"] = float(statistics.median(ranks)) if ranks else None
    out["mean_spans"] = _mean([float(q.n_spans) for q in queries])
    out["mean_best"] = _mean([float(len(q.best)) for q in queries])
    test = first_span_test(hits[1], first) if queries else {"n10": 0, "n01": 0, "p": None}
    out["top1_vs_first"] = test
    out["p_top1_vs_first"] = test["p"]
    return out


def record(q: SpanQuery) -> dict[str, Any]:
    """``q`` as a JSON-ready dict (the best set sorted)."""
    d = asdict(q)
    d["best"] = sorted(q.best)
    d["ranking"] = list(q.ranking)
    return d
