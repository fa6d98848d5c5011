"""HWPXNodeParser: section nodes ``"## {title}\\n\\n{body}"`` split on block boundaries.

A *section* starts at each heading of level <= ``split_level`` (deeper headings stay in the
body as markdown ``#`` lines). Its body is cut into chunks of at most ``chunk_size`` tokens
(tiktoken ``cl100k_base`` via ``llama_index.core.utils.get_tokenizer()``; the title line
counts) at paragraph and table boundaries:

- a paragraph longer than a chunk is split by ``SentenceSplitter`` (same tokenizer);
- a table that does not fit is split between row groups (rows joined by a row span stay
  together; a table row is never cut) and every piece repeats the header row group and the
  caption; a single row group larger than a chunk becomes its own oversize chunk;
  a header row group over half a chunk is not repeated (so output stays linear in the table);
- consecutive chunks overlap by the trailing paragraphs (not tables) of up to
  ``chunk_overlap`` tokens.

Node metadata: the Document's metadata minus ``hwpx_structure``, plus ``section_title``,
``heading_path`` (`` > ``-joined), ``section``, ``chunk_index`` and, for chunks holding table
rows, ``table_index`` (first table) and ``cells`` (``[table, row, col, row_span, col_span]``
of every cell in the chunk). Embedding text is the node text alone (every metadata key the
reader or parser adds is excluded, so BM25 / dense indexing sees exactly
``"## {title}\n\n{body}"``); LLM text also shows file name, title, heading path and section
title, never ``cells`` or the structure. Defaults 1000 / 150 follow the paper.

Example::

    nodes = HWPXNodeParser(chunk_size=512).get_nodes_from_documents(HWPXReader().load_data(p))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import BaseNode, Document, NodeRelationship, TextNode
from llama_index.core.utils import get_tokenizer
from llama_index.readers.hwpx._model import HWPXTable, render_table
from llama_index.readers.hwpx._render import (
    STRUCTURE_KEY,
    heading_line,
    table_from_dict,
)
from pydantic import Field, PrivateAttr

__all__ = ["HWPXNodeParser", "row_groups"]

# added to the source Document's exclusions: embedding text is the node text alone (its
# "## {title}" line already carries the section title); the LLM also sees section_title.
NODE_EMBED_EXCLUDED = [STRUCTURE_KEY, "cells", "table_index", "chunk_index", "section",
                       "section_title", "heading_path", "title", "file_name", "file_path"]
NODE_LLM_EXCLUDED = [STRUCTURE_KEY, "cells", "table_index", "chunk_index", "section"]


@dataclass
class _Unit:
    text: str
    tokens: int
    is_table: bool = False
    cells: list[list[int]] = field(default_factory=list)
    table_index: int | None = None
    section: int | None = None


@dataclass
class _Section:
    title: str
    path: list[str]
    blocks: list[dict[str, Any]] = field(default_factory=list)


def row_groups(table: HWPXTable) -> list[list[int]]:
    """Contiguous row ranges that no row span crosses (the unit a split may not cut).

    >>> from llama_index.readers.hwpx._model import HWPXCell
    >>> t = HWPXTable(3, 1, [HWPXCell(0, 0), HWPXCell(1, 0, 2, 1)])
    >>> row_groups(t)
    [[0], [1, 2]]
    """
    reach = list(range(table.n_rows))  # reach[r] = last row tied to row r
    for c in table.cells:
        last = min(c.row + c.row_span - 1, table.n_rows - 1)
        if 0 <= c.row < table.n_rows and last > reach[c.row]:
            reach[c.row] = last
    groups: list[list[int]] = []
    start, end = 0, -1
    for r in range(table.n_rows):
        end = max(end, reach[r])
        if r == end:
            groups.append(list(range(start, r + 1)))
            start = r + 1
    if start < table.n_rows:
        groups.append(list(range(start, table.n_rows)))
    return groups


class HWPXNodeParser(NodeParser):
    """Chunk HWPX Documents (from :class:`HWPXReader`) into titled section nodes.

    Documents without ``hwpx_structure`` metadata are chunked by blank-line paragraphs under
    their ``title`` metadata (or file name).
    """

    chunk_size: int = Field(default=1000, gt=0, description="Max tokens per node (cl100k).")
    chunk_overlap: int = Field(
        default=150, ge=0, description="Tokens of trailing paragraphs repeated in the next node."
    )
    split_level: int = Field(
        default=3, ge=1, le=6, description="Headings of this level or higher start a section."
    )
    _tok: Callable[[str], list[Any]] | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "HWPXNodeParser"

    def _count(self, text: str) -> int:
        if self._tok is None:
            self._tok = get_tokenizer()
        return len(self._tok(text))

    # ------------------------------------------------------------------ NodeParser hooks
    def _parse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> list[BaseNode]:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size "
                f"({self.chunk_size})"
            )
        out: list[BaseNode] = []
        for node in nodes:
            out.extend(self._split_one(node))
        return out

    def _postprocess_parsed_nodes(
        self, nodes: list[BaseNode], parent_doc_map: dict[str, Document]
    ) -> list[BaseNode]:
        nodes = super()._postprocess_parsed_nodes(nodes, parent_doc_map)
        for n in nodes:  # the parent merge copies the bulky structure back: drop it
            n.metadata.pop(STRUCTURE_KEY, None)
        return nodes

    # ------------------------------------------------------------------ sections
    def _sections(self, node: BaseNode) -> tuple[list[_Section], list[HWPXTable]]:
        meta = node.metadata
        title = str(meta.get("title") or meta.get("file_name") or "")
        start_path = [p for p in str(meta.get("heading_path") or "").split(" > ") if p]
        raw = meta.get(STRUCTURE_KEY)
        if not raw:
            text = node.get_content()
            blocks = [
                {"type": "paragraph", "text": p.strip(), "section": meta.get("section")}
                for p in text.split("\n\n")
                if p.strip()
            ]
            return [_Section(title, start_path, blocks)], []
        struct = json.loads(raw) if isinstance(raw, str) else raw
        tables: dict[int, HWPXTable] = {}
        current = _Section(start_path[-1] if start_path else title, start_path)
        sections = [current]
        for b in struct["blocks"]:
            if b["type"] == "table":
                tables[b["index"]] = table_from_dict(b["table"])
            head = b if b["type"] == "heading" else b.get("heading")
            if head is not None and int(head["level"]) <= self.split_level:
                current = _Section(str(head["text"]), list(b.get("path") or [head["text"]]))
                sections.append(current)
                continue
            current.blocks.append(b)
        ordered = [tables[k] for k in sorted(tables)]
        return [s for s in sections if s.blocks], ordered

    def _units(self, sec: _Section, tables: dict[int, HWPXTable], budget: int) -> list[_Unit]:
        units: list[_Unit] = []
        for b in sec.blocks:
            section = b.get("section")
            if b["type"] == "table" and "heading" not in b:
                units.extend(self._table_units(tables[b["index"]], budget))
                continue
            if b["type"] == "heading":
                text = heading_line(int(b["level"]), b["text"])
            elif b["type"] == "table":
                text = heading_line(int(b["heading"]["level"]), b["heading"]["text"])
            else:
                text = str(b["text"])
            n = self._count(text)
            if n <= budget:
                units.append(_Unit(text, n, section=section))
                continue
            splitter = SentenceSplitter(
                chunk_size=budget,
                chunk_overlap=min(self.chunk_overlap, budget // 5),
                tokenizer=self._tok,
            )
            for piece in splitter.split_text(text):
                units.append(_Unit(piece, self._count(piece), section=section))
        return units

    def _table_units(self, table: HWPXTable, budget: int) -> list[_Unit]:
        def unit(rows: list[int]) -> _Unit:
            body = render_table(table.cells, table.n_rows, table.n_cols, rows)
            text = f"{table.caption}\n\n{body}" if table.caption else body
            row_set = set(rows)
            cells = [
                [table.index, c.row, c.col, c.row_span, c.col_span]
                for c in table.cells
                if c.row in row_set
            ]
            return _Unit(text, self._count(text), True, cells, table.index, table.section)

        whole = unit(list(range(table.n_rows)))
        if whole.tokens <= budget or table.n_rows <= 1:
            return [whole]
        groups = row_groups(table)
        header, rest = groups[0], groups[1:]
        if unit(header).tokens > budget // 2:  # repeated, it would dominate every piece
            header, rest = [], groups  # (a hostile 1-row header x N rows: N copies)
        out: list[_Unit] = []
        current: list[int] = []
        for g in rest:
            trial = unit(header + current + g)
            if current and trial.tokens > budget:
                out.append(unit(header + current))
                current = list(g)
            else:
                current += g
        out.append(unit(header + current))
        return out

    # ------------------------------------------------------------------ chunks
    def _split_one(self, node: BaseNode) -> list[BaseNode]:
        sections, table_list = self._sections(node)
        tables = {t.index: t for t in table_list}
        base_meta = {k: v for k, v in node.metadata.items() if k != STRUCTURE_KEY}
        doc_id = node.node_id
        out: list[BaseNode] = []
        for sec in sections:
            prefix = f"## {sec.title}\n\n"
            budget = max(self.chunk_size - self._count(prefix), max(self.chunk_size // 4, 16))
            units = self._units(sec, tables, budget)
            for chunk in self._pack(units, budget):
                k = len(out)
                meta = dict(base_meta)
                meta["section_title"] = sec.title
                meta["heading_path"] = " > ".join(sec.path)
                meta["chunk_index"] = k
                sections_in = [u.section for u in chunk if u.section is not None]
                if sections_in:
                    meta["section"] = sections_in[0]
                cells = [c for u in chunk if u.is_table for c in u.cells]
                table_ids = [u.table_index for u in chunk if u.table_index is not None]
                if table_ids:
                    meta["table_index"] = table_ids[0]
                    meta["cells"] = cells
                excluded_embed = list(
                    dict.fromkeys(list(node.excluded_embed_metadata_keys) + NODE_EMBED_EXCLUDED)
                )
                excluded_llm = list(
                    dict.fromkeys(list(node.excluded_llm_metadata_keys) + NODE_LLM_EXCLUDED)
                )
                text = prefix + "\n\n".join(u.text for u in chunk)
                child = TextNode(
                    id_=f"{doc_id}#chunk{k}",
                    text=text,
                    metadata=meta,
                    excluded_embed_metadata_keys=excluded_embed,
                    excluded_llm_metadata_keys=excluded_llm,
                    metadata_template=node.metadata_template,
                    metadata_separator=node.metadata_separator,
                    text_template=getattr(node, "text_template", TextNode().text_template),
                )
                child.relationships[NodeRelationship.SOURCE] = node.as_related_node_info()
                out.append(child)
        return out

    def _pack(self, units: list[_Unit], budget: int) -> list[list[_Unit]]:
        """Greedy packing; a new chunk starts with trailing paragraphs <= chunk_overlap."""
        chunks: list[list[_Unit]] = []
        cur: list[_Unit] = []
        cur_tok = 0
        fresh = False  # cur holds something beyond the carried-over overlap
        for u in units:
            if cur and cur_tok + 1 + u.tokens > budget:
                if fresh:
                    chunks.append(cur)
                carry: list[_Unit] = []
                t = 0
                for x in reversed(cur):
                    if x.is_table or t + x.tokens + 1 > self.chunk_overlap:
                        break
                    carry.insert(0, x)
                    t += x.tokens + 1
                if t + u.tokens > budget:
                    carry, t = [], 0
                cur, cur_tok = carry, t
            cur_tok += u.tokens + (1 if cur else 0)
            cur.append(u)
            fresh = True
        if cur and fresh:
            chunks.append(cur)
        return chunks
