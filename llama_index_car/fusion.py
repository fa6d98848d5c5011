"""Weighted reciprocal rank fusion over ranked id lists (pure; no LlamaIndex import).

Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009) with one weight per list, as
used for the hybrid and CAR channels of the paper (§4.3, §5.8):

.. math::

    \\mathrm{score}(d) = \\sum_i \\frac{w_i}{k + \\mathrm{rank}_i(d)}

* ranks are **1-based** in each list's returned order (the first id has rank 1);
* a document absent from list ``i`` contributes 0 for that list;
* an id repeated inside one list counts once, at its first (best) rank; the rank is the
  1-based *position* in the list as returned, so a duplicate still occupies its slot;
* the weight multiplies ``1 / (k + rank)``; equal weights give plain RRF, and any two equal
  weights give the same *order* (alpha = 0.5 is order-equivalent to unweighted RRF);
* results are sorted by score descending, then id ascending (deterministic ties).

>>> best_id, best_score = weighted_rrf([["a", "b"], ["b", "c"]])[0]
>>> best_id, best_score == 1 / (60 + 2) + 1 / (60 + 1)
('b', True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llama_index_car._errors import ConfigurationError

__all__ = [
    "DEFAULT_RRF_K", "criterion_ranking", "span_fusion", "span_ranks", "span_zscore_fusion",
    "standardize", "strictly_decreasing", "validate_weights", "weighted_rrf", "zscore_fusion",
]

DEFAULT_RRF_K = 60


def validate_weights(weights: Sequence[float] | None, n_lists: int) -> list[float]:
    """Return the weights as floats, one per list; ``None`` means all 1.0.

    Raises :class:`ConfigurationError` when the count differs from ``n_lists``, a weight is
    negative or not finite, or all weights are zero.

    >>> validate_weights(None, 2)
    [1.0, 1.0]
    >>> validate_weights([0.3, 0.7], 2)
    [0.3, 0.7]
    """
    if weights is None:
        return [1.0] * n_lists
    out: list[float] = []
    for i, w in enumerate(weights):
        try:
            value = float(w)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"weights[{i}]={w!r} is not a number; pass one non-negative float per list"
            ) from exc
        if not math.isfinite(value) or value < 0:
            raise ConfigurationError(
                f"weights[{i}]={w!r} is invalid; weights must be finite and >= 0"
            )
        out.append(value)
    if len(out) != n_lists:
        raise ConfigurationError(
            f"got {len(out)} weights for {n_lists} ranked lists; pass exactly one weight per list"
        )
    if n_lists and not any(out):
        raise ConfigurationError(
            f"weights={list(weights)!r} are all zero; at least one weight must be > 0"
        )
    return out


def weighted_rrf(
    ranked_lists: Sequence[Sequence[str]],
    weights: Sequence[float] | None = None,
    rrf_k: int = DEFAULT_RRF_K,
) -> list[tuple[str, float]]:
    """Fuse ranked id lists by weighted reciprocal rank fusion.

    Args:
        ranked_lists: one sequence of document ids per channel, best first.
        weights: one non-negative weight per list (default: all 1.0, i.e. plain RRF).
        rrf_k: the RRF constant ``k`` (default 60, as in Cormack et al. and the paper);
            must be >= 0.

    Returns:
        ``[(doc_id, score), ...]`` with ``score = Σ_i w_i / (rrf_k + rank_i)``, 1-based ranks,
        sorted by score descending then id ascending. Documents whose total score is 0 (they
        appear only in zero-weight lists) are still returned, after the others.

    >>> weighted_rrf([["a", "b"], ["c", "a"]], weights=[0.5, 0.5], rrf_k=60)[0][0]
    'a'
    """
    if isinstance(ranked_lists, (str, bytes)):
        raise ConfigurationError("ranked_lists must be a sequence of id sequences, not a string")
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or rrf_k < 0:
        raise ConfigurationError(f"rrf_k={rrf_k!r} is invalid; use a number >= 0 (default 60)")
    lists = [list(lst) for lst in ranked_lists]
    for i, lst in enumerate(ranked_lists):
        if isinstance(lst, (str, bytes)):
            raise ConfigurationError(
                f"ranked_lists[{i}] is a string; pass a sequence of ids such as ['d1', 'd2']"
            )
    w = validate_weights(weights, len(lists))
    scores: dict[str, float] = {}
    for weight, lst in zip(w, lists, strict=True):
        seen: set[str] = set()
        for position, doc_id in enumerate(lst, start=1):
            if doc_id in seen:
                continue  # a duplicate counts once, at its first rank (position kept)
            seen.add(doc_id)
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (rrf_k + position)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def span_ranks(span_scores: Sequence[float | None]) -> dict[int, int]:
    """``{position: 1-based rank}`` of the scored entries (higher first, ties by position;
    ``None`` entries unranked).

    >>> span_ranks([0.1, None, 0.9, 0.1])
    {2: 1, 0: 2, 3: 3}
    """
    scored = sorted(
        (i for i, s in enumerate(span_scores) if s is not None),
        key=lambda i: (-float(span_scores[i]), i),  # type: ignore[arg-type]
    )
    return {i: r for r, i in enumerate(scored, start=1)}


def span_fusion(
    pool: Sequence[str],
    span_scores: Sequence[float | None],
    weight: float,
    rrf_k: int = DEFAULT_RRF_K,
) -> list[tuple[str, float]]:
    """Re-order a ranked pool by fusing its order with the order of its span scores.

    ``score(d) = (1 − w) / (rrf_k + r_pool(d)) + w / (rrf_k + r_span(d))`` where ``r_pool`` is
    d's 1-based rank in ``pool`` and ``r_span`` its 1-based rank by span score within the pool
    (higher first, ties by ``r_pool``); a node without a span score (``None``) gets no span
    term. Sorted by score descending, then by ``r_pool``. ``w = 0`` returns the pool's order.

    >>> [d for d, _ in span_fusion(["a", "b", "c"], [0.1, 0.9, None], weight=0.6)]
    ['b', 'a', 'c']
    """
    if len(pool) != len(span_scores):
        raise ConfigurationError("span_fusion: one span score (or None) per pool entry")
    if isinstance(weight, bool) or not 0.0 <= float(weight) <= 1.0:
        raise ConfigurationError(f"weight={weight!r} must be in [0, 1]")
    if len(set(pool)) != len(pool):
        raise ConfigurationError("span_fusion: pool ids must be unique")
    w = float(weight)
    span_rank = span_ranks(span_scores)
    total = [
        ((1.0 - w) / (rrf_k + i + 1) + (w / (rrf_k + span_rank[i]) if i in span_rank else 0.0), i)
        for i in range(len(pool))
    ]
    total.sort(key=lambda t: (-t[0], t[1]))
    return [(pool[i], score) for score, i in total]


def standardize(scores: Sequence[float]) -> list[float]:
    """``(x − mean) / sd`` of each score (population sd, as ``scipy.stats.zscore``); all 0.0
    when the scores are equal (or there is one).

    >>> standardize([3.0, 1.0])
    [1.0, -1.0]
    >>> standardize([2.0, 2.0])
    [0.0, 0.0]
    """
    values = [float(x) for x in scores]
    if not values:
        return []
    mean = math.fsum(values) / len(values)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values))
    if not sd > 0 or not math.isfinite(sd):
        return [0.0] * len(values)
    return [(x - mean) / sd for x in values]


def zscore_fusion(
    scored_lists: Sequence[Sequence[tuple[str, float]]],
    weights: Sequence[float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse scored lists by a weighted sum of standardised scores (the offline CAR's fusion).

    Each list's scores are standardised over that list (:func:`standardize`); a document
    absent from a list gets that list's lowest standardised score (it ranks below everything
    the channel returned); an id repeated inside one list counts once, at its first entry.
    ``score(d) = Σ_i w_i · z_i(d)``; sorted by score descending, then id ascending.

    Unlike rank fusion it follows each query's score shapes: a hit far above the rest of its
    channel gets a large ``z`` and keeps its lead, while hits a channel scores alike get
    alike ``z`` (rank fusion spreads them ``1/(k + r)`` apart). Scores must be similarities (higher is better); any positive affine rescaling of a
    channel's scores gives the same result.

    >>> fused = zscore_fusion([[("a", 9.0), ("b", 1.0), ("c", 0.0)],
    ...                        [("b", 0.82), ("c", 0.81), ("a", 0.80)]], [0.5, 0.5])
    >>> [(d, round(s, 3)) for d, s in fused]
    [('b', 0.323), ('a', 0.091), ('c', -0.414)]
    """
    w = validate_weights(weights, len(scored_lists))
    per_list: list[dict[str, float]] = []
    floors: list[float] = []
    for i, lst in enumerate(scored_lists):
        if isinstance(lst, (str, bytes)):
            raise ConfigurationError(f"scored_lists[{i}] is a string; pass (id, score) pairs")
        first: dict[str, float] = {}
        for doc_id, score in lst:
            if not math.isfinite(float(score)):
                raise ConfigurationError(
                    f"scored_lists[{i}]: the score of {doc_id!r} is {score!r}; scores must be "
                    "finite"
                )
            first.setdefault(doc_id, float(score))
        z = standardize(list(first.values()))
        per_list.append(dict(zip(first, z, strict=True)))
        floors.append(min(z, default=0.0))
    ids = {d for scores in per_list for d in scores}
    fused = {
        d: math.fsum(wi * scores.get(d, floor)
                     for wi, scores, floor in zip(w, per_list, floors, strict=True))
        for d in ids
    }
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def span_zscore_fusion(
    pool: Sequence[str],
    pool_scores: Sequence[float],
    span_scores: Sequence[float | None],
    weight: float,
) -> list[tuple[str, float]]:
    """Re-order a pool by its fused score plus ``weight`` × its standardised span score.

    ``score(d) = s(d) + w · z(d)``: ``s`` is d's score in the pool (the offline CAR's
    :func:`zscore_fusion` score), ``z`` its best span cosine standardised over the pool's
    span scores; a node without spans (``None``) gets the pool's lowest ``z``. Sorted by
    score descending, ties by pool position. ``w = 0`` returns the pool's order.

    >>> [d for d, _ in span_zscore_fusion(["a", "b"], [0.5, 0.4], [0.80, 0.90], weight=0.2)]
    ['b', 'a']
    """
    if not len(pool) == len(pool_scores) == len(span_scores):
        raise ConfigurationError("span_zscore_fusion: one score and one span score per entry")
    if isinstance(weight, bool) or not math.isfinite(float(weight)) or float(weight) < 0:
        raise ConfigurationError(f"weight={weight!r} must be a finite number >= 0")
    if len(set(pool)) != len(pool):
        raise ConfigurationError("span_zscore_fusion: pool ids must be unique")
    scored = [i for i, s in enumerate(span_scores) if s is not None]
    z = dict(zip(scored, standardize([float(span_scores[i]) for i in scored]),  # type: ignore[arg-type]
                 strict=True))
    floor = min(z.values(), default=0.0)
    total = [(float(pool_scores[i]) + float(weight) * z.get(i, floor), i)
             for i in range(len(pool))]
    total.sort(key=lambda t: (-t[0], t[1]))
    return [(pool[i], score) for score, i in total]


