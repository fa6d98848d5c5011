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
  as ``header: value`` pairs (the header cell over the same columns labels each cell, see
  :func:`table_header`; cells spanning down from earlier rows are repeated), with the row's
  coordinates. The header rows themselves are no span, nor a row whose own cells are all
  empty (its text is that of cells spanning down into it, read in their rows); rows above
  the header (a caption row spanning the table) are spans without a header.

Every span carries character offsets ``[start, end)`` into ``node.get_content()`` (for a table
row: the ``<tr>…</tr>``, markdown ``| … |`` line or layout-table line it was rendered as,
found by its cells' rendered texts, see :func:`locate_rows`; the table's extent only for a row
none of whose cells can be found), so a caller can highlight it. Pure functions; no model, no
llama_index import beyond reading ``node.get_content()`` and ``node.metadata``.

>>> [s.text for s in text_spans("## 제목\\n\\n경사는 1:1.5 이하로 한다. 배수는 충분히 한다.")]
['경사는 1:1.5 이하로 한다. 배수는 충분히 한다.']
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "Span",
    "TableHeader",
    "node_spans",
    "table_header",
    "table_row_spans",
    "text_spans",
]

#: body pieces shorter than this join the next piece (characters)
MIN_CHARS = 40
#: body pieces longer than this are cut at whitespace (characters)
MAX_CHARS = 320
#: spans kept per node (a 35-kchar one-table standard would otherwise give thousands)
MAX_SPANS = 256
#: rows above a table's header that may be skipped (captions, titles spanning the table)
MAX_HEADER_SKIP = 3
#: most rows one header takes (its first row's cells spanning down, e.g. 구분 over 2 rows)
MAX_HEADER_ROWS = 3

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


# ----------------------------------------------------------------------------- headers
def _norm(value: Any) -> str:
    return " ".join(str(value).split())


@dataclass(frozen=True, slots=True)
class TableHeader:
    """A table's header: its rows (top-down; empty: the table has none) and the label of each
    grid column (``""``: none)."""

    rows: tuple[int, ...]
    columns: tuple[str, ...]

    def over(self, col: int, col_span: int = 1) -> str | None:
        """The distinct labels of columns ``[col, col + col_span)``, joined by ``" | "``."""
        names = self.columns[max(col, 0) : max(col + max(col_span, 1), 0)]
        return " | ".join(n for n in dict.fromkeys(names) if n) or None

    def labels(self, row: int) -> bool:
        """Whether cells of ``row`` are labelled: the row is below the header."""
        return bool(self.rows) and row > self.rows[-1]


def table_header(cells: Sequence[Any]) -> TableHeader:
    """The header of a table from its cells (anything with ``row``, ``col``, ``row_span``,
    ``col_span``, ``text``: the reader's cells or a node's ``node_cells``).

    * The header is the first row whose covering cells hold at least two distinct non-empty
      texts, among the first ``MAX_HEADER_SKIP + 1`` rows. Rows before it — empty, or one
      text across the row, such as a caption merged over the whole table (``[ 표 6. … ]``) —
      are not the header. No such row: no header.
    * A one-column table's header is its row 0 (its only label).
    * A multi-row header: the next row belongs to the header when its cells all sit under
      header cells spanning several columns and the header's other cells span down into it
      (``구분`` over two rows beside ``비용`` over ``직접 | 간접``); at most
      :data:`MAX_HEADER_ROWS` rows, never the table's last row. A column's label is the
      distinct texts of the header rows over it, top-down, joined by a space (``비용 직접``).

    >>> from collections import namedtuple
    >>> C = namedtuple("C", "row col row_span col_span text")
    >>> cells = [C(0, 0, 1, 2, "[ 표 6. 조이스틱 ]"), C(1, 0, 1, 1, "구 분"),
    ...          C(1, 1, 1, 1, "운전장치"), C(2, 0, 1, 1, "작동력"), C(2, 1, 1, 1, "2.5 N")]
    >>> table_header(cells)
    TableHeader(rows=(1,), columns=('구 분', '운전장치'))
    """
    width = max((c.col + c.col_span for c in cells), default=0)
    height = max((c.row + c.row_span for c in cells), default=0)
    if width <= 0 or height <= 0:
        return TableHeader((), ())
    scan = min(height, MAX_HEADER_SKIP + MAX_HEADER_ROWS + 1)
    covering: list[list[Any]] = [[] for _ in range(scan)]
    for c in sorted(cells, key=lambda c: (c.col, c.row)):
        for r in range(max(c.row, 0), min(c.row + max(c.row_span, 1), scan)):
            covering[r].append(c)
    if width == 1:
        first = 0
    else:
        first = -1
        for r in range(min(scan, MAX_HEADER_SKIP + 1)):
            if len({t for t in (_norm(c.text) for c in covering[r]) if t}) >= 2:
                first = r
                break
        if first < 0:
            return TableHeader((), ("",) * width)
    end = first + 1
    while end < min(first + MAX_HEADER_ROWS, scan, height - 1) and _sub_header(
        covering[end - 1], covering[end], end, width
    ):
        end += 1
    columns: list[str] = []
    for k in range(width):
        texts = [_norm(c.text) for r in range(first, end) for c in covering[r]
                 if c.col <= k < c.col + c.col_span]
        columns.append(" ".join(t for t in dict.fromkeys(texts) if t))
    return TableHeader(tuple(range(first, end)), tuple(columns))


