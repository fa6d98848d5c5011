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
from llama_index_car.fusion import score_gap
from llama_index_car.providers import resolve_embed_model
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
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
    lead: float = 0.0
    dconf: float = 0.0

    @property
    def name(self) -> str:
        parts = []
        if self.w > 0:
            parts.append(f"span[{self.feature},pool={self.pool},w={self.w:g}{_GATES[self.gate]}]")
        if (self.a_hi, self.a_lo) != (0.5, 0.5):
            parts.append(f"α={self.a_hi:g}→{self.a_lo:g}")
        if self.feedback:
            parts.append("feedback")
        if self.lead > 0:
            parts.append(f"bm25 lead at gap≥{self.lead:g}")
        if self.dconf > 0:
            parts.append(f"α·min(1, dense gap/{self.dconf:g})")
        return " + ".join(parts) or "hybrid"


_GATES = {0: "", 1: ",·(1−s)", 2: ",·(1−s)²"}
ALPHAS = [
    (0.5, 0.5), (0.6, 0.3), (0.7, 0.3), (0.6, 0.2), (0.5, 0.2), (0.7, 0.1), (0.5, 0.1),
    (0.6, 0.1), (0.5, 0.0), (0.6, 0.0), (0.4, 0.0), (0.3, 0.0),
]
#: BM25 lead: when BM25's top score leads its second by this share of itself, its top hit
#: goes first (0 = never)
LEADS = (0.0, 0.2, 0.3, 0.4, 0.5)
#: dense confidence: α scaled by min(1, dense score gap / τ) (0 = off)
DCONFS = (0.0,)


