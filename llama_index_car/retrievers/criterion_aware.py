"""``CriterionAwareRetriever`` (CAR): fusion of channels that bridge low overlap.

The paper's §5.8 remedy for queries that share few words with the clause that answers them,
as two retrievers over one base (this module):

* :class:`~llama_index_car.retrievers.car_offline.OfflineCriterionRetriever` — no LLM,
  nothing learnt at index time: dense(query) ⊕ lexical(query) fused by their standardised
  scores (z-score fusion), the pool re-ranked by its best spans' standardised cosines (chosen
  by cross-validation, ``benchmarks/span_cv.py``);
* :class:`~llama_index_car.retrievers.car_hypothesis.HypothesisCriterionRetriever` — the
  paper's CAR: a hypothesizer (e.g. ``LLMCriterionHypothesizer``) guesses the criterion,
  dense(query + hypothesis) ⊕ lexical(query + criteria) by weighted RRF, with a concurrent
  plain hybrid as the fallback on any failure and optional routing (``route="auto"``).

Both are ``CriterionAwareRetriever`` s: :meth:`CriterionAwareRetriever.from_defaults`
builds the offline one without ``llm``/``hypothesizer`` and the hypothesis one with it.
Built over a :class:`~llama_index_car.indices.CriterionAwareIndex` (``from_defaults`` builds
a private one, ``index.as_retriever("car")`` views a given one) a query pins one snapshot of
the index for all its channels and its span index
(:func:`~llama_index_car.retrievers._channels.bound_channels`); the index owns updates and
persistence.

Shared here: the ``car_explain`` fields (:func:`explain_fields`: hypothesis, criteria,
hypothesis source/cached, fallback, routed, router signal, error), on top of the per-channel
ranks, scores and weights the fusion records; the query vector computed once for the dense
channel, span ranking and criterion spans; and ``metadata["criterion_spans"]``: with a span
index every returned hit carries its ``criterion_spans`` best sentences, table rows or cells
for the query (default 3 with a span index, 0 without;
:class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor`; a
hypothesis's criterion terms join the query's tokens in its lexical part).

One path per retriever: each writes its retrieval once as a generator of steps (``Search``:
channel jobs run concurrently; ``Embed``: the query vector); ``_retrieve`` runs the steps with
threads and ``_aretrieve`` with ``await`` — the async twin is the driver, not a copy.

Score scale: each retriever's own (the offline CAR: a sum of standardised scores, around
−1…3; the hypothesis CAR: weighted-RRF sums, at most ``1 / (rrf_k + 1) ≈ 0.0164``). A
``SimilarityPostprocessor`` cutoff must be chosen for the one in use. Queries pass
:mod:`llama_index_car.query_guard` first: empty → ``[]``, control/bidi characters and lone
surrogates removed, longer than ``QueryLimits.max_chars`` (2000) → ``QueryError``.

>>> car = CriterionAwareRetriever.from_defaults(nodes=nodes)  # doctest: +SKIP
>>> type(car).__name__  # doctest: +SKIP
'OfflineCriterionRetriever'
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from llama_index_car.postprocessors.criterion_spans import (
    DEFAULT_CRITERION_SPANS,
    CriterionSpanPostprocessor,
)
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers._channels import bound_channels
from llama_index_car.retrievers.weighted_rrf import (
    aretrieve_channels,
    check_alpha,
    check_int,
    check_retriever,
    retrieve_channels,
)
from llama_index_car.span_index import SpanIndex

__all__ = [
    "DEFAULT_OFFLINE_ALPHA",
    "DEFAULT_OFFLINE_POOL",
    "DEFAULT_SPAN_Z_WEIGHT",
    "Channels",
    "CriterionAwareRetriever",
    "Embed",
    "Search",
    "explain_fields",
]

#: the offline CAR's dense share β of its z-score fusion (chosen by CV, benchmarks/span_cv.py)
DEFAULT_OFFLINE_ALPHA = 0.3
#: the offline CAR's candidates per channel: the depth its scores are standardised over
DEFAULT_OFFLINE_POOL = 100
#: the offline CAR's span weight γ for a question (``score + γ·z(span)``; CV)
DEFAULT_SPAN_Z_WEIGHT = 1.2

Jobs = tuple[tuple[BaseRetriever, QueryBundle], ...]


@dataclass(frozen=True)
class Search:
    """A step: run ``jobs`` concurrently (``pool_top_k`` deep); the reply is one hit list per
    job, followed by the lists of ``known`` (hits a previous step already has)."""

    jobs: Jobs
    known: tuple[list[NodeWithScore], ...] = ()


@dataclass(frozen=True)
class Embed:
    """A step: the query embedding of ``strs`` (the reply is the vector)."""

    strs: tuple[str, ...]


Steps = Generator[Any, Any, list[NodeWithScore]]


@dataclass(frozen=True)
class Channels:
    """What one query reads: the dense and lexical channels and the span index, all of one
    snapshot when the retriever is built over a ``CriterionAwareIndex``."""

    dense: BaseRetriever
    lexical: BaseRetriever
    spans: SpanIndex | None


# ----------------------------------------------------------------------------- validation
def check_unit(name: str, value: Any, hint: str = "") -> float:
    """``value`` as a float in [0, 1], else :class:`ConfigurationError` naming ``name``."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{name}={value!r} is not a number in [0, 1]")
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{name}={value!r} is not a number in [0, 1]") from exc
    if not 0.0 <= x <= 1.0:
        raise ConfigurationError(f"{name}={value!r} must be in [0, 1]{hint}")
    return x


