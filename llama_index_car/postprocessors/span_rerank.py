"""``SpanReranker``: re-rank a retriever's pool by the best criterion span of each node.

A section vector says what the section is *about*; the clause a criterion query seeks is one
sentence or table row of its body (:mod:`llama_index_car.spans`). Over the first ``pool``
nodes it is given (in their order), the reranker reads each node's span vectors from a
:class:`~llama_index_car.span_index.SpanIndex`, takes the best cosine with the query vector,
and fuses the two orders by :func:`~llama_index_car.fusion.span_fusion`:
``(1 − w)/(k + r_pool) + w/(k + r_span)``. Nodes past the pool keep their order after it.

Every node it returns is a copy whose ``metadata["car_explain"]["span"]`` holds the best
span (``text``, ``score``, ``rank``, ``kind``, ``start``/``end`` into the node text, and for a
table row ``table_index``, ``row``, ``col``, ``row_span``, ``col_span``, ``header``); the key is
excluded from embed and LLM metadata. The defaults (``weight``, ``pool``) are the ones the
rank-fusion CAR's cross-validation chose (issue 22; the offline CAR now re-ranks by scores,
:func:`~llama_index_car.fusion.criterion_ranking`).

>>> reranker = SpanReranker(span_index=spans, embed_model=embed)  # doctest: +SKIP
>>> engine = index.as_query_engine(node_postprocessors=[reranker])  # doctest: +SKIP
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError
from llama_index_car._nodes import with_metadata
from llama_index_car.fusion import (
    DEFAULT_RRF_K,
    span_fusion,
    span_ranks,
    strictly_decreasing,
)
from llama_index_car.span_index import SpanIndex

#: weight of the span order (chosen by 5-fold CV over three developer sets for the rank-fusion
#: CAR, issue 22)
DEFAULT_SPAN_WEIGHT = 0.3
#: nodes of the pool re-ranked (chosen with the weight)
DEFAULT_SPAN_POOL = 50
EXPLAIN_KEY = "car_explain"


def with_span_explain(
    nws: NodeWithScore, score: float, span: dict[str, Any] | None
) -> NodeWithScore:
    """A copy of ``nws`` at ``score`` whose ``car_explain["span"]`` is ``span`` (the key
    excluded from embed and LLM metadata; the input is not modified)."""
    old = nws.node.metadata.get(EXPLAIN_KEY)
    info: dict[str, Any] = copy.deepcopy(old) if isinstance(old, dict) else {}
    info["span"] = span
    return NodeWithScore(node=with_metadata(nws.node, EXPLAIN_KEY, info), score=score)


def check_span_inputs(span_index: Any, embed_model: Any) -> None:
    """A span postprocessor's inputs: a :class:`SpanIndex` and the index's embedding."""
    if not isinstance(span_index, SpanIndex):
        raise ConfigurationError(f"span_index is a {type(span_index).__name__}; pass a SpanIndex")
    if embed_model is None or not hasattr(embed_model, "get_agg_embedding_from_queries"):
        raise ConfigurationError("embed_model must be the index's BaseEmbedding")


def query_vector(query_bundle: QueryBundle, embed_model: Any) -> list[float]:
    """The bundle's embedding, or the query embedding of its ``embedding_strs``."""
    if query_bundle.embedding is not None:
        return list(query_bundle.embedding)
    return list(embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs))


def rerank_by_spans(
    nodes: Sequence[NodeWithScore],
    span_index: SpanIndex,
    query_vector: Sequence[float],
    *,
    weight: float = DEFAULT_SPAN_WEIGHT,
    pool: int = DEFAULT_SPAN_POOL,
    rrf_k: int = DEFAULT_RRF_K,
) -> list[NodeWithScore]:
    """The first ``pool`` of ``nodes`` re-ordered by :func:`span_fusion` of the two orders,
    then the rest (new, explained ``NodeWithScore`` objects; the inputs are not modified).
    (The offline CAR re-ranks its pool by scores instead:
    :func:`~llama_index_car.fusion.criterion_ranking`.)"""
    head, tail = list(nodes[:pool]), list(nodes[pool:])
    ids = [n.node.node_id for n in head]
    hits = span_index.best_spans(query_vector, ids)
    scores = [h.score if h is not None else None for h in hits]
    fused = span_fusion(ids, scores, weight, rrf_k)
    span_rank = span_ranks(scores)
    position = {d: i for i, d in enumerate(ids)}
    out = []
    for node_id, score in fused:
        i = position[node_id]
        hit = hits[i]
        span = None
        if hit is not None:
            span = hit.span.to_dict() | {"score": hit.score, "rank": span_rank[i], "weight": weight,
                                         "fusion": "rrf"}
        out.append(with_span_explain(head[i], score, span))
    out += [with_span_explain(n, n.score or 0.0, None) for n in tail]
    for nws, score in zip(out, strictly_decreasing([h.score or 0.0 for h in out]), strict=True):
        nws.score = score  # the order survives any sort by score (ties, head above tail)
    return out


class SpanReranker(BaseNodePostprocessor):
    """Re-rank nodes by their best criterion span for the query (module docstring).

    Needs the query: ``postprocess_nodes(nodes, query_bundle=...)`` (query engines pass it).
    The query vector is ``query_bundle.embedding`` when set, else ``embed_model``'s query
    embedding of ``query_bundle.embedding_strs``.
    """

    weight: float = Field(default=DEFAULT_SPAN_WEIGHT, ge=0.0, le=1.0,
                          description="weight w of the span order in [0, 1]")
    pool: int = Field(default=DEFAULT_SPAN_POOL, gt=0, description="nodes re-ranked")
    rrf_k: int = Field(default=DEFAULT_RRF_K, ge=0, description="RRF constant k")
    top_n: int | None = Field(default=None, gt=0, description="nodes returned (None: all)")
    _span_index: SpanIndex = PrivateAttr()
    _embed_model: Any = PrivateAttr()

    def __init__(self, span_index: SpanIndex, embed_model: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_span_inputs(span_index, embed_model)
        self._span_index = span_index
        self._embed_model = embed_model

    @classmethod
    def class_name(cls) -> str:
        return "SpanReranker"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ConfigurationError("SpanReranker needs the query (query_bundle)")
        if not nodes:
            return []
        out = rerank_by_spans(
            nodes, self._span_index, query_vector(query_bundle, self._embed_model), weight=self.weight, pool=self.pool, rrf_k=self.rrf_k
        )
        return out[: self.top_n] if self.top_n is not None else out
