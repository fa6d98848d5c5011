"""Span ranking for the offline CAR, chosen by cross-validation (issue: span vectors).

Every design choice of the offline ``car`` — whether span ranking is used, how a node's spans
are scored (best span, best two-span window, mean of the best two), how deep the re-ranked pool
is, its fusion weight, whether the dense/BM25 split follows the router signal, whether the
feedback channel stays — is one point of a small grid (:func:`grid`). Each point is a weighted
RRF (k = 60, ranks 1-based) of up to four ranked lists per query:

* ``dense``, ``bm25`` (depth 100) and the feedback channel (``CriterionAwareRetriever``'s, at
  share ``p = 0.7·(1 − s)(1 − a)``) with weights ``[α(1 − p), (1 − α)(1 − p), p]``, where
  ``α = α_hi − (α_hi − α_lo)·s`` (``s``: the router signal; ``α_hi = α_lo = 0.5`` is the
  plain hybrid);
* ``span``: the pool (the top ``pool`` of the fusion above) re-ordered by the span score
  (cosine of the query vector with the node's span vectors, :mod:`llama_index_car.spans`),
  weight ``w`` (optionally ``w·(1 − s)``); the other lists' weights are scaled by ``1 − w``.

Protocol (nothing reported here is in-sample):

* **5-fold CV over queries** — folds by ``sha256(query id) mod 5`` in every set. For each
  held-out fold, the grid point with the best mean (over the three sets) MRR on the other four
  folds is chosen and scored on the held-out fold; the estimate is the held-out MRR over all
  queries (every query is held out exactly once).
* **leave-one-set-out** — the point with the best MRR on two sets is scored on the third.
* the **default** is the point chosen on all developer queries of all sets; its in-sample
  figures are not reported as estimates.

Span vectors come from the shared embedding cache (the same e5 model, passage role, no title):
the first run embeds every span of every set (≈ the corpus again).

Run::

    python benchmarks/span_cv.py ../shared/eval/lhcs_construction ../shared/eval/autorag_ko \\
        ../shared/eval/legal_prec2statute --json docs/results/span_cv.json \\
        --markdown docs/results/span_cv.md
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import MetadataMode, QueryBundle

from llama_index_car.evaluation.cache import CachedEmbedding, EmbeddingCache, default_cache_dir
from llama_index_car.evaluation.overlap import compute_overlaps, stratify
from llama_index_car.evaluation.runner import load_eval_data
from llama_index_car.evaluation.stats import holm, paired_test
from llama_index_car.evaluation.systems import SystemFactory
from llama_index_car.providers import resolve_embed_model
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from llama_index_car.retrievers.routing import feedback_share
from llama_index_car.spans import node_spans

DEPTH = 100
RRF_K = 60
FOLDS = 5
STRATA = ("all", "low", "mid", "high")
FEATURES = ("max1", "max2", "top2")
GRID_FEATURES = ("max1", "top2")


@dataclass(frozen=True)
class Point:
    """One configuration of the grid (module docstring)."""

    feature: str = "max1"
    pool: int = 50
    w: float = 0.0
    gate: int = 0
    a_hi: float = 0.5
    a_lo: float = 0.5
    feedback: bool = False

    @property
    def name(self) -> str:
        parts = []
        if self.w > 0:
            parts.append(f"span[{self.feature},pool={self.pool},w={self.w:g}{_GATES[self.gate]}]")
        if (self.a_hi, self.a_lo) != (0.5, 0.5):
            parts.append(f"α={self.a_hi:g}→{self.a_lo:g}")
        if self.feedback:
            parts.append("feedback")
        return " + ".join(parts) or "hybrid"


_GATES = {0: "", 1: ",·(1−s)", 2: ",·(1−s)²"}
ALPHAS = [
    (0.5, 0.5), (0.6, 0.3), (0.7, 0.3), (0.6, 0.2), (0.5, 0.2), (0.7, 0.1), (0.5, 0.1),
    (0.6, 0.1), (0.5, 0.0), (0.6, 0.0),
]


def grid() -> list[Point]:
    points = []
    for feedback, (a_hi, a_lo) in itertools.product((False, True), ALPHAS):
        points.append(Point(a_hi=a_hi, a_lo=a_lo, feedback=feedback))
        for feature, pool, w, gate in itertools.product(
            GRID_FEATURES, (20, 50, 100), (0.3, 0.4, 0.5, 0.6, 0.7, 0.8), (0, 1, 2)
        ):
            points.append(Point(feature, pool, w, gate, a_hi, a_lo, feedback))
    return points


# -------------------------------------------------------------------------------- data
@dataclass
class QueryData:
    cand: list[str]  # candidate ids: the union of the lists
    dense: np.ndarray  # rank (1-based) in each list, inf when absent
    bm25: np.ndarray
    feedback: np.ndarray
    span: dict[str, np.ndarray]  # span score per candidate, per feature
    s: float
    a: float
    gold: np.ndarray  # bool per candidate
    gap: float = 0.0  # BM25 score shape: (top1 − top2) / top1


def _ranks(ids: Sequence[str], index: dict[str, int], n: int) -> np.ndarray:
    r = np.full(n, np.inf)
    for i, d in enumerate(ids):
        r[index[d]] = i + 1
    return r


def node_span_matrix(
    nodes: Sequence[Any], cache: EmbeddingCache
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Unit span vectors of every node, ``offsets`` (node i: rows offsets[i]:offsets[i+1])."""
    texts: list[str] = []
    offsets = [0]
    for n in nodes:
        spans = node_spans(n)
        texts.extend(s.text for s in spans)
        offsets.append(len(texts))
    vecs = cache.embed(texts, "text", show_progress=True, desc="embed spans")
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    return vecs, np.asarray(offsets), {n.node_id: i for i, n in enumerate(nodes)}


