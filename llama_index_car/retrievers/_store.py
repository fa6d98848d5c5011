"""Store plumbing shared by CAR and the hybrid: channels over any ``VectorStoreIndex`` that
persist, update and filter together.

A retriever built over an index (``CriterionAwareRetriever.from_defaults(index=...)``,
``WeightedRRFRetriever.from_index(index, ...)`` or ``from_persist_dir``) holds one immutable
:class:`Channels` snapshot: the dense channel (:class:`IndexDense`), the Kiwi BM25 channel, the
hypothesizer, the index and the ``filters``. Every query pins the snapshot current when it
starts, so it sees one consistent state from start to end.

Updates (``insert_nodes`` / ``delete_nodes`` / ``delete_ref_doc``) are serialised by a lock
and never show half an update:

* new nodes are embedded first, then written to the store; the dense channel only returns
  ids of its snapshot, so queries pinned to the old snapshot do not see them; the new
  snapshot (BM25 with the nodes) is then published in one assignment;
* deleted nodes leave the snapshot first; the store deletion waits until no query pinned to
  the old snapshot is running (at most ``drain_timeout`` seconds);
* a node id inserted again (same id, new content) is absent between the two steps, never
  half old and half new.

Run updates outside the event loop (``asyncio.to_thread``) if async queries are in flight.

``persist(dir)`` writes ``retriever.json`` (kind, config, filters, hypothesizer class),
``bm25/`` (``KiwiBM25Retriever.persist``) and, when the retriever has a span index, ``spans/``
(:meth:`SpanIndex.persist <llama_index_car.span_index.SpanIndex.persist>`) as one crash-safe
generation of :mod:`llama_index_car._persist`, bound by a manifest; no pickle. The span index
is part of the snapshot: updates replace it with ``without(ids)`` / ``with_nodes(nodes,
index._embed_model)`` (embedded before anything is written to the store).
``from_persist_dir(dir, index=...)`` reopens it over the same store without re-reading
documents.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import inspect
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._persist import (
    load_live,
    read_manifest,
    replace_dir,
    write_json,
    write_manifest,
)
from llama_index_car.retrievers._filters import check_filters, filters_from_json

__all__ = ["Channels", "IndexDense", "StoreChannels", "index_channels"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
CONFIG_NAME = "retriever.json"
BM25_DIR = "bm25"
SPANS_DIR = "spans"
_SKIP_CONFIG = {
    "self", "dense_retriever", "lexical_retriever", "retrievers", "hypothesizer", "router",
    "callback_manager", "verbose", "kwargs", "args",
}
_PINNED: contextvars.ContextVar[Mapping[int, Channels] | None] = contextvars.ContextVar(
    "llama_index_car_pinned_channels", default=None
)


# ----------------------------------------------------------------------------- channels
class IndexDense(VectorIndexRetriever):
    """The dense channel over a ``VectorStoreIndex``: a ``VectorIndexRetriever`` with
    ``filters`` applied by the store, no node-id list frozen at build time, and hits
    restricted to ``ids`` (the snapshot's nodes; ``None``: no restriction).

    Async queries run the synchronous store call in a worker thread (store async clients
    differ in what they support).
    """

    def __init__(
        self,
        index: Any,
        similarity_top_k: int,
        filters: MetadataFilters | None = None,
        ids: frozenset[str] | None = None,
    ) -> None:
        super().__init__(index, similarity_top_k=similarity_top_k, filters=filters)
        self.ids = ids

    def with_ids(self, ids: frozenset[str]) -> IndexDense:
        """A copy restricted to ``ids``."""
        clone = copy.copy(self)
        clone.ids = ids
        return clone

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = super()._retrieve(query_bundle)
        if self.ids is None:
            return list(hits)
        return [h for h in hits if h.node.node_id in self.ids]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        import asyncio

        return await asyncio.to_thread(self._retrieve, query_bundle)


def index_channels(
    index: Any,
    nodes: Sequence[BaseNode] | None,
    pool_top_k: int,
    *,
    filters: MetadataFilters | None = None,
    tokenizer: Any | None = None,
    show_progress: bool = False,
    token_cache: Any = True,
) -> tuple[IndexDense, Any]:
    """The dense and BM25 channels over ``index`` (BM25 over ``nodes``, default: the index's
    docstore nodes), both with ``filters``. ``token_cache`` goes to ``KiwiBM25Retriever``
    (share a dict between builds to tokenize each text once).

    Raises:
        ConfigurationError: ``filters`` is not ``MetadataFilters``.
        EmptyIndexError: no nodes given and the index's docstore is empty (a store-backed
            index keeps its nodes in the store: pass ``nodes=``).
    """
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    if filters is not None and not isinstance(filters, MetadataFilters):
        raise ConfigurationError(
            f"filters must be llama_index MetadataFilters, got {type(filters).__name__}"
        )
    check_filters(filters)
    if nodes is None:
        lexical = KiwiBM25Retriever.from_defaults(
            index=index, tokenizer=tokenizer, filters=filters, show_progress=show_progress,
            similarity_top_k=pool_top_k, token_cache=token_cache,
        )
    else:
        node_list = list(nodes)
        lexical = KiwiBM25Retriever.from_defaults(
            nodes=node_list, tokenizer=tokenizer, filters=filters, show_progress=show_progress,
            similarity_top_k=max(1, min(pool_top_k, len(node_list))), token_cache=token_cache,
        )
    ids = frozenset(n.node_id for n in lexical.nodes)
    return IndexDense(index, pool_top_k, filters, ids), lexical


@dataclass(frozen=True, eq=False)
class Channels:
    """One immutable state of a store-backed retriever (``readers``: queries pinned to it)."""

    retrievers: tuple[Any, ...] = ()
    hypothesizer: Any = None
    index: Any = None
    filters: MetadataFilters | None = None
    spans: Any = None
    readers: list[int] = field(default_factory=lambda: [0])


def channel_property(position: int | str | None, doc: str) -> property:
    """A property reading the pinned snapshot (``position`` in ``retrievers``; ``None`` =
    the hypothesizer; a string = that field of :class:`Channels`); setting it publishes a
    new snapshot."""

    def get(self: StoreChannels) -> Any:
        state = self._current()
        if isinstance(position, str):
            return getattr(state, position)
        if position is None:
            return state.hypothesizer
        return state.retrievers[position] if position < len(state.retrievers) else None

    def set_(self: StoreChannels, value: Any) -> None:
        state = self.__dict__.get("_channels", Channels())
        if isinstance(position, str):
            new = replace(state, **{position: value}, readers=[0])
        elif position is None:
            new = replace(state, hypothesizer=value, readers=[0])
        else:
            items = list(state.retrievers) + [None] * max(0, position + 1 - len(state.retrievers))
            items[position] = value
            new = replace(state, retrievers=tuple(items), readers=[0])
        self.__dict__["_channels"] = new

    return property(get, set_, doc=doc)


# ----------------------------------------------------------------------------- mixin
class StoreChannels:
    """Mixin (before ``BaseRetriever``): snapshot pinning, updates, filters and persistence."""

    #: seconds an update waits for queries pinned to the old snapshot before deleting
    drain_timeout: float = 60.0

    # --------------------------------------------------------------- snapshot
    def _current(self) -> Channels:
        pinned = (_PINNED.get() or {}).get(id(self))
        return pinned if pinned is not None else self.__dict__.get("_channels", Channels())

    def _cond(self) -> threading.Condition:
        return self.__dict__.setdefault("_store_cond", threading.Condition())  # type: ignore[no-any-return]

    def _writer(self) -> threading.Lock:
        return self.__dict__.setdefault("_store_writer", threading.Lock())  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def _pinned(self) -> Iterator[Channels]:
        cond = self._cond()
        with cond:
            state = self._current()
            state.readers[0] += 1
        token = _PINNED.set({**(_PINNED.get() or {}), id(self): state})
        try:
            yield state
        finally:
            _PINNED.reset(token)
            with cond:
                state.readers[0] -= 1
                cond.notify_all()

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """``BaseRetriever.retrieve`` on one pinned snapshot of the channels."""
        with self._pinned():
            return super().retrieve(str_or_query_bundle)  # type: ignore[misc,no-any-return]

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """``BaseRetriever.aretrieve`` on one pinned snapshot of the channels."""
        with self._pinned():
            return await super().aretrieve(str_or_query_bundle)  # type: ignore[misc,no-any-return]

    def _bind(self, index: Any, filters: MetadataFilters | None) -> None:
        state = self.__dict__.get("_channels", Channels())
        self.__dict__["_channels"] = replace(state, index=index, filters=filters, readers=[0])

    @property
    def index(self) -> Any:
        """The ``VectorStoreIndex`` the dense channel reads (``None`` if not built over one)."""
        return self._current().index

    @property
    def filters(self) -> MetadataFilters | None:
        """The ``MetadataFilters`` both channels apply (``None``: no filter)."""
        return self._current().filters

    def _store_state(self, what: str) -> Channels:
        from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

        state = self.__dict__.get("_channels", Channels())
        if (
            state.index is None
            or len(state.retrievers) < 2
            or not isinstance(state.retrievers[0], IndexDense)
            or not isinstance(state.retrievers[1], KiwiBM25Retriever)
        ):
            raise ConfigurationError(
                f"{type(self).__name__}.{what} needs a retriever built over a VectorStoreIndex "
                "(from_defaults(index=...), from_index(...) or from_persist_dir(...)); this one "
                "was built from arbitrary channels"
            )
        return state

    # --------------------------------------------------------------- updates
    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Add ``nodes`` to the store and the BM25 index, as one update.

        A node whose id is already indexed replaces it. The nodes are not modified (they are
        embedded into copies).
        """
        self._update([], list(nodes))

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Remove nodes by id from both channels, as one update.

        Raises:
            ConfigurationError: an id is not indexed.
        """
        self._update(list(node_ids), [])

    def delete_ref_doc(self, ref_doc_id: str) -> None:
        """Remove every node of the source document ``ref_doc_id`` (unknown: no change)."""
        lexical = self._store_state("delete_ref_doc").retrievers[1]
        ids = [n.node_id for n in lexical.nodes if n.ref_doc_id == ref_doc_id]
        if ids:
            self._update(ids, [])

    def _update(self, delete_ids: list[str], nodes: list[BaseNode]) -> None:
        with self._writer():
            old = self._store_state("insert_nodes" if nodes else "delete_nodes")
            known = old.retrievers[0].ids or frozenset()
            missing = [i for i in delete_ids if i not in known]
            if missing:
                raise ConfigurationError(f"cannot delete unknown node ids: {missing[:5]}")
            ids = [n.node_id for n in nodes]
            if len(set(ids)) != len(ids):
                raise ConfigurationError("the inserted nodes repeat a node id; ids must be unique")
            index = old.index
            vectors = _embed(index, nodes)
            spans = old.spans
            if spans is not None:  # embedded before the store is touched, like the nodes
                spans = spans.without(delete_ids).with_nodes(nodes, index._embed_model)
            embedded = {
                n.node_id: n.model_copy(update={"embedding": vectors[n.node_id]}) for n in nodes
            }
            again = [n for n in nodes if n.node_id in known]
            fresh = [n for n in nodes if n.node_id not in known]
            removed = sorted(set(delete_ids) | {n.node_id for n in again})
            if fresh:
                index.insert_nodes([embedded[n.node_id] for n in fresh])
            if not removed:
                self._publish(_next(old, insert=fresh, spans=spans))
                return
            mid = _next(old, delete=removed, insert=fresh, spans=spans)
            self._publish(mid)
            self._drain(old)
            index.delete_nodes(removed, delete_from_docstore=True)
            if again:
                index.insert_nodes([embedded[n.node_id] for n in again])
                self._publish(_next(mid, insert=again, spans=spans))

    def _publish(self, state: Channels) -> None:
        with self._cond():
            self.__dict__["_channels"] = state

    def _drain(self, old: Channels) -> None:
        cond = self._cond()
        with cond:
            if not cond.wait_for(lambda: old.readers[0] == 0, timeout=self.drain_timeout):
                logger.warning(
                    "%s: %d queries still use the previous snapshot after %g s; deleting anyway",
                    type(self).__name__, old.readers[0], self.drain_timeout,
                )

    # --------------------------------------------------------------- persistence
    @classmethod
    def _manifest_kind(cls) -> str:
        """The manifest's ``kind`` (the class name; a family of retrievers may share one,
        ``retriever.json``'s ``kind`` then names the class)."""
        return cls.__name__

    def _config(self) -> dict[str, Any]:
        """JSON-able constructor arguments, read back from same-named attributes."""
        out: dict[str, Any] = {}
        for name in inspect.signature(type(self).__init__).parameters:  # type: ignore[misc]
            if name in _SKIP_CONFIG or not hasattr(self, name):
                continue
            value = getattr(self, name)
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                continue
            out[name] = value
        router = getattr(self, "router", None)
        if router is not None:
            out["router"] = {k: getattr(router, k) for k in ("threshold", "top_n", "aggregate")}
        return out

    def persist(self, persist_dir: str | os.PathLike[str]) -> None:
        """Write BM25 and config to ``persist_dir`` atomically (see the module docstring). The
        vectors stay in the store; a hypothesizer (an LLM client) is named in the config, not
        persisted: pass it again to ``from_persist_dir``.

        Raises:
            ConfigurationError: not built over a ``VectorStoreIndex``.
            IndexPersistError: ``persist_dir`` is not empty and not a persisted index.
        """
        state = self._store_state("persist")
        hyp = state.hypothesizer
        spec = {
            "format_version": FORMAT_VERSION,
            "kind": type(self).__name__,
            "config": self._config(),
            "filters": state.filters.model_dump(mode="json") if state.filters else None,
            "vector_store": type(state.index.vector_store).__name__,
            "nodes": len(state.retrievers[1]),
            "spans": None if state.spans is None else state.spans.n_spans,
            "hypothesizer": None if hyp is None else {
                "class": f"{type(hyp).__module__}:{type(hyp).__qualname__}",
            },
        }
        with replace_dir(persist_dir) as gen:
            state.retrievers[1].persist(str(gen / BM25_DIR))
            if state.spans is not None:
                state.spans.persist(gen / SPANS_DIR)
            write_json(gen / CONFIG_NAME, spec)
            write_manifest(gen, kind=self._manifest_kind(), format_version=FORMAT_VERSION)

    @classmethod
    def _load_parts(
        cls, persist_dir: str | os.PathLike[str], tokenizer: Any | None
    ) -> tuple[dict[str, Any], Any, Any]:
        """``(spec, lexical, spans)`` of a persisted retriever (``spans``: the
        :class:`~llama_index_car.span_index.SpanIndex` if the manifest lists ``spans/``,
        else ``None``; its node ids must be the BM25 ones)."""
        from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
        from llama_index_car.span_index import RECORDS_NAME, SpanIndex

        def load(root: Path) -> tuple[dict[str, Any], Any, Any]:
            manifest = read_manifest(root, kind=cls._manifest_kind(),
                                     format_versions=(FORMAT_VERSION,),
                                     required=(CONFIG_NAME,))
            try:
                spec = json.loads((root / CONFIG_NAME).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise IndexPersistError(f"{root / CONFIG_NAME} is damaged ({exc})") from exc
            lexical = KiwiBM25Retriever.from_persist_dir(str(root / BM25_DIR),
                                                         tokenizer=tokenizer)
            spans = None
            if f"{SPANS_DIR}/{RECORDS_NAME}" in manifest["files"]:  # listed: read, never guessed
                spans = SpanIndex.load(root / SPANS_DIR)
                if set(spans.node_ids) != {n.node_id for n in lexical.nodes}:
                    raise IndexPersistError(
                        f"{root / SPANS_DIR / RECORDS_NAME}: its node ids are not the BM25 "
                        "index's; persist the retriever again"
                    )
            return spec, lexical, spans

        return load_live(persist_dir, load)

    @staticmethod
    def _store_filters(spec: Mapping[str, Any]) -> MetadataFilters | None:
        return filters_from_json(spec.get("filters"), "retriever.json")


def _embed(index: Any, nodes: Sequence[BaseNode]) -> dict[str, list[float]]:
    """Embeddings of ``nodes`` (their own ``embedding`` if set, else the index's model)."""
    out = {n.node_id: list(n.embedding) for n in nodes if n.embedding is not None}
    todo = [n for n in nodes if n.node_id not in out]
    if todo:
        model = index._embed_model
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]
        for node, vec in zip(todo, model.get_text_embedding_batch(texts), strict=True):
            out[node.node_id] = list(vec)
    return out


def _next(
    state: Channels,
    *,
    delete: Sequence[str] = (),
    insert: Sequence[BaseNode] = (),
    spans: Any = None,
) -> Channels:
    """The snapshot after removing ``delete`` and adding ``insert`` (inputs untouched), with
    the span index ``spans`` (the state's own if ``None``)."""
    dense, lexical, *rest = state.retrievers
    lexical = copy.copy(lexical)
    if delete:
        lexical.delete_nodes(list(delete))
    if insert:
        lexical.insert_nodes([n.model_copy(update={"embedding": None}) for n in insert])
    nodes = lexical.nodes
    return replace(
        state,
        retrievers=(dense.with_ids(frozenset(n.node_id for n in nodes)), lexical, *rest),
        spans=state.spans if spans is None else spans,
        readers=[0],
    )
