"""Paired statistics vs scipy.stats and statsmodels (independent oracles)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from llama_index_car._errors import ConfigurationError
from llama_index_car.evaluation.stats import (
    bootstrap_ci,
    cohens_dz,
    holm,
    paired_test,
    wilcoxon_greater,
)


def _pairs(seed: int, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = rng.random(n)
    a = b + rng.normal(0.05, 0.1, n)
    a[:5] = b[:5]  # some zero differences, as with tied per-query MRR
    return a, b


@pytest.mark.parametrize("zero_method", ["wilcox", "pratt", "zsplit"])
@pytest.mark.parametrize("seed", [0, 1])
def test_wilcoxon_matches_scipy(zero_method: str, seed: int) -> None:
    a, b = _pairs(seed)
    ours = wilcoxon_greater(a, b, zero_method=zero_method)  # type: ignore[arg-type]
    ref = sps.wilcoxon(a, b, alternative="greater", zero_method=zero_method)
    assert ours.p == pytest.approx(float(ref.pvalue), rel=1e-12)
    assert ours.statistic == pytest.approx(float(ref.statistic))
    assert ours.n == 40 and ours.n_ties == 5
    assert ours.n_better + ours.n_worse == 35
    assert ours.delta == pytest.approx(float(np.mean(a - b)))


def test_wilcoxon_exact_small_sample_by_hand() -> None:
    # differences 1..5 all positive: exact one-sided p = 1/2^5
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    res = wilcoxon_greater(a, np.zeros(5))
    assert res.p == pytest.approx(1 / 32)
    assert res.statistic == 15.0


def test_all_zero_differences_give_p_one() -> None:
    res = wilcoxon_greater([0.5, 0.2], [0.5, 0.2])
    assert res.p == 1.0 and res.n_ties == 2
    assert np.isnan(res.d_z)


def test_wilcoxon_rejects_bad_input() -> None:
    with pytest.raises(ConfigurationError):
        wilcoxon_greater([1.0, 2.0], [1.0])
    with pytest.raises(ConfigurationError):
        wilcoxon_greater([1.0], [0.0], zero_method="bogus")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_holm_matches_statsmodels(seed: int) -> None:
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(seed)
    p = list(rng.random(7) ** 3)
    p[2] = p[4]  # a tie
    ref = multipletests(p, method="holm")[1]
    assert holm(p) == pytest.approx(list(ref), abs=1e-15)


def test_holm_by_hand_and_validation() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([3 * 0.01, 2 * 0.03, 2 * 0.03])
    assert holm([]) == []
    with pytest.raises(ConfigurationError):
        holm([1.5])


def test_cohens_dz_formula() -> None:
    d = np.array([0.1, 0.3, -0.05, 0.2])
    assert cohens_dz(d) == pytest.approx(d.mean() / d.std(ddof=1))
    assert np.isnan(cohens_dz([1.0]))


def test_bootstrap_ci_is_seeded_and_agrees_with_scipy() -> None:
    x = np.random.default_rng(7).random(120)
    lo, hi = bootstrap_ci(x, seed=3)
    assert (lo, hi) == bootstrap_ci(x, seed=3)
    assert lo < x.mean() < hi
    ref = sps.bootstrap(
        (x,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(0)
    ).confidence_interval
    # different random draws: the two percentile intervals agree to Monte-Carlo error
    assert lo == pytest.approx(ref.low, abs=0.01)
    assert hi == pytest.approx(ref.high, abs=0.01)


def test_bootstrap_by_hand_indices() -> None:
    x = np.array([0.0, 1.0, 0.5])
    rng = np.random.default_rng(5)
    means = x[rng.integers(0, 3, size=(2000, 3))].mean(axis=1)
    assert bootstrap_ci(x, seed=5) == pytest.approx(
        tuple(np.quantile(means, [0.025, 0.975]))
    )
    assert all(np.isnan(v) for v in bootstrap_ci([]))


def test_paired_test_fills_ci_of_difference() -> None:
    a, b = _pairs(2)
    t = paired_test(a, b, seed=1)
    assert (t.ci_low, t.ci_high) == bootstrap_ci(a - b, seed=1)
    assert t.to_dict()["p"] == t.p
