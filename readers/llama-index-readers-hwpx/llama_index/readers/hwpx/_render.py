"""Blocks -> markdown text, and the JSON structure the node parser reads back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llama_index.readers.hwpx._model import HWPXCell, HWPXTable, render_table
from llama_index.readers.hwpx._parse import Block

STRUCTURE_KEY = "hwpx_structure"
STRUCTURE_VERSION = 1


def table_from_dict(d: dict[str, Any]) -> HWPXTable:
    """Inverse of :meth:`HWPXTable.to_dict` (parent cell reduced to its coordinates)."""
    cells = [HWPXCell(int(r), int(c), int(rs), int(cs), str(t)) for r, c, rs, cs, t in d["cells"]]
    return HWPXTable(
        n_rows=int(d["n_rows"]),
        n_cols=int(d["n_cols"]),
        cells=cells,
        depth=int(d["depth"]),
        section=int(d["section"]),
        caption=d.get("caption"),
        index=int(d["index"]),
    )


def heading_line(level: int, text: str) -> str:
    return "#" * max(1, min(level, 6)) + " " + text


def table_markdown(table: HWPXTable, rows: Sequence[int] | None = None) -> str:
    """Caption line (if any) then the table (markdown, or HTML with merged cells)."""
    body = render_table(table.cells, table.n_rows, table.n_cols, rows)
    return f"{table.caption}\n\n{body}" if table.caption else body


def block_text(block: Block, tables: Sequence[HWPXTable]) -> str:
    """Markdown of one block; boxed-title tables render as their heading."""
    kind = block["type"]
    if kind == "heading":
        return heading_line(int(block["level"]), block["text"])
    if kind == "paragraph":
        return str(block["text"])
    if "heading" in block:
        h = block["heading"]
        return heading_line(int(h["level"]), h["text"])
    return table_markdown(tables[block["index"]])


def blocks_text(blocks: Sequence[Block], tables: Sequence[HWPXTable]) -> str:
    """Blocks joined by blank lines (single pass, no quadratic concatenation)."""
    return "\n\n".join(t for t in (block_text(b, tables) for b in blocks) if t)


def structure_json(blocks: Sequence[Block], tables: Sequence[HWPXTable]) -> str:
    """The node parser's structure: blocks with their table dicts embedded, as JSON."""
    out: list[Block] = []
    for b in blocks:
        if b["type"] == "table":
            nb = dict(b)
            nb["table"] = tables[b["index"]].to_dict()
            out.append(nb)
        else:
            out.append(b)
    return json.dumps(
        {"version": STRUCTURE_VERSION, "blocks": out}, ensure_ascii=False, separators=(",", ":")
    )
