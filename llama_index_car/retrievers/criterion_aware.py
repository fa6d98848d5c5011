"""``CriterionAwareRetriever`` (CAR): weighted-RRF fusion of channels that bridge low overlap.

The paper's §5.8 remedy for queries that share few words with the clause that answers them.
Two configurations share one class.

**Offline** (``hypothesizer=None``, the default of :meth:`CriterionAwareRetriever.from_defaults`
without an LLM; nothing is learnt at index time). Three channels:

* dense: ``dense(query)``; lexical: ``lexical(query)`` (both ``pool_top_k`` deep);
* feedback: ``lexical(query + " " + terms)`` where ``terms`` are the 10 terms with the largest
  ``idf × tf`` summed over the top-5 dense hits (:mod:`llama_index_car.hypothesizers.feedback`,
  read from the BM25 index's own counts): dense retrieval bridges the paraphrase, its best hits
  supply the vocabulary of the standards;
* fusion weights ``[α(1 − p), (1 − α)(1 − p), p]`` — the feedback channel takes the share
  ``p`` of the total weight from both plain channels alike — with the per-query feedback share
  ``p = feedback_scale · (1 − s) · (1 − a)`` (:func:`~llama_index_car.retrievers.routing.feedback_share`):
  ``s`` is the router signal (share of the query's content morphemes in its top-3 BM25 hits)
  and ``a`` the top-5 agreement of the dense and lexical rankings. When the query's words are
  all in its best BM25 hits (``s = 1``) or both channels agree (``a = 1``), ``p = 0``. The dense
  weight itself follows the router signal offline: ``α(s) = alpha − (alpha − alpha_overlap)·s``
  (``alpha_overlap`` default :data:`DEFAULT_ALPHA_OVERLAP`); ``alpha_overlap=alpha`` keeps it
  fixed. With a :class:`~llama_index_car.span_index.SpanIndex` the fused pool (``span_pool``)
  is then re-ranked by its best spans (:func:`~llama_index_car.fusion.span_fusion`, weight
  ``span_weight``), and BM25's top hit goes first when its score leads the second's by
  ``bm25_lead`` of itself (:func:`~llama_index_car.fusion.score_gap`).

  Every default (``alpha`` 0.3 → ``alpha_overlap`` 0, span weight 0.5 over a 20-node pool,
  ``bm25_lead`` 0.2, and the feedback channel **off**) was chosen by 5-fold cross-validation
  over the queries of three developer sets and checked leave-one-set-out
  (``benchmarks/span_cv.py``, ``docs/results/span_cv.md``): the feedback channel added nothing
  on top of span ranking there, so ``feedback_scale`` defaults to 0; pass
  ``feedback_scale=DEFAULT_FEEDBACK_SCALE`` (0.7, its measured scale) to turn it on.

**With a hypothesizer** (the paper's CAR; e.g. ``LLMCriterionHypothesizer``). A hypothesizer
guesses the criterion the query seeks, in the vocabulary of the standards
(``CriterionHypothesis(text, criteria)``), and two channels are fused:

* dense: ``QueryBundle(query, custom_embedding_strs=[query + "\\n" + hypothesis.text])``
  (concatenation, as in the paper — not HyDE's embedding average);
* lexical: ``query + " " + hypothesis.expansion_terms()``;
* fusion: :func:`~llama_index_car.fusion.weighted_rrf` with weights ``[alpha, 1 - alpha]``
  (alpha weights dense; default 0.5), ``rrf_k`` (default 60), ``pool_top_k`` candidates per
  channel (default 50), ``similarity_top_k`` results (default 10). The feedback channel is off
  here (``feedback_scale=0`` unless given; it has not been measured with an LLM hypothesis).

Resilience. The hypothesis is produced concurrently with a plain hybrid retrieval
(dense(query) + lexical(query), same fusion). If the hypothesizer raises (``HypothesisError`` or
any other ``Exception``, e.g. from an LLM client), exceeds ``hypothesis_timeout`` seconds or
returns an empty hypothesis, CAR logs a warning and returns the hybrid result with
``car_explain["fallback"] = True`` — unless ``strict=True``, which raises ``HypothesisError``.
``hypothesis_timeout`` is the one deadline of the step: the hypothesizer runs inside
:func:`~llama_index_car.llms.deadline.llm_deadline`, so a bounded LLM client
(:class:`~llama_index_car.llms.BoundedAnthropic`, the default) closes its request and frees its
thread at the same moment, retries and retry waits included.

Routing. ``route="auto"`` first runs the lexical channel on the plain query and asks a
:class:`~llama_index_car.retrievers.routing.LexicalOverlapRouter` whether low lexical overlap is
predicted (share of the query's content morphemes found in its top BM25 hits <= threshold,
default 0.5); only then is the hypothesizer called, otherwise the hybrid result is returned
(``car_explain["routed"] = "hybrid"``).

Criterion spans. With a span index, every returned hit also carries
``metadata["criterion_spans"]``: its ``criterion_spans`` best sentences, table rows or cells
for the query (default 3 with a span index, 0 without; scored by
:class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor` with the
query vector CAR computes once for its dense channel and span ranking — with a hypothesizer
that is the plain query's vector, and the hypothesis's criterion terms join the query's
tokens in the lexical part).

Every result carries ``car_explain`` (hypothesis, criteria, per-channel ranks and scores,
fallback, routed, router signal; offline also ``feedback``: share, agreement, terms — the
terms are reported as the hypothesis, source ``"feedback"``), excluded from embedding and LLM
text. The hypothesis step (offline: a feedback step that produced terms)
dispatches a :class:`~llama_index_car.hypothesizers.events.CriterionHypothesisEvent` (query,
hypothesis, source ``llm``/``offline``/``fallback``, latency) to LlamaIndex instrumentation.

Score scale: like :class:`~llama_index_car.retrievers.weighted_rrf.WeightedRRFRetriever`,
scores are weighted-RRF sums, at most ``1 / (rrf_k + 1) ≈ 0.0164`` (weights ``alpha`` and
``1 - alpha`` sum to 1), so a ``SimilarityPostprocessor(similarity_cutoff=0.3)`` drops every
hit; use ``similarity_cutoff = c / (rrf_k + 1)`` with ``c`` in [0, 1].

Queries pass :mod:`llama_index_car.query_guard` first: empty → ``[]``, control/bidi
characters and lone surrogates removed, longer than ``QueryLimits.max_chars`` (2000) →
``QueryError``.

>>> car = CriterionAwareRetriever.from_defaults(nodes=nodes)  # doctest: +SKIP
>>> car.retrieve("비 오는 날 압접 작업")[0].node.metadata["car_explain"]["feedback"]  # doctest: +SKIP
{'share': 0.31, 'agreement': 0.2, 'terms': ['우천', '가스압접', ...]}
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError, HypothesisError, IndexPersistError
from llama_index_car.fusion import DEFAULT_RRF_K, score_gap
from llama_index_car.hypothesizers.base import (
    BaseCriterionHypothesizer,
    CriterionHypothesis,
    sanitize_text,
    submit_daemon,
)
from llama_index_car.hypothesizers.events import emit_hypothesis_event
from llama_index_car.hypothesizers.feedback import DEFAULT_FEEDBACK_DOCS, feedback_terms
from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE, llm_deadline
from llama_index_car.postprocessors.criterion_spans import (
    DEFAULT_CRITERION_SPANS,
    CriterionSpanPostprocessor,
)
from llama_index_car.postprocessors.span_rerank import (
    DEFAULT_SPAN_POOL,
    DEFAULT_SPAN_WEIGHT,
    rerank_by_spans,
)
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers._store import (
    IndexDense,
    StoreChannels,
    channel_property,
    index_channels,
)
from llama_index_car.retrievers.routing import (
    LexicalOverlapRouter,
    RouteDecision,
    feedback_share,
    top_agreement,
)
from llama_index_car.retrievers.weighted_rrf import (
    aretrieve_channels,
    check_alpha,
    check_int,
    check_retriever,
    check_rrf_k,
    fuse_channel_results,
    retrieve_channels,
)
from llama_index_car.span_index import SpanIndex

__all__ = ["CriterionAwareRetriever"]

logger = logging.getLogger(__name__)

CHANNEL_NAMES = ("dense", "lexical")
FEEDBACK_CHANNEL_NAMES = ("dense", "lexical", "feedback")
#: ``scale`` of the offline feedback share when it is turned on (``feedback_scale=``; off by
#: default: it adds nothing on top of span ranking under cross-validation, span_cv.py)
DEFAULT_FEEDBACK_SCALE = 0.7
#: offline dense weight when no query word is in its best BM25 hits (router signal s = 0)
#: (chosen by CV, benchmarks/span_cv.py); with a hypothesizer ``alpha`` defaults to 0.5
DEFAULT_OFFLINE_ALPHA = 0.3
#: offline dense weight when the query's words are all in its best BM25 hits (router signal
#: s = 1); α moves linearly from ``alpha`` at s = 0 (chosen by CV, benchmarks/span_cv.py)
DEFAULT_ALPHA_OVERLAP = 0.0
#: offline: BM25's top hit goes first when its score leads the second's by this share of
#: itself (:func:`~llama_index_car.fusion.score_gap`; chosen by CV, benchmarks/span_cv.py)
DEFAULT_BM25_LEAD = 0.2


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


def _check_unit(name: str, value: Any, hint: str = "") -> float:
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


def _check_scale(value: Any) -> float:
    return _check_unit("feedback_scale", value, " (0 disables it)")


def _check_feedback_source(lexical: Any) -> None:
    missing = [a for a in ("tokenizer", "bm25", "token_counts") if not hasattr(lexical, a)]
    if missing:
        raise ConfigurationError(
            f"the feedback channel reads term counts from the lexical index, and "
            f"{type(lexical).__name__} has no {', '.join(missing)}; use a KiwiBM25Retriever "
            "or pass feedback_scale=0"
        )


@dataclass(frozen=True)
class _FeedbackPlan:
    """What the feedback channel adds to one query (``bundle`` is None when it adds nothing)."""

    share: float
    signal: float
    agreement: float
    terms: tuple[str, ...]
    bundle: QueryBundle | None


def _validated(hypothesis: Any) -> CriterionHypothesis:
    """The hypothesis if usable, else :class:`HypothesisError` ("garbage")."""
    if not isinstance(hypothesis, CriterionHypothesis):
        raise HypothesisError(
            f"hypothesizer returned {type(hypothesis).__name__}, not a CriterionHypothesis"
        )
    if hypothesis.is_empty:
        raise HypothesisError("hypothesizer returned an empty hypothesis")
    return hypothesis


def _check_seconds(name: str, value: Any, *, positive: bool) -> float:
    """``value`` as finite seconds, > 0 if ``positive`` else >= 0; else ConfigurationError."""
    try:
        seconds = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{name}={value!r} is not a number of seconds") from exc
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        bound = "a positive number of seconds" if positive else ">= 0"
        raise ConfigurationError(f"{name}={value!r} must be {bound}")
    return seconds


class CriterionAwareRetriever(StoreChannels, BaseRetriever):
    """Criterion-aware retrieval: weighted RRF of hypothesis-expanded dense and lexical channels.

    Over a ``VectorStoreIndex`` (``from_defaults(index=...)``, ``from_persist_dir``) it also
    has ``persist``, ``insert_nodes`` / ``delete_nodes`` / ``delete_ref_doc`` and ``filters``
    (see :mod:`llama_index_car.retrievers._store`).

    Args:
        dense_retriever: a retriever over a vector index (honours ``custom_embedding_strs``).
        lexical_retriever: ``KiwiBM25Retriever`` or any retriever taking a query string.
        hypothesizer: a :class:`BaseCriterionHypothesizer` (e.g. ``LLMCriterionHypothesizer``).
            ``None`` (the offline default): no hypothesis; the plain dense and lexical channels
            plus the feedback channel (see the module docstring).
        alpha: weight of the dense channel in [0, 1]; lexical gets ``1 - alpha``. ``None``
            (default): :data:`DEFAULT_OFFLINE_ALPHA` offline (at router signal 0, see
            ``alpha_overlap``), 0.5 with a hypothesizer.
        rrf_k: RRF constant (default 60, ranks 1-based).
        pool_top_k: candidates per channel (default 50).
        similarity_top_k: fused results returned (default 10).
        route: ``"always"`` (default) or ``"auto"`` (call the hypothesizer only when the router
            predicts low lexical overlap).
        strict: raise ``HypothesisError`` instead of falling back to the hybrid.
        hypothesis_timeout: seconds for the hypothesis, LLM retries included (default
            :data:`~llama_index_car.llms.deadline.DEFAULT_LLM_DEADLINE` = 30).
        router: the router for ``route="auto"`` (default ``LexicalOverlapRouter()``).
        speculative_hybrid: run the plain hybrid concurrently with the hypothesis (``True``),
            only on failure (``False``), or ``"auto"`` (default): ``True`` with a hypothesizer
            (unused offline).
        speculation_delay: seconds to wait for the hypothesis before starting the speculative
            hybrid (default 0.005): a cached hypothesis arrives within it, so no hybrid is run
            in vain; an uncached LLM call pays at most this delay.
        feedback_scale: ``scale`` of :func:`~llama_index_car.retrievers.routing.feedback_share`
            for the pseudo-relevance-feedback channel; ``0`` or ``None`` (default) disables it
            (module docstring: cross-validated); :data:`DEFAULT_FEEDBACK_SCALE` is its measured
            scale. Needs a lexical retriever with ``tokenizer``, ``bm25`` and ``token_counts``
            (``KiwiBM25Retriever``).
        criterion_spans: spans attached to each hit as ``metadata["criterion_spans"]``
            (module docstring); ``None`` (default): :data:`DEFAULT_CRITERION_SPANS` (3) with a
            ``span_index``, 0 (off) without; > 0 needs a ``span_index``.
    """

    dense_retriever = channel_property(0, "The dense channel (of the pinned snapshot).")
    lexical_retriever = channel_property(1, "The lexical channel (of the pinned snapshot).")
    hypothesizer = channel_property(None, "The hypothesizer (of the pinned snapshot).")
    span_index = channel_property("spans", "The span index (of the pinned snapshot).")

    def __init__(
        self,
        dense_retriever: BaseRetriever,
        lexical_retriever: BaseRetriever,
        hypothesizer: BaseCriterionHypothesizer | None = None,
        alpha: float | None = None,
        rrf_k: int = DEFAULT_RRF_K,
        pool_top_k: int = 50,
        similarity_top_k: int = 10,
        route: Literal["always", "auto"] = "always",
        strict: bool = False,
        hypothesis_timeout: float = DEFAULT_LLM_DEADLINE,
        router: LexicalOverlapRouter | None = None,
        speculative_hybrid: bool | Literal["auto"] = "auto",
        speculation_delay: float = 0.005,
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
    ) -> None:
        self.dense_retriever = check_retriever("dense_retriever", dense_retriever)
        self.lexical_retriever = check_retriever("lexical_retriever", lexical_retriever)
        if alpha is None:
            alpha = DEFAULT_OFFLINE_ALPHA if hypothesizer is None else 0.5
        self.alpha = check_alpha(alpha)
        self.rrf_k = check_rrf_k(rrf_k)
        self.pool_top_k = check_int("pool_top_k", pool_top_k)
        self.similarity_top_k = check_int("similarity_top_k", similarity_top_k)
        if route not in ("always", "auto"):
            raise ConfigurationError(f"route={route!r} is invalid; use 'always' or 'auto'")
        self.route = route
        if not isinstance(strict, bool):
            raise ConfigurationError(f"strict={strict!r} must be True or False")
        self.strict = strict
        self.hypothesis_timeout = _check_seconds(
            "hypothesis_timeout", hypothesis_timeout, positive=True
        )
        if router is not None and not isinstance(router, LexicalOverlapRouter):
            raise ConfigurationError(
                f"router is a {type(router).__name__}; pass a LexicalOverlapRouter"
            )
        self.router = router if router is not None else LexicalOverlapRouter()
        if hypothesizer is not None and not isinstance(hypothesizer, BaseCriterionHypothesizer):
            raise ConfigurationError(
                f"hypothesizer is a {type(hypothesizer).__name__}; pass a "
                "BaseCriterionHypothesizer such as LLMCriterionHypothesizer(llm=...), or None"
            )
        if hypothesizer is None and route != "always":
            raise ConfigurationError(
                "route='auto' routes queries to the hypothesizer; without one (offline) the "
                "feedback channel is weighted by the router signal already: use route='always'"
            )
        self.hypothesizer = hypothesizer
        self.feedback_scale = _check_scale(feedback_scale or 0.0)
        if self.feedback_scale > 0:
            _check_feedback_source(self.lexical_retriever)
        if speculative_hybrid not in (True, False, "auto"):
            raise ConfigurationError(
                f"speculative_hybrid={speculative_hybrid!r} is invalid; use True, False or 'auto'"
            )
        if speculative_hybrid == "auto":
            speculative_hybrid = hypothesizer is not None
        self.speculative_hybrid = bool(speculative_hybrid)
        self.speculation_delay = _check_seconds(
            "speculation_delay", speculation_delay, positive=False
        )
        self.weights = [self.alpha, 1.0 - self.alpha]
        if span_index is not None and not isinstance(span_index, SpanIndex):
            raise ConfigurationError(
                f"span_index is a {type(span_index).__name__}; pass a SpanIndex or None"
            )
        self.span_index = span_index
        offline = hypothesizer is None
        if span_weight is None:
            span_weight = DEFAULT_SPAN_WEIGHT if offline and span_index is not None else 0.0
        self.span_weight = _check_unit("span_weight", span_weight)
        self.span_pool = check_int("span_pool", span_pool)
        if alpha_overlap is None:
            alpha_overlap = DEFAULT_ALPHA_OVERLAP if offline else self.alpha
        self.alpha_overlap = _check_unit("alpha_overlap", alpha_overlap)
        if bm25_lead is None:
            bm25_lead = DEFAULT_BM25_LEAD if offline else 0.0
        self.bm25_lead = _check_unit("bm25_lead", bm25_lead, " (0 = off)")
        self.embed_model: Any = embed_model or getattr(dense_retriever, "_embed_model", None)
        if self.span_weight > 0 and span_index is None:
            raise ConfigurationError("span_weight > 0 needs a span_index (or pass span_weight=0)")
        if self.span_weight > 0 and self.embed_model is None:
            raise ConfigurationError(
                "span ranking needs the query vector: pass embed_model (the index's embedding)"
            )
        if criterion_spans is None:
            criterion_spans = DEFAULT_CRITERION_SPANS if span_index is not None else 0
        self.criterion_spans = check_int("criterion_spans", criterion_spans, minimum=0)
        self._span_post: CriterionSpanPostprocessor | None = None
        if self.criterion_spans > 0:
            if span_index is None:
                raise ConfigurationError(
                    "criterion_spans > 0 needs a span_index (or pass criterion_spans=0)"
                )
            if self.embed_model is None:
                raise ConfigurationError(
                    "criterion spans need the query vector: pass embed_model (the index's "
                    "embedding)"
                )
            tokenizer = getattr(self.lexical_retriever, "tokenizer", None)
            self._span_post = CriterionSpanPostprocessor(
                span_index, self.embed_model, tokenizer=tokenizer, top_n=self.criterion_spans
            )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

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
        """Build the whole thing in one line.

        * ``index``: an existing ``VectorStoreIndex`` (its embed model and docstore nodes are
          used); otherwise a ``VectorStoreIndex`` is built over ``nodes`` with ``embed_model``
          (default :func:`~llama_index_car.providers.resolve_embed_model`: ``$CAR_EMBED_MODEL``,
          else the offline ``MultilingualE5Embedding``).
        * lexical channel: ``KiwiBM25Retriever.from_defaults(nodes=..., tokenizer=tokenizer)``.
        * hypothesizer: ``hypothesizer`` if given; else ``LLMCriterionHypothesizer(llm=llm)``
          when ``llm`` is given; else none: the offline configuration (plain dense and lexical
          channels plus the feedback channel, nothing built at index time).
        * ``filters``: LlamaIndex ``MetadataFilters`` applied by the store (dense) and by
          BM25 on node metadata (lexical); ``token_cache``: BM25's token cache (a shared
          dict tokenizes each text once across builds).
        * ``spans``: build a :class:`~llama_index_car.span_index.SpanIndex` over the nodes
          (embeds every span once more, ≈ the corpus again) and re-rank by it; ``None``
          (default): only offline (with an LLM hypothesizer span ranking is not measured yet).
          A ``span_index`` in ``kwargs`` is used as given.
        * ``**kwargs`` go to the constructor (``alpha``, ``route``, ``strict`` …).

        The result is bound to the index: ``persist``/``insert_nodes``/``delete_nodes`` work.
        """
        if nodes is None and index is None:
            raise ConfigurationError("pass nodes=[...] or index=<VectorStoreIndex>")
        pool_top_k = kwargs.get("pool_top_k", 50)
        if index is None:
            from llama_index.core import VectorStoreIndex

            if embed_model is None:
                from llama_index_car.providers import resolve_embed_model

                embed_model = resolve_embed_model()  # $CAR_EMBED_MODEL, else offline e5
            node_list = list(nodes or [])
            if not node_list:
                raise ConfigurationError("nodes is empty; pass the nodes to index")
            index = VectorStoreIndex(
                nodes=node_list, embed_model=embed_model, show_progress=show_progress
            )
        else:
            if embed_model is None:
                embed_model = getattr(index, "_embed_model", None)
            if nodes is None:
                docstore = getattr(index, "docstore", None)
                nodes = list(getattr(docstore, "docs", {}).values()) if docstore else []
            node_list = list(nodes)
            if not node_list:
                from llama_index_car._errors import EmptyIndexError

                raise EmptyIndexError(
                    "the index's docstore holds no nodes (a store-backed index keeps them in "
                    "the store); pass nodes=[...] along with index="
                )
        dense, lexical = index_channels(
            index, node_list, pool_top_k, filters=filters, tokenizer=tokenizer,
            show_progress=show_progress, token_cache=token_cache,
        )
        if hypothesizer is None and llm is not None:
            from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

            hypothesizer = LLMCriterionHypothesizer(llm=llm)
        if spans is None:
            spans = hypothesizer is None
        if spans and kwargs.get("span_index") is None:
            kwargs["span_index"] = SpanIndex.from_nodes(
                node_list, embed_model, show_progress=show_progress
            )
        kwargs.setdefault("embed_model", embed_model)
        car = cls(dense, lexical, hypothesizer=hypothesizer, **kwargs)
        car._bind(index, filters)
        return car

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: Any,
        index: Any,
        *,
        hypothesizer: BaseCriterionHypothesizer | None = None,
        llm: Any | None = None,
        tokenizer: Any | None = None,
        **overrides: Any,
    ) -> CriterionAwareRetriever:
        """Reopen what :meth:`persist` wrote, over ``index`` (the same vector store).

        Offline CAR (no hypothesizer) needs nothing else; an LLM hypothesizer is not
        persisted: pass ``hypothesizer`` or ``llm`` again. ``overrides`` replace
        persisted constructor arguments (e.g. ``similarity_top_k``).

        The span index persisted in ``spans/`` is loaded with it. A ``retriever.json`` whose
        ``span_weight`` is > 0 without a ``spans/`` folder is refused (span ranking would be
        silently off): persist the retriever again, or pass ``span_weight=0``. Without
        ``spans/`` the persisted ``criterion_spans`` is dropped (no spans to attach).

        Raises:
            IndexPersistError: missing, damaged or foreign files (named), or span ranking
                configured without a persisted span index.
        """
        spec, lexical, spans = cls._load_parts(persist_dir, tokenizer)
        if hypothesizer is None and llm is not None:
            from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

            hypothesizer = LLMCriterionHypothesizer(llm=llm)
        config = dict(spec.get("config") or {}) | overrides
        router = config.pop("router", None)
        if isinstance(router, dict):
            router = LexicalOverlapRouter(**router)
        filters = cls._store_filters(spec)
        weight = config.get("span_weight")
        if spans is None and isinstance(weight, int | float) and weight > 0:
            raise IndexPersistError(
                f"{persist_dir}: retriever.json has span_weight={weight} but no spans/ folder "
                "is persisted; persist the retriever again, or pass span_weight=0"
            )
        if spans is None and "criterion_spans" not in overrides:
            config.pop("criterion_spans", None)  # off without a span index, as when built
        pool = int(config.get("pool_top_k", 50))
        ids = frozenset(n.node_id for n in lexical.nodes)
        config.setdefault("span_index", spans)
        car = cls(
            IndexDense(index, pool, filters, ids), lexical,
            hypothesizer=hypothesizer, router=router, **config,
        )
        car._bind(index, filters)
        return car

    # ------------------------------------------------------------------ helpers
    def _car_bundles(self, query: str, h: CriterionHypothesis) -> tuple[QueryBundle, QueryBundle]:
        text = h.text.strip() or h.expansion_terms()
        terms = h.expansion_terms().strip() or text
        dense = QueryBundle(query_str=query, custom_embedding_strs=[query + "\n" + text])
        lexical = QueryBundle(query_str=query + " " + terms)
        return dense, lexical

    def _fuse(
        self,
        results: Sequence[Sequence[NodeWithScore]],
        *,
        hypothesis: CriterionHypothesis | None,
        fallback: bool,
        routed: str,
        decision: RouteDecision | None,
        error: str | None,
        feedback: _FeedbackPlan | None = None,
        query_vector: Sequence[float] | None = None,
    ) -> list[NodeWithScore]:
        names: Sequence[str] = CHANNEL_NAMES
        alpha = self.alpha
        if feedback is not None:  # offline: the dense weight follows the router signal
            alpha = self.alpha - (self.alpha - self.alpha_overlap) * feedback.signal
        weights = [alpha, 1.0 - alpha]
        if feedback is not None and feedback.bundle is not None:
            names = FEEDBACK_CHANNEL_NAMES
            p = feedback.share  # taken from both channels alike (README Results: measured)
            weights = [alpha * (1.0 - p), (1.0 - alpha) * (1.0 - p), p]
        explain: dict[str, Any] = {
            "hypothesis": hypothesis.text if hypothesis is not None else None,
            "criteria": list(hypothesis.criteria) if hypothesis is not None else [],
            "hypothesis_source": hypothesis.source if hypothesis is not None else None,
            "hypothesis_cached": hypothesis.cached if hypothesis is not None else None,
            "fallback": fallback,
            "routed": routed,
            "router_signal": decision.signal if decision is not None else None,
            "error": error,
        }
        if feedback is not None:
            explain["router_signal"] = feedback.signal
            explain["feedback"] = {
                "share": feedback.share if feedback.bundle is not None else 0.0,
                "agreement": feedback.agreement,
                "terms": list(feedback.terms),
            }
        lexical = results[1] if len(results) > 1 else []
        gap = score_gap([h.score for h in lexical[:2]])
        lead = feedback is not None and self.bm25_lead > 0 and gap >= self.bm25_lead
        spans = query_vector is not None and self.span_index is not None and self.span_weight > 0
        depth = self.similarity_top_k
        if lead:  # the lead hit may rank anywhere in the fusion
            depth = sum(len(r) for r in results)
        elif spans:
            depth = max(self.similarity_top_k, self.span_pool)
        fused = fuse_channel_results(results, names, weights, self.rrf_k, depth, explain)
        if spans and query_vector is not None:
            explain["span_weight"] = self.span_weight
            fused = rerank_by_spans(
                fused, self.span_index, query_vector, weight=self.span_weight,
                pool=self.span_pool, rrf_k=self.rrf_k,
            )
        if lead:
            fused = _lead_first(fused, lexical[0].node.node_id, gap, self.bm25_lead)
        return fused[: self.similarity_top_k]

    def _plan_feedback(
        self, query: str, dense_hits: Sequence[NodeWithScore], lexical_hits: Sequence[NodeWithScore]
    ) -> _FeedbackPlan:
        """Signal, agreement, share and feedback terms of one query (no retrieval here)."""
        signal = self.router.signal(query, lexical_hits)
        agreement = top_agreement(
            [h.node.node_id for h in dense_hits], [h.node.node_id for h in lexical_hits]
        )
        share = feedback_share(signal, agreement, self.feedback_scale)
        if share <= 0:
            return _FeedbackPlan(share, signal, agreement, (), None)
        lexical: Any = self.lexical_retriever
        counts = []
        for hit in dense_hits[:DEFAULT_FEEDBACK_DOCS]:
            try:
                counts.append(lexical.token_counts(hit.node.node_id))
            except ConfigurationError:  # a dense hit the lexical index does not hold
                continue
        bm25 = lexical.bm25
        candidates = {t for c in counts for t in c}
        idf = {t: float(bm25.idf[bm25.vocab[t]]) for t in candidates if t in bm25.vocab}
        terms = feedback_terms(lexical.tokenizer.tokenize(query), counts, idf)
        if not terms:
            return _FeedbackPlan(0.0, signal, agreement, (), None)
        bundle = QueryBundle(query_str=query + " " + " ".join(terms))
        return _FeedbackPlan(share, signal, agreement, tuple(terms), bundle)

    def _offline_explained(
        self,
        query: str,
        results: list[list[NodeWithScore]],
        plan: _FeedbackPlan,
        started: float,
        query_vector: Sequence[float] | None,
    ) -> list[NodeWithScore]:
        hypothesis = (
            CriterionHypothesis(text=" ".join(plan.terms), criteria=plan.terms, source="feedback")
            if plan.terms
            else None
        )
        if hypothesis is not None:
            emit_hypothesis_event(query, "feedback", hypothesis, time.perf_counter() - started)
        return self._fuse(
            results, hypothesis=hypothesis, fallback=False, routed="car", decision=None,
            error=None, feedback=plan, query_vector=query_vector,
        )

    def _needs_query_vector(self, query_bundle: QueryBundle) -> bool:
        spans = self.span_weight > 0 or self.criterion_spans > 0
        return spans and query_bundle.embedding is None

    def _with_query_vector(self, query_bundle: QueryBundle) -> QueryBundle:
        """``query_bundle`` with its embedding computed once (the dense channel, span ranking
        and criterion spans share it); unchanged when both span steps are off."""
        if not self._needs_query_vector(query_bundle):
            return query_bundle
        vector = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return dataclasses.replace(query_bundle, embedding=vector)

    async def _awith_query_vector(self, query_bundle: QueryBundle) -> QueryBundle:
        if not self._needs_query_vector(query_bundle):
            return query_bundle
        vector = await self.embed_model.aget_agg_embedding_from_queries(
            query_bundle.embedding_strs
        )
        return dataclasses.replace(query_bundle, embedding=vector)

    def _with_criterion_spans(
        self, hits: list[NodeWithScore], query_bundle: QueryBundle
    ) -> list[NodeWithScore]:
        """``hits`` with ``criterion_spans`` attached (copies), or as they are when off. An LLM
        hypothesis's criterion terms join the query in the lexical part (the offline feedback
        terms do not: they are mined from other hits, not a guess at the criterion)."""
        post, spans = self._span_post, self.span_index
        if post is None or spans is None or not hits:
            return hits
        text = query_bundle.query_str
        explain = hits[0].node.metadata.get("car_explain") or {}
        if explain.get("hypothesis_source") not in (None, "feedback") and explain.get("criteria"):
            text = text + " " + " ".join(str(c) for c in explain["criteria"])
        return post.attach(hits, query_bundle.embedding, text, span_index=spans)

    def _offline_sync(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query_bundle = self._with_query_vector(query_bundle)
        query = query_bundle.query_str
        dense, lexical = retrieve_channels(
            [(self.dense_retriever, query_bundle), (self.lexical_retriever, QueryBundle(query))],
            self.pool_top_k,
        )
        started = time.perf_counter()
        plan = self._plan_feedback(query, dense, lexical)
        results = [dense, lexical]
        if plan.bundle is not None:
            results += retrieve_channels([(self.lexical_retriever, plan.bundle)], self.pool_top_k)
        return self._offline_explained(query, results, plan, started, query_bundle.embedding)

    async def _offline_async(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query_bundle = await self._awith_query_vector(query_bundle)
        query = query_bundle.query_str
        dense, lexical = await aretrieve_channels(
            [(self.dense_retriever, query_bundle), (self.lexical_retriever, QueryBundle(query))],
            self.pool_top_k,
        )
        started = time.perf_counter()
        plan = self._plan_feedback(query, dense, lexical)
        results = [dense, lexical]
        if plan.bundle is not None:
            results += await aretrieve_channels(
                [(self.lexical_retriever, plan.bundle)], self.pool_top_k
            )
        return self._offline_explained(query, results, plan, started, query_bundle.embedding)

    def _hypothesis_feedback_sync(
        self, query: str, results: list[list[NodeWithScore]]
    ) -> _FeedbackPlan | None:
        if self.feedback_scale <= 0:
            return None
        plan = self._plan_feedback(query, results[0], results[1])
        if plan.bundle is not None:
            results += retrieve_channels([(self.lexical_retriever, plan.bundle)], self.pool_top_k)
        return plan

    async def _hypothesis_feedback_async(
        self, query: str, results: list[list[NodeWithScore]]
    ) -> _FeedbackPlan | None:
        if self.feedback_scale <= 0:
            return None
        plan = self._plan_feedback(query, results[0], results[1])
        if plan.bundle is not None:
            results += await aretrieve_channels(
                [(self.lexical_retriever, plan.bundle)], self.pool_top_k
            )
        return plan

    def _failed(self, exc: BaseException) -> str:
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)):
            message = f"hypothesizer timed out after {self.hypothesis_timeout:g} s"
        else:
            message = f"hypothesizer failed: {type(exc).__name__}: {sanitize_text(str(exc), 500)}"
        if self.strict:
            if isinstance(exc, HypothesisError):
                raise exc
            raise HypothesisError(message) from exc
        logger.warning("CriterionAwareRetriever: %s; returning the hybrid result", message)
        return message

    # ------------------------------------------------------------------ sync
    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query_bundle = self._with_query_vector(query_bundle)
        return self._with_criterion_spans(self._retrieve_fused(query_bundle), query_bundle)

    def _retrieve_fused(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.hypothesizer is None:
            return self._offline_sync(query_bundle)
        hypothesizer = self.hypothesizer
        query = query_bundle.query_str
        plain_lexical = QueryBundle(query_str=query)
        decision: RouteDecision | None = None
        lexical_hits: list[NodeWithScore] | None = None
        if self.route == "auto":
            lexical_hits = retrieve_channels(
                [(self.lexical_retriever, plain_lexical)], self.pool_top_k
            )[0]
            decision = self.router.decide(query, lexical_hits)
            if not decision.use_car:
                dense_hits = retrieve_channels(
                    [(self.dense_retriever, query_bundle)], self.pool_top_k
                )[0]
                return self._fuse(
                    [dense_hits, lexical_hits], hypothesis=None, fallback=False,
                    routed="hybrid", decision=decision, error=None,
                )
        started = time.perf_counter()
        executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=3, thread_name_prefix="car"
        )
        try:
            # a daemon thread, not the pool: a hung hypothesizer never holds the process;
            # a bounded LLM client in it ends its request by the same deadline
            with llm_deadline(self.hypothesis_timeout):
                hyp_future = submit_daemon(
                    contextvars.copy_context().run, hypothesizer.hypothesize, query
                )
            hybrid_future = None
            if self.speculative_hybrid and self.speculation_delay > 0:
                concurrent.futures.wait([hyp_future], timeout=self.speculation_delay)
            if self.speculative_hybrid and not hyp_future.done():
                hybrid_future = executor.submit(
                    contextvars.copy_context().run,
                    self._hybrid_results_sync, query_bundle, lexical_hits,
                )
            try:
                hypothesis = _validated(hyp_future.result(timeout=self.hypothesis_timeout))
            except Exception as exc:
                error = self._failed(exc)
                emit_hypothesis_event(
                    query, hypothesizer, None, time.perf_counter() - started, error
                )
                hybrid = (
                    hybrid_future.result()
                    if hybrid_future is not None
                    else self._hybrid_results_sync(query_bundle, lexical_hits)
                )
                return self._fuse(
                    hybrid, hypothesis=None, fallback=True, routed="hybrid",
                    decision=decision, error=error,
                )
            emit_hypothesis_event(
                query, hypothesizer, hypothesis, time.perf_counter() - started
            )
            if hybrid_future is not None:
                hybrid_future.cancel()
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
        dense_q, lexical_q = self._car_bundles(query, hypothesis)
        results = retrieve_channels(
            [(self.dense_retriever, dense_q), (self.lexical_retriever, lexical_q)], self.pool_top_k
        )
        plan = self._hypothesis_feedback_sync(query, results)
        return self._fuse(
            results, hypothesis=hypothesis, fallback=False, routed="car",
            decision=decision, error=None, feedback=plan,
        )

    def _hybrid_results_sync(
        self, query_bundle: QueryBundle, lexical_hits: list[NodeWithScore] | None
    ) -> list[list[NodeWithScore]]:
        if lexical_hits is not None:
            dense = retrieve_channels([(self.dense_retriever, query_bundle)], self.pool_top_k)[0]
            return [dense, lexical_hits]
        return retrieve_channels(
            [
                (self.dense_retriever, query_bundle),
                (self.lexical_retriever, QueryBundle(query_str=query_bundle.query_str)),
            ],
            self.pool_top_k,
        )

    # ------------------------------------------------------------------ async
    async def _hybrid_results_async(
        self, query_bundle: QueryBundle, lexical_hits: list[NodeWithScore] | None
    ) -> list[list[NodeWithScore]]:
        if lexical_hits is not None:
            dense = (
                await aretrieve_channels([(self.dense_retriever, query_bundle)], self.pool_top_k)
            )[0]
            return [dense, lexical_hits]
        return await aretrieve_channels(
            [
                (self.dense_retriever, query_bundle),
                (self.lexical_retriever, QueryBundle(query_str=query_bundle.query_str)),
            ],
            self.pool_top_k,
        )

    @guarded_retrieve
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query_bundle = await self._awith_query_vector(query_bundle)
        hits = await self._aretrieve_fused(query_bundle)
        return self._with_criterion_spans(hits, query_bundle)

    async def _aretrieve_fused(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.hypothesizer is None:
            return await self._offline_async(query_bundle)
        hypothesizer = self.hypothesizer
        query = query_bundle.query_str
        decision: RouteDecision | None = None
        lexical_hits: list[NodeWithScore] | None = None
        if self.route == "auto":
            lexical_hits = (
                await aretrieve_channels(
                    [(self.lexical_retriever, QueryBundle(query_str=query))], self.pool_top_k
                )
            )[0]
            decision = self.router.decide(query, lexical_hits)
            if not decision.use_car:
                hybrid = await self._hybrid_results_async(query_bundle, lexical_hits)
                return self._fuse(
                    hybrid, hypothesis=None, fallback=False, routed="hybrid",
                    decision=decision, error=None,
                )
        started = time.perf_counter()
        with llm_deadline(self.hypothesis_timeout):  # the task copies the context now
            hyp_task = asyncio.ensure_future(
                asyncio.wait_for(hypothesizer.ahypothesize(query), self.hypothesis_timeout)
            )
        if self.speculative_hybrid and self.speculation_delay > 0:
            await asyncio.wait({hyp_task}, timeout=self.speculation_delay)
        hybrid_task = (
            asyncio.ensure_future(self._hybrid_results_async(query_bundle, lexical_hits))
            if self.speculative_hybrid and not hyp_task.done()
            else None
        )
        try:
            try:
                hypothesis = _validated(await hyp_task)
            except Exception as exc:
                error = self._failed(exc)
                emit_hypothesis_event(
                    query, hypothesizer, None, time.perf_counter() - started, error
                )
                hybrid = (
                    await hybrid_task
                    if hybrid_task is not None
                    else await self._hybrid_results_async(query_bundle, lexical_hits)
                )
                hybrid_task = None
                return self._fuse(
                    hybrid, hypothesis=None, fallback=True, routed="hybrid",
                    decision=decision, error=error,
                )
        finally:
            for task in (hyp_task, hybrid_task):
                if task is not None and not task.done():
                    task.cancel()
        emit_hypothesis_event(query, hypothesizer, hypothesis, time.perf_counter() - started)
        dense_q, lexical_q = self._car_bundles(query, hypothesis)
        results = await aretrieve_channels(
            [(self.dense_retriever, dense_q), (self.lexical_retriever, lexical_q)], self.pool_top_k
        )
        plan = await self._hypothesis_feedback_async(query, results)
        return self._fuse(
            results, hypothesis=hypothesis, fallback=False, routed="car",
            decision=decision, error=None, feedback=plan,
        )
