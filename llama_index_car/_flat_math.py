"""Pure maths of the exact flat dense index: int8 codes with a per-row error bound.

Each row ``x`` (float32) is stored twice: as itself, and as int8 codes ``c = round(x / s)``
with the per-row scale ``s = max|x| / 127`` (:func:`quantize_rows`). A query ``q`` is coded
the same way (``t``, ``q̂``). The approximate dot product ``a = s·t·(c·q̂)`` uses only an exact
integer dot product (int32 accumulation of int8 × int8: |c·q̂| <= d·127² < 2**24 for d <= 1040,
so its float32 value is exact too; wider vectors are scanned in float32 instead), and its error is bounded per row:

    x·q = s·t·(c·q̂) + (s·c)·e_q + e_x·q        with e_x = x − s·c, e_q = q − t·q̂
    |x·q − a| <= ‖s·c‖₂·‖e_q‖₂ + ‖e_x‖₂·‖q‖₂    (Cauchy–Schwarz twice)

(:func:`dot_error_bound`). ``‖s·c‖₂`` and ``‖e_x‖₂`` are computed once per row at build time in
float64 and stored rounded up; ``‖e_q‖₂`` and ``‖q‖₂`` once per query. For cosine similarity
both sides are divided by ``‖x‖₂·‖q‖₂``. A candidate search that keeps every row whose upper
bound ``a + err`` reaches the k-th best *exact* score among the rows it rescored, and rescores
those exactly, returns exactly the top-k of a float32 brute-force scan
(:func:`certified`): the int8 pass only decides which rows are worth an exact look.
"""

from __future__ import annotations

import numpy as np

INT8_MAX = 127
#: added to every bound: covers float64 rounding of the exact and approximate scores
SLACK = 1e-9
#: added to a cosine bound computed in float32 (values <= ~1, a handful of roundings)
SLACK32 = 1e-6
_CHUNK = 1 << 15


def _up(x: np.ndarray) -> np.ndarray:
    """float64 values rounded *up* to float32 (a stored bound must not shrink)."""
    y = x.astype(np.float32)
    return np.where(y.astype(np.float64) < x, np.nextafter(y, np.float32(np.inf)), y)


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(codes int8, scale f32, code_norm f32, resid f32, norm f64)`` of the rows of ``x``.

    ``scale = max|x| / 127`` (1 for an all-zero row), ``codes = round(x / scale)``;
    ``code_norm = ‖scale·codes‖₂`` and ``resid = ‖x − scale·codes‖₂`` (float64, rounded up to
    float32), ``norm = ‖x‖₂`` in float64.

    >>> c, s, cn, r, n = quantize_rows(np.array([[0.5, -0.25, 0.0]], dtype=np.float32))
    >>> c.tolist(), float(s[0] * 127), bool(r[0] >= 0)
    ([[127, -64, 0]], 0.5, True)
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[0]
    codes = np.empty(x.shape, dtype=np.int8)
    scale = np.empty(n, dtype=np.float32)
    code_norm = np.empty(n, dtype=np.float32)
    resid = np.empty(n, dtype=np.float32)
    norm = np.empty(n, dtype=np.float64)
    for a in range(0, n, _CHUNK):  # bounded float64 temporaries
        b = min(n, a + _CHUNK)
        blk = x[a:b]
        peak = np.abs(blk).max(axis=1) if blk.shape[1] else np.zeros(b - a, dtype=np.float32)
        s = np.where(peak > 0, peak / np.float32(INT8_MAX), np.float32(1)).astype(np.float32)
        c = np.clip(np.rint(blk / s[:, None]), -INT8_MAX, INT8_MAX).astype(np.int8)
        recon = c.astype(np.float64) * s.astype(np.float64)[:, None]
        x64 = blk.astype(np.float64)
        codes[a:b], scale[a:b] = c, s
        code_norm[a:b] = _up(np.sqrt(np.einsum("ij,ij->i", recon, recon)))
        diff = x64 - recon
        resid[a:b] = _up(np.sqrt(np.einsum("ij,ij->i", diff, diff)))
        norm[a:b] = np.sqrt(np.einsum("ij,ij->i", x64, x64))
    return codes, scale, code_norm, resid, norm


def quantize_query(q: np.ndarray) -> tuple[np.ndarray, float, float, float]:
    """``(codes int8, scale, ‖e_q‖₂, ‖q‖₂)`` of one query vector (as :func:`quantize_rows`)."""
    codes, scale, _, resid, norm = quantize_rows(np.asarray(q, dtype=np.float32)[None, :])
    return codes[0], float(scale[0]), float(resid[0]), float(norm[0])


def approx_scores(
    int_dots: np.ndarray, scale: np.ndarray, q_scale: float
) -> np.ndarray:
    """``scale · q_scale · int_dots`` in float64 (the approximate dot products)."""
    return np.asarray(int_dots, dtype=np.float64) * (scale.astype(np.float64) * q_scale)


def dot_error_bound(
    code_norm: np.ndarray, resid: np.ndarray, q_resid: float, q_norm: float
) -> np.ndarray:
    """``‖s·c‖₂·‖e_q‖₂ + ‖e_x‖₂·‖q‖₂ + SLACK`` per row: ``|x·q − approx| <=`` this.

    >>> x = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32); q = np.array([0.28, 0.96], dtype=np.float32)
    >>> c, s, cn, r, _ = quantize_rows(x); qc, qs, qr, qn = quantize_query(q)
    >>> a = approx_scores(c.astype(np.int64) @ qc.astype(np.int64), s, qs)
    >>> bool((np.abs(x.astype(np.float64) @ q.astype(np.float64) - a) <= dot_error_bound(cn, r, qr, qn)).all())
    True
    """
    return code_norm.astype(np.float64) * q_resid + resid.astype(np.float64) * q_norm + SLACK


def cosine_coefficients(
    scale: np.ndarray, code_norm: np.ndarray, resid: np.ndarray, norm: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 ``(scale/norm, code_norm/norm, resid/norm)`` (0 where ``norm`` is 0; the last
    two rounded up): the per-row factors of the approximate cosine
    ``dots·(scale/norm)·(t/‖q‖)`` and of its bound
    ``(code_norm/norm)·(‖e_q‖/‖q‖) + resid/norm``."""
    n64 = norm.astype(np.float64)
    safe = np.where(n64 > 0, n64, 1.0)
    zero = n64 <= 0
    son = np.where(zero, 0.0, scale.astype(np.float64) / safe).astype(np.float32)
    cnn = np.where(zero, 0.0, _up(code_norm.astype(np.float64) / safe))
    ron = np.where(zero, 0.0, _up(resid.astype(np.float64) / safe))
    return son, cnn.astype(np.float32), ron.astype(np.float32)


def certified(upper_rest: float, kth_exact: float | None) -> bool:
    """Whether the rescored rows already hold the exact top-k: true when k exact scores are
    known and every row not rescored has an upper bound *strictly* below the k-th of them
    (a tie could need its id compared, so it is rescored)."""
    return kth_exact is not None and upper_rest < kth_exact