def check_seconds(name: str, value: Any, *, positive: bool) -> float:
    """``value`` as finite seconds, > 0 if ``positive`` else >= 0; else ConfigurationError."""
    try:
        seconds = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{name}={value!r} is not a number of seconds") from exc
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        bound = "a positive number of seconds" if positive else ">= 0"
        raise ConfigurationError(f"{name}={value!r} must be {bound}")
    return seconds


# ----------------------------------------------------------------------------- fusion helper
def explain_fields(
    hypothesis: CriterionHypothesis | None,
    *,
    fallback: bool,
    routed: str,
    signal: float | None,
    error: str | None,
) -> dict[str, Any]:
    """The CAR fields of ``car_explain`` (the fusion adds channels, weights and scores)."""
    explain: dict[str, Any] = {
        "hypothesis": hypothesis.text if hypothesis is not None else None,
        "criteria": list(hypothesis.criteria) if hypothesis is not None else [],
        "hypothesis_source": hypothesis.source if hypothesis is not None else None,
        "hypothesis_cached": hypothesis.cached if hypothesis is not None else None,
        "fallback": fallback,
        "routed": routed,
        "router_signal": signal,
        "error": error,
    }
    return explain


class _Call:
    """One query's driver state: a speculative search in flight (a future or a task)."""

    pending: Any = None

    def cancel(self) -> None:
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()
        self.pending = None


# ----------------------------------------------------------------------------- the base
#: the options both CAR retrievers take (keyword arguments besides the channels)
SHARED_OPTIONS = frozenset({
    "alpha", "pool_top_k", "similarity_top_k", "span_index", "criterion_spans", "embed_model",
    "callback_manager", "verbose",
})


