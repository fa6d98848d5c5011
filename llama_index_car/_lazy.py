"""Lazy facades (PEP 562): a package's ``__init__`` names its public objects and the modules
that define them, and each is imported on first use, so importing the package does no work.

>>> getattr_, dir_ = lazy_exports("pkg", {"dumps": "json"}, {})
>>> getattr_("dumps").__name__
'dumps'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of a facade whose public ``name`` lives in the module
    ``exports[name]``; a resolved name is kept in ``namespace`` (the package's globals), so it
    is imported once. An unknown name is an ``AttributeError`` naming the package."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports})

    return getattr_, dir_
