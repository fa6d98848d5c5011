"""``car_index.json``: the folder's record of what it was built from and with.

One JSON document inside each generation of the folder's
:class:`~llama_index_car.indices.CriterionAwareIndex` (bound by the generation's one
manifest): ``format_version``, the embedding spec, chunking, counts, failures, ``sources``
(``{key: {"sha256", "node_ids", "failed"[, "text"][, "alias_of"]}}``), the store record and
the store ids an update left to delete. It is read once per load (:func:`record_at`: the
bytes the manifest binds, parsed and checked by :func:`check_record`), and without
LlamaIndex when only the record is needed (:func:`read_record`, a no-op ``--update``).
Standard library only at import.

>>> BuildSummary("idx", files=2, documents=2, nodes=7, table_nodes=1).line()
'2 files → 2 documents → 7 nodes (1 table); 0 failed; persisted to idx in 0.0 s'
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import IndexPersistError
from llama_index_car.folder.keys import doc_key, twin_canon
from llama_index_car.folder.sources import FileFailure

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

    from llama_index_car.span_index import SpanIndex

#: 4: one generation of the folder's CriterionAwareIndex (flat files, one manifest), per-file
#: hashes keyed by the path under the source folder, content-addressed node ids, the store as
#: a record (kind, collection, fingerprint: never a host, a password or an outside path)
FORMAT_VERSION = 4
READ_VERSIONS: tuple[int, ...] = (4,)
RECORD_NAME = "car_index.json"


@dataclass
class BuildSummary:
    """What a build or update did (also stored, minus timing, in ``car_index.json``)."""

    persist_dir: str
    files: int
    documents: int
    nodes: int
    table_nodes: int
    failures: list[FileFailure] = field(default_factory=list)
    embed: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    #: ``--update`` only: files re-indexed (changed or new), removed (vanished), unchanged
    updated: int | None = None
    removed: int = 0
    unchanged: int = 0
    #: files holding the same document as an indexed one (kept as its aliases, not indexed)
    duplicates: int = 0

    def line(self) -> str:
        """One-line human summary, e.g. ``10 files → 10 documents → 52 nodes (12 table) …``."""
        twins = (f"; {self.duplicates} duplicate{'s' if self.duplicates != 1 else ''} of "
                 "indexed files (kept as aliases)" if self.duplicates else "")
        if self.updated is not None:
            return (
                f"update: {self.updated} changed or new, {self.removed} removed, "
                f"{self.unchanged} unchanged → {self.documents} documents, {self.nodes} nodes; "
                f"{len(self.failures)} failed{twins}; {self.persist_dir} in "
                f"{self.seconds:.1f} s"
            )
        return (
            f"{self.files} files → {self.documents} documents → {self.nodes} nodes "
            f"({self.table_nodes} table); {len(self.failures)} failed{twins}; "
            f"persisted to {self.persist_dir} in {self.seconds:.1f} s"
        )


def summary(
    out: Path, record: dict[str, Any], failures: list[FileFailure], start: float, **extra: Any,
) -> BuildSummary:
    """The :class:`BuildSummary` of a written ``record`` (``start``: ``perf_counter`` then)."""
    duplicates = sum(1 for v in record["sources"].values()
                     if isinstance(v, dict) and v.get("alias_of"))
    return BuildSummary(
        persist_dir=str(out), files=len(record["files"]), documents=record["documents"],
        nodes=record["nodes"], table_nodes=record["table_nodes"], failures=failures,
        embed=record["embed"], seconds=time.perf_counter() - start, duplicates=duplicates,
        **extra,
    )


# ----------------------------------------------------------------------------- writing
def source_entries(
    hashes: dict[str, str], nodes: Sequence[BaseNode], failed: set[str],
    digests: dict[str, str] | None = None, canon: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{key: {"sha256", "node_ids", "failed"[, "text"][, "alias_of"]}}`` (``hashes``:
    ``{key: sha256}``): a file that failed keeps its hash, so ``--update`` retries it only
    once its content changes; a file read has its text digest (``digests``), and one holding
    the same document as another (``canon``, default :func:`twin_canon` of ``digests``) names
    the indexed one as ``alias_of`` and has no nodes."""
    digests = digests or {}
    canon = twin_canon(digests) if canon is None else canon
    by_file: dict[str, list[str]] = {}
    for n in nodes:
        by_file.setdefault(doc_key(n.ref_doc_id), []).append(n.node_id)
    out: dict[str, dict[str, Any]] = {}
    for path, digest in hashes.items():
        entry: dict[str, Any] = {"sha256": digest, "node_ids": by_file.get(path, []),
                                 "failed": path in failed}
        if path in digests:
            entry["text"] = digests[path]
        if canon.get(path, path) != path:
            entry["alias_of"] = canon[path]
            entry["node_ids"] = []
        out[path] = entry
    return out


def new_record(
    spec: dict[str, Any], chunk_size: int, chunk_overlap: int, store: dict[str, Any] | None,
    files: Sequence[str], documents: int, nodes: Sequence[BaseNode],
    failures: Sequence[FileFailure], sources: dict[str, dict[str, Any]],
    store_garbage: Sequence[str] = (), spans: SpanIndex | None = None,
) -> dict[str, Any]:
    """The ``car_index.json`` of one generation (see the module docstring)."""
    return {
        "format_version": FORMAT_VERSION,
        "created_by": "llama-index-car",
        "embed": spec,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "store": store,
        "store_garbage": sorted(store_garbage),
        "files": list(files),
        "documents": documents,
        "nodes": len(nodes),
        "table_nodes": sum(1 for n in nodes if n.metadata.get("table_index") is not None),
        "failures": [asdict(f) for f in failures],
        "sources": sources,
        "spans": None if spans is None else {"spans": spans.n_spans, "dim": spans.dim},
    }