def _gap(scores: Sequence[float]) -> float:
    if len(scores) < 2 or scores[0] <= 0:
        return 0.0
    return float((scores[0] - scores[1]) / scores[0])


def span_features(cos: np.ndarray) -> dict[str, float]:
    """Node span score from its span cosines (``cos`` in text order)."""
    if cos.size == 0:
        return {f: -1.0 for f in FEATURES}
    top = np.sort(cos)[::-1]
    max2 = float(((cos[:-1] + cos[1:]) / 2).max()) if cos.size > 1 else float(cos[0])
    return {"max1": float(top[0]), "max2": max2, "top2": float(top[:2].mean())}


def collect(folder: str) -> tuple[dict[str, QueryData], dict[str, list[str]], dict[str, Any]]:
    data = load_eval_data(folder)
    cache = EmbeddingCache(default_cache_dir(), resolve_embed_model())
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in data.nodes]
    cache.embed(texts, "text", show_progress=True, desc="embed corpus")
    cache.embed(list(data.queries.values()), "query", show_progress=True, desc="embed queries")
    factory = SystemFactory(data.nodes, CachedEmbedding(cache), depth=DEPTH)
    v = factory.variant(None)
    car = CriterionAwareRetriever(
        v.dense, v.bm25, pool_top_k=DEPTH, similarity_top_k=DEPTH, feedback_scale=0.7
    )
    span_vecs, offsets, row = node_span_matrix(v.dense.nodes, cache)
    stats = {"nodes": len(v.dense.nodes), "spans": int(span_vecs.shape[0])}
    out: dict[str, QueryData] = {}
    for qid, query in data.queries.items():
        bundle = QueryBundle(query_str=query)
        dense_hits = list(v.dense.retrieve(bundle))
        dense = [h.node.node_id for h in dense_hits]
        bm25_hits = list(v.bm25.retrieve(query))
        plan = car._plan_feedback(query, dense_hits, bm25_hits)
        bm25 = [h.node.node_id for h in bm25_hits]
        fb = (
            [h.node.node_id for h in v.bm25.retrieve(query + " " + " ".join(plan.terms))]
            if plan.terms else bm25
        )
        cand = list(dict.fromkeys(dense + bm25 + fb))
        index = {d: i for i, d in enumerate(cand)}
        qv = v.dense.query_vector(bundle)
        feats: dict[str, list[float]] = {f: [] for f in FEATURES}
        for d in cand:
            i = row[d]
            f = span_features(span_vecs[offsets[i] : offsets[i + 1]] @ qv)
            for k in FEATURES:
                feats[k].append(f[k])
        rel = data.qrels.get(qid, {})
        out[qid] = QueryData(
            cand, _ranks(dense, index, len(cand)), _ranks(bm25, index, len(cand)),
            _ranks(fb, index, len(cand)), {k: np.asarray(x) for k, x in feats.items()},
            plan.signal, plan.agreement, np.asarray([rel.get(d, 0) > 0 for d in cand]),
            _gap([h.score or 0.0 for h in bm25_hits[:2]]),
        )
    strata = stratify(compute_overlaps(data.queries, data.passages, data.qrels))
    strata["all"] = sorted(q for q in data.qrels if any(r > 0 for r in data.qrels[q].values()))
    return out, strata, stats


