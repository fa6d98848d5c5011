"""Criterion spans: a node cut into the sentences and table rows that could state a criterion.

A section vector is dominated by what the section is *about* (its title, its topic); the
criterion a query seeks sits in one sentence or one table row of its body. :func:`node_spans`
cuts a node into spans a span index embeds one by one (passage role):

* **body segments** — the text outside tables, split at line breaks and sentence ends
  (``. ! ?`` followed by whitespace), short pieces (< :data:`MIN_CHARS`) joined to the next one
  (PDF-extracted text breaks lines mid-sentence), long ones cut at whitespace near
  :data:`MAX_CHARS`. The node's leading ``## title`` line is not a span: the title is what the
  section vector already over-weights.
* **table rows** — every row of every table the node renders (``<table>`` in the node text,
  cells in the ``cells`` metadata of :class:`~llama_index.readers.hwpx.HWPXNodeParser`), read
  as ``header: value`` pairs (the first row's cell over the same column labels each cell;
  cells spanning down from earlier rows are repeated), with the row's coordinates.

Every span carries character offsets ``[start, end)`` into ``node.get_content()`` (for a table
row: the ``<tr>…</tr>`` or markdown ``| … |`` line it was rendered as, when the rendering can
be matched to the cells, else the whole table block), so a caller can highlight it. Pure functions; no model, no llama_index import
beyond reading ``node.get_content()`` and ``node.metadata``.

>>> [s.text for s in text_spans("## 제목\\n\\n경사는 1:1.5 이하로 한다. 배수는 충분히 한다.")]
['경사는 1:1.5 이하로 한다. 배수는 충분히 한다.']
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "MAX_CHARS",
    "MIN_CHARS",
    "Span",
    "node_spans",
    "table_row_spans",
    "text_spans",
]

#: body pieces shorter than this join the next piece (characters)
MIN_CHARS = 40
#: body pieces longer than this are cut at whitespace (characters)
MAX_CHARS = 320
#: spans kept per node (a 35-kchar one-table standard would otherwise give thousands)
MAX_SPANS = 256

_TITLE = re.compile(r"\A\s*#{1,6} [^\n]*\n")
_TABLE = re.compile(r"<table\b.*?</table>", re.S | re.I)
_ROW = re.compile(r"<tr\b.*?</tr>", re.S | re.I)
_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MD_TABLE = re.compile(r"(?:^\|[^\n]*\|[ \t]*(?:\n|\Z))+", re.M)
_MD_RULE = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$")

Kind = Literal["sentence", "row"]


@dataclass(frozen=True, slots=True)
class Span:
    """One span of a node: what is embedded (``text``) and where it sits.

    ``start``/``end``: character offsets into the node's text. Table rows also carry
    ``table_index`` (the reader's ``load_tables`` index; ``None`` for a table known only from
    the HTML), ``row``, ``col`` (the row's first cell), ``row_span``, ``col_span`` (of the
    row: 1 and the table's width) and ``header`` (the header cells labelling it).
    """

    kind: Kind
    text: str
    start: int
    end: int
    table_index: int | None = None
    row: int | None = None
    col: int | None = None
    row_span: int | None = None
    col_span: int | None = None
    header: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``None`` ones left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Span:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _table_blocks(text: str) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """``(start, end, rows)`` of every table block of ``text``, in text order: ``<table>``
    HTML (rows: its ``<tr>`` elements) and markdown pipe tables (rows: its lines, the
    ``|---|`` rule left out)."""
    blocks = []
    for m in _TABLE.finditer(text):
        rows = [(m.start() + r.start(), m.start() + r.end()) for r in _ROW.finditer(m.group())]
        blocks.append((m.start(), m.end(), rows))
    for m in _MD_TABLE.finditer(text):
        if any(a <= m.start() < b for a, b, _ in blocks):
            continue
        rows, pos = [], m.start()
        for line in m.group().split("\n"):
            if line.strip() and not _MD_RULE.match(line.strip()):
                rows.append((pos, pos + len(line.rstrip())))
            pos += len(line) + 1
        blocks.append((m.start(), m.start() + len(m.group().rstrip()), rows))
    return sorted(blocks)


def _pieces(text: str, offset: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of the lines / sentences of ``text`` (offsets shifted by ``offset``)."""
    pos = 0
    for line in text.split("\n"):
        start = pos
        pos += len(line) + 1
        cut = start
        for m in _SENTENCE_END.finditer(line):
            yield offset + cut, offset + start + m.start()
            cut = start + m.end()
        if cut < start + len(line):
            yield offset + cut, offset + start + len(line)


def _clip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _bounded(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` cut at whitespace into pieces of at most ``MAX_CHARS``."""
    while end - start > MAX_CHARS:
        cut = text.rfind(" ", start + MIN_CHARS, start + MAX_CHARS)
        if cut <= start:
            cut = start + MAX_CHARS
        yield _clip(text, start, cut)
        start, _ = _clip(text, cut, end)
    if end > start:
        yield start, end


def text_spans(text: str, *, skip_title: bool = True) -> list[Span]:
    """Body-segment spans of ``text`` outside ``<table>`` blocks (module docstring)."""
    begin = 0
    if skip_title:
        m = _TITLE.match(text)
        if m:
            begin = m.end()
    regions: list[tuple[int, int]] = []
    for a, b, _ in _table_blocks(text):
        if a < begin:
            continue
        regions.append((begin, a))
        begin = b
    regions.append((begin, len(text)))
    spans: list[Span] = []
    pending: tuple[int, int] | None = None
    for lo, hi in regions:
        for a, b in _pieces(text[lo:hi], lo):
            a, b = _clip(text, a, b)
            if a >= b:
                continue
            if pending is not None:
                a = pending[0]
                pending = None
            if b - a < MIN_CHARS:
                pending = (a, b)
                continue
            for s, e in _bounded(text, a, b):
                spans.append(Span("sentence", " ".join(text[s:e].split()), s, e))
        if pending is not None:  # a short tail does not join across a table
            a, b = pending
            pending = None
            if spans and spans[-1].end >= lo and b - spans[-1].start <= MAX_CHARS:
                last = spans.pop()
                a = last.start
            spans.append(Span("sentence", " ".join(text[a:b].split()), a, b))
    return spans


def _cell_text(value: str) -> str:
    return " ".join(_TAG.sub(" ", value).split())


def _row_cells(row: str) -> list[str]:
    """The cell texts of one rendered row (``<tr>…</tr>`` or a ``| a | b |`` line)."""
    if row.lstrip().startswith("|"):
        return [_cell_text(c) for c in row.strip().strip("|").split("|")]
    return [_cell_text(c) for c in _CELL.findall(row)]


def table_row_spans(text: str, metadata: Mapping[str, Any]) -> list[Span]:
    """One span per table row (module docstring): from the ``cells`` metadata when present,
    else from the ``<table>`` HTML of ``text``."""
    found = _table_blocks(text)
    html = [rows for _, _, rows in found]
    cells = _node_cells(metadata)
    spans: list[Span] = []
    if cells:
        tables: dict[int, list[Any]] = {}
        for c in cells:
            tables.setdefault(c.table, []).append(c)
        top = [t for t in tables if tables[t][0].depth == 0]
        blocks = [(a, b) for a, b, _ in found]
        matched = len(top) == len(blocks)
        for t, group in tables.items():
            if matched and t in top:
                rows_html: Sequence[tuple[int, int]] | None = html[top.index(t)]
                block = blocks[top.index(t)]
            else:  # a nested table, or HTML that does not match the metadata
                rows_html = None
                block = (blocks[0][0], blocks[-1][1]) if blocks else (0, len(text))
            spans.extend(_grid_rows(t, group, rows_html, block))
        return spans
    for rows in html:
        grid = [_row_cells(text[a:b]) for a, b in rows]
        head = grid[0] if grid else []
        for r, ((a, b), values) in enumerate(zip(rows, grid, strict=True)):
            if r == 0 or not any(values):
                continue
            spans.append(
                Span("row", _labelled(head, values), a, b, None, r, 0, 1, len(values),
                     " | ".join(head) or None)
            )
    return spans


def _labelled(head: Sequence[str], values: Sequence[str]) -> str:
    parts: list[str] = []
    for i, v in enumerate(values):
        h = head[i] if i < len(head) else ""
        part = f"{h}: {v}" if h and h != v else v
        if v and (not parts or parts[-1] != part):  # a spanning cell is read once
            parts.append(part)
    return " · ".join(parts)


def _grid_rows(
    table: int,
    cells: Sequence[Any],
    rows_html: Sequence[tuple[int, int]] | None,
    block: tuple[int, int],
) -> list[Span]:
    width = max((c.col + c.col_span for c in cells), default=0)
    height = max((c.row + c.row_span for c in cells), default=0)
    if width == 0 or height < 2 or width * height > 100_000:
        return []
    grid: list[list[str]] = [[""] * width for _ in range(height)]
    for c in cells:
        for r in range(c.row, min(c.row + c.row_span, height)):
            for k in range(c.col, min(c.col + c.col_span, width)):
                grid[r][k] = " ".join(str(c.text).split())
    head = grid[0]
    starts = sorted({c.row for c in cells})
    out = []
    for r in starts:
        if r == 0 or not any(grid[r]):
            continue
        a, b = rows_html[r] if rows_html is not None and r < len(rows_html) else block
        out.append(
            Span("row", _labelled(head, grid[r]), a, b, table, r, 0, 1, width,
                 " | ".join(h for h in head if h) or None)
        )
    return out


def _node_cells(metadata: Mapping[str, Any]) -> list[Any]:
    if not metadata.get("cells"):
        return []
    try:
        from llama_index.readers.hwpx import node_cells
    except ImportError:  # the reader package is a dependency; never fatal here
        return []
    try:
        return list(node_cells(metadata))
    except (ValueError, TypeError, KeyError):
        return []


def node_spans(node: Any) -> list[Span]:
    """The spans of one node: body segments, then table rows (at most :data:`MAX_SPANS`).

    A node with no body and no table (or an empty one) gives one span over its whole text, so
    every node has at least one span when it has any text.
    """
    text = node.get_content()
    metadata = getattr(node, "metadata", None) or {}
    spans = text_spans(text) + table_row_spans(text, metadata)
    if not spans:
        stripped = text.strip()
        if not stripped:
            return []
        a = text.index(stripped[0])
        spans = [Span("sentence", " ".join(stripped.split())[:MAX_CHARS], a, a + len(stripped))]
    return spans[:MAX_SPANS]
