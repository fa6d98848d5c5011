"""``llama-car preserve``: Level-1 table preservation of PDF/HML/HWP pathways (paper §5.6, Table 7)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from llama_index_car.cli._args import subcommand

EXAMPLE = """\
examples:
  llama-car preserve ../shared/corpus/hwpx --pdf ../shared/corpus/hwpx/pdf \\
      --hml ../shared/corpus/hml --out out/preserve
  llama-car preserve ../shared/corpus/hwpx --hwp ../shared/corpus/hwp \
      --hml ../shared/corpus/hml --hml ../shared/corpus/hwp/twins --out out/preserve-hwp
  llama-car preserve hwpx/ --pdf pdf/ --engines pdfplumber --out out/pdfplumber

Files are paired by base name (a.hwpx <-> a.pdf, a.hml, a.hwp). The HWPX tables are the ground
truth; with --hwp, a binary HWP 5 file whose base name has no HWPX file is the ground truth of
its document (same table model), and one that has is scored as the "HWP 5" pathway. The
self-test rows must read 100%. Outputs DIR/results.json, DIR/report.md (Table 7 shape,
robustness, per-document PDF breakdown, files not scored) and DIR/preservation.png (Figure 7).
The PDF pathway needs: pip install 'llama-index-car[pdf]'.
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``preserve`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "preserve",
        help="table preservation of PDF/HML/HWP pathways vs HWPX (or HWP 5) cell ground truth "
        "(Table 7)",
        description="Score how much HWPX table cell content the PDF and HML ingestion "
        "pathways keep: cell preservation and table detection, all tables and >=2x2.",
        epilog=EXAMPLE,
    )
    p.add_argument("hwpx_dir", metavar="HWPX_DIR", help="folder of .hwpx files (ground truth)")
    p.add_argument("--pdf", metavar="PDF_DIR", default=None, help="folder of PDF twins")
    p.add_argument("--hml", metavar="HML_DIR", action="append", default=None,
                   help="folder of HML twins (may be repeated)")
    p.add_argument("--hwp", metavar="HWP_DIR", action="append", default=None,
                   help="folder of binary HWP 5 files: ground truth where a document has no "
                   "HWPX file, else scored as the HWP 5 pathway (may be repeated)")
    p.add_argument("--engines", default="pymupdf,pdfplumber", metavar="LIST",
                   help="PDF engines, comma-separated; several = their union "
                   "(default: %(default)s)")
    p.add_argument("--stitch", action="store_true",
                   help="also score PDF tables joined across page breaks (beyond the paper)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    return p


def run(args: argparse.Namespace) -> int:
    """Execute ``llama-car preserve``; returns the exit code."""
    from llama_index_car.evaluation.pathways import run_preservation, write_preservation_outputs

    engines = [e.strip() for e in str(args.engines).split(",") if e.strip()]

    def progress(msg: str) -> None:
        if not args.no_progress:
            print(msg, file=sys.stderr, flush=True)

    results = run_preservation(
        args.hwpx_dir, args.pdf, args.hml, hwp_dir=args.hwp, engines=engines,
        stitch=args.stitch, progress=progress
    )
    argv = ["llama-car", "preserve", args.hwpx_dir]
    argv += ["--pdf", args.pdf] if args.pdf else []
    for folder in args.hwp or []:
        argv += ["--hwp", folder]
    for folder in args.hml or []:
        argv += ["--hml", folder]
    argv += ["--engines", args.engines] if args.pdf else []
    argv += ["--stitch"] if args.stitch and args.pdf else []
    argv += ["--out", args.out]
    paths = write_preservation_outputs(results, args.out, command=shlex.join(argv))
    for row in results["pathways"]:
        s = row["summary"]["2x2"]
        if not s["tables"]:
            print(f"{row['pathway']:<20} >=2x2: no ground-truth tables in scope")
            continue
        print(
            f"{row['pathway']:<20} >=2x2: {s['tables']:>4} tables {s['cells']:>6} cells "
            f"preservation {100 * s['preservation']:5.1f}%  detection "
            f"{100 * row['summary']['all']['detection']:5.1f}% (all tables)"
        )
    skipped = len(results["unpaired"]) + len(results["unreadable"])
    if skipped:
        print(f"{skipped} file(s) not scored; see {paths[1]}", file=sys.stderr)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0
