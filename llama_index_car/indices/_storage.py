"""One generation of a :class:`~llama_index_car.indices.CriterionAwareIndex`: flat files, one
manifest (format 6).

``DIR/CURRENT`` names the live ``gen-…/`` (:func:`llama_index_car._persist.replace_dir`: written
and fsynced, then switched atomically), which holds::

    index.json          format_version, tokenizer spec, BM25 parameters and sizes, node
                        count, how the vectors are kept, span counts, extra documents
    nodes.*             the nodes, index order: a record set (``_node_records``: id →
                        text hash + doc_to_json), read when a node is used
    bm25.<array>.npy    the BM25 arrays (BM25Okapi.write_to, no manifest of their own)
    flat/               the vectors when the index keeps them (the default
                        FlatVectorStore: ``flat_store.write_state``; an outside store keeps
                        its vectors, the caller opens it again)
    spans.*             the span index (when the index has one): a record set (node id →
                        its span records), row offsets, float16 vectors; read when used
    <documents>         extra JSON a caller adds (a folder's ``car_index.json``)
    manifest.json       every file's size and sha256, written last — the only manifest

Reading checks the manifest once: every file is hashed except the BM25 arrays, which
:meth:`BM25Okapi.load <llama_index_car.bm25.BM25Okapi.load>` (``bound``) checks per its
``verify`` mode, and the flat store's arrays and records, whose sizes, headers and every read
:func:`~llama_index_car.flat_store.open_state` checks (both memory-mapped: nothing read at load
grows with the vectors), and the nodes' record set likewise (``nodes.meta.json`` hashed).
No pickle; format 5 folders and older are not read (rebuild).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car import _files, _persist
from llama_index_car._errors import (
    ConfigurationError,
    IndexPersistError,
    StoreError,
    TokenizerMismatchWarning,
)
from llama_index_car.bm25 import BM25Okapi, Verify
from llama_index_car.indices._layout import (
    BM25_PREFIX,
    FLAT_DIR,
    FORMAT_VERSION,
    INDEX_NAME,
    KIND,
    NODES_NAME,
    NODES_PREFIX,
    SPANS_META,
    SPANS_PREFIX,
    checked_by_loader,
)
from llama_index_car.indices._lexical import Lexical, Tokens
from llama_index_car.indices._node_records import NodeTable, write_nodes
from llama_index_car.indices._store_bm25 import DF_NAME, StoreBM25, read_table

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex


_VECTOR_KINDS = ("none", "local", "store")



def write(index: CriterionAwareIndex, target: Path, documents: Mapping[str, Any]) -> None:
    """Persist ``index``'s current snapshot to ``target`` (see the module docstring)."""
    from llama_index_car.flat_store import write_state

    snap = index.snapshot
    lex = snap.lexical
    ids = lex.positions
    dense = snap.dense  # the index's own vectors, of the snapshot written
    kind = "none" if index.vector_index is None else ("store" if dense is None else "local")
    if dense is not None and dense.count != len(ids):
        missing = [n for n in ids if dense._locate(n) is None][:3]
        raise IndexPersistError(f"the vector index lacks vectors for {missing[:3]}")
    bad = [n for n in documents if n in (INDEX_NAME, NODES_NAME, _persist.MANIFEST_NAME)]
    if bad:
        raise ConfigurationError(f"documents may not be named {bad}")
    with _persist.replace_dir(target) as gen:
        bm25 = lex.bm25
        meta = (bm25.write_to(gen) if isinstance(bm25, StoreBM25)
                else bm25.write_to(gen, prefix=BM25_PREFIX, manifest=False))
        write_nodes(gen, lex.nodes, lex.hashes)
        if dense is not None:
            (gen / FLAT_DIR).mkdir()
            write_state(gen / FLAT_DIR, dense)
        if snap.spans is not None:
            snap.spans.persist_records(gen)
        for name, value in documents.items():
            _files.write_json(gen / name, value)
        _files.write_json(gen / INDEX_NAME, {
            "format_version": FORMAT_VERSION,
            "kind": KIND,
            "tokenizer": index.tokenizer.to_dict(),
            "bm25": meta,
            "nodes": len(ids),
            "vectors": kind,
            "vector_store": type(getattr(index.vector_index, "vector_store", None)).__name__,
            "embed": _embed_record(index, dense),
            "spans": None if snap.spans is None else {"spans": snap.spans.n_spans,
                                                       "dim": snap.spans.dim},
            "documents": sorted(documents),
        })
        _persist.write_manifest(gen, kind=KIND, format_version=FORMAT_VERSION)


