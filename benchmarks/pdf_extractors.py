"""Level-1 PDF preservation per extractor, union and cross-page stitching (beyond the paper).

Extracts every PDF twin in ``--pdf`` once per engine (PyMuPDF ``find_tables``, pdfplumber
``extract_tables``, Camelot lattice when installed), then scores against the HWPX ground truth
(:mod:`llama_index_car.evaluation.preservation`) every combination below, with and without
:func:`stitch_pages`, and prints one table (≥2×2 and all-table preservation / detection) plus
each engine's extraction time. Usage::

    nice -n 10 python benchmarks/pdf_extractors.py ../shared/corpus/hwpx \\
        --pdf ../shared/corpus/hwpx/pdf [--engines pymupdf,pdfplumber,camelot]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from llama_index.readers.hwpx import HWPXReader

from llama_index_car.evaluation.pdf_tables import (
    PDFTable,
    check_engines,
    extract_pdf_tables,
    stitch_pages,
)
from llama_index_car.evaluation.preservation import ground_truth, score_document, summarize


def main() -> None:
    """Run the comparison and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hwpx_dir")
    ap.add_argument("--pdf", required=True)
    ap.add_argument("--engines", default="pymupdf,pdfplumber,camelot")
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    available = []
    for e in engines:
        try:
            check_engines([e])
            available.append(e)
        except ImportError as exc:
            print(f"skipping {e}: {exc}")
    gt, extracted = {}, {}
    seconds = dict.fromkeys(available, 0.0)
    for pdf in sorted(Path(args.pdf).glob("*.pdf")):
        hwpx = Path(args.hwpx_dir) / f"{pdf.stem}.hwpx"
        if not hwpx.is_file():
            continue
        gt[pdf.stem] = ground_truth(HWPXReader().load_tables(hwpx))
        tables: list[PDFTable] = []
        for e in available:
            t0 = time.perf_counter()
            tables += extract_pdf_tables(pdf, (e,))
            seconds[e] += time.perf_counter() - t0
        extracted[pdf.stem] = tables
        print(f"extracted {pdf.name}", flush=True)
    combos = [(e,) for e in available]
    if {"pymupdf", "pdfplumber"} <= set(available):
        combos.append(("pymupdf", "pdfplumber"))
    if len(available) > 2:
        combos.append(tuple(available))
    print()
    print(
        "| engines | stitched | ≥2×2 tables | ≥2×2 preservation | ≥2×2 detection "
        "| all tables | all preservation | all detection | tables 0 % (≥2×2) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for combo in combos:
        for stitched in (False, True):
            scores = []
            for doc, tables in extracted.items():
                chosen = [t for t in tables if t.engine in combo]
                if stitched:
                    chosen = stitch_pages(chosen)
                scores += score_document(doc, gt[doc], [t.rows for t in chosen])
            big, every = summarize(scores, "2x2"), summarize(scores, "all")
            print(
                f"| {' ∪ '.join(combo)} | {'yes' if stitched else 'no'} | {big.tables} "
                f"| {100 * big.preservation:.1f}% | {100 * big.detection:.1f}% "
                f"| {every.tables} | {100 * every.preservation:.1f}% "
                f"| {100 * every.detection:.1f}% | {big.lost} |"
            )
    print()
    print("extraction seconds: " + ", ".join(f"{e} {s:.0f}" for e, s in seconds.items()))


if __name__ == "__main__":
    main()