def _sub_header(above: Sequence[Any], row: Sequence[Any], r: int, width: int) -> bool:
    """Whether row ``r`` continues the header of the row above it: every cell starting in it
    is a non-empty one-row label under a cell of the row above spanning several columns, the
    other columns are covered by header cells of the row above ending in it, and it holds two
    distinct texts (``구분`` over two rows, ``비용`` over ``직접 | 간접``)."""
    merged = [c for c in above if c.col_span > 1 and c.row + c.row_span == r]
    own = [c for c in row if c.row == r]
    if not merged or not own:
        return False
    for c in own:
        if c.row_span != 1 or not _norm(c.text):
            return False  # a sub-header is one row of labels (an empty cell is data)
        if not any(m.col <= c.col and c.col + c.col_span <= m.col + m.col_span for m in merged):
            return False
    for c in row:
        if c.row < r and (c.row + c.row_span != r + 1 or not any(c is a for a in above)):
            return False  # a cell from further up or going on down (a row label)
    cols = {k for c in row for k in range(c.col, c.col + c.col_span)}
    return len(cols) >= width and len({t for t in (_norm(c.text) for c in own) if t}) >= 2


# ----------------------------------------------------------------------------- offsets
_TD_OPEN = re.compile(r"<t[dh]\b[^>]*>\Z", re.I)


def _renderings(value: str) -> tuple[str, ...]:
    """The forms a cell text takes in a node: an HTML table cell (escaped, ``<br>``), a
    markdown cell (``\\|`` escaped, ``<br>``), a layout-table line (whitespace collapsed)."""
    from html import escape

    md = value.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")
    forms = (escape(value).replace("\n", "<br>"), md, _norm(value))
    return tuple(f for f in dict.fromkeys(forms) if f)


def _delimited(text: str, p: int, q: int, lo: int) -> str | None:
    """The form of the cell rendering ``text[p:q]`` when it is a whole cell: ``"html"``
    (between ``<td …>`` and ``</td>``), ``"md"`` (between ``| `` and `` |``), ``"line"``
    (between line starts/ends and `` | ``); else None."""
    if text.startswith("</t", q) and _TD_OPEN.search(text, max(lo, p - 200), p):
        return "html"
    if text[max(p - 2, 0) : p] == "| " and text[q : q + 2] == " |":
        return "md"
    if (p == 0 or text[p - 1] == "\n" or text[max(p - 3, 0) : p] == " | ") and (
        q == len(text) or text[q] == "\n" or text[q : q + 3] == " | "
    ):
        return "line"
    return None