def _embed_record(index: CriterionAwareIndex, dense: Any) -> dict[str, Any] | None:
    """The spec of the index's embedding (``None`` without one): what a load resolves the
    query embedding from (:meth:`Generation.query_embedding`)."""
    if index.embed_model is None:
        return None
    from llama_index_car.providers import embed_spec

    width = None if dense is None or not dense.count else dense.dim
    return embed_spec(index.embed_model, width)


def read(
    cls: type[CriterionAwareIndex], target: Path, *, embed_model: Any | None = None,
    vector_index: Any | None = None, **kwargs: Any,
) -> CriterionAwareIndex:
    """Load the live generation of ``target`` (retried across a concurrent swap); the query
    embedding resolved and checked by :meth:`Generation.query_embedding`."""
    if not target.is_dir():
        raise IndexPersistError(f"{target}: no such index directory")

    def load(root: Path) -> CriterionAwareIndex:
        gen = open_generation(root)
        model = gen.query_embedding(embed_model, vector_index)
        return gen.index(cls, embed_model=model, vector_index=vector_index, **kwargs)

    index = _persist.load_live(target, load)
    index.persist_dir = target
    return index


def _hashed_by_manifest(name: str) -> bool:
    """Whether :func:`~llama_index_car._persist.read_manifest` hashes ``name``: not the BM25
    arrays (:meth:`BM25Okapi.load` checks them) nor the JSON files read once with their
    check (:func:`~llama_index_car._persist.read_bound_json`)."""
    return not checked_by_loader(name) and not (
        "/" not in name and name.endswith(".json") and name not in (SPANS_META, NODES_NAME))


