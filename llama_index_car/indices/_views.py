"""Retrievers as views of a :class:`~llama_index_car.indices.CriterionAwareIndex`.

A view holds its options (``similarity_top_k``, ``filters``) and its index, never state: each
query pins the index's current snapshot at its start and reads only it. A fused retriever
(CAR, the hybrid) pins **one** snapshot for all its channels (:func:`bound_channels`) and
passes the channels bound to it (``view.at(snapshot)``) down the query.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError
from llama_index_car._filters import check_filters
from llama_index_car.query_guard import guarded_retrieve

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever

    from llama_index_car.indices.criterion_aware import CriterionAwareIndex, IndexSnapshot

__all__ = [
    "IndexDense", "bound_channels", "check_view_filters", "citation_engine",
    "span_postprocessor", "view",
]


def check_view_filters(filters: Any, store: Any = None) -> MetadataFilters | None:
    """``filters`` if ``None`` or valid ``MetadataFilters`` (for ``store`` too: a vector
    store that would read them with another meaning is refused, see
    :func:`~llama_index_car._filters.check_filters`), else
    :class:`ConfigurationError`."""
    if filters is not None and not isinstance(filters, MetadataFilters):
        raise ConfigurationError(
            f"filters must be llama_index MetadataFilters, got {type(filters).__name__}"
        )
    check_filters(filters, store=store)
    return filters


class IndexDense(VectorIndexRetriever):
    """The dense channel: a ``VectorIndexRetriever`` over the index's vector store with
    ``filters`` applied by the store, its hits restricted to the ids of the snapshot it reads
    (the one it is bound to, else the one pinned at query start). An index that keeps its
    vectors itself (the default ``FlatVectorStore``) is searched in that snapshot's own
    vector state (:mod:`~llama_index_car.indices._dense`: exact cosine; filters evaluated as
    the BM25 channel does), which an update replaces and never changes.

    Every query goes through the package's query guard
    (:func:`~llama_index_car.query_guard.guarded_retrieve`) before anything is embedded.
    Async queries run the synchronous store call in a worker thread (store async clients
    differ in what they support).
    """

    def __init__(
        self,
        index: CriterionAwareIndex,
        similarity_top_k: int,
        filters: MetadataFilters | None = None,
    ) -> None:
        if index.vector_index is None:
            raise ConfigurationError(
                "this CriterionAwareIndex has no vector index (BM25 only): build it with "
                "CriterionAwareIndex.from_defaults(nodes=..., embed_model=...) for dense views"
            )
        # a store-kept index: the store applies the filters, with the meaning they have on
        # the other channels or not at all
        store = index.vector_index.vector_store if index.snapshot.dense is None else None
        super().__init__(index.vector_index, similarity_top_k=similarity_top_k,
                         filters=check_view_filters(filters, store),
                         embed_model=index.embed_model)
        self.index = index
        self.snapshot: IndexSnapshot | None = None

    @property
    def filters(self) -> MetadataFilters | None:
        """The ``MetadataFilters`` the store applies."""
        return self._filters

    def at(self, snapshot: IndexSnapshot) -> IndexDense:
        """A copy reading ``snapshot``."""
        clone = copy.copy(self)
        clone.snapshot = snapshot
        return clone

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.snapshot is not None:
            return self._search(query_bundle, self.snapshot)
        with self.index.pinned() as snap:
            return self._search(query_bundle, snap)

    def _search(self, query_bundle: QueryBundle, snap: IndexSnapshot) -> list[NodeWithScore]:
        if snap.dense is not None:
            return self._search_memory(query_bundle, snap)
        return [h for h in super()._retrieve(query_bundle) if h.node.node_id in snap.ids]

    def _search_memory(
        self, query_bundle: QueryBundle, snap: IndexSnapshot
    ) -> list[NodeWithScore]:
        """Exact cosine top-k over the snapshot's vectors (``SimpleVectorStore``'s cosine)."""
        dense = snap.dense
        if dense is None:  # pragma: no cover - _search checked it
            return []
        embedding = query_bundle.embedding
        if embedding is None:
            embedding = self._embed_model.get_agg_embedding_from_queries(
                query_bundle.embedding_strs)
        lexical = snap.lexical
        hits = dense.search(embedding, self._similarity_top_k, self._filters)
        return [NodeWithScore(node=lexical.node(i), score=score) for i, score in hits]

    @guarded_retrieve
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)


@contextlib.contextmanager
def bound_channels(retrievers: Sequence[BaseRetriever]) -> Iterator[list[BaseRetriever]]:
    """``retrievers`` with every index view bound to one pinned snapshot of its index (one
    pin per index, held for the block); other retrievers as they are."""
    with contextlib.ExitStack() as stack:
        pins: dict[int, Any] = {}
        out: list[BaseRetriever] = []
        for r in retrievers:
            index = getattr(r, "index", None)
            at = getattr(r, "at", None)
            if index is None or at is None or not hasattr(index, "pinned"):
                out.append(r)
                continue
            if id(index) not in pins:
                pins[id(index)] = stack.enter_context(index.pinned())
            out.append(at(pins[id(index)]))
        yield out


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
    **kwargs: Any,
) -> BaseRetriever:
    """A ``kind`` retriever over ``index``: ``bm25`` (:class:`KiwiBM25Retriever`), ``dense``
    (:class:`IndexDense`), ``hybrid`` (:class:`WeightedRRFRetriever`, ``alpha`` default 0.5)
    or ``car`` (:meth:`CriterionAwareRetriever.from_channels`: offline without
    ``hypothesizer``, re-ranking by the index's span index when it has one; ``kwargs`` are
    its options, e.g. ``criterion_spans``, ``span_weight``, ``route``).

    ``pool_top_k`` (default 50; the offline ``car`` 100) is the per-channel candidate pool of
    the fused kinds and ``rrf_k`` (default 60) the RRF constant of the rank-fused ones
    (``hybrid``, ``car`` with a hypothesizer; the offline ``car`` fuses scores and refuses it); ``filters`` (``MetadataFilters``) apply to
    every channel. An option the kind does not use is refused, never ignored.

    Raises:
        ConfigurationError: unknown ``kind``, an option ``kind`` does not use, or a dense kind
            over a BM25-only index.
    """
    from llama_index_car.indices.criterion_aware import RETRIEVER_KINDS
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

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
    given_rrf_k, rrf_k = rrf_k, 60 if rrf_k is None else rrf_k
    if kind == "bm25":
        return KiwiBM25Retriever(index=index, similarity_top_k=similarity_top_k,
                                 filters=filters)
    if kind == "dense":
        return IndexDense(index, similarity_top_k, filters)
    if pool_top_k is None:  # the offline CAR standardises its channels' scores over 100
        from llama_index_car.retrievers.criterion_aware import DEFAULT_OFFLINE_POOL

        pool_top_k = DEFAULT_OFFLINE_POOL if kind == "car" and hypothesizer is None else 50
    pool = max(pool_top_k, similarity_top_k)
    dense = IndexDense(index, pool, filters)
    lexical = KiwiBM25Retriever(index=index, similarity_top_k=pool, filters=filters,
                                warn_small=False)
    if kind == "hybrid":
        from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever

        return WeightedRRFRetriever.from_alpha(
            dense, lexical, alpha=0.5 if alpha is None else alpha, rrf_k=rrf_k,
            pool_top_k=pool, similarity_top_k=similarity_top_k, **kwargs,
        )
    from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

    kwargs.setdefault("span_index", index.spans)
    kwargs.setdefault("embed_model", index.embed_model)
    if hypothesizer is not None or given_rrf_k is not None:  # the offline CAR refuses it
        kwargs["rrf_k"] = rrf_k
    return CriterionAwareRetriever.from_channels(
        dense, lexical, hypothesizer, alpha=alpha, pool_top_k=pool,
        similarity_top_k=similarity_top_k, **kwargs,
    )


def span_postprocessor(index: CriterionAwareIndex, top_n: int = 3) -> Any:
    """:meth:`CriterionAwareIndex.span_postprocessor`."""
    if index.spans is None:
        return None
    from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor

    return CriterionSpanPostprocessor(index.spans, index.embed_model,
                                      tokenizer=index.tokenizer, top_n=top_n)


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
