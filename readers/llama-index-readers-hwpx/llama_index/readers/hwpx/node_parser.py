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

Nodes are what any vector store accepts, at their real size:

- **metadata** (every value ``str``/``int``/``float``/``None``): the Document's metadata
  minus ``hwpx_structure``, plus ``section_title`` and ``heading_path`` (`` > ``-joined; both
  without private-use glyphs or stray whitespace), ``section``, ``chunk_index`` and, for
  chunks holding table rows, ``table_index`` (first table), ``table_ids`` (JSON list) and
  ``cells`` (one JSON string of the chunk's own cells with text, depth and parent: decode it
  with :func:`node_cells`);
- **relationships**: SOURCE names the Document with its metadata minus the structure;
  PREVIOUS/NEXT carry only id and hash (no metadata copies);
- **ids**: ``id_func(i, document)`` with ``i`` the chunk index in that Document; the default
  :func:`stable_id_func` gives ``uuid5(document id + chunk index)``, a UUID that is the same
  in every run. ``start_char_idx``/``end_char_idx`` span the Document text the chunk's blocks
  come from (None when the text does not match the structure).

Embedding text is the node text alone (every metadata key the reader or parser adds is
excluded, so BM25 / dense indexing sees exactly ``"## {title}\n\n{body}"``); LLM text also
shows file name, title, heading path and section title, never ``cells`` or the structure.
Parsing is linear in document size: nothing serialises or hashes the source Document per
node. Defaults 1000 / 150 follow the paper.