def grid() -> list[Point]:
    points = []
    for dconf, lead, feedback, (a_hi, a_lo) in itertools.product(
        DCONFS, LEADS, (False, True), ALPHAS
    ):
        points.append(Point(a_hi=a_hi, a_lo=a_lo, feedback=feedback, lead=lead, dconf=dconf))
        for feature, pool, w, gate in itertools.product(
            GRID_FEATURES, (20, 50, 100), (0.3, 0.4, 0.5, 0.6, 0.7, 0.8), (0, 1, 2)
        ):
            points.append(Point(feature, pool, w, gate, a_hi, a_lo, feedback, lead, dconf))
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
    bm25_top: int = -1  # candidate index of BM25's top hit
    dense_gap: float = 0.0  # the dense channel's score shape, like ``gap``
    dense_top: float = 0.0  # the dense channel's top cosine


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
    car = OfflineCriterionRetriever(
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
            score_gap([h.score for h in bm25_hits[:2]]),
            index[bm25[0]] if bm25 else -1,
            score_gap([h.score for h in dense_hits[:2]]),
            float(dense_hits[0].score or 0.0) if dense_hits else 0.0,
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
    order = _base_order(q, p)
    if p.w > 0:
        order = _span_order(q, p, order)
    if p.lead > 0 and q.gap >= p.lead and q.bm25_top >= 0:
        order = np.concatenate([[q.bm25_top], order[order != q.bm25_top]])
    return order


def _base_order(q: QueryData, p: Point) -> np.ndarray:
    alpha = p.a_hi - (p.a_hi - p.a_lo) * q.s
    if p.dconf > 0:
        alpha *= min(1.0, q.dense_gap / p.dconf)
    share = feedback_share(q.s, q.a, 0.7) if p.feedback else 0.0
    base = (
        alpha * (1 - share) * _rrf(q.dense)
        + (1 - alpha) * (1 - share) * _rrf(q.bm25)
        + share * _rrf(q.feedback)
    )
    tie = np.empty(len(q.cand))
    tie[np.argsort(np.asarray(q.cand))] = np.arange(len(q.cand))  # weighted_rrf: id order
    return _order(base, tie)


def _span_order(q: QueryData, p: Point, order: np.ndarray) -> np.ndarray:
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


def query_rrs(q: QueryData, points: Sequence[Point]) -> np.ndarray:
    """``[rr(q, p) for p in points]``, computed once per shared part: the base fusion per
    (feedback, α), the span re-ranking per span setting, the lead rule from two positions."""
    bases: dict[tuple[Any, ...], np.ndarray] = {}
    positions: dict[tuple[Any, ...], tuple[float, float]] = {}
    out = np.empty(len(points))
    for i, p in enumerate(points):
        kb = (p.feedback, p.a_hi, p.a_lo, p.dconf)
        if kb not in bases:
            bases[kb] = _base_order(q, p)
        ko = kb + ((p.feature, p.pool, p.w, p.gate) if p.w > 0 else ())
        if ko not in positions:
            order = _span_order(q, p, bases[kb]) if p.w > 0 else bases[kb]
            golds = np.flatnonzero(q.gold[order])
            first = float(golds[0] + 1) if golds.size else np.inf
            top = float(np.flatnonzero(order == q.bm25_top)[0] + 1) if q.bm25_top >= 0 else np.inf
            positions[ko] = (first, top)
        first, top = positions[ko]
        if p.lead > 0 and q.gap >= p.lead and np.isfinite(top):
            # BM25's top hit moves to the front: items before it shift down by one
            first = 1.0 if q.gold[q.bm25_top] else (first + 1 if first < top else first)
        out[i] = 1.0 / first if first <= DEPTH else 0.0
    return out


def fold_of(qid: str) -> int:
    return hashlib.sha256(qid.encode()).digest()[0] % FOLDS


def score_table(sets: dict[str, Any], points: Sequence[Point]) -> dict[str, np.ndarray]:
    """Per set: (points × queries) reciprocal ranks over its ``all`` queries."""
    out = {}
    for name, (per_query, strata, _) in sets.items():
        qs = strata["all"]
        out[name] = np.stack([query_rrs(per_query[q], points) for q in qs], axis=1)
        rng = np.random.default_rng(0)  # the shortcut equals the definition (rr) on a sample
        for j in rng.choice(len(qs), size=min(20, len(qs)), replace=False):
            for i in rng.choice(len(points), size=50, replace=False):
                assert out[name][i, j] == rr(per_query[qs[j]], points[i]), (points[i], qs[j])
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


#: the ablation: each part alone (its own sub-grid, cross-validated the same way) and all
FAMILIES: dict[str, Any] = {
    "span ranking only": lambda p: p.w > 0 and not p.feedback and p.lead == 0
    and (p.a_hi, p.a_lo) == (0.5, 0.5),
    "α(s) only": lambda p: p.w == 0 and not p.feedback and p.lead == 0,
    "feedback only": lambda p: p.w == 0 and p.feedback and p.lead == 0
    and (p.a_hi, p.a_lo) == (0.5, 0.5),
    "BM25 lead only": lambda p: p.w == 0 and not p.feedback and (p.a_hi, p.a_lo) == (0.5, 0.5),
    "all parts": lambda p: True,
}


def _cells(
    sets: dict[str, Any], n: str, rrs: np.ndarray, base: np.ndarray
) -> tuple[dict[str, dict[str, float]], str]:
    """Strata MRRs of ``rrs`` with Holm-corrected one-sided p of a loss against ``base``."""
    _, strata, _ = sets[n]
    pos = {q: i for i, q in enumerate(strata["all"])}
    cells = strata_rows(sets, n, rrs)
    present = [s for s in STRATA if s in cells]
    ps = holm([
        paired_test([base[pos[q]] for q in strata[s]], [rrs[pos[q]] for q in strata[s]]).p
        for s in present
    ])
    base_cells = strata_rows(sets, n, base)
    for s, ph in zip(present, ps, strict=True):
        cells[s]["p_holm_loss"] = ph
    text = " | ".join(
        f"{cells[s]['mrr']:.3f} ({cells[s]['mrr'] - base_cells[s]['mrr']:+.3f})"
        if s in cells else "–" for s in STRATA
    )
    worst = min((cells[s]["p_holm_loss"] for s in present), default=1.0)
    return cells, f"{text} | {worst:.3f}"


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
        "ablation": {},
    }
    head = "| set | system | " + " | ".join(STRATA) + " | p↓ (Holm) |"
    rule = "|---|---|" + "---|" * len(STRATA) + "---|"
    lines = [head, rule]
    for n in sets:
        stats = sets[n][2]
        base = table[n][hybrid]
        rows = {
            "hybrid": base,
            "car (5-fold CV)": cv["held"][n],
            f"car (leave-set-out: {cv['loso'][n]['point']})": cv["loso"][n]["rr"],
        }
        entry: dict[str, Any] = {"stats": stats, "rows": {}}
        for label, rrs in rows.items():
            cells, text = _cells(sets, n, rrs, base)
            entry["rows"][label] = cells
            lines.append(f"| {n} | {label} | {text} |")
        result["sets"][n] = entry
    ablation = ["", "Ablation (5-fold CV estimates; each part chosen within its own sub-grid):",
                "", head, rule]
    for family, keep in FAMILIES.items():
        idx = [i for i, p in enumerate(points) if keep(p)]
        sub = {n: t[idx] for n, t in table.items()}
        held = cross_validate(sets, [points[i] for i in idx], sub)["held"]
        result["ablation"][family] = {}
        for n in sets:
            cells, text = _cells(sets, n, held[n], table[n][hybrid])
            result["ablation"][family][n] = cells
            ablation.append(f"| {n} | {family} | {text} |")
    result["seconds"] = time.perf_counter() - started
    md = "\n".join(lines + ablation)
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
