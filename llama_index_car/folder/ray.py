"""Distributed ingestion on Ray Data: the index folder of :func:`~llama_index_car.folder.build_index`
built by a Ray cluster.

:func:`build_index_ray` runs the per-file work of the single-process pipeline as Ray Data batch
maps over the list of files, then writes the same index folder on the driver::

    ray.data.from_items(files)        one row (and one block) per file: path, file_index
      .map_batches(_read_parse)       reader by suffix + HWPXNodeParser -> file + node rows
      .map_batches(_tokenize)         KiwiTokenizer -> per-node term counts
      .map_batches(_embed)            embedding (model created once per worker process)
    driver: rows sorted by (file_index, node_pos) -> nodes in single-process order;
            per-file BM25 shards -> merge_bm25_shards (global IDF) -> the BM25 state;
            finish_build (the local build's tail): vectors -> VectorStoreIndex, the
            folder's index and car_index.json

What is the same as the single-process path (checked by ``tests/test_distributed.py``):
node ids, texts and metadata (``doc_to_json``), the embedding of every node (float32 values,
as the single-process path's embedding cache returns them), and the BM25 statistics and
scores (the merged count matrix equals the single-process one, so IDF is global). Files that
fail to read are :class:`~llama_index_car.folder.FileFailure` entries, never an aborted
batch. The vector store is still built on the driver.

Ray is an optional extra: ``pip install 'llama-index-car[ray]'``. ``ray_address=None``
starts a local cluster (``num_cpus`` CPUs); ``"auto"`` joins the cluster of this machine;
``"ray://host:10001"`` connects a Ray client. Workers must have ``llama-index-car`` and the
Hangul reader package installed (same versions), or receive them through ``runtime_env``; the files must
be readable at the same path on every worker (a shared or synced folder).

>>> shard = shard_from_term_counts([(["a", "b"], [2, 1]), (["b", "c"], [1, 1])])
>>> shard.terms, shard.counts.toarray().tolist()
(['a', 'b', 'c'], [[2.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
>>> merged = merge_bm25_shards([shard, shard_from_term_counts([(["c"], [3])])])
>>> merged.corpus_size, merged.terms
(3, ['a', 'b', 'c'])
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from llama_index_car._errors import ConfigurationError, NothingToIndexError, require
from llama_index_car.folder.keys import key_documents, source_keys, text_digest, twin_canon
from llama_index_car.folder.options import BuildOptions
from llama_index_car.folder.record import BuildSummary
from llama_index_car.folder.sources import (
    FileFailure,
    file_extractor,
    find_source_files,
    load_source_file,
    read_errors,
    sha256_file,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode

    from llama_index_car.bm25 import BM25Okapi
    from llama_index_car.span_index import SpanIndex


#: texts per embedding call on a worker (the local build's ``INDEX_CACHE_BATCH``)
EMBED_BATCH = 32


class RayConnectionError(ConfigurationError):
    """The Ray cluster named by ``ray_address`` / ``--ray ADDRESS`` could not be joined."""


# ----------------------------------------------------------------------------- BM25 shards
@dataclass(frozen=True)
class BM25Shard:
    """Term statistics of a contiguous run of documents: a ``(docs x terms)`` count matrix.

    ``terms`` are in first-occurrence order over the shard's documents (the order
    :class:`~llama_index_car.bm25.BM25Okapi` gives its vocabulary), so merging shards in
    document order reproduces the single-process vocabulary order.
    """

    terms: list[str]
    counts: sp.csr_matrix


def shard_from_term_counts(docs: Iterable[tuple[Sequence[str], Sequence[int]]]) -> BM25Shard:
    """A :class:`BM25Shard` from per-document ``(terms, counts)`` (first-occurrence order)."""
    vocab: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    n = 0
    for i, (terms, counts) in enumerate(docs):
        n = i + 1
        for t, c in zip(terms, counts, strict=True):
            j = vocab.setdefault(str(t), len(vocab))
            rows.append(i)
            cols.append(j)
            vals.append(float(c))
    counts_m = sp.csr_matrix((vals, (rows, cols)), shape=(n, len(vocab)), dtype=np.float64)
    return BM25Shard(list(vocab), counts_m)


def merge_bm25_shards(
    shards: Sequence[BM25Shard], k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25
) -> BM25Okapi:
    """One :class:`~llama_index_car.bm25.BM25Okapi` over the documents of ``shards``, in order.

    Each shard becomes a ``BM25Okapi.from_counts`` index and :meth:`BM25Okapi.merge
    <llama_index_car.bm25.BM25Okapi.merge>` unites them (vocabularies in shard order,
    postings offset by the documents before each shard), so document frequencies, ``N`` and
    ``avgdl`` -- hence IDF -- are global: the result scores exactly like ``BM25Okapi`` built
    on all token lists at once. No shards give an empty index.
    """
    from llama_index_car.bm25 import BM25Okapi

    if not shards:
        return BM25Okapi([], k1=k1, b=b, epsilon=epsilon)
    parts = [BM25Okapi.from_counts(s.counts, s.terms, k1=k1, b=b, epsilon=epsilon) for s in shards]
    return BM25Okapi.merge(parts)


# ----------------------------------------------------------------------------- batch maps
def _read_parse(batch: dict[str, Any], chunk_size: int, chunk_overlap: int) -> dict[str, list[Any]]:
    """Batch map: HWP/HWPX/HML files -> one file row (``node_pos = -1``) per file plus one row per node.

    Table cells travel in the nodes' own ``cells`` metadata (no ``tables.json``).

    A file that fails to read (the exceptions ``read_documents`` catches) gives only its file
    row, with ``error = "ErrorType: message"``.
    """
    from llama_index.core.schema import MetadataMode
    from llama_index.core.storage.docstore.utils import doc_to_json
    from llama_index.readers.hwpx import HWPXNodeParser

    errors = read_errors()
    readers = file_extractor()
    parser = HWPXNodeParser(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    keys = ("file_index", "node_pos", "path", "error", "documents", "node", "text",
            "text_digest")
    out: dict[str, list[Any]] = {k: [] for k in keys}

    def row(fi: int, pos: int, path: str, **kw: Any) -> None:
        values = {"file_index": fi, "node_pos": pos, "path": path, "error": "",
                  "documents": 0, "node": "", "text": "", "text_digest": ""} | kw
        for k in keys:
            out[k].append(values[k])

    for fi, path, key, digest in zip(
        batch["file_index"], batch["path"], batch["key"], batch["digest"], strict=True
    ):
        fi, path = int(fi), str(path)
        try:
            docs = load_source_file(Path(path), readers)
        except errors as exc:
            row(fi, -1, path, error=f"{type(exc).__name__}: {exc}")
            continue
        key_documents(docs, str(key), str(digest))  # the ids build_index gives
        nodes = parser.get_nodes_from_documents(docs)
        # the file's text digest: the driver indexes one file of each text (its twins not)
        row(fi, -1, path, documents=len(docs), text_digest=text_digest(d.text for d in docs))
        for pos, node in enumerate(nodes):
            row(fi, pos, path, node=json.dumps(doc_to_json(node), ensure_ascii=False),
                text=node.get_content(metadata_mode=MetadataMode.EMBED))
    return out


def _tokenize(batch: dict[str, Any], tokenizer_spec: dict[str, Any]) -> dict[str, Any]:
    """Batch map: node text -> its BM25 term counts, terms in first-occurrence order."""
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    # one Kiwi thread per Ray task: Ray already runs one task per CPU
    tok = KiwiTokenizer.from_dict(tokenizer_spec).model_copy(update={"num_workers": 0})
    is_node = [int(p) >= 0 for p in batch["node_pos"]]
    todo = [str(t) for t, ok in zip(batch["text"], is_node, strict=True) if ok]
    tokens = iter(tok.tokenize_batch(todo))
    terms: list[list[str]] = []
    tfs: list[list[int]] = []
    for ok in is_node:
        counts = Counter(next(tokens)) if ok else Counter()
        terms.append(list(counts))
        tfs.append(list(counts.values()))
    return dict(batch) | {"terms": terms, "tfs": tfs}


#: embedding models of this worker process, by provider name (created on first use)
_MODELS: dict[str, BaseEmbedding] = {}


def _embed(
    batch: dict[str, Any], embed: str, embed_model: BaseEmbedding | None,
    engine: str | None = None, spans: bool = False,
) -> dict[str, Any]:
    """Batch map: node text -> embedding (float32 values), ``EMBED_BATCH`` texts per call;
    with ``spans``, also the vectors of the node's spans (:func:`~llama_index_car.spans.node_spans`,
    in span order: ``span_embedding``, one list per span).

    A provider model is created once per worker process (with ``threads=1`` where it has
    that field: Ray runs one task per CPU) and reused by later tasks. ``engine`` is the e5
    engine the driver resolved: a worker never picks its own (its packages may differ), so
    one index never mixes the vectors of two engines.
    """
    if embed_model is None:
        if embed not in _MODELS:
            from llama_index_car.providers import resolve_embed_model

            model = resolve_embed_model(embed)
            fields = type(model).model_fields
            if "threads" in fields:  # e5, USE: one thread per Ray CPU
                model = model.model_copy(update={"threads": 1})
            if engine is not None and "engine" in fields:
                model = model.model_copy(update={"engine": engine})
            _MODELS[embed] = model
        embed_model = _MODELS[embed]
    pos = [int(p) for p in batch["node_pos"]]
    texts = [str(t) for t, p in zip(batch["text"], pos, strict=True) if p >= 0]
    vectors: list[list[float]] = []
    for i in range(0, len(texts), EMBED_BATCH):
        part = embed_model.get_text_embedding_batch(texts[i : i + EMBED_BATCH])
        # float32, as the single-process path's embedding cache returns them
        vectors.extend(np.asarray(part, dtype=np.float32).tolist())
    it = iter(vectors)
    out = dict(batch) | {"embedding": [next(it) if p >= 0 else [] for p in pos]}
    if spans:
        from llama_index.core.storage.docstore.utils import json_to_doc

        from llama_index_car.spans import node_spans

        per_node = [
            [s.text for s in node_spans(json_to_doc(json.loads(str(n))))] if p >= 0 else []
            for n, p in zip(batch["node"], pos, strict=True)
        ]
        flat = [t for texts in per_node for t in texts]
        span_vecs: list[list[float]] = []
        for i in range(0, len(flat), EMBED_BATCH):
            part = embed_model.get_text_embedding_batch(flat[i : i + EMBED_BATCH])
            span_vecs.extend(np.asarray(part, dtype=np.float32).tolist())
        it = iter(span_vecs)
        out["span_embedding"] = [[next(it) for _ in texts] for texts in per_node]
    return out


def _run_dataset(
    files: list[tuple[Path, str, str]], chunk_size: int, chunk_overlap: int,
    tokenizer_spec: dict[str, Any], provider: str, embed_model: BaseEmbedding | None,
    show_progress: bool, spans: bool = False,
) -> list[dict[str, Any]]:
    """Build and execute the Ray Data pipeline over ``files`` (path, key, sha256); all
    output rows (any order)."""
    import importlib

    data: Any = importlib.import_module("ray.data")
    ctx = data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars)
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = show_progress
    try:
        ds = data.from_items(
            [{"file_index": i, "path": str(p), "key": k, "digest": d}
             for i, (p, k, d) in enumerate(files)],
            override_num_blocks=len(files),
        )
        ds = ds.map_batches(
            _read_parse, batch_size=1,
            fn_kwargs={"chunk_size": chunk_size, "chunk_overlap": chunk_overlap},
        )
        ds = ds.map_batches(_tokenize, batch_size=None, fn_kwargs={"tokenizer_spec": tokenizer_spec})
        from llama_index_car.embeddings.e5 import resolve_engine

        engine = resolve_engine("auto") if provider == "e5" and embed_model is None else None
        ds = ds.map_batches(
            _embed, batch_size=None,
            fn_kwargs={"embed": provider, "embed_model": embed_model, "engine": engine,
                       "spans": spans},
        )
        return list(ds.take_all())
    finally:  # the caller's Ray Data settings are left as they were
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved


# ----------------------------------------------------------------------------- driver
@dataclass
class RayIngestResult:
    """What the Ray pipeline computed, in single-process order (nothing written yet)."""

    files: list[Path]
    documents: int
    nodes: list[BaseNode]
    embeddings: list[list[float]]
    bm25: BM25Okapi
    failures: list[FileFailure]
    seconds: float = 0.0
    spans: SpanIndex | None = None
    #: ``{key: text digest}`` of the files read; the twins of another are not in ``nodes``
    digests: dict[str, str] = field(default_factory=dict)


def _ray() -> Any:
    require("ray", extra="ray", package="ray[data]")
    import ray

    return ray


def _connect(ray: Any, address: str | None, num_cpus: int | None,
             runtime_env: dict[str, Any] | None) -> bool:
    """Init Ray unless already initialised; True when this call started/connected it."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    if address in (None, "", "local"):
        ray.init(num_cpus=num_cpus, **kwargs)
    else:
        if num_cpus is not None:
            raise ConfigurationError(
                f"num_cpus={num_cpus} only applies to a local cluster; the cluster at "
                f"{address} decides its own CPUs"
            )
        kwargs.pop("include_dashboard")
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, TimeoutError, ValueError) as exc:
            raise RayConnectionError(
                f"could not join the Ray cluster at {address!r} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                "start one with `ray start --head`, check the address (ray://HOST:10001 needs "
                "the client server and `ray[client]`), or omit the address for a local cluster"
            ) from exc
    return True


def ingest_ray(
    source: str | Path | Sequence[str | Path],
    options: BuildOptions | None = None,
    *,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    runtime_env: dict[str, Any] | None = None,
) -> RayIngestResult:
    """Read, parse, tokenize and embed HWP/HWPX/HML files on Ray; merge the BM25 shards on the driver.

    Args:
        source: a folder (searched recursively) or files, as for ``build_index``.
        options: :class:`~llama_index_car.folder.BuildOptions`: ``embed_model`` is shipped
            to the workers (it must pickle); default: the provider ``embed`` (``e5``,
            ``use``, ``openai``; ``None`` = ``$LLAMA_CAR_EMBED_MODEL`` on the driver, else
            ``e5``), created once per Ray worker process. ``chunk_size``/``chunk_overlap``,
            ``spans`` (embed every node's spans on the workers too: ``RayIngestResult.spans``,
            the span index ``build_index`` would build), ``on_error`` (called on the driver
            with each :class:`FileFailure`) and ``show_progress`` (Ray Data's bars) as for
            ``build_index``. The BM25 tokenizer and parameters are ``build_index``'s.
        ray_address: ``None`` = start a local cluster with ``num_cpus`` CPUs (default: all);
            ``"auto"`` = the running cluster of this machine; ``"ray://host:port"`` = a Ray
            client. An already initialised Ray session is used as it is.
        runtime_env: Ray ``runtime_env`` for the workers (e.g. ``{"pip": [...]}``).

    Raises:
        MissingDependencyError: ``ray`` is not installed.
        ConfigurationError: no source file, or ``num_cpus`` with a remote address.
        RayConnectionError: the cluster at ``ray_address`` cannot be joined.
    """
    from llama_index.core.storage.docstore.utils import json_to_doc

    from llama_index_car.folder.build import chunking
    from llama_index_car.providers import embed_provider
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    options = options or BuildOptions()
    chunk_size, chunk_overlap = chunking(options)
    spans, on_error = options.spans, options.on_error
    start = time.perf_counter()
    files = find_source_files(source)
    tok = KiwiTokenizer()
    provider = embed_provider(options.embed)
    ray = _ray()
    started = _connect(ray, ray_address, num_cpus, runtime_env)
    try:
        keys = source_keys(source, files)
        keyed = [(f, keys[str(f)], sha256_file(f)) for f in files]
        args = (keyed, chunk_size, chunk_overlap, tok.to_dict(), provider, options.embed_model,
                options.show_progress, spans)
        if ray.util.client.ray.is_connected():
            # Ray Data does not run over Ray Client: execute the dataset in a task on the
            # cluster (it uses no CPU slot itself) and bring the rows back
            rows = ray.get(ray.remote(num_cpus=0)(_run_dataset).remote(*args))
        else:
            rows = _run_dataset(*args)
    finally:
        if started:
            ray.shutdown()
    rows.sort(key=lambda r: (int(r["file_index"]), int(r["node_pos"])))
    key_of = {i: key for i, (_, key, _) in enumerate(keyed)}
    digests = {key_of[int(r["file_index"])]: str(r["text_digest"]) for r in rows
               if int(r["node_pos"]) < 0 and not r["error"] and r["text_digest"]}
    canon = twin_canon(digests)  # as build_index: a file holding another's text is an alias
    rows = [r for r in rows
            if canon.get(key_of[int(r["file_index"])], key_of[int(r["file_index"])])
            == key_of[int(r["file_index"])]]

    failures: list[FileFailure] = []
    nodes: list[BaseNode] = []
    embeddings: list[list[float]] = []
    span_vectors: list[list[list[float]]] = []
    documents = 0
    per_file: dict[int, list[tuple[list[str], list[int]]]] = {}
    for r in rows:
        if int(r["node_pos"]) < 0:
            if r["error"]:
                failure = FileFailure(str(r["path"]), str(r["error"]))
                failures.append(failure)
                if on_error is not None:
                    on_error(failure)
            documents += int(r["documents"])
            continue
        nodes.append(json_to_doc(json.loads(r["node"])))
        embeddings.append([float(x) for x in r["embedding"]])
        if spans:
            span_vectors.append([list(v) for v in r["span_embedding"]])
        per_file.setdefault(int(r["file_index"]), []).append(
            ([str(t) for t in r["terms"]], [int(c) for c in r["tfs"]])
        )
    shards = [shard_from_term_counts(per_file[fi]) for fi in sorted(per_file)]
    bm25 = merge_bm25_shards(shards)
    from llama_index_car.span_index import SpanIndex

    return RayIngestResult(
        files=files, documents=documents, nodes=nodes, embeddings=embeddings, bm25=bm25,
        failures=failures, seconds=time.perf_counter() - start,
        spans=SpanIndex.from_span_vectors(nodes, span_vectors) if spans else None,
        digests=digests,
    )


def build_index_ray(
    source: str | Path | Sequence[str | Path],
    persist_dir: str | Path,
    options: BuildOptions | None = None,
    *,
    ray_address: str | None = None,
    num_cpus: int | None = None,
    runtime_env: dict[str, Any] | None = None,
) -> BuildSummary:
    """:func:`~llama_index_car.folder.build_index` with the per-file work on Ray.

    The same options (:class:`~llama_index_car.folder.BuildOptions`) and the same folder
    (``car_index.json`` and the index: nodes, BM25 arrays, vectors, spans — the workers
    embed the spans too); see :func:`ingest_ray` for the Ray arguments. The workers embed
    every node: there is no embedding cache on this path (it is a local folder that remote
    workers cannot share), and no store yet.

    Raises:
        ConfigurationError: as ``build_index`` (non-empty folder, nothing to index), or
            ``options.store`` / ``options.cache_dir`` given (refused, not ignored).
    """
    from llama_index_car.folder.build import SourceRead, chunking, finish_build, writable_folder
    from llama_index_car.folder.embed import resolve_embed
    from llama_index_car.indices._lexical import Lexical, Tokens
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    options = options or BuildOptions()
    unsupported = [flag for flag, value in (("--store", options.store),
                                            ("--cache-dir", options.cache_dir)) if value]
    if unsupported:
        raise ConfigurationError(
            f"--ray cannot be combined with {', '.join(unsupported)} yet; "
            "index without --ray, or without those options"
        )
    chunk_size, chunk_overlap = chunking(options)
    start = time.perf_counter()
    out = writable_folder(persist_dir, options.overwrite, "or pass overwrite=True (--overwrite)")
    model = resolve_embed(options.embed_model, options.embed)
    res = ingest_ray(source, options, ray_address=ray_address, num_cpus=num_cpus,
                     runtime_env=runtime_env)
    nodes = res.nodes
    if not nodes:
        raise NothingToIndexError(
            f"no text could be indexed from {len(res.files)} file(s) "
            f"({len(res.failures)} failed to parse); check the files listed above"
        )
    files = [Path(f) for f in res.files]
    return finish_build(  # the same folder as build_index
        out, model=model, nodes=nodes,
        vectors={n.node_id: e for n, e in zip(nodes, res.embeddings, strict=True)},
        lexical=Lexical.over(res.bm25, nodes), tokens=Tokens(KiwiTokenizer()), spans=res.spans,
        read=SourceRead(source_keys(source, files), {str(f): sha256_file(f) for f in files},
                        res.documents, res.failures, res.digests),
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, store=None, record=None,
        start=start,
    )


def ray_builder(address: str) -> Callable[..., BuildSummary]:
    """``build_index_ray`` bound to ``--ray ADDRESS`` (``"local"`` = a new local cluster),
    with ``build_index``'s signature.

    Raises:
        ConfigurationError: ``address`` is not ``local``, ``auto``, ``ray://HOST:PORT`` or
            ``HOST:PORT``.
        MissingDependencyError: ``ray`` is not installed (``pip install 'llama-index-car[ray]'``).
    """
    if not re.fullmatch(r"local|auto|ray://[^\s/:]+:\d+|[^\s/:]+:\d+", address):
        raise ConfigurationError(
            f"--ray {address!r}: use no address (a local cluster), 'auto' (the cluster "
            "running on this machine), 'ray://HOST:10001' (Ray client) or 'HOST:6379'"
        )
    _ray()
    ray_address = None if address == "local" else address

    def build(
        source: str | Path | Sequence[str | Path], persist_dir: str | Path,
        options: BuildOptions | None = None,
    ) -> BuildSummary:
        return build_index_ray(source, persist_dir, options, ray_address=ray_address)

    return build
