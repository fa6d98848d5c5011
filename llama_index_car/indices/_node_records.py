"""The nodes of an index generation, read when used: one record set ``nodes`` (issue 39 (b)).

``nodes.*`` (:mod:`llama_index_car._records`: a blob, its offsets, a key table) holds record
``i`` = node ``i`` of the BM25 arrays: key the node id, payload the UTF-8 JSON
``{"h": sha256 of the node's EMBED text, "n": doc_to_json(node)}``. A loaded index keeps a
:class:`NodeTable` instead of a list of nodes: opening maps the files (nothing proportional to
the number of nodes is read); a node is parsed when a query returns it, a filter reads its
metadata, or an update needs it. Lookup by id goes through the record set's sorted key
digests (:class:`~llama_index_car._records.KeyPositions`). Every read is bounds-checked by the record file; a record
that is not a node of that id is an :class:`IndexPersistError` naming ``nodes.blob``.

>>> import tempfile, pathlib
>>> from llama_index.core.schema import TextNode
>>> with tempfile.TemporaryDirectory() as d:
...     root = pathlib.Path(d)
...     _ = write_nodes(root, [TextNode(id_="a", text="x")], ["0" * 64])
...     table = NodeTable.open(root, {n: {"bytes": (root / n).stat().st_size}
...                                   for n in [p.name for p in root.iterdir()]})
...     table[0].text, table.positions.get("a"), table.hashes[0][:4], len(table)
('x', 0, '0000', 1)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc

from llama_index_car._errors import IndexPersistError
from llama_index_car._records import KeyPositions, RecordFile, write_records

NAME = "nodes"
#: the files of the record set (``_records`` layout)
FILES = tuple(f"{NAME}.{p}" for p in ("blob", "offsets.npy", "key_len.npy", "key_hash.npy",
                                         "key_order.npy", "meta.json"))
_CACHE = 4096  # parsed nodes kept per table (the hits and candidates of recent queries)


def write_nodes(root: Path, nodes: Iterable[BaseNode], hashes: Iterable[str]) -> dict[str, Any]:
    """The record set of ``nodes`` (with their text ``hashes``) in ``root``; a
    :class:`NodeTable` among ``nodes`` is copied record by record (nothing parsed)."""
    if isinstance(nodes, NodeTable):
        return write_records(root, NAME, nodes.raw())
    items = ((n.node_id, json.dumps({"h": h, "n": doc_to_json(n)}, ensure_ascii=False).encode())
             for n, h in zip(nodes, hashes, strict=True))
    return write_records(root, NAME, items)


class NodeTable(Sequence[BaseNode]):
    """Node ``i`` of a generation, parsed from its record when read (module docstring)."""

    def __init__(self, records: RecordFile) -> None:
        self._rf = records
        self._cache: dict[int, BaseNode] = {}
        self._lock = threading.Lock()
        self.positions = KeyPositions(records)
        self.hashes = _Hashes(self)

    @classmethod
    def open(cls, root: Path, files: Mapping[str, Any], *, full: bool = False) -> NodeTable:
        """The record set in ``root`` whose manifest entries are ``files`` (name → ``{"bytes",
        ...}``): every file listed and of the recorded size, then opened (``full``: its
        tables checked whole, O(n)).

        Raises:
            IndexPersistError: naming the first file missing, of another size, or malformed.
        """
        for name in FILES:
            entry = files.get(name)
            path = root / name
            if entry is None:
                raise IndexPersistError(f"{path} is not listed in the manifest; rebuild the index")
            if not path.is_file() or path.stat().st_size != entry["bytes"]:
                raise IndexPersistError(
                    f"{path} is missing or its size differs from manifest.json; rebuild the index")
        return cls(RecordFile.open(root, NAME, verify="full" if full else "lazy"))

    @property
    def path(self) -> Path:
        return Path(self._rf._paths["blob"])

    def __len__(self) -> int:
        return len(self._rf)

    @overload
    def __getitem__(self, i: int) -> BaseNode: ...
    @overload
    def __getitem__(self, i: slice) -> list[BaseNode]: ...
    def __getitem__(self, i: int | slice) -> BaseNode | list[BaseNode]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        got = self._cache.get(i)
        if got is None:
            got = _node(self._record(i), self._rf.key(i), self.path, i)
            with self._lock:
                if len(self._cache) >= _CACHE:
                    self._cache.clear()
                self._cache[i] = got
        return got

    def __iter__(self) -> Iterator[BaseNode]:
        for i in range(len(self)):
            yield self[i]

    def node_id(self, i: int) -> str:
        """The id of node ``i`` (its key: nothing parsed)."""
        return self._rf.key(i)

    def _record(self, i: int) -> dict[str, Any]:
        rec = self._rf.json(i)
        if not isinstance(rec, dict) or not isinstance(rec.get("h"), str) or not isinstance(
                rec.get("n"), dict):
            raise IndexPersistError(f"{self.path}: record {i} is not a node record; rebuild the "
                                    "index")
        return rec

    def metadata(self, i: int) -> dict[str, Any]:
        """The metadata of node ``i`` (read from its record without building the node)."""
        got = self._cache.get(i)
        if got is not None:
            return dict(got.metadata)
        data = self._record(i)["n"].get("__data__")
        md = data.get("metadata") if isinstance(data, dict) else None
        if not isinstance(md, dict):
            return dict(self[i].metadata)  # another layout: the node's own parse names damage
        return md

    def hash(self, i: int) -> str:
        return self._record(i)["h"]  # type: ignore[no-any-return]

    def raw(self) -> Iterator[tuple[str, bytes]]:
        """``(id, payload bytes)`` of every record, in order."""
        for i in range(len(self)):
            yield self._rf.key(i), self._rf.payload(i)


def _node(rec: dict[str, Any], key: str, path: Path, i: int) -> BaseNode:
    try:
        node = json_to_doc(rec["n"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise IndexPersistError(f"{path}: record {i} is not a node ({str(exc)[:120]}); rebuild "
                                "the index") from exc
    if node.node_id != key:
        raise IndexPersistError(f"{path}: record {i} holds node {node.node_id[:80]!r}, not "
                                f"{key[:80]!r}; rebuild the index")
    return node


class _Hashes(Sequence[str]):
    def __init__(self, table: NodeTable) -> None:
        self._t = table

    def __len__(self) -> int:
        return len(self._t)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._t.hash(j) for j in range(*i.indices(len(self)))]
        return self._t.hash(i if i >= 0 else i + len(self))
