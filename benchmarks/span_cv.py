"""The offline CAR's design, chosen by cross-validation: what moves the low-overlap stratum.

Every configuration of the offline ``car`` is one point of a grid, and every point is ranked
by the function ``OfflineCriterionRetriever`` ranks with,
:func:`llama_index_car.fusion.criterion_ranking` (z-score fusion of the dense and BM25
channels, then the pool re-ranked by its best spans' standardised cosines), fed with the
channels' own hits, the span index's own best-span cosines and the retriever's own span
weight rule (:func:`~llama_index_car.retrievers.car_offline.span_weight_for`); the metrics are
``llama-car eval``'s (:mod:`llama_index_car.evaluation.metrics`). So a point's figures are
the retriever's: ``tests/test_span_cv.py`` checks that the shipped defaults reproduce this
script's in-sample figures exactly.

A point is the base design (dense share ``β``, span weight ``γ``, re-ranked ``pool``) plus
at most a few *levers*, each measured alone and combined (issue 41):

* **question cue** (shipped): the span step counts only for a query phrased as a question
  (:func:`~llama_index_car.postprocessors.criterion_spans.question_cue`: a question mark, an
  interrogative word or ending; the lexicon is Korean grammar, fixed before any run);
* **dense WIG → β**: the dense share per query, ``β = min(1, b·WIG)`` with ``WIG`` the dense
  channel's top-1 cosine minus the mean of its top 10;
* **dense WIG → γ**: the span weight per query, ``γ = g·WIG``;
* **span BM25**: ``+ λ·z(best span BM25)`` beside the span cosine (BM25 of the query's Kiwi
  tokens over every span of the corpus; z over the pool);
* **CoNg expansion**: the BM25 channel searches ``query + terms``, the terms being, per
  content morpheme of the query, its ``n`` most similar morphemes in Kiwi's CoNg model
  (``Kiwi.most_similar_morphemes``, similarity ≥ 0.6) that are BM25 terms of the corpus;
* **late interaction**: a node's span score from all its spans (mean of the best two, or
  ``τ·log Σ exp(cos/τ)`` with ``τ = 0.02``), not only the best one.

(Correct table headers in spans cannot move these sets: their passages have no table rows —
``stats.row_spans`` is 0 in every set.)

Protocol (nothing reported as an estimate is in-sample):

* **5-fold CV over queries** — folds by ``sha256(query id)[0] mod 5`` in every set; for each
  held-out fold the point of the family with the best mean over the three sets of its MRR on
  the other four folds is scored on the held-out fold;
* **leave-one-set-out** — the point best on two sets is scored on the third;
* the **default** is the point chosen on all developer queries of all sets (the shipped
  constants; its in-sample figures are not estimates).

Tests are paired one-sided Wilcoxon (:func:`llama_index_car.evaluation.stats.paired_test`),
Holm-corrected per row over its family of cells: *gain* (car > hybrid) over every set's
``all`` and ``low``, *loss* (hybrid > car) over every stratum of every set.

Inputs per set are collected once (``--store``, default ``/tmp/span_cv_cache``): the channels'
hits, the lever inputs and their cost per query. Vectors come from the shared embedding cache
(``llama-car eval <set> --systems car`` fills it; ``--cached-only`` refuses to embed).

Run::

    python benchmarks/span_cv.py ../shared/eval/lhcs_construction ../shared/eval/autorag_ko \\
        ../shared/eval/legal_prec2statute --json docs/results/span_cv.json \\
        --markdown docs/results/span_cv.md --cached-only
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import MetadataMode, QueryBundle

from llama_index_car.bm25 import BM25Okapi
from llama_index_car.embeddings.cache import CachedEmbedding, EmbeddingCache, default_cache_dir
from llama_index_car.evaluation.io import rank_items
from llama_index_car.evaluation.metrics import mrr, ndcg_at_k
from llama_index_car.evaluation.overlap import compute_overlaps, stratify
from llama_index_car.evaluation.runner import load_eval_data
from llama_index_car.evaluation.stats import holm, paired_test
from llama_index_car.evaluation.systems import SystemFactory
from llama_index_car.fusion import (
    criterion_ranking,
    span_zscore_fusion,
    strictly_decreasing,
    weighted_rrf,
)
from llama_index_car.postprocessors.criterion_spans import question_cue
from llama_index_car.providers import resolve_embed_model
from llama_index_car.retrievers.car_offline import span_weight_for
from llama_index_car.retrievers.criterion_aware import (
    DEFAULT_OFFLINE_ALPHA,
    DEFAULT_SPAN_Z_WEIGHT,
)
from llama_index_car.span_index import SpanIndex

DEPTH = 100
FOLDS = 5
STRATA = ("all", "low", "mid", "high")
COLLECT_VERSION = 1
DEFAULT_STORE = Path("/tmp/span_cv_cache")
#: CoNg expansion: similar morphemes asked per content morpheme, and the similarity floor
CONG_TOP_N = 10
CONG_MIN_SIM = 0.6
CONG_TAGS = frozenset({"NNG", "NNP", "VV", "VA", "XR"})
#: late interaction: the log-sum-exp temperature
LSE_TAU = 0.02
#: queries the query-time cost of span BM25 is timed on (tokenizing the pool's spans)
COST_SAMPLE = 30


# ------------------------------------------------------------------------------- the grid
@dataclass(frozen=True)
class Point:
    """One configuration (module docstring); the defaults are the plain base design."""

    beta: float = 0.3
    gamma: float = 0.0
    pool: int = 50
    cue: bool = False
    beta_wig: float = 0.0
    gamma_wig: float = 0.0
    lam: float = 0.0
    expand: int = 0
    span: str = "best"

    @property
    def name(self) -> str:
        beta = f"β={self.beta_wig:g}·WIG" if self.beta_wig else f"β={self.beta:g}"
        parts = [f"z-fusion[{beta}]"]
        if self.expand:
            parts.append(f"CoNg[{self.expand}/morpheme]")
        gamma = f"{self.gamma_wig:g}·WIG" if self.gamma_wig else f"{self.gamma:g}"
        if self.gamma or self.gamma_wig:
            feature = "" if self.span == "best" else f",{self.span}"
            cue = ",questions" if self.cue else ""
            parts.append(f"span[γ={gamma},pool={self.pool}{feature}{cue}]")
        if self.lam:
            parts.append(f"span-BM25[λ={self.lam:g}]")
        return " + ".join(parts)


BETAS = (0.2, 0.3, 0.4, 0.5)
GAMMAS = (0.4, 0.8, 1.2, 1.6, 2.0)
POOLS = (20, 50)


def _span_points(**kw: Any) -> list[Point]:
    return [Point(beta=b, gamma=g, pool=p, **kw)
            for b, g, p in itertools.product(BETAS, GAMMAS, POOLS)]


def _lever_points(cue: bool) -> dict[str, list[Point]]:
    """Each lever's sub-grid on top of the span step (with or without the question cue)."""
    return {
        "dense WIG → β": [Point(beta_wig=b, gamma=g, pool=p, cue=cue) for b, g, p in
                          itertools.product((10, 15, 20, 30, 40), GAMMAS, POOLS)],
        "dense WIG → γ": [Point(beta=b, gamma_wig=g, pool=p, cue=cue) for b, g, p in
                          itertools.product(BETAS, (40, 60, 80, 120), POOLS)],
        "span BM25": [dataclasses.replace(q, lam=lam) for q in _span_points(cue=cue)
                      for lam in (0.2, 0.4, 0.7)],
        "CoNg expansion": [dataclasses.replace(q, expand=n) for q in _span_points(cue=cue)
                           for n in (1, 2)],
        "late interaction": [dataclasses.replace(q, span=s) for q in _span_points(cue=cue)
                             for s in ("top2", "lse")],
    }


