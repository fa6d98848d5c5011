"""The bounded min-heap of the numba top-k kernels (:mod:`llama_index_car._bm25_numba`):
the worst kept ``(score, id)`` at the root, ordered by score, then the higher id (so ties keep
the lower id, the numpy path's order). Compiled with numba (the ``[fast]`` extra), imported only
by the kernels.
"""

from __future__ import annotations

from typing import Any

from numba import njit


@njit(cache=True, nogil=True, error_model="numpy")
def better(sa: float, ia: int, sb: float, ib: int) -> bool:  # pragma: no cover - compiled
    return sa > sb or (sa == sb and ia < ib)


@njit(cache=True, nogil=True, error_model="numpy")
def sift_down(hs: Any, hi: Any, size: int, pos: int) -> None:  # pragma: no cover - compiled
    while True:
        left = 2 * pos + 1
        if left >= size:
            return
        worst = left
        right = left + 1
        if right < size and better(hs[worst], hi[worst], hs[right], hi[right]):
            worst = right
        if better(hs[pos], hi[pos], hs[worst], hi[worst]):
            hs[pos], hs[worst] = hs[worst], hs[pos]
            hi[pos], hi[worst] = hi[worst], hi[pos]
            pos = worst
        else:
            return


@njit(cache=True, nogil=True, error_model="numpy")
def sift_up(hs: Any, hi: Any, pos: int) -> None:  # pragma: no cover - compiled
    while pos > 0:
        parent = (pos - 1) // 2
        if better(hs[parent], hi[parent], hs[pos], hi[pos]):
            hs[parent], hs[pos] = hs[pos], hs[parent]
            hi[parent], hi[pos] = hi[pos], hi[parent]
            pos = parent
        else:
            return


@njit(cache=True, nogil=True, error_model="numpy")
def heap_push(hs: Any, hi: Any, size: int, k: int, s: float, d: int) -> int:  # pragma: no cover
    """Offer ``(s, d)`` to the k-heap ``hs[:size]``/``hi[:size]`` (the worst at the root, by
    score then higher id); returns the new size."""
    if size < k:
        hs[size] = s
        hi[size] = d
        sift_up(hs, hi, size)
        return size + 1
    if better(s, d, hs[0], hi[0]):
        hs[0] = s
        hi[0] = d
        sift_down(hs, hi, size, 0)
    return size


@njit(cache=True, nogil=True, error_model="numpy")
def heap_clear(hs: Any, hi: Any, k: int) -> None:  # pragma: no cover - compiled
    """A full k-heap of zeros: a zero or a tie never enters it (``a > hs[0]`` admits)."""
    for h in range(k):
        hs[h] = 0.0
        hi[h] = -1