def criterion_ranking(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    beta: float,
    *,
    span_scores: Callable[[Sequence[str]], Sequence[float | None]] | None = None,
    span_weight: float = 0.0,
    span_pool: int = 50,
) -> list[tuple[str, float]]:
    """The offline CAR's ranking of the union of two scored channel lists (best first).

    1. ``fused = zscore_fusion([dense, lexical], [β, 1 − β])`` (:func:`zscore_fusion`);
    2. with ``span_scores`` and ``span_weight`` γ > 0: the first ``span_pool`` of ``fused``
       re-ranked by ``s(d) + γ·z(span(d))`` (:func:`span_zscore_fusion`, ``span_scores(ids)``
       giving each pool node's best span cosine, ``None`` for a node without spans); the
       rest follows in fused order with its fused scores.

    Both ``OfflineCriterionRetriever`` and ``benchmarks/span_cv.py`` rank through this
    function, so the benchmark's figures are the retriever's.

    >>> criterion_ranking([("a", 0.9), ("b", 0.5)], [("b", 3.0), ("c", 1.0)], 0.3)[0][0]
    'b'
    >>> spans = lambda ids: [{"a": 0.9, "b": 0.1, "c": 0.2}[d] for d in ids]
    >>> [d for d, _ in criterion_ranking([("a", 0.9), ("b", 0.5)], [("b", 3.0), ("c", 1.0)],
    ...                                   0.3, span_scores=spans, span_weight=2.0)]
    ['a', 'b', 'c']
    """
    if isinstance(span_pool, bool) or not isinstance(span_pool, int) or span_pool < 1:
        raise ConfigurationError(f"span_pool={span_pool!r} must be an integer >= 1")
    fused = zscore_fusion([dense, lexical], [beta, 1.0 - beta])
    if span_scores is None or span_weight == 0 or not fused:
        return fused
    head, tail = fused[:span_pool], fused[span_pool:]
    ids = [d for d, _ in head]
    scores = list(span_scores(ids))
    return span_zscore_fusion(ids, [s for _, s in head], scores, span_weight) + tail


def strictly_decreasing(scores: Sequence[float]) -> list[float]:
    """``scores`` in list order made strictly decreasing by the smallest change: each score
    that is not below its predecessor becomes the next float below it.

    Re-orderings (span fusion ties broken by pool rank, the BM25 lead, a re-ranked head above
    an unchanged tail) keep their order this way in anything that sorts hits by score — an
    evaluation run, a downstream postprocessor.

    >>> s = strictly_decreasing([0.5, 0.5, 0.7, 0.1])
    >>> s[0] == 0.5 and s[3] == 0.1 and s[3] < s[2] < s[1] < s[0]
    True
    """
    import math

    out: list[float] = []
    for s in scores:
        s = float(s)
        if out and s >= out[-1]:
            s = math.nextafter(out[-1], -math.inf)
        out.append(s)
    return out