def families() -> dict[str, list[Point]]:
    """The ablation: each family is cross-validated within its own sub-grid."""
    out: dict[str, list[Point]] = {
        "z-score fusion alone": [Point(beta=b) for b in BETAS],
        "z-score fusion + span step (the previous design)": _span_points(),
    }
    for lever, points in _lever_points(cue=False).items():
        out[f"+ {lever}"] = points
    out["+ question cue (shipped)"] = _span_points(cue=True)
    combined = [p for points in _lever_points(cue=True).values() for p in points]
    out["+ question cue + any other lever"] = _span_points(cue=True) + combined
    return out


#: the family the shipped design comes from (its CV and LOSO rows are the headline)
SHIPPED = "+ question cue (shipped)"


# ------------------------------------------------------------------------------- data
@dataclass
class QueryData:
    """One query: its text, gold, the channels' hits and the lever inputs."""

    text: str
    relevant: dict[str, int]
    dense: list[tuple[str, float]]
    lexical: list[tuple[str, float]]
    expanded: dict[int, list[tuple[str, float]]] = field(default_factory=dict)
    #: per candidate node: ``top2``, ``lse`` (late interaction), ``bm25`` (best span BM25)
    features: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class SetData:
    name: str
    queries: dict[str, QueryData]
    strata: dict[str, list[str]]
    spans: SpanIndex
    vectors: dict[str, list[float]]
    cost_ms: dict[str, float]
    stats: dict[str, Any]
    _best: dict[tuple[str, tuple[str, ...]], list[float | None]] = field(default_factory=dict)

    def best_spans(self, qid: str, ids: Sequence[str]) -> list[float | None]:
        """The span index's best-span cosine of each of ``ids`` for query ``qid`` — the call
        the retriever makes for its pool (memoised per pool)."""
        key = (qid, tuple(ids))
        if key not in self._best:
            hits = self.spans.best_spans(self.vectors[qid], list(ids))
            self._best[key] = [h.score if h is not None else None for h in hits]
        return self._best[key]


