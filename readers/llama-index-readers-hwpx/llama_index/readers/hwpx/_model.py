"""Table model: cells placed by ``hp:cellAddr`` / ``hp:cellSpan``, and their renderings.

Example::

    >>> outer = HWPXTable(1, 2, [HWPXCell(0, 0, text="구분"), HWPXCell(0, 1, text="기준")])
    >>> inner = HWPXTable(1, 1, [HWPXCell(0, 0, text="2.5 m")], depth=1, index=1,
    ...                   parent=HWPXTableParent(0, outer.cells[1]))
    >>> inner.parent.table_index, inner.parent.cell.col, outer.to_grid()
    (0, 1, [['구분', '기준']])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import NamedTuple

__all__ = ["HWPXCell", "HWPXTable", "HWPXTableParent", "render_table"]


@dataclass(frozen=True, slots=True)
class HWPXCell:
    """One ``hp:tc``: grid anchor (0-based ``row``, ``col``), spans and its own text.

    ``text`` is the cell's own paragraphs (and text boxes) joined by ``"\\n"``, each stripped,
    empty ones skipped; text of a table nested in the cell belongs to that table.
    """

    row: int
    col: int
    row_span: int = 1
    col_span: int = 1
    text: str = ""


_new_object = object.__new__
_set_row, _set_col, _set_row_span, _set_col_span, _set_text = (
    HWPXCell.__dict__[name].__set__ for name in ("row", "col", "row_span", "col_span", "text")
)


def make_cell(row: int, col: int, row_span: int, col_span: int, text: str) -> HWPXCell:
    """``HWPXCell(row, col, row_span, col_span, text)``, about twice as fast: the walker
    makes one per ``hp:tc``, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; this fills the same slots through their descriptors (an equal
    object: same fields, hash and repr; no validation happens either way)."""
    cell = _new_object(HWPXCell)
    _set_row(cell, row)
    _set_col(cell, col)
    _set_row_span(cell, row_span)
    _set_col_span(cell, col_span)
    _set_text(cell, text)
    return cell


class HWPXTableParent(NamedTuple):
    """Where a nested table sits: the containing table's index and the containing cell."""

    table_index: int
    cell: HWPXCell


@dataclass
class HWPXTable:
    """One ``hp:tbl``.

    Attributes:
        n_rows, n_cols: ``rowCnt`` x ``colCnt`` (grown if a cell lies outside them).
        cells: direct cells in ``hp:tc`` order (each placed by its address, not by order).
        depth: 0 for a top-level table, 1 inside a cell of a top-level table, ...
        parent: :class:`HWPXTableParent` ``(table_index, cell)`` of the cell the table sits in
            (directly, or in a text box, caption, footnote/endnote or page header/footer
            anchored in that cell), or None for a top-level table. ``parent`` is None exactly
            when ``depth`` is 0; otherwise ``depth`` is the parent table's depth + 1.
        section: 0-based section position in spine order.
        caption: ``hp:caption`` text or None.
        index: position in :meth:`HWPXReader.load_tables` order (pre-order, spine order).
        location: ``"body"``, ``"textbox"``, ``"note"`` or ``"header_footer"``.

    Example::

        >>> t = HWPXTable(2, 2, [HWPXCell(0, 0, 1, 2, "A"), HWPXCell(1, 0, 1, 1, "b"),
        ...                      HWPXCell(1, 1, 1, 1, "c")])
        >>> t.to_grid()
        [['A', 'A'], ['b', 'c']]
    """

    n_rows: int
    n_cols: int
    cells: list[HWPXCell] = field(default_factory=list)
    depth: int = 0
    parent: HWPXTableParent | None = None
    section: int = 0
    caption: str | None = None
    index: int = 0
    location: str = "body"

    @property
    def has_merged_cells(self) -> bool:
        return any(c.row_span > 1 or c.col_span > 1 for c in self.cells)

    def to_grid(self) -> list[list[str]]:
        """``n_rows`` x ``n_cols`` texts; a merged cell's text fills every position it covers."""
        grid = [["" for _ in range(self.n_cols)] for _ in range(self.n_rows)]
        for c in self.cells:
            for r in range(c.row, min(c.row + c.row_span, self.n_rows)):
                row = grid[r]
                for k in range(c.col, min(c.col + c.col_span, self.n_cols)):
                    row[k] = _join(row[k], c.text)  # overlapping cells: keep both texts
        return grid

    def to_markdown(self) -> str:
        """Markdown pipe table when no cell is merged, else an HTML ``<table>`` (row/colspan).

        The first row is the header row. ``|`` is escaped and newlines become ``<br>``.
        """
        return render_table(self.cells, self.n_rows, self.n_cols)

    def to_dict(self) -> dict[str, object]:
        """JSON-able form (used for the node parser's structure metadata)."""
        return {
            "index": self.index,
            "n_rows": self.n_rows,
            "n_cols": self.n_cols,
            "depth": self.depth,
            "section": self.section,
            "caption": self.caption,
            "parent": None
            if self.parent is None
            else [self.parent.table_index, self.parent.cell.row, self.parent.cell.col],
            "cells": [[c.row, c.col, c.row_span, c.col_span, c.text] for c in self.cells],
        }


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")


