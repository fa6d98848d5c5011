"""The index that owns the state retrievers read: :class:`CriterionAwareIndex`.

Names are resolved lazily (PEP 562), so importing a private module of this package (e.g. the
file names of :mod:`llama_index_car.indices._layout`) does not load LlamaIndex.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CriterionAwareIndex", "IndexSnapshot"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("llama_index_car.indices.criterion_aware"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