def _check_cached(cache: EmbeddingCache, texts: Sequence[str], kind: Any, what: str,
                  cached_only: bool) -> None:
    """With ``--cached-only``: refuse to embed (the cache must already hold every vector)."""
    if not cached_only:
        return
    missing = sum(1 for t in set(texts) if (t, kind) not in cache)
    if missing:
        raise SystemExit(
            f"--cached-only: {missing} {what} vectors are not in {cache.path}; run "
            "`llama-car eval <set> --systems car` first (it caches corpus, query and span vectors)"
        )


def cong_terms(kiwi: Any, query: str, query_tokens: Sequence[str], vocab: Any,
               per_morpheme: int) -> list[str]:
    """CoNg expansion terms of ``query`` (module docstring): for each content morpheme in
    text order, its ``per_morpheme`` most similar morphemes (similarity ≥ ``CONG_MIN_SIM``)
    that are BM25 terms and not query tokens, as the tokenizer writes them (VV/VA as lemmas)."""
    seen = set(query_tokens)
    out: list[str] = []
    for tok in kiwi.tokenize(query):
        if tok.tag.split("-")[0] not in CONG_TAGS:
            continue
        try:
            similar = kiwi.most_similar_morphemes((tok.form, tok.tag), top_n=CONG_TOP_N)
        except (ValueError, KeyError, RuntimeError):  # a morpheme the model does not know
            continue
        taken = 0
        for m in similar:
            base = m.tag.split("-")[0]
            if m.score < CONG_MIN_SIM or taken >= per_morpheme or base not in CONG_TAGS:
                continue
            term = m.form + "다" if base in ("VV", "VA") else m.form
            if term in seen or term not in vocab:
                continue
            seen.add(term)
            out.append(term)
            taken += 1
    return out


def late_features(cosines: np.ndarray) -> dict[str, float]:
    """``top2``: the mean of a node's two best span cosines; ``lse``: ``τ·log Σ exp(c/τ)``."""
    top = np.sort(cosines)[::-1]
    m = float(top[0])
    return {"top2": float(top[:2].mean()),
            "lse": m + LSE_TAU * math.log(float(np.exp((top - m) / LSE_TAU).sum()))}


def _stamp(folder: Path, spec: Any) -> str:
    blob = json.dumps([str(folder), spec, COLLECT_VERSION], sort_keys=True).encode()
    blob += b"".join((folder / f).read_bytes() for f in ("queries.jsonl", "qrels.tsv"))
    return hashlib.sha256(blob).hexdigest()[:12]


def collect(folder: str | Path, *, embed_model: Any = None, cache_dir: Any = None,
            store: Path | None = DEFAULT_STORE, cached_only: bool = False,
            levers: bool = True) -> SetData:
    """One set's queries, channels, span index and lever inputs (kept in ``store``)."""
    folder = Path(folder).resolve()
    data = load_eval_data(folder)
    cache = EmbeddingCache(cache_dir or default_cache_dir(), embed_model or resolve_embed_model())
    embed = CachedEmbedding(cache)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in data.nodes]
    _check_cached(cache, texts, "text", "corpus", cached_only)
    _check_cached(cache, list(data.queries.values()), "query", "query", cached_only)
    factory = SystemFactory(data.nodes, embed, depth=DEPTH)
    v = factory.variant(None)
    cut_texts = [s.text for n in v.nodes for s in _spans_of(n)]
    _check_cached(cache, cut_texts, "text", "span", cached_only)
    spans = SpanIndex.from_nodes(v.nodes, embed)  # as `llama-car eval` builds it for car
    qids = sorted(data.queries)
    # the retriever's query vector: the embedding of the bundle's embedding strings
    vectors = {q: list(embed.get_agg_embedding_from_queries([data.queries[q]])) for q in qids}
    saved = None
    if store is not None:
        saved = Path(store) / f"{folder.name}-{_stamp(folder, cache.spec)}-{int(levers)}.json"
        if saved.is_file():
            raw = json.loads(saved.read_text(encoding="utf-8"))
            queries = {q: _query_data(d) for q, d in raw["queries"].items()}
            return SetData(folder.name, queries, raw["strata"], spans, vectors, raw["cost_ms"],
                           raw["stats"])
    queries, cost, stats = _collect(data, v, spans, vectors, qids, levers)
    strata = stratify(compute_overlaps(data.queries, data.passages, data.qrels))
    strata["all"] = sorted(q for q in data.qrels if any(r > 0 for r in data.qrels[q].values()))
    out = SetData(folder.name, queries, strata, spans, vectors, cost, stats)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(".tmp")
        tmp.write_text(json.dumps({
            "queries": {q: _plain(d) for q, d in queries.items()}, "strata": strata,
            "cost_ms": cost, "stats": stats}, ensure_ascii=False))
        tmp.replace(saved)
    return out


