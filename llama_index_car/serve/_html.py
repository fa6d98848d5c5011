"""Pure rendering for the service: a table as HTML from its cells' coordinates, a node's text
cut into text and table segments, invisible controls made visible.

Document text is untrusted (a cell may hold ``<script>``, ``<img onerror=…>``, a
``javascript:`` link or bidi controls that reorder what a reader sees). Everything here
escapes every piece of document text with :func:`html.escape` (``& < > " '``) and writes bidi
and other invisible format characters as visible ``⟦U+202E⟧`` marks (:func:`visible`), so the
page shows them as text; the only markup is the table's own ``<table>``, ``<tr>``, ``<th>``,
``<td>`` with numeric attributes. No LlamaIndex import.

>>> print(table_html([(0, 0, 1, 2, "항목"), (1, 0, 1, 1, "<b>폭</b>"), (1, 1, 1, 1, "3.0m")], 4))
<table class="cells" data-table="4"><tbody><tr><th scope="col" data-row="0" data-col="0" data-row-span="1" data-col-span="2" colspan="2">항목</th></tr><tr><td data-row="1" data-col="0" data-row-span="1" data-col-span="1">&lt;b&gt;폭&lt;/b&gt;</td><td data-row="1" data-col="1" data-row-span="1" data-col-span="1">3.0m</td></tr></tbody></table>
>>> visible("a\\u202eb")
'a⟦U+202E⟧b'
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

#: grid positions a table may fill with empty cells (a sparse hostile table of two cells at
#: (9999, 0) and (0, 9999) would otherwise render 10^8 slots); past it only the cells render
MAX_GRID_SLOTS = 200_000

# bidi embeddings/overrides/isolates/marks, zero-width and other invisible format characters
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\u061c\ufeff\u00ad]")

Cell = tuple[int, int, int, int, str]


def visible(text: str) -> str:
    """``text`` with every bidi control and invisible format character written as a visible
    ``⟦U+XXXX⟧`` mark (the page and the table HTML show them, never apply them)."""
    return _INVISIBLE.sub(lambda m: f"⟦U+{ord(m.group()):04X}⟧", text)


def _esc(text: str) -> str:
    return html.escape(visible(text), quote=True)


def table_html(cells: Sequence[Cell], table: int) -> str:
    """One table as HTML: ``cells`` are ``(row, col, row_span, col_span, text)`` (0-based, as
    :func:`llama_index.readers.hwpx.node_cells`), each rendered once in the row it starts in,
    by column, with ``rowspan``/``colspan`` when above 1 and ``data-row``/``data-col``/
    ``data-row-span``/``data-col-span`` naming its coordinates; row 0 as ``<th scope="col">``.
    Grid positions no cell covers become empty ``<td>`` (up to :data:`MAX_GRID_SLOTS`), so the
    browser lays every cell at its column. Spans are clamped to the rows and columns in which
    some cell starts (a cell's declared span is untrusted)."""
    kept = sorted({(r, c): (r, c, rs, cs, t) for r, c, rs, cs, t in cells if r >= 0 and c >= 0}
                  .values())
    height = max((r for r, *_ in kept), default=-1) + 1
    width = max((c for _, c, *_ in kept), default=-1) + 1
    fill = height * width <= MAX_GRID_SLOTS
    covered: set[tuple[int, int]] = set()
    starts = {(r, c): (r, c, max(1, min(rs, height - r)), max(1, min(cs, width - c)), t)
              for r, c, rs, cs, t in kept}
    if fill:
        for r, c, rs, cs, _ in starts.values():
            covered.update((i, j) for i in range(r, r + rs) for j in range(c, c + cs)
                           if (i, j) != (r, c))
    out = [f'<table class="cells" data-table="{int(table)}"><tbody>']
    for row in range(height):
        out.append("<tr>")
        cols = range(width) if fill else sorted(c for r, c in starts if r == row)
        for col in cols:
            cell = starts.get((row, col))
            if cell is None:
                if (row, col) not in covered:
                    out.append(f'<td class="empty" data-row="{row}" data-col="{col}"></td>')
                continue
            r, c, rs, cs, text = cell
            tag = 'th scope="col"' if r == 0 else "td"
            attrs = (f'data-row="{r}" data-col="{c}" data-row-span="{rs}" '
                     f'data-col-span="{cs}"')
            attrs += f' rowspan="{rs}"' if rs > 1 else ""
            attrs += f' colspan="{cs}"' if cs > 1 else ""
            out.append(f"<{tag} {attrs}>{_esc(text)}</{tag[:2]}>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def segments(
    text: str, blocks: Sequence[tuple[int, int]], tables: Sequence[int]
) -> list[dict[str, Any]]:
    """``text`` cut at its table ``blocks`` (``(start, end)`` offsets of each rendered table,
    in text order): ``{"kind": "text", "start", "end", "text"}`` pieces between them and
    ``{"kind": "table", "start", "end", "table"}`` for the ``k``-th block, which renders the
    ``k``-th of ``tables`` (the node's table indexes in order). Blocks beyond ``tables`` stay
    text; tables beyond the blocks come last, at ``start = end = len(text)``. Offsets are
    those of ``text`` (a sentence span's ``start``/``end`` fall inside one text piece).

    >>> [s["kind"] for s in segments("앞 <table>x</table> 뒤", [(2, 18)], [0])]
    ['text', 'table', 'text']
    """
    out: list[dict[str, Any]] = []
    pos = 0
    paired = list(zip(blocks, tables, strict=False))
    for (start, end), table in paired:
        if start < pos or end > len(text) or start >= end:
            continue
        if start > pos:
            out.append({"kind": "text", "start": pos, "end": start, "text": text[pos:start]})
        out.append({"kind": "table", "start": start, "end": end, "table": int(table)})
        pos = end
    if pos < len(text):
        out.append({"kind": "text", "start": pos, "end": len(text), "text": text[pos:]})
    shown = {s["table"] for s in out if s["kind"] == "table"}
    for table in tables:
        if table not in shown:
            out.append({"kind": "table", "start": len(text), "end": len(text),
                        "table": int(table)})
    return out
