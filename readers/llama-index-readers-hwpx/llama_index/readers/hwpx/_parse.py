"""One tree walk over a section XML: blocks (paragraphs, notes, tables) and the table list.

Blocks are JSON-able dicts so they can ride in Document metadata for the node parser:

- ``{"type": "paragraph", "text", "section", "location", "outline"}`` (``location`` is
  ``body``/``textbox``/``caption``/``note``/``header_footer``; ``outline`` the 1-based outline
  level from header.xml or 0). Heading classification happens later (:mod:`._headings`).
- ``{"type": "table", "index", "section"}``: the table itself is ``tables[index]``.

A paragraph's text keeps its runs, tabs (``\\t``), line breaks (``\\n``), special spaces (as
" "). A footnote/endnote leaves a marker ``[^N]`` / ``[^eN]`` where it is anchored and its text
follows the paragraph as ``[^N]: text`` (never spliced into the sentence). Text boxes
(``hp:drawText``) and picture captions follow their anchoring paragraph. A table cell's text
goes into the :class:`HWPXCell` only; a nested table's text only into the nested table.

The table list is in document pre-order. A table anywhere inside a cell (also in a text box,
footnote or page header/footer anchored there) has that cell as parent and depth + 1; page
header/footer tables are always listed, their blocks kept unless ``include_headers_footers`` is off.

Limits (:class:`~._package.Limits`) are enforced during the walk, before anything large is
built: a table's declared ``rowCnt`` x ``colCnt`` (each counted as at least 1), its grid as
cells grow it, and its number of ``hp:tc`` are bounded by ``max_table_cells``; nesting by
``max_table_depth``; the file's rendered text by ``max_text_chars``, charged as the walk goes
(paragraph text, and for each table an upper bound of its markdown/HTML rendering computed
from the grid and cell texts, see :func:`table_text_bound`). Violations raise
:class:`HWPXLimitError`. Cells that overlap (same anchor, or inside another cell's span) keep
their text (the renderers join it) and are recorded in :attr:`FileState.warnings`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.readers.hwpx._errors import HWPXFormatError, HWPXLimitError
from llama_index.readers.hwpx._model import HWPXCell, HWPXTable, HWPXTableParent, make_cell
from llama_index.readers.hwpx._package import Limits
from lxml import etree

Block = dict[str, Any]

_LOCAL: dict[str, str] = {}


def _ln(tag: object) -> str:
    if tag.__class__ is not str:
        return ""
    try:
        return _LOCAL[tag]  # type: ignore[index]
    except KeyError:
        name = tag.rpartition("}")[2]  # type: ignore[attr-defined]
        _LOCAL[tag] = name  # type: ignore[index]
        return name


_SPECIAL_CHARS = {
    "tab": "\t",
    "lineBreak": "\n",
    "nbSpace": " ",
    "fwSpace": " ",
    "hyphen": "-",
}
# subtrees that never hold document text
_SKIP = frozenset(
    {
        "linesegarray",
        "secPr",
        "colPr",
        "parameters",
        "hiddenComment",
        "pageNum",
        "pageHiding",
        "newNum",
        "pageNumCtrl",
        "indexmark",
        "bookmark",
        "fieldEnd",
        "shapeComment",
        "renderingInfo",
        "lineShape",
        "fillBrush",
        "imgRect",
        "imgClip",
        "imgDim",
        "img",
        "effects",
    }
)


def _first_branch(switch: etree._Element) -> etree._Element | None:
    default = None
    for child in switch:
        name = _ln(child.tag)
        if name == "case":
            return child
        if name == "default" and default is None:
            default = child
    return default


@dataclass
class FileState:
    """State shared by the sections of one file (table list, note counters)."""

    file: str
    limits: Limits
    outline: dict[str, int]
    include_headers_footers: bool = False
    tables: list[HWPXTable | None] = field(default_factory=list)
    footnotes: int = 0
    endnotes: int = 0
    text_chars: int = 0  # rendered text charged so far (see SectionWalker._charge)
    warnings: list[str] = field(default_factory=list)


def _escaped_len(text: str) -> int:
    r"""Upper bound of ``len`` of ``text`` escaped for a markdown or an HTML table cell
    (``\n`` -> ``<br>``, ``|``/``\\`` -> 2 chars, ``&<>"'`` -> at most 6 chars)."""
    if text.isalnum():
        return len(text)
    return (
        len(text)
        + 3 * text.count("\n")
        + text.count("|")
        + text.count("\\")
        + 5 * (text.count("&") + text.count('"') + text.count("'"))
        + 3 * (text.count("<") + text.count(">"))
    )


def table_text_bound(n_rows: int, n_cols: int, cells: Sequence[HWPXCell]) -> int:
    """Upper bound of the characters :func:`~._model.render_table` writes for a table.

    Following the renderer's choice of form: a sparse layout table (>= 12 cells, under a
    third with text) writes its texts joined by `` | ``, one line per row; otherwise a
    markdown pipe table writes every rendered row (at most the rows text covers) as ``| ``
    + ``n_cols`` cells joined by `` | `` + `` |`` plus one ``|---|...`` line, and with
    merged cells HTML writes at most 40 characters of ``<td rowspan=.. colspan=..>`` markup
    per cell and 9 per row. Cell texts count escaped (:func:`_escaped_len`).
    """
    filled = [c for c in cells if c.text.strip()]
    if not filled:
        return 0
    rows = min(sum(c.row_span for c in filled), max(n_rows, 1))
    if len(cells) >= 12 and 3 * len(filled) < len(cells):
        return sum(len(c.text) + 3 for c in filled) + rows
    # _escaped_len counts single characters, so it adds up over a concatenation
    text = _escaped_len("".join([c.text for c in cells]))
    markdown = text + rows * (3 * n_cols + 4) + 4 * n_cols + 1
    if all(c.row_span == 1 and c.col_span == 1 for c in cells):
        return markdown
    return max(markdown, text + 20 + 9 * rows + 40 * len(cells))


class SectionWalker:
    """Walk one ``hs:sec`` tree. Call :meth:`walk`; blocks accumulate in ``self.blocks``."""

    def __init__(self, state: FileState, section: int, part: str) -> None:
        self.st = state
        self.section = section
        self.part = part
        self.blocks: list[Block] = []
        self._in_note = 0

    # ------------------------------------------------------------------ helpers
    def _charge(self, n: int, what: str, line: int | None) -> None:
        """Count ``n`` characters of rendered text against ``max_text_chars``."""
        st = self.st
        st.text_chars += n
        cap = st.limits.max_text_chars
        if st.text_chars > cap:
            raise HWPXLimitError(
                st.file,
                f"rendered text would exceed max_text_chars={cap} (at least {st.text_chars} "
                f"characters by the {what}" + ("" if line is None else f" at line {line}") + ")",
                limit="max_text_chars", value=st.text_chars, maximum=cap, part=self.part,
            )

    def _limit_cells(self, tbl: etree._Element, what: str, value: int) -> None:
        cap = self.st.limits.max_table_cells
        if value > cap:
            raise HWPXLimitError(
                self.st.file,
                f"table {what} {value} exceeds max_table_cells={cap} (line {tbl.sourceline})",
                limit="max_table_cells", value=value, maximum=cap, part=self.part,
            )

    def _int(self, el: etree._Element, attr: str, default: int) -> int:
        raw = el.get(attr)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise HWPXFormatError(
                self.st.file,
                f"attribute {attr}={raw[:20]!r} of <{_ln(el.tag)}> is not an integer "
                f"(line {el.sourceline})",
                part=self.part,
            ) from None
        if value < 0 or value > 1_000_000_000:
            raise HWPXFormatError(
                self.st.file,
                f"attribute {attr}={value} of <{_ln(el.tag)}> is out of range "
                f"(line {el.sourceline})",
                part=self.part,
            )
        return value

    def _inline(self, el: etree._Element, out: list[Any]) -> int:
        """Text pieces (str) and object events (tuples) of ``el``'s subtree, in order.

        Returns the number of object events appended (0: ``out`` got text only)."""
        local = _LOCAL
        special = _SPECIAL_CHARS
        n_obj = 0
        for child in el:
            tag = child.tag
            name = local.get(tag) or _ln(tag)  # type: ignore[call-overload]
            if name == "t":
                text = child.text
                if text:
                    out.append(text)
                if len(child):
                    for c in child:
                        ctag = c.tag
                        s = special.get(local.get(ctag) or _ln(ctag))  # type: ignore[call-overload]
                        if s is not None:
                            out.append(s)
                        tail = c.tail
                        if tail:
                            out.append(tail)
            elif name == "run":
                n_obj += self._inline(child, out)
            elif name == "tbl":
                out.append(("tbl", child))
                n_obj += 1
            elif name == "footNote" or name == "endNote":
                out.append(("note", name, child))
                n_obj += 1
            elif name == "drawText" or name == "subList":
                out.append(("box", child))
                n_obj += 1
            elif name == "caption":
                out.append(("cap", child))
                n_obj += 1
            elif name == "header" or name == "footer" or name == "masterPage":
                out.append(("hf", child))
                n_obj += 1
            elif name in _SKIP:
                continue
            elif name == "switch":
                # alternative renderings: read one branch (the first case, else the default)
                branch = _first_branch(child)
                if branch is not None:
                    n_obj += self._inline(branch, out)
            elif name == "autoNum":
                if not self._in_note:
                    out.append(child.get("num", ""))
            elif name == "checkBtn" or name == "radioBtn":
                mark = "☑" if child.get("value") == "CHECKED" else "☐"
                out.append(f"{mark}{child.get('caption', '')}")
            elif name == "script":
                if child.text:
                    out.append(child.text)
            elif len(child):
                n_obj += self._inline(child, out)
        return n_obj

    # ------------------------------------------------------------------ paragraphs
    def walk(self, root: etree._Element) -> list[Block]:
        self._container(root, self.blocks, "body", 0, None)
        return self.blocks

    def _container(
        self,
        el: etree._Element,
        blocks: list[Block],
        location: str,
        depth: int,
        parent: HWPXTableParent | None,
    ) -> None:
        """Paragraphs directly in ``el`` (a ``hs:sec``, ``hp:subList``, ``hp:drawText``...)."""
        for child in el:
            name = _ln(child.tag)
            if name == "p":
                self._paragraph(child, blocks, location, depth, parent)
            elif name == "subList":
                self._container(child, blocks, location, depth, parent)

    def _note_label(self, kind: str) -> str:
        if kind == "footNote":
            self.st.footnotes += 1
            return str(self.st.footnotes)
        self.st.endnotes += 1
        return f"e{self.st.endnotes}"

    def _note_block(
        self,
        label: str,
        note: etree._Element,
        depth: int,
        parent: HWPXTableParent | None,
    ) -> list[Block]:
        """``[^label]: text`` and the blocks of the note's tables (which sit where the note is
        anchored: ``depth``/``parent`` of its paragraph, the enclosing cell inside a table)."""
        sub: list[Block] = []
        self._in_note += 1
        try:
            self._container(note, sub, "note", depth, parent)
        finally:
            self._in_note -= 1
        text = " ".join(b["text"] for b in sub if b["type"] == "paragraph")
        head: Block = {
            "type": "paragraph",
            "text": f"[^{label}]: {text.strip()}",
            "section": self.section,
            "location": "note",
            "outline": 0,
        }
        return [head] + [b for b in sub if b["type"] != "paragraph"]

    def _paragraph_block(self, text: str, location: str, outline: int) -> Block:
        """A paragraph block of the current section (its text charged to ``max_text_chars``;
        8 more for a heading's ``#`` prefix and the blank line between blocks)."""
        self._charge(len(text) + 8, "paragraphs", None)
        return {
            "type": "paragraph",
            "text": text,
            "section": self.section,
            "location": location,
            "outline": outline,
        }

    def _paragraph(
        self,
        p: etree._Element,
        blocks: list[Block],
        location: str,
        depth: int,
        parent: HWPXTableParent | None,
    ) -> None:
        events: list[Any] = []
        n_obj = self._inline(p, events)
        outline = self.st.outline.get(p.get("paraPrIDRef", ""), 0) if location == "body" else 0
        if not n_obj:
            text = "".join(events).strip()
            if text:
                blocks.append(self._paragraph_block(text, location, outline))
            return
        buf: list[str] = []
        deferred: list[Block] = []
        first = True

        def flush() -> None:
            nonlocal first
            text = "".join(buf).strip()
            buf.clear()
            if text:
                blocks.append(self._paragraph_block(text, location, outline if first else 0))
                first = False

        for ev in events:
            if isinstance(ev, str):
                buf.append(ev)
                continue
            kind = ev[0]
            if kind == "tbl":
                flush()
                self._table(ev[1], blocks, location, depth, parent)
            elif kind == "note":
                label = self._note_label(ev[1])
                buf.append(f"[^{label}]")
                deferred.extend(self._note_block(label, ev[2], depth, parent))
            elif kind == "box":
                self._container(ev[1], deferred, "textbox", depth, parent)
            elif kind == "cap":
                self._container(ev[1], deferred, "caption", depth, parent)
            elif kind == "hf":
                sub: list[Block] = []
                self._container(ev[1], sub, "header_footer", depth, parent)
                if self.st.include_headers_footers:
                    deferred.extend(sub)
        flush()
        blocks.extend(deferred)

    # ------------------------------------------------------------------ tables
    def _lines(
        self, container: etree._Element, nested: list[tuple[str, etree._Element]]
    ) -> list[str]:
        """Own lines of a cell (or a text box inside a cell).

        Objects inside the cell that are not its text (nested tables, footnotes/endnotes, page
        headers/footers) are collected in ``nested`` as ``(kind, element)`` in document order;
        :meth:`_table` reads them once the cell exists, so their tables get the cell as parent
        and come in document pre-order."""
        lines: list[str] = []
        local = _LOCAL
        events: list[Any] = []  # reused for every paragraph (fewer allocations)
        for p in container:
            tag = p.tag
            name = local.get(tag) or _ln(tag)  # type: ignore[call-overload]
            if name == "subList":
                lines.extend(self._lines(p, nested))
                continue
            if name != "p":
                continue
            events.clear()
            if not self._inline(p, events):
                line = "".join(events).strip()
                if line:
                    lines.append(line)
                continue
            buf: list[str] = []
            extra: list[str] = []
            for ev in events:
                if isinstance(ev, str):
                    buf.append(ev)
                elif ev[0] == "tbl" or ev[0] == "hf":
                    nested.append((ev[0], ev[1]))
                elif ev[0] == "note":
                    nested.append((ev[1], ev[2]))  # footNote / endNote
                elif ev[0] in ("box", "cap"):
                    extra.extend(self._lines(ev[1], nested))
            line = "".join(buf).strip()
            if line:
                lines.append(line)
            lines.extend(extra)
        return lines

    def _caption(self, tbl: etree._Element) -> str | None:
        for child in tbl:
            if _ln(child.tag) == "caption":
                parts: list[Block] = []
                self._container(child, parts, "caption", 0, None)
                text = " ".join(b["text"] for b in parts if b["type"] == "paragraph").strip()
                return text or None
        return None

    def _table(
        self,
        tbl: etree._Element,
        blocks: list[Block],
        location: str,
        depth: int,
        parent: HWPXTableParent | None,
    ) -> None:
        limits = self.st.limits
        if depth >= limits.max_table_depth:
            raise HWPXLimitError(
                self.st.file,
                f"tables nested deeper than max_table_depth={limits.max_table_depth} "
                f"(line {tbl.sourceline})",
                limit="max_table_depth", value=depth + 1, maximum=limits.max_table_depth,
                part=self.part,
            )
        index = len(self.st.tables)
        self.st.tables.append(None)  # reserve: a parent precedes its nested tables
        n_rows = self._int(tbl, "rowCnt", 0)
        n_cols = self._int(tbl, "colCnt", 0)
        # the declared grid, before any cell is read (an empty table with rowCnt=10^9 would
        # otherwise reach consumers that allocate per row); 0 counts as 1
        self._limit_cells(
            tbl, f"declares a {n_rows}x{n_cols} grid:", max(n_rows, 1) * max(n_cols, 1)
        )
        caption = self._caption(tbl)
        cells: list[HWPXCell] = []
        after: list[Block] = []
        row_no = -1
        local = _LOCAL
        max_cells = limits.max_table_cells
        lines_of = self._lines
        # per-cell collector, shared by the cells of this table and emptied after each cell
        nested: list[tuple[str, etree._Element]] = []
        # grid positions taken so far; overlap checks stop at the first overlap found (each
        # position is then marked at most once: O(grid) work, whatever the spans)
        taken: set[tuple[int, int]] | None = set()
        for tr in tbl.iterchildren("{*}tr"):
            row_no += 1
            col_no = 0
            for tc in tr.iterchildren("{*}tc"):
                r, c, rs, cs = row_no, col_no, 1, 1
                lines: Sequence[str] = ()
                for part in tc:
                    tag = part.tag
                    name = local.get(tag) or _ln(tag)  # type: ignore[call-overload]
                    if name == "subList":
                        lines = lines_of(part, nested)
                    elif name == "cellAddr":
                        try:
                            r = int(part.get("rowAddr", row_no))
                            c = int(part.get("colAddr", col_no))
                        except ValueError:  # the slow path names the bad attribute
                            r = self._int(part, "rowAddr", row_no)
                            c = self._int(part, "colAddr", col_no)
                        if r < 0 or c < 0:
                            self._int(part, "rowAddr", 0)
                            self._int(part, "colAddr", 0)
                    elif name == "cellSpan":
                        try:
                            rs = int(part.get("rowSpan", 1))
                            cs = int(part.get("colSpan", 1))
                        except ValueError:
                            rs = self._int(part, "rowSpan", 1)
                            cs = self._int(part, "colSpan", 1)
                        rs = rs if rs > 1 else 1
                        cs = cs if cs > 1 else 1
                col_no = c + cs
                if len(cells) >= max_cells:
                    self._limit_cells(tbl, "cell count", len(cells) + 1)
                cell = make_cell(r, c, rs, cs, "\n".join(lines))
                cells.append(cell)
                if r + rs > n_rows:
                    n_rows = r + rs
                if c + cs > n_cols:
                    n_cols = c + cs
                if n_rows * n_cols > max_cells:
                    self._limit_cells(tbl, f"grid {n_rows}x{n_cols}:", n_rows * n_cols)
                if taken is not None:
                    if rs == 1 and cs == 1 and (r, c) not in taken:  # the common case
                        taken.add((r, c))
                    elif self._overlaps(taken, cell, index, tc):
                        taken = None
                if nested:
                    self._cell_objects(nested[:], after, location, depth + 1, index, cell)
                    nested.clear()
        self._charge(table_text_bound(n_rows, n_cols, cells), "table", tbl.sourceline)
        self.st.tables[index] = HWPXTable(
            n_rows=n_rows,
            n_cols=n_cols,
            cells=cells,
            depth=depth,
            parent=parent,
            section=self.section,
            caption=caption,
            index=index,
            location=location,
        )
        blocks.append({"type": "table", "index": index, "section": self.section})
        blocks.extend(after)

    def _overlaps(
        self, taken: set[tuple[int, int]], cell: HWPXCell, index: int, tc: etree._Element
    ) -> bool:
        """Mark ``cell``'s grid positions in ``taken``; on the first position already taken,
        record a warning (the cell and its text are kept) and return True."""
        for r in range(cell.row, cell.row + cell.row_span):
            for c in range(cell.col, cell.col + cell.col_span):
                if (r, c) in taken:
                    self.st.warnings.append(
                        f"table {index}: cell at ({cell.row}, {cell.col}) (line {tc.sourceline}) "
                        f"overlaps another cell at ({r}, {c}); both texts are kept"
                    )
                    return True
                taken.add((r, c))
        return False

    def _cell_objects(
        self,
        objects: list[tuple[str, etree._Element]],
        after: list[Block],
        location: str,
        depth: int,
        index: int,
        cell: HWPXCell,
    ) -> None:
        """Read what :meth:`_lines` collected in ``cell`` (of table ``index``), in document
        order: its tables are ``depth`` deep with the cell as parent. Blocks go to ``after``:
        nested tables first, then notes (and headers/footers if included)."""
        link = HWPXTableParent(index, cell)
        notes: list[Block] = []
        for kind, el in objects:
            if kind == "tbl":
                self._table(el, after, location, depth, link)
            elif kind == "hf":
                sub: list[Block] = []
                self._container(el, sub, "header_footer", depth, link)
                if self.st.include_headers_footers:
                    notes.extend(sub)
            else:
                notes.extend(self._note_block(self._note_label(kind), el, depth, link))
        after.extend(notes)
