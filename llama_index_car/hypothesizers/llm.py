"""LLM hypothesizers: the paper's criterion hypothesis (§5.8) and the generic HyDE baseline.

Both run any LlamaIndex ``LLM`` through one shared engine (:class:`_LLMHypothesizerBase`) that
keeps the prompt and the parse, and delegates the rest:

* **cache** — an in-memory LRU (``cache_size`` entries) plus, with ``cache_dir``, one JSON file
  per entry; the key is ``sha256(json([llm class:model, prompt template, query]))``, so a new
  model or an updated prompt never reuses stale hypotheses;
* **one call** — one ``chat``/``complete`` (``achat``/``acomplete``) per query in the caller's
  thread or task. Timeouts, retries, backoff and ``Retry-After`` belong to the LLM client
  (the default, :class:`~llama_index_car.llms.BoundedAnthropic`, keeps the SDK's
  ``max_retries`` and ends every HTTP attempt by the caller's
  :func:`~llama_index_car.llms.deadline.llm_deadline`, which ``CriterionAwareRetriever`` sets
  from its ``hypothesis_timeout``);
* **sanitising** — the raw output is cut to ``max_output_chars`` and stripped of terminal
  escape sequences, control and bidi characters (:func:`~llama_index_car.hypothesizers.base.
  sanitize_text`) before parsing; an output with nothing usable left raises and is never
  cached;
* **errors** — every failure of the LLM or unusable output raises
  :class:`~llama_index_car._errors.HypothesisError` (the LLM's exception as its cause), which
  ``CriterionAwareRetriever`` catches to fall back to the plain hybrid.

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

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
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
from llama_index_car._files import read_owned_file
from llama_index_car.hypothesizers.base import (
    BaseCriterionHypothesizer,
    CriterionHypothesis,
    sanitize_text,
)
from llama_index_car.hypothesizers.prompts import CRITERION_HYPOTHESIS_PROMPT, HYDE_PROMPT

logger = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1
#: a cache file larger than this is refused unread (a payload is a few hundred bytes: the
#: hypothesis is at most 4,000 characters and 32 criteria of 64)
MAX_CACHE_FILE_BYTES = 64 * 1024
_MAX_TERMS = 8
_MAX_HYPOTHESIS_CHARS = 200
#: LLM output beyond this many characters is ignored (a hypothesis is a line or two)
DEFAULT_MAX_OUTPUT_CHARS = 20_000
_HANGUL = re.compile(r"[가-힣]")



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
        """The payload cached for ``key`` on disk, or ``None`` (a miss).

        The folder is untrusted input, as ssh treats ``~/.ssh``: the file is read by
        :func:`~llama_index_car._files.read_owned_file` (a regular file of yours that no one
        else can write, never through a symlink or a FIFO, at most
        :data:`MAX_CACHE_FILE_BYTES`) and must hold this version's payload (``text`` a string,
        ``criteria`` a list of strings). Anything else is one warning naming the file and a
        miss: the hypothesis is asked for again and the file overwritten.
        """
        if self.directory is None:
            return None
        path = self.directory / f"{key}.json"
        try:
            raw = read_owned_file(path, MAX_CACHE_FILE_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:  # UntrustedFileError included
            logger.warning("ignoring hypothesis cache file %s: %s", path, exc)
            return None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            logger.warning("ignoring unreadable hypothesis cache file %s: %s", path, exc)
            return None
        problem = _payload_problem(data)
        if problem:
            logger.warning("ignoring hypothesis cache file %s: %s", path, problem)
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


def _payload_problem(data: Any) -> str | None:
    """Why ``data`` (a cache file's JSON) is not a hypothesis payload of this version, or
    ``None``.

    >>> _payload_problem({"format_version": CACHE_FORMAT_VERSION, "text": "t", "criteria": []})
    >>> _payload_problem({"format_version": CACHE_FORMAT_VERSION, "text": 1})
    'text is not a string'
    """
    if not isinstance(data, dict) or data.get("format_version") != CACHE_FORMAT_VERSION:
        return "unknown format_version"
    if not isinstance(data.get("text"), str):
        return "text is not a string"
    criteria = data.get("criteria", [])
    if not isinstance(criteria, list) or not all(isinstance(c, str) for c in criteria):
        return "criteria is not a list of strings"
    return None


def _model_id(llm: LLM) -> str:
    model = getattr(llm, "model", None) or getattr(llm, "model_name", None)
    if not model:
        try:
            model = llm.metadata.model_name
        except Exception:  # noqa: BLE001 - metadata of third-party LLMs may fail
            model = "unknown"
    return f"{type(llm).__name__}:{model}"


def _default_llm() -> LLM:
    from llama_index_car.providers import resolve_llm

    llm = resolve_llm("anthropic")
    if llm is None:  # pragma: no cover - resolve_llm("anthropic") never returns None
        raise ConfigurationError("resolve_llm('anthropic') returned no LLM")
    return llm


def _failure(name: str, query: str, exc: Exception) -> HypothesisError:
    """The typed error for an LLM failure (status and a hint for 401/403 in the message)."""
    code = getattr(exc, "status_code", None)
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    detail = sanitize_text(f"{type(exc).__name__}{f' (HTTP {code})' if code else ''}: {exc}", 300)
    cause = exc.__cause__
    if cause is not None and not isinstance(cause, HypothesisError):
        detail += sanitize_text(f" [{type(cause).__name__}: {cause}]", 300)
    hint = " — check the API key" if code in (401, 403) else ""
    return HypothesisError(f"{name} hypothesizer failed for query {_short(query)}: {detail}{hint}")


# --------------------------------------------------------------------------- shared engine
class _LLMHypothesizerBase(BaseCriterionHypothesizer, PromptMixin):
    """Cache + sanitising around one prompted LLM call; subclasses parse the output."""

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
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or (
            max_output_chars < 1
        ):
            raise ConfigurationError(f"max_output_chars={max_output_chars!r} must be >= 1")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ConfigurationError(f"cache_size={cache_size!r} must be >= 0 (0 disables)")
        self.llm: LLM = llm if llm is not None else _default_llm()
        self.max_output_chars = max_output_chars
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
        """Hypothesis for ``query``: the cache, else one LLM call in this thread."""
        query, key, cached = self._lookup(query)
        if cached is not None:
            return cached
        try:
            raw = self._predict(query)
        except HypothesisError:
            raise
        except Exception as exc:  # noqa: BLE001 - any LLM client's failure, re-raised typed
            raise _failure(self.name, query, exc) from exc
        return self._finish(query, key, raw)

    async def ahypothesize(self, query: str) -> CriterionHypothesis:
        """Native async form: the cache, else one ``achat``/``acomplete`` in this task."""
        query, key, cached = self._lookup(query)
        if cached is not None:
            return cached
        try:
            raw = await self._apredict(query)
        except HypothesisError:
            raise
        except Exception as exc:  # noqa: BLE001 - any LLM client's failure, re-raised typed
            raise _failure(self.name, query, exc) from exc
        return self._finish(query, key, raw)

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
        llm: any LlamaIndex ``LLM``. ``None`` → ``resolve_llm("anthropic")``, a
            :class:`~llama_index_car.llms.BoundedAnthropic` on ``claude-sonnet-4-6`` (needs
            ``ANTHROPIC_API_KEY`` and the ``anthropic`` extra). Its own ``timeout`` and
            ``max_retries`` apply; this class never retries.
        prompt: replaces the default template (one variable, ``{query}``).
        cache_dir: optional folder of JSON cache files (one per query).
        cache_size: in-memory LRU entries (0 disables the memory cache); default 1024.
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
    may be empty). Same cache and call engine as :class:`LLMCriterionHypothesizer`.

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
