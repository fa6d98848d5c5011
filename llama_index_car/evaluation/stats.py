"""Paired statistics of the paper's §4.5: one-sided Wilcoxon, Holm, bootstrap CIs, Cohen's d_z.

Every test is paired over the same queries (or probe sections) and one-sided, with the
alternative "a > b" declared before the run.

* :func:`wilcoxon_greater` — ``scipy.stats.wilcoxon(a, b, alternative="greater",
  zero_method=..., method=...)``. ``zero_method="wilcox"`` (default) drops zero differences
  before ranking (Wilcoxon 1945; the usual choice when many queries tie, e.g. both systems rank
  the gold first); ``"pratt"`` ranks them and then drops them (Pratt 1959); ``"zsplit"`` splits
  them between the signs. ``method="auto"`` is scipy's: the exact null distribution for small
  samples without ties or zeros, otherwise the normal approximation with tie correction.
  When every difference is zero the test is undefined: p = 1.0 is reported.
* :func:`holm` — Holm (1979) step-down adjustment over a declared family:
  ``p_(i) ← max_{j<=i} min(1, (m - j + 1) p_(j))`` for the sorted p-values; equal to
  ``statsmodels.stats.multitest.multipletests(p, method="holm")[1]``.
* :func:`bootstrap_ci` — percentile bootstrap of the mean, ``n_resamples=2000`` draws of the
  units with replacement from ``numpy.random.default_rng(seed)``, interval
  ``[q_(α/2), q_(1-α/2)]`` of the resampled means (numpy's linear quantiles).
* :func:`cohens_dz` — d_z = mean(d) / sd(d, ddof=1) for the paired differences d = a - b;
  NaN when sd is 0 or fewer than two pairs.

>>> r = wilcoxon_greater([0.5, 1.0, 1.0, 0.3], [0.2, 0.5, 0.1, 0.3])
>>> r.n_better, r.n_worse
(3, 0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from llama_index_car._errors import ConfigurationError

ZeroMethod = Literal["wilcox", "pratt", "zsplit"]
Sample = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class PairedTest:
    """A one-sided paired comparison "a > b".

    Attributes:
        n: number of pairs.
        mean_a, mean_b: means of the two samples.
        delta: mean(a - b).
        n_better / n_worse / n_ties: pairs with a > b, a < b, a == b.
        statistic: Wilcoxon W+ (sum of positive ranks) as returned by scipy.
        p: one-sided p-value (alternative "greater").
        d_z: Cohen's d_z of the differences.
        ci_low / ci_high: bootstrap 95% CI of ``delta``.
        p_holm: Holm-adjusted p within the declared family (filled by :func:`holm`).
    """

    n: int
    mean_a: float
    mean_b: float
    delta: float
    n_better: int
    n_worse: int
    n_ties: int
    statistic: float
    p: float
    d_z: float
    ci_low: float
    ci_high: float
    p_holm: float | None = None

    def to_dict(self) -> dict[str, float | int | None]:
        """Plain dict (JSON-ready; NaN becomes ``None``)."""
        return {
            k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(self).items()
        }


def _pair(a: Sample, b: Sample) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ConfigurationError(
            f"paired samples must be 1-D of equal length, got {x.shape} and {y.shape}"
        )
    return x, y


def wilcoxon_greater(
    a: Sample,
    b: Sample,
    *,
    zero_method: ZeroMethod = "wilcox",
    method: str = "auto",
) -> PairedTest:
    """One-sided paired Wilcoxon signed-rank test of "a > b" (scipy), with d_z and counts.

    The bootstrap CI fields are NaN here; :func:`paired_test` fills them.
    """
    if zero_method not in ("wilcox", "pratt", "zsplit"):
        raise ConfigurationError(
            f"zero_method={zero_method!r}; allowed: 'wilcox', 'pratt', 'zsplit'"
        )
    x, y = _pair(a, b)
    d = x - y
    n = int(d.size)
    better, worse = int(np.sum(d > 0)), int(np.sum(d < 0))
    nonzero = better + worse
    statistic, p = float("nan"), 1.0
    if nonzero > 0:
        from scipy.stats import wilcoxon

        res = wilcoxon(x, y, alternative="greater", zero_method=zero_method, method=method)
        statistic, p = float(res.statistic), float(res.pvalue)
    return PairedTest(
        n=n,
        mean_a=float(x.mean()) if n else float("nan"),
        mean_b=float(y.mean()) if n else float("nan"),
        delta=float(d.mean()) if n else float("nan"),
        n_better=better,
        n_worse=worse,
        n_ties=n - nonzero,
        statistic=statistic,
        p=p,
        d_z=cohens_dz(d),
        ci_low=float("nan"),
        ci_high=float("nan"),
    )


def cohens_dz(differences: Sequence[float] | np.ndarray) -> float:
    """Cohen's d_z = mean(d) / sd(d, ddof=1); NaN when n < 2 or sd == 0.

    >>> round(cohens_dz([1.0, 2.0, 3.0]), 6)
    2.0
    """
    d = np.asarray(differences, dtype=float)
    if d.size < 2:
        return float("nan")
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return float("nan")
    return float(d.mean()) / sd


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order.

    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    p = [float(v) for v in pvalues]
    for v in p:
        if not 0.0 <= v <= 1.0 or math.isnan(v):
            raise ConfigurationError(f"p-value {v!r} is not in [0, 1]")
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * p[i]))
        adjusted[i] = running
    return adjusted


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values`` (resampling units with replacement).

    Paired differences: pass ``a - b``. Returns ``(nan, nan)`` for an empty sample.

    >>> lo, hi = bootstrap_ci([0.0, 1.0] * 50, seed=1)
    >>> lo < 0.5 < hi
    True
    """
    if n_resamples < 1:
        raise ConfigurationError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ConfigurationError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_resamples, x.size))
    means = x[idx].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def paired_test(
    a: Sample,
    b: Sample,
    *,
    zero_method: ZeroMethod = "wilcox",
    n_resamples: int = 2000,
    seed: int = 0,
) -> PairedTest:
    """:func:`wilcoxon_greater` plus the bootstrap 95% CI of the mean difference."""
    res = wilcoxon_greater(a, b, zero_method=zero_method)
    x, y = _pair(a, b)
    lo, hi = bootstrap_ci(x - y, n_resamples=n_resamples, seed=seed)
    return PairedTest(**{**asdict(res), "ci_low": lo, "ci_high": hi})
