"""PNG figures of the evaluation and the probe (matplotlib, the ``plot`` extra).

* :func:`plot_mrr_by_stratum` — MRR per overlap stratum (all/high/mid/low) for every system
  (the paper's Figures 8–9);
* :func:`plot_alpha_sweep` — MRR against the RRF weight α of the dense channel (Figure 10);
* :func:`plot_probe_conditions` — mean cos(query, variant) ± SEM for orig, cfb, cfs, cf with
  the three bracketed contrasts of Figure 3;
* :func:`plot_preservation` — Level-1 table preservation per pathway and PDF per document
  (Figure 7).

matplotlib is imported lazily with the non-interactive ``Agg`` backend; when it is missing the
functions warn once and return ``None`` (the tables are still written).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STRATUM_ORDER: tuple[str, ...] = ("all", "high", "mid", "low")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        warnings.warn(
            "matplotlib is not installed, PNG figures are skipped; "
            "run: pip install 'llama-index-car[plot]'",
            stacklevel=3,
        )
        return None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: str | os.PathLike[str]) -> Path:
    """Lay out, write ``fig`` as PNG (120 dpi) to ``path``, close it and return the path."""
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_mrr_by_stratum(
    systems: Mapping[str, Mapping[str, Mapping[str, float]]],
    path: str | os.PathLike[str],
    metric: str = "mrr",
    title: str = "",
) -> Path | None:
    """Grouped bars: ``systems[name][stratum][metric]`` for strata all/high/mid/low.

    Strata with n = 0 are drawn empty; the x labels carry n.
    """
    plt = _pyplot()
    if plt is None:
        return None
    names = list(systems)
    strata = [s for s in STRATUM_ORDER if any(s in systems[n] for n in names)]
    width_in = min(12.0, max(6.0, 1.0 + 0.3 * len(strata) * max(1, len(names))))
    fig, ax = plt.subplots(figsize=(width_in, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs, ys = [], []
        for j, s in enumerate(strata):
            cell = systems[name].get(s, {})
            if cell.get("n", 0):
                xs.append(j + (i - (len(names) - 1) / 2) * width)
                ys.append(float(cell.get(metric, 0.0)))
        ax.bar(xs, ys, width=width, label=name)
    first = systems[names[0]] if names else {}
    labels = [f"{s}\n(n={int(first.get(s, {}).get('n', 0))})" for s in strata]
    ax.set_xticks(range(len(strata)), labels)
    ax.set_ylabel(metric.upper())
    rows = -(-len(names) // 5)  # legend rows above the bars
    ax.set_ylim(0, 1.0 + 0.09 * rows + 0.03)
    ax.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_title(title or f"{metric.upper()} by query–gold lexical overlap")
    ax.legend(fontsize=8, ncol=min(5, max(1, len(names))), loc="upper center", frameon=False)
    return _save(plt, fig, path)


def plot_alpha_sweep(
    sweep: Mapping[str, Mapping[float, float]],
    path: str | os.PathLike[str],
    metric: str = "mrr",
    title: str = "",
) -> Path | None:
    """Lines of ``sweep[name][alpha] -> metric`` (α weights the dense channel)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in sweep.items():
        alphas = sorted(points)
        ax.plot(alphas, [points[a] for a in alphas], marker="o", label=name)
    ax.set_xlabel("α (weight of the dense channel; 1 − α lexical)")
    ax.set_ylabel(metric.upper())
    ax.set_title(title or f"{metric.upper()} vs RRF weight α")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_probe_conditions(
    probe: Mapping[str, Any],
    path: str | os.PathLike[str],
    conditions: Sequence[str] = ("orig", "cfb", "cfs", "cf"),
) -> Path | None:
    """Bars of mean cos ± SEM for the four main conditions, brackets for three contrasts."""
    plt = _pyplot()
    if plt is None:
        return None
    means = probe["variant_mean_cos"]
    sems = probe["variant_sem_cos"]
    ys = [means[c] if means[c] is not None else 0.0 for c in conditions]
    es = [sems[c] if sems[c] is not None else 0.0 for c in conditions]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.bar(range(len(conditions)), ys, yerr=es, capsize=4,
           color=["#999999", "#8fb3d9", "#4f81bd", "#e07b39"][: len(conditions)])
    ax.set_xticks(range(len(conditions)), list(conditions))
    lo = min(y - e for y, e in zip(ys, es, strict=True))
    hi = max(y + e for y, e in zip(ys, es, strict=True))
    span = max(hi - lo, 1e-3)
    ax.set_ylim(lo - 0.6 * span, hi + 0.9 * span)
    ax.set_ylabel("mean cos(query, variant) ± SEM")
    n = len(probe.get("cases", []))
    ax.set_title(f"Title framing and dense similarity (n = {n})")
    rows = {(r["a"], r["b"]): r for r in probe.get("contrasts", [])}
    brackets = [("cf", "orig"), ("cfs", "cfb"), ("cf", "cfs")]
    level = hi + 0.1 * span
    for a, b in brackets:
        if a not in conditions or b not in conditions or (a, b) not in rows:
            continue
        xa, xb = conditions.index(a), conditions.index(b)
        r = rows[(a, b)]
        dz = r.get("d_z")
        label = f"Δ={r['delta']:+.4f}, p={r['p']:.1g}" + (f", d_z={dz:.2f}" if dz else "")
        ax.plot([xb, xb, xa, xa], [level, level + 0.05 * span, level + 0.05 * span, level],
                color="black", lw=0.8)
        ax.text((xa + xb) / 2, level + 0.07 * span, label, ha="center", fontsize=7)
        level += 0.25 * span
    return _save(plt, fig, path)


