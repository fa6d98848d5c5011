"""Put Table 7 (``llama-car preserve``'s report) into docs/RESULTS.md.

Usage::

    llama-car preserve ../shared/corpus/hwpx --pdf ../shared/corpus/hwpx/pdf \\
        --hwp ../shared/corpus/hwp --hml ../shared/corpus/hml --hml ../shared/corpus/hwp/twins \\
        --out out/preserve
    python scripts/results_table7.py out/preserve/report.md

Replaces what lies between the ``<!-- table7 -->`` and ``<!-- /table7 -->`` lines of
docs/RESULTS.md with the command block and the main table of the report, unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- table7 -->", "<!-- /table7 -->"


def report_block(report: str) -> list[str]:
    """The report's command block (```...```) and its first table, as lines."""
    lines = report.splitlines()
    fence = [i for i, line in enumerate(lines) if line.startswith("```")]
    command = lines[fence[0] : fence[1] + 1] if len(fence) >= 2 else []
    start = next(i for i, line in enumerate(lines) if line.startswith("| Pathway | Scope"))
    stop = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")),
                len(lines))
    return [*command, "", *lines[start:stop]]


def splice(doc: str, block: list[str]) -> str:
    lines = doc.splitlines()
    try:
        a, b = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise SystemExit(f"docs/RESULTS.md has no {BEGIN} ... {END} lines") from None
    return "\n".join([*lines[: a + 1], *block, *lines[b:]]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="report.md written by llama-car preserve")
    ap.add_argument("--results", type=Path, default=ROOT / "docs" / "RESULTS.md")
    args = ap.parse_args(argv)
    doc = args.results.read_text(encoding="utf-8")
    new = splice(doc, report_block(args.report.read_text(encoding="utf-8")))
    args.results.write_text(new, encoding="utf-8")
    print(f"{args.results}: Table 7 from {args.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
