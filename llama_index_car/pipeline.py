"""Build, persist and load a local criterion-aware index folder (used by the CLI and demo).

One call turns a folder of HWPX files into a self-contained directory::

    PERSIST_DIR/
      car_index.json      manifest: format_version, embedding spec, chunking, counts, failures
      vector/             VectorStoreIndex storage (SimpleVectorStore + docstore, plain JSON)
      bm25/               KiwiBM25Retriever.persist() output (generations: JSON + mapped .npy)
      hypothesizer/       CorpusCriterionHypothesizer state (JSON + .npy/.npz)
      tables.json         cell text and coordinates of every table in an indexed table node

Pipeline: HWPX files → :class:`~llama_index.readers.hwpx.HWPXReader` → documents →
:class:`~llama_index.readers.hwpx.HWPXNodeParser` (``chunk_size=1000``, ``chunk_overlap=150``
tokens) → nodes → dense vectors (default: the offline
:class:`~llama_index_car.embeddings.e5.MultilingualE5Embedding`, or whatever
``CAR_EMBED_MODEL`` names; computed through the shared
:class:`~llama_index_car.evaluation.cache.EmbeddingCache`, so rebuilding an index, or indexing
texts an evaluation already embedded, re-embeds nothing) and a Kiwi BM25 index
(``k1=1.5, b=0.75, epsilon=0.25``) → the criterion hypothesizer learnt from the nodes.

The manifest records the embedding provider (``e5``, ``use``, ``openai`` or ``custom``), and
:func:`load_index` embeds queries with that provider by default, so a folder built with USE
keeps being queried with USE whatever the current default is.

:func:`load_retriever` reopens the folder as one of four retrievers:

* ``"dense"`` — the vector index retriever (cosine);
* ``"bm25"`` — :class:`~llama_index_car.retrievers.kiwi_bm25.KiwiBM25Retriever`;
* ``"hybrid"`` — weighted RRF of the two (``alpha`` weights dense, ``1 - alpha`` BM25,
  ``rrf_k = 60``);
* ``"car"`` — :class:`~llama_index_car.retrievers.criterion_aware.CriterionAwareRetriever`
  (hybrid over hypothesis-expanded queries; offline corpus hypothesizer unless an ``llm``
  is given).

Files that cannot be read are reported (``BuildSummary.failures`` and the ``on_error``
callback) and skipped; they never abort the build.

>>> from llama_index_car.demo import demo_corpus_dir
>>> [p.name for p in find_hwpx_files(demo_corpus_dir())][:2]
['dg2012_tunnel.hwpx', 'dg2015_rest.hwpx']
>>> BuildSummary("idx", files=2, documents=2, nodes=7, table_nodes=1).line()
'2 files → 2 documents → 7 nodes (1 table); 0 failed; persisted to idx in 0.0 s'
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:  # doctest: +SKIP
...     summary = build_index(demo_corpus_dir(), tmp)
...     hits = load_retriever(tmp, "car").retrieve("측구 깊이 기준")
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError, IndexPersistError

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.indices.vector_store.base import VectorStoreIndex
    from llama_index.core.llms import LLM
    from llama_index.core.schema import BaseNode, Document

    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "RETRIEVER_KINDS",
    "BuildSummary",
    "FileFailure",
    "LocalIndex",
    "NothingToIndexError",
    "build_index",
    "find_hwpx_files",
    "load_index",
    "load_retriever",
    "parse_nodes",
    "read_documents",
]

FORMAT_VERSION = 1
MANIFEST_NAME = "car_index.json"
VECTOR_DIR = "vector"
BM25_DIR = "bm25"
HYPOTHESIZER_DIR = "hypothesizer"
TABLES_NAME = "tables.json"
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

    def line(self) -> str:
        """One-line human summary, e.g. ``10 files → 10 documents → 52 nodes (12 table) …``."""
        return (
            f"{self.files} files → {self.documents} documents → {self.nodes} nodes "
            f"({self.table_nodes} table); {len(self.failures)} failed; "
            f"persisted to {self.persist_dir} in {self.seconds:.1f} s"
        )


# ----------------------------------------------------------------------------- reading
def find_hwpx_files(source: str | Path | Sequence[str | Path]) -> list[Path]:
    """The ``*.hwpx`` files under ``source`` (a folder, searched recursively, or file paths).

    Sorted by path so builds are deterministic.

    Raises:
        ConfigurationError: a path does not exist, or no ``.hwpx`` file was found.
    """
    sources = [source] if isinstance(source, str | Path) else list(source)
    files: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            files.extend(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() == ".hwpx")
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigurationError(f"{p} does not exist; pass a folder of .hwpx files")
    if not files:
        raise ConfigurationError(f"no .hwpx files found in {', '.join(map(str, sources))}")
    return sorted(set(files))


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
    """Read HWPX files with :class:`HWPXReader` (one document per file, tables kept).

    A file that fails to parse (``HWPXError``, a broken zip, an unreadable path, malformed
    XML) is recorded as a :class:`FileFailure`, passed to ``on_error`` and skipped.
    """
    from llama_index.readers.hwpx import HWPXError, HWPXReader

    reader = HWPXReader()
    documents: list[Document] = []
    failures: list[FileFailure] = []
    for path in _progress(files, show_progress, "reading"):
        try:
            docs = reader.load_data(path)
        except (HWPXError, OSError, zipfile.BadZipFile, ValueError, KeyError) as exc:
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


def collect_tables(nodes: Sequence[BaseNode]) -> dict[str, list[dict[str, Any]]]:
    """The tables of every file that has a table node, read back with ``load_tables``.

    Returns ``{file_path: [{"index", "caption", "n_rows", "n_cols", "cells": [[row, col,
    row_span, col_span, text], ...]}, ...]}`` so query output can show cell text with its
    coordinates (node metadata keeps only the coordinates).
    """
    from llama_index.readers.hwpx import HWPXError, HWPXReader

    reader = HWPXReader()
    paths = sorted(
        {
            str(n.metadata.get("file_path"))
            for n in nodes
            if n.metadata.get("table_index") is not None and n.metadata.get("file_path")
        }
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        try:
            tables = reader.load_tables(path)
        except (HWPXError, OSError, zipfile.BadZipFile, ValueError, KeyError):
            continue  # already reported by read_documents, or unreadable now: no cell text
        out[path] = [
            {
                "index": t.index,
                "caption": t.caption,
                "n_rows": t.n_rows,
                "n_cols": t.n_cols,
                "cells": [[c.row, c.col, c.row_span, c.col_span, c.text] for c in t.cells],
            }
            for t in tables
        ]
    return out


# ----------------------------------------------------------------------------- embedding spec
def embed_spec(embed_model: BaseEmbedding, provider: str) -> dict[str, Any]:
    """What to record about the embedding so a later load can check it matches."""
    return {
        "provider": provider,
        "class_name": embed_model.class_name(),
        "model_name": getattr(embed_model, "model_name", ""),
        "dimensions": getattr(embed_model, "dimensions", None),
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

    from llama_index_car.evaluation.cache import CachedEmbedding, EmbeddingCache, default_cache_dir

    cache = EmbeddingCache(cache_dir or default_cache_dir(), model, batch_size=INDEX_CACHE_BATCH)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    cache.embed(texts, "text", show_progress=show_progress, desc="embedding")
    return CachedEmbedding(cache)


def _stored_embeddings(index: VectorStoreIndex) -> dict[str, list[float]] | None:
    """``{node_id: vector}`` from a ``SimpleVectorStore`` (None for other stores)."""
    data = getattr(index.vector_store, "data", None)
    table = getattr(data, "embedding_dict", None)
    return dict(table) if isinstance(table, dict) and table else None


def build_index(
    source: str | Path | Sequence[str | Path],
    persist_dir: str | Path,
    *,
    embed_model: BaseEmbedding | None = None,
    embed: str | None = None,
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    show_progress: bool = False,
    overwrite: bool = False,
    on_error: Callable[[FileFailure], None] | None = None,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
) -> BuildSummary:
    """Index HWPX files into ``persist_dir`` (see the module docstring for the layout).

    Args:
        source: a folder (searched recursively for ``*.hwpx``) or a list of files.
        persist_dir: output folder; must be empty or absent unless ``overwrite``.
        embed_model: any LlamaIndex embedding; default: ``embed`` resolved by
            :func:`llama_index_car.providers.resolve_embed_model` (``"e5"`` = offline
            multilingual-e5-small, ``"use"`` = offline USE, ``"openai"``; ``None`` reads
            ``CAR_EMBED_MODEL``, else ``"e5"``).
        chunk_size, chunk_overlap: node parser token sizes (defaults 1000 / 150).
        show_progress: tqdm bars (stderr) for reading, parsing, embedding and BM25
            tokenisation.
        overwrite: allow writing into a non-empty folder (existing files are replaced).
        on_error: called with each :class:`FileFailure` as it happens.
        cache_dir: embedding-cache root (default
            :func:`~llama_index_car.evaluation.cache.default_cache_dir`, shared with
            ``llama-car eval``/``probe``); texts already in it are not embedded again.
        use_cache: ``False`` embeds every node afresh and writes no cache.

    Raises:
        ConfigurationError: no ``.hwpx`` files, nothing parseable, or a non-empty
            ``persist_dir`` without ``overwrite``.
    """
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_car.hypothesizers.corpus import CorpusCriterionHypothesizer
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    start = time.perf_counter()
    out = Path(persist_dir)
    if out.exists() and not out.is_dir():
        raise ConfigurationError(f"--persist {out} is a file; pass a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigurationError(
            f"{out} is not empty; choose a new folder or pass overwrite=True (--overwrite)"
        )
    files = find_hwpx_files(source)
    documents, failures = read_documents(files, show_progress=show_progress, on_error=on_error)
    nodes = parse_nodes(
        documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap, show_progress=show_progress
    )
    if not nodes:
        raise NothingToIndexError(
            f"no text could be indexed from {len(files)} file(s) "
            f"({len(failures)} failed to parse); check the files listed above"
        )
    model, provider = _resolve_embed(embed_model, embed)
    out.mkdir(parents=True, exist_ok=True)

    storage = StorageContext.from_defaults()
    if use_cache:
        index = VectorStoreIndex(
            nodes, storage_context=storage,
            embed_model=_cached_node_embedding(model, nodes, cache_dir, show_progress),
        )
    else:
        index = VectorStoreIndex(
            nodes, storage_context=storage, embed_model=model, show_progress=show_progress
        )
    index.storage_context.persist(persist_dir=str(out / VECTOR_DIR))
    bm25 = KiwiBM25Retriever.from_defaults(nodes=nodes, show_progress=show_progress)
    bm25.persist(str(out / BM25_DIR))
    tables = collect_tables(nodes)
    (out / TABLES_NAME).write_text(
        json.dumps({"format_version": FORMAT_VERSION, "files": tables}, ensure_ascii=False),
        encoding="utf-8",
    )
    stored = _stored_embeddings(index)
    hypothesizer = CorpusCriterionHypothesizer.from_nodes(
        nodes, embed_model=model, embeddings=stored
    )
    hypothesizer.persist(str(out / HYPOTHESIZER_DIR))

    dims = len(next(iter(stored.values()))) if stored else len(model.get_text_embedding("차원"))
    spec = embed_spec(model, provider) | {"dimensions": dims}
    table_nodes = sum(1 for n in nodes if n.metadata.get("table_index") is not None)
    summary = BuildSummary(
        persist_dir=str(out),
        files=len(files),
        documents=len(documents),
        nodes=len(nodes),
        table_nodes=table_nodes,
        failures=failures,
        embed=spec,
    )
    manifest = {
        "format_version": FORMAT_VERSION,
        "created_by": "llama-index-car",
        "embed": spec,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "files": [str(f) for f in files],
        "documents": len(documents),
        "nodes": len(nodes),
        "table_nodes": table_nodes,
        "failures": [asdict(f) for f in failures],
    }
    (out / MANIFEST_NAME).write_text(
        json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    summary.seconds = time.perf_counter() - start
    return summary


# ----------------------------------------------------------------------------- load
def read_manifest(persist_dir: str | Path) -> dict[str, Any]:
    """The folder's ``car_index.json``.

    Raises:
        IndexPersistError: missing, unreadable or of another ``format_version``.
    """
    path = Path(persist_dir) / MANIFEST_NAME
    if not path.is_file():
        raise IndexPersistError(
            f"{path} not found; {persist_dir} is not an index folder "
            "(create one with: llama-car index HWPX_DIR --persist DIR)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexPersistError(f"{path} is damaged ({exc}); rebuild the index") from exc
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        found = manifest.get("format_version") if isinstance(manifest, dict) else None
        raise IndexPersistError(
            f"{path} has format_version {found!r}, this version reads {FORMAT_VERSION}; "
            "rebuild the index with llama-car index"
        )
    return manifest


@dataclass
class LocalIndex:
    """A loaded index folder: the vector index, nodes, BM25 retriever and hypothesizer.

    Use :meth:`as_retriever` to get any of the four retrievers over the same data (the demo
    loads the folder once and compares all four).
    """

    persist_dir: Path
    manifest: dict[str, Any]
    index: VectorStoreIndex
    nodes: list[BaseNode]
    bm25: KiwiBM25Retriever
    hypothesizer: BaseCriterionHypothesizer
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def cells_for(self, metadata: dict[str, Any]) -> list[dict[str, Any]]:
        """Cells of a table node as ``[{"table", "row", "col", "row_span", "col_span", "text"}]``.

        Coordinates come from the node's ``cells`` metadata (``[table, row, col, row_span,
        col_span]``, 0-based), text from ``tables.json``; a cell whose text is not available
        keeps ``text=""``. Non-table nodes give ``[]``.
        """
        coords = metadata.get("cells") or []
        files = self.tables.get(str(metadata.get("file_path", "")), [])
        text: dict[tuple[int, int, int], str] = {}
        for t in files:
            for row, col, _rs, _cs, cell_text in t["cells"]:
                text[(int(t["index"]), int(row), int(col))] = str(cell_text)
        out = []
        for item in coords:
            table, row, col, row_span, col_span = (int(x) for x in list(item)[:5])
            out.append(
                {
                    "table": table,
                    "row": row,
                    "col": col,
                    "row_span": row_span,
                    "col_span": col_span,
                    "text": text.get((table, row, col), ""),
                }
            )
        return out

    def as_retriever(
        self,
        kind: str = "car",
        *,
        similarity_top_k: int = 10,
        pool_top_k: int = 50,
        alpha: float = 0.5,
        rrf_k: int = 60,
        hypothesizer: BaseCriterionHypothesizer | None = None,
    ) -> BaseRetriever:
        """A retriever of ``kind`` (``car``, ``hybrid``, ``bm25``, ``dense``).

        ``pool_top_k`` is the per-channel candidate pool for the fused kinds; for ``dense``
        and ``bm25`` only ``similarity_top_k`` matters. ``hypothesizer`` overrides the
        persisted offline one for ``car`` (e.g. an :class:`LLMCriterionHypothesizer`).

        Raises:
            ConfigurationError: unknown ``kind``.
        """
        if kind not in RETRIEVER_KINDS:
            raise ConfigurationError(
                f"retriever kind {kind!r} is unknown; use one of {', '.join(RETRIEVER_KINDS)}"
            )
        from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
        from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever

        if kind == "bm25":
            return self.bm25_retriever(similarity_top_k)
        if kind == "dense":
            return self.index.as_retriever(similarity_top_k=similarity_top_k)
        pool = max(pool_top_k, similarity_top_k)
        dense = self.index.as_retriever(similarity_top_k=pool)
        lexical = self.bm25_retriever(pool)
        if kind == "hybrid":
            return WeightedRRFRetriever.from_alpha(
                dense,
                lexical,
                alpha=alpha,
                rrf_k=rrf_k,
                pool_top_k=pool,
                similarity_top_k=similarity_top_k,
            )
        return CriterionAwareRetriever(
            dense_retriever=dense,
            lexical_retriever=lexical,
            hypothesizer=hypothesizer or self.hypothesizer,
            alpha=alpha,
            rrf_k=rrf_k,
            pool_top_k=pool,
            similarity_top_k=similarity_top_k,
        )

    def bm25_retriever(self, similarity_top_k: int) -> KiwiBM25Retriever:
        """The persisted BM25 retriever with another ``similarity_top_k`` (a shallow copy)."""
        import copy

        clone = copy.copy(self.bm25)
        clone.similarity_top_k = similarity_top_k
        return clone


def load_index(persist_dir: str | Path, *, embed_model: BaseEmbedding | None = None) -> LocalIndex:
    """Open an index folder written by :func:`build_index`.

    Args:
        persist_dir: the folder.
        embed_model: the query-time embedding; default: the provider recorded in the
            manifest, whatever the current default or ``CAR_EMBED_MODEL`` is (``e5`` →
            offline multilingual-e5-small; ``use`` → offline USE, also for manifests older
            than the ``provider`` field; ``openai`` needs ``OPENAI_API_KEY``). A model whose
            name differs from the recorded one is refused, since its vectors are not comparable.

    Raises:
        IndexPersistError: a file is missing or damaged (named in the message).
        ConfigurationError: ``embed_model`` does not match the recorded embedding.
    """
    from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage

    from llama_index_car.hypothesizers.corpus import CorpusCriterionHypothesizer
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    root = Path(persist_dir)
    manifest = read_manifest(root)
    recorded = manifest.get("embed", {})
    if embed_model is None:
        provider = str(recorded.get("provider", "use"))
        if provider == "custom":
            raise ConfigurationError(
                f"{root} was built with a custom embedding "
                f"({recorded.get('class_name')}, {recorded.get('model_name')!r}); "
                "pass the same embed_model to load_index()"
            )
        embed_model, _ = _resolve_embed(None, provider)
    name = getattr(embed_model, "model_name", "")
    if recorded.get("model_name") and name != recorded["model_name"]:
        raise ConfigurationError(
            f"{root} was indexed with embedding {recorded['model_name']!r} but the query "
            f"embedding is {name!r}; use the same model (--embed {recorded.get('provider')})"
        )
    for sub in (VECTOR_DIR, BM25_DIR, HYPOTHESIZER_DIR):
        if not (root / sub).is_dir():
            raise IndexPersistError(f"{root / sub} is missing; rebuild the index")
    try:
        storage = StorageContext.from_defaults(persist_dir=str(root / VECTOR_DIR))
        index = load_index_from_storage(storage, embed_model=embed_model)
    except (OSError, ValueError, KeyError) as exc:
        raise IndexPersistError(f"{root / VECTOR_DIR} is damaged ({exc}); rebuild") from exc
    if not isinstance(index, VectorStoreIndex):
        raise IndexPersistError(f"{root / VECTOR_DIR} does not hold a VectorStoreIndex")
    nodes = sorted(index.docstore.docs.values(), key=lambda n: n.node_id)
    bm25 = KiwiBM25Retriever.from_persist_dir(str(root / BM25_DIR))
    hypothesizer = CorpusCriterionHypothesizer.from_persist_dir(
        str(root / HYPOTHESIZER_DIR), embed_model=embed_model
    )
    tables: dict[str, list[dict[str, Any]]] = {}
    tables_path = root / TABLES_NAME
    if tables_path.is_file():
        try:
            tables = dict(json.loads(tables_path.read_text(encoding="utf-8"))["files"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise IndexPersistError(f"{tables_path} is damaged ({exc}); rebuild") from exc
    return LocalIndex(
        persist_dir=root,
        manifest=manifest,
        index=index,
        nodes=list(nodes),
        bm25=bm25,
        hypothesizer=hypothesizer,
        tables=tables,
    )


def load_retriever(
    persist_dir: str | Path,
    kind: str = "car",
    *,
    embed_model: BaseEmbedding | None = None,
    llm: LLM | None = None,
    similarity_top_k: int = 10,
    pool_top_k: int = 50,
    alpha: float = 0.5,
    rrf_k: int = 60,
) -> BaseRetriever:
    """Open ``persist_dir`` and return a ``kind`` retriever (``car|hybrid|bm25|dense``).

    With ``llm`` the ``car`` retriever uses an :class:`LLMCriterionHypothesizer` over it
    instead of the offline corpus hypothesizer.

    >>> r = load_retriever("./car-index", "hybrid", similarity_top_k=5)  # doctest: +SKIP
    """
    local = load_index(persist_dir, embed_model=embed_model)
    hypothesizer = None
    if llm is not None and kind == "car":
        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

        hypothesizer = LLMCriterionHypothesizer(llm=llm)
    return local.as_retriever(
        kind,
        similarity_top_k=similarity_top_k,
        pool_top_k=pool_top_k,
        alpha=alpha,
        rrf_k=rrf_k,
        hypothesizer=hypothesizer,
    )