def _html_cell(text: str) -> str:
    return escape(text).replace("\n", "<br>")


def _join(old: str, new: str) -> str:
    """Text of a grid position two cells claim: both, in cell order (one if equal/empty)."""
    return new if not old or old == new else (old if not new else f"{old}\n{new}")


def _col(c: HWPXCell) -> int:
    return c.col


def is_sparse(cells: Sequence[HWPXCell]) -> bool:
    """At least 12 cells and more than 2/3 of them empty (a layout table, e.g. an org chart)."""
    return len(cells) >= 12 and 3 * sum(1 for c in cells if c.text.strip()) < len(cells)


def render_table(
    cells: Sequence[HWPXCell],
    n_rows: int,
    n_cols: int,
    rows: Iterable[int] | None = None,
    sparse: bool | None = None,
) -> str:
    """Render ``cells`` (all of them, or only those anchored in ``rows``) as markdown or HTML.

    Rows no text covers are left out (layout rows of forms); an all-empty table renders as "".
    Markdown pipe tables are used when no selected cell spans more than one row or column;
    otherwise HTML with ``rowspan``/``colspan`` (a row span counts only the rendered rows).

    A sparse layout table (at least 12 cells, more than 2/3 of them empty, e.g. an org chart
    drawn with cells) renders as one line per row of its non-empty cells joined by " | ".
    ``sparse`` overrides that test (pass the whole table's verdict when rendering a subset of
    its cells, so every piece of a split table renders alike).

    >>> print(render_table([HWPXCell(0, 0, 1, 1, "a"), HWPXCell(0, 1, 1, 1, "b")], 1, 2))
    | a | b |
    |---|---|
    """
    if n_cols <= 0:
        return ""
    filled = [c for c in cells if c.text.strip()]
    covered: set[int] = set()
    for c in filled:
        if c.row_span == 1:
            if c.row < n_rows:
                covered.add(c.row)
        else:
            covered.update(range(c.row, min(c.row + c.row_span, n_rows)))
    if rows is None:
        wanted = sorted(r for r in covered if r >= 0)
    else:
        wanted = sorted(r for r in set(rows) if r in covered)
    if not wanted:
        return ""
    row_set = set(wanted)
    chosen = [c for c in cells if c.row in row_set]
    if sparse is None:
        sparse = is_sparse(cells)
    if sparse:
        by_row_text: dict[int, list[HWPXCell]] = {}
        for c in chosen:
            if c.text.strip():
                by_row_text.setdefault(c.row, []).append(c)
        return "\n".join(
            " | ".join(" ".join(c.text.split()) for c in sorted(by_row_text[r], key=_col))
            for r in wanted
            if r in by_row_text
        )
    merged = any(c.row_span > 1 or c.col_span > 1 for c in chosen)
    if not merged:
        by_pos: dict[tuple[int, int], str] = {}
        for c in chosen:  # cells sharing an anchor (hostile files): keep every text
            by_pos[(c.row, c.col)] = _join(by_pos.get((c.row, c.col), ""), c.text)
        lines: list[str] = []
        for i, r in enumerate(wanted):
            line = "| " + " | ".join(_md_cell(by_pos.get((r, k), "")) for k in range(n_cols))
            lines.append(line + " |")
            if i == 0:
                lines.append("|" + "---|" * n_cols)
        return "\n".join(lines)
    by_row: dict[int, list[HWPXCell]] = {}
    for c in chosen:
        by_row.setdefault(c.row, []).append(c)
    out = ["<table>"]
    for r in wanted:
        tds: list[str] = []
        for c in sorted(by_row.get(r, []), key=_col):
            span = (
                1 if c.row_span == 1 else sum(1 for k in range(r, r + c.row_span) if k in row_set)
            )
            attrs = (f' rowspan="{span}"' if span > 1 else "") + (
                f' colspan="{c.col_span}"' if c.col_span > 1 else ""
            )
            tds.append(f"<td{attrs}>{_html_cell(c.text)}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    out.append("</table>")
    return "".join(out)