# -------------------------------------------------------------------------------- scoring
def _rrf(r: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(r), 1.0 / (RRF_K + np.where(np.isfinite(r), r, 0)), 0.0)


def _order(score: np.ndarray, tie: np.ndarray) -> np.ndarray:
    return np.lexsort((tie, -score))


def fused_order(q: QueryData, p: Point) -> np.ndarray:
    """Candidate indices in the order the configuration ``p`` ranks them."""
    alpha = p.a_hi - (p.a_hi - p.a_lo) * q.s
    share = feedback_share(q.s, q.a, 0.7) if p.feedback else 0.0
    base = (
        alpha * (1 - share) * _rrf(q.dense)
        + (1 - alpha) * (1 - share) * _rrf(q.bm25)
        + share * _rrf(q.feedback)
    )
    tie = np.empty(len(q.cand))
    tie[np.argsort(np.asarray(q.cand))] = np.arange(len(q.cand))  # weighted_rrf: id order
    order = _order(base, tie)
    if p.w <= 0:
        return order
    w = p.w * (1 - q.s) ** p.gate
    pool = order[: p.pool]
    span = q.span[p.feature][pool]
    span_rank = np.full(len(q.cand), np.inf)
    span_rank[pool[np.lexsort((np.arange(len(pool)), -span))]] = np.arange(1, len(pool) + 1)
    base_rank = np.empty(len(q.cand))
    base_rank[order] = np.arange(1, len(q.cand) + 1)
    total = (1 - w) * _rrf(base_rank) + w * _rrf(span_rank)
    return _order(total, base_rank)


def rr(q: QueryData, p: Point) -> float:
    order = fused_order(q, p)[:DEPTH]
    hits = np.flatnonzero(q.gold[order])
    return 1.0 / (hits[0] + 1) if hits.size else 0.0


def fold_of(qid: str) -> int:
    return hashlib.sha256(qid.encode()).digest()[0] % FOLDS


def score_table(sets: dict[str, Any], points: Sequence[Point]) -> dict[str, np.ndarray]:
    """Per set: (points × queries) reciprocal ranks over its ``all`` queries."""
    out = {}
    for name, (per_query, strata, _) in sets.items():
        qs = strata["all"]
        out[name] = np.asarray([[rr(per_query[q], p) for q in qs] for p in points])
        print(f"  scored {name}: {len(points)} points × {len(qs)} queries", file=sys.stderr)
    return out


