"""Loader of the optional numba BM25 kernels (:mod:`llama_index_car._bm25_numba`).

numba is optional (``pip install 'llama-index-car[fast]'``); without it
:mod:`llama_index_car.bm25` uses a numpy path with bit-identical scores. Nothing is imported
or compiled at import: :func:`load` imports numba on first use, and the kernels compile on
their first call (or are read from numba's on-disk cache, ``cache=True``).

>>> kernels = load()
>>> kernels is None or sorted(kernels)
['prepare', 'scores', 'top_k']
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["load"]

_LOCK = threading.Lock()
_KERNELS: dict[str, Any] = {}


def load() -> dict[str, Any] | None:
    """``{"prepare": ..., "top_k": ..., "scores": ...}`` compiled kernels, or ``None``
    without numba."""
    with _LOCK:
        if "k" not in _KERNELS:
            try:
                from llama_index_car import _bm25_numba as nb
            except ImportError:
                _KERNELS["k"] = None
            else:
                _KERNELS["k"] = {"prepare": nb.prepare, "top_k": nb.top_k, "scores": nb.scores}
        return _KERNELS["k"]  # type: ignore[no-any-return]