# ----------------------------------------------------------------------------- reading
def read_record(persist_dir: str | Path) -> dict[str, Any]:
    """The folder's ``car_index.json`` (of its live generation), checked, without loading
    LlamaIndex: the generation's one ``manifest.json`` (every file's size and sha256; the BM25
    arrays are hashed by their loader), then the record (:func:`record_at`).

    Raises:
        IndexPersistError: missing, unreadable, damaged or of another ``format_version``.
    """
    from llama_index_car import _persist
    from llama_index_car.indices import _layout  # names only: no LlamaIndex

    def read(root: Path) -> dict[str, Any]:
        try:
            manifest = _persist.read_manifest(
                root, kind=_layout.KIND, format_versions=(_layout.FORMAT_VERSION,),
                required=(RECORD_NAME,),
                verify=lambda name: not _layout.checked_by_loader(name)
                and name != RECORD_NAME)
        except IndexPersistError as exc:
            raise IndexPersistError(f"{exc}; or rebuild the index with llama-car index") from exc
        return record_at(root, manifest)

    if not Path(persist_dir).is_dir():
        raise IndexPersistError(f"{persist_dir} is not an index folder (no such directory)")
    return _persist.load_live(persist_dir, read)


def record_at(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """``root/car_index.json`` read once from the bytes ``manifest`` binds, then checked
    (:func:`record_of`)."""
    from llama_index_car import _persist

    documents = {}
    if RECORD_NAME in manifest["files"]:
        documents[RECORD_NAME] = _persist.read_bound_json(root, manifest, RECORD_NAME)
    return record_of(documents, root)


def record_of(documents: dict[str, Any], root: Path) -> dict[str, Any]:
    """The checked record (:func:`check_record`) among the parsed extra ``documents`` of the
    generation ``root`` (as its index read them).

    Raises:
        IndexPersistError: no record (not an index folder's generation), or a damaged one.
    """
    path = root / RECORD_NAME
    if RECORD_NAME not in documents:
        raise IndexPersistError(
            f"{path} not found; {root} is not an index folder "
            "(create one with: llama-car index SOURCE_DIR --persist DIR)"
        )
    record = documents[RECORD_NAME]
    check_record(record, path)
    return dict(record)


#: field -> accepted types of ``car_index.json`` (a field may be absent)
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "embed": (dict,),
    "chunk_size": (int,),
    "chunk_overlap": (int,),
    "store": (dict, type(None)),
    "store_garbage": (list,),
    "files": (list,),
    "documents": (int,),
    "nodes": (int,),
    "table_nodes": (int,),
    "failures": (list,),
    "sources": (dict,),
    "spans": (dict, type(None)),
}


def check_record(record: Any, path: Path) -> None:
    """``record`` is a ``car_index.json`` of a format this version reads whose every known
    field has its type (a hash-consistent but wrong value, e.g. ``"embed": "use"``, is a
    named error, not an AttributeError later): the sources, the embedding spec's strings and
    the store record included.

    Raises:
        IndexPersistError: naming ``path`` and the first field that is wrong.
    """
    found = record.get("format_version") if isinstance(record, dict) else None
    if found not in READ_VERSIONS:
        raise IndexPersistError(
            f"{path} has format_version {found!r}, this version reads "
            f"{list(READ_VERSIONS)}; rebuild the index with llama-car index"
        )
    for key, types in _RECORD_TYPES.items():
        if key in record and (
            not isinstance(record[key], types) or isinstance(record[key], bool)
        ):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise IndexPersistError(
                f"{path}: field {key!r} is {type(record[key]).__name__}, expected {want}; "
                "rebuild the index with llama-car index"
            )
    sources = record.get("sources", {})
    for key, entry in sources.items():
        ok = (
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("node_ids", []), list)
            and isinstance(entry.get("text", ""), str) and len(entry.get("text", "")) <= 64
            and (entry.get("alias_of") is None or (
                isinstance(entry["alias_of"], str) and entry["alias_of"] in sources
                and entry["alias_of"] != key and not entry.get("node_ids")))
        )
        if not ok:
            raise IndexPersistError(
                f"{path}: sources[{str(key)[:80]!r}] is not a source record (sha256, node_ids, "
                "text, alias_of of another source); rebuild the index with llama-car index"
            )
    embed = record.get("embed", {})
    for key in ("provider", "model_name", "class_name"):
        if key in embed and not isinstance(embed[key], str):
            raise IndexPersistError(
                f"{path}: field 'embed.{key}' is {type(embed[key]).__name__}, expected str; "
                "rebuild the index with llama-car index"
            )
    if record.get("store") is not None:
        _check_store_record(record["store"], path)


def _check_store_record(store: dict[str, Any], path: Path) -> None:
    """The record's store has exactly the known fields with their types."""
    from llama_index_car.stores import _NAME_RE, STORE_KINDS

    ok = (
        set(store) == {"kind", "collection", "inside", "fingerprint"}
        and store["kind"] in STORE_KINDS
        and isinstance(store["collection"], str) and bool(_NAME_RE.match(store["collection"]))
        and isinstance(store["inside"], bool)
        and isinstance(store["fingerprint"], str) and len(store["fingerprint"]) <= 64
        and not (store["inside"] and store["kind"] == "postgresql")
    )
    if not ok:
        raise IndexPersistError(
            f"{path}: field 'store' is not a store record (kind, collection, inside, "
            "fingerprint); rebuild the index with llama-car index"
        )