@dataclass(frozen=True)
class Generation:
    """One generation directory with its manifest read and checked once and ``index.json``
    and the extra ``documents`` parsed (each from the bytes its manifest entry binds);
    :meth:`index` reads the rest."""

    root: Path
    manifest: dict[str, Any]
    spec: dict[str, Any]
    documents: dict[str, Any]

    @property
    def embed(self) -> dict[str, Any] | None:
        """The embedding spec ``index.json`` records
        (:func:`~llama_index_car.providers.embed_spec`; ``None``: built without one)."""
        return self.spec.get("embed")  # type: ignore[no-any-return]

    def query_embedding(self, given: Any = None, vector_index: Any = None) -> Any:
        """The query embedding of this index: ``given`` (else the embedding of a given
        ``vector_index``) checked against the recorded spec, or the recorded provider's
        (:func:`~llama_index_car.providers.query_embedding`, the one resolution every load path
        uses); ``given`` as it is when no embedding is recorded."""
        if self.embed is None:
            return given
        if given is None and vector_index is not None:
            given = getattr(vector_index, "_embed_model", None)
        from llama_index_car.providers import query_embedding

        return query_embedding(self.embed, given, self.root)

    def index(
        self,
        cls: type[CriterionAwareIndex],
        *,
        vector_index: Any | None = None,
        embed_model: Any | None = None,
        tokenizer: Any | None = None,
        token_cache: bool | MutableMapping[str, list[str]] | None = True,
        verify: Verify = "auto",
    ) -> CriterionAwareIndex:
        """The index of this generation.

        ``vector_index``: the ``VectorStoreIndex`` of a store-kept index (required then);
        ``embed_model``: the query embedding (:meth:`query_embedding`); ``tokenizer``:
        default the persisted spec (another one warns :class:`TokenizerMismatchWarning`, as
        does another kiwipiepy or model version).
        """
        root, spec, manifest = self.root, self.spec, self.manifest
        table = NodeTable.open(root, manifest["files"],
                               full=_hash_if_small(root, manifest, NODES_PREFIX, "", verify))
        saved = spec["tokenizer"]
        persisted = tokenizer_from_spec(saved, root / INDEX_NAME)  # checked even if one is given
        if tokenizer is None:
            tokenizer = persisted
        same_analysis = _check_spec(saved, tokenizer, root)
        bm25: BM25Okapi | StoreBM25
        if spec["bm25"].get("store") is True:  # the rows in the vectors' Milvus or Qdrant
            bm25 = _store_bm25(root, spec, manifest, vector_index)
        else:
            try:
                bm25 = BM25Okapi.load(root, verify=verify, prefix=BM25_PREFIX,
                                      bound=(manifest["files"], spec["bm25"]))
            except IndexPersistError as exc:  # its arrays are part of this index: rebuilt with it
                raise IndexPersistError(
                    str(exc).replace("save the index again", "rebuild the index")
                    .replace("save it again", "rebuild the index")) from exc
        if len(table) != bm25.corpus_size or len(table) != spec["nodes"]:
            raise IndexPersistError(
                f"{root}: {NODES_NAME}, {INDEX_NAME} and the BM25 arrays disagree; rebuild the "
                "index"
            )
        lexical = Lexical.stored(bm25, table)
        tokens = Tokens(tokenizer, token_cache)
        if same_analysis:
            tokens.answering_from(lexical)
        spans = _spans(root, spec, manifest, lexical.positions, verify)
        if vector_index is None and spec["vectors"] == "store":
            raise ConfigurationError(
                f"{root} keeps its vectors in a {spec['vector_store']}: pass vector_index= (a "
                "VectorStoreIndex over that store)"
            )
        dense = None
        if vector_index is None and spec["vectors"] == "local":
            if embed_model is None:  # vectors, but no embedding recorded to query them with
                raise ConfigurationError(
                    f"{root / INDEX_NAME} records no embedding for its vectors; pass "
                    "embed_model= (the embedding they were made with)"
                )
            dense = open_flat(root, manifest, verify)
            if dense.count != len(table):
                raise IndexPersistError(
                    f"{root / FLAT_DIR} holds {dense.count} vectors, not one per node "
                    f"({len(table)}); rebuild the index")
            from llama_index_car.indices._dense import flat_index

            vector_index = flat_index({}, [], embed_model, state=dense)
        index = cls.from_parts(lexical, tokens, vector_index=vector_index,
                               embed_model=embed_model, spans=spans, dense=dense)
        index.metadata = dict(self.documents)
        return index


def _store_bm25(
    root: Path, spec: dict[str, Any], manifest: dict[str, Any], vector_index: Any
) -> StoreBM25:
    """The store-kept BM25 of a generation: its df table (``bm25_df.json``, checked against
    the manifest and field by field) over the rows in the vector store's Milvus or Qdrant."""
    from llama_index_car.sparse_stores import check_collection, sparse_backend

    if vector_index is None:
        raise ConfigurationError(
            f"{root} keeps its BM25 rows in its {spec['vector_store']}: pass vector_index= (a "
            "VectorStoreIndex over that store)")
    got = _persist.read_bound_json(root, manifest, DF_NAME, max_bytes=1 << 30)
    stats = read_table(got, root / DF_NAME, spec["nodes"])
    try:
        collection = check_collection(spec["bm25"].get("collection"), str(root / INDEX_NAME))
    except StoreError as exc:
        raise IndexPersistError(f"{exc}; rebuild the index") from exc
    backend = sparse_backend(getattr(vector_index, "vector_store", None), collection=collection)
    if backend is None:
        raise ConfigurationError(
            f"{root} keeps its BM25 rows in a Milvus or Qdrant store, not in a "
            f"{type(getattr(vector_index, 'vector_store', None)).__name__}")
    return StoreBM25(backend, stats)


