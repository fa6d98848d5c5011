"""Level-1 pathway comparison (paper §5.6, Table 7, Figure 7): run and report.

:func:`run_preservation` pairs an HWPX folder with PDF and/or HML folders by base name (file
stem), reads the ground truth with :class:`HWPXReader` (and, for documents without an HWPX
twin, binary HWP 5 with :class:`HWPReader`), the HML pathway with
:class:`HMLReader` and the PDF pathway with :func:`extract_pdf_tables`, and scores every pathway
with :mod:`.preservation`. Unpaired and unreadable files are listed in the results, never fatal.
:func:`render_preservation_report` writes the Table 7-shaped markdown and
:func:`write_preservation_outputs` writes ``results.json``, ``report.md`` and
``preservation.png`` (Figure 7's shape).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llama_index_car.evaluation.pdf_tables import (
    PDFTable,
    PDFTableError,
    check_engines,
    extract_pdf_tables,
    stitch_pages,
)
from llama_index_car.evaluation.preservation import (
    SCOPES,
    GTTable,
    TableScore,
    ground_truth,
    score_document,
    summarize,
)

Grid = list[list[str]]
ROBUSTNESS_MIN_CHARS: tuple[int, ...] = (2, 3)


Folders = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None


def _folder_list(folders: Folders) -> list[str]:
    if folders is None:
        return []
    if isinstance(folders, str | os.PathLike):
        return [str(folders)]
    return [str(f) for f in folders]


def _files(folders: Folders, suffix: str) -> dict[str, Path]:
    """Files with ``suffix`` directly in ``folders`` (not recursive), keyed by stem; with
    several folders, the first folder holding a stem wins."""
    out: dict[str, Path] = {}
    for folder in _folder_list(folders):
        p = Path(folder)
        if not p.is_dir():
            from llama_index_car._errors import ConfigurationError

            raise ConfigurationError(f"{folder}: not a directory")
        for f in sorted(p.iterdir()):
            if f.is_file() and f.suffix.lower() == suffix:
                out.setdefault(f.stem, f)
    return out


def _grid(table: Any) -> Grid:
    """An ``HWPXTable`` as one recovered grid (its cells in row-major order)."""
    cells = sorted(table.cells, key=lambda c: (c.row, c.col))
    return [[c.text for c in cells]]


def _score_all(
    gt: dict[str, list[GTTable]],
    recovered: dict[str, list[Grid]],
    min_chars: int = 1,
) -> list[TableScore]:
    out: list[TableScore] = []
    for doc in sorted(recovered):
        out += score_document(doc, gt[doc], recovered[doc], min_chars=min_chars)
    return out


def _pathway_block(
    name: str,
    gt: dict[str, list[GTTable]],
    recovered: dict[str, list[Grid]],
) -> dict[str, Any]:
    """Summaries (both scopes), robustness variants, per-document and per-table scores."""
    scores = _score_all(gt, recovered)
    per_doc: list[dict[str, Any]] = []
    for doc in sorted(recovered):
        mine = [s for s in scores if s.document == doc]
        row: dict[str, Any] = {"document": doc, "recovered_tables": len(recovered[doc])}
        for scope in SCOPES:
            row[scope] = summarize(mine, scope).to_dict()
        per_doc.append(row)
    return {
        "pathway": name,
        "documents": sorted(recovered),
        "summary": {scope: summarize(scores, scope).to_dict() for scope in SCOPES},
        "robustness": {
            f"min_chars_{k}": {
                scope: summarize(_score_all(gt, recovered, k), scope).to_dict()
                for scope in SCOPES
            }
            for k in ROBUSTNESS_MIN_CHARS
        },
        "per_document": per_doc,
        "tables": [
            {
                "document": s.document,
                "gt_index": s.gt_index,
                "shape": [s.n_rows, s.n_cols],
                "cells": s.n_cells,
                "recovered": s.n_recovered,
                "matched": s.matched,
            }
            for s in scores
        ],
    }


def run_preservation(
    hwpx_dir: str | os.PathLike[str],
    pdf_dir: str | os.PathLike[str] | None = None,
    hml_dir: Folders = None,
    *,
    hwp_dir: Folders = None,
    engines: Sequence[str] = ("pymupdf", "pdfplumber"),
    per_engine: bool = True,
    stitch: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score the ground-truth self-test and each given pathway; returns the JSON-able results.

    Ground truth: the tables of each ``.hwpx`` in ``hwpx_dir``; with ``hwp_dir`` (one folder
    or several), the tables of each binary HWP 5 file whose base name has no readable HWPX
    there (read by :class:`HWPReader`, the same table model). An HWP 5 file that has an HWPX
    twin is scored instead, as the ``HWP 5`` pathway. ``hml_dir`` may also be several folders
    (the first holding a base name wins). ``per_engine`` also scores each PDF engine alone
    (from the same extraction) when more than one engine is used; ``stitch`` adds a row for
    the PDF tables joined across page breaks (:func:`stitch_pages`, beyond the paper)."""
    from llama_index.readers.hwpx import HMLReader, HWPReader, HWPXError, HWPXReader

    say = progress or (lambda msg: None)
    if pdf_dir is not None:
        engines = check_engines(engines)
    hwpx = _files(hwpx_dir, ".hwpx")
    hwps = _files(hwp_dir, ".hwp")
    pdfs = _files(pdf_dir, ".pdf")
    hmls = _files(hml_dir, ".hml")
    unreadable: list[dict[str, str]] = []
    unpaired: list[dict[str, str]] = []

    gt: dict[str, list[GTTable]] = {}
    source: dict[str, str] = {}
    self_rec: dict[str, list[Grid]] = {}
    for stem, path in hwpx.items():
        try:
            tables = HWPXReader().load_tables(path)
        except (HWPXError, OSError) as exc:
            unreadable.append({"pathway": "hwpx", "file": str(path), "error": str(exc)})
            continue
        gt[stem] = ground_truth(tables)
        source[stem] = "hwpx"
        self_rec[stem] = [_grid(t) for t in tables]
    hwp_rec: dict[str, list[Grid]] = {}
    for stem, path in hwps.items():
        try:
            tables = HWPReader().load_tables(path)
        except (HWPXError, OSError) as exc:
            unreadable.append({"pathway": "hwp", "file": str(path), "error": str(exc)})
            continue
        if stem in gt:  # an HWPX twin: the HWP 5 reader is a pathway scored against it
            hwp_rec[stem] = [_grid(t) for t in tables]
            continue
        gt[stem] = ground_truth(tables)
        source[stem] = "hwp"
        self_rec[stem] = [_grid(t) for t in tables]
    n_hwp = sum(1 for v in source.values() if v == "hwp")
    say(f"ground truth: {len(gt) - n_hwp} HWPX + {n_hwp} HWP 5 documents")

    def pair(kind: str, files: dict[str, Path]) -> dict[str, Path]:
        out = {}
        for stem, path in files.items():
            if stem in gt:
                out[stem] = path
            else:
                why = "HWPX twin unreadable" if stem in hwpx else (
                    "HWP 5 twin unreadable" if stem in hwps else "no HWPX or HWP 5 twin")
                unpaired.append({"pathway": kind, "file": str(path), "reason": why})
        return out

    of = {"hwpx": "HWPX", "hwp": "HWP 5"}
    pathways = [
        _pathway_block(f"{of[kind]} (self-test)", gt,
                       {d: g for d, g in self_rec.items() if source[d] == kind})
        for kind in ("hwpx", "hwp") if kind == "hwpx" or n_hwp
    ]
    if hwp_rec:
        pathways.append(_pathway_block("HWP 5", gt, hwp_rec))
        say(f"hwp: {len(hwp_rec)} documents with an HWPX twin")
    hml_rec: dict[str, list[Grid]] = {}
    for stem, path in pair("hml", hmls).items():
        try:
            hml_rec[stem] = [_grid(t) for t in HMLReader().load_tables(path)]
        except (HWPXError, OSError) as exc:
            unreadable.append({"pathway": "hml", "file": str(path), "error": str(exc)})
    if hml_dir is not None:
        pathways.append(_pathway_block("HML", gt, hml_rec))
        say(f"hml: {len(hml_rec)} documents")

    if pdf_dir is not None:
        extracted: dict[str, list[PDFTable]] = {}
        for stem, path in pair("pdf", pdfs).items():
            say(f"pdf: {path.name}")
            try:
                extracted[stem] = extract_pdf_tables(path, engines)
            except (PDFTableError, OSError) as exc:
                unreadable.append({"pathway": "pdf", "file": str(path), "error": str(exc)})
        label = "PDF (union)" if len(engines) > 1 else f"PDF ({engines[0]})"
        union = {d: [t.rows for t in ts] for d, ts in extracted.items()}
        pathways.append(_pathway_block(label, gt, union))
        if stitch:
            joined = {d: [t.rows for t in stitch_pages(ts)] for d, ts in extracted.items()}
            pathways.append(_pathway_block(f"{label[:-1]}, stitched)", gt, joined))
        if per_engine and len(engines) > 1:
            for e in engines:
                alone = {d: [t.rows for t in ts if t.engine == e] for d, ts in extracted.items()}
                pathways.append(_pathway_block(f"PDF ({e})", gt, alone))
    return {
        "hwpx_dir": str(hwpx_dir),
        "hwp_dir": _folder_list(hwp_dir),
        "pdf_dir": None if pdf_dir is None else str(pdf_dir),
        "hml_dir": _folder_list(hml_dir),
        "ground_truth": dict(sorted(source.items())),
        "engines": list(engines) if pdf_dir is not None else [],
        "pathways": pathways,
        "unpaired": unpaired,
        "unreadable": unreadable,
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_preservation_report(results: dict[str, Any], command: str = "") -> str:
    """Markdown: Table 7 (pathway, scope, docs, GT tables, GT cells, preservation, detection),
    robustness and bimodality, per-document PDF breakdown, unpaired/unreadable files."""
    lines = ["# Level-1 table preservation against HWPX cell-coordinate ground truth", ""]
    kinds = list(results.get("ground_truth", {}).values())
    if kinds.count("hwp"):
        lines[0] = "# Level-1 table preservation against HWPX / HWP 5 cell-coordinate ground truth"
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        "| Pathway | Scope | Docs | GT tables | GT cells | Cell preservation | Table detection |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in results["pathways"]:
        for scope in ("2x2", "all"):
            s = p["summary"][scope]
            label = "≥2×2" if scope == "2x2" else "all"
            if not s["tables"]:
                lines.append(f"| {p['pathway']} | {label} | {s['documents']} | 0 | 0 | – | – |")
                continue
            lines.append(
                f"| {p['pathway']} | {label} | {s['documents']} | {s['tables']} | {s['cells']} "
                f"| {_pct(s['preservation'])} | {_pct(s['detection'])} |"
            )
    lines += [
        "",
        "Cell preservation = share of ground-truth cell values found (normalised text "
        "containment) in the aligned recovered table; detection = share of ground-truth tables "
        "with ≥ 50 % of their cells recovered. Ground truth = non-nested HWPX tables with text, "
        "non-empty cells"
        + (f"; {kinds.count('hwpx')} documents from HWPX, {kinds.count('hwp')} from binary HWP 5 "
           "(no HWPX twin; the HWP 5 row scores the HWP 5 reader on the documents that have one)."
           if kinds.count("hwp") else "."),
        "",
        "## Robustness and bimodality (≥2×2)",
        "",
        "| Pathway | all cells | excl. 1-char cells | excl. cells < 3 chars "
        "| tables ≥ 99 % | tables 0 % |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in results["pathways"]:
        s = p["summary"]["2x2"]
        r2 = p["robustness"]["min_chars_2"]["2x2"]
        r3 = p["robustness"]["min_chars_3"]["2x2"]
        if not s["tables"]:
            lines.append(f"| {p['pathway']} | – | – | – | 0 of 0 | 0 of 0 |")
            continue
        lines.append(
            f"| {p['pathway']} | {_pct(s['preservation'])} | {_pct(r2['preservation'])} "
            f"| {_pct(r3['preservation'])} | {s['perfect']} of {s['tables']} "
            f"| {s['lost']} of {s['tables']} |"
        )
    p = _first_pdf(results)
    if p is not None:
        lines += [
            "",
            f"## {p['pathway']}: per document",
            "",
            "| Document | GT tables | GT cells | recovered tables | preservation ≥2×2 "
            "| preservation all | detection all |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for d in sorted(p["per_document"], key=lambda d: d["all"]["preservation"]):
            a, b = d["all"], d["2x2"]
            big = _pct(b["preservation"]) if b["tables"] else "–"
            lines.append(
                f"| {d['document']} | {a['tables']} | {a['cells']} | {d['recovered_tables']} "
                f"| {big} | {_pct(a['preservation'])} | {_pct(a['detection'])} |"
            )
    if results["unpaired"] or results["unreadable"]:
        lines += ["", "## Files not scored", ""]
        for u in results["unpaired"]:
            lines.append(f"- unpaired ({u['pathway']}): `{u['file']}`: {u['reason']}")
        for u in results["unreadable"]:
            lines.append(f"- unreadable ({u['pathway']}): `{u['file']}`: {u['error']}")
    return "\n".join(lines) + "\n"


def _first_pdf(results: dict[str, Any]) -> dict[str, Any] | None:
    for p in results["pathways"]:
        if p["pathway"].startswith("PDF"):
            return p
    return None


def write_preservation_outputs(
    results: dict[str, Any], out_dir: str | os.PathLike[str], command: str = ""
) -> list[Path]:
    """Write ``results.json``, ``report.md`` and ``preservation.png`` (when matplotlib is
    installed) to ``out_dir``; returns the paths written."""
    from llama_index_car.evaluation.plots import plot_preservation

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    rj = out / "results.json"
    rj.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    written.append(rj)
    rm = out / "report.md"
    rm.write_text(render_preservation_report(results, command), encoding="utf-8")
    written.append(rm)
    png = plot_preservation(results, out / "preservation.png")
    if png is not None:
        written.append(png)
    return written

