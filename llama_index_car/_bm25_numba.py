"""numba-compiled BM25Okapi query kernels (imported only by ``_bm25_kernels.load``).

Term-at-a-time over the CSC columns of the query terms. Per posting ``p`` of column ``j``
(document ``d``, count ``t``) the contribution is ``w_j * (t * k1p1 / (t + norm[d])) * c_j``
(``w_j`` the floored idf, ``c_j`` the query count), summed over the query terms in order: the
same IEEE operations, in the same order, as the numpy path of :mod:`llama_index_car.bm25`,
so scores are bit-identical (numba does not contract or reorder float ops without
``fastmath``).

:func:`top_k` selects with float32 approximate scores (the memory traffic of a float32
accumulator, like bm25s) and then rescores the candidates exactly, so the returned top-k and
its scores are those of the exact float64 path (see its docstring for the error bound).
Each column is checked once, before its first use (ids strictly increasing, in [0, N); the
result is remembered in the index's ``valid`` bitmap), so the scoring loops run without
per-posting checks; a violation returns status -1 / ``False`` before any out-of-bounds access.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["DL_MAX", "TF_MAX", "impact_table", "scores", "top_k"]


def impact_table(k1: float, b: float, avgdl: float) -> np.ndarray:
    """float32 ``G[tf * DL_MAX + dl] = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))``."""
    dl = np.arange(DL_MAX, dtype=np.float64)
    norm = k1 * (1 - b + b * dl / avgdl) if avgdl > 0 else np.zeros(DL_MAX)
    t = np.arange(TF_MAX, dtype=np.float64)[:, None]
    return np.asarray(t * (k1 + 1) / (t + norm[None, :]), dtype=np.float32).ravel()


@njit(cache=True, nogil=True)
def _better(sa: float, ia: int, sb: float, ib: int) -> bool:  # pragma: no cover - compiled
    return sa > sb or (sa == sb and ia < ib)


@njit(cache=True, nogil=True)
def _sift_down(hs: Any, hi: Any, size: int, pos: int) -> None:  # pragma: no cover - compiled
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
def _sift_up(hs: Any, hi: Any, pos: int) -> None:  # pragma: no cover - compiled
    while pos > 0:
        parent = (pos - 1) // 2
        if _better(hs[parent], hi[parent], hs[pos], hi[pos]):
            hs[parent], hs[pos] = hs[pos], hs[parent]
            hi[parent], hi[pos] = hi[pos], hi[parent]
            pos = parent
        else:
            return


#: Rows of the float32 impact table ``G[tf, dl]`` (tf < TF_MAX, dl < DL_MAX use the table).
TF_MAX = 16
DL_MAX = 4096
#: Documents per accumulation block of :func:`top_k` (float32 + uint16 each: 384 KiB).
BLOCK = 1 << 16


@njit(cache=True, nogil=True)
def _check_column(
    indptr: Any, indices: Any, j: int, n: int, valid: Any
) -> bool:  # pragma: no cover
    """Column ``j``'s ids strictly increase and lie in [0, n)? Checked once, then remembered
    in ``valid`` (so the scoring loops read postings without per-posting checks)."""
    if valid[j]:
        return True
    prev = -1
    for p in range(indptr[j], indptr[j + 1]):
        d = indices[p]
        if d <= prev or d >= n:
            return False
        prev = d
    valid[j] = 1
    return True


@njit(cache=True, nogil=True)
def _lower_bound(indices: Any, lo: int, hi: int, d: int) -> int:  # pragma: no cover - compiled
    while lo < hi:
        mid = (lo + hi) >> 1
        if indices[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def top_k(
    indptr: Any,
    indices: Any,
    tf: Any,
    cols: Any,
    weights: Any,
    cnts: Any,
    k1p1: float,
    k: int,
    norm: Any,
    dlidx: Any,
    table: Any,
    valid: Any,
    acc: Any,
    cand: Any,
    cand_s: Any,
    out_s: Any,
    out_i: Any,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Exact top-k in three phases; returns ``(size, status)``.

    1. Approximate float32 scores, term-at-a-time within blocks of ``BLOCK`` documents:
       ``acc[d] += f32(w * cnt) * G[tf, dl]``
       where ``G`` is the float32 impact ``tf * (k1 + 1) / (tf + norm(dl))`` (computed for
       rare ``tf >= TF_MAX`` or ``dl >= DL_MAX``). Bytes touched per posting: 4 (id) + 1-4
       (count), plus one float32 accumulator and one uint16 length per document.
    2. A scan of each block's ``acc`` (reset as it goes) keeps a k-heap of approximate scores and every
       document whose approximate score is within ``2E`` of the running k-th best, where
       ``E = 4 * (m + 4) * 2**-24 * sum_c |w_c| cnt_c (k1 + 1)`` bounds |approx - exact|.
       Every exact top-k document (ties included) is such a candidate.
    3. The candidates are rescored exactly in float64 (binary search of each query column,
       the numpy path's operations in the same order) and the exact k-heap is returned.

    status 0: ``out_s[:size]``/``out_i[:size]`` hold the top ``size == k`` (unordered);
    -1: a corrupt posting (ids not increasing or >= N); -2: fewer than k documents are
    certainly positive, so the caller must use the dense exact path.
    """
    n = acc.shape[0]
    m = cols.shape[0]
    bound = 0.0
    for c in range(m):
        bound += abs(weights[c]) * cnts[c] * k1p1
    err = 4.0 * (m + 4) * bound * 2.0**-24
    for c in range(m):
        if not _check_column(indptr, indices, cols[c], n, valid):
            acc[:] = 0
            return -1, -1
    # Documents are processed in blocks of BLOCK ids (their accumulators and lengths stay in
    # the L2 cache while every query column advances through its postings of the block), and
    # each block is scanned right after it is accumulated. Per document the contributions are
    # still added in query-column order, as term-at-a-time would.
    pos = np.empty(m, np.int64)
    wcs = np.empty(m, np.float32)
    for c in range(m):
        pos[c] = indptr[cols[c]]
        wcs[c] = np.float32(weights[c] * cnts[c])
    size = 0
    nc = 0
    # candidates: s >= thr = max(tiny, running k-th best - 2E) (tiny: positives only). Past
    # the first k positives the test is almost always false: a branch-predictable scan. (A
    # compound test here, e.g. "s > thr or (s == thr and ...)", measured 8x slower.)
    tiny = 5e-324
    thr = tiny
    for b0 in range(0, n, BLOCK):
        b1 = min(n, b0 + BLOCK)
        for c in range(m):
            end = indptr[cols[c] + 1]
            wc = wcs[c]
            p = pos[c]
            while p < end:
                d = indices[p]
                if d >= b1:
                    break
                t = np.int64(tf[p])
                li = np.int64(dlidx[d])
                if t < TF_MAX and li < DL_MAX:
                    g = table[t * DL_MAX + li]
                else:
                    ft = float(t)
                    g = np.float32(ft * k1p1 / (ft + norm[d]))
                acc[d] += wc * g
                p += 1
            pos[c] = p
        for d in range(b0, b1):
            s = float(acc[d])
            acc[d] = 0
            if s >= thr:
                cand[nc] = d
                cand_s[nc] = s
                nc += 1
                if size < k:
                    out_s[size] = s
                    out_i[size] = d
                    size += 1
                    _sift_up(out_s, out_i, size - 1)
                    if size == k:
                        thr = max(tiny, out_s[0] - 2 * err)
                elif _better(s, d, out_s[0], out_i[0]):
                    out_s[0] = s
                    out_i[0] = d
                    _sift_down(out_s, out_i, size, 0)
                    thr = max(tiny, out_s[0] - 2 * err)
    thr = out_s[0] - 2 * err if size == k else 0.0
    if size < k or thr <= 0:
        return size, -2
    size = 0
    for q in range(nc):
        if cand_s[q] < thr:
            continue
        d = cand[q]
        s = 0.0
        for c in range(m):
            j = cols[c]
            lo = indptr[j]
            hi = indptr[j + 1]
            p = _lower_bound(indices, lo, hi, d)
            if p < hi and indices[p] == d:
                tp = float(tf[p])
                s += weights[c] * (tp * k1p1 / (tp + norm[d])) * cnts[c]
        if size < k:
            out_s[size] = s
            out_i[size] = d
            size += 1
            _sift_up(out_s, out_i, size - 1)
        elif _better(s, d, out_s[0], out_i[0]):
            out_s[0] = s
            out_i[0] = d
            _sift_down(out_s, out_i, size, 0)
    return size, 0


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
    valid: Any,
    out: Any,
) -> bool:  # pragma: no cover - compiled
    """Add every query term's contributions into ``out``; ``False`` on a corrupt posting."""
    n = norm.shape[0]
    for c in range(cols.shape[0]):
        if not _check_column(indptr, indices, cols[c], n, valid):
            return False
    for c in range(cols.shape[0]):
        j = cols[c]
        w = weights[c]
        cnt = cnts[c]
        for p in range(indptr[j], indptr[j + 1]):
            d = indices[p]
            t = float(tf[p])
            out[d] += w * (t * k1p1 / (t + norm[d])) * cnt
    return True