def _find_cell(text: str, value: str, lo: int, hi: int) -> tuple[int, int, str] | None:
    """The first whole-cell rendering of ``value`` in ``text[lo:hi]``: ``(start, end, form)``."""
    best: tuple[int, int, str] | None = None
    for form in _renderings(value):
        pos = lo
        while True:
            p = text.find(form, pos, hi)
            if p < 0 or (best is not None and p >= best[0]):
                break
            kind = _delimited(text, p, p + len(form), lo)
            if kind is not None:
                best = (p, p + len(form), kind)
                break
            pos = p + 1
    return best


def cell_offsets(text: str, lo: int, hi: int, values: Sequence[str]) -> list[tuple[int, int] | None]:
    """Offsets of the cells ``values`` (one row's cell texts in column order) inside
    ``text[lo:hi]``, found in order as whole rendered cells (:func:`_delimited`); ``None``
    for a cell not found (``values`` empty ones included).

    >>> row = "<tr><td>해당없음</td><td colspan='2'>해당없음</td><td>750m &amp; 이내</td></tr>"
    >>> [row[a:b] for a, b in cell_offsets(row, 0, len(row), ["해당없음", "해당없음", "750m & 이내"])]
    ['해당없음', '해당없음', '750m &amp; 이내']
    """
    out: list[tuple[int, int] | None] = []
    pos = lo
    for v in values:
        found = _find_cell(text, v, pos, hi) if v.strip() else None
        if found is None:
            out.append(None)
            continue
        out.append((found[0], found[1]))
        pos = found[1]
    return out


def _row_region(text: str, p: int, form: str) -> tuple[int, int]:
    if form == "html":
        a = text.rfind("<tr", 0, p)
        b = text.find("</tr>", p)
        if a >= 0 and b >= 0:
            return a, b + 5
    a = text.rfind("\n", 0, p) + 1
    b = text.find("\n", p)
    return a, len(text) if b < 0 else b


def locate_rows(
    text: str, rows: Sequence[tuple[int, Sequence[str]]], start: int = 0
) -> tuple[dict[int, tuple[int, int]], int]:
    """Where each table row is rendered in ``text``: ``rows`` are ``(row, values)`` in row
    order, ``values`` the texts of the cells anchored in the row, in column order. A row is
    found by its first cell found as a whole rendered cell after the previous row (from
    ``start``); its region is the enclosing ``<tr>…</tr>`` (HTML) or line (markdown, layout
    table). A row none of whose cells is found (an HTML row holding only empty cells is the
    next ``<tr>``) is left out. Returns the regions and the end of the last one.

    >>> md = "| 구분 | 기준 |\\n|---|---|\\n| 폭 | 3.5m |\\n| 높이 | 4.5m |"
    >>> found, _ = locate_rows(md, [(0, ["구분", "기준"]), (1, ["폭", "3.5m"]), (2, ["높이", "4.5m"])])
    >>> [md[a:b] for a, b in found.values()]
    ['| 구분 | 기준 |', '| 폭 | 3.5m |', '| 높이 | 4.5m |']
    """
    out: dict[int, tuple[int, int]] = {}
    pos = start
    html = False
    for row, values in rows:
        region = None
        for v in values:
            if not v.strip():
                continue
            found = _find_cell(text, v, pos, len(text))
            if found is not None:
                region = _row_region(text, found[0], found[2])
                html = found[2] == "html"
                break
        if region is None and html:
            a = text.find("<tr", pos)
            b = text.find("</tr>", a) if a >= 0 else -1
            if a >= 0 and b >= 0 and text.find("</table>", pos, a) < 0:
                region = (a, b + 5)
        if region is None:
            continue
        out[row] = region
        pos = region[1]
    return out, pos


# ----------------------------------------------------------------------------- row spans
def _html_cells(row: str, r: int) -> list[tuple[int, int, int, int, str]]:
    """A rendered HTML row's cells as ``(row, col, row_span, col_span, text)`` (row spans
    from above are not known here: columns are counted within the row)."""
    out = []
    col = 0
    for m in re.finditer(r"<t[dh]\b([^>]*)>(.*?)</t[dh]>", row, re.S | re.I):
        span = re.search(r"colspan=[\"']?(\d+)", m.group(1))
        cs = max(int(span.group(1)), 1) if span else 1
        out.append((r, col, 1, cs, _cell_text(m.group(2))))
        col += cs
    return out


