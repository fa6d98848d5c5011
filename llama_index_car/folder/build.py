"""Build a folder: source files → one crash-safe generation of its index and record.

files → the reader of each suffix (:mod:`~llama_index_car.folder.sources`) → documents named
by content (:mod:`~llama_index_car.folder.keys`; a twin of an indexed file is recorded, not
indexed) → :class:`~llama_index.readers.hwpx.HWPXNodeParser` nodes → dense vectors through the
shared embedding cache (:class:`~llama_index_car.embeddings.cache.EmbeddingCache`: rebuilding,
or indexing texts an evaluation already embedded, re-embeds nothing), the Kiwi BM25 state
(``k1=1.5, b=0.75, epsilon=0.25``) and the span index
(:class:`~llama_index_car.span_index.SpanIndex`) → the vectors in memory or in a store
(:mod:`~llama_index_car.folder.store`) → :func:`finish_build`: the folder's
:class:`~llama_index_car.indices.CriterionAwareIndex` persisted with its ``car_index.json``
(:mod:`~llama_index_car.folder.record`). The Ray path (:mod:`~llama_index_car.folder.ray`)
computes the same parts on a cluster and ends in the same :func:`finish_build`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError, NothingToIndexError
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
    source_entries,
    summary,
)
from llama_index_car.folder.sources import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    FileFailure,
    find_source_files,
    parse_nodes,
    read_documents,
    sha256_file,
)
from llama_index_car.folder.store import open_store_index, store_record, store_uri_for

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

    from llama_index_car.indices._lexical import Lexical, Tokens
    from llama_index_car.span_index import SpanIndex

@dataclass(frozen=True)
class SourceRead:
    """What reading the source files gave, besides the nodes: ``keys``/``hashes`` (``{str(file):
    key / sha256}``), the ``documents`` indexed, the ``failures``, and ``digests`` (``{key: text
    digest}`` of the files read; their twins were not indexed)."""

    keys: dict[str, str]
    hashes: dict[str, str]
    documents: int
    failures: list[FileFailure] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)


def writable_folder(persist_dir: str | Path, overwrite: bool, how: str) -> Path:
    """``persist_dir`` as a Path, refused if it is a file or a non-empty folder without
    ``overwrite`` (``how`` says what else the caller may do)."""
    out = Path(persist_dir)
    if out.exists() and not out.is_dir():
        raise ConfigurationError(f"--persist {out} is a file; pass a folder")
    from llama_index_car._persist import LOCK_NAME

    # a lone lock file is what a build that failed (full disk, ^C) leaves: the folder is empty
    if out.is_dir() and any(p.name != LOCK_NAME for p in out.iterdir()) and not overwrite:
        raise ConfigurationError(f"{out} is not empty; choose a new folder, {how}")
    return out


def chunking(options: BuildOptions) -> tuple[int, int]:
    """``(chunk_size, chunk_overlap)`` of a build (the defaults for ``None``)."""
    return (DEFAULT_CHUNK_SIZE if options.chunk_size is None else options.chunk_size,
            DEFAULT_CHUNK_OVERLAP if options.chunk_overlap is None else options.chunk_overlap)


# ----------------------------------------------------------------------------- build
def build_index(
    source: str | Path | Sequence[str | Path],
    persist_dir: str | Path,
    options: BuildOptions | None = None,
) -> BuildSummary:
    """Index HWP 5, HWPX and HWPML files into ``persist_dir`` (see the module docstring).

    Args:
        source: a folder (searched recursively for ``*.hwp``, ``*.hwpx``, ``*.hml``) or a
            list of files.
        persist_dir: output folder; must be empty or absent unless ``options.overwrite`` (to
            bring a folder up to date, :func:`~llama_index_car.folder.update_index`).
        options: :class:`~llama_index_car.folder.BuildOptions` (defaults: offline e5, chunks
            of 1000/150 tokens, spans, the shared embedding cache, vectors in the folder).

    Raises:
        ConfigurationError: no source files, or a non-empty ``persist_dir`` without
            ``overwrite``.
        NothingToIndexError: every file failed to parse or held no text.
        StoreError: the ``options.store`` server (Milvus, Qdrant) cannot be reached or
            refuses us: checked before any file is read or embedded.

    >>> summary = build_index("./guidelines", "./car-index",  # doctest: +SKIP
    ...                       BuildOptions(embed="e5", store="qdrant"))
    >>> print(summary.line())  # doctest: +SKIP
    10 files → 10 documents → 35 nodes (8 table); 0 failed; persisted to ./car-index in 4.2 s
    """
    options = options or BuildOptions()
    from llama_index_car.folder.embed import embed_nodes, resolve_embed, span_index
    from llama_index_car.indices._lexical import Lexical, Tokens
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    chunk_size, chunk_overlap = chunking(options)
    start = time.perf_counter()
    out = writable_folder(persist_dir, options.overwrite,
                          "pass overwrite=True (--overwrite) or update it (--update)")
    record = store_record(options.store)
    store_uri = store_uri_for(record, out, options.store) if record else None
    if store_uri is not None:
        from llama_index_car.stores import is_server_uri, ping_server

        if is_server_uri(store_uri):  # a server it cannot use: said now, not after embedding
            ping_server(store_uri)
    files = find_source_files(source)
    keys = source_keys(source, files)
    hashes = {str(f): sha256_file(f) for f in files}
    documents, failures = read_documents(files, show_progress=options.show_progress,
                                         on_error=options.on_error)
    key_all(documents, keys, hashes)
    digests = file_digests(documents, keys)  # the same document twice is indexed once
    documents = indexed_only(documents, keys, twin_canon(digests))
    nodes = parse_nodes(documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap,
                        show_progress=options.show_progress)
    if not nodes:
        raise NothingToIndexError(
            f"no text could be indexed from {len(files)} file(s) "
            f"({len(failures)} failed to parse); check the files listed above"
        )
    model = resolve_embed(options.embed_model, options.embed)
    vectors = embed_nodes(model, nodes, options)
    spans = span_index(model, nodes, options) if options.spans else None
    tokens = Tokens(KiwiTokenizer(), True, options.show_progress)
    return finish_build(
        out, model=model, nodes=nodes, vectors=vectors,
        lexical=Lexical.build(nodes, tokens), tokens=tokens, spans=spans,
        read=SourceRead(keys, hashes, len(documents), failures, digests),
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, store=store_uri, record=record,
        start=start,
    )


def finish_build(
    out: Path,
    *,
    model: Any,
    nodes: Sequence[BaseNode],
    vectors: dict[str, list[float]],
    lexical: Lexical,
    tokens: Tokens,
    spans: SpanIndex | None,
    read: SourceRead,
    chunk_size: int,
    chunk_overlap: int,
    store: str | None,
    record: dict[str, Any] | None,
    start: float,
) -> BuildSummary:
    """The tail shared by every builder (local, Ray): the vector index (in memory, or the
    ``store`` URI whose folder ``record`` is given) over ``vectors``, then the folder's
    :class:`~llama_index_car.indices.CriterionAwareIndex` (the BM25 state ``lexical`` of
    ``nodes``, tokenized by ``tokens``; ``spans`` when given) written as one crash-safe
    generation with its ``car_index.json`` (``read``: what the sources gave)."""
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex
    from llama_index_car.providers import embed_spec

    dims = len(next(iter(vectors.values())))
    if store:
        if record and record.get("inside"):
            out.mkdir(parents=True, exist_ok=True)
        index = open_store_index(store, model, dims, create=True)
        index.insert_nodes([n.model_copy(update={"embedding": vectors[n.node_id]})
                            for n in nodes])
        from llama_index_car.sparse_stores import sparse_backend

        rows = sparse_backend(index.vector_store, create=True)
        if rows is not None:  # Milvus, Qdrant: the BM25 rows go there too, the df table stays
            lexical = lexical.into_store(rows)
    else:  # the folder keeps its vectors: the flat store (written into the generation)
        from llama_index_car.indices._dense import flat_index

        index = flat_index(vectors, nodes, model)
    spec = embed_spec(model, dims)
    keys = read.keys
    failed = {keys.get(f.path, f.path) for f in read.failures}
    folder_record = new_record(
        spec, chunk_size, chunk_overlap, record, list(keys.values()), read.documents, nodes,
        read.failures, source_entries({keys[f]: read.hashes[f] for f in keys}, nodes,
                                      failed=failed, digests=read.digests),
        spans=spans,
    )
    folder = CriterionAwareIndex.from_parts(lexical, tokens, vector_index=index,
                                            embed_model=model, spans=spans)
    folder.persist(out, documents={RECORD_NAME: folder_record})
    folder.drop_bm25_collections()  # a previous index's reweighted rows (none without a store)
    return summary(out, folder_record, list(read.failures), start)
