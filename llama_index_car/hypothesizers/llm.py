"""LLM hypothesizers: the paper's criterion hypothesis (§5.8) and the generic HyDE baseline.

Both run any LlamaIndex ``LLM`` through one shared engine (:class:`_LLMHypothesizerBase`):

* **cache** — an in-memory LRU (``cache_size`` entries) plus, with ``cache_dir``, one JSON file
  per entry; the key is ``sha256(json([llm class:model, prompt template, query]))``, so a new
  model or an updated prompt never reuses stale hypotheses;
* **timeout** — ``timeout`` seconds per attempt (``asyncio.wait_for`` on the async path; on
  the sync path the call runs in its own *daemon* thread that is abandoned when it overruns,
  so a hung call never occupies a shared pool nor delays the exit of the process);
* **deadline** — ``deadline`` seconds per query for everything (attempts, backoff sleeps,
  ``Retry-After`` waits); :meth:`hypothesize` returns or raises within it;
* **retry** — the only retry policy on the LLM path (an LLM whose SDK retries is replaced by
  a copy with ``max_retries=0``; the caller's object is not modified): up
  to ``max_retries`` retries after timeouts, connection errors, HTTP 408/409/425/429 and 5xx,
  sleeping the server's ``Retry-After`` when given, else ``min(max_backoff, backoff *
  2**attempt)``; a wait that would pass the deadline fails at once instead; other errors
  (401/403 auth, 400) fail at once;
* **sanitising** — the raw output is cut to ``max_output_chars`` and stripped of terminal
  escape sequences, control and bidi characters (:func:`~llama_index_car.hypothesizers.base.
  sanitize_text`) before parsing; an output with nothing usable left raises and is never
  cached;
* **errors** — every failure, timeout or unusable output raises
  :class:`~llama_index_car._errors.HypothesisError`, which ``CriterionAwareRetriever``
  catches to fall back to the plain hybrid.

The LLM is called with ``chat``/``achat`` (one user message) when
``llm.metadata.is_chat_model`` and ``complete``/``acomplete`` otherwise.

>>> from llama_index.core.llms import MockLLM
>>> class Canned(MockLLM):
...     def complete(self, prompt, formatted=False, **kw):
...         from llama_index.core.llms import CompletionResponse
...         return CompletionResponse(text="가설: 배수시설 설치기준\\n기준어: 배수시설, 설치기준")
>>> h = LLMCriterionHypothesizer(llm=Canned()).hypothesize("비 온 뒤 물 빠지는 시설은?")
>>> h.text, h.criteria
('배수시설 설치기준', ('배수시설', '설치기준'))
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import email.utils
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from llama_index_car._errors import ConfigurationError, HypothesisError
from llama_index_car.hypothesizers.base import (
    BaseCriterionHypothesizer,
    CriterionHypothesis,
    sanitize_text,
    submit_daemon,
)
from llama_index_car.hypothesizers.prompts import CRITERION_HYPOTHESIS_PROMPT, HYDE_PROMPT

__all__ = [
    "LLMCriterionHypothesizer",
    "HyDEHypothesizer",
    "parse_criterion_output",
    "is_retryable_error",
    "CACHE_FORMAT_VERSION",
    "DEFAULT_LLM_DEADLINE",
]

logger = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1
_RETRY_STATUS = frozenset({408, 409, 425, 429})
_MAX_TERMS = 8
_MAX_HYPOTHESIS_CHARS = 200
#: LLM output beyond this many characters is ignored (a hypothesis is a line or two)
DEFAULT_MAX_OUTPUT_CHARS = 20_000
_HANGUL = re.compile(r"[가-힣]")


#: default seconds per query for the whole hypothesis step (attempts, backoff, Retry-After)
DEFAULT_LLM_DEADLINE = 30.0


class _AttemptTimeout(TimeoutError):
    """One LLM attempt exceeded ``timeout`` seconds."""


# --------------------------------------------------------------------------- errors / retry
def _status_code(exc: BaseException) -> int | None:
    for obj in (exc, getattr(exc, "response", None), exc.__cause__):
        if obj is None:
            continue
        code = getattr(obj, "status_code", None)
        if isinstance(code, int):
            return code
    return None


def is_retryable_error(exc: BaseException) -> bool:
    """True for transient failures: timeouts, connection errors, HTTP 408/409/425/429, 5xx.

    Works across SDKs by duck typing (``status_code`` on the error or its ``response``; class
    names containing ``Timeout``/``Connection``), so any LlamaIndex LLM is covered.

    >>> is_retryable_error(TimeoutError()), is_retryable_error(ValueError("bad prompt"))
    (True, False)
    """
    code = _status_code(exc)
    if code is not None:
        return code in _RETRY_STATUS or code >= 500
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    chain = [exc] + ([exc.__cause__] if exc.__cause__ is not None else [])
    return any(
        "timeout" in type(e).__name__.lower() or "connection" in type(e).__name__.lower()
        for e in chain
    )


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or getattr(exc, "headers", None)
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = headers.get(name)
        except Exception:  # noqa: BLE001 - a header mapping of an unknown SDK
            return None
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except (TypeError, ValueError):
            try:  # an HTTP date
                when = email.utils.parsedate_to_datetime(str(value))
            except (TypeError, ValueError, IndexError):
                continue
            seconds = when.timestamp() - time.time()
        if seconds == seconds:  # not NaN
            return max(0.0, min(seconds, 1e9))
    return None


# --------------------------------------------------------------------------- cache
class _HypothesisCache:
    """Thread-safe LRU of hypothesis payloads, optionally mirrored to ``<dir>/<key>.json``."""

    def __init__(self, maxsize: int, directory: Path | None) -> None:
        self.maxsize = maxsize
        self.directory = directory
        self._lru: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            payload = self._lru.get(key)
            if payload is not None:
                self._lru.move_to_end(key)
                self.hits += 1
                return payload
        payload = self._read_disk(key)
        with self._lock:
            if payload is None:
                self.misses += 1
                return None
            self.hits += 1
            self._store(key, payload)
        return payload

    def put(self, key: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self._store(key, payload)
        if self.directory is not None:
            self._write_disk(key, payload)

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._lru)

    def _store(self, key: str, payload: dict[str, Any]) -> None:
        if self.maxsize <= 0:
            return
        self._lru[key] = payload
        self._lru.move_to_end(key)
        while len(self._lru) > self.maxsize:
            self._lru.popitem(last=False)

    def _read_disk(self, key: str) -> dict[str, Any] | None:
        if self.directory is None:
            return None
        path = self.directory / f"{key}.json"
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            logger.warning("ignoring unreadable hypothesis cache file %s: %s", path, exc)
            return None
        if not isinstance(data, dict) or data.get("format_version") != CACHE_FORMAT_VERSION:
            logger.warning("ignoring hypothesis cache file %s: unknown format_version", path)
            return None
        return data

    def _write_disk(self, key: str, payload: dict[str, Any]) -> None:
        assert self.directory is not None  # noqa: S101 - internal invariant, checked by caller
        data = {"format_version": CACHE_FORMAT_VERSION, **payload}
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, ensure_ascii=False, indent=1)
            os.replace(tmp, self.directory / f"{key}.json")
        except OSError as exc:
            logger.warning("could not write hypothesis cache %s: %s", self.directory, exc)
            Path(tmp).unlink(missing_ok=True)


def _run_in_daemon_thread(fn: Callable[[], str], timeout: float) -> str:
    """``fn()`` in a fresh daemon thread; :class:`_AttemptTimeout` after ``timeout`` seconds.

    The thread is abandoned on timeout (it ends when the client's own timeout fires): being a
    daemon, it never delays interpreter exit, and being private, it never queues later calls
    behind a hung one (a shared pool would).
    """
    future = submit_daemon(contextvars.copy_context().run, fn)
    try:
        return str(future.result(timeout=timeout))
    except concurrent.futures.TimeoutError:
        raise _AttemptTimeout(f"no answer within {timeout:.3g} s") from None


def _model_id(llm: LLM) -> str:
    model = getattr(llm, "model", None) or getattr(llm, "model_name", None)
    if not model:
        try:
            model = llm.metadata.model_name
        except Exception:  # noqa: BLE001 - metadata of third-party LLMs may fail
            model = "unknown"
    return f"{type(llm).__name__}:{model}"


def _without_sdk_retries(llm: LLM, owner: str) -> LLM:
    """``llm`` itself when its SDK does not retry, else a copy whose clients don't.

    LlamaIndex LLMs over the Stainless SDKs (Anthropic, OpenAI …) carry a ``max_retries``
    field and build their clients from it; the copy gets ``max_retries=0`` and its prebuilt
    clients are replaced by ``client.with_options(max_retries=0)`` (the caller's LLM is not
    modified). When that is not possible a warning says the retries will stack.
    """
    retries = getattr(llm, "max_retries", None)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries <= 0:
        return llm
    try:
        clone = llm.model_copy(update={"max_retries": 0})
        private = dict(getattr(clone, "__pydantic_private__", None) or {})
        for name, client in private.items():
            if name in ("_client", "_aclient", "_async_client") and client is not None:
                if not hasattr(client, "with_options"):
                    raise TypeError(f"{type(client).__name__} has no with_options()")
                setattr(clone, name, client.with_options(max_retries=0))
        return clone
    except Exception as exc:  # noqa: BLE001 - any LLM class: fall back to a warning
        logger.warning(
            "%s retries %d time(s) inside its SDK and %s retries again (%s): build it with "
            "max_retries=0 so one retry policy applies and the deadline holds",
            type(llm).__name__, retries, owner, exc,
        )
        return llm


def _default_llm(timeout: float | None, deadline: float | None) -> LLM:
    from llama_index_car.providers import resolve_llm

    bounds = [t for t in (timeout, deadline) if t is not None]
    llm = resolve_llm("anthropic", timeout=min(bounds) if bounds else None, max_retries=0)
    assert llm is not None  # noqa: S101 - resolve_llm("anthropic") never returns None
    return llm


# --------------------------------------------------------------------------- shared engine
class _LLMHypothesizerBase(BaseCriterionHypothesizer, PromptMixin):
    """Cache + timeout + retry around one prompted LLM call; subclasses parse the output."""

    name = "llm"
    uses_llm = True
    prompt_key = "hypothesis_prompt"
    default_prompt: BasePromptTemplate = CRITERION_HYPOTHESIS_PROMPT

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        prompt: BasePromptTemplate | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_size: int = 1024,
        timeout: float | None = 30.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        deadline: float | None = DEFAULT_LLM_DEADLINE,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        for name, value in (("timeout", timeout), ("deadline", deadline)):
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < 1e9):
                raise ConfigurationError(f"{name}={value!r} must be > 0 seconds or None")
        if max_output_chars < 1:
            raise ConfigurationError(f"max_output_chars={max_output_chars!r} must be >= 1")
        if max_retries < 0:
            raise ConfigurationError(f"max_retries={max_retries!r} must be >= 0")
        if backoff < 0 or max_backoff < 0:
            raise ConfigurationError(
                f"backoff={backoff!r} and max_backoff={max_backoff!r} must be >= 0"
            )
        if cache_size < 0:
            raise ConfigurationError(f"cache_size={cache_size!r} must be >= 0 (0 disables)")
        self.llm: LLM = (
            _without_sdk_retries(llm, type(self).__name__)
            if llm is not None
            else _default_llm(timeout, deadline)
        )
        self.timeout = timeout
        self.deadline = deadline
        self.max_output_chars = max_output_chars
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._prompt: BasePromptTemplate = prompt or self.default_prompt
        self._cache = _HypothesisCache(cache_size, Path(cache_dir) if cache_dir else None)
        self.llm_calls = 0

    # -- PromptMixin ---------------------------------------------------------------------
    def _get_prompts(self) -> PromptDictType:
        return {self.prompt_key: self._prompt}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        if self.prompt_key in prompts_dict:
            self._prompt = prompts_dict[self.prompt_key]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # -- public --------------------------------------------------------------------------
    def cache_key(self, query: str) -> str:
        """``sha256`` of ``[llm class:model, prompt template, query]`` (hex)."""
        material = json.dumps(
            [_model_id(self.llm), self._prompt.get_template(), query], ensure_ascii=False
        )
        return hashlib.sha256(material.encode("utf-8")).hexdigest()

    def cache_info(self) -> dict[str, int]:
        """``{"hits", "misses", "size", "llm_calls"}`` counters."""
        return {
            "hits": self._cache.hits,
            "misses": self._cache.misses,
            "size": len(self._cache),
            "llm_calls": self.llm_calls,
        }

    def clear_cache(self) -> None:
        """Empty the in-memory cache (files under ``cache_dir`` are kept)."""
        self._cache.clear()

    def hypothesize(self, query: str) -> CriterionHypothesis:
        """Hypothesis for ``query`` (cache, then the LLM with timeout, retries and deadline)."""
        query, key, cached = self._lookup(query)
        if cached is not None:
            return cached
        end = self._end()
        delay: float | None = None
        for attempt in range(self.max_retries + 1):
            if delay:
                time.sleep(delay)
            try:
                raw = self._call_sync(query, self._budget(query, attempt, end))
            except HypothesisError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below, re-raised typed
                delay = self._after_failure(query, attempt, exc, end)
                continue
            return self._finish(query, key, raw)
        raise AssertionError("unreachable")  # pragma: no cover

    async def ahypothesize(self, query: str) -> CriterionHypothesis:
        """Native async form: ``achat``/``acomplete`` under ``asyncio.wait_for``."""
        query, key, cached = self._lookup(query)
        if cached is not None:
            return cached
        end = self._end()
        delay: float | None = None
        for attempt in range(self.max_retries + 1):
            if delay:
                await asyncio.sleep(delay)
            try:
                raw = await self._call_async(query, self._budget(query, attempt, end))
            except HypothesisError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below, re-raised typed
                delay = self._after_failure(query, attempt, exc, end)
                continue
            return self._finish(query, key, raw)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- internals -----------------------------------------------------------------------
    @abstractmethod
    def _parse(self, raw: str) -> tuple[str, tuple[str, ...]]:
        """Turn the LLM output into ``(text, criteria)``; raise HypothesisError on garbage."""

    def _check_query(self, query: str) -> str:
        if not isinstance(query, str) or not query.strip():
            raise HypothesisError(f"cannot hypothesize for an empty query ({query!r})")
        return query.strip()

    def _lookup(self, query: str) -> tuple[str, str, CriterionHypothesis | None]:
        """``(stripped query, cache key, cached hypothesis or None)`` — the first step of
        :meth:`hypothesize` and :meth:`ahypothesize`."""
        query = self._check_query(query)
        key = self.cache_key(query)
        hit = self._cache.get(key)
        if hit is None:
            return query, key, None
        try:
            cached = self._from_payload(hit, cached=True)
        except (KeyError, TypeError, ValueError):
            return query, key, None  # a malformed cache file is a miss
        return query, key, None if cached.is_empty else cached

    def _end(self) -> float | None:
        """The monotonic time by which this query must be answered (``None``: no deadline)."""
        return None if self.deadline is None else time.monotonic() + self.deadline

    def _budget(self, query: str, attempt: int, end: float | None) -> float | None:
        """Seconds allowed for this attempt: ``timeout`` cut to what the deadline leaves."""
        if end is None:
            return self.timeout
        left = end - time.monotonic()
        if left <= 0:
            raise HypothesisError(
                f"{self.name} hypothesizer for query {_short(query)} passed its deadline of "
                f"{self.deadline:g} s after {attempt} attempt(s)"
            )
        return left if self.timeout is None else min(self.timeout, left)

    def _format(self, query: str) -> str:
        return self._prompt.format(query=query)

    def _use_chat(self) -> bool:
        try:
            return bool(self.llm.metadata.is_chat_model)
        except Exception:  # noqa: BLE001 - metadata of third-party LLMs may fail
            return False

    def _predict(self, query: str) -> str:
        self.llm_calls += 1
        prompt = self._format(query)
        if self._use_chat():
            response = self.llm.chat([ChatMessage(role=MessageRole.USER, content=prompt)])
            return str(response.message.content or "")
        return str(self.llm.complete(prompt).text or "")

    async def _apredict(self, query: str) -> str:
        self.llm_calls += 1
        prompt = self._format(query)
        if self._use_chat():
            response = await self.llm.achat([ChatMessage(role=MessageRole.USER, content=prompt)])
            return str(response.message.content or "")
        return str((await self.llm.acomplete(prompt)).text or "")

    def _call_sync(self, query: str, budget: float | None) -> str:
        if budget is None:
            return self._predict(query)
        return _run_in_daemon_thread(lambda: self._predict(query), budget)

    async def _call_async(self, query: str, budget: float | None) -> str:
        if budget is None:
            return await self._apredict(query)
        try:
            return await asyncio.wait_for(self._apredict(query), timeout=budget)
        except asyncio.TimeoutError:
            raise _AttemptTimeout(f"no answer within {budget:.3g} s") from None

    def _after_failure(
        self, query: str, attempt: int, exc: Exception, end: float | None
    ) -> float:
        """Return the sleep before the next attempt, or raise HypothesisError.

        The server's ``Retry-After`` is obeyed (never retried sooner); when that wait, or the
        backoff, would pass the deadline, the hypothesizer gives up at once instead.
        """
        retryable = is_retryable_error(exc)
        code = _status_code(exc)
        detail = sanitize_text(
            f"{type(exc).__name__}{f' (HTTP {code})' if code else ''}: {exc}", 300
        )
        fail = f"{self.name} hypothesizer failed for query {_short(query)}"
        if not retryable or attempt >= self.max_retries:
            why = f"after {attempt + 1} attempt(s)" if retryable else "(not retryable)"
            hint = " — check the API key" if code in (401, 403) else ""
            raise HypothesisError(f"{fail} {why}: {detail}{hint}") from exc
        server_hint = _retry_after(exc)
        if server_hint is not None:
            delay = server_hint
            limit = (end - time.monotonic()) if end is not None else self.max_backoff
            if delay >= limit:
                bound = (
                    f"the {self.deadline:g} s deadline" if end is not None
                    else f"max_backoff={self.max_backoff:g} s"
                )
                raise HypothesisError(
                    f"{fail} after {attempt + 1} attempt(s): the server asked to retry after "
                    f"{delay:g} s, beyond {bound}: {detail}"
                ) from exc
        else:
            delay = min(self.max_backoff, self.backoff * (2**attempt))
            if end is not None and delay >= end - time.monotonic():
                raise HypothesisError(
                    f"{fail} after {attempt + 1} attempt(s); no time left before the "
                    f"{self.deadline:g} s deadline: {detail}"
                ) from exc
        logger.warning(
            "%s hypothesizer attempt %d/%d failed (%s); retrying in %.2f s",
            self.name, attempt + 1, self.max_retries + 1, detail, delay,
        )
        return delay

    def _finish(self, query: str, key: str, raw: str) -> CriterionHypothesis:
        clean = sanitize_text(str(raw or "")[: self.max_output_chars], keep_newlines=True)
        text, criteria = self._parse(clean)
        result = CriterionHypothesis(text=text, criteria=criteria)  # sanitised, capped
        if result.is_empty or not re.search(r"[가-힣A-Za-z]", result.text):
            raise HypothesisError(
                f"{self.name} hypothesizer: unusable output for query {_short(query)}: "
                f"{clean[:120]!r}"
            )
        text, criteria = result.text, result.criteria
        payload = {
            "text": text,
            "criteria": list(criteria),
            "source": self.name,
            "model": _model_id(self.llm),
            "query": query,
        }
        self._cache.put(key, payload)
        return self._from_payload(payload, cached=False)

    def _from_payload(self, payload: dict[str, Any], *, cached: bool) -> CriterionHypothesis:
        return CriterionHypothesis(
            text=str(payload["text"]),
            criteria=tuple(str(c) for c in payload.get("criteria", [])),
            source=str(payload.get("source", self.name)),
            cached=cached,
            extra={"model": payload.get("model")},
        )


def _short(query: str) -> str:
    return repr(sanitize_text(query, 60))


# --------------------------------------------------------------------------- parsing
_FENCE = re.compile(r"^\s*```[\w-]*\s*$|^\s*```\s*$", re.MULTILINE)
_LINE_PREFIX = re.compile(r"^\s*(?:[-*•·>#]+\s*|\d+[.)]\s*)*(?:\*\*|__)?")
_HYP_LABEL = re.compile(
    r"^(?:가설|기준\s*가설|hypothesis|criterion hypothesis)\s*(?:\*\*|__)?\s*[:：]\s*(.*)$",
    re.IGNORECASE,
)
_TERMS_LABEL = re.compile(
    r"^(?:기준어|기준\s*용어|핵심\s*용어|용어|criteria|criterion terms|terms|keywords)"
    r"\s*(?:\*\*|__)?\s*[:：]\s*(.*)$",
    re.IGNORECASE,
)
_TERM_SPLIT = re.compile(r"[,;、，；/|\n]+")
_TERM_STRIP = " \t\"'`“”‘’«»「」『』〈〉《》[](){}<>*_.。·-•"
_STOPWORDS = frozenset({"및", "등", "또는", "의", "그리고", "관련"})
_JSON_HYP_KEYS = ("hypothesis", "가설", "text", "criterion_hypothesis")
_JSON_TERM_KEYS = ("criteria", "기준어", "terms", "keywords", "criterion_terms")


def _clean_terms(raw: Any) -> tuple[str, ...]:
    items: list[str] = []
    if isinstance(raw, str):
        items = _TERM_SPLIT.split(raw)
    elif isinstance(raw, (list, tuple)):
        for item in raw:
            items.extend(_TERM_SPLIT.split(str(item)))
    out: dict[str, None] = {}
    for item in items:
        term = " ".join(item.strip(_TERM_STRIP).split())
        if term and len(term) <= 30 and term not in _STOPWORDS:
            out.setdefault(term, None)
    return tuple(out)[:_MAX_TERMS]


def _terms_from_text(text: str) -> tuple[str, ...]:
    words = re.split(r"[\s,;/]+", text)
    return _clean_terms([w for w in words if len(_HANGUL.findall(w)) >= 2])


def _from_json(text: str) -> tuple[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    hyp = next((data[k] for k in _JSON_HYP_KEYS if isinstance(data.get(k), str)), "")
    terms = next((data[k] for k in _JSON_TERM_KEYS if k in data), None)
    if not hyp and terms is None:
        return None
    return hyp, terms


def _from_lines(text: str) -> tuple[str, Any] | None:
    hyp: str | None = None
    terms: list[str] | None = None
    collecting = False
    for line in text.splitlines():
        clean = _LINE_PREFIX.sub("", line).strip()
        if not clean:
            collecting = False
            continue
        if hyp is None and (m := _HYP_LABEL.match(clean)):
            hyp, collecting = m.group(1).strip().strip("*_ "), False
        elif terms is None and (m := _TERMS_LABEL.match(clean)):
            rest = m.group(1).strip()
            terms = [rest] if rest else []
            collecting = not rest
        elif collecting and terms is not None and line.lstrip()[:1] in "-*•·" and line.strip():
            terms.append(clean)
    if hyp is None and terms is None:
        return None
    return hyp or "", terms


def parse_criterion_output(raw: str) -> tuple[str, tuple[str, ...]]:
    """Parse an LLM's criterion hypothesis into ``(text, criteria)``, tolerantly.

    Accepts, in this order: a JSON object (``{"가설"|"hypothesis": …, "기준어"|"criteria":
    [...]|"a, b"}``, even inside code fences or chatter); labelled lines ``가설: …`` /
    ``기준어: a, b`` (bullets, bold markers, numbering, chatter lines and terms given as a
    bullet list are tolerated); or a single short unlabelled Korean line. Missing criteria are
    derived from the hypothesis words; a missing hypothesis is the criteria joined.

    Raises:
        HypothesisError: empty output, no Korean or Latin letters, or long unlabelled prose.

    >>> parse_criterion_output("물론입니다.\\n- **가설**: 배수시설 설치기준\\n- 기준어: 배수시설, 설치기준")
    ('배수시설 설치기준', ('배수시설', '설치기준'))
    >>> parse_criterion_output('```json\\n{"hypothesis": "난간 높이 기준", "criteria": ["난간높이"]}\\n```')
    ('난간 높이 기준', ('난간높이',))
    """
    text = _FENCE.sub("", raw or "").strip()
    if not text:
        raise HypothesisError("the LLM returned an empty hypothesis")
    parsed = _from_json(text) or _from_lines(text)
    if parsed is None:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if len(lines) == 1 and len(lines[0]) <= 60 and _HANGUL.search(lines[0]):
            parsed = (lines[0], None)
        else:
            raise HypothesisError(
                f"unusable hypothesis output (expected '가설: …' and '기준어: …' lines): "
                f"{text[:120]!r}"
            )
    hyp_raw, terms_raw = parsed
    hyp = " ".join(str(hyp_raw).split()).strip(_TERM_STRIP)[:_MAX_HYPOTHESIS_CHARS]
    criteria = _clean_terms(terms_raw) if terms_raw is not None else ()
    if not criteria and hyp:
        criteria = _terms_from_text(hyp)
    if not hyp and criteria:
        hyp = " ".join(criteria)
    if not hyp or not re.search(r"[가-힣A-Za-z]", hyp):
        raise HypothesisError(f"unusable hypothesis output: {text[:120]!r}")
    return hyp, criteria


# --------------------------------------------------------------------------- public classes
class LLMCriterionHypothesizer(_LLMHypothesizerBase):
    """The paper's criterion hypothesis (§5.8) from any LlamaIndex LLM.

    The prompt (:data:`~llama_index_car.hypothesizers.prompts.CRITERION_HYPOTHESIS_PROMPT`,
    key ``"hypothesis_prompt"`` in ``get_prompts()``) asks for a short hypothesis in the formal
    criterion vocabulary of a Korean standard, with few-shot examples from unrelated domains;
    the output is parsed by :func:`parse_criterion_output`.

    Args:
        llm: any LlamaIndex ``LLM``. ``None`` → ``Anthropic(model="claude-sonnet-4-6")``
            (needs ``ANTHROPIC_API_KEY`` and the ``anthropic`` extra). An LLM whose SDK
            retries (``max_retries > 0``) is used through a copy with those retries off, so
            this class's retry policy is the only one.
        prompt: replaces the default template (one variable, ``{query}``).
        cache_dir: optional folder of JSON cache files (one per query).
        cache_size: in-memory LRU entries (0 disables the memory cache); default 1024.
        timeout: seconds per attempt (default 30; ``None`` = no limit).
        max_retries: retries after transient errors (default 2). The only retries on the
            LLM path: give an LLM whose SDK does not retry (``max_retries=0``).
        backoff / max_backoff: retry sleep ``min(max_backoff, backoff * 2**attempt)``
            (defaults 0.5 s / 8 s) when the server sends no ``Retry-After``.
        deadline: seconds per query for all attempts and waits together (default
            :data:`DEFAULT_LLM_DEADLINE` = 30; ``None`` = bounded only by ``timeout`` and
            ``max_retries``). Keep it <= ``CriterionAwareRetriever.hypothesis_timeout``.
        max_output_chars: LLM output beyond this is ignored (default 20,000).

    >>> from llama_index.core.llms import MockLLM
    >>> hyp = LLMCriterionHypothesizer(llm=MockLLM())
    >>> list(hyp.get_prompts())
    ['hypothesis_prompt']
    """

    name = "llm"
    default_prompt = CRITERION_HYPOTHESIS_PROMPT

    def _parse(self, raw: str) -> tuple[str, tuple[str, ...]]:
        return parse_criterion_output(raw)


def _kiwi_noun_terms(text: str) -> list[str]:
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    return list(KiwiTokenizer().noun_compounds(text))


class HyDEHypothesizer(_LLMHypothesizerBase):
    """Generic HyDE baseline (Gao et al., 2023; the paper's ablation, Table 10).

    The LLM writes a hypothetical passage answering the query
    (:data:`~llama_index_car.hypothesizers.prompts.HYDE_PROMPT`); ``text`` is that passage and
    ``criteria`` its noun terms (Kiwi noun compounds by default, first ``max_terms`` unique;
    may be empty). Same cache / timeout / retry engine as :class:`LLMCriterionHypothesizer`.

    >>> from llama_index.core.llms import MockLLM
    >>> HyDEHypothesizer(llm=MockLLM(), term_extractor=str.split).name
    'hyde'
    """

    name = "hyde"
    default_prompt = HYDE_PROMPT

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        term_extractor: Callable[[str], list[str]] | None = None,
        max_terms: int = 12,
        max_chars: int = 2000,
        **kwargs: Any,
    ) -> None:
        super().__init__(llm, **kwargs)
        self.term_extractor = term_extractor or _kiwi_noun_terms
        self.max_terms = max_terms
        self.max_chars = max_chars

    def _parse(self, raw: str) -> tuple[str, tuple[str, ...]]:
        text = _FENCE.sub("", raw or "").strip()
        text = re.sub(r"^\s*(?:단락|passage)\s*[:：]\s*", "", text, flags=re.IGNORECASE)
        passage = " ".join(text.split())[: self.max_chars]
        if not re.search(r"[가-힣A-Za-z]", passage):
            raise HypothesisError(f"the LLM returned no usable HyDE passage: {raw[:120]!r}")
        terms: dict[str, None] = {}
        for term in self.term_extractor(passage):
            term = term.strip()
            if term:
                terms.setdefault(term, None)
        return passage, tuple(terms)[: self.max_terms]