def table_row_spans(text: str, metadata: Mapping[str, Any]) -> list[Span]:
    """One span per table row (module docstring): from the ``cells`` metadata when present,
    else from the ``<table>`` HTML / markdown tables of ``text``."""
    cells = _node_cells(metadata)
    spans: list[Span] = []
    if cells:
        tables: dict[int, list[Any]] = {}
        for c in cells:
            tables.setdefault(c.table, []).append(c)
        pos = 0
        for t, group in tables.items():  # in text order (the node parser's chunk order)
            found, pos = _grid_rows(t, group, text, pos)
            spans.extend(found)
        return spans
    from collections import namedtuple

    cell = namedtuple("cell", "row col row_span col_span text")
    for _, _, rows in _table_blocks(text):
        grid = [_row_cells(text[a:b]) for a, b in rows]
        if any(text[a:b].lstrip().startswith("<") for a, b in rows):
            pseudo = [cell(*c) for r, (a, b) in enumerate(rows) for c in _html_cells(text[a:b], r)]
        else:
            pseudo = [cell(r, k, 1, 1, v) for r, values in enumerate(grid)
                      for k, v in enumerate(values)]
        header = table_header(pseudo)
        head = list(header.columns)
        for r, ((a, b), values) in enumerate(zip(rows, grid, strict=True)):
            if r in header.rows or not any(values):
                continue
            labelled = header.labels(r)
            spans.append(
                Span("row", _labelled(head if labelled else [], values), a, b, None, r, 0, 1,
                     len(values), _header_text(header) if labelled else None)
            )
    return spans


def _header_text(header: TableHeader) -> str | None:
    return " | ".join(h for h in dict.fromkeys(header.columns) if h) or None


def _labelled(head: Sequence[str], values: Sequence[str]) -> str:
    parts: list[str] = []
    for i, v in enumerate(values):
        h = head[i] if i < len(head) else ""
        part = f"{h}: {v}" if h and h != v else v
        if v and (not parts or parts[-1] != part):  # a spanning cell is read once
            parts.append(part)
    return " · ".join(parts)


def _grid_rows(table: int, cells: Sequence[Any], text: str, start: int) -> tuple[list[Span], int]:
    """The row spans of one table known by its cells, located in ``text`` from ``start``
    (:func:`locate_rows`); returns them and where the table's rendering ends."""
    width = max((c.col + c.col_span for c in cells), default=0)
    height = max((c.row + c.row_span for c in cells), default=0)
    if width == 0 or height < 2 or width * height > 100_000:
        return [], start
    grid: list[list[str]] = [[""] * width for _ in range(height)]
    starting: dict[int, list[Any]] = {}
    for c in sorted(cells, key=lambda c: (c.row, c.col)):
        starting.setdefault(c.row, []).append(c)
        for r in range(c.row, min(c.row + c.row_span, height)):
            for k in range(c.col, min(c.col + c.col_span, width)):
                grid[r][k] = _norm(c.text)
    header = table_header(cells)
    head = list(header.columns)
    found, end = locate_rows(
        text, [(r, [str(c.text) for c in starting[r]]) for r in sorted(starting)], start
    )
    if found:
        extent = (min(a for a, _ in found.values()), max(b for _, b in found.values()))
    else:
        extent = (start, len(text))
    out = []
    for r in sorted(starting):
        if r in header.rows or not any(_norm(c.text) for c in starting[r]):
            continue  # a header row, or one whose text is all cells spanning down into it
        labelled = header.labels(r)
        a, b = found.get(r, extent)
        out.append(
            Span("row", _labelled(head if labelled else [], grid[r]), a, b, table, r, 0, 1,
                 width, _header_text(header) if labelled else None)
        )
    return out, end


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
