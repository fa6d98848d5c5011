"""``OfflineCriterionRetriever``: the offline CAR (no LLM; nothing is learnt at index time).

What :meth:`CriterionAwareRetriever.from_defaults
<llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever.from_defaults>` builds
without an LLM. Channels:

* dense: ``dense(query)``; lexical: ``lexical(query)`` (both ``pool_top_k`` deep, default 100);
* feedback (off by default): ``lexical(query + " " + terms)`` where ``terms`` are the 10
  terms with the largest ``idf × tf`` summed over the top-5 dense hits
  (:mod:`llama_index_car.hypothesizers.feedback`, read from the BM25 index's own counts).

Fusion (``fusion="z"``, the default): :func:`~llama_index_car.fusion.zscore_fusion` of the
channels' own scores, ``β·z(dense) + (1 − β)·z(bm25)`` with ``β = alpha`` (0.3), each
channel's scores standardised over its ``pool_top_k`` hits. Rank fusion throws the score
shapes away; standardised scores keep them, so per query the channel that is sure leads —
BM25 on a lone exact match, the dense channel on a paraphrase it finds clearly — with one
setting for every corpus. Then, with a :class:`~llama_index_car.span_index.SpanIndex`, the
first ``span_pool`` (50) are re-ranked by ``score + γ·z(span)`` (``γ = span_weight``, 0.8;
``z(span)``: each node's best span cosine standardised over the pool;
:func:`~llama_index_car.fusion.span_zscore_fusion`): the section whose one sentence or row
states the criterion rises above the section that is only about the topic.

``fusion="rrf"`` is the rank-fusion variant measured before it: weights
``[α(1 − p), (1 − α)(1 − p), p]`` with ``α(s) = alpha − (alpha − alpha_overlap)·s``
(``s``: the router signal, share of the query's content morphemes in its top-3 BM25 hits)
and the feedback share ``p = feedback_scale · (1 − s) · (1 − a)``
(:func:`~llama_index_car.retrievers.routing.feedback_share`; ``a``: top-5 agreement of the
two channels); the span step fuses the orders (:func:`~llama_index_car.fusion.span_fusion`,
``span_weight`` default 0.3). Under ``"z"`` the feedback channel, when on, is a third
standardised list with the same weights. ``bm25_lead`` (off by default) puts BM25's top hit
first when its score leads the second's by that share of itself (``car_explain`` records
``bm25_lead``: gap, threshold, moved_from).

Every default (z-score fusion at β 0.3 over 100 candidates per channel, span weight 0.8 over
a 50-node pool, α fixed, no BM25 lead, the feedback channel off) was chosen by 5-fold
cross-validation over the queries of three developer sets and checked leave-one-set-out
(``benchmarks/span_cv.py``, ``docs/results/span_cv.md``).

``car_explain`` carries ``fusion``, the channels' ranks and scores, ``feedback`` (share,
agreement, terms) and the router signal; the feedback terms are reported as the hypothesis
(source ``"feedback"``), and a feedback step that produced terms dispatches a
:class:`~llama_index_car.hypothesizers.events.CriterionHypothesisEvent`.

>>> from llama_index_car.retrievers.criterion_aware import FeedbackPlan, fusion_weights
>>> plan = FeedbackPlan(share=0.0, signal=1.0, agreement=0.2, terms=(), bundle=None)
>>> fusion_weights(0.3, 0.3, plan)  # α fixed (alpha_overlap = alpha): β = 0.3 at any signal
(('dense', 'lexical'), [0.3, 0.7])
>>> car = OfflineCriterionRetriever(dense, bm25)  # doctest: +SKIP
>>> car.retrieve("비 오는 날 압접 작업")[0].node.metadata["car_explain"]["feedback"]  # doctest: +SKIP
{'share': 0.0, 'agreement': 0.2, 'terms': []}
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError
from llama_index_car.fusion import DEFAULT_RRF_K, score_gap
from llama_index_car.hypothesizers.events import emit_hypothesis_event
from llama_index_car.postprocessors.span_rerank import (
    DEFAULT_SPAN_POOL,
    DEFAULT_SPAN_WEIGHT,
    rerank_by_spans,
)
from llama_index_car.retrievers.criterion_aware import (
    DEFAULT_BM25_LEAD,
    DEFAULT_OFFLINE_ALPHA,
    DEFAULT_OFFLINE_FUSION,
    DEFAULT_OFFLINE_POOL,
    DEFAULT_SPAN_Z_WEIGHT,
    SHARED_OPTIONS,
    Channels,
    CriterionAwareRetriever,
    FeedbackPlan,
    Search,
    Steps,
    check_unit,
    explain_fields,
    fusion_weights,
)
from llama_index_car.retrievers.routing import LexicalOverlapRouter
from llama_index_car.retrievers.weighted_rrf import check_int, fuse_channel_results
from llama_index_car.span_index import SpanIndex

__all__ = ["OfflineCriterionRetriever"]


def check_nonnegative(name: str, value: Any) -> float:
    """``value`` as a finite float ≥ 0, else :class:`ConfigurationError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name}={value!r} must be a number >= 0")
    if not math.isfinite(float(value)) or value < 0:
        raise ConfigurationError(f"{name}={value!r} must be a finite number >= 0")
    return float(value)


def _lead_first(
    hits: list[NodeWithScore], node_id: str, gap: float, threshold: float
) -> list[NodeWithScore]:
    """``hits`` with ``node_id`` moved to the front (score raised just above the first's, so
    any sort by score keeps the order); its ``car_explain`` records the lead (``bm25_lead``)."""
    at = next((i for i, h in enumerate(hits) if h.node.node_id == node_id), None)
    if at is None or at == 0:
        if at == 0:
            hits[0].node.metadata.setdefault("car_explain", {})["bm25_lead"] = {
                "gap": gap, "threshold": threshold, "moved_from": 1}
        return hits
    hit = hits[at]
    explain = hit.node.metadata.setdefault("car_explain", {})
    explain["bm25_lead"] = {"gap": gap, "threshold": threshold, "moved_from": at + 1,
                            "fused_score": hit.score}
    hit.score = math.nextafter(float(hits[0].score or 0.0), math.inf)  # strictly first
    return [hit] + hits[:at] + hits[at + 1 :]


class OfflineCriterionRetriever(CriterionAwareRetriever):
    """The offline CAR: z-score fusion of dense ⊕ lexical (⊕ feedback), span re-ranking.

    Args (besides the shared ones of
    :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`):
        alpha: the dense share β (default
            :data:`~llama_index_car.retrievers.criterion_aware.DEFAULT_OFFLINE_ALPHA`, 0.3).
        pool_top_k: candidates per channel (default 100: the depth the scores are
            standardised over).
        fusion: ``"z"`` (default: standardised scores) or ``"rrf"`` (weighted RRF).
        alpha_overlap: the dense share at router signal 1 (α moves linearly from ``alpha``
            at signal 0); default ``alpha`` (fixed).
        span_index: re-rank the fused pool by its best spans, and attach criterion spans.
        span_weight: weight of the span score (default with a ``span_index``: 0.8 under
            ``"z"``, 0.3 under ``"rrf"``, where it must be ≤ 1; else 0); > 0 needs a
            ``span_index`` and the embedding.
        span_pool: fused nodes re-ranked by spans (default 50).
        bm25_lead: BM25's top hit goes first when its score gap to the second is at least
            this share of its score (default 0: off).
        feedback_scale: the feedback channel's scale (default 0: off).
    """

    #: its keyword options (``from_channels`` refuses others by name)
    OPTIONS = SHARED_OPTIONS | {"span_weight", "span_pool", "alpha_overlap", "bm25_lead",
                                "fusion"}

    def __init__(
        self,
        dense_retriever: BaseRetriever,
        lexical_retriever: BaseRetriever,
        alpha: float | None = None,
        rrf_k: int = DEFAULT_RRF_K,
        pool_top_k: int | None = None,
        similarity_top_k: int = 10,
        router: LexicalOverlapRouter | None = None,
        feedback_scale: float | None = None,
        span_index: SpanIndex | None = None,
        span_weight: float | None = None,
        span_pool: int = DEFAULT_SPAN_POOL,
        alpha_overlap: float | None = None,
        bm25_lead: float | None = None,
        criterion_spans: int | None = None,
        embed_model: Any | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        fusion: str | None = None,
    ) -> None:
        super().__init__(
            dense_retriever, lexical_retriever,
            alpha=DEFAULT_OFFLINE_ALPHA if alpha is None else alpha, rrf_k=rrf_k,
            pool_top_k=DEFAULT_OFFLINE_POOL if pool_top_k is None else pool_top_k,
            similarity_top_k=similarity_top_k, router=router,
            feedback_scale=feedback_scale, span_index=span_index,
            criterion_spans=criterion_spans, embed_model=embed_model,
            callback_manager=callback_manager, verbose=verbose,
        )
        self.fusion = DEFAULT_OFFLINE_FUSION if fusion is None else fusion
        if self.fusion not in ("z", "rrf"):
            raise ConfigurationError(f"fusion={self.fusion!r} is unknown; use 'z' or 'rrf'")
        if span_weight is None:
            default = DEFAULT_SPAN_Z_WEIGHT if self.fusion == "z" else DEFAULT_SPAN_WEIGHT
            span_weight = default if span_index is not None else 0.0
        if self.fusion == "z":
            self.span_weight = check_nonnegative("span_weight", span_weight)
        else:
            self.span_weight = check_unit("span_weight", span_weight)
        self.span_pool = check_int("span_pool", span_pool)
        self.alpha_overlap = check_unit(
            "alpha_overlap", self.alpha if alpha_overlap is None else alpha_overlap
        )
        self.bm25_lead = check_unit(
            "bm25_lead", DEFAULT_BM25_LEAD if bm25_lead is None else bm25_lead, " (0 = off)"
        )
        if self.span_weight > 0 and span_index is None:
            raise ConfigurationError("span_weight > 0 needs a span_index (or pass span_weight=0)")
        if self.span_weight > 0 and self.embed_model is None:
            raise ConfigurationError(
                "span ranking needs the query vector: pass embed_model (the index's embedding)"
            )

    def _wants_query_vector(self) -> bool:
        return self.span_weight > 0 or super()._wants_query_vector()

    def _steps(self, query_bundle: QueryBundle, ch: Channels) -> Steps:
        query_bundle = yield from self._with_query_vector(query_bundle)
        query = query_bundle.query_str
        lexical = ch.lexical
        jobs = ((ch.dense, query_bundle), (lexical, QueryBundle(query)))
        results = yield Search(jobs)
        started = time.perf_counter()
        plan = self._plan_feedback(query, results[0], results[1], ch)
        if plan.bundle is not None:
            results += yield Search(((lexical, plan.bundle),))
        hypothesis = plan.hypothesis
        if hypothesis is not None:
            emit_hypothesis_event(query, "feedback", hypothesis, time.perf_counter() - started)
        fused = self._fuse(results, plan, query_bundle.embedding, ch.spans)
        return self._with_criterion_spans(fused, query_bundle, ch)

    def _fuse(
        self,
        results: Sequence[Sequence[NodeWithScore]],
        plan: FeedbackPlan,
        query_vector: Sequence[float] | None,
        span_index: SpanIndex | None,
    ) -> list[NodeWithScore]:
        names, weights = fusion_weights(self.alpha, self.alpha_overlap, plan)
        explain = explain_fields(plan.hypothesis, fallback=False, routed="car",
                                 signal=plan.signal, error=None, plan=plan)
        lexical = results[1]
        gap = score_gap([h.score for h in lexical[:2]])
        lead = self.bm25_lead > 0 and gap >= self.bm25_lead
        spans = query_vector is not None and span_index is not None and self.span_weight > 0
        depth = self.similarity_top_k
        if lead:  # the lead hit may rank anywhere in the fusion
            depth = sum(len(r) for r in results)
        elif spans:
            depth = max(self.similarity_top_k, self.span_pool)
        fused = fuse_channel_results(results, names, weights, self.rrf_k, depth, explain,
                                     fusion=self.fusion)
        if spans and query_vector is not None and span_index is not None:
            fused = rerank_by_spans(
                fused, span_index, query_vector, weight=self.span_weight,
                pool=self.span_pool, rrf_k=self.rrf_k, fusion=self.fusion,
            )
        if lead:
            fused = _lead_first(fused, lexical[0].node.node_id, gap, self.bm25_lead)
        return fused[: self.similarity_top_k]
