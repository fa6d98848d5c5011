"""Term-at-a-time BM25Okapi query kernels over a CSC posting matrix (numba, optional).

Private to :mod:`llama_index_car.bm25`. numba is optional (``pip install
'llama-index-car[fast]'``); without it :mod:`llama_index_car.bm25` uses a numpy path whose
scores are bit-identical (the same IEEE operations in the same order, per posting:
``idf * (tf * (k1 + 1) / (tf + norm[d])) * count``, summed over query terms in first-occurrence
order). Nothing is compiled at import: :func:`load` compiles (or reads numba's on-disk cache)
on first use.

The top-k kernel accumulates into one reusable length-N float buffer, records the documents
it touches, keeps a size-k heap of the best (score desc, index asc) positive scores among them,
then resets only the touched entries, so a query costs O(postings of its terms + touched * log k)
and allocates nothing of size N. Postings are checked while read (document ids strictly
increasing within a column and < N); a violation returns -1 instead of reading out of bounds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["load"]

_LOCK = threading.Lock()
_KERNELS: dict[str, Any] = {}


def _define(njit: Callable[..., Any]) -> dict[str, Any]:  # pragma: no cover - jit-compiled
    @njit(cache=True, nogil=True)
    def _better(sa: float, ia: int, sb: float, ib: int) -> bool:
        return sa > sb or (sa == sb and ia < ib)

    @njit(cache=True, nogil=True)
    def _sift_down(hs: Any, hi: Any, size: int, pos: int) -> None:
        # min-heap on "worse first": the root is the worst of the kept candidates
        while True:
            left = 2 * pos + 1
            if left >= size:
                return
            worst = left
            right = left + 1
            if right < size and _better(hs[worst], hi[worst], hs[right], hi[right]):
                worst = right
            if _better(hs[pos], hi[pos], hs[worst], hi[worst]):
                hs[pos], hs[worst] = hs[worst], hs[pos]
                hi[pos], hi[worst] = hi[worst], hi[pos]
                pos = worst
            else:
                return

    @njit(cache=True, nogil=True)
    def _sift_up(hs: Any, hi: Any, pos: int) -> None:
        while pos > 0:
            parent = (pos - 1) // 2
            if _better(hs[parent], hi[parent], hs[pos], hi[pos]):
                hs[parent], hs[pos] = hs[pos], hs[parent]
                hi[parent], hi[pos] = hi[pos], hi[parent]
                pos = parent
            else:
                return

    @njit(cache=True, nogil=True)
    def top_k(
        indptr: Any,
        indices: Any,
        tf: Any,
        norm: Any,
        cols: Any,
        weights: Any,
        cnts: Any,
        k1p1: float,
        k: int,
        buf: Any,
        flag: Any,
        touched: Any,
        out_s: Any,
        out_i: Any,
    ) -> tuple[int, int]:
        """Returns (kept, positives): the heap size and the number of positive touched docs."""
        n = norm.shape[0]
        nt = 0
        bad = False
        for c in range(cols.shape[0]):
            j = cols[c]
            w = weights[c]
            cnt = cnts[c]
            prev = -1
            for p in range(indptr[j], indptr[j + 1]):
                d = indices[p]
                if d <= prev or d >= n:
                    bad = True
                    break
                prev = d
                t = float(tf[p])
                s = w * (t * k1p1 / (t + norm[d])) * cnt
                if flag[d] == 0:
                    flag[d] = 1
                    touched[nt] = d
                    nt += 1
                    buf[d] = s
                else:
                    buf[d] += s
            if bad:
                break
        size = 0
        positives = 0
        if not bad:
            for q in range(nt):
                d = touched[q]
                s = buf[d]
                if s > 0:
                    positives += 1
                    if size < k:
                        out_s[size] = s
                        out_i[size] = d
                        size += 1
                        _sift_up(out_s, out_i, size - 1)
                    elif _better(s, d, out_s[0], out_i[0]):
                        out_s[0] = s
                        out_i[0] = d
                        _sift_down(out_s, out_i, size, 0)
        for q in range(nt):
            d = touched[q]
            flag[d] = 0
            buf[d] = 0.0
        if bad:
            return -1, -1
        return size, positives

    @njit(cache=True, nogil=True)
    def scores(
        indptr: Any,
        indices: Any,
        tf: Any,
        norm: Any,
        cols: Any,
        weights: Any,
        cnts: Any,
        k1p1: float,
        out: Any,
    ) -> bool:
        n = norm.shape[0]
        for c in range(cols.shape[0]):
            j = cols[c]
            w = weights[c]
            cnt = cnts[c]
            prev = -1
            for p in range(indptr[j], indptr[j + 1]):
                d = indices[p]
                if d <= prev or d >= n:
                    return False
                prev = d
                t = float(tf[p])
                out[d] += w * (t * k1p1 / (t + norm[d])) * cnt
        return True

    return {"top_k": top_k, "scores": scores}


def load() -> dict[str, Any] | None:
    """The compiled kernels ``{"top_k", "scores"}``, or ``None`` when numba is not installed."""
    with _LOCK:
        if "k" in _KERNELS:
            return _KERNELS["k"]  # type: ignore[no-any-return]
        try:
            from numba import njit
        except ImportError:
            _KERNELS["k"] = None
            return None
        _KERNELS["k"] = _define(njit)
        return _KERNELS["k"]  # type: ignore[no-any-return]
