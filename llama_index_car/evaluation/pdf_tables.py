"""PDF table pathway (paper §4.2): PyMuPDF ``find_tables`` ∪ pdfplumber ``extract_tables``.

Optional extra ``pip install 'llama-index-car[pdf]'``: PyMuPDF (AGPL-3.0) and pdfplumber (MIT).
A third engine, Camelot lattice (``camelot-py``, MIT; not in the extra, install it yourself),
is selectable too (beyond the paper; see ``benchmarks/pdf_extractors.py``).
Each engine runs with its default settings on every page; the union is the concatenation of
both engines' tables (the Level-1 alignment then picks, one-to-one, the best of them for each
ground-truth table, which is the lenient-to-PDF choice the paper makes). Each engine is also
selectable alone (``engines=("pymupdf",)``).

Example::

    tables = extract_pdf_tables("standard.pdf")                      # union
    tables = extract_pdf_tables("standard.pdf", engines=("pdfplumber",))
    tables[0].engine, tables[0].page, tables[0].rows                  # rows: list[list[str]]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index_car._errors import (
    CarError,
    ConfigurationError,
    MissingDependencyError,
    require,
)

#: engine name -> (import name, PyPI package)
ENGINES: dict[str, tuple[str, str]] = {
    "pymupdf": ("pymupdf", "PyMuPDF"),
    "pdfplumber": ("pdfplumber", "pdfplumber"),
    "camelot": ("camelot", "camelot-py"),
}


class PDFTableError(CarError, ValueError):
    """A PDF could not be opened or its tables not extracted; the message names the file."""


@dataclass(frozen=True)
class PDFTable:
    """One table an engine found: ``rows[r][c]`` cell text ("" for empty / None cells)."""

    engine: str
    page: int
    rows: list[list[str]]


def _rows(raw: Sequence[Sequence[object]] | None) -> list[list[str]]:
    return [["" if c is None else str(c) for c in row] for row in raw or []]


def _pymupdf(path: str) -> list[PDFTable]:
    import pymupdf

    out: list[PDFTable] = []
    with pymupdf.open(path) as doc:
        for i, page in enumerate(doc):
            for t in page.find_tables().tables:
                out.append(PDFTable("pymupdf", i, _rows(t.extract())))
    return out


def _pdfplumber(path: str) -> list[PDFTable]:
    import pdfplumber

    out: list[PDFTable] = []
    with pdfplumber.open(path) as pdf:
        for i, page in enumerate(pdf.pages):
            for t in page.extract_tables():
                out.append(PDFTable("pdfplumber", i, _rows(t)))
            page.close()  # frees the page's cached objects (long documents)
    return out


def _camelot(path: str) -> list[PDFTable]:
    import camelot

    out: list[PDFTable] = []
    for t in camelot.read_pdf(path, pages="all", flavor="lattice"):
        out.append(PDFTable("camelot", int(t.page) - 1, _rows(t.df.values.tolist())))
    return out


_RUN = {"pymupdf": _pymupdf, "pdfplumber": _pdfplumber, "camelot": _camelot}


def _require_plain(module: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(f"{package} is not installed; run: pip install {package}")


def check_engines(engines: Sequence[str]) -> tuple[str, ...]:
    """Validate engine names and that their packages are installed (one-line install hint)."""
    chosen = tuple(dict.fromkeys(engines))
    if not chosen:
        raise ConfigurationError(f"at least one PDF engine is needed: {', '.join(ENGINES)}")
    for e in chosen:
        if e not in ENGINES:
            raise ConfigurationError(f"unknown PDF engine {e!r}; choose from {', '.join(ENGINES)}")
        module, package = ENGINES[e]
        if e == "camelot":
            _require_plain(module, package)
        else:
            require(module, extra="pdf", package=package)
    return chosen


def extract_pdf_tables(
    path: str | os.PathLike[str], engines: Sequence[str] = ("pymupdf", "pdfplumber")
) -> list[PDFTable]:
    """Tables of every page of ``path`` from each engine in ``engines`` (engine order, then
    page order). Raises :class:`MissingDependencyError` naming the extra when an engine is not
    installed and :class:`PDFTableError` naming the file when it cannot be read."""
    chosen = check_engines(engines)
    label = os.fspath(path)
    out: list[PDFTable] = []
    for e in chosen:
        try:
            out.extend(_RUN[e](label))
        except (CarError, MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:  # engines raise many unrelated types on damaged files
            raise PDFTableError(f"{label}: {e} could not read the PDF: {exc}") from exc
    return out


def stitch_pages(tables: Sequence[PDFTable]) -> list[PDFTable]:
    """Join tables split across a page break (beyond the paper, which scores splits as loss).

    Per engine, a table that is the last one its engine found on page ``p`` and a table that
    is the first one on page ``p + 1`` are joined (rows of the second appended) when both have
    the same column count; chains over several pages join into one table (its ``page`` is the
    first page). Returns new tables; the input is not modified.
    """
    out: list[PDFTable] = []
    by_engine: dict[str, list[PDFTable]] = {}
    for t in tables:
        by_engine.setdefault(t.engine, []).append(t)
    for engine, seq in by_engine.items():
        last_on_page: dict[int, int] = {}
        first_on_page: dict[int, int] = {}
        for i, t in enumerate(seq):
            last_on_page[t.page] = i
            first_on_page.setdefault(t.page, i)
        current: PDFTable | None = None
        end_page = -1
        for i, t in enumerate(seq):
            width = max((len(r) for r in t.rows), default=0)
            joinable = (
                current is not None
                and t.page == end_page + 1
                and first_on_page[t.page] == i
                and last_on_page.get(end_page) == i - 1
                and width == max((len(r) for r in current.rows), default=0)
            )
            if joinable and current is not None:
                current = PDFTable(engine, current.page, current.rows + [list(r) for r in t.rows])
            else:
                if current is not None:
                    out.append(current)
                current = PDFTable(engine, t.page, [list(r) for r in t.rows])
            end_page = t.page
        if current is not None:
            out.append(current)
    return out