def _spans_of(node: Any) -> list[Any]:
    from llama_index_car.spans import node_spans

    return node_spans(node)


def _plain(d: QueryData) -> dict[str, Any]:
    return {"text": d.text, "relevant": d.relevant, "dense": d.dense, "lexical": d.lexical,
            "expanded": {str(k): v for k, v in d.expanded.items()}, "features": d.features}


def _query_data(raw: dict[str, Any]) -> QueryData:
    pairs = lambda xs: [(str(a), float(b)) for a, b in xs]  # noqa: E731
    return QueryData(raw["text"], {k: int(x) for k, x in raw["relevant"].items()},
                     pairs(raw["dense"]), pairs(raw["lexical"]),
                     {int(k): pairs(x) for k, x in raw["expanded"].items()}, raw["features"])


def _collect(data: Any, v: Any, spans: SpanIndex, vectors: dict[str, list[float]],
             qids: list[str], levers: bool
             ) -> tuple[dict[str, QueryData], dict[str, float], dict[str, Any]]:
    lexical_index = v.bm25
    tok = lexical_index.tokenizer
    timings: dict[str, list[float]] = {k: [] for k in (
        "question cue", "dense WIG", "CoNg expansion", "late interaction", "span BM25")}
    span_bm25: BM25Okapi | None = None
    span_rows: dict[str, list[int]] | None = None
    stats: dict[str, Any] = {
        "nodes": len(v.nodes), "spans": spans.n_spans,
        "row_spans": sum(1 for n in v.nodes for s in spans.spans_of(n.node_id)
                         if s.kind == "row"),
        "questions": sum(question_cue(data.queries[q]) for q in qids), "queries": len(qids),
    }
    if levers:
        started = time.perf_counter()
        all_spans = [(n.node_id, s.text) for n in v.nodes for s in spans.spans_of(n.node_id)]
        span_bm25 = BM25Okapi(tok.tokenize_batch([t for _, t in all_spans]))
        span_rows = {}
        for i, (node_id, _) in enumerate(all_spans):
            span_rows.setdefault(node_id, []).append(i)
        stats["span_bm25_index_s"] = time.perf_counter() - started
    out: dict[str, QueryData] = {}
    for k, qid in enumerate(qids):
        query = data.queries[qid]
        bundle = QueryBundle(query_str=query, embedding=vectors[qid])
        dense = [(h.node.node_id, float(h.score or 0.0)) for h in v.dense.retrieve(bundle)]
        lexical = [(h.node.node_id, float(h.score or 0.0))
                   for h in lexical_index.retrieve(QueryBundle(query_str=query))]
        relevant = {d: int(r) for d, r in data.qrels.get(qid, {}).items() if r > 0}
        d = QueryData(query, relevant, dense, lexical)
        t0 = time.perf_counter()
        question_cue(query)
        timings["question cue"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _wig(dense)
        timings["dense WIG"].append(time.perf_counter() - t0)
        if levers:
            assert span_bm25 is not None and span_rows is not None
            qtok = tok.tokenize(query)
            for n in (1, 2):
                t0 = time.perf_counter()
                terms = cong_terms(tok.kiwi(), query, qtok, lexical_index.bm25.vocab, n)
                hits = lexical_index.retrieve(QueryBundle(query_str=" ".join([query, *terms])))
                if n == 1:
                    timings["CoNg expansion"].append(time.perf_counter() - t0)
                d.expanded[n] = [(h.node.node_id, float(h.score or 0.0)) for h in hits]
            cand = list(dict.fromkeys([i for i, _ in dense] + [i for i, _ in lexical]
                                      + [i for x in d.expanded.values() for i, _ in x]))
            t0 = time.perf_counter()
            cosines = spans.span_cosines(vectors[qid], cand[:50])
            for c in cosines:
                if c is not None and c.size:
                    late_features(c)
            timings["late interaction"].append(time.perf_counter() - t0)
            cosines = spans.span_cosines(vectors[qid], cand)
            scores = span_bm25.get_scores(qtok)
            top2, lse, bm = {}, {}, {}
            for node_id, c in zip(cand, cosines, strict=True):
                rows = span_rows.get(node_id)
                if c is None or not c.size or not rows:
                    continue
                f = late_features(c)
                top2[node_id], lse[node_id] = f["top2"], f["lse"]
                bm[node_id] = float(scores[rows].max())
            d.features = {"top2": top2, "lse": lse, "bm25": bm}
            if k < COST_SAMPLE:  # query time: Kiwi over the spans of a 50-node pool
                texts = [s.text for n in cand[:50] for s in spans.spans_of(n)]
                t0 = time.perf_counter()
                pool_tokens = tok.tokenize_batch(texts)
                BM25Okapi(pool_tokens).get_scores(qtok)
                timings["span BM25"].append(time.perf_counter() - t0)
        out[qid] = d
        if k % 200 == 0:
            print(f"  {len(out)}/{len(qids)} queries", file=sys.stderr)
    cost = {k: 1000 * statistics.median(x) for k, x in timings.items() if x}
    return out, cost, stats


def _wig(dense: Sequence[tuple[str, float]]) -> float:
    """The dense channel's top-1 cosine minus the mean of its top 10 (0 without hits)."""
    if not dense:
        return 0.0
    top = [s for _, s in dense[:10]]
    return top[0] - sum(top) / len(top)


# ------------------------------------------------------------------------------- scoring
def car_ranking(s: SetData, qid: str, p: Point) -> list[str]:
    """The ids point ``p`` ranks for query ``qid``, best first (``DEPTH`` deep), through
    :func:`~llama_index_car.fusion.criterion_ranking` and the retriever's own span weight
    rule and span scores; scores made strictly decreasing and ranked as ``llama-car eval``
    ranks a run (:func:`~llama_index_car.evaluation.io.rank_items`)."""
    q = s.queries[qid]
    wig = _wig(q.dense)
    beta = min(1.0, p.beta_wig * wig) if p.beta_wig else p.beta
    gamma = p.gamma_wig * wig if p.gamma_wig else p.gamma
    if p.cue:
        gamma = span_weight_for(q.text, gamma)
    lexical = q.expanded[p.expand] if p.expand else q.lexical
    spans_of: Callable[[Sequence[str]], Sequence[float | None]]
    if p.span == "best":
        spans_of = lambda ids: s.best_spans(qid, ids)  # noqa: E731
    else:
        feature = q.features[p.span]
        spans_of = lambda ids: [feature.get(d) for d in ids]  # noqa: E731
    ranked = criterion_ranking(q.dense, lexical, beta, span_scores=spans_of,
                               span_weight=gamma, span_pool=p.pool)
    if p.lam:
        head, tail = ranked[: p.pool], ranked[p.pool :]
        bm = q.features["bm25"]
        ranked = span_zscore_fusion([d for d, _ in head], [x for _, x in head],
                                    [bm.get(d) for d, _ in head], p.lam) + tail
    ranked = ranked[:DEPTH]
    scores = strictly_decreasing([x for _, x in ranked])
    run = dict(zip([d for d, _ in ranked], scores, strict=True))
    return [d for d, _ in rank_items(run)]


def channel_ranking(s: SetData, qid: str, channel: str) -> list[str]:
    """``bm25``, ``dense`` or ``hybrid`` (weighted RRF, α 0.5, k 60: the eval's hybrid)."""
    q = s.queries[qid]
    if channel == "hybrid":
        fused = weighted_rrf([[d for d, _ in q.dense], [d for d, _ in q.lexical]], [0.5, 0.5])
        return [d for d, _ in rank_items(dict(fused[:DEPTH]))]
    hits = q.dense if channel == "dense" else q.lexical
    return [d for d, _ in rank_items(dict(hits[:DEPTH]))]


def metrics_of(s: SetData, qid: str, ranked: Sequence[str]) -> tuple[float, float]:
    rel = s.queries[qid].relevant
    return mrr(ranked, rel), ndcg_at_k(ranked, rel, 10)


def fold_of(qid: str) -> int:
    return hashlib.sha256(qid.encode()).digest()[0] % FOLDS


class Table:
    """Per set, per point: per-query MRR and nDCG@10 (``all`` queries, sorted ids)."""

    def __init__(self, sets: dict[str, SetData], points: Sequence[Point]) -> None:
        self.sets = sets
        self.points = list(points)
        self.index = {p: i for i, p in enumerate(self.points)}
        self.rr: dict[str, np.ndarray] = {}
        self.ndcg: dict[str, np.ndarray] = {}
        self.folds: dict[str, np.ndarray] = {}
        for name, s in sets.items():
            qids = s.strata["all"]
            rr = np.empty((len(self.points), len(qids)))
            nd = np.empty_like(rr)
            started = time.perf_counter()
            for j, qid in enumerate(qids):
                for i, p in enumerate(self.points):
                    rr[i, j], nd[i, j] = metrics_of(s, qid, car_ranking(s, qid, p))
                s._best.clear()  # pools are memoised per query
            self.rr[name], self.ndcg[name] = rr, nd
            self.folds[name] = np.asarray([fold_of(q) for q in qids])
            print(f"  scored {name}: {len(self.points)} points × {len(qids)} queries "
                  f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    def choose(self, allowed: np.ndarray, train: dict[str, np.ndarray]) -> int:
        """The point (index into ``points``) among ``allowed`` with the best mean over the
        sets of ``train`` of its MRR on their training queries (``train[set]``: bool/query)."""
        means = np.mean([self.rr[n][allowed][:, m].mean(axis=1) for n, m in train.items()],
                        axis=0)
        return int(allowed[int(np.argmax(means))])

    def cross_validate(self, family: Sequence[Point]) -> dict[str, Any]:
        allowed = np.asarray([self.index[p] for p in family])
        held = {n: np.zeros(f.size) for n, f in self.folds.items()}
        held_nd = {n: np.zeros(f.size) for n, f in self.folds.items()}
        chosen = []
        for k in range(FOLDS):
            best = self.choose(allowed, {n: f != k for n, f in self.folds.items()})
            chosen.append(self.points[best].name)
            for n, f in self.folds.items():
                held[n][f == k] = self.rr[n][best, f == k]
                held_nd[n][f == k] = self.ndcg[n][best, f == k]
        loso, loso_nd, loso_points = {}, {}, {}
        for n in self.folds:
            best = self.choose(allowed, {m: np.ones(f.size, bool) for m, f in self.folds.items()
                                         if m != n})
            loso[n], loso_nd[n] = self.rr[n][best], self.ndcg[n][best]
            loso_points[n] = self.points[best].name
        default = self.choose(allowed, {n: np.ones(f.size, bool) for n, f in self.folds.items()})
        return {"cv": (held, held_nd), "loso": (loso, loso_nd), "fold_choices": chosen,
                "loso_choices": loso_points, "default": self.points[default]}


# ------------------------------------------------------------------------------- reports
def _strata_means(s: SetData, values: np.ndarray) -> dict[str, dict[str, float]]:
    pos = {q: i for i, q in enumerate(s.strata["all"])}
    return {st: {"n": len(s.strata[st]),
                 "mrr": float(np.mean([values[pos[q]] for q in s.strata[st]]))}
            for st in STRATA if s.strata.get(st)}


def _tests(sets: dict[str, SetData], rows: dict[str, np.ndarray], base: dict[str, np.ndarray]
           ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """Holm-corrected one-sided paired p: gain (car > hybrid) over each set's all/low, loss
    (hybrid > car) over every stratum of every set."""
    gain_cells, loss_cells = [], []
    for n, s in sets.items():
        pos = {q: i for i, q in enumerate(s.strata["all"])}
        for st in STRATA:
            qs = s.strata.get(st) or []
            if not qs:
                continue
            a = [rows[n][pos[q]] for q in qs]
            b = [base[n][pos[q]] for q in qs]
            loss_cells.append(((n, st), paired_test(b, a).p))
            if st in ("all", "low"):
                gain_cells.append(((n, st), paired_test(a, b).p))
    gain = dict(zip([c for c, _ in gain_cells], holm([p for _, p in gain_cells]), strict=True))
    loss = dict(zip([c for c, _ in loss_cells], holm([p for _, p in loss_cells]), strict=True))
    return gain, loss


def _fmt_p(p: float) -> str:
    return f"{p:.0e}" if p < 0.001 else f"{p:.3f}"


def _row(s: SetData, label: str, rr: np.ndarray, nd: np.ndarray, hybrid: np.ndarray,
         gain: dict[tuple[str, str], float] | None, loss: dict[tuple[str, str], float] | None,
         extra: str = "") -> tuple[str, dict[str, Any]]:
    cells = _strata_means(s, rr)
    base = _strata_means(s, hybrid)
    text = " | ".join(
        f"{cells[st]['mrr']:.3f} ({cells[st]['mrr'] - base[st]['mrr']:+.3f})" if st in cells
        else "–" for st in STRATA)
    entry: dict[str, Any] = {"strata": cells, "ndcg@10": float(nd.mean())}
    p_gain = p_loss = "–"
    if gain is not None and loss is not None:
        entry["p_gain_holm"] = {st: gain[(s.name, st)] for st in ("all", "low")
                                if (s.name, st) in gain}
        entry["p_loss_holm"] = {st: loss[(s.name, st)] for st in STRATA if (s.name, st) in loss}
        p_gain = _fmt_p(gain[(s.name, "all")])
        p_loss = _fmt_p(min(entry["p_loss_holm"].values()))
    line = f"| {s.name} | {label} | {text} | {nd.mean():.3f} | {p_gain} | {p_loss} |{extra}"
    return line, entry


def _value(entry: dict[str, Any], metric: str) -> float:
    return float(entry["strata"]["all"]["mrr"] if metric == "mrr" else entry["ndcg@10"])


def targets(sets: dict[str, SetData], rows: dict[str, dict[str, dict[str, Any]]]
            ) -> list[tuple[str, bool, str]]:
    """Issue 41's done-when lines, checked on the shipped family's CV and LOSO rows."""
    out = []
    for kind in ("CV", "LOSO"):
        car = rows[f"car ({kind})"]
        if "lhcs_construction" in sets:
            lh, hy = car["lhcs_construction"], rows["hybrid"]["lhcs_construction"]
            for st in ("low", "all"):
                got, need = lh["strata"][st]["mrr"], hy["strata"][st]["mrr"] + 0.06
                out.append((f"{kind}: lhcs {st} MRR ≥ hybrid + 0.06", got >= need,
                            f"{got:.3f} vs {need:.3f}"))
        for n in ("autorag_ko", "legal_prec2statute"):
            if n not in sets:
                continue
            for metric in ("mrr", "ndcg@10"):
                need = max(_value(rows["bm25"][n], metric), _value(rows["dense"][n], metric))
                need -= 0.01
                got = _value(car[n], metric)
                out.append((f"{kind}: {n} {metric} ≥ max(bm25, dense) − 0.01", got >= need,
                            f"{got:.3f} vs {need:.3f}"))
        worst = min(p for n in sets for p in car[n]["p_loss_holm"].values())
        out.append((f"{kind}: no stratum significantly below the hybrid (Holm p ≥ 0.05)",
                    worst >= 0.05, f"smallest Holm p of a loss {_fmt_p(worst)}"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--store", default=str(DEFAULT_STORE),
                    help="folder the per-set collections are kept in")
    ap.add_argument("--cached-only", action="store_true",
                    help="never embed: fail when a corpus, query or span vector is not cached")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    sets = {}
    for f in args.sets:
        s = collect(f, store=Path(args.store), cached_only=args.cached_only)
        sets[s.name] = s
        print(f"  collected {s.name} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    fams = families()
    points = list(dict.fromkeys(p for ps in fams.values() for p in ps))
    table = Table(sets, points)
    base_rows: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for n, s in sets.items():
        base_rows[n] = {}
        for channel in ("bm25", "dense", "hybrid"):
            vals = [metrics_of(s, q, channel_ranking(s, q, channel)) for q in s.strata["all"]]
            base_rows[n][channel] = (np.asarray([a for a, _ in vals]),
                                     np.asarray([b for _, b in vals]))
    hybrid = {n: base_rows[n]["hybrid"][0] for n in sets}
    results: dict[str, Any] = {
        "protocol": {"folds": FOLDS, "fold": "sha256(query id)[0] mod 5", "points": len(points),
                     "selection": "mean over the sets of MRR on the training queries"},
        "sets": {n: {"stats": s.stats, "cost_ms": s.cost_ms} for n, s in sets.items()},
        "families": {},
    }
    head = ("| set | system | " + " | ".join(STRATA)
            + " | nDCG@10 | p gain (Holm) | p loss (Holm) |")
    rule = "|---|---|" + "---|" * len(STRATA) + "---|---|---|"
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    per_set: dict[str, list[str]] = {n: [] for n in sets}
    ablation = ["| set | family | estimate | " + " | ".join(STRATA)
                + " | nDCG@10 | p gain (Holm) | p loss (Holm) |",
                "|---|---|---|" + "---|" * len(STRATA) + "---|---|---|"]
    cv_by_family = {f: table.cross_validate(ps) for f, ps in fams.items()}
    for channel in ("bm25", "dense", "hybrid"):
        rows = {n: base_rows[n][channel][0] for n in sets}
        gain, loss = _tests(sets, rows, hybrid) if channel != "hybrid" else (None, None)
        summary[channel] = {}
        for n, s in sets.items():
            line, entry = _row(s, channel, rows[n], base_rows[n][channel][1], hybrid[n],
                               gain, loss)
            summary[channel][n] = entry
            per_set[n].append(line)
    for f, cv in cv_by_family.items():
        fam_entry: dict[str, Any] = {"fold_choices": cv["fold_choices"],
                                     "loso_choices": cv["loso_choices"],
                                     "default": dataclasses.asdict(cv["default"])
                                     | {"name": cv["default"].name}}
        for kind, key in (("CV", "cv"), ("LOSO", "loso")):
            rr, nd = cv[key]
            gain, loss = _tests(sets, rr, hybrid)
            fam_entry[kind] = {}
            for n, s in sets.items():
                line, entry = _row(s, f, rr[n], nd[n], hybrid[n], gain, loss)
                fam_entry[kind][n] = entry
                ablation.append(line.replace(f"| {f} |", f"| {f} | {kind} |", 1))
                if f == SHIPPED:
                    summary.setdefault(f"car ({kind})", {})[n] = entry
                    per_set[n].append(line.replace(f"| {f} |", f"| car ({kind}) |", 1))
        results["families"][f] = fam_entry
    main_lines = [head, rule] + [line for n in sets for line in per_set[n]]
    results["summary"] = summary
    checks = targets(sets, summary)
    shipped = cv_by_family[SHIPPED]["default"]
    results["default"] = dataclasses.asdict(shipped) | {"name": shipped.name}
    results["targets"] = [{"line": a, "met": b, "values": c} for a, b, c in checks]
    results["seconds"] = time.perf_counter() - started
    costs = {n: s.cost_ms for n, s in sets.items()}
    cost_line = "; ".join(
        f"{lever}: " + ", ".join(f"{n} {c[lever]:.2f}" for n, c in costs.items() if lever in c)
        for lever in ("question cue", "dense WIG", "late interaction", "CoNg expansion",
                      "span BM25"))
    md = [
        "MRR (Δ vs the hybrid) by overlap stratum, nDCG@10 over all queries; p: one-sided "
        "paired Wilcoxon, Holm-corrected per row (gain: car > hybrid over each set's all and "
        "low; loss: hybrid > car over every stratum). **car (CV)**: 5-fold CV over queries; "
        "**car (LOSO)**: the point chosen on the two other sets.", "",
        *main_lines, "",
        f"Default (chosen on all developer queries): `{shipped.name}` "
        f"(`OfflineCriterionRetriever` ships β = {DEFAULT_OFFLINE_ALPHA:g}, "
        f"γ = {DEFAULT_SPAN_Z_WEIGHT:g}). Questions among the queries: "
        + ", ".join(f"{n} {s.stats['questions']}/{s.stats['queries']}" for n, s in sets.items())
        + "; table-row spans: " + ", ".join(f"{n} {s.stats['row_spans']}"
                                             for n, s in sets.items()) + ".", "",
        "Done-when lines of issue 41 (on the rows above):", "",
        *[f"- {'✓' if ok else '✗'} {line} ({values})" for line, ok, values in checks], "",
        "### Ablation: each lever alone and combined (each family cross-validated in its own "
        "sub-grid)", "",
        *ablation, "",
        "Chosen points (the default on all queries; leave-one-set-out choices):", "",
        *[f"- {f}: `{cv['default'].name}`; LOSO: "
          + "; ".join(f"{n} `{c}`" for n, c in cv["loso_choices"].items())
          for f, cv in cv_by_family.items()], "",
        "Cost per query of each lever's inputs (median ms, by set; span BM25 timed as a "
        f"query-time Kiwi pass over the spans of a 50-node pool, first {COST_SAMPLE} queries): "
        + cost_line + ".",
    ]
    text = "\n".join(md) + "\n"
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
