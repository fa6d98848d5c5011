"""One deadline for the LLM calls of a query, carried by a ``ContextVar``.

``with llm_deadline(30): ...`` makes every HTTP attempt a bounded LLM client
(:class:`~llama_index_car.llms.BoundedAnthropic`) starts inside the block, in this thread or in a
thread or task that copied the context (``contextvars.copy_context()``, ``asyncio`` tasks), end
by ``time.monotonic() + 30``: connect, send and every socket read get at most the time left, so
a slow-drip server cannot stretch a call past it and no thread or socket outlives it. Nested
blocks keep the earlier end. ``HypothesisCriterionRetriever`` opens one around each hypothesis with
its ``hypothesis_timeout``.

>>> current_deadline() is None
True
>>> with llm_deadline(30.0) as end:
...     with llm_deadline(3600.0) as inner:
...         inner == end
True
>>> with llm_deadline(None) as end:
...     end is None
True
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from llama_index_car._errors import ConfigurationError

#: default seconds for the LLM hypothesis of one query
#: (``HypothesisCriterionRetriever.hypothesis_timeout``,
#: ``llama-car query --llm-timeout``)
DEFAULT_LLM_DEADLINE = 30.0

_DEADLINE: ContextVar[float | None] = ContextVar("llama_index_car_llm_deadline", default=None)


def current_deadline() -> float | None:
    """The ``time.monotonic()`` value by which LLM calls started here must end (``None``: none)."""
    return _DEADLINE.get()


@contextmanager
def llm_deadline(seconds: float | None) -> Iterator[float | None]:
    """Bound the LLM calls started in the block to ``seconds`` from now (``None``: no new bound).

    Yields the effective end (monotonic seconds): the earlier of this one and an enclosing one.

    Raises:
        ConfigurationError: ``seconds`` is not a finite number > 0 (or ``None``).
    """
    outer = _DEADLINE.get()
    if seconds is None:
        yield outer
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
        math.isfinite(seconds) and seconds > 0
    ):
        raise ConfigurationError(f"LLM deadline {seconds!r} must be a finite number of seconds > 0")
    end = time.monotonic() + float(seconds)
    if outer is not None:
        end = min(end, outer)
    token = _DEADLINE.set(end)
    try:
        yield end
    finally:
        _DEADLINE.reset(token)
