"""Regenerate the README's measured blocks from the runs that measure them.

Every figure on the README's first pages comes from a script. The blocks between
``<!-- generated:NAME -->`` and ``<!-- /generated:NAME -->`` are written by this script only
(``tests/test_readme_figures.py`` fails when a block and its source disagree):

* ``results``: the retrieval table, from ``docs/results/span_cv.json`` (written by
  ``benchmarks/span_cv.py``): cross-validated and leave-one-set-out estimates, never the
  in-sample figure of the shipped defaults;
* ``span-hits``: how often the top criterion span is the answer, from
  ``docs/results/span_eval.json`` (written by ``benchmarks/span_eval.py``);
* ``scale``: the measured ceilings of the Limits section, from ``docs/results/scale_run.json``
  and ``docs/results/scale_run_1e6.json`` (written by ``benchmarks/scale.py --save``; their
  tables: ``docs/SCALE.md`` tables 6 and 7), with ``docs/results/scale_1e6_requery.json``
  (the 10^6 query process run again, ``scale.py --child query``);
* ``demo``: an excerpt of ``llama-car demo`` (run by this script; minutes on a cold cache).

Usage::

    python scripts/build_readme.py                 # rewrite every block (runs the demo)
    python scripts/build_readme.py --only results,span-hits
    python scripts/build_readme.py --check [--only …]  # exit 1 when a block is stale
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SPAN_CV = ROOT / "docs" / "results" / "span_cv.json"
SPAN_EVAL = ROOT / "docs" / "results" / "span_eval.json"
SCALE_RUN = ROOT / "docs" / "results" / "scale_run.json"
SCALE_RUN_1E6 = ROOT / "docs" / "results" / "scale_run_1e6.json"
SCALE_REQUERY = ROOT / "docs" / "results" / "scale_1e6_requery.json"

SETS = ("lhcs_construction", "autorag_ko", "legal_prec2statute")
SYSTEMS = ("bm25", "dense", "hybrid", "car (CV)", "car (LOSO)")
#: the demo questions shown in the excerpt (the rest is elided)
DEMO_SHOWN = ("d01", "d02", "d14")


def _block_re(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated:{re.escape(name)} -->\n)(.*?)(<!-- /generated:{re.escape(name)} -->)",
        re.S,
    )


def results_block(span_cv: dict) -> str:
    """The README's retrieval table: MRR per system, all queries and the low-overlap stratum,
    the best estimate of the offline CAR in bold."""
    summary = span_cv["summary"]
    lines = [
        "| set (queries) | bm25 | dense | hybrid | car (CV) | car (LOSO) |",
        "|---|---|---|---|---|---|",
    ]
    for name in SETS:
        for stratum in ("all", "low"):
            cells = {}
            for system in SYSTEMS:
                strata = summary[system][name]["strata"]
                if stratum not in strata:
                    break
                cells[system] = strata[stratum]
            else:
                n = cells["bm25"]["n"]
                label = name if stratum == "all" else f"{name} low overlap"
                best = max(cells[s]["mrr"] for s in SYSTEMS)
                row = [
                    f"**{cells[s]['mrr']:.3f}**" if cells[s]["mrr"] == best else
                    f"{cells[s]['mrr']:.3f}"
                    for s in SYSTEMS
                ]
                lines.append(f"| {label} ({n:,}) | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _p(x: float) -> str:
    """A p-value as the README prints it (one significant digit)."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def span_hits_block(span_eval: dict) -> str:
    """How often the shipped ``car``'s top criterion span is the answer's, against the first
    and a random span of the same hit."""
    lines = [
        "| criterion span (`car`, gold passage in its top 10) | n | top-1 = best span | "
        "first span | random span | top-3 (random) | p vs first / random |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, data in span_eval["sets"].items():
        s = data["systems"]["car"]["summary"]
        lines.append(
            f"| {name} | {s['n']} | **{s['top1']:.3f}** | {s['first']:.3f} | "
            f"{s['random_top1']:.3f} | {s['top3']:.3f} ({s['random_top3']:.3f}) | "
            f"{_p(s['p_top1_vs_first'])} / {_p(s['p_top1_vs_random'])} |"
        )
    return "\n".join(lines) + "\n"


def _this_rows(run: dict, path: Path) -> dict[int, dict]:
    rows = {n: q for code, n, _build, q in run["results"] if code == "this" and isinstance(q, dict)}
    if not rows:
        raise SystemExit(f"{path} has no measured rows of the code labelled 'this'")
    return rows


def scale_block(run: dict, run_1e6: dict, requery: dict) -> str:
    """The Limits bullet on scale: the shipped code's rows (``this``) of two ``scale.py`` runs,
    table 6's largest size and table 7's (10^6) with the
    repeats of its query process at the lowest load, to the precision the runs support."""
    rows = _this_rows(run, SCALE_RUN)
    big = max(rows)
    b = rows[big]
    rows7 = _this_rows(run_1e6, SCALE_RUN_1E6)
    m = max(rows7)
    t = rows7[m]
    load7 = [r["loadavg"] for _code, _n, _b, r in run_1e6["results"] if isinstance(r, dict)]
    q = min(requery["runs"], key=lambda r: r["loadavg"])
    return (
        "- **Measured ceilings** (`benchmarks/scale.py`, 2 cores; tables 6 and 7 of "
        "[`docs/SCALE.md`](docs/SCALE.md)).\n"
        "  The dense channel is an exact flat store, nodes and spans are read when used: "
        f"{big:,} sections\n"
        f"  load in {b['load_s']:.2f} s ({b['rss_load_mb']:,.0f} MB), {m:,} in "
        f"{t['load_s']:.2f} s ({t['rss_load_mb']:,.0f} MB). At {m:,}, `car` takes "
        f"{t['car']['p50']:.1f} ms p50 /\n"
        f"  {t['car']['p95']:.1f} ms p95 at load {min(load7):.1f}–{max(load7):.1f} and "
        f"{q['car']['p50']:.1f} / {q['car']['p95']:.1f} ms at load {q['loadavg']:.1f} "
        "(query embedding excluded); after\n"
        f"  the queries the process holds {q['rss_end_mb']:,.0f} MB, "
        f"{q['anon_end_mb']:,.0f} MB of it private (the rest: pages of the mapped files).\n"
    )


def demo_excerpt(output: str) -> str:
    """The excerpt of ``llama-car demo``'s table: its header, the :data:`DEMO_SHOWN` questions
    (each with its CAR span line), ``…`` for the rest, and the summary lines (the elapsed time
    is left out: it is the machine's, not the method's)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("rank of the gold"))
    out = ["$ llama-car demo", lines[start], lines[start + 1]]
    i, elided = start + 2, False
    while i < len(lines) and not lines[i].startswith("---"):
        qid = lines[i].split(" ", 1)[0]
        span = i + 1 < len(lines) and lines[i + 1].startswith(" ")
        if qid in DEMO_SHOWN:
            out.append(lines[i])
            if span:
                out.append(lines[i + 1])
            elided = False
        elif not elided:
            out.append("…")
            elided = True
        i += 2 if span else 1
    out += [line for line in lines[i:] if not line.startswith("elapsed")]
    return "```\n" + "\n".join(out).rstrip() + "\n```\n"


def run_demo() -> str:
    """``llama-car demo``'s text output (a fresh process; the shared embedding cache)."""
    return subprocess.run(
        [sys.executable, "-m", "llama_index_car", "demo", "--quiet"],
        check=True, capture_output=True, text=True, cwd=ROOT,
    ).stdout


BUILDERS: dict[str, Callable[[], str]] = {
    "results": lambda: results_block(json.loads(SPAN_CV.read_text(encoding="utf-8"))),
    "span-hits": lambda: span_hits_block(json.loads(SPAN_EVAL.read_text(encoding="utf-8"))),
    "scale": lambda: scale_block(*(json.loads(p.read_text(encoding="utf-8"))
                                   for p in (SCALE_RUN, SCALE_RUN_1E6, SCALE_REQUERY))),
    "demo": lambda: demo_excerpt(run_demo()),
}


def render(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each named block's body replaced (a missing marker is an error)."""
    for name, body in blocks.items():
        pattern = _block_re(name)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- generated:{name} --> block")
        text = pattern.sub(lambda m, b=body: m.group(1) + b + m.group(3), text, count=1)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a block is stale")
    ap.add_argument("--only", default=",".join(BUILDERS),
                    help=f"comma-separated blocks (default: all of {', '.join(BUILDERS)})")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(BUILDERS))
    if unknown:
        ap.error(f"unknown block(s): {', '.join(unknown)}")
    text = README.read_text(encoding="utf-8")
    new = render(text, {name: BUILDERS[name]() for name in names})
    if args.check:
        if new != text:
            print("README.md is stale: run python scripts/build_readme.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
