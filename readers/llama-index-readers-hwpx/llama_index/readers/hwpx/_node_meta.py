"""What a node carries: stable UUID ids, clean titles and its tables' cells as one JSON string.

Every value :class:`HWPXNodeParser` puts in node metadata is a ``str``, ``int``, ``float`` or
``None`` (what Chroma, Qdrant, Milvus and pgvector accept). The cells of the node's own table
rows are one JSON string under ``cells``::

    {"v": 1, "tables": [{"table": 3, "depth": 1, "parent": [0, 2, 1],
                         "cells": [[row, col, row_span, col_span, "text"], ...]}, ...]}

``table`` is the table's :meth:`HWPXReader.load_tables` index, ``depth`` its nesting depth
(0 = top level) and ``parent`` ``[table_index, row, col]`` of the cell a nested table sits in
(``null`` at depth 0). :func:`node_cells` decodes it back to :class:`NodeCell` objects.

Example::

    >>> meta = {"cells": encode_cells([(3, 0, None, [(0, 0, 1, 2, "구분")])])}
    >>> node_cells(meta)
    [NodeCell(table=3, row=0, col=0, row_span=1, col_span=2, text='구분', depth=0, parent=None)]
    >>> stable_node_id("/data/a.hwpx", 0) == stable_node_id("/data/a.hwpx", 0)
    True
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.readers.hwpx._model import HWPXCell

__all__ = [
    "CELLS_FORMAT_VERSION",
    "NODE_ID_NAMESPACE",
    "NodeCell",
    "clean_title",
    "encode_cells",
    "node_cells",
    "stable_id_func",
    "stable_node_id",
]

#: uuid5 namespace of HWPX node ids (= uuid5(NAMESPACE_URL, "llama-index-readers-hwpx/node")).
NODE_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "llama-index-readers-hwpx/node")
CELLS_FORMAT_VERSION = 1

# private-use areas (Hangul symbol fonts put bullets there) and other invisible format marks
_JUNK = re.compile(
    "[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]"
)


def stable_node_id(doc_id: str, chunk_index: int) -> str:
    """``str(uuid5(NODE_ID_NAMESPACE, f"{doc_id}#chunk{chunk_index}"))``: a UUID (what Qdrant
    and Milvus need) that is the same in every run for the same document id and chunk.

    ``HWPXReader`` Documents are identified by the path they were read from (``#section{i}``
    appended with ``split_sections=True``), so re-reading a file gives the same node ids.

    >>> stable_node_id("a.hwpx", 0) != stable_node_id("a.hwpx", 1)
    True
    """
    if chunk_index < 0:
        raise ValueError(f"chunk_index must be >= 0, got {chunk_index}")
    return str(uuid.uuid5(NODE_ID_NAMESPACE, f"{doc_id}#chunk{chunk_index}"))


def stable_id_func(i: int, doc: Any) -> str:
    """:class:`HWPXNodeParser`'s default ``id_func``: ``stable_node_id(doc.node_id, i)``
    (``i`` = chunk index within the source Document)."""
    return stable_node_id(str(doc.node_id), i)


def clean_title(text: str) -> str:
    """A title without private-use glyphs, zero-width / bidi marks and extra whitespace.

    >>> clean_title("\\uf0a7 기구 및 조직  ")
    '기구 및 조직'
    """
    return " ".join(_JUNK.sub(" ", text).split())


@dataclass(frozen=True, slots=True)
class NodeCell:
    """One table cell as stored in a node: :class:`HWPXCell` fields (``row``, ``col``,
    ``row_span``, ``col_span``, ``text``) plus the table's ``index``, ``depth`` and, for a
    nested table, ``parent = (table_index, row, col)`` of the cell it sits in."""

    table: int
    row: int
    col: int
    row_span: int = 1
    col_span: int = 1
    text: str = ""
    depth: int = 0
    parent: tuple[int, int, int] | None = None

    def to_cell(self) -> HWPXCell:
        """The :class:`HWPXCell` (compares equal to the one ``load_tables`` returns)."""
        return HWPXCell(self.row, self.col, self.row_span, self.col_span, self.text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "row": self.row,
            "col": self.col,
            "row_span": self.row_span,
            "col_span": self.col_span,
            "text": self.text,
            "depth": self.depth,
            "parent": None if self.parent is None else list(self.parent),
        }


CellGroup = tuple[int, int, "tuple[int, int, int] | None", Iterable[Sequence[Any]]]


def encode_cells(groups: Iterable[CellGroup]) -> str:
    """The ``cells`` metadata string from ``(table, depth, parent, cells)`` groups, each cell
    ``(row, col, row_span, col_span, text)`` (see the module docstring for the format)."""
    tables = [
        {
            "table": int(table),
            "depth": int(depth),
            "parent": None if parent is None else [int(x) for x in parent],
            "cells": [[int(r), int(c), int(rs), int(cs), str(t)] for r, c, rs, cs, t in cells],
        }
        for table, depth, parent, cells in groups
    ]
    return json.dumps(
        {"v": CELLS_FORMAT_VERSION, "tables": tables}, ensure_ascii=False, separators=(",", ":")
    )


def node_cells(node_or_metadata: Any) -> list[NodeCell]:
    """Decode a node's ``cells`` metadata into :class:`NodeCell` objects, in stored order.

    Accepts a node (anything with ``.metadata``) or its metadata mapping. Non-table nodes give
    ``[]``. Also reads the pre-0.3 form (a list of ``[table, row, col, row_span, col_span]``,
    no text: ``text=""``). Raises ``ValueError`` naming the problem for a malformed value.
    """
    meta = node_or_metadata if isinstance(node_or_metadata, Mapping) else getattr(
        node_or_metadata, "metadata", None
    )
    if not isinstance(meta, Mapping):
        raise TypeError(f"expected a node or a metadata mapping, got {type(node_or_metadata)!r}")
    raw = meta.get("cells")
    if raw is None or raw == "" or raw == []:
        return []
    out: list[NodeCell] = []
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
        if isinstance(data, list):  # legacy: [[table, row, col, row_span, col_span], ...]
            out = []
            for item in data:
                t, r, c, rs, cs = (int(x) for x in item[:5])
                out.append(NodeCell(t, r, c, rs, cs))
            return out
        if not isinstance(data, Mapping) or data.get("v") != CELLS_FORMAT_VERSION:
            raise ValueError(f"unknown cells format (expected v={CELLS_FORMAT_VERSION})")
        out = []
        for group in data["tables"]:
            table, depth, parent = int(group["table"]), int(group["depth"]), group["parent"]
            par = None if parent is None else (int(parent[0]), int(parent[1]), int(parent[2]))
            for r, c, rs, cs, text in group["cells"]:
                out.append(NodeCell(table, int(r), int(c), int(rs), int(cs), str(text), depth, par))
        return out
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise ValueError(f"malformed 'cells' metadata: {exc}") from exc
