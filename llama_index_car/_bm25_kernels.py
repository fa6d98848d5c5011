"""Query-time scoring of a BM25 index: backend choice, the optional numba kernels and their state.

numba is optional (``pip install 'llama-index-car[fast]'``); without it a numpy path gives
bit-identical scores. Nothing is imported or compiled at import: :func:`load` imports numba
on first use (:mod:`llama_index_car._bm25_numba`), and the kernels compile on their first
call (or are read from numba's on-disk cache, ``cache=True``).

:class:`Scorer` owns what one index needs at query time: the per-document length norm, the
kernels, the columns they have prepared (checked and quantized once each, under a lock), a
pool of accumulators (one per concurrent query), and, for the numpy path, which columns'
postings are known good. Postings are checked once: all of them when the index was built or
fully verified at load, else each column on its first use -- never again per query. After
that check the numpy path relies on numpy's own bounds checks (an id overwritten in a mapped
file after loading is an :class:`~llama_index_car._errors.IndexPersistError`, never an
out-of-bounds access), the kernels on theirs (one compare per posting read).

>>> kernels = load()
>>> kernels is None or sorted(kernels)
['prepare', 'scores', 'top_k']
"""

from __future__ import annotations

import threading
from typing import Any, Literal

import numpy as np

from llama_index_car._bm25_arrays import Postings, check_postings
from llama_index_car._errors import ConfigurationError, IndexPersistError

#: ``backend="auto"`` uses the numba kernels from this many documents on (below, the numpy
#: path is as fast and a process neither imports numba nor compiles anything).
AUTO_NUMBA_MIN_DOCS = 50_000
Backend = Literal["auto", "numba", "numpy"]

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


def check_backend(backend: object) -> None:
    """Refuse a backend other than ``"auto"``, ``"numba"`` or ``"numpy"``."""
    if backend not in ("auto", "numba", "numpy"):
        raise ConfigurationError(f"backend must be 'auto', 'numba' or 'numpy', got {backend!r}")


def corrupt() -> IndexPersistError:
    """The error of postings found inconsistent at query time."""
    return IndexPersistError(
        "posting lists are inconsistent (document ids out of range or not increasing, or "
        "zero counts); the index files (indices.npy, tf.npy) were altered after saving "
        "or while loaded: save or build the index again"
    )


