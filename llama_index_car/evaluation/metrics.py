"""Retrieval metrics over ``{qid: {doc_id: score}}`` runs and ``{qid: {doc_id: rel}}`` qrels.

Conventions (identical for every metric):

* A document is relevant when its qrel relevance is > 0; relevance-0 qrels are judged
  non-relevant.
* Each query's documents are ranked by score descending, then doc id ascending
  (:func:`~llama_index_car.evaluation.io.rank_items`); ranks are 1-based.
* Metrics are computed per query and then averaged (macro average). Queries of the qrels that
  have no relevant document are ignored; queries of the qrels that are missing from the run, or
  whose relevant documents are never retrieved, score 0. Queries in the run but not in the
  qrels are ignored.

Formulas, with ``rank_1`` the rank of the first relevant document and ``R`` the relevant set:

* ``mrr``      = 1 / rank_1 (0 when no relevant document is retrieved) — untruncated.
* ``mrr@k``    = 1 / rank_1 if rank_1 <= k else 0.
* ``recall@k`` = |relevant in top k| / |R|.
* ``hit@k``    = 1 if any relevant document is in the top k else 0.
* ``ndcg@k``   = DCG@k / IDCG@k with DCG@k = Σ_{i<=k} rel_i / log2(i + 1) (Järvelin &
  Kekäläinen 2002, linear gain — ranx's ``ndcg``; binary qrels give rel_i ∈ {0, 1}), and IDCG@k
  the DCG of the qrels sorted by relevance.

>>> qrels = {"q1": {"d2": 1}}
>>> run = {"q1": {"d1": 0.9, "d2": 0.5}}
>>> evaluate(run, qrels, ["mrr", "recall@1", "ndcg@10"]).mean["mrr"]
0.5
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llama_index_car._errors import ConfigurationError
from llama_index_car.evaluation.io import rank_items

#: the metrics written to ``results.json`` (the paper's §4.5 set)
DEFAULT_METRICS: tuple[str, ...] = ("mrr", "mrr@10", "recall@10", "recall@50", "ndcg@10")

_METRIC_RE = re.compile(r"^(mrr|recall|ndcg|hit)(?:@(\d+))?$")


def _relevant(qrels_q: Mapping[str, int]) -> dict[str, int]:
    return {d: int(r) for d, r in qrels_q.items() if r > 0}


def mrr(ranked: Sequence[str], relevant: Mapping[str, int], k: int | None = None) -> float:
    """Reciprocal rank of the first relevant document (0 if none in the top ``k``).

    >>> mrr(["a", "b", "c"], {"c": 1})
    0.3333333333333333
    >>> mrr(["a", "b", "c"], {"c": 1}, k=2)
    0.0
    """
    limit = len(ranked) if k is None else min(k, len(ranked))
    for i in range(limit):
        if ranked[i] in relevant:
            return 1.0 / (i + 1)
    return 0.0


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """|relevant in the top k| / |relevant|.

    >>> recall_at_k(["a", "b", "c"], {"a": 1, "z": 1}, 2)
    0.5
    """
    if not relevant:
        return 0.0
    return sum(1 for d in ranked[:k] if d in relevant) / len(relevant)


def hit_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """1.0 if any relevant document is in the top k, else 0.0."""
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gain: Σ rel_i / log2(i+1) over the top k, divided by the ideal.

    >>> round(ndcg_at_k(["a", "b"], {"b": 1}, 10), 6) == round(1 / math.log2(3), 6)
    True
    """
    if not relevant:
        return 0.0
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def parse_metric(name: str) -> tuple[str, int | None]:
    """Split ``"recall@10"`` into ``("recall", 10)``; ``"mrr"`` into ``("mrr", None)``.

    Allowed: ``mrr``, ``mrr@k``, ``recall@k``, ``ndcg@k``, ``hit@k`` with k >= 1.
    """
    m = _METRIC_RE.match(name.strip().lower())
    if not m:
        raise ConfigurationError(
            f"unknown metric {name!r}; allowed: mrr, mrr@k, recall@k, ndcg@k, hit@k"
        )
    kind, k_str = m.group(1), m.group(2)
    k = int(k_str) if k_str is not None else None
    if k is not None and k < 1:
        raise ConfigurationError(f"metric {name!r}: k must be >= 1")
    if kind != "mrr" and k is None:
        raise ConfigurationError(f"metric {name!r} needs a cutoff, e.g. {kind}@10")
    return kind, k


def _score(kind: str, k: int | None, ranked: Sequence[str], relevant: Mapping[str, int]) -> float:
    if kind == "mrr":
        return mrr(ranked, relevant, k)
    assert k is not None  # guaranteed by parse_metric
    if kind == "recall":
        return recall_at_k(ranked, relevant, k)
    if kind == "ndcg":
        return ndcg_at_k(ranked, relevant, k)
    return hit_at_k(ranked, relevant, k)


def per_query(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
    metrics: Iterable[str] = DEFAULT_METRICS,
) -> dict[str, dict[str, float]]:
    """``{metric: {qid: value}}`` for every qrels query with at least one relevant document.

    >>> per_query({"q1": {"a": 1.0}}, {"q1": {"a": 1}, "q2": {"b": 1}}, ["mrr"])
    {'mrr': {'q1': 1.0, 'q2': 0.0}}
    """
    parsed = [(m, *parse_metric(m)) for m in metrics]
    out: dict[str, dict[str, float]] = {m: {} for m, _, _ in parsed}
    for qid in sorted(qrels):
        relevant = _relevant(qrels[qid])
        if not relevant:
            continue
        ranked = [d for d, _ in rank_items(run.get(qid, {}))]
        for name, kind, k in parsed:
            out[name][qid] = _score(kind, k, ranked, relevant)
    return out


def mean(values: Mapping[str, float] | Sequence[float]) -> float:
    """Arithmetic mean (0.0 for no values)."""
    vals = list(values.values()) if isinstance(values, Mapping) else list(values)
    return sum(vals) / len(vals) if vals else 0.0


@dataclass(frozen=True)
class Evaluation:
    """Per-query values ``{metric: {qid: v}}`` and their means ``{metric: v}``."""

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]

    def __getitem__(self, key: str) -> dict[str, float] | dict[str, dict[str, float]]:
        if key == "per_query":
            return self.per_query
        if key == "mean":
            return self.mean
        raise KeyError(key)


def evaluate(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
    metrics: Iterable[str] = DEFAULT_METRICS,
    qids: Iterable[str] | None = None,
) -> Evaluation:
    """Per-query values and their means for ``metrics``.

    ``qids`` restricts both to a subset (e.g. one overlap stratum); unknown qids score 0.

    >>> evaluate({"q1": {"a": 1.0}}, {"q1": {"a": 1}}, ["mrr"]).mean
    {'mrr': 1.0}
    """
    metric_list = list(metrics)
    pq = per_query(run, qrels, metric_list)
    if qids is not None:
        keep = list(qids)
        pq = {m: {q: vals.get(q, 0.0) for q in keep} for m, vals in pq.items()}
    return Evaluation(per_query=pq, mean={m: mean(v) for m, v in pq.items()})
