"""numba-compiled BM25Okapi query kernels (imported only by ``_bm25_kernels.load``).

Per posting ``p`` of column ``j`` (document ``d``, count ``t``) the contribution is
``w_j * (t * k1p1 / (t + norm[d])) * c_j`` (``w_j`` the floored idf, ``c_j`` the query count).
:func:`scores` sums it over the query terms in query order: the same IEEE operations, in the
same order, as the numpy path of :mod:`llama_index_car.bm25`, so scores are bit-identical
(numba does not contract or reorder float ops without ``fastmath``).

:func:`top_k` is exact top-k with safe dynamic pruning over 8-bit quantized impacts:

* :func:`prepare` checks each column once, before its first use (ids strictly increasing,
  in [0, N)), and records its largest impact ``colmax[j]`` and the impact of every posting
  rounded to ``QLEVELS`` steps of ``colmax[j] / QLEVELS`` (one byte per posting, kept in
  memory for the columns that queries use), so the query loops read 5 bytes per posting
  (id + byte) and no per-document data;
* terms are taken by decreasing bound (rare, high-idf terms first) and accumulated in full
  until the remaining terms' bound cannot lift an unseen document to the running k-th best
  (MaxScore's "non-essential" terms); the long lists of those are then only probed for the
  surviving candidates, and candidates that can no longer reach the k-th best are dropped;
* the few survivors are rescored with the exact float64 operations in query order, so the
  returned top-k and its scores are the dense exact path's, ties included (the error bounds
  are in :func:`top_k`'s docstring).

Memory safety does not rest on :func:`prepare`'s check: a memory-mapped ``indices.npy`` can be
overwritten in place after it. Every document id a kernel reads from ``indices`` and then
uses as an index is compared with N where it is used (one predictable branch per posting;
``benchmarks/bm25_bounds_cost.py`` measures it), the binary searches stay inside their
column, and ``indptr`` is the caller's private copy; an out-of-range id ends the kernel with
a failure status instead of an out-of-bounds access. Divisions use numpy's error model
(``0/0`` is NaN, never a ``ZeroDivisionError``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from llama_index_car._bm25_heap import heap_clear, heap_push, sift_down


@njit(cache=True, nogil=True, error_model="numpy")
def _keep_at_least(acc: Any, ids: Any, n: int, cut: float) -> int:  # pragma: no cover
    """Keep, in order, the documents of ``ids[:n]`` whose ``acc`` is >= ``cut`` (reset the
    others' ``acc`` to 0); branch-free. Returns how many are kept."""
    kept = 0
    for q in range(n):
        d = ids[q]
        a = acc[d]
        ok = float(a) >= cut
        ids[kept] = d
        kept += ok
        acc[d] = a if ok else np.float32(0)
    return kept


#: Quantization levels of the per-posting impact bytes (1..QLEVELS; never 0).
QLEVELS = 255
#: Bits of :func:`top_k`'s status: the path it took.
PRUNED, DENSE, RESUMED, PASSES = 1, 2, 4, 8


@njit(cache=True, nogil=True, error_model="numpy")
def prepare(
    indptr: Any,
    indices: Any,
    tf: Any,
    norm: Any,
    k1p1: float,
    cols: Any,
    valid: Any,
    colmax: Any,
    quant: Any,
) -> bool:  # pragma: no cover - compiled
    """Check and quantize the columns ``cols`` not yet in ``valid``; ``False`` on a corrupt
    column (ids not strictly increasing or >= N: nothing is marked valid then).

    ``colmax[j]`` = the column's largest ``g = t * k1p1 / (t + norm[d])``;
    ``quant[p]`` = ``g`` in steps of ``colmax[j] / QLEVELS``, rounded, at least 1, so
    ``|quant[p] * step - g| <= step``.
    """
    n = norm.shape[0]
    for c in range(cols.shape[0]):
        j = cols[c]
        if valid[j]:
            continue
        prev = -1
        best = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            d = indices[p]
            if d <= prev or d >= n or tf[p] == 0:
                return False
            prev = d
            t = float(tf[p])
            g = t * k1p1 / (t + norm[d])
            if g > best:
                best = g
        scale = QLEVELS / best if best > 0 else 0.0
        for p in range(indptr[j], indptr[j + 1]):
            d = indices[p]  # read again: a mapped file may have changed since the check
            if d < 0 or d >= n:
                return False
            t = float(tf[p])
            g = t * k1p1 / (t + norm[d])
            quant[p] = max(1, min(QLEVELS, int(g * scale + 0.5)))
        colmax[j] = best
        valid[j] = 1
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _lower_bound(indices: Any, lo: int, hi: int, d: int) -> int:  # pragma: no cover - compiled
    while lo < hi:
        mid = (lo + hi) >> 1
        if indices[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, error_model="numpy")
def _gallop(indices: Any, p: int, hi: int, d: int) -> int:  # pragma: no cover - compiled
    """First position in ``[p, hi)`` whose id is >= ``d`` (``hi`` if none): exponential
    then binary search, O(log distance)."""
    if p >= hi or indices[p] >= d:
        return p
    lo = p  # indices[lo] < d
    step = 1
    while True:
        nxt = lo + step
        if nxt >= hi:
            return _lower_bound(indices, lo + 1, hi, d)
        if indices[nxt] >= d:
            return _lower_bound(indices, lo + 1, nxt, d)
        lo = nxt
        step <<= 1


@njit(cache=True, nogil=True, error_model="numpy")
def _exact(
    indptr: Any,
    indices: Any,
    tf: Any,
    cols: Any,
    weights: Any,
    cnts: Any,
    k1p1: float,
    norm: Any,
    d: int,
) -> float:  # pragma: no cover - compiled
    """Exact score of document ``d``: the dense path's operations, in query order."""
    s = 0.0
    for c in range(cols.shape[0]):
        j = cols[c]
        lo = indptr[j]
        hi = indptr[j + 1]
        p = _lower_bound(indices, lo, hi, d)
        if p < hi and indices[p] == d:
            t = float(tf[p])
            s += weights[c] * (t * k1p1 / (t + norm[d])) * cnts[c]
    return s


@njit(cache=True, nogil=True, error_model="numpy")
def _probe_theta(
    indptr: Any,
    indices: Any,
    tf: Any,
    cols: Any,
    weights: Any,
    cnts: Any,
    k1p1: float,
    norm: Any,
    acc: Any,
    ids: Any,
    n: int,
    dense: bool,
    k: int,
    hs: Any,
    hi: Any,
) -> float:  # pragma: no cover - compiled
    """A lower bound of the exact k-th best score: the smallest exact score of the k
    documents with the best ``acc`` (k distinct documents score at least that), or -inf if
    fewer than k are nonzero. The documents are ``ids[:n]`` (the nonzero ``acc``), or with
    ``dense`` every document (a sequential scan, for when most are nonzero). ``hs``/``hi``
    are scratch of length >= k."""
    if dense:
        _heap_dense(acc, k, hs, hi)
    else:  # min-heap of the k best; the branch is predictable
        heap_clear(hs, hi, k)
        for q in range(n):
            d = ids[q]
            a = float(acc[d])
            if a > hs[0]:
                hs[0] = a
                hi[0] = d
                sift_down(hs, hi, k, 0)
    if hs[0] <= 0.0:
        return -np.inf
    low = np.inf
    for h in range(k):
        s = _exact(indptr, indices, tf, cols, weights, cnts, k1p1, norm, hi[h])
        if s < low:
            low = s
    return low


@njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _block_max(acc: Any, lo: int, hi: int) -> float:  # pragma: no cover - compiled
    """``max(acc[lo:hi])`` (fastmath only lets the compiler vectorize the reduction; a max
    is exact either way)."""
    mx = np.float32(0)
    for d in range(lo, hi):
        mx = max(mx, acc[d])
    return float(mx)


@njit(cache=True, nogil=True, error_model="numpy")
def _heap_dense(acc: Any, k: int, hs: Any, hi: Any) -> None:  # pragma: no cover - compiled
    """The k best nonzero ``acc`` into the min-heap ``hs``/``hi`` (``hs[0] == 0`` if fewer
    than k are nonzero). Blocks of 64 whose maximum cannot enter the heap are skipped."""
    heap_clear(hs, hi, k)
    n = acc.shape[0]
    for b in range(0, n, 64):
        e = min(n, b + 64)
        if _block_max(acc, b, e) <= hs[0]:
            continue
        for d in range(b, e):
            a = acc[d]
            if a > hs[0]:
                hs[0] = a
                hi[0] = d
                sift_down(hs, hi, k, 0)


@njit(cache=True, nogil=True, error_model="numpy")
def _zero_below(acc: Any, cut: Any) -> int:  # pragma: no cover - compiled
    """``acc[d] = 0`` where ``acc[d] < cut``; returns how many stay nonzero (a branch-free
    loop the compiler vectorizes)."""
    kept = 0
    for d in range(acc.shape[0]):
        a = acc[d]
        keep = (a >= cut) & (a != 0)
        kept += keep
        acc[d] = a if keep else np.float32(0)
    return kept


@njit(cache=True, nogil=True, error_model="numpy")
def _nonzero(acc: Any, ids: Any) -> int:  # pragma: no cover - compiled
    """List the ids of the nonzero ``acc`` in order into ``ids``; returns how many. Reads
    eight bytes at a time and skips all-zero words (candidates are sparse)."""
    n = acc.shape[0]
    half = n // 2
    words = acc[: 2 * half].view(np.uint64)
    nc = 0
    for w in range(half):
        if words[w] != 0:
            d = 2 * w
            if acc[d] != 0:
                ids[nc] = d
                nc += 1
            if acc[d + 1] != 0:
                ids[nc] = d + 1
                nc += 1
    if n % 2 and acc[n - 1] != 0:
        ids[nc] = n - 1
        nc += 1
    return nc


@njit(cache=True, nogil=True, error_model="numpy")
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
    colmax: Any,
    quant: Any,
    acc: Any,
    ids: Any,
    out_s: Any,
    out_i: Any,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Exact top-k with safe pruning; returns ``(size, status)``. Every column of ``cols``
    must have been through :func:`prepare`; ``acc`` (float32, N) must be zero and is left
    zero; ``ids`` is int32 scratch of length N.

    Terms are taken by decreasing bound ``u_c = w_c * colmax_c * c_c``; ``R_i`` is the sum
    of the bounds of the terms from the i-th on. Approximate scores ``a(d)`` add the float32
    ``f32(w_c * c_c * step_c) * quant`` of the terms read so far; ``|a(d) - s(d)| <= D + F``
    where ``s(d)`` is the exact score of those terms, ``D = sum_c w_c c_c step_c`` over them
    (quantization) and ``F = 8 (m + 4) 2**-24 (R_0 + D)`` covers every float rounding.
    ``theta`` is always a lower bound of the exact k-th best score ``S``: the smallest exact
    score of k distinct documents, or a k-th best ``a`` minus ``D + F``.

    1. OR phase: terms are accumulated in full. While few documents are touched they are
       listed in ``ids``; past N/4 the accumulation is "dense" and selections scan ``acc``.
       Tries (amortized against the postings read) set ``theta`` from the exact scores of
       the k best-so-far documents; once ``R_next + F < theta``, no unseen document can
       reach ``S`` and the phase ends.
    2. Candidates = touched documents with ``a + D + F + R_next >= theta`` (the others cannot
       reach ``S`` and are reset), in id order. If they are still more than N/8, probing
       would cost more than reading: the OR phase resumes (dense) with the next term.
       Otherwise the remaining lists are read in full while the candidates are dense in
       them, then probed document at a time (galloping search from per-list cursors, in
       decreasing bound order), a candidate being dropped as soon as its score plus the
       bound of the lists not yet probed falls below ``theta``; completed candidates raise
       ``theta`` through a k-heap.
    3. Survivors with ``a + D + F >= theta`` are rescored exactly (:func:`_exact`) into the
       k-heap: every exact top-k document (ties included) is among them.

    status >= 0: ``out_s[:size]``/``out_i[:size]`` hold the top ``size == k`` (unordered);
    its bits tell the path taken (for tests): ``PRUNED`` (phase 2 probed), ``DENSE`` (dense
    accumulation), ``RESUMED`` (a switch was taken back: too many candidates), ``PASSES``
    (a remaining list was read in full for dense candidates). -2: fewer than k documents
    match or a weight is negative (no safe bound), so the caller must use the dense exact
    path. -3: a document id out of ``[0, N)`` was read (the arrays changed after
    :func:`prepare`); ``acc`` is left dirty and must be discarded.
    """
    m = cols.shape[0]
    for c in range(m):
        if weights[c] < 0:
            return 0, -2
    ub = np.empty(m, np.float64)
    dq = np.empty(m, np.float64)
    wq = np.empty(m, np.float32)
    for c in range(m):
        ub[c] = weights[c] * colmax[cols[c]] * cnts[c]
        dq[c] = weights[c] * cnts[c] * (colmax[cols[c]] / QLEVELS)
        wq[c] = np.float32(dq[c])
        if ub[c] > 0 and wq[c] <= 0:
            return 0, -2  # a weight too small for float32: no safe approximation
    order = np.argsort(-ub, kind="mergesort")
    rest = np.zeros(m + 1, np.float64)  # rest[i] = sum of the bounds of terms order[i:]
    for i in range(m - 1, -1, -1):
        rest[i] = rest[i + 1] + ub[order[i]]
    dtot = 0.0
    for c in range(m):
        dtot += dq[c]
    fl = 8.0 * (m + 4) * 2.0**-24 * (rest[0] + dtot)

    # ---- phase 1: OR (full accumulation of the high-bound terms). While few documents are
    # touched they are listed in ids (branch-free: a store per posting, the count moves on
    # first touch); once a list would take them past N/4, the rest of the phase is "dense":
    # plain accumulation, and selections scan acc sequentially.
    n = acc.shape[0]
    flags = 0
    nt = 0
    dense = False
    since = 0
    i = 0
    dsum = 0.0
    theta = 0.0
    while True:
        switched = False
        while i < m:
            c = order[i]
            i += 1
            if ub[c] <= 0:
                continue  # weight 0: adds nothing
            j = cols[c]
            wc = wq[c]
            dsum += dq[c]
            lo = indptr[j]
            hi = indptr[j + 1]
            if not dense and 4 * (nt + hi - lo) > n:
                dense = True
            if dense:
                for p in range(lo, hi):
                    d = indices[p]
                    if d < 0 or d >= n:
                        return 0, -3
                    acc[d] += wc * np.float32(quant[p])
            else:
                for p in range(lo, hi):
                    d = indices[p]
                    if d < 0 or d >= n:
                        return 0, -3
                    a = acc[d]
                    ids[nt] = d
                    nt += a == 0
                    acc[d] = a + wc * np.float32(quant[p])
            since += hi - lo
            # a try costs a pass over the touched documents: amortized against the postings
            if i < m and (since >= n if dense else 4 * since >= nt) and (dense or nt >= k):
                got = _probe_theta(
                    indptr, indices, tf, cols, weights, cnts, k1p1, norm, acc, ids, nt, dense,
                    k, out_s, out_i,
                )
                theta = max(theta, got)
                since = 0
                if rest[i] + fl < theta:
                    switched = True
                    break
        if not switched and dense:
            # every term read, most documents touched: the k best approximate scores
            # (block-max scan), then every document within 2 (D + F) of the k-th of them
            _heap_dense(acc, k, out_s, out_i)
            if out_s[0] <= 0.0:  # fewer than k documents match
                acc[:] = 0
                return 0, -2
            _zero_below(acc, np.float32(out_s[0] - 2 * (dsum + fl) - fl))
            nc = _nonzero(acc, ids)
            theta = max(theta, out_s[0] - dsum - fl)
            break
        if not switched:  # every term read: the k best approximate scores, rescored exactly
            got = _probe_theta(
                indptr, indices, tf, cols, weights, cnts, k1p1, norm, acc, ids, nt, dense, k,
                out_s, out_i,
            )
            theta = max(theta, got)
            if theta == -np.inf:  # fewer than k documents match
                for q in range(nt):
                    acc[ids[q]] = 0
                return 0, -2
        # candidates, in id order (their scores stay in acc; everything else is reset to 0:
        # those documents cannot reach theta)
        cut = theta - dsum - fl - rest[i]
        if dense:
            nc = _zero_below(acc, np.float32(cut - fl))  # (-fl: float32 rounding of cut)
        else:
            nc = _keep_at_least(acc, ids, nt, cut)
        if switched and 8 * nc > n:
            # still dense: probing would cost more than reading the next lists in full.
            # Go on accumulating (dense from now on; the documents just reset cannot reach
            # theta, so what they gather later only costs a rescoring at worst).
            dense = True
            since = 0
            flags |= RESUMED
            continue
        if dense or 32 * nc > n:  # sequential scans give them sorted
            nc = _nonzero(acc, ids)
        else:
            ids[:nc].sort()
        break

    # ---- phase 2: AND, document at a time over the candidates (id order): the remaining
    # lists are probed by galloping from per-list cursors, in decreasing bound order, and a
    # candidate is dropped as soon as its score plus the bound of the lists not yet probed
    # falls below theta; completed candidates raise theta through a k-heap.
    # While the candidates are dense in the next list, one pass over it is cheaper than
    # probing: term at a time (candidates are the nonzero acc), then prune.
    while i < m and nc * 16 >= indptr[cols[order[i]] + 1] - indptr[cols[order[i]]]:
        flags |= PASSES
        c = order[i]
        i += 1
        if ub[c] <= 0:
            continue
        j = cols[c]
        wc = wq[c]
        for p in range(indptr[j], indptr[j + 1]):
            d = indices[p]
            if d < 0 or d >= n:
                return 0, -3
            a = acc[d]
            acc[d] = a + wc * np.float32(quant[p]) * np.float32(a != 0)
        got = _probe_theta(
            indptr, indices, tf, cols, weights, cnts, k1p1, norm, acc, ids, nc, False, k,
            out_s, out_i,
        )
        theta = max(theta, got)
        nc = _keep_at_least(acc, ids, nc, theta - dtot - fl - rest[i])
    rem = m - i
    pos = np.empty(rem, np.int64)
    for r in range(rem):
        pos[r] = indptr[cols[order[i + r]]]
    size = 0
    keep = 0
    for q in range(nc):
        d = ids[q]
        s = float(acc[d])
        alive = True
        for r in range(rem):
            if s + dtot + fl + rest[i + r] < theta:
                alive = False
                break
            c = order[i + r]
            j = cols[c]
            end = indptr[j + 1]
            pp = _gallop(indices, pos[r], end, d)
            pos[r] = pp
            if pp < end and indices[pp] == d:
                s += wq[c] * np.float32(quant[pp])
        if not alive or s + dtot + fl < theta:
            acc[d] = 0
            continue
        acc[d] = s
        ids[keep] = d
        keep += 1
        size = heap_push(out_s, out_i, size, k, s, d)
        if size == k:
            theta = max(theta, out_s[0] - dtot - fl)
    nc = keep
    if nc < k:  # cannot happen with the bounds above; kept as a guard
        for q in range(nc):
            acc[ids[q]] = 0
        return 0, -2

    # ---- phase 3: exact rescoring of the survivors
    size = 0
    for q in range(nc):
        d = ids[q]
        a = acc[d]
        acc[d] = 0
        if a + dtot + fl < theta:
            continue
        s = _exact(indptr, indices, tf, cols, weights, cnts, k1p1, norm, d)
        size = heap_push(out_s, out_i, size, k, s, d)
    if switched:
        flags |= PRUNED
    if dense:
        flags |= DENSE
    return size, flags


@njit(cache=True, nogil=True, error_model="numpy")
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
) -> bool:  # pragma: no cover - compiled
    """Add every query term's contributions into ``out`` (columns through :func:`prepare`);
    ``False`` if a document id read is out of range (the mapped file changed)."""
    n = norm.shape[0]
    for c in range(cols.shape[0]):
        j = cols[c]
        w = weights[c]
        cnt = cnts[c]
        for p in range(indptr[j], indptr[j + 1]):
            d = indices[p]
            if d < 0 or d >= n:
                return False
            t = float(tf[p])
            out[d] += w * (t * k1p1 / (t + norm[d])) * cnt
    return True