def open_generation(root: Path) -> Generation:
    """The generation directory ``root``: its one manifest read and checked (every file
    hashed but the BM25 arrays, which their loader checks, and the JSON files, each read once
    and checked from the bytes read), ``index.json`` and the extra documents parsed.

    Raises:
        IndexPersistError: naming the first file that is missing, corrupt or malformed.
    """
    manifest = _persist.read_manifest(
        root, kind=KIND, format_versions=(FORMAT_VERSION,), required=(INDEX_NAME, NODES_NAME),
        verify=_hashed_by_manifest,
    )
    spec = _spec(root, manifest)
    documents = {}
    for name in spec["documents"]:
        try:
            documents[name] = _persist.read_bound_json(root, manifest, name)
        except FileNotFoundError as exc:  # pragma: no cover - read_bound_json names it
            raise IndexPersistError(f"{root / name} is missing; rebuild the index") from exc
    return Generation(root, manifest, spec, documents)


_TAG = re.compile(r"^[A-Z][A-Z_-]{0,15}$")
#: Kiwi model types a persisted spec may name (kiwipiepy 0.24)
KIWI_MODEL_TYPES = ("none", "knlm", "sbg", "cong", "cong-global", "largest")
MAX_WORDS = 100_000
MAX_WORD_CHARS = 100


def _words(value: Any, limit: int = MAX_WORDS) -> bool:
    return isinstance(value, list) and len(value) <= limit and all(
        isinstance(w, str) and 0 < len(w) <= MAX_WORD_CHARS for w in value)


def _user_word(entry: Any) -> bool:
    return (
        isinstance(entry, list) and len(entry) == 3 and _words(entry[:1])
        and isinstance(entry[1], str) and bool(_TAG.match(entry[1]))
        and type(entry[2]) in (int, float) and math.isfinite(entry[2])
    )


#: the fields of a persisted ``KiwiTokenizer`` config and their checks: what changes tokens.
#: Resource fields (``num_workers``, ``processes``, ``min_texts_per_process``) are not among
#: them: threads and processes are the caller's to choose, never a folder's.
TOKENIZER_FIELDS: dict[str, Callable[[Any], bool]] = {
    "keep_tags": lambda v: isinstance(v, list) and 0 < len(v) <= 64 and all(
        isinstance(t, str) and _TAG.match(t) for t in v),
    "stopwords": _words,
    "compounds": lambda v: v in ("none", "criterion", "all"),
    "compound_heads": lambda v: _words(v, 1000),
    "normalize_domain": lambda v: isinstance(v, bool),
    "lowercase": lambda v: isinstance(v, bool),
    "user_words": lambda v: isinstance(v, list) and len(v) <= MAX_WORDS and all(
        _user_word(w) for w in v),
    "model_type": lambda v: v is None or v in KIWI_MODEL_TYPES,
    "max_chars_per_call": lambda v: type(v) is int and 1_000 <= v <= 100_000,
}
_SPEC_STRINGS = ("kiwipiepy_version", "model_version", "model_path_name", "model_type",
                 "user_dict_sha256", "spec_hash")


