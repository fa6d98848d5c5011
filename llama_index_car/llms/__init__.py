"""Bounded LLM clients: calls that end by a deadline and response bodies read with a byte cap.

``BoundedAnthropic`` needs the ``anthropic`` extra and is resolved lazily (PEP 562);
:mod:`~llama_index_car.llms.deadline` needs nothing.
"""

from __future__ import annotations

from llama_index_car._lazy import lazy_exports
from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE, llm_deadline

_LAZY = {
    "BoundedAnthropic": "llama_index_car.llms.anthropic",
    "AnthropicDeadlineError": "llama_index_car.llms.anthropic",
    "AnthropicResponseTooLargeError": "llama_index_car.llms.anthropic",
}

__all__ = ["DEFAULT_LLM_DEADLINE", "llm_deadline", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
