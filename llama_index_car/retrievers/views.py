"""What :meth:`CriterionAwareIndex.as_retriever
<llama_index_car.indices.CriterionAwareIndex.as_retriever>` builds: a retriever of each kind
over an index, from options alone (:func:`view`), and the citation engine over one
(:func:`citation_engine`).

Kinds (:data:`RETRIEVER_KINDS`): ``bm25``
(:class:`~llama_index_car.retrievers.kiwi_bm25.KiwiBM25Retriever`), ``dense``
(:class:`~llama_index_car.retrievers.dense.IndexDense`), ``hybrid``
(:class:`~llama_index_car.retrievers.weighted_rrf.WeightedRRFRetriever`) and ``car`` (the CAR
factory, :func:`~llama_index_car.retrievers.car.car_from_channels`: the offline CAR without a
hypothesizer, the hypothesis CAR with one).

The index imports this module inside its methods, as LlamaIndex's
``VectorStoreIndex.as_retriever`` imports its retriever: the one import of the index layer
into a layer above it (``tests/test_layering.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError
from llama_index_car.retrievers.car import car_from_channels
from llama_index_car.retrievers.criterion_aware import DEFAULT_OFFLINE_POOL
from llama_index_car.retrievers.dense import IndexDense
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever

    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

__all__ = ["RETRIEVER_KINDS", "citation_engine", "view"]

#: what ``index.as_retriever(kind)`` builds
RETRIEVER_KINDS: tuple[str, ...] = ("car", "hybrid", "bm25", "dense")


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
    or ``car`` (:func:`~llama_index_car.retrievers.car.car_from_channels`: offline without
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
        pool_top_k = DEFAULT_OFFLINE_POOL if kind == "car" and hypothesizer is None else 50
    pool = max(pool_top_k, similarity_top_k)
    dense = IndexDense(index, pool, filters)
    lexical = KiwiBM25Retriever(index=index, similarity_top_k=pool, filters=filters,
                                warn_small=False)
    if kind == "hybrid":
        return WeightedRRFRetriever.from_alpha(
            dense, lexical, alpha=0.5 if alpha is None else alpha, rrf_k=rrf_k,
            pool_top_k=pool, similarity_top_k=similarity_top_k, **kwargs,
        )
    kwargs.setdefault("span_index", index.spans)
    kwargs.setdefault("embed_model", index.embed_model)
    if hypothesizer is not None or given_rrf_k is not None:  # the offline CAR refuses it
        kwargs["rrf_k"] = rrf_k
    return car_from_channels(
        dense, lexical, hypothesizer, alpha=alpha, pool_top_k=pool,
        similarity_top_k=similarity_top_k, **kwargs,
    )


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
