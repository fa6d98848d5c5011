"""Bounded LLM clients: calls that end by a deadline and response bodies read with a byte cap.

``BoundedAnthropic`` needs the ``anthropic`` extra and is resolved lazily (PEP 562);
:mod:`~llama_index_car.llms.deadline` needs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE, llm_deadline

_LAZY = {
    "BoundedAnthropic": "llama_index_car.llms.anthropic",
    "AnthropicDeadlineError": "llama_index_car.llms.anthropic",
    "AnthropicResponseTooLargeError": "llama_index_car.llms.anthropic",
}

__all__ = ["DEFAULT_LLM_DEADLINE", "llm_deadline", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llama_index_car.llms' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
