"""``WeightedRRFRetriever``: weighted reciprocal rank fusion of any LlamaIndex retrievers.

Unlike LlamaIndex's ``QueryFusionRetriever`` in RRF mode, the weights are honoured, ranks are
1-based and results are merged by ``node_id`` (not by node hash). The maths lives in
:func:`llama_index_car.fusion.weighted_rrf`; this module is the LlamaIndex adapter plus the
channel plumbing shared with :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`.

Pool size. Each channel is asked for ``pool_top_k`` candidates. When a channel exposes a
``similarity_top_k`` attribute (``VectorIndexRetriever``, ``KiwiBM25Retriever``, ``BM25Retriever``
…), every query runs on a *shallow copy* of it with ``similarity_top_k = pool_top_k``: the
caller's retriever is never mutated (so it is safe to share between threads and engines) and the
copy is taken per query (of the channel bound to the query's snapshot, for index views).
Whatever a channel returns is then truncated to ``pool_top_k``.

Explanations. Results are new ``NodeWithScore`` objects over *copies* of the nodes; each copy's
metadata carries ``"car_explain"`` (see ``docs/ARCHITECTURE.md``), excluded from the embedding
and LLM text.

>>> from llama_index.core.retrievers import BaseRetriever
>>> fused = WeightedRRFRetriever.from_alpha(dense, lexical, alpha=0.5)  # doctest: +SKIP
>>> fused.retrieve("배수시설 설치기준")[0].node.metadata["car_explain"]["channels"]  # doctest: +SKIP
{'dense': {'rank': 1, 'score': 0.81}, 'lexical': {'rank': 3, 'score': 12.4}}
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError
from llama_index_car.fusion import DEFAULT_RRF_K, validate_weights, weighted_rrf
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers._channels import bound_channels

__all__ = [
    "EXPLAIN_KEY",
    "WeightedRRFRetriever",
    "aretrieve_channels",
    "explain_fused",
    "fuse_channel_results",
    "retrieve_channels",
    "with_pool_top_k",
]

logger = logging.getLogger(__name__)

EXPLAIN_KEY = "car_explain"


# ----------------------------------------------------------------------------- validation
def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """Return ``value`` if it is an int >= ``minimum``, else raise :class:`ConfigurationError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name}={value!r} is invalid; use an integer >= {minimum}")
    return value


def check_rrf_k(value: Any) -> int:
    """``rrf_k`` must be an integer >= 0 (default 60)."""
    return check_int("rrf_k", value, minimum=0)


def check_alpha(value: Any) -> float:
    """``alpha`` must be a finite float in [0, 1] (weight of the dense channel)."""
    try:
        alpha = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"alpha={value!r} is not a number; use a float in [0, 1]") from exc
    if isinstance(value, bool) or not math.isfinite(alpha) or not 0.0 <= alpha <= 1.0:
        raise ConfigurationError(f"alpha={value!r} is invalid; use a float in [0, 1] (default 0.5)")
    return alpha


def check_retriever(name: str, value: Any) -> BaseRetriever:
    if not isinstance(value, BaseRetriever):
        raise ConfigurationError(
            f"{name} is a {type(value).__name__}, not a llama_index BaseRetriever; "
            "pass e.g. index.as_retriever() or KiwiBM25Retriever.from_defaults(nodes=...)"
        )
    return value


# ----------------------------------------------------------------------------- channels
def with_pool_top_k(retriever: BaseRetriever, pool_top_k: int) -> BaseRetriever:
    """A shallow copy of ``retriever`` asking for ``pool_top_k`` results, or ``retriever`` itself.

    The copy is made only when the retriever has a ``similarity_top_k`` attribute that differs
    from ``pool_top_k``; the original object is never modified. Retrievers without the attribute
    (or that refuse the copy) are returned unchanged and their results are truncated instead.
    """
    current = getattr(retriever, "similarity_top_k", None)
    if current is None or current == pool_top_k:
        return retriever
    try:
        clone = copy.copy(retriever)
        clone.similarity_top_k = pool_top_k  # type: ignore[attr-defined]
    except Exception as exc:  # a read-only property or a copy-hostile object
        logger.debug("cannot set similarity_top_k on a copy of %r: %s", retriever, exc)
        return retriever
    return clone


def _overrides_aretrieve(retriever: BaseRetriever) -> bool:
    return type(retriever)._aretrieve is not BaseRetriever._aretrieve


def retrieve_channels(
    jobs: Sequence[tuple[BaseRetriever, QueryBundle]], pool_top_k: int
) -> list[list[NodeWithScore]]:
    """Run ``retriever.retrieve(bundle)`` for every job concurrently in threads.

    Each job runs on :func:`with_pool_top_k` of its retriever, in a copy of the caller's
    ``contextvars`` context (LlamaIndex instrumentation spans stay attached).
    """
    if not jobs:
        return []
    if len(jobs) == 1:
        retriever, bundle = jobs[0]
        return [list(with_pool_top_k(retriever, pool_top_k).retrieve(bundle))[:pool_top_k]]
    # the first job runs on the calling thread, the others on threads of their own: one thread
    # start fewer per query (a few ms each on a loaded machine)
    with ThreadPoolExecutor(max_workers=len(jobs) - 1, thread_name_prefix="car-channel") as pool:
        futures = [
            pool.submit(
                contextvars.copy_context().run,
                with_pool_top_k(retriever, pool_top_k).retrieve,
                bundle,
            )
            for retriever, bundle in jobs[1:]
        ]
        retriever, bundle = jobs[0]
        first = contextvars.copy_context().run(
            with_pool_top_k(retriever, pool_top_k).retrieve, bundle)
        return [list(first)[:pool_top_k]] + [list(f.result())[:pool_top_k] for f in futures]


async def _aretrieve_one(
    retriever: BaseRetriever, bundle: QueryBundle, pool_top_k: int
) -> list[NodeWithScore]:
    channel = with_pool_top_k(retriever, pool_top_k)
    if _overrides_aretrieve(channel):
        nodes = await channel.aretrieve(bundle)
    else:  # the default _aretrieve is synchronous: keep the event loop free
        nodes = await asyncio.to_thread(channel.retrieve, bundle)
    return list(nodes)[:pool_top_k]


async def aretrieve_channels(
    jobs: Sequence[tuple[BaseRetriever, QueryBundle]], pool_top_k: int
) -> list[list[NodeWithScore]]:
    """Async twin of :func:`retrieve_channels` (``asyncio.gather``; sync-only channels run in
    worker threads)."""
    return list(await asyncio.gather(*(_aretrieve_one(r, b, pool_top_k) for r, b in jobs)))


def fuse_channel_results(
    results: Sequence[Sequence[NodeWithScore]],
    names: Sequence[str],
    weights: Sequence[float],
    rrf_k: int,
    top_k: int,
    explain: Mapping[str, Any] | None = None,
) -> list[NodeWithScore]:
    """Fuse per-channel results by :func:`weighted_rrf` into new, explained
    ``NodeWithScore`` (:func:`explain_fused`; ``car_explain["rrf_k"]`` and ``fusion: "rrf"``)."""
    ranked_ids = [[nws.node.node_id for nws in channel] for channel in results]
    fused = weighted_rrf(ranked_ids, weights, rrf_k=rrf_k)[:top_k]
    return explain_fused(results, names, weights, fused, {"rrf_k": rrf_k, **(explain or {})},
                         fusion="rrf")


def explain_fused(
    results: Sequence[Sequence[NodeWithScore]],
    names: Sequence[str],
    weights: Sequence[float],
    fused: Sequence[tuple[str, float]],
    explain: Mapping[str, Any] | None = None,
    *,
    fusion: str,
) -> list[NodeWithScore]:
    """``fused`` (``(node_id, score)`` pairs, best first) as new ``NodeWithScore`` of the
    channels' nodes.

    The node object of a fused id is taken from the first channel (in ``names`` order) that
    returned it. Its copy gets ``metadata["car_explain"] = {"channels": {name: {"rank",
    "score"}}, "weights": {name: w}, "fusion": fusion, **explain}``, with the key added to
    both exclusion lists. The input ``NodeWithScore`` objects and their nodes are not modified.
    """
    first_seen: dict[str, NodeWithScore] = {}
    per_channel: list[dict[str, tuple[int, float | None]]] = []
    for channel in results:
        ranks: dict[str, tuple[int, float | None]] = {}
        for position, nws in enumerate(channel, start=1):
            node_id = nws.node.node_id
            first_seen.setdefault(node_id, nws)
            ranks.setdefault(node_id, (position, nws.score))
        per_channel.append(ranks)
    extra = dict(explain or {})
    out: list[NodeWithScore] = []
    for node_id, score in fused:
        source = first_seen[node_id].node
        channels: dict[str, dict[str, Any]] = {}
        for name, ranks in zip(names, per_channel, strict=True):
            rank, channel_score = ranks.get(node_id, (None, None))
            channels[name] = {"rank": rank, "score": channel_score}
        info: dict[str, Any] = {
            "channels": channels,
            "hypothesis": None,
            "criteria": [],
            "fallback": False,
            "routed": "hybrid",
            "weights": dict(zip(names, weights, strict=True)),
            "fusion": fusion,
        }
        info.update(copy.deepcopy(extra))
        metadata = dict(source.metadata)
        metadata[EXPLAIN_KEY] = info
        excluded_embed = list(source.excluded_embed_metadata_keys)
        excluded_llm = list(source.excluded_llm_metadata_keys)
        if EXPLAIN_KEY not in excluded_embed:
            excluded_embed.append(EXPLAIN_KEY)
        if EXPLAIN_KEY not in excluded_llm:
            excluded_llm.append(EXPLAIN_KEY)
        node = source.model_copy(
            update={
                "metadata": metadata,
                "excluded_embed_metadata_keys": excluded_embed,
                "excluded_llm_metadata_keys": excluded_llm,
            }
        )
        out.append(NodeWithScore(node=node, score=score))
    return out


# ----------------------------------------------------------------------------- retriever
class WeightedRRFRetriever(BaseRetriever):
    """Weighted RRF over any LlamaIndex retrievers (channels run concurrently).

    :meth:`from_defaults` (or ``CriterionAwareIndex.as_retriever("hybrid")``) gives the dense
    + Kiwi BM25 hybrid over a :class:`~llama_index_car.indices.CriterionAwareIndex`: every
    query reads one pinned snapshot of it for both channels; update and persist the index.

    score(d) = Σ_i w_i / (rrf_k + rank_i(d)), ranks 1-based within each channel's top
    ``pool_top_k``; absent documents contribute 0; ties by ``node_id`` ascending.

    Score scale: fused scores are RRF-sized, not similarities. The best possible score is
    ``sum(weights) / (rrf_k + 1)`` — ``1/61 ≈ 0.0164`` for ``from_alpha`` (weights sum to 1)
    with ``rrf_k=60`` — so ``SimilarityPostprocessor(similarity_cutoff=0.3)`` drops every
    hit. Express a cutoff as a fraction ``c`` of the best score instead:
    ``similarity_cutoff = c * sum(weights) / (rrf_k + 1)`` (``c = 0.5``: a hit must be worth
    at least half of "first in every channel"). The channels' own scores are kept in
    ``metadata["car_explain"]["channels"]``.

    Args:
        retrievers: the channels (any ``BaseRetriever``); at least one.
        weights: one non-negative weight per channel, not all zero (default: all 1.0).
        rrf_k: RRF constant (default 60, 1-based ranks as in Cormack et al.).
        pool_top_k: candidates taken from each channel (default 50).
        similarity_top_k: fused results returned (default 10).
        channel_names: unique names used in ``car_explain`` (default ``channel_0`` …).

    >>> hybrid = WeightedRRFRetriever.from_alpha(dense, lexical, alpha=0.7)  # doctest: +SKIP
    >>> hybrid.weights  # doctest: +SKIP
    [0.7, 0.3]
    """

    def __init__(
        self,
        retrievers: Sequence[BaseRetriever],
        weights: Sequence[float] | None = None,
        rrf_k: int = DEFAULT_RRF_K,
        pool_top_k: int = 50,
        similarity_top_k: int = 10,
        channel_names: Sequence[str] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if isinstance(retrievers, BaseRetriever) or not isinstance(retrievers, Sequence):
            raise ConfigurationError(
                "retrievers must be a list of BaseRetriever, e.g. [dense, lexical]"
            )
        if not retrievers:
            raise ConfigurationError("retrievers is empty; pass at least one retriever")
        self.retrievers = [check_retriever(f"retrievers[{i}]", r) for i, r in enumerate(retrievers)]
        self.weights = validate_weights(weights, len(self.retrievers))
        self.rrf_k = check_rrf_k(rrf_k)
        self.pool_top_k = check_int("pool_top_k", pool_top_k)
        self.similarity_top_k = check_int("similarity_top_k", similarity_top_k)
        if channel_names is None:
            names = [f"channel_{i}" for i in range(len(self.retrievers))]
        else:
            names = [str(n) for n in channel_names]
            if len(names) != len(self.retrievers) or len(set(names)) != len(names):
                raise ConfigurationError(
                    f"channel_names={list(channel_names)!r} must hold {len(self.retrievers)} "
                    "unique names, one per retriever"
                )
        self.channel_names = names
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_alpha(
        cls,
        dense_retriever: BaseRetriever,
        lexical_retriever: BaseRetriever,
        alpha: float = 0.5,
        rrf_k: int = DEFAULT_RRF_K,
        pool_top_k: int = 50,
        similarity_top_k: int = 10,
        **kwargs: Any,
    ) -> WeightedRRFRetriever:
        """Two-channel hybrid: weights ``[alpha, 1 - alpha]`` for ``(dense, lexical)``.

        ``alpha=0.5`` (default) is order-equivalent to plain RRF; ``alpha=1`` is dense only.
        Channel names are ``"dense"`` and ``"lexical"``.
        """
        a = check_alpha(alpha)
        return cls(
            [dense_retriever, lexical_retriever],
            weights=[a, 1.0 - a],
            rrf_k=rrf_k,
            pool_top_k=pool_top_k,
            similarity_top_k=similarity_top_k,
            channel_names=["dense", "lexical"],
            **kwargs,
        )

    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[Any] | None = None,
        index: Any | None = None,
        embed_model: Any | None = None,
        alpha: float = 0.5,
        rrf_k: int = DEFAULT_RRF_K,
        pool_top_k: int = 50,
        similarity_top_k: int = 10,
        filters: Any | None = None,
        tokenizer: Any | None = None,
        show_progress: bool = False,
        token_cache: Any = True,
    ) -> WeightedRRFRetriever:
        """The dense + Kiwi BM25 hybrid (:meth:`from_alpha`) in one line, over a
        ``CriterionAwareIndex``: ``index`` itself if it is one, else a private one over
        ``nodes`` and the ``VectorStoreIndex`` ``index`` (``nodes`` default to its docstore:
        a store-backed index has an empty one, so pass them, else
        :class:`~llama_index_car._errors.EmptyIndexError`), or over a ``VectorStoreIndex``
        built over ``nodes`` with ``embed_model``. ``filters`` (``MetadataFilters``) apply to
        both channels; ``token_cache`` is BM25's (share a dict to tokenize each text once).
        """
        from llama_index_car.indices.criterion_aware import CriterionAwareIndex

        if nodes is None and index is None:
            raise ConfigurationError("pass nodes=[...] or index=<VectorStoreIndex>")
        car_index = index if isinstance(index, CriterionAwareIndex) else (
            CriterionAwareIndex.from_defaults(
                nodes, vector_index=index, embed_model=embed_model, tokenizer=tokenizer,
                show_progress=show_progress, token_cache=token_cache,
            )
        )
        hybrid = car_index.as_retriever(
            "hybrid", alpha=alpha, rrf_k=rrf_k, pool_top_k=pool_top_k,
            similarity_top_k=similarity_top_k, filters=filters,
        )
        return hybrid  # type: ignore[return-value]

    @property
    def index(self) -> Any | None:
        """The ``CriterionAwareIndex`` every channel views (``None``: arbitrary channels)."""
        owners = {id(getattr(r, "index", None)): getattr(r, "index", None)
                  for r in self.retrievers}
        return next(iter(owners.values())) if len(owners) == 1 else None

    @staticmethod
    def _jobs(
        query_bundle: QueryBundle, channels: Sequence[BaseRetriever]
    ) -> list[tuple[BaseRetriever, QueryBundle]]:
        return [(r, query_bundle) for r in channels]

    def _fuse(self, results: Sequence[Sequence[NodeWithScore]]) -> list[NodeWithScore]:
        return fuse_channel_results(
            results, self.channel_names, self.weights, self.rrf_k, self.similarity_top_k
        )

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with bound_channels(self.retrievers) as channels:
            jobs = self._jobs(query_bundle, channels)
            return self._fuse(retrieve_channels(jobs, self.pool_top_k))

    @guarded_retrieve
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with bound_channels(self.retrievers) as channels:
            jobs = self._jobs(query_bundle, channels)
            return self._fuse(await aretrieve_channels(jobs, self.pool_top_k))
