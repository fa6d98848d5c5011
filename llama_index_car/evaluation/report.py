"""Write an evaluation's outputs: ``results.json``, TREC runs, ``report.md`` and PNG figures.

``report.md`` follows the paper's tables:

* **Table 8 shape** — BM25 vs dense MRR and Recall@10 per overlap stratum;
* **Table 9 shape** — every system's MRR / Recall@50 per stratum;
* **Table 10 shape** — MRR of every system (component) by stratum;
* all metrics with the bootstrap 95% CI of MRR;
* the declared paired tests: one-sided Wilcoxon on per-query MRR, Holm within each family,
  bootstrap CI of ΔMRR, Cohen's d_z;
* the α sweep, latency and CAR routing.

MRR is untruncated within the run depth (a gold beyond ``depth`` contributes 0).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index_car.evaluation.io import write_trec_qrels, write_trec_run
from llama_index_car.evaluation.runner import STRATA_KEYS, EvalOutcome

_LABEL = {
    "all": "All",
    "high": "High (>0.50)",
    "mid": "Mid (0.35–0.50)",
    "low": "Low (≤0.35)",
}


def _f(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def _p(p: Any) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "–"
    return f"{p:.3g}" if p >= 1e-3 else f"{p:.1e}"


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.+@" else "_" for ch in name)


def _bold_best(values: Sequence[float | None]) -> list[bool]:
    nums = [v for v in values if v is not None]
    if not nums:
        return [False] * len(values)
    best = max(nums)
    winners = [v is not None and v == best for v in values]
    return winners if sum(winners) == 1 else [False] * len(values)  # ties unbolded


def render_report(results: dict[str, Any], command: str = "") -> str:
    """The markdown report for a ``results.json`` object."""
    systems: dict[str, Any] = results["systems"]
    names = list(systems)
    ds = results["dataset"]
    cfg = results["config"]
    ov = results["overlap"]
    first = systems[names[0]]
    n = {s: first[s]["n"] for s in STRATA_KEYS}
    lines: list[str] = [
        f"# Retrieval evaluation: {ds['name']}",
        "",
        f"{ds['n_queries']} queries over {ds['n_docs']} documents. Embedding: "
        f"`{cfg['embed_model'].get('class')}` `{cfg['embed_model'].get('model_name')}`; "
        f"hypothesizer: `{cfg['hypothesizer']}`; α = {cfg['alpha']} (dense weight); "
        f"RRF k = {cfg['rrf_k']}; run depth {cfg['depth']}. MRR is untruncated within the "
        f"depth; Recall@k and nDCG@10 (linear gain) per query, then averaged; ties by doc id.",
        "",
    ]
    if command:
        lines += ["Reproduce:", "", "```", command, "```", ""]
    lines += [
        "## Query–gold lexical overlap",
        "",
        "Share of the query's distinct Kiwi content morphemes found in the best gold passage.",
        "",
        "| n | mean | median | ≤0.35 (low) | 0.35–0.50 (mid) | >0.50 (high) |",
        "|---|---|---|---|---|---|",
        f"| {ov['n']} | {_f(ov['mean'])} | {_f(ov['median'])} | {ov['low']} | {ov['mid']} "
        f"| {ov['high']} |",
        "",
    ]
    if "bm25" in systems and "dense" in systems:
        lines += [
            "## Table 8 shape: BM25 vs dense by overlap stratum",
            "",
            "| Overlap | n | BM25 MRR | Dense MRR | BM25 Recall@10 | Dense Recall@10 |",
            "|---|---|---|---|---|---|",
        ]
        for s in STRATA_KEYS:
            b, d = systems["bm25"][s], systems["dense"][s]
            if not b["n"]:
                continue
            bold = _bold_best([b["mrr"], d["mrr"]])
            mrr = [f"**{_f(v)}**" if w else _f(v) for v, w in zip([b["mrr"], d["mrr"]], bold,
                                                                   strict=True)]
            lines.append(
                f"| {_LABEL[s]} | {b['n']} | {mrr[0]} | {mrr[1]} | {_f(b['recall@10'])} | "
                f"{_f(d['recall@10'])} |"
            )
        lines.append("")
    lines += [
        "## Table 9 shape: MRR / Recall@50 by overlap stratum",
        "",
        "| Overlap | n | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for s in STRATA_KEYS:
        if not n[s]:
            continue
        mrrs = [systems[x][s]["mrr"] for x in names]
        bold = _bold_best(mrrs)
        cells = []
        for x, w in zip(names, bold, strict=True):
            m = _f(systems[x][s]["mrr"])
            cells.append(f"{'**' + m + '**' if w else m}/{_f(systems[x][s]['recall@50'])}")
        lines.append(f"| {_LABEL[s]} | {n[s]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Table 10 shape: MRR by component and stratum",
        "",
        "| System | " + " | ".join(f"{_LABEL[s]} (n={n[s]})" for s in STRATA_KEYS) + " |",
        "|---|" + "---|" * len(STRATA_KEYS),
    ]
    for x in names:
        lines.append(
            f"| {x} | " + " | ".join(
                _f(systems[x][s]["mrr"]) if n[s] else "–" for s in STRATA_KEYS
            ) + " |"
        )
    metric_keys = [k for k in first["all"] if k not in ("n", "mrr_ci95")]
    lines += [
        "",
        "## All metrics (all queries), MRR with bootstrap 95% CI",
        "",
        "| System | " + " | ".join(metric_keys) + " | MRR 95% CI |",
        "|---|" + "---|" * (len(metric_keys) + 1),
    ]
    for x in names:
        cell = systems[x]["all"]
        lo, hi = cell["mrr_ci95"]
        lines.append(
            f"| {x} | " + " | ".join(_f(cell[k]) for k in metric_keys)
            + f" | [{_f(lo)}, {_f(hi)}] |"
        )
    tests = results.get("tests", [])
    if tests:
        lines += [
            "",
            "## Paired tests (declared before the run)",
            "",
            "One-sided paired Wilcoxon signed-rank on per-query MRR (H1: A > B; zero "
            "differences dropped, scipy `zero_method='wilcox'`), Holm-corrected within each "
            "family; ΔMRR with bootstrap 95% CI (2000 resamples over queries); Cohen's d_z.",
            "",
            "| Family | A > B | Stratum | n | ΔMRR | 95% CI | better/worse | p | Holm p | d_z |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for t in tests:
            sig = " *" if t.get("p_holm") is not None and t["p_holm"] < 0.05 else ""
            lines.append(
                f"| {t['family']} | {t['a']} > {t['b']} | {t['stratum']} | {t['n']} | "
                f"{t['delta']:+.3f} | [{_f(t['ci_low'])}, {_f(t['ci_high'])}] | "
                f"{t['n_better']}/{t['n_worse']} | {_p(t['p'])} | {_p(t['p_holm'])}{sig} | "
                f"{_f(t['d_z'], 2)} |"
            )
        lines.append("")
        lines.append("`*` Holm p < 0.05.")
    sweep = results.get("alpha_sweep") or {}
    if sweep:
        alphas = sorted({a for pts in sweep.values() for a in pts}, key=float)
        lines += [
            "",
            "## α sweep (MRR; α weights the dense channel, 1 − α the lexical one)",
            "",
            "| Fusion | " + " | ".join(alphas) + " |",
            "|---|" + "---|" * len(alphas),
        ]
        for label, pts in sweep.items():
            lines.append(f"| {label} | " + " | ".join(_f(pts.get(a)) for a in alphas) + " |")
    timing = results.get("timing") or {}
    if timing:
        lines += [
            "",
            "## Latency (retrieval only, embeddings served from the cache)",
            "",
            "| System | mean ms/query | median ms/query |",
            "|---|---|---|",
        ]
        for x, t in timing.items():
            lines.append(
                f"| {x} | {_f(t['ms_per_query_mean'], 1)} | {_f(t['ms_per_query_median'], 1)} |"
            )
        for label, ms in (results.get("hypothesizer_ms_per_query") or {}).items():
            lines.append(f"| hypothesizer ({label}) | {_f(ms, 1)} | – |")
    routing = results.get("routing") or {}
    if routing:
        lines += ["", "## CAR routing", "", "| System | CAR | hybrid | fallback |",
                  "|---|---|---|---|"]
        for x, r in routing.items():
            lines.append(f"| {x} | {r['car']} | {r['hybrid']} | {r['fallback']} |")
    lines.append("")
    return "\n".join(lines)


def write_outputs(
    outcome: EvalOutcome, out_dir: str | os.PathLike[str], command: str = ""
) -> list[Path]:
    """Write ``results.json``, ``per_query.json``, ``runs/<system>.trec``, ``qrels.trec``,
    ``report.md``, ``mrr_by_overlap.png`` and ``alpha_sweep.png``; returns the paths."""
    from llama_index_car.evaluation.plots import plot_alpha_sweep, plot_mrr_by_stratum

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    results = dict(outcome.results)
    if command:
        results["command"] = command
    depth = int(results["config"]["depth"])
    results["runs"] = {}
    for name, run in outcome.runs.items():
        path = out / "runs" / f"{_safe(name)}.trec"
        write_trec_run(run, path, tag=_safe(name), depth=depth)
        results["runs"][name] = str(path.relative_to(out))
        written.append(path)
    write_trec_qrels(outcome.qrels, out / "qrels.trec")
    written.append(out / "qrels.trec")
    (out / "results.json").write_text(
        json.dumps(results, ensure_ascii=False, indent=2, allow_nan=False), encoding="utf-8"
    )
    written.append(out / "results.json")
    per_q = {
        "overlap": {q: {"value": o.value, "stratum": o.stratum, "gold": o.gold}
                    for q, o in outcome.overlaps.items()},
        "systems": outcome.per_query,
    }
    (out / "per_query.json").write_text(json.dumps(per_q, ensure_ascii=False), encoding="utf-8")
    written.append(out / "per_query.json")
    (out / "report.md").write_text(render_report(results, command), encoding="utf-8")
    written.append(out / "report.md")
    png = plot_mrr_by_stratum(
        results["systems"], out / "mrr_by_overlap.png",
        title=f"MRR by lexical overlap — {results['dataset']['name']}",
    )
    if png is not None:
        written.append(png)
    sweep = {
        label: {float(a): v for a, v in pts.items()}
        for label, pts in (results.get("alpha_sweep") or {}).items()
    }
    if sweep:
        png = plot_alpha_sweep(sweep, out / "alpha_sweep.png",
                               title=f"α sweep — {results['dataset']['name']}")
        if png is not None:
            written.append(png)
    return written
