"""What :meth:`CriterionAwareIndex.as_retriever
<llama_index_car.indices.CriterionAwareIndex.as_retriever>` builds: a retriever of each kind
over an index, from options alone (:func:`view`), and the citation engine over one
(:func:`citation_engine`).

Kinds (:data:`RETRIEVER_KINDS`): ``bm25``
(:class:`~llama_index_car.retrievers.kiwi_bm25.KiwiBM25Retriever`), ``dense``
(:class:`~llama_index_car.retrievers.dense.IndexDense`), ``hybrid``
(:class:`~llama_index_car.retrievers.weighted_rrf.WeightedRRFRetriever`) and ``car`` (the CAR
factory, :func:`~llama_index_car.retrievers.car.car_from_channels`: the offline CAR without a
hypothesizer, the hypothesis CAR with one). Every decision about a view is made here — the
candidate pool (:func:`pool_size`), which options a kind takes (the others are refused, never
ignored), the spans attached to the hits — so a caller (the CLI, the service) passes options
and never edits a retriever it got. A reranker, or criterion spans on a kind that does not
attach them itself, make the view a :class:`PostprocessedRetriever`: the kind's retriever,
the reranker over its pool, the first ``similarity_top_k``, then the spans.

The index imports this module inside its methods, as LlamaIndex's
``VectorStoreIndex.as_retriever`` imports its retriever: the one import of the index layer
into a layer above it (``tests/test_layering.py``).

>>> pool_size("car", 5), pool_size("hybrid", 5), pool_size("hybrid", 80)
(100, 50, 80)
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError
from llama_index_car._nodes import with_metadata
from llama_index_car.postprocessors.criterion_spans import DEFAULT_CRITERION_SPANS
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers.car import car_from_channels
from llama_index_car.retrievers.criterion_aware import DEFAULT_OFFLINE_POOL
from llama_index_car.retrievers.dense import IndexDense
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.weighted_rrf import EXPLAIN_KEY, WeightedRRFRetriever

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

__all__ = ["RETRIEVER_KINDS", "PostprocessedRetriever", "citation_engine", "pool_size", "view"]

#: what ``index.as_retriever(kind)`` builds
RETRIEVER_KINDS: tuple[str, ...] = ("car", "hybrid", "bm25", "dense")
#: candidates per channel of the fused kinds (the offline CAR: ``DEFAULT_OFFLINE_POOL``, 100,
#: the depth its scores are standardised over)
DEFAULT_POOL_TOP_K = 50
#: the single-channel kinds and the channel their hits are explained under
_CHANNEL_OF = {"bm25": "lexical", "dense": "dense"}


def pool_size(
    kind: str, similarity_top_k: int, pool_top_k: int | None = None,
    hypothesizer: Any | None = None,
) -> int:
    """Candidates per channel of a fused ``kind`` (and what a reranker reorders):
    ``pool_top_k``, else 100 for the offline ``car`` and 50 otherwise; at least
    ``similarity_top_k``."""
    if pool_top_k is None:
        pool_top_k = (DEFAULT_OFFLINE_POOL if kind == "car" and hypothesizer is None
                      else DEFAULT_POOL_TOP_K)
    return max(pool_top_k, similarity_top_k)


def view(
    index: CriterionAwareIndex,
    kind: str = "car",
    *,
    similarity_top_k: int = 10,
    pool_top_k: int | None = None,
    filters: MetadataFilters | None = None,
    alpha: float | None = None,
    rrf_k: int | None = None,
    hypothesizer: Any | None = None,
    criterion_spans: int | None = None,
    reranker: Any | None = None,
    **kwargs: Any,
) -> BaseRetriever:
    """A ``kind`` retriever over ``index`` (see the module docstring).

    ``pool_top_k`` (:func:`pool_size`) is the per-channel candidate pool of the fused kinds and
    ``rrf_k`` (default 60) the RRF constant of the rank-fused ones (``hybrid``, ``car`` with a
    hypothesizer; the offline ``car`` fuses scores and refuses it); ``alpha`` the dense weight
    of the fused kinds (``hybrid`` 0.5; the offline ``car`` its own β); ``filters``
    (``MetadataFilters``) apply to every channel; ``kwargs`` are the ``car`` retriever's
    options (``span_weight``, ``route``, ``hypothesis_timeout`` …). ``criterion_spans``: the
    spans attached to each hit (``car``: its own option, default 3 with a span index; the
    other kinds: none unless given, through the index's span postprocessor). ``reranker``: a
    node postprocessor that reorders the kind's pool before the first ``similarity_top_k``
    are kept (then the spans are attached; a single-channel hit keeps the retriever's own
    rank and score under ``car_explain["channels"]``).

    Raises:
        ConfigurationError: unknown ``kind``, an option ``kind`` does not use, spans over an
            index without a span index, or a dense kind over a BM25-only index.
    """
    if kind not in RETRIEVER_KINDS:
        raise ConfigurationError(
            f"retriever kind {kind!r} is unknown; use one of {', '.join(RETRIEVER_KINDS)}"
        )
    unused: dict[str, Any] = {} if kind == "car" else {"hypothesizer": hypothesizer}
    if kind in ("bm25", "dense"):  # single-channel: no pool, fusion or CAR options
        unused |= {"pool_top_k": pool_top_k, "alpha": alpha, "rrf_k": rrf_k, **kwargs}
    given = sorted(name for name, value in unused.items() if value is not None)
    if given:
        raise ConfigurationError(
            f"retriever kind {kind!r} does not use {', '.join(given)}; leave "
            f"{'it' if len(given) == 1 else 'them'} out"
        )
    options = {"filters": filters, "alpha": alpha, "rrf_k": rrf_k, "hypothesizer": hypothesizer,
               **kwargs}
    if reranker is None and (kind == "car" or not criterion_spans):
        if kind == "car" and criterion_spans is not None:
            options["criterion_spans"] = criterion_spans
        return _kind(index, kind, similarity_top_k, pool_top_k, options)
    spans = criterion_spans
    if spans is None:  # after a reranker, car's spans go to the hits it keeps
        spans = DEFAULT_CRITERION_SPANS if kind == "car" and index.spans is not None else 0
    post = None
    if spans:
        post = index.span_postprocessor(top_n=spans)
        if post is None:
            raise ConfigurationError(
                f"criterion_spans={spans} needs a span index; this index has none (a folder "
                "built with --no-spans): leave criterion_spans out"
            )
    inner_top_k = similarity_top_k
    if reranker is not None:
        inner_top_k = pool_size(kind, similarity_top_k, pool_top_k, hypothesizer)
        if kind == "car":
            options["criterion_spans"] = 0
    inner = _kind(index, kind, inner_top_k, pool_top_k, options)
    embeds = post is not None and kind != "bm25"  # the view and the spans share one vector
    return PostprocessedRetriever(
        inner, similarity_top_k=similarity_top_k, reranker=reranker, spans=post,
        embed_model=index.embed_model if embeds else None, channel=_CHANNEL_OF.get(kind),
    )


def _kind(
    index: CriterionAwareIndex, kind: str, similarity_top_k: int, pool_top_k: int | None,
    options: dict[str, Any],
) -> BaseRetriever:
    """The retriever of ``kind`` itself (its options checked by :func:`view`)."""
    filters = options.pop("filters")
    if kind == "bm25":
        return KiwiBM25Retriever(index=index, similarity_top_k=similarity_top_k,
                                 filters=filters)
    if kind == "dense":
        return IndexDense(index, similarity_top_k, filters)
    alpha, rrf_k = options.pop("alpha"), options.pop("rrf_k")
    hypothesizer = options.pop("hypothesizer")
    pool = pool_size(kind, similarity_top_k, pool_top_k, hypothesizer)
    dense = IndexDense(index, pool, filters)
    lexical = KiwiBM25Retriever(index=index, similarity_top_k=pool, filters=filters,
                                warn_small=False)
    if kind == "hybrid":
        return WeightedRRFRetriever.from_alpha(
            dense, lexical, alpha=0.5 if alpha is None else alpha,
            rrf_k=60 if rrf_k is None else rrf_k, pool_top_k=pool,
            similarity_top_k=similarity_top_k, **options,
        )
    options.setdefault("span_index", index.spans)
    options.setdefault("embed_model", index.embed_model)
    if hypothesizer is not None or rrf_k is not None:  # the offline CAR refuses it
        options["rrf_k"] = 60 if rrf_k is None else rrf_k
    return car_from_channels(dense, lexical, hypothesizer, alpha=alpha, pool_top_k=pool,
                             similarity_top_k=similarity_top_k, **options)


class PostprocessedRetriever(BaseRetriever):
    """A view followed by what a query engine would run before synthesis, as a retriever: the
    ``reranker`` reorders the view's hits (its pool), the first ``similarity_top_k`` are kept,
    and ``spans`` (a
    :class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor`)
    attaches criterion spans to them. With ``embed_model`` the query vector is computed once,
    for the view and the spans. A reranked single-channel hit keeps the view's rank and score
    under ``car_explain["channels"][channel]``. Built by :func:`view`."""

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        similarity_top_k: int,
        reranker: Any | None = None,
        spans: Any | None = None,
        embed_model: Any | None = None,
        channel: str | None = None,
    ) -> None:
        self.retriever = retriever
        self.similarity_top_k = similarity_top_k
        self.reranker = reranker
        self.spans = spans
        self.embed_model = embed_model
        self.channel = channel
        super().__init__()

    @property
    def index(self) -> Any:
        """The index the inner view reads."""
        return getattr(self.retriever, "index", None)

    def _finish(self, hits: list[NodeWithScore], query_bundle: QueryBundle
                ) -> list[NodeWithScore]:
        if self.reranker is not None:
            if self.channel is not None:
                hits = [NodeWithScore(node=with_metadata(h.node, EXPLAIN_KEY, {"channels": {
                    self.channel: {"rank": rank, "score": h.score}}}), score=h.score)
                    for rank, h in enumerate(hits, start=1)]
            hits = list(self.reranker.postprocess_nodes(hits, query_bundle=query_bundle))
        hits = hits[: self.similarity_top_k]
        if self.spans is not None:
            hits = list(self.spans.postprocess_nodes(hits, query_bundle=query_bundle))
        return hits

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.embed_model is not None and query_bundle.embedding is None:
            query_bundle = dataclasses.replace(query_bundle, embedding=(
                self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)))
        return self._finish(self.retriever.retrieve(query_bundle), query_bundle)

    @guarded_retrieve
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.embed_model is not None and query_bundle.embedding is None:
            query_bundle = dataclasses.replace(query_bundle, embedding=(
                await self.embed_model.aget_agg_embedding_from_queries(
                    query_bundle.embedding_strs)))
        hits = await self.retriever.aretrieve(query_bundle)
        return await asyncio.to_thread(self._finish, hits, query_bundle)


def citation_engine(
    index: CriterionAwareIndex,
    llm: Any,
    kind: str = "car",
    *,
    similarity_top_k: int = 5,
    criterion_spans: int = 3,
    hypothesizer: Any | None = None,
    **engine_kwargs: Any,
) -> Any:
    """A :class:`~llama_index_car.query_engines.SpanCitationQueryEngine` answering with
    ``llm`` over the ``kind`` retriever, whose sources are the ``criterion_spans`` best spans
    of each of the ``similarity_top_k`` hits: ``car`` attaches them itself, the other kinds
    through :meth:`~CriterionAwareIndex.span_postprocessor` (an index without spans gives one
    ``section`` source per hit). ``engine_kwargs`` go to the engine (``streaming``,
    ``max_sources``, ``llm_timeout`` …; ``node_postprocessors`` run after the span
    postprocessor); chat with ``.as_chat_engine()``."""
    from llama_index_car.query_engines import SpanCitationQueryEngine

    car = kind == "car"
    options: dict[str, Any] = {"similarity_top_k": similarity_top_k}
    if car:
        options["hypothesizer"] = hypothesizer
        options["criterion_spans"] = criterion_spans if index.spans is not None else None
    retriever = view(index, kind, **options)
    post = None if car else index.span_postprocessor(top_n=criterion_spans)
    posts = [*([post] if post is not None else []),
             *(engine_kwargs.pop("node_postprocessors", None) or [])]
    return SpanCitationQueryEngine(retriever, llm, node_postprocessors=posts, **engine_kwargs)