def plot_preservation(
    results: Mapping[str, Any], path: str | os.PathLike[str]
) -> Path | None:
    """Figure 7: (left) ≥2×2 cell preservation per pathway, plus the first PDF pathway's
    detection over all tables; (right) that PDF pathway's ≥2×2 preservation per document,
    labelled with each document's ground-truth table count "(Nt)". ``results`` is the output
    of :func:`llama_index_car.evaluation.pathways.run_preservation`."""
    plt = _pyplot()
    if plt is None:
        return None
    # a pathway without >=2x2 ground truth (e.g. a tiny HML probe) shows its all-table figure
    pathways = [p for p in results["pathways"] if p["summary"]["all"]["tables"]]
    pdf = next((p for p in pathways if str(p["pathway"]).startswith("PDF")), None)
    scope = ["2x2" if p["summary"]["2x2"]["tables"] else "all" for p in pathways]
    labels = [
        str(p["pathway"]) + ("" if sc == "2x2" else "\n(all tables)")
        for p, sc in zip(pathways, scope, strict=True)
    ]
    values = [
        100 * p["summary"][sc]["preservation"] for p, sc in zip(pathways, scope, strict=True)
    ]
    colors = ["#4f81bd" if not lab.startswith("PDF") else "#e07b39" for lab in labels]
    if pdf is not None:
        labels.append(f"{pdf['pathway']}\ndetection, all")
        values.append(100 * pdf["summary"]["all"]["detection"])
        colors.append("#c0504d")
    per_doc = [] if pdf is None else [d for d in pdf["per_document"] if d["2x2"]["tables"]]
    fig, axes = plt.subplots(
        1, 2 if per_doc else 1, figsize=(11 if per_doc else 5.5, 4.5), squeeze=False
    )
    ax = axes[0][0]
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    ax.invert_yaxis()
    low = min([60.0] + [v - 5 for v in values])
    ax.set_xlim(max(0.0, low), 100)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.1f}%", va="center", fontsize=8)
    ax.set_xlabel("% (cell preservation of ≥2×2 tables unless noted)")
    ax.set_title("Table preservation vs HWPX ground truth")
    if per_doc:
        ax2 = axes[0][1]
        docs = sorted(per_doc, key=lambda d: d["2x2"]["preservation"])
        vals = [100 * d["2x2"]["preservation"] for d in docs]
        names = [f"{d['document']} ({d['all']['tables']}t)" for d in docs]
        median = sorted(vals)[len(vals) // 2]
        ax2.barh(range(len(vals)), vals,
                 color=["#e07b39" if v < median else "#4f81bd" for v in vals])
        ax2.set_yticks(range(len(vals)), names, fontsize=7)
        ax2.set_xlim(max(0.0, min([60.0] + [v - 5 for v in vals])), 100)
        for i, v in enumerate(vals):
            ax2.text(v, i, f" {v:.1f}%", va="center", fontsize=7)
        ax2.set_xlabel("≥2×2 cell preservation (%)")
        ax2.set_title(f"{pdf['pathway'] if pdf else 'PDF'} per document")
    return _save(plt, fig, path)