Example::

    nodes = HWPXNodeParser(chunk_size=512).get_nodes_from_documents(HWPXReader().load_data(p))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import (
    BaseNode,
    Document,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.utils import get_tokenizer
from llama_index.readers.hwpx._model import HWPXCell, HWPXTable, is_sparse, render_table
from llama_index.readers.hwpx._node_meta import clean_title, encode_cells, stable_id_func
from llama_index.readers.hwpx._render import (
    STRUCTURE_KEY,
    heading_line,
    table_from_dict,
)
from pydantic import BeforeValidator, Field, PlainSerializer, PrivateAttr, WithJsonSchema

__all__ = ["HWPXNodeParser", "row_groups"]

# added to the source Document's exclusions: embedding text is the node text alone (its
# "## {title}" line already carries the section title); the LLM also sees section_title.
NODE_EMBED_EXCLUDED = [STRUCTURE_KEY, "cells", "table_index", "table_ids", "chunk_index",
                       "section", "section_title", "heading_path", "title", "file_name",
                       "file_path"]
NODE_LLM_EXCLUDED = [STRUCTURE_KEY, "cells", "table_index", "table_ids", "chunk_index",
                     "section"]


def _id_func_or_default(v: Any) -> Any:
    return stable_id_func if v is None else v


def _id_func_name(f: Callable[..., Any]) -> dict[str, str]:
    return {"id_func_name": getattr(f, "__name__", type(f).__name__), "title": "id_func"}


IdFunc = Annotated[
    Callable[..., Any],
    BeforeValidator(_id_func_or_default),
    WithJsonSchema({"type": "string"}, mode="serialization"),
    WithJsonSchema({"type": "string"}, mode="validation"),
    PlainSerializer(_id_func_name),
]


@dataclass
class _Unit:
    text: str
    tokens: int
    is_table: bool = False
    cells: list[HWPXCell] = field(default_factory=list)
    table_index: int | None = None
    section: int | None = None
    start: int | None = None  # span of the Document text this unit comes from
    end: int | None = None


@dataclass
class _Block:
    data: dict[str, Any]
    start: int | None = None
    end: int | None = None


@dataclass
class _Section:
    title: str
    path: list[str]
    blocks: list[_Block] = field(default_factory=list)


@dataclass
class _Parsed:
    sections: list[_Section]
    tables: dict[int, HWPXTable]
    parents: dict[int, tuple[int, int, int] | None]
    rendered: dict[int, str]  # whole-table markdown (caption included), by table index


def _row_extent(table: HWPXTable) -> int:
    """Rows that hold or are covered by a cell (<= ``n_rows``; 0 for an empty table, whatever
    grid it declares, so nothing is allocated per declared row)."""
    reach = max((c.row + c.row_span for c in table.cells), default=0)
    return max(0, min(table.n_rows, reach))


def row_groups(table: HWPXTable) -> list[list[int]]:
    """Contiguous row ranges that no row span crosses (the unit a split may not cut).

    Only rows up to the last one a cell covers are grouped.

    >>> from llama_index.readers.hwpx._model import HWPXCell
    >>> t = HWPXTable(3, 1, [HWPXCell(0, 0), HWPXCell(1, 0, 2, 1)])
    >>> row_groups(t)
    [[0], [1, 2]]
    """
    n_rows = _row_extent(table)
    reach = list(range(n_rows))  # reach[r] = last row tied to row r
    for c in table.cells:
        last = min(c.row + c.row_span - 1, n_rows - 1)
        if 0 <= c.row < n_rows and last > reach[c.row]:
            reach[c.row] = last
    groups: list[list[int]] = []
    start, end = 0, -1
    for r in range(n_rows):
        end = max(end, reach[r])
        if r == end:
            groups.append(list(range(start, r + 1)))
            start = r + 1
    if start < n_rows:
        groups.append(list(range(start, n_rows)))
    return groups


def _table_text(table: HWPXTable, body: str) -> str:
    return f"{table.caption}\n\n{body}" if table.caption else body


class HWPXNodeParser(NodeParser):
    """Chunk HWPX Documents (from :class:`HWPXReader`) into titled section nodes.

    Documents without ``hwpx_structure`` metadata are chunked by blank-line paragraphs under
    their ``title`` metadata (or file name). ``id_func(i, document) -> str`` (LlamaIndex's
    standard hook) names the nodes; the default is :func:`stable_id_func`.
    """

    chunk_size: int = Field(default=1000, gt=0, description="Max tokens per node (cl100k).")
    chunk_overlap: int = Field(
        default=150, ge=0, description="Tokens of trailing paragraphs repeated in the next node."
    )
    split_level: int = Field(
        default=3, ge=1, le=6, description="Headings of this level or higher start a section."
    )
    id_func: IdFunc = Field(  # type: ignore[assignment]
        default=stable_id_func,
        description="id_func(chunk index in its Document, Document) -> node id; default: "
        "uuid5 of the Document id and the chunk index (stable across runs).",
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
        """PREVIOUS/NEXT links between consecutive chunks of one source (id and hash only).

        Replaces the base class's pass, which copies the parent's metadata (the whole
        structure) into each node, embeds every neighbour's metadata in the links and
        searches the Document text once per node: metadata, SOURCE and character spans are
        already set by :meth:`_split_one`.
        """
        if not self.include_prev_next_rel:
            return nodes
        links = [
            RelatedNodeInfo(node_id=n.node_id, node_type=n.get_type(), hash=n.hash)
            for n in nodes
        ]
        sources = [n.source_node.node_id if n.source_node else None for n in nodes]
        for i, node in enumerate(nodes):
            if sources[i] is None:
                continue
            if i > 0 and sources[i - 1] == sources[i]:
                node.relationships[NodeRelationship.PREVIOUS] = links[i - 1]
            if i + 1 < len(nodes) and sources[i + 1] == sources[i]:
                node.relationships[NodeRelationship.NEXT] = links[i + 1]
        return nodes

    # ------------------------------------------------------------------ sections
    def _parse(self, node: BaseNode) -> _Parsed:
        meta = node.metadata
        title = clean_title(str(meta.get("title") or meta.get("file_name") or ""))
        start_path = [
            t for t in (clean_title(p) for p in str(meta.get("heading_path") or "").split(" > "))
            if t
        ]
        raw = meta.get(STRUCTURE_KEY)
        doc_text = node.get_content()
        first = _Section(start_path[-1] if start_path else title, start_path)
        if not raw:
            blocks: list[_Block] = []
            pos = 0
            for p in doc_text.split("\n\n"):
                if p.strip():
                    at = doc_text.find(p, pos)
                    blocks.append(
                        _Block(
                            {"type": "paragraph", "text": p.strip(), "section": meta.get("section")},
                            at,
                            at + len(p),
                        )
                    )
                pos += len(p) + 2
            first.blocks = blocks
            return _Parsed([first], {}, {}, {})
        struct = json.loads(raw) if isinstance(raw, str) else raw
        tables: dict[int, HWPXTable] = {}
        parents: dict[int, tuple[int, int, int] | None] = {}
        rendered: dict[int, str] = {}
        current = first
        sections = [current]
        pos = 0  # offset of the next block's text in doc_text (blocks joined by "\n\n")
        for b in struct["blocks"]:
            head = b if b["type"] == "heading" else b.get("heading")
            if b["type"] == "table":
                idx = int(b["index"])
                t = tables[idx] = table_from_dict(b["table"])
                par = b["table"].get("parent")
                parents[idx] = None if par is None else (int(par[0]), int(par[1]), int(par[2]))
                if head is None:
                    rendered[idx] = _table_text(t, render_table(t.cells, t.n_rows, t.n_cols))
            if head is not None:
                text = heading_line(int(head["level"]), head["text"])
            elif b["type"] == "table":
                text = rendered[int(b["index"])]
            else:
                text = str(b["text"])
            block = _Block(b)
            if text:
                block.start = pos + (2 if pos else 0)
                block.end = block.start + len(text)
                pos = block.end
            if head is not None and int(head["level"]) <= self.split_level:
                htext = clean_title(str(head["text"]))
                path = [t for t in (clean_title(str(p)) for p in b.get("path") or []) if t]
                current = _Section(htext, path or [htext])
                sections.append(current)
                continue
            current.blocks.append(block)
        if pos != len(doc_text):  # text edited after reading: no character spans
            for sec in sections:
                for blk in sec.blocks:
                    blk.start = blk.end = None
        return _Parsed([s for s in sections if s.blocks], tables, parents, rendered)

    def _units(self, sec: _Section, parsed: _Parsed, budget: int) -> list[_Unit]:
        units: list[_Unit] = []
        for blk in sec.blocks:
            b = blk.data
            section = b.get("section")
            if b["type"] == "table" and "heading" not in b:
                idx = int(b["index"])
                for u in self._table_units(parsed.tables[idx], parsed.rendered[idx], budget):
                    u.start, u.end = blk.start, blk.end
                    units.append(u)
                continue
            if b["type"] == "heading":
                text = heading_line(int(b["level"]), b["text"])
            elif b["type"] == "table":
                text = heading_line(int(b["heading"]["level"]), b["heading"]["text"])
            else:
                text = str(b["text"])
            n = self._count(text)
            if n <= budget:
                units.append(_Unit(text, n, section=section, start=blk.start, end=blk.end))
                continue
            splitter = SentenceSplitter(
                chunk_size=budget,
                chunk_overlap=min(self.chunk_overlap, budget // 5),
                tokenizer=self._tok,
            )
            cursor = 0
            for piece in splitter.split_text(text):
                u = _Unit(piece, self._count(piece), section=section)
                at = text.find(piece, cursor)
                if blk.start is not None and at >= 0:
                    u.start, u.end = blk.start + at, blk.start + at + len(piece)
                    cursor = at + 1
                else:
                    u.start, u.end = blk.start, blk.end
                units.append(u)
        return units

    def _table_units(self, table: HWPXTable, whole_text: str, budget: int) -> list[_Unit]:
        n_rows = _row_extent(table)
        whole = _Unit(
            whole_text, self._count(whole_text), True, list(table.cells), table.index,
            table.section,
        )
        if whole.tokens <= budget or n_rows <= 1:
            return [whole]
        by_row: dict[int, list[HWPXCell]] = {}
        for c in table.cells:
            by_row.setdefault(c.row, []).append(c)
        sparse = is_sparse(table.cells)

        def unit(rows: list[int]) -> _Unit:
            cells = [c for r in rows for c in by_row.get(r, ())]
            body = render_table(cells, table.n_rows, table.n_cols, rows, sparse=sparse)
            text = _table_text(table, body)
            return _Unit(text, self._count(text), True, cells, table.index, table.section)

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
        parsed = self._parse(node)
        base_meta = (
            {k: v for k, v in node.metadata.items() if k != STRUCTURE_KEY}
            if self.include_metadata
            else {}
        )
        if "title" in base_meta and isinstance(base_meta["title"], str):
            base_meta["title"] = clean_title(base_meta["title"])
        source = RelatedNodeInfo(
            node_id=node.node_id,
            node_type=node.get_type(),
            metadata={k: v for k, v in node.metadata.items() if k != STRUCTURE_KEY},
            hash=node.hash,  # once per Document, never per node
        )
        excluded_embed = list(
            dict.fromkeys(list(node.excluded_embed_metadata_keys) + NODE_EMBED_EXCLUDED)
        )
        excluded_llm = list(
            dict.fromkeys(list(node.excluded_llm_metadata_keys) + NODE_LLM_EXCLUDED)
        )
        text_template = getattr(node, "text_template", TextNode().text_template)
        out: list[BaseNode] = []
        for sec in parsed.sections:
            prefix = f"## {sec.title}\n\n"
            budget = max(self.chunk_size - self._count(prefix), max(self.chunk_size // 4, 16))
            units = self._units(sec, parsed, budget)
            for chunk in self._pack(units, budget):
                k = len(out)
                meta = dict(base_meta)
                meta["section_title"] = sec.title
                meta["heading_path"] = " > ".join(sec.path)
                meta["chunk_index"] = k
                sections_in = [u.section for u in chunk if u.section is not None]
                if sections_in:
                    meta["section"] = sections_in[0]
                table_ids = list(
                    dict.fromkeys(u.table_index for u in chunk if u.table_index is not None)
                )
                if table_ids:
                    meta["table_index"] = table_ids[0]
                    meta["table_ids"] = json.dumps(table_ids)
                    meta["cells"] = self._cells_json(chunk, parsed)
                node_id = self.id_func(k, node)
                if not isinstance(node_id, str):
                    raise TypeError(
                        f"id_func must return a str node id, got {type(node_id).__name__}"
                    )
                starts = [u.start for u in chunk if u.start is not None]
                ends = [u.end for u in chunk if u.end is not None]
                child = TextNode(
                    id_=node_id,
                    text=prefix + "\n\n".join(u.text for u in chunk),
                    metadata=meta,
                    excluded_embed_metadata_keys=excluded_embed,
                    excluded_llm_metadata_keys=excluded_llm,
                    metadata_template=node.metadata_template,
                    metadata_separator=node.metadata_separator,
                    text_template=text_template,
                    start_char_idx=min(starts) if starts else None,
                    end_char_idx=max(ends) if ends else None,
                )
                child.relationships[NodeRelationship.SOURCE] = source
                out.append(child)
        return out

    @staticmethod
    def _cells_json(chunk: list[_Unit], parsed: _Parsed) -> str:
        """One group per table in the chunk (a table split over two units of one chunk, e.g.
        repeated header rows, keeps each cell once)."""
        groups: dict[int, dict[tuple[int, int], HWPXCell]] = {}
        for u in chunk:
            if u.is_table and u.table_index is not None:
                g = groups.setdefault(u.table_index, {})
                for c in u.cells:
                    g.setdefault((c.row, c.col), c)
        return encode_cells(
            (
                idx,
                parsed.tables[idx].depth,
                parsed.parents.get(idx),
                [(c.row, c.col, c.row_span, c.col_span, c.text) for c in cells.values()],
            )
            for idx, cells in groups.items()
        )

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
