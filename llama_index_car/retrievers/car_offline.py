"""``OfflineCriterionRetriever``: the offline CAR (no LLM; nothing is learnt at index time).

What :meth:`CriterionAwareRetriever.from_defaults
<llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever.from_defaults>` builds
without an LLM. One algorithm, :func:`~llama_index_car.fusion.criterion_ranking`:

1. **z-score fusion** of the two channels, dense(query) and lexical(query), each
   ``pool_top_k`` (100) deep: ``β·z(dense) + (1 − β)·z(lexical)`` with ``β = alpha`` (0.3),
   each channel's scores standardised over its own hits
   (:func:`~llama_index_car.fusion.zscore_fusion`). Rank fusion throws the score shapes
   away; standardised scores keep them, so per query the channel that is sure leads — BM25
   on a lone exact match, the dense channel on a paraphrase it finds clearly.
2. **span re-ranking** with a :class:`~llama_index_car.span_index.SpanIndex`, for a query
   phrased as a question (:func:`~llama_index_car.postprocessors.criterion_spans.question_cue`:
   a question mark, an interrogative word or ending; :func:`span_weight_for`): the first
   ``span_pool`` (50) fused nodes re-ranked by ``score + γ·z(span)`` (``γ = span_weight``,
   1.2; ``z(span)``: each node's best span cosine standardised over the pool;
   :func:`~llama_index_car.fusion.span_zscore_fusion`): the section whose one sentence or row
   answers the question rises above the section that is only about the topic. A statement
   (a court holding, a list of keywords) asks for no one sentence: its ranking is the fusion's.

Every default was chosen by 5-fold cross-validation over the queries of three developer sets
and checked leave-one-set-out (``benchmarks/span_cv.py``, which scores its grid through the
same :func:`~llama_index_car.fusion.criterion_ranking`; ``docs/results/span_cv.md``).

``car_explain`` carries the channels' ranks and scores, the weights, ``fusion: "z"``,
``question`` (whether the span step counted) and, for the re-ranked pool, ``span`` (the best
span: text, score, rank, offsets, table coordinates).

>>> car = OfflineCriterionRetriever(dense, bm25, span_index=spans, embed_model=embed)  # doctest: +SKIP
>>> car.retrieve("비 오는 날 압접 작업")[0].node.metadata["car_explain"]["span"]["text"]  # doctest: +SKIP
'우천 시에는 압접 작업을 하지 않는다.'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError
from llama_index_car.fusion import criterion_ranking, span_ranks, strictly_decreasing
from llama_index_car.postprocessors.criterion_spans import question_cue
from llama_index_car.postprocessors.span_rerank import DEFAULT_SPAN_POOL, with_span_explain
from llama_index_car.retrievers.criterion_aware import (
    DEFAULT_OFFLINE_ALPHA,
    DEFAULT_OFFLINE_POOL,
    DEFAULT_SPAN_Z_WEIGHT,
    SHARED_OPTIONS,
    Channels,
    CriterionAwareRetriever,
    Search,
    Steps,
    explain_fields,
)
from llama_index_car.retrievers.weighted_rrf import check_int, explain_fused
from llama_index_car.span_index import SpanHit, SpanIndex

__all__ = ["OfflineCriterionRetriever", "span_weight_for"]

CHANNEL_NAMES = ("dense", "lexical")


def check_nonnegative(name: str, value: Any) -> float:
    """``value`` as a finite float ≥ 0, else :class:`ConfigurationError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name}={value!r} must be a number >= 0")
    if not math.isfinite(float(value)) or value < 0:
        raise ConfigurationError(f"{name}={value!r} must be a finite number >= 0")
    return float(value)


def span_weight_for(query: str, span_weight: float) -> float:
    """The span weight γ one query gets: ``span_weight`` when ``query`` is phrased as a
    question (:func:`~llama_index_car.postprocessors.criterion_spans.question_cue`), else 0.

    >>> span_weight_for("배수관 간격은 얼마인가요?", 1.2), span_weight_for("배수관 간격", 1.2)
    (1.2, 0.0)
    """
    return span_weight if question_cue(query) else 0.0


class OfflineCriterionRetriever(CriterionAwareRetriever):
    """The offline CAR: z-score fusion of dense ⊕ lexical, then span re-ranking (module
    docstring).

    Args (besides the shared ones of
    :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`):
        alpha: the dense share β (default :data:`DEFAULT_OFFLINE_ALPHA`, 0.3).
        pool_top_k: candidates per channel (default :data:`DEFAULT_OFFLINE_POOL`, 100: the
            depth the scores are standardised over).
        span_index: re-rank the fused pool by its best spans, and attach criterion spans.
        span_weight: γ, the weight of the standardised span score for a question (default
            :data:`~llama_index_car.retrievers.criterion_aware.DEFAULT_SPAN_Z_WEIGHT`, 1.2,
            with a ``span_index``; 0 without); > 0 needs a ``span_index`` and the embedding.
        span_pool: fused nodes re-ranked by spans (default 50).
    """

    #: its keyword options (``car_from_channels`` refuses others by name)
    OPTIONS = SHARED_OPTIONS | {"span_weight", "span_pool"}

    def __init__(
        self,
        dense_retriever: BaseRetriever,
        lexical_retriever: BaseRetriever,
        alpha: float | None = None,
        pool_top_k: int | None = None,
        similarity_top_k: int = 10,
        span_index: SpanIndex | None = None,
        span_weight: float | None = None,
        span_pool: int = DEFAULT_SPAN_POOL,
        criterion_spans: int | None = None,
        embed_model: Any | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            dense_retriever, lexical_retriever,
            alpha=DEFAULT_OFFLINE_ALPHA if alpha is None else alpha,
            pool_top_k=DEFAULT_OFFLINE_POOL if pool_top_k is None else pool_top_k,
            similarity_top_k=similarity_top_k, span_index=span_index,
            criterion_spans=criterion_spans, embed_model=embed_model,
            callback_manager=callback_manager, verbose=verbose,
        )
        if span_weight is None:
            span_weight = DEFAULT_SPAN_Z_WEIGHT if span_index is not None else 0.0
        self.span_weight = check_nonnegative("span_weight", span_weight)
        self.span_pool = check_int("span_pool", span_pool)
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
        jobs = ((ch.dense, query_bundle), (ch.lexical, QueryBundle(query_bundle.query_str)))
        results = yield Search(jobs)
        fused = self._fuse(results, query_bundle.query_str, query_bundle.embedding, ch.spans)
        return self._with_criterion_spans(fused, query_bundle, ch)

    def _fuse(
        self,
        results: Sequence[Sequence[NodeWithScore]],
        query: str,
        query_vector: Sequence[float] | None,
        span_index: SpanIndex | None,
    ) -> list[NodeWithScore]:
        """The channels' hits ranked by :func:`~llama_index_car.fusion.criterion_ranking`,
        as explained copies (the best span recorded for the re-ranked pool)."""
        scored = [[(h.node.node_id, float(h.score or 0.0)) for h in hits] for hits in results]
        found: dict[str, SpanHit | None] = {}
        spans_of = None
        weight = span_weight_for(query, self.span_weight)
        if query_vector is not None and span_index is not None and weight > 0:
            def spans_of(ids: Sequence[str]) -> list[float | None]:
                hits = span_index.best_spans(query_vector, ids)
                found.update(zip(ids, hits, strict=True))
                return [h.score if h is not None else None for h in hits]

        ranked = criterion_ranking(
            scored[0], scored[1], self.alpha, span_scores=spans_of, span_weight=weight,
            span_pool=self.span_pool,
        )[: self.similarity_top_k]
        explain = explain_fields(None, fallback=False, routed="car", signal=None, error=None)
        explain["question"] = question_cue(query)
        weights = [self.alpha, 1.0 - self.alpha]
        out = explain_fused(results, CHANNEL_NAMES, weights, ranked, explain, fusion="z")
        if spans_of is not None:
            at = {d: i for i, d in enumerate(found)}
            rank = span_ranks([h.score if h is not None else None for h in found.values()])
            for i, nws in enumerate(out):
                hit = found.get(nws.node.node_id)
                span = None if hit is None else hit.span.to_dict() | {
                    "score": hit.score, "rank": rank[at[nws.node.node_id]],
                    "weight": weight, "fusion": "z"}
                out[i] = with_span_explain(nws, nws.score or 0.0, span)
        for nws, score in zip(out, strictly_decreasing([h.score or 0.0 for h in out]),
                              strict=True):
            nws.score = score  # the order survives any sort by score
        return out
