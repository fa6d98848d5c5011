"""The criterion-hypothesizer protocol shared by every hypothesizer.

A hypothesizer guesses, from the query alone, the criterion a Korean standard would use to
answer it (the paper's §5.8): ``hypothesize("온도에 따라 늘었다 줄었다 하는 이음부")`` →
``CriterionHypothesis(text="신축이음장치 설치기준", criteria=("신축이음장치", "설치기준"))``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import re
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


def submit_daemon(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """Run ``fn(*args)`` in a new **daemon** thread; return its ``Future``.

    For calls that may hang (an LLM request): unlike a ``ThreadPoolExecutor`` worker, the
    thread is never joined at interpreter exit and occupies no shared pool, so a caller that
    stops waiting (``future.result(timeout=...)``) is really free — later calls do not queue
    behind it and the process exits on time.
    """
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            future.set_exception(exc)
        else:
            future.set_result(result)

    threading.Thread(target=work, name="car-hypothesis", daemon=True).start()
    return future

#: hard caps applied to every :class:`CriterionHypothesis` (whatever produced it)
MAX_HYPOTHESIS_TEXT_CHARS = 4000
MAX_CRITERIA = 32
MAX_CRITERION_CHARS = 64

# Terminal control sequences, removed whole (removing only ESC would leave "[31m" behind):
# OSC / DCS / SOS / PM / APC strings up to BEL or ST, CSI sequences, two-character ESC
# sequences, and their 8-bit C1 forms (U+009B CSI, U+009D OSC, U+0090 DCS …).
_ESCAPE_SEQUENCES = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?"
)


def sanitize_text(text: str, max_chars: int | None = None, *, keep_newlines: bool = False) -> str:
    """``text`` made safe to print, cache and embed.

    Removes terminal escape sequences whole (CSI/OSC/DCS, 7- and 8-bit forms), then every
    control character (Unicode ``Cc``; tab is kept, ``\\n`` too with ``keep_newlines``,
    other whitespace controls such as ``\\r`` become spaces), format character (``Cf``: the bidi overrides and
    isolates U+202A–U+202E / U+2066–U+2069, zero-width spaces and joiners, BOM, soft hyphen)
    and lone surrogate (``Cs``); U+2028/U+2029 become newlines. The result is cut to
    ``max_chars`` characters (no cut when ``None``).

    >>> sanitize_text("\\x1b[31m배수\\x1b[0m \\u202e시설\\x07")
    '배수 시설'
    """
    text = _ESCAPE_SEQUENCES.sub("", str(text))
    out: list[str] = []
    for ch in text:
        if ch == "\n" or ch in "\u2028\u2029":
            out.append("\n" if keep_newlines else " ")
            continue
        category = unicodedata.category(ch)
        if ch == "\t":
            out.append(ch)
        elif category == "Cc":
            if ch in "\r\x0b\x0c\x1c\x1d\x1e\x1f\x85":
                out.append(" ")
        elif category not in ("Cf", "Cs"):
            out.append(ch)
    clean = "".join(out)
    return clean if max_chars is None else clean[:max_chars]


_ESCAPE_START = re.compile("[\x1b\x90\x98\x9b\x9d\x9e\x9f]")


def trailing_escape_start(text: str, window: int = 256) -> int:
    """Where a terminal escape sequence that more text could still extend starts at the end
    of ``text`` (else ``len(text)``): the last escape start (ESC or an 8-bit C1 introducer)
    among the final ``window`` characters, when its sequence runs to the end of ``text``
    (complete or not: holding a complete one back costs nothing). A stream sanitised piece
    by piece holds ``text[i:]`` back until the next piece, so :func:`sanitize_text` removes
    the sequence whole.

    >>> trailing_escape_start("기준\x1b[3"), trailing_escape_start("기준\x1b[3m 다")
    (2, 8)
    """
    last = -1
    for m in _ESCAPE_START.finditer(text, max(len(text) - window, 0)):
        last = m.start()
    if last < 0:
        return len(text)
    whole = _ESCAPE_SEQUENCES.match(text, last)
    return last if whole is None or whole.end() == len(text) else len(text)


def _one_line(text: str, max_chars: int) -> str:
    return " ".join(sanitize_text(text).split())[:max_chars].strip()


@dataclass(frozen=True)
class CriterionHypothesis:
    """A hypothesis about the criterion a query seeks.

    Every hypothesis is sanitised on construction, whatever produced it (an LLM, a cache
    file, a user's hypothesizer): :func:`sanitize_text` on ``text`` and on each criterion,
    whitespace collapsed to single spaces, ``text`` cut to :data:`MAX_HYPOTHESIS_TEXT_CHARS`
    (4000), at most :data:`MAX_CRITERIA` (32) criteria of :data:`MAX_CRITERION_CHARS` (64)
    characters, empty and repeated criteria dropped. A hypothesis that is empty afterwards
    (``is_empty``) is refused by ``CriterionAwareRetriever`` (fallback) and never cached.

    Attributes:
        text: short hypothesis in the formal vocabulary of a standard; appended to the query
            for the dense channel (``query + "\\n" + text``).
        criteria: the criterion terms; appended to the query for the lexical channel.
        source: which hypothesizer produced it (for ``--explain``).
        cached: whether it came from a cache.

    >>> h = CriterionHypothesis(text="배수시설 설치기준", criteria=("설치기준",))
    >>> h.expansion_terms()
    '설치기준'
    """

    text: str
    criteria: tuple[str, ...] = ()
    source: str = ""
    cached: bool = False
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        text = _one_line(self.text, MAX_HYPOTHESIS_TEXT_CHARS)
        criteria: dict[str, None] = {}
        for term in self.criteria:
            clean = _one_line(term, MAX_CRITERION_CHARS)
            if clean:
                criteria.setdefault(clean, None)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "criteria", tuple(criteria)[:MAX_CRITERIA])
        object.__setattr__(self, "source", _one_line(self.source, 64))

    def expansion_terms(self) -> str:
        """The criterion terms joined by spaces (what the lexical channel appends)."""
        return " ".join(self.criteria)

    @property
    def is_empty(self) -> bool:
        """True when there is neither hypothesis text nor a criterion term."""
        return not self.text.strip() and not self.criteria


class BaseCriterionHypothesizer(ABC):
    """Protocol: ``hypothesize(query) -> CriterionHypothesis`` and its async twin.

    Subclasses implement :meth:`hypothesize`; :meth:`ahypothesize` defaults to running it in a
    worker thread so the event loop is never blocked. Subclasses with a native async path
    (an LLM client) override :meth:`ahypothesize`.

    >>> class Fixed(BaseCriterionHypothesizer):
    ...     def hypothesize(self, query: str) -> CriterionHypothesis:
    ...         return CriterionHypothesis(text=query + " 설치기준", criteria=("설치기준",))
    >>> Fixed().hypothesize("측구").text
    '측구 설치기준'
    >>> import asyncio
    >>> asyncio.run(Fixed().ahypothesize("측구")).criteria
    ('설치기준',)
    """

    name: str = "base"
    #: whether this hypothesizer calls an LLM (``source`` of the instrumentation event)
    uses_llm: bool = False

    @abstractmethod
    def hypothesize(self, query: str) -> CriterionHypothesis:
        """Return the criterion hypothesis for ``query``."""

    async def ahypothesize(self, query: str) -> CriterionHypothesis:
        """Async form of :meth:`hypothesize`: by default a daemon worker thread
        (:func:`submit_daemon`), not the event loop's default executor — a hypothesize() that
        hangs then neither fills that shared pool nor delays ``asyncio.run``'s exit."""
        future = submit_daemon(contextvars.copy_context().run, self.hypothesize, query)
        return await asyncio.wrap_future(future)