class CriterionAwareRetriever(BaseRetriever):
    """Criterion-aware retrieval: the common base of the two CAR retrievers (module docstring).

    Build one with :meth:`from_defaults` (with ``llm``/``hypothesizer``: the hypothesis CAR),
    with ``CriterionAwareIndex.as_retriever("car")``, or construct
    ``OfflineCriterionRetriever`` / ``HypothesisCriterionRetriever`` from channels. Over an
    index, :attr:`index` is it (update and persist it there) and :attr:`filters` the
    ``MetadataFilters`` both channels apply.

    Args (shared by both):
        dense_retriever: a retriever over a vector index (honours ``custom_embedding_strs``).
        lexical_retriever: ``KiwiBM25Retriever`` or any retriever taking a query string.
        alpha: weight of the dense channel in [0, 1]; lexical gets ``1 - alpha``.
        pool_top_k: candidates per channel.
        similarity_top_k: fused results returned (default 10).
        span_index: a :class:`~llama_index_car.span_index.SpanIndex` over the nodes.
        criterion_spans: spans attached to each hit as ``metadata["criterion_spans"]``;
            ``None`` (default): :data:`DEFAULT_CRITERION_SPANS` (3) with a ``span_index``, 0
            (off) without; > 0 needs a ``span_index``.
        embed_model: the index's embedding (default: the dense retriever's).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> CriterionAwareRetriever:
        if cls is CriterionAwareRetriever:
            raise ConfigurationError(
                "CriterionAwareRetriever is the base of OfflineCriterionRetriever (no LLM) and "
                "HypothesisCriterionRetriever (with a hypothesizer): construct one of them, or "
                "use CriterionAwareRetriever.from_defaults(...), index.as_retriever('car') or "
                "retrievers.car.car_from_channels(...)"
            )
        return super().__new__(cls)

    def __init__(
        self,
        dense_retriever: BaseRetriever,
        lexical_retriever: BaseRetriever,
        *,
        alpha: float,
        pool_top_k: int,
        similarity_top_k: int,
        span_index: SpanIndex | None,
        criterion_spans: int | None,
        embed_model: Any | None,
        callback_manager: CallbackManager | None,
        verbose: bool,
    ) -> None:
        self.dense_retriever = check_retriever("dense_retriever", dense_retriever)
        self.lexical_retriever = check_retriever("lexical_retriever", lexical_retriever)
        self.hypothesizer: BaseCriterionHypothesizer | None = None
        self.alpha = check_alpha(alpha)
        self.pool_top_k = check_int("pool_top_k", pool_top_k)
        self.similarity_top_k = check_int("similarity_top_k", similarity_top_k)
        self.weights = [self.alpha, 1.0 - self.alpha]
        if span_index is not None and not isinstance(span_index, SpanIndex):
            raise ConfigurationError(
                f"span_index is a {type(span_index).__name__}; pass a SpanIndex or None"
            )
        self._span_index = span_index
        self.embed_model: Any = embed_model or getattr(dense_retriever, "_embed_model", None)
        if criterion_spans is None:
            criterion_spans = DEFAULT_CRITERION_SPANS if span_index is not None else 0
        self.criterion_spans = check_int("criterion_spans", criterion_spans, minimum=0)
        self._span_post = _span_postprocessor(
            self.criterion_spans, span_index, self.embed_model, self.lexical_retriever
        )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    # ------------------------------------------------------------------ the index viewed
    @property
    def index(self) -> Any | None:
        """The ``CriterionAwareIndex`` both channels view (``None``: arbitrary channels)."""
        dense = getattr(self.dense_retriever, "index", None)
        lexical = getattr(self.lexical_retriever, "index", None)
        return dense if dense is not None and dense is lexical else None

    @property
    def filters(self) -> Any | None:
        """The ``MetadataFilters`` the channels apply (``None``: none, or unknown)."""
        return getattr(self.lexical_retriever, "filters", None)

    @property
    def span_index(self) -> SpanIndex | None:
        """The span index (over an index: its current one)."""
        index = self.index
        if self._span_index is not None and index is not None and index.spans is not None:
            return index.spans  # type: ignore[no-any-return]
        return self._span_index

    @contextlib.contextmanager
    def _channels(self) -> Iterator[Channels]:
        """The channels of one query: over an index, bound to one pinned snapshot."""
        with bound_channels([self.dense_retriever, self.lexical_retriever]) as (dense, lexical):
            spans = self._span_index
            snap = getattr(lexical, "snapshot", None) or getattr(dense, "snapshot", None)
            if spans is not None and snap is not None and snap.spans is not None:
                spans = snap.spans
            yield Channels(dense, lexical, spans)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[BaseNode] | None = None,
        index: Any | None = None,
        llm: Any | None = None,
        embed_model: Any | None = None,
        hypothesizer: BaseCriterionHypothesizer | None = None,
        tokenizer: Any | None = None,
        show_progress: bool = False,
        filters: Any | None = None,
        token_cache: Any = True,
        spans: bool | None = None,
        **kwargs: Any,
    ) -> CriterionAwareRetriever:
        """Build the whole thing in one line: an index, then its ``as_retriever("car")`` (the
        factory :func:`~llama_index_car.retrievers.car.car_from_channels` picks the retriever).

        * the index: ``index`` if it is a
          :class:`~llama_index_car.indices.CriterionAwareIndex`; otherwise a private one over
          ``nodes`` and the ``VectorStoreIndex`` ``index`` (its embed model; ``nodes`` default
          to its docstore's), or over a ``VectorStoreIndex`` built over ``nodes`` with
          ``embed_model`` (default :func:`~llama_index_car.providers.resolve_embed_model`:
          ``$LLAMA_CAR_EMBED_MODEL``, else the offline ``MultilingualE5Embedding``); its BM25 with
          ``tokenizer`` and ``token_cache`` (a shared dict tokenizes each text once).
        * hypothesizer: ``hypothesizer`` if given; else ``LLMCriterionHypothesizer(llm=llm)``
          when ``llm`` is given (a ``HypothesisCriterionRetriever``); else none: an
          ``OfflineCriterionRetriever`` (nothing built at index time).
        * ``filters``: LlamaIndex ``MetadataFilters`` applied by the store (dense) and by
          BM25 on node metadata (lexical).
        * ``spans``: build a :class:`~llama_index_car.span_index.SpanIndex` over the nodes
          (embeds every span once more, ≈ the corpus again); ``None`` (default): only
          offline (span ranking is not measured with a hypothesizer). A ``span_index`` in
          ``kwargs`` is used as given.
        * ``**kwargs`` go to the constructor (``alpha``, ``route``, ``strict`` …).

        Update and persist the result's :attr:`index` (``car.index.insert_nodes(...)``,
        ``car.index.persist(dir)``).
        """
        from llama_index_car.indices.criterion_aware import CriterionAwareIndex

        if nodes is None and index is None:
            raise ConfigurationError("pass nodes=[...] or index=<VectorStoreIndex>")
        hypothesizer = _hypothesizer(hypothesizer, llm)
        if spans is None:
            spans = hypothesizer is None
        given = kwargs.get("span_index")
        if isinstance(index, CriterionAwareIndex):
            car_index = index
        else:
            kwargs.pop("span_index", None)  # given spans belong to the index
            car_index = CriterionAwareIndex.from_defaults(
                nodes, vector_index=index, embed_model=embed_model,
                spans=given if given is not None else bool(spans), show_progress=show_progress,
                tokenizer=tokenizer, token_cache=token_cache,
            )
        if not spans and given is None:
            kwargs["span_index"] = None
        car = car_index.as_retriever("car", hypothesizer=hypothesizer, filters=filters,
                                     **kwargs)
        return car  # type: ignore[return-value]

    # ------------------------------------------------------------------ one path, two drivers
    def _steps(self, query_bundle: QueryBundle, ch: Channels) -> Steps:
        """The retrieval of one query over the channels ``ch`` as a generator of
        :class:`Search` / :class:`Embed` steps returning the hits (each retriever writes it
        once)."""
        raise NotImplementedError

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with self._channels() as ch:
            return self._drive(self._steps(query_bundle, ch))

    @guarded_retrieve
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with self._channels() as ch:
            return await self._adrive(self._steps(query_bundle, ch))

    def _drive(self, steps: Steps) -> list[NodeWithScore]:
        call, reply = _Call(), None
        try:
            while True:
                reply = self._serve(steps.send(reply), call)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            steps.close()
            call.cancel()

    async def _adrive(self, steps: Steps) -> list[NodeWithScore]:
        call, reply = _Call(), None
        try:
            while True:
                reply = await self._aserve(steps.send(reply), call)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            steps.close()
            call.cancel()

    def _serve(self, step: Any, call: _Call) -> Any:
        if isinstance(step, Embed):
            return self.embed_model.get_agg_embedding_from_queries(list(step.strs))
        return retrieve_channels(step.jobs, self.pool_top_k) + list(step.known)

    async def _aserve(self, step: Any, call: _Call) -> Any:
        if isinstance(step, Embed):
            return await self.embed_model.aget_agg_embedding_from_queries(list(step.strs))
        return await aretrieve_channels(step.jobs, self.pool_top_k) + list(step.known)

    # ------------------------------------------------------------------ shared steps
    def _wants_query_vector(self) -> bool:
        return self.criterion_spans > 0

    def _with_query_vector(
        self, query_bundle: QueryBundle
    ) -> Generator[Any, Any, QueryBundle]:
        """``query_bundle`` with its embedding computed once (the dense channel, span ranking
        and criterion spans share it); unchanged when no span step needs it."""
        if not self._wants_query_vector() or query_bundle.embedding is not None:
            return query_bundle
        vector = yield Embed(tuple(query_bundle.embedding_strs))
        return dataclasses.replace(query_bundle, embedding=vector)

    def _with_criterion_spans(
        self, hits: list[NodeWithScore], query_bundle: QueryBundle, ch: Channels
    ) -> list[NodeWithScore]:
        """``hits`` with ``criterion_spans`` attached (copies), or as they are when off. A
        hypothesis's criterion terms join the query in the lexical part."""
        post, spans = self._span_post, ch.spans
        if post is None or spans is None or not hits:
            return hits
        text = query_bundle.query_str
        explain = hits[0].node.metadata.get("car_explain") or {}
        if explain.get("hypothesis_source") is not None and explain.get("criteria"):
            text = text + " " + " ".join(str(c) for c in explain["criteria"])
        return post.attach(hits, query_bundle.embedding, text, span_index=spans)


def _hypothesizer(
    hypothesizer: BaseCriterionHypothesizer | None, llm: Any | None
) -> BaseCriterionHypothesizer | None:
    """``hypothesizer``, else ``LLMCriterionHypothesizer(llm=llm)`` when ``llm`` is given."""
    if hypothesizer is None and llm is not None:
        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

        return LLMCriterionHypothesizer(llm=llm)
    return hypothesizer


def _span_postprocessor(
    n: int, span_index: SpanIndex | None, embed_model: Any, lexical: Any
) -> CriterionSpanPostprocessor | None:
    """The postprocessor attaching ``n`` criterion spans per hit (``None`` when ``n`` is 0)."""
    if n == 0:
        return None
    if span_index is None:
        raise ConfigurationError(
            "criterion_spans > 0 needs a span_index (or pass criterion_spans=0)"
        )
    if embed_model is None:
        raise ConfigurationError(
            "criterion spans need the query vector: pass embed_model (the index's embedding)"
        )
    tokenizer = getattr(lexical, "tokenizer", None)
    return CriterionSpanPostprocessor(span_index, embed_model, tokenizer=tokenizer, top_n=n)