class Scorer:
    """Scores of one query over ``postings`` (see the module docstring).

    Args:
        postings: the index arrays.
        norm: ``k1 * (1 - b + b * |D| / avgdl)`` per document (rank_bm25's expression).
        k1p1: ``k1 + 1``.
        backend: ``"auto"``, ``"numba"`` or ``"numpy"``.
        checked: every posting is known good (built, or verified in full at load).
    """

    def __init__(
        self, postings: Postings, norm: np.ndarray, k1p1: float, backend: str, checked: bool
    ) -> None:
        self.postings, self.norm, self.k1p1, self.backend = postings, norm, k1p1, backend
        self.kernels: dict[str, Any] | None = None
        self.kernels_loaded = False
        v = postings.n_terms
        self.checked = np.full(v, checked, dtype=bool)
        # columns the compiled kernels have prepared (ids checked increasing and < N, largest
        # impact in colmax, quantized impact bytes in quant): see _bm25_numba.prepare; the
        # arrays are allocated on the kernels' first use (quant's pages as columns are used)
        self.valid = np.zeros(v, dtype=np.uint8)
        self.prepared: tuple[np.ndarray, np.ndarray] | None = None
        self.prepare_lock = threading.Lock()
        self.pool: list[tuple[np.ndarray, np.ndarray]] = []
        self.pool_lock = threading.Lock()

    def kernel(self) -> dict[str, Any] | None:
        """The numba kernels when this index uses them, else ``None`` (the numpy path)."""
        if self.backend == "numpy" or (
            self.backend == "auto" and self.postings.n_docs < AUTO_NUMBA_MIN_DOCS
        ):
            return None
        if not self.kernels_loaded:
            self.kernels = load()
            self.kernels_loaded = True
            if self.kernels is None and self.backend == "numba":
                raise ConfigurationError(
                    "backend='numba' needs numba; run: pip install 'llama-index-car[fast]'"
                )
        return self.kernels

    def scores(self, cols: np.ndarray, weights: np.ndarray, cnts: np.ndarray) -> np.ndarray:
        """Every document's score for the query columns ``cols`` (float64, length N)."""
        p = self.postings
        out = np.zeros(p.n_docs, dtype=np.float64)
        kern = self.kernel()
        if kern is not None:
            self._prepare(kern, cols)
            if not kern["scores"](
                p.indptr, p.indices, p.tf, self.norm, cols, weights, cnts, self.k1p1, out
            ):
                raise corrupt()
            return out
        if not self.checked[cols].all():
            self._check(cols)
        k1p1, norm, indptr = self.k1p1, self.norm, p.indptr
        try:
            for j, w, cnt in zip(cols.tolist(), weights.tolist(), cnts.tolist(), strict=True):
                lo, hi = int(indptr[j]), int(indptr[j + 1])
                docs = np.asarray(p.indices[lo:hi], dtype=np.int64)
                t = np.asarray(p.tf[lo:hi], dtype=np.float64)
                out[docs] += w * (t * k1p1 / (t + norm[docs])) * cnt
        except IndexError as exc:  # an id overwritten in a mapped file after its check
            raise corrupt() from exc
        return out

    def _check(self, cols: np.ndarray) -> None:
        """Check the postings of the columns of ``cols`` not checked yet (once each)."""
        p = self.postings
        for j in cols[~self.checked[cols]].tolist():
            lo, hi = int(p.indptr[j]), int(p.indptr[j + 1])
            if check_postings(p.indices[lo:hi], p.tf[lo:hi], p.n_docs) is not None:
                raise corrupt()
            self.checked[j] = True

    def _prepare(self, kern: dict[str, Any], cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(colmax, quant) with every column of ``cols`` checked and quantized (once per
        column, under a lock; raises on corrupt postings)."""
        prepared = self.prepared
        if prepared is not None and self.valid[cols].all():
            return prepared
        p = self.postings
        with self.prepare_lock:
            if self.prepared is None:
                # np.zeros: pages are mapped lazily, so only used columns cost memory
                self.prepared = (
                    np.zeros(self.valid.shape[0], dtype=np.float64),
                    np.zeros(int(p.indices.shape[0]), dtype=np.uint8),
                )
            colmax, quant = self.prepared
            ok = kern["prepare"](
                p.indptr, p.indices, p.tf, self.norm, self.k1p1, cols, self.valid, colmax, quant
            )
            if not ok:
                raise corrupt()
            return self.prepared

    def _buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """Reusable (float32 accumulator, int32 document ids) of length N; one pair per
        concurrent query (a pool). The kernel leaves the accumulator zeroed."""
        with self.pool_lock:
            if self.pool:
                return self.pool.pop()
        n = self.postings.n_docs
        return np.zeros(n, np.float32), np.empty(n, np.int32)

    def top_k(
        self, kern: dict[str, Any], cols: np.ndarray, weights: np.ndarray, cnts: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The compiled exact top ``k`` (``1 <= k <= N``), or ``None`` when the kernel asks
        for the dense path (fewer than ``k`` matches, or a negative idf)."""
        p = self.postings
        colmax, quant = self._prepare(kern, cols)
        acc, ids = self._buffers()
        out_s = np.empty(k, dtype=np.float64)
        out_i = np.empty(k, dtype=np.int64)
        status = -3
        try:
            size, status = kern["top_k"](
                p.indptr, p.indices, p.tf, cols, weights, cnts, self.k1p1, k, self.norm,
                colmax, quant, acc, ids, out_s, out_i,
            )
        finally:
            if status != -3:  # -3 (or an exception) leaves acc dirty: drop the pair
                with self.pool_lock:
                    self.pool.append((acc, ids))
        if status == -3:  # a posting read out of range: the mapped files changed
            raise corrupt()
        if status == -2:
            return None
        order = np.lexsort((out_i, -out_s))
        return out_i[order], out_s[order]
