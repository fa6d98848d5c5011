"""KiwiBM25Retriever: LlamaIndex retriever over Kiwi tokens scored by rank_bm25's BM25Okapi.

A thin adapter: :class:`~llama_index_car.tokenizers.kiwi.KiwiTokenizer` makes the tokens,
:class:`~llama_index_car.bm25.BM25Okapi` scores them (``k1=1.5, b=0.75, epsilon=0.25``,
scores equal to ``rank_bm25.BM25Okapi`` on the same tokens). The text indexed per node is
``node.get_content(metadata_mode=MetadataMode.EMBED)``, so metadata the node excludes from
embedding (paths, table cells) is not indexed, while e.g. a reframed section title is.

Behaviour:

* documents scoring exactly 0 (no query token, or only tokens with idf 0) are not returned;
  ranking is score descending, then earlier-indexed node first;
* ``similarity_top_k`` above the number of nodes is clamped, with a ``UserWarning``;
* ``filters`` (LlamaIndex ``MetadataFilters``; EQ, IN and the other operators of
  ``build_metadata_filter_fn``, AND/OR/NOT, nested groups) restrict the returned nodes; the
  BM25 statistics stay those of the whole corpus (as LlamaIndex's ``BM25Retriever`` does);
* ``insert_nodes`` / ``delete_nodes`` re-tokenize only new texts; the result scores exactly
  like a fresh build on the same nodes in the same order;
* a token cache (text hash + tokenizer spec -> tokens) lets re-indexing skip Kiwi;
* ``persist(dir)`` / ``from_persist_dir(dir)``: JSON + memory-mapped ``.npy`` (no pickle),
  crash-safe generations, manifest-bound (see ``llama_index_car._persist``).

Example:
    >>> from llama_index.core.schema import TextNode
    >>> texts = ["배수시설 설치기준", "조경 식재", "포장 두께", "배수 시설"]
    >>> nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate(texts)]
    >>> r = KiwiBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=2)
    >>> [(n.node.node_id, round(n.score, 4)) for n in r.retrieve("설치기준")]
    [('0', 1.753)]
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.types import (
    FilterCondition,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn

from llama_index_car._errors import ConfigurationError, IndexPersistError, TokenizerMismatchWarning
from llama_index_car._persist import (
    MANIFEST_NAME,
    fsync_write,
    load_live,
    read_manifest,
    replace_dir,
    write_manifest,
)
from llama_index_car.bm25 import BM25Okapi, Verify, top_k_from_scores
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers._filters import check_filters, filters_from_json
from llama_index_car.tokenizers.kiwi import KiwiTokenizer

__all__ = ["FORMAT_VERSION", "KiwiBM25Retriever"]

#: Version of the persisted directory layout written by :meth:`KiwiBM25Retriever.persist`
#: (2: generations + ``bm25/`` memory-mappable arrays; 1, with ``counts.npz``, is not read).
FORMAT_VERSION = 2
_KIND = "KiwiBM25Retriever"
_CONFIG = "config.json"
_BM25 = "bm25"
_NODES = "nodes.json"


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _matches(filters: MetadataFilters, metadata: dict[str, Any]) -> bool:
    """Evaluate (possibly nested) ``MetadataFilters`` on one metadata dict."""
    results: list[bool] = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            results.append(_matches(f, metadata))
        else:
            leaf = f if isinstance(f, MetadataFilter) else MetadataFilter(key=f.key, value=f.value)
            fn = build_metadata_filter_fn(lambda _id: metadata, MetadataFilters(filters=[leaf]))
            results.append(fn(""))
    cond = filters.condition or FilterCondition.AND
    if cond == FilterCondition.AND:
        return all(results)
    if cond == FilterCondition.OR:
        return any(results)
    if cond == FilterCondition.NOT:
        return not any(results)
    raise ConfigurationError(f"unsupported filter condition {cond!r}; use 'and', 'or' or 'not'")


def _fsync_write(path: Path, data: bytes) -> None:
    fsync_write(path, data)


class _StoredTokens(MutableMapping[str, list[str]]):
    """A token cache that also answers the texts of a loaded index from its stored counts.

    Entries of ``base`` win; a miss whose key is ``prefix + text hash`` of an indexed node is
    answered with that node's stored token multiset (built on first miss, nothing at load).
    Writes go to ``base``.
    """

    def __init__(
        self,
        base: MutableMapping[str, list[str]],
        prefix: str,
        hashes: Sequence[str],
        bm25: BM25Okapi,
    ) -> None:
        self._base, self._prefix, self._hashes, self._bm25 = base, prefix, hashes, bm25
        self._pos: dict[str, int] | None = None

    def _stored(self, key: str) -> list[str] | None:
        if not key.startswith(self._prefix):
            return None
        if self._pos is None:
            self._pos = {h: i for i, h in enumerate(self._hashes)}
        i = self._pos.get(key[len(self._prefix) :])
        if i is None:
            return None
        toks: list[str] = []
        for t, c in self._bm25.doc_term_counts(i).items():
            toks.extend([t] * c)
        return toks

    def __getitem__(self, key: str) -> list[str]:
        try:
            return self._base[key]
        except KeyError:
            hit = self._stored(key)
            if hit is None:
                raise
            return hit

    def __setitem__(self, key: str, value: list[str]) -> None:
        self._base[key] = value

    def __delitem__(self, key: str) -> None:
        del self._base[key]

    def __iter__(self) -> Iterator[str]:
        seen = set(self._base)
        yield from self._base
        for h in self._hashes:
            if self._prefix + h not in seen:
                seen.add(self._prefix + h)
                yield self._prefix + h

    def __len__(self) -> int:
        return len(set(self._base) | {self._prefix + h for h in self._hashes})

    def __contains__(self, key: object) -> bool:
        return key in self._base or (isinstance(key, str) and self._stored(key) is not None)



@dataclass(frozen=True)
class _Snapshot:
    """What one query reads: the BM25 index and its nodes (same version), and a one-slot
    cache of the filter mask over those nodes."""

    bm25: BM25Okapi
    nodes: list[BaseNode]
    mask: list[np.ndarray]

class KiwiBM25Retriever(BaseRetriever):
    """BM25Okapi retriever over Kiwi morphemes (see the module docstring).

    Args:
        nodes: nodes to index (their node ids must be unique).
        tokenizer: a :class:`KiwiTokenizer`; default ``KiwiTokenizer()``.
        similarity_top_k: results per query (default 10; clamped to the corpus size).
        k1, b, epsilon: BM25Okapi parameters (defaults 1.5, 0.75, 0.25, as rank_bm25).
        filters: ``MetadataFilters`` applied to every query.
        show_progress: tqdm bar while tokenizing.
        token_cache: ``True`` (default) = a new in-memory cache, ``False``/``None`` = none,
            or a dict to share, e.g. ``old_retriever.token_cache``, so unchanged texts are not
            analysed again.
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode] = (),
        tokenizer: KiwiTokenizer | None = None,
        similarity_top_k: int = 10,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        filters: MetadataFilters | None = None,
        show_progress: bool = False,
        token_cache: bool | MutableMapping[str, list[str]] | None = True,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(similarity_top_k, int) or similarity_top_k < 1:
            raise ConfigurationError(
                f"similarity_top_k must be an int >= 1, got {similarity_top_k!r}"
            )
        if filters is not None and not isinstance(filters, MetadataFilters):
            raise ConfigurationError(
                f"filters must be llama_index MetadataFilters, got {type(filters).__name__}"
            )
        check_filters(filters)
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self._tokenizer = tokenizer if tokenizer is not None else KiwiTokenizer()
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.show_progress = show_progress
        self._token_cache: MutableMapping[str, list[str]] | None
        if token_cache is True:
            self._token_cache = {}
        elif token_cache is False or token_cache is None:
            self._token_cache = None
        else:
            self._token_cache = token_cache
        self._cache_prefix = self._tokenizer.spec_hash[:16] + ":"
        nodes = list(nodes)
        self._check_unique(nodes)
        self._nodes: list[BaseNode] = nodes
        self._text_hashes: list[str] = []
        tokens = self._tokens_for(nodes, self._text_hashes)
        self._bm25 = BM25Okapi(tokens, k1=k1, b=b, epsilon=epsilon)
        self._reindex()
        self._warn_if_small()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[BaseNode] | None = None,
        docstore: BaseDocumentStore | None = None,
        index: Any | None = None,
        tokenizer: KiwiTokenizer | None = None,
        similarity_top_k: int = 10,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        show_progress: bool = False,
        filters: MetadataFilters | None = None,
        token_cache: bool | MutableMapping[str, list[str]] | None = True,
        callback_manager: CallbackManager | None = None,
    ) -> KiwiBM25Retriever:
        """Build from exactly one of ``nodes``, ``docstore`` or ``index`` (its docstore).

        Raises:
            EmptyIndexError: ``index``/``docstore`` holds no nodes (a store-backed index):
                a BM25 channel over nothing would make a "hybrid" silently dense-only.
        """
        given = [x is not None for x in (nodes, docstore, index)]
        if sum(given) != 1:
            raise ConfigurationError(
                "pass exactly one of nodes=, docstore= or index= to KiwiBM25Retriever.from_defaults"
            )
        if index is not None:
            docstore = getattr(index, "docstore", None)
            if docstore is None:
                raise ConfigurationError(
                    f"index {type(index).__name__} has no docstore; pass nodes= instead"
                )
        if docstore is not None:
            nodes = list(docstore.docs.values())
            if not nodes:
                from llama_index_car._errors import EmptyIndexError

                where = f"index {type(index).__name__}" if index is not None else "docstore"
                raise EmptyIndexError(
                    f"the {where} holds no nodes in its docstore (a VectorStoreIndex over an "
                    "external vector store keeps them in the store), so BM25 would index "
                    "nothing; pass nodes= (the nodes you indexed) or load a persisted "
                    "KiwiBM25Retriever with from_persist_dir"
                )
        return cls(
            nodes=list(nodes or ()),
            tokenizer=tokenizer,
            similarity_top_k=similarity_top_k,
            k1=k1,
            b=b,
            epsilon=epsilon,
            filters=filters,
            show_progress=show_progress,
            token_cache=token_cache,
            callback_manager=callback_manager,
        )

    @classmethod
    def from_bm25(
        cls,
        nodes: Sequence[BaseNode],
        bm25: BM25Okapi,
        tokenizer: KiwiTokenizer | None = None,
        similarity_top_k: int = 10,
        filters: MetadataFilters | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> KiwiBM25Retriever:
        """Wrap a prebuilt index whose document ``i`` is ``nodes[i]`` (no tokenization).

        For indexes built elsewhere from ``tokenizer``'s tokens of each node's EMBED text, e.g.
        the merged shards of :func:`llama_index_car.distributed.merge_bm25_shards`.

        Raises:
            ConfigurationError: ``len(nodes) != bm25.corpus_size`` or duplicate node ids.
        """
        nodes = list(nodes)
        if len(nodes) != bm25.corpus_size:
            raise ConfigurationError(
                f"{len(nodes)} nodes for a BM25 index of {bm25.corpus_size} documents"
            )
        cls._check_unique(nodes)
        with warnings.catch_warnings():  # top_k > 0 nodes: the empty start is replaced below
            warnings.simplefilter("ignore", UserWarning)
            self = cls(nodes=(), tokenizer=tokenizer, similarity_top_k=similarity_top_k,
                       filters=filters, token_cache=True, callback_manager=callback_manager)
        self._nodes = nodes
        self._text_hashes = [
            _text_hash(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes
        ]
        self._bm25 = bm25
        self._reindex()
        self._warn_if_small()
        return self

    @staticmethod
    def _check_unique(nodes: Sequence[BaseNode], existing: Iterable[str] = ()) -> None:
        seen = set(existing)
        dup: list[str] = []
        for n in nodes:
            if n.node_id in seen:
                dup.append(n.node_id)
            seen.add(n.node_id)
        if dup:
            raise ConfigurationError(f"duplicate node ids: {dup[:5]}; node ids must be unique")

    def _tokens_for(self, nodes: Sequence[BaseNode], hashes_out: list[str]) -> list[list[str]]:
        """Tokens of each node's EMBED text, from the cache when possible."""
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        hashes = [_text_hash(t) for t in texts]
        hashes_out.extend(hashes)
        out: list[list[str] | None] = [None] * len(texts)
        todo: list[int] = []
        cache = self._token_cache
        for i, h in enumerate(hashes):
            hit = cache.get(self._cache_prefix + h) if cache is not None else None
            if hit is not None:
                out[i] = list(hit)
            else:
                todo.append(i)
        if todo:
            fresh = self._tokenizer.tokenize_batch(
                [texts[i] for i in todo], show_progress=self.show_progress
            )
            for i, toks in zip(todo, fresh, strict=True):
                out[i] = toks
                if cache is not None:
                    cache[self._cache_prefix + hashes[i]] = list(toks)
        return [o if o is not None else [] for o in out]

    def _reindex(self) -> None:
        """Publish the current (BM25, nodes) pair as one snapshot, in one assignment.

        Queries read :attr:`_snap` once, so an ``insert_nodes``/``delete_nodes`` running in
        another thread never shows them a BM25 index and a node list of different versions.
        """
        self._id_to_pos = {n.node_id: i for i, n in enumerate(self._nodes)}
        self._snap = _Snapshot(self._bm25, self._nodes, [])

    def _warn_if_small(self) -> None:
        n = len(self._nodes)
        if self.similarity_top_k > n:
            warnings.warn(
                f"similarity_top_k={self.similarity_top_k} exceeds the {n} indexed nodes; "
                f"at most {n} results will be returned",
                UserWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ accessors
    @property
    def tokenizer(self) -> KiwiTokenizer:
        """The tokenizer used for documents and queries."""
        return self._tokenizer

    @property
    def bm25(self) -> BM25Okapi:
        """The BM25 index (document ``i`` is ``self.nodes[i]``)."""
        return self._bm25

    @property
    def nodes(self) -> list[BaseNode]:
        """The indexed nodes, in index order (a new list)."""
        return list(self._nodes)

    @property
    def token_cache(self) -> MutableMapping[str, list[str]] | None:
        """The token cache (pass it to a new retriever to skip Kiwi for unchanged texts)."""
        return self._token_cache

    def __len__(self) -> int:
        return len(self._nodes)

    # ------------------------------------------------------------------ retrieval
    def _filter_mask(self, snap: _Snapshot) -> np.ndarray | None:
        if self.filters is None or not self.filters.filters:
            return None
        if not snap.mask:  # computed once per snapshot (a racing duplicate is harmless)
            snap.mask.append(
                np.fromiter(
                    (_matches(self.filters, dict(n.metadata)) for n in snap.nodes),
                    dtype=bool,
                    count=len(snap.nodes),
                )
            )
        return snap.mask[0]

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        tokens = self._tokenizer.tokenize(query_bundle.query_str)
        snap = self._snap  # one consistent (BM25, nodes) pair for the whole query
        bm25, nodes = snap.bm25, snap.nodes
        if not tokens or not nodes:
            return []
        k = min(self.similarity_top_k, len(nodes))
        mask = self._filter_mask(snap)
        if mask is None:
            # fast path (compiled top-k when numba is installed): valid when all k are > 0
            idx, top = bm25.top_k(tokens, k)
            if idx.size == k and (top > 0).all():
                return [
                    NodeWithScore(node=nodes[i], score=s)
                    for i, s in zip(idx.tolist(), top.tolist(), strict=True)
                ]
        scores = bm25.get_scores(tokens)
        keep = scores != 0
        if mask is not None:
            keep &= mask
        cand = np.flatnonzero(keep)
        order, top = top_k_from_scores(scores[cand], k)
        return [
            NodeWithScore(node=nodes[int(cand[i])], score=float(s))
            for i, s in zip(order.tolist(), top.tolist(), strict=True)
        ]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Runs :meth:`_retrieve` in a worker thread, so the event loop is not blocked."""
        return await asyncio.to_thread(self._retrieve, query_bundle)

    # ------------------------------------------------------------------ updates
    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Add nodes (a node whose id is already indexed replaces the old one).

        Only the new texts are tokenized; scores afterwards equal a fresh build on
        ``self.nodes``.
        """
        nodes = list(nodes)
        self._check_unique(nodes)
        replaced = [n.node_id for n in nodes if n.node_id in self._id_to_pos]
        if replaced:
            self.delete_nodes(replaced)
        new_hashes: list[str] = []
        tokens = self._tokens_for(nodes, new_hashes)
        self._bm25 = self._bm25.add_documents(tokens)
        self._nodes = self._nodes + nodes
        self._text_hashes = self._text_hashes + new_hashes
        self._reindex()

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Remove nodes by id; unknown ids raise :class:`ConfigurationError`."""
        ids = list(node_ids)
        missing = [i for i in ids if i not in self._id_to_pos]
        if missing:
            raise ConfigurationError(f"cannot delete unknown node ids: {missing[:5]}")
        drop = {self._id_to_pos[i] for i in ids}
        self._bm25 = self._bm25.remove_documents(sorted(drop))
        self._nodes = [n for i, n in enumerate(self._nodes) if i not in drop]
        self._text_hashes = [h for i, h in enumerate(self._text_hashes) if i not in drop]
        self._reindex()

    # ------------------------------------------------------------------ persistence
    def persist(self, persist_dir: str | os.PathLike[str]) -> None:
        """Write the index to ``persist_dir`` crash-safely (replacing an existing index).

        ``persist_dir`` holds generations (``llama_index_car._persist.replace_dir``): a new one
        is written and fsynced, then ``CURRENT`` is switched atomically. A generation holds
        ``config.json`` (format_version, BM25 parameters, similarity_top_k, filters, tokenizer
        spec, node ids, text hashes), ``nodes.json`` (``doc_to_json`` of every node), ``bm25/``
        (:meth:`BM25Okapi.save` layout: plain ``.npy`` arrays + its manifest) and, written
        last, ``manifest.json`` with every file's size and sha256.
        """
        with replace_dir(persist_dir) as gen:
            config = {
                "format_version": FORMAT_VERSION,
                "kind": _KIND,
                "k1": self._bm25.k1,
                "b": self._bm25.b,
                "epsilon": self._bm25.epsilon,
                "similarity_top_k": self.similarity_top_k,
                "filters": self.filters.model_dump(mode="json") if self.filters else None,
                "tokenizer": self._tokenizer.to_dict(),
                "node_ids": [n.node_id for n in self._nodes],
                "text_hashes": self._text_hashes,
            }
            _fsync_write(gen / _CONFIG, json.dumps(config, ensure_ascii=False).encode("utf-8"))
            _fsync_write(
                gen / _NODES,
                json.dumps([doc_to_json(n) for n in self._nodes], ensure_ascii=False).encode(
                    "utf-8"
                ),
            )
            (gen / _BM25).mkdir()
            self._bm25.write_to(gen / _BM25)
            bm_sha = hashlib.sha256((gen / _BM25 / MANIFEST_NAME).read_bytes()).hexdigest()
            # write_manifest skips nested manifest files: bind bm25/'s through meta
            write_manifest(
                gen, kind=_KIND, format_version=FORMAT_VERSION, meta={"bm25_manifest": bm_sha}
            )

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | os.PathLike[str],
        tokenizer: KiwiTokenizer | None = None,
        token_cache: bool | MutableMapping[str, list[str]] | None = True,
        callback_manager: CallbackManager | None = None,
        *,
        verify: Verify = "auto",
    ) -> KiwiBM25Retriever:
        """Load an index written by :meth:`persist` (no re-tokenization of documents).

        The BM25 arrays are memory-mapped (:meth:`BM25Okapi.load`; ``verify`` is passed on:
        ``"auto"`` hashes everything up to 16 MiB, else checks sizes and structure). Raises
        :class:`IndexPersistError` naming the missing or corrupt file, and for indices written
        by older versions (format 1: ``counts.npz``), which must be rebuilt. Warns
        :class:`TokenizerMismatchWarning` when ``tokenizer`` (default: the persisted spec)
        differs from the persisted spec, or the installed kiwipiepy / model version differs.
        With the same analysis, the token cache answers unchanged texts from the stored counts
        (token multisets; BM25 only needs counts), so a later re-index skips Kiwi.
        """
        return load_live(
            persist_dir,
            lambda root: cls._load_generation(
                root, tokenizer, token_cache, callback_manager, verify
            ),
        )

    @classmethod
    def _load_generation(
        cls,
        root: Path,
        tokenizer: KiwiTokenizer | None,
        token_cache: bool | MutableMapping[str, list[str]] | None,
        callback_manager: CallbackManager | None,
        verify: Verify,
    ) -> KiwiBM25Retriever:
        manifest = read_manifest(
            root,
            kind=_KIND,
            format_versions=(FORMAT_VERSION,),
            verify=False,
            required=(_CONFIG, _NODES),
        )
        raw: dict[str, bytes] = {}
        for name in (_CONFIG, _NODES):
            path = root / name
            if not path.is_file():
                raise IndexPersistError(f"{path} is missing; persist the index again")
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != manifest["files"][name]["sha256"]:
                raise IndexPersistError(
                    f"{path} is corrupt (sha256 differs from {MANIFEST_NAME}); "
                    "persist the index again"
                )
            raw[name] = data
        bm_manifest = root / _BM25 / MANIFEST_NAME
        if (
            not bm_manifest.is_file()
            or hashlib.sha256(bm_manifest.read_bytes()).hexdigest()
            != (manifest.get("meta") or {}).get("bm25_manifest")
        ):
            raise IndexPersistError(
                f"{bm_manifest} is missing or differs from {root / MANIFEST_NAME}; "
                "persist the index again"
            )
        try:
            config = json.loads(raw[_CONFIG])
            node_dicts = json.loads(raw[_NODES])
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise IndexPersistError(f"{root}: unreadable JSON ({e})") from e
        if not isinstance(config, dict) or config.get("format_version") != FORMAT_VERSION:
            raise IndexPersistError(
                f"{root / _CONFIG}: not a format {FORMAT_VERSION} config; rebuild the index"
            )
        required = (
            "tokenizer",
            "node_ids",
            "text_hashes",
            "k1",
            "b",
            "epsilon",
            "similarity_top_k",
        )
        missing = [key for key in (*required, "filters") if key not in config]
        if missing:
            raise IndexPersistError(f"{root / _CONFIG} lacks {missing}; rebuild the index")
        saved_spec = config["tokenizer"]
        if tokenizer is None:
            tokenizer = KiwiTokenizer.from_dict(saved_spec)
        cls._check_spec(saved_spec, tokenizer, root)
        bm25 = BM25Okapi.load(root / _BM25, verify=verify)
        nodes = [json_to_doc(d) for d in node_dicts]
        n_ids = config["node_ids"]
        if (
            len(nodes) != bm25.corpus_size
            or [n.node_id for n in nodes] != n_ids
            or len(config["text_hashes"]) != len(nodes)
        ):
            raise IndexPersistError(
                f"{root}: {_NODES}, {_CONFIG} and {_BM25}/ disagree in size; rebuild the index"
            )
        if (bm25.k1, bm25.b, bm25.epsilon) != (
            float(config["k1"]),
            float(config["b"]),
            float(config["epsilon"]),
        ):
            raise IndexPersistError(f"{root}: {_CONFIG} and {_BM25}/ disagree on k1, b, epsilon")
        filters = filters_from_json(config["filters"], str(root / _CONFIG))
        self = cls.__new__(cls)
        BaseRetriever.__init__(self, callback_manager=callback_manager)
        self._tokenizer = tokenizer
        self.similarity_top_k = int(config["similarity_top_k"])
        self.filters = filters
        self.show_progress = False
        self._token_cache = (
            {} if token_cache is True else (None if not token_cache else token_cache)
        )
        self._cache_prefix = tokenizer.spec_hash[:16] + ":"
        self._nodes = nodes
        self._text_hashes = list(config["text_hashes"])
        self._bm25 = bm25
        current = tokenizer.to_dict()
        same_analysis = all(
            saved_spec.get(key) == current[key]
            for key in ("spec_hash", "kiwipiepy_version", "model_version", "model_type")
        )
        if self._token_cache is not None and same_analysis:
            self._token_cache = _StoredTokens(
                self._token_cache, self._cache_prefix, self._text_hashes, bm25
            )
        self._reindex()
        return self

    @staticmethod
    def _check_spec(saved: dict[str, Any], tokenizer: KiwiTokenizer, root: Path) -> None:
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
                stacklevel=3,
            )

    def token_counts(self, node_id: str) -> Counter[str]:
        """The indexed token counts of one node (for inspection and tests)."""
        pos = self._id_to_pos.get(node_id)
        if pos is None:
            raise ConfigurationError(f"unknown node id {node_id!r}")
        return Counter(self._bm25.doc_term_counts(pos))