def choose(table: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> int:
    """Index of the point with the best mean over sets of MRR on the masked queries."""
    means = np.mean([t[:, masks[n]].mean(axis=1) for n, t in table.items()], axis=0)
    return int(np.argmax(means))


def cross_validate(
    sets: dict[str, Any], points: Sequence[Point], table: dict[str, np.ndarray]
) -> dict[str, Any]:
    folds = {n: np.asarray([fold_of(q) for q in s[1]["all"]]) for n, s in sets.items()}
    held: dict[str, np.ndarray] = {n: np.zeros(len(f)) for n, f in folds.items()}
    chosen = []
    for k in range(FOLDS):
        best = choose(table, {n: f != k for n, f in folds.items()})
        chosen.append(points[best].name)
        for n, f in folds.items():
            held[n][f == k] = table[n][best, f == k]
    loso: dict[str, dict[str, Any]] = {}
    for n in sets:
        others = {m: t for m, t in table.items() if m != n}
        best = choose(others, {m: np.ones(t.shape[1], bool) for m, t in others.items()})
        loso[n] = {"point": points[best].name, "rr": table[n][best]}
    return {"held": held, "chosen": chosen, "loso": loso}


def strata_rows(sets: dict[str, Any], name: str, rrs: np.ndarray) -> dict[str, dict[str, float]]:
    _, strata, _ = sets[name]
    qs = strata["all"]
    pos = {q: i for i, q in enumerate(qs)}
    return {
        s: {"n": len(strata[s]), "mrr": float(np.mean([rrs[pos[q]] for q in strata[s]]))}
        for s in STRATA if strata.get(s)
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    sets = {Path(f).name: collect(f) for f in args.sets}
    points = grid()
    table = score_table(sets, points)
    cv = cross_validate(sets, points, table)
    hybrid = points.index(Point())
    default = choose(table, {n: np.ones(t.shape[1], bool) for n, t in table.items()})
    result: dict[str, Any] = {
        "protocol": {"folds": FOLDS, "fold": "sha256(query id)[0] mod 5", "grid": len(points)},
        "default": asdict(points[default]) | {"name": points[default].name},
        "fold_choices": cv["chosen"],
        "sets": {},
    }
    lines = [
        "| set | system | " + " | ".join(STRATA) + " | p↓ (Holm) |",
        "|---|---|" + "---|" * len(STRATA) + "---|",
    ]
    for n in sets:
        _, strata, stats = sets[n]
        qs = strata["all"]
        pos = {q: i for i, q in enumerate(qs)}
        base = table[n][hybrid]
        rows = {
            "hybrid": base,
            "car (5-fold CV)": cv["held"][n],
            f"car (leave-set-out: {cv['loso'][n]['point']})": cv["loso"][n]["rr"],
        }
        entry: dict[str, Any] = {"stats": stats, "rows": {}}
        for label, rrs in rows.items():
            cells = strata_rows(sets, n, rrs)
            present = [s for s in STRATA if s in cells]
            if label != "hybrid":
                ps = holm([
                    paired_test([base[pos[q]] for q in strata[s]], [rrs[pos[q]] for q in strata[s]]).p
                    for s in present
                ])
                for s, ph in zip(present, ps, strict=True):
                    cells[s]["p_holm_loss"] = ph
            entry["rows"][label] = cells
            text = [
                f"{cells[s]['mrr']:.3f}" + (
                    f" ({cells[s]['mrr'] - entry['rows']['hybrid'][s]['mrr']:+.3f})"
                    if label != "hybrid" else ""
                ) if s in cells else "–"
                for s in STRATA
            ]
            worst = min((cells[s].get("p_holm_loss", 1.0) for s in present), default=1.0)
            lines.append(f"| {n} | {label} | " + " | ".join(text) + f" | {worst:.3f} |")
        result["sets"][n] = entry
    result["seconds"] = time.perf_counter() - started
    md = "\n".join(lines)
    md += f"\n\nDefault (chosen on all developer queries): `{points[default].name}`; "
    md += "per-fold choices: " + "; ".join(f"`{c}`" for c in cv["chosen"]) + "\n"
    print(md)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
