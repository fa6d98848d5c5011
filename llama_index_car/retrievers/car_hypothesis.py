"""``HypothesisCriterionRetriever``: the paper's CAR, fused around a criterion hypothesis.

What :meth:`CriterionAwareRetriever.from_defaults
<llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever.from_defaults>` builds
with ``llm=`` or ``hypothesizer=``. A hypothesizer (e.g. ``LLMCriterionHypothesizer``)
guesses the criterion the query seeks, in the vocabulary of the standards
(``CriterionHypothesis(text, criteria)``), and two channels are fused:

* dense: ``QueryBundle(query, custom_embedding_strs=[query + "\\n" + hypothesis.text])``
  (concatenation, as in the paper — not HyDE's embedding average);
* lexical: ``query + " " + hypothesis.expansion_terms()``;
* fusion: :func:`~llama_index_car.fusion.weighted_rrf` with weights ``[alpha, 1 - alpha]``
  (alpha weights dense; default 0.5), ``rrf_k`` (default 60), ``pool_top_k`` candidates per
  channel (default 50), ``similarity_top_k`` results (default 10).

Resilience. The hypothesis is produced concurrently with a plain hybrid retrieval
(dense(query) + lexical(query), same fusion; ``speculative_hybrid``, started after
``speculation_delay`` if the hypothesis has not arrived). If the hypothesizer raises
(``HypothesisError`` or any other ``Exception``, e.g. from an LLM client), exceeds
``hypothesis_timeout`` seconds or returns an empty hypothesis, CAR logs a warning and returns
the hybrid result with ``car_explain["fallback"] = True`` and ``error`` — unless
``strict=True``, which raises ``HypothesisError``. ``hypothesis_timeout`` is the one deadline
of the step: the hypothesizer runs inside :func:`~llama_index_car.llms.deadline.llm_deadline`,
so a bounded LLM client (:class:`~llama_index_car.llms.BoundedAnthropic`, the default) closes
its request and frees its thread at the same moment, retries and retry waits included.

Routing. ``route="auto"`` first runs the lexical channel on the plain query and asks a
:class:`~llama_index_car.retrievers.routing.LexicalOverlapRouter` whether low lexical overlap is
predicted (share of the query's content morphemes found in its top BM25 hits <= threshold,
default 0.5); only then is the hypothesizer called, otherwise the hybrid result is returned
(``car_explain["routed"] = "hybrid"``, ``router_signal``).

Each hypothesis step dispatches a
:class:`~llama_index_car.hypothesizers.events.CriterionHypothesisEvent` (query, hypothesis,
source ``llm``/``offline``/``fallback``, latency) to LlamaIndex instrumentation.

>>> h = CriterionHypothesis(text="배수시설 설치기준", criteria=("설치기준", "배수시설"))
>>> dense, lexical = car_bundles("비 오는 날 물빠짐", h)
>>> dense.embedding_strs
['비 오는 날 물빠짐\\n배수시설 설치기준']
>>> lexical.query_str
'비 오는 날 물빠짐 설치기준 배수시설'
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError, HypothesisError
from llama_index_car.fusion import DEFAULT_RRF_K
from llama_index_car.hypothesizers.base import (
    BaseCriterionHypothesizer,
    CriterionHypothesis,
    sanitize_text,
    submit_daemon,
)
from llama_index_car.hypothesizers.events import emit_hypothesis_event
from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE, llm_deadline
from llama_index_car.retrievers.criterion_aware import (
    SHARED_OPTIONS,
    Channels,
    CriterionAwareRetriever,
    Search,
    Steps,
    _Call,
    check_seconds,
    explain_fields,
)
from llama_index_car.retrievers.routing import LexicalOverlapRouter, RouteDecision
from llama_index_car.retrievers.weighted_rrf import check_rrf_k, fuse_channel_results
from llama_index_car.span_index import SpanIndex

__all__ = ["HypothesisCriterionRetriever", "car_bundles"]

logger = logging.getLogger(__name__)

CHANNEL_NAMES = ("dense", "lexical")


def car_bundles(query: str, h: CriterionHypothesis) -> tuple[QueryBundle, QueryBundle]:
    """The hypothesis-expanded (dense, lexical) queries (module docstring)."""
    text = h.text.strip() or h.expansion_terms()
    terms = h.expansion_terms().strip() or text
    dense = QueryBundle(query_str=query, custom_embedding_strs=[query + "\n" + text])
    lexical = QueryBundle(query_str=query + " " + terms)
    return dense, lexical


def _validated(hypothesis: Any) -> CriterionHypothesis:
    """The hypothesis if usable, else :class:`HypothesisError` ("garbage")."""
    if not isinstance(hypothesis, CriterionHypothesis):
        raise HypothesisError(
            f"hypothesizer returned {type(hypothesis).__name__}, not a CriterionHypothesis"
        )
    if hypothesis.is_empty:
        raise HypothesisError("hypothesizer returned an empty hypothesis")
    return hypothesis


@dataclass(frozen=True)
class _Hybrid(Search):
    """The plain hybrid search (a speculative run of it may be in flight)."""


@dataclass(frozen=True)
class _Hypothesize:
    """A step: the hypothesis for ``query`` (reply: it, or the exception), with ``hybrid``
    run speculatively meanwhile."""

    query: str
    hybrid: _Hybrid


class HypothesisCriterionRetriever(CriterionAwareRetriever):
    """The paper's CAR: hypothesis → dense(q + hypothesis) ⊕ lexical(q + criteria), with the
    plain hybrid as the fallback on any failure (module docstring).

    Args (besides the shared ones of
    :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`):
        hypothesizer: a :class:`BaseCriterionHypothesizer` (e.g. ``LLMCriterionHypothesizer``).
        alpha: weight of the dense channel (``None``, the default: 0.5).
        rrf_k: the RRF constant (default 60, ranks 1-based).
        pool_top_k: candidates per channel (default 50).
        route: ``"always"`` (default) or ``"auto"`` (call the hypothesizer only when the router
            predicts low lexical overlap).
        strict: raise ``HypothesisError`` instead of falling back to the hybrid.
        hypothesis_timeout: seconds for the hypothesis, LLM retries included (default
            :data:`~llama_index_car.llms.deadline.DEFAULT_LLM_DEADLINE` = 30).
        router: the router for ``route="auto"`` (default ``LexicalOverlapRouter()``).
        speculative_hybrid: run the plain hybrid concurrently with the hypothesis (``True``,
            ``"auto"``: the default) or only on failure (``False``).
        speculation_delay: seconds to wait for the hypothesis before starting the speculative
            hybrid (default 0.005): a cached hypothesis arrives within it, so no hybrid is run
            in vain; an uncached LLM call pays at most this delay.
    """

    #: its keyword options (``car_from_channels`` refuses others by name)
    OPTIONS = SHARED_OPTIONS | {
        "rrf_k", "router", "route", "strict", "hypothesis_timeout", "speculative_hybrid",
        "speculation_delay",
    }

    def __init__(
        self,
        dense_retriever: BaseRetriever,
        lexical_retriever: BaseRetriever,
        hypothesizer: BaseCriterionHypothesizer,
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
        span_index: SpanIndex | None = None,
        criterion_spans: int | None = None,
        embed_model: Any | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if route not in ("always", "auto"):
            raise ConfigurationError(f"route={route!r} is invalid; use 'always' or 'auto'")
        if not isinstance(strict, bool):
            raise ConfigurationError(f"strict={strict!r} must be True or False")
        if not isinstance(hypothesizer, BaseCriterionHypothesizer):
            raise ConfigurationError(
                f"hypothesizer is a {type(hypothesizer).__name__}; pass a "
                "BaseCriterionHypothesizer such as LLMCriterionHypothesizer(llm=...) (without "
                "one: OfflineCriterionRetriever)"
            )
        if speculative_hybrid not in (True, False, "auto"):
            raise ConfigurationError(
                f"speculative_hybrid={speculative_hybrid!r} is invalid; use True, False or 'auto'"
            )
        self.route = route
        self.strict = strict
        self.hypothesis_timeout = check_seconds(
            "hypothesis_timeout", hypothesis_timeout, positive=True
        )
        self.speculative_hybrid = speculative_hybrid in (True, "auto")
        self.speculation_delay = check_seconds(
            "speculation_delay", speculation_delay, positive=False
        )
        if router is not None and not isinstance(router, LexicalOverlapRouter):
            raise ConfigurationError(
                f"router is a {type(router).__name__}; pass a LexicalOverlapRouter"
            )
        self.router = router if router is not None else LexicalOverlapRouter()
        self.rrf_k = check_rrf_k(rrf_k)
        super().__init__(
            dense_retriever, lexical_retriever, alpha=0.5 if alpha is None else alpha,
            pool_top_k=pool_top_k, similarity_top_k=similarity_top_k, span_index=span_index,
            criterion_spans=criterion_spans, embed_model=embed_model,
            callback_manager=callback_manager, verbose=verbose,
        )
        self.hypothesizer: BaseCriterionHypothesizer = hypothesizer  # type: ignore[assignment]

    # ------------------------------------------------------------------ the one path
    def _steps(self, query_bundle: QueryBundle, ch: Channels) -> Steps:
        query_bundle = yield from self._with_query_vector(query_bundle)
        query = query_bundle.query_str
        hypothesizer = self.hypothesizer
        decision: RouteDecision | None = None
        hybrid = _Hybrid(((ch.dense, query_bundle), (ch.lexical, QueryBundle(query_str=query))))
        if self.route == "auto":
            (lexical_hits,) = yield Search(((ch.lexical, QueryBundle(query)),))
            decision = self.router.decide(query, lexical_hits)
            hybrid = _Hybrid(hybrid.jobs[:1], known=(lexical_hits,))  # the router's hits
            if not decision.use_car:
                results = yield hybrid
                return self._fuse(query_bundle, ch, results, None, decision, routed="hybrid")
        started = time.perf_counter()
        outcome = yield _Hypothesize(query, hybrid)
        if isinstance(outcome, Exception):
            error = self._failed(outcome)
            emit_hypothesis_event(query, hypothesizer, None, time.perf_counter() - started, error)
            results = yield hybrid
            return self._fuse(query_bundle, ch, results, None, decision, routed="hybrid",
                              fallback=True, error=error)
        emit_hypothesis_event(query, hypothesizer, outcome, time.perf_counter() - started)
        dense_q, lexical_q = car_bundles(query, outcome)
        jobs = ((ch.dense, dense_q), (ch.lexical, lexical_q))
        results = yield Search(jobs)
        return self._fuse(query_bundle, ch, results, outcome, decision)

    def _fuse(
        self,
        query_bundle: QueryBundle,
        ch: Channels,
        results: list[list[NodeWithScore]],
        hypothesis: CriterionHypothesis | None,
        decision: RouteDecision | None,
        *,
        routed: str = "car",
        fallback: bool = False,
        error: str | None = None,
    ) -> list[NodeWithScore]:
        signal = decision.signal if decision else None
        explain = explain_fields(hypothesis, fallback=fallback, routed=routed, signal=signal,
                                 error=error)
        fused = fuse_channel_results(
            results, CHANNEL_NAMES, self.weights, self.rrf_k, self.similarity_top_k, explain
        )
        return self._with_criterion_spans(fused, query_bundle, ch)

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

    # ------------------------------------------------------------------ the two drivers
    def _serve(self, step: Any, call: _Call) -> Any:
        if isinstance(step, _Hypothesize):
            return self._hypothesize(step, call)
        if isinstance(step, _Hybrid) and call.pending is not None:
            pending, call.pending = call.pending, None
            return pending.result()
        return super()._serve(step, call)

    async def _aserve(self, step: Any, call: _Call) -> Any:
        if isinstance(step, _Hypothesize):
            return await self._ahypothesize(step, call)
        if isinstance(step, _Hybrid) and call.pending is not None:
            pending, call.pending = call.pending, None
            return await pending
        return await super()._aserve(step, call)

    def _hypothesize(self, step: _Hypothesize, call: _Call) -> CriterionHypothesis | Exception:
        # a daemon thread, not a pool: a hung hypothesizer never holds the process; a
        # bounded LLM client in it ends its request by the same deadline
        with llm_deadline(self.hypothesis_timeout):
            future = submit_daemon(
                contextvars.copy_context().run, self.hypothesizer.hypothesize, step.query
            )
        if self.speculative_hybrid and self.speculation_delay > 0:
            concurrent.futures.wait([future], timeout=self.speculation_delay)
        if self.speculative_hybrid and not future.done():
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="car")
            call.pending = pool.submit(
                contextvars.copy_context().run, super()._serve, step.hybrid, call
            )
            pool.shutdown(wait=False)
        try:
            hypothesis = _validated(future.result(timeout=self.hypothesis_timeout))
        except Exception as exc:
            return exc
        call.cancel()
        return hypothesis

    async def _ahypothesize(
        self, step: _Hypothesize, call: _Call
    ) -> CriterionHypothesis | Exception:
        with llm_deadline(self.hypothesis_timeout):  # the task copies the context now
            task = asyncio.ensure_future(
                asyncio.wait_for(self.hypothesizer.ahypothesize(step.query),
                                 self.hypothesis_timeout)
            )
        if self.speculative_hybrid and self.speculation_delay > 0:
            await asyncio.wait({task}, timeout=self.speculation_delay)
        if self.speculative_hybrid and not task.done():
            call.pending = asyncio.ensure_future(super()._aserve(step.hybrid, call))
        try:
            hypothesis = _validated(await task)
        except Exception as exc:
            return exc
        finally:
            if not task.done():
                task.cancel()
        call.cancel()
        return hypothesis