def tokenizer_from_spec(saved: Any, path: Path) -> Any:
    """The :class:`~llama_index_car.tokenizers.kiwi.KiwiTokenizer` of a persisted spec
    (``index.json`` ``tokenizer``), every config field checked against
    :data:`TOKENIZER_FIELDS`; a field outside it (a thread or process count included) or a
    value out of its range is an :class:`IndexPersistError` naming it. Resource settings take
    the tokenizer's defaults."""
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    def bad(what: str) -> IndexPersistError:
        return IndexPersistError(f"{path}: tokenizer {what}; rebuild the index")

    if not isinstance(saved, dict) or saved.get("type") != "KiwiTokenizer" or not isinstance(
            saved.get("config"), dict):
        raise bad("spec is not a KiwiTokenizer spec (type, config)")
    for key in _SPEC_STRINGS:
        if key in saved and not (isinstance(saved[key], str) and len(saved[key]) <= 256):
            raise bad(f"field {key!r} is not a short string")
    if "patterns" in saved and not (isinstance(saved["patterns"], list)
                                    and len(saved["patterns"]) <= 64):
        raise bad("field 'patterns' is not a list of patterns")
    config = saved["config"]
    for key, value in config.items():
        check = TOKENIZER_FIELDS.get(key)
        if check is None:
            raise bad(f"config field {key!r} is not allowed (allowed: "
                      f"{', '.join(TOKENIZER_FIELDS)}; threads and processes are the caller's)")
        if not check(value):
            raise bad(f"config field {key!r} has an invalid value ({str(value)[:60]!r})")
    kwargs = dict(config)
    if "user_words" in kwargs:
        kwargs["user_words"] = tuple(tuple(w) for w in kwargs["user_words"])
    for key in ("keep_tags", "stopwords", "compound_heads"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    try:
        return KiwiTokenizer(**kwargs)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise bad(f"config is invalid ({' '.join(str(exc).split())[:200]})") from exc


def _spec(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    path = root / INDEX_NAME
    spec = _persist.read_bound_json(root, manifest, INDEX_NAME)
    if not isinstance(spec, dict) or spec.get("format_version") != FORMAT_VERSION:
        raise IndexPersistError(f"{path}: not a format {FORMAT_VERSION} index; rebuild the index")
    types = {"tokenizer": dict, "bm25": dict, "nodes": int, "vectors": str, "documents": list}
    wrong = [k for k, t in types.items() if not isinstance(spec.get(k), t)]
    if wrong or spec["vectors"] not in _VECTOR_KINDS or not (
        spec.get("spans") is None or isinstance(spec["spans"], dict)
    ) or not all(isinstance(d, str) and d in manifest["files"] and "/" not in d
                 for d in spec["documents"]):
        raise IndexPersistError(f"{path}: malformed fields {wrong or ['vectors/spans/documents']}"
                                "; rebuild the index")
    if isinstance(spec["nodes"], bool) or not 0 <= spec["nodes"] < 1 << 40:
        raise IndexPersistError(f"{path}: 'nodes' is not a node count; rebuild the index")
    if not _embed_spec_ok(spec.get("embed")):
        raise IndexPersistError(f"{path}: field 'embed' is not an embedding spec (provider, "
                                "class_name, model_name, dimensions, engine); rebuild the index")
    if spec["vectors"] == "local" and f"{FLAT_DIR}/flat.json" not in manifest["files"]:
        raise IndexPersistError(f"{root / FLAT_DIR} is not listed; rebuild the index")
    return spec


def _embed_spec_ok(embed: Any) -> bool:
    """``None`` or a :func:`~llama_index_car.providers.embed_spec` dict of short strings and a
    dimension count."""
    if embed is None:
        return True
    short = lambda v: isinstance(v, str) and len(v) <= 256  # noqa: E731
    return (
        isinstance(embed, dict) and set(embed) <= {"provider", "class_name", "model_name",
                                                   "dimensions", "engine"}
        and all(short(embed.get(k, "")) for k in ("provider", "class_name", "model_name"))
        and (embed.get("engine") is None or short(embed["engine"]))
        and (embed.get("dimensions") is None or (type(embed["dimensions"]) is int
                                                 and 0 < embed["dimensions"] <= 1 << 16))
    )


def _spans(
    root: Path, spec: dict[str, Any], manifest: dict[str, Any], ids: Mapping[str, int],
    verify: Verify = "auto",
) -> Any:
    """The span index the spec records (``spans.*``, read when used), its sizes checked
    against the manifest, the spec and the nodes; ``full`` (a small folder, or
    ``verify="full"``): every file hashed, the tables and vectors checked whole and every
    node id found among the index's."""
    from llama_index_car.span_index import SPANS_NAME, SpanIndex

    recorded = spec.get("spans")
    names = [n for n in manifest["files"] if n.startswith(SPANS_PREFIX)]
    meta = root / SPANS_META
    if recorded is None:
        if names:
            raise IndexPersistError(
                f"{meta} is present but {root / INDEX_NAME} records no span index; rebuild")
        return None
    if not (isinstance(recorded, dict) and set(recorded) == {"spans", "dim"} and all(
            type(v) is int and 0 <= v < 1 << 40 for v in recorded.values())):
        raise IndexPersistError(f"{root / INDEX_NAME}: 'spans' is not a span count and a "
                                "dimension; rebuild the index")
    for name in (SPANS_META, "spans.blob", "spans.rows.npy", "spans.vectors.npy"):
        entry = manifest["files"].get(name)
        path = root / name
        if entry is None or not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise IndexPersistError(f"{path} is missing or its size differs from manifest.json; "
                                    "rebuild the index")
    full = _hash_if_small(root, manifest, SPANS_PREFIX, "", verify)
    spans = SpanIndex.open_records(root, SPANS_NAME, nodes=len(ids), spans=recorded["spans"],
                                   dim=recorded["dim"], full=full)
    if full and not all(i in ids for i in spans.node_ids):
        raise IndexPersistError(f"{root / 'spans.blob'} holds spans of unknown nodes (not the "
                                "index's); rebuild the index")
    return spans


def _check_spec(saved: dict[str, Any], tokenizer: Any, root: Path) -> bool:
    """Warn when ``tokenizer`` analyses differently from the persisted spec; True when the
    analysis is the same (stored token counts can answer the token cache)."""
    current = tokenizer.to_dict()
    problems: list[str] = []
    if saved.get("spec_hash") != current["spec_hash"]:
        diff = sorted(
            k
            for k in set(saved.get("config", {})) | set(current["config"])
            if saved.get("config", {}).get(k) != current["config"].get(k)
        )
        if saved.get("patterns") != current["patterns"]:
            diff.append("patterns")
        problems.append(f"tokenizer spec differs ({', '.join(diff) or 'spec_hash'})")
    for key in ("kiwipiepy_version", "model_version", "model_type"):
        if saved.get(key) != current.get(key):
            problems.append(f"{key} {saved.get(key)!r} -> {current.get(key)!r}")
    if problems:
        warnings.warn(
            f"{root}: index was built with a different tokenizer: {'; '.join(problems)}. "
            "Query tokens may not match the indexed tokens; rebuild the index to be safe.",
            TokenizerMismatchWarning,
            stacklevel=5,
        )
    return not problems


def open_flat(root: Path, manifest: dict[str, Any], verify: Verify = "auto") -> Any:
    """The :class:`~llama_index_car.flat_store.FlatState` in ``root/flat``: its files' sizes
    checked against ``manifest``, headers and records by
    :func:`~llama_index_car.flat_store.open_state`; ``verify="full"`` (and ``"auto"`` up to
    :data:`~llama_index_car._bm25_storage.AUTO_VERIFY_BYTES` of files, as for the BM25
    arrays) also hashes every file against the manifest and checks every value, so vectors
    copied in from another folder are refused; above it (``"lazy"``) a query reads rows by
    bounds-checked positions only."""
    from llama_index_car.flat_store import open_state

    prefix = FLAT_DIR + "/"
    files = {n[len(prefix):]: e for n, e in manifest["files"].items() if n.startswith(prefix)}
    full = _hash_if_small(root, manifest, prefix, FLAT_DIR, verify)
    return open_state(root / FLAT_DIR, files, verify="full" if full else "lazy")


def _hash_if_small(
    root: Path, manifest: dict[str, Any], prefix: str, sub: str, verify: Verify
) -> bool:
    """Whether the files listed under ``prefix`` are verified whole (``verify="full"``, or
    ``"auto"`` up to :data:`~llama_index_car._bm25_storage.AUTO_VERIFY_BYTES` of them, as for
    the BM25 arrays); if so they are hashed against ``manifest`` here, so a file copied in
    from another folder is refused."""
    from llama_index_car._bm25_storage import AUTO_VERIFY_BYTES

    files = {n: e for n, e in manifest["files"].items() if n.startswith(prefix)}
    total = sum(int(e["bytes"]) for e in files.values())
    full = verify == "full" or (verify == "auto" and total <= AUTO_VERIFY_BYTES)
    if full:
        for name, entry in files.items():
            path = root / name
            if not path.is_file() or path.stat().st_size != entry["bytes"] or (
                    _files.sha256_file(path) != entry["sha256"]):
                raise IndexPersistError(
                    f"{path} is missing or corrupt (size or sha256 differs from "
                    f"{_persist.MANIFEST_NAME}); rebuild the index")
    return full
