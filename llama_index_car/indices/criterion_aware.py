"""``CriterionAwareIndex``: the one owner of the state every retriever of this package reads.

It holds the nodes, their Kiwi BM25 arrays, the binding to any LlamaIndex
``VectorStoreIndex`` (the dense channel; ``None`` for a BM25-only index), the span index and
the tokenizer / embedding behind **one immutable snapshot** (:class:`IndexSnapshot`) that
**one writer** replaces. Retrievers are views (:meth:`CriterionAwareIndex.as_retriever`):
each query takes the current snapshot at its start (:meth:`~CriterionAwareIndex.pinned`)
and reads only it, so a query never sees half an update.

Updates (:meth:`~CriterionAwareIndex.insert_nodes`, :meth:`~CriterionAwareIndex.delete_nodes`,
:meth:`~CriterionAwareIndex.delete_ref_doc`, :meth:`~CriterionAwareIndex.update`) are
serialised by the writer lock:

* new nodes are embedded (and their spans cut and embedded) first, then written to the store;
  the dense channel returns only ids of its snapshot, so older snapshots do not see them; the
  new snapshot is published in one assignment;
* deleted nodes leave the snapshot first; their store deletion waits until no query pinned
  to an older snapshot is running (at most ``drain_timeout`` seconds, default 60);
* a node id inserted again (same id, new content) is absent between the two steps, never half
  old and half new.

Run updates outside the event loop (``asyncio.to_thread``) if async queries are in flight.
:meth:`~CriterionAwareIndex.persist` / :meth:`~CriterionAwareIndex.load` write and read one
crash-safe generation of flat files bound by one manifest (:mod:`llama_index_car.indices._storage`).

>>> from llama_index.core.schema import TextNode
>>> texts = ["배수시설 설치기준", "조경 식재", "포장 두께"]
>>> index = CriterionAwareIndex([TextNode(text=t, id_=str(i)) for i, t in enumerate(texts)])
>>> bm25 = index.as_retriever("bm25", similarity_top_k=1)   # BM25 only: no vector store
>>> [h.node.node_id for h in bm25.retrieve("배수시설")]
['0']
>>> index.delete_nodes(["0"])
>>> [n.node_id for n in index.nodes], bm25.retrieve("배수시설")
(['1', '2'], [])
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.schema import BaseNode

from llama_index_car._errors import ConfigurationError, EmptyIndexError
from llama_index_car.indices._lexical import Lexical, Tokens
from llama_index_car.indices._snapshot import IndexSnapshot
from llama_index_car.indices._store_bm25 import StoreBM25

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever

    from llama_index_car.flat_store import FlatState
    from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor
    from llama_index_car.span_index import SpanIndex
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer


logger = logging.getLogger(__name__)

class CriterionAwareIndex:
    """Nodes + Kiwi BM25 + a vector store binding + spans behind one snapshot (module doc).

    Args:
        nodes: the nodes (unique ids). With ``vector_index`` they must already be in it
            (:meth:`from_defaults` builds one over them).
        vector_index: any ``VectorStoreIndex`` holding the nodes' vectors (``None``: BM25 only).
        embed_model: the embedding of ``vector_index`` (default: the one it was built with).
        tokenizer: the :class:`~llama_index_car.tokenizers.kiwi.KiwiTokenizer` (default one).
        spans: a :class:`~llama_index_car.span_index.SpanIndex` over the same nodes, or None.
        k1, b, epsilon: BM25Okapi parameters (1.5, 0.75, 0.25, as rank_bm25).
        token_cache: ``True`` a new cache, ``False``/``None`` none, or a dict to share.
        show_progress: a tqdm bar while tokenizing.
    """

    #: seconds an update waits for queries pinned to older snapshots before deleting
    drain_timeout: float = 60.0

    def __init__(
        self,
        nodes: Sequence[BaseNode] = (),
        *,
        vector_index: Any | None = None,
        embed_model: Any | None = None,
        tokenizer: KiwiTokenizer | None = None,
        spans: SpanIndex | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        token_cache: bool | MutableMapping[str, list[str]] | None = True,
        show_progress: bool = False,
    ) -> None:
        from llama_index_car.tokenizers.kiwi import KiwiTokenizer

        tokens = Tokens(tokenizer if tokenizer is not None else KiwiTokenizer(), token_cache,
                        show_progress)
        lexical = Lexical.build(nodes, tokens, k1=k1, b=b, epsilon=epsilon)
        self._setup(lexical, tokens, vector_index, embed_model, spans)

    def _setup(
        self, lexical: Lexical, tokens: Tokens, vector_index: Any, embed_model: Any,
        spans: SpanIndex | None, dense: FlatState | None = None,
    ) -> None:
        if spans is not None and (len(spans) != len(lexical.positions) or (
                isinstance(lexical.positions, dict)  # a loaded table: its loader checked them
                and not all(i in lexical.positions for i in spans.node_ids))):
            raise ConfigurationError("spans must cover exactly the index's nodes")
        from llama_index_car.indices._dense import flat_store_of, local_state

        if dense is None and vector_index is not None:
            dense = local_state(vector_index, lexical.nodes)  # in memory: the index keeps it
        if dense is not None and dense.count > len(lexical.positions):
            raise ConfigurationError("the vectors must be of the index's nodes")
        #: the index's own FlatVectorStore (kept equal to the current snapshot's vectors)
        self._flat = flat_store_of(vector_index)
        self._tokens = tokens
        self._vector_index = vector_index
        self._embed_model = embed_model if embed_model is not None else getattr(
            vector_index, "_embed_model", None)
        self._cond = threading.Condition()
        self._writer = threading.Lock()
        self._snap = IndexSnapshot.of(lexical, spans, dense)
        self._older: list[IndexSnapshot] = []
        #: the folder this index was loaded from, and the extra documents of its generation
        #: (``{name: JSON}``; a folder's index: its ``car_index.json`` record)
        self.persist_dir: Path | None = None
        self.metadata: dict[str, Any] = {}

    @classmethod
    def from_parts(
        cls, lexical: Lexical, tokens: Tokens, *, vector_index: Any | None = None,
        embed_model: Any | None = None, spans: SpanIndex | None = None,
        dense: FlatState | None = None,
    ) -> CriterionAwareIndex:
        """An index over a built BM25 state (a load, merged Ray shards): nothing tokenized.
        ``dense``: the in-memory vectors aligned with its nodes (default: read from an
        in-memory ``vector_index``)."""
        self = cls.__new__(cls)
        self._setup(lexical, tokens, vector_index, embed_model, spans, dense)
        return self

    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[BaseNode] | None = None,
        *,
        vector_index: Any | None = None,
        embed_model: Any | None = None,
        spans: bool | SpanIndex = False,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> CriterionAwareIndex:
        """The index over ``nodes`` in one line: a ``VectorStoreIndex`` is built over them
        with ``embed_model`` (default :func:`~llama_index_car.providers.resolve_embed_model`)
        unless ``vector_index`` is given (then ``nodes`` default to its docstore's);
        ``spans=True`` builds the span index (embeds every span once). ``kwargs`` go to the
        constructor (``tokenizer``, ``token_cache``, BM25 parameters).

        Raises:
            EmptyIndexError: no nodes (a store-backed index keeps them in the store: pass
                ``nodes=`` along with ``vector_index=``).
        """
        node_list, vector_index, embed_model = _bind_vectors(
            nodes, vector_index, embed_model, show_progress)
        span_index = spans if not isinstance(spans, bool) else None
        if spans is True:
            from llama_index_car.span_index import SpanIndex

            span_index = SpanIndex.from_nodes(node_list, embed_model, show_progress=show_progress)
        return cls(node_list, vector_index=vector_index, embed_model=embed_model,
                   spans=span_index, show_progress=show_progress, **kwargs)

    # ------------------------------------------------------------------ state
    @property
    def snapshot(self) -> IndexSnapshot:
        """The current snapshot (queries should use :meth:`pinned`)."""
        return self._snap

    @contextlib.contextmanager
    def pinned(self) -> Iterator[IndexSnapshot]:
        """The current snapshot, pinned for the block: store deletions of the nodes it holds
        wait until the block ends (up to ``drain_timeout``)."""
        with self._cond:
            snap = self._snap
            snap.readers[0] += 1
        try:
            yield snap
        finally:
            with self._cond:
                snap.readers[0] -= 1
                self._cond.notify_all()

    @property
    def nodes(self) -> list[BaseNode]:
        """The indexed nodes, in index order (a new list)."""
        return self._snap.nodes

    @property
    def spans(self) -> SpanIndex | None:
        """The current span index (``None`` when built without one)."""
        return self._snap.spans

    @property
    def tokenizer(self) -> KiwiTokenizer:
        """The Kiwi tokenizer of documents and queries."""
        return self._tokens.tokenizer  # type: ignore[no-any-return]

    @property
    def tokens(self) -> Tokens:
        """The tokenization (tokenizer + token cache) of this index."""
        return self._tokens

    @property
    def vector_index(self) -> Any | None:
        """The bound ``VectorStoreIndex`` (``None``: BM25 only)."""
        return self._vector_index

    @property
    def embed_model(self) -> Any | None:
        """The embedding of the vector index (query vectors, new nodes, spans)."""
        return self._embed_model

    def __len__(self) -> int:
        return len(self._snap.ids)

    # ------------------------------------------------------------------ updates
    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Add ``nodes`` (a node whose id is indexed replaces it), as one update. The nodes
        are not modified (they are embedded into copies)."""
        self.update(insert=nodes)

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Remove nodes by id, as one update (unknown ids: :class:`ConfigurationError`)."""
        self.update(delete=node_ids)

    def delete_ref_doc(self, ref_doc_id: str) -> None:
        """Remove every node of the source document ``ref_doc_id`` (unknown: no change)."""
        ids = [n.node_id for n in self._snap.lexical.nodes if n.ref_doc_id == ref_doc_id]
        if ids:
            self.update(delete=ids)

    def update(
        self,
        delete: Sequence[str] = (),
        insert: Sequence[BaseNode] = (),
        *,
        spans: SpanIndex | None = None,
        defer_store_delete: bool = False,
    ) -> list[str]:
        """Delete ``delete`` and insert ``insert`` as one update (module docstring).

        ``spans``: the span index of ``insert`` when computed elsewhere (e.g. through an
        embedding cache); default: cut and embedded here when the index has spans.
        ``defer_store_delete``: leave the store deletion of ``delete`` to the caller
        (:meth:`purge_store`, e.g. after the caller has committed a folder generation that
        no longer lists them). Returns the ids whose store deletion is deferred.

        Raises:
            ConfigurationError: an id to delete is not indexed, or ``insert`` repeats an id.
        """
        with self._writer:
            return self._update(list(delete), list(insert), spans, defer_store_delete)

    def purge_store(self, node_ids: Sequence[str]) -> None:
        """Delete ``node_ids`` (not in the current snapshot) from the vector store once no
        query pinned to an older snapshot runs."""
        ids = sorted(set(node_ids))
        live = [i for i in ids if i in self._snap.ids]
        if live:
            raise ConfigurationError(f"{live[:5]} are indexed; use delete_nodes")
        if ids and self._vector_index is not None and self._flat is None:
            with self._writer:
                self._drain()
                self._vector_index.delete_nodes(ids, delete_from_docstore=True)
                rows = self._snap.lexical.bm25
                if isinstance(rows, StoreBM25):
                    rows.delete(ids)

    def reweight_store(self, at: float | None = None) -> StoreBM25 | None:
        """When the BM25 rows kept in a Milvus or Qdrant store have drifted past ``at``
        (the drift bound ``hi = max ρ``; default :data:`~llama_index_car.bm25_sparse.REWEIGHT_AT`), write
        every row of the current snapshot at today's mean length into a new collection and
        publish the snapshot over it (:meth:`StoreBM25.reweighted`: the rows older snapshots
        read are not touched). Returns the previous state, whose collection the caller drops
        (:meth:`drop_bm25_collections`) once the new one is committed; ``None``: nothing
        written (not drifted, or BM25 not in a store)."""
        from llama_index_car.bm25_sparse import REWEIGHT_AT, needs_reweight

        with self._writer:
            old = self._snap
            rows = old.lexical.bm25
            store = getattr(self._vector_index, "vector_store", None)
            if not isinstance(rows, StoreBM25) or store is None or not needs_reweight(
                    rows.stats, REWEIGHT_AT if at is None else at):
                return None
            from llama_index_car.sparse_stores import new_collection_name, sparse_backend

            backend = sparse_backend(store, create=True, collection=new_collection_name(),
                                     max_limit=rows.backend.max_limit)
            if backend is None:  # pragma: no cover - a StoreBM25 is only made over these
                return None
            lexical = old.lexical.reweighted(backend)
            self._publish(IndexSnapshot(lexical, old.spans, lexical.positions, old.dense))
            return rows

    def drop_bm25_collections(self) -> list[str]:
        """Drop every BM25 collection of the vector store but the current snapshot's (the
        writer's cleanup: a previous state's after its successor is committed, a crashed
        update's new one), once no query pinned to an older snapshot runs. Returns their
        names."""
        rows = self._snap.lexical.bm25
        store = getattr(self._vector_index, "vector_store", None)
        if not isinstance(rows, StoreBM25) or store is None:
            return []
        from llama_index_car.sparse_stores import bm25_collections, drop_bm25_collection

        with self._writer:
            live = self._snap.lexical.bm25
            keep = live.backend.collection if isinstance(live, StoreBM25) else None
            stray = [c for c in bm25_collections(store) if c != keep]
            if stray:
                self._drain()
            for name in stray:
                drop_bm25_collection(store, name)
        return stray

    def _update(
        self, delete_ids: list[str], nodes: list[BaseNode], spans: SpanIndex | None,
        defer: bool,
    ) -> list[str]:
        from llama_index_car.indices._writer import plan_update

        old = self._snap
        plan = plan_update(self, old, delete_ids, nodes, spans)
        # an outside store is written; the index's own flat store follows its snapshots
        store = self._vector_index if self._flat is None else None
        # BM25 kept in the vectors' store: its rows are written and deleted with the vectors
        mid_rows, final_rows = plan.mid.lexical.bm25, plan.final.lexical.bm25
        if store is not None and plan.fresh:
            store.insert_nodes(plan.embedded(plan.fresh))
        if isinstance(mid_rows, StoreBM25):
            mid_rows.write_pending()
        if not plan.removed:
            self._publish(plan.final)
            return []
        self._publish(plan.mid)
        deferred = [i for i in delete_ids if i not in plan.again_ids] if defer else []
        now = sorted(set(plan.removed) - set(deferred))
        if store is not None and now:
            self._drain()
            store.delete_nodes(now, delete_from_docstore=True)
            if isinstance(mid_rows, StoreBM25):
                mid_rows.delete(now)
        if plan.again:
            if store is not None:
                store.insert_nodes(plan.embedded(plan.again))
            if isinstance(final_rows, StoreBM25) and final_rows is not mid_rows:
                final_rows.write_pending()
            self._publish(plan.final)
        return deferred

    def _publish(self, snap: IndexSnapshot) -> None:
        with self._cond:
            # a replaced snapshot gains no readers: keep only those still read (for _drain)
            self._older = [s for s in (*self._older, self._snap)
                           if s.readers[0] and s is not snap]
            self._snap = snap
            if self._flat is not None and snap.dense is not None:
                self._flat.publish(snap.dense)

    def _drain(self) -> None:
        """Wait until no query is pinned to an older snapshot (``drain_timeout``)."""
        with self._cond:
            busy = lambda: sum(s.readers[0] for s in self._older)  # noqa: E731
            if not self._cond.wait_for(lambda: busy() == 0, timeout=self.drain_timeout):
                logger.warning(
                    "%d queries still use a previous snapshot after %g s; deleting anyway",
                    busy(), self.drain_timeout,
                )
            self._older = [s for s in self._older if s.readers[0]]

    # ------------------------------------------------------------------ views
    def as_retriever(self, kind: str = "car", **kwargs: Any) -> BaseRetriever:
        """A retriever of ``kind`` over this index (``car``, ``hybrid``, ``bm25``, ``dense``);
        see :func:`llama_index_car.retrievers.views.view` for the options. The index makes
        its views and the views know their index: the module is imported here, at call
        time, as LlamaIndex's ``VectorStoreIndex.as_retriever`` imports its retriever."""
        from llama_index_car.retrievers.views import view

        return view(self, kind, **kwargs)

    def span_postprocessor(self, top_n: int = 3) -> CriterionSpanPostprocessor | None:
        """A :class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor`
        over the current span index, the embedding and the tokenizer (``None``: no spans)."""
        if self.spans is None:
            return None
        from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor

        return CriterionSpanPostprocessor(self.spans, self.embed_model,
                                          tokenizer=self.tokenizer, top_n=top_n)

    def as_citation_engine(self, llm: Any, kind: str = "car", **kwargs: Any) -> Any:
        """A :class:`~llama_index_car.query_engines.SpanCitationQueryEngine` over the ``kind``
        retriever (:func:`llama_index_car.retrievers.views.citation_engine`)."""
        from llama_index_car.retrievers.views import citation_engine

        return citation_engine(self, llm, kind, **kwargs)

    # ------------------------------------------------------------------ persistence
    def persist(
        self, persist_dir: str | os.PathLike[str], *, documents: dict[str, Any] | None = None
    ) -> None:
        """Write the current snapshot as one crash-safe generation of flat files bound by one
        manifest (:func:`llama_index_car.indices._storage.write`); ``documents``: extra JSON
        files written into it (``{name: value}``, e.g. a folder's ``car_index.json``)."""
        from llama_index_car.indices._storage import write

        write(self, Path(persist_dir), documents or {})

    @classmethod
    def load(cls, persist_dir: str | os.PathLike[str], **kwargs: Any) -> CriterionAwareIndex:
        """Read what :meth:`persist` wrote (:func:`llama_index_car.indices._storage.read`;
        options ``vector_index``, ``embed_model``, ``tokenizer``, ``token_cache``, ``verify``).

        The query embedding is the one ``index.json`` records
        (:func:`~llama_index_car.providers.query_embedding`): ``embed_model`` (or the given
        ``vector_index``'s) checked against it, else the recorded provider's —
        ``$LLAMA_CAR_EMBED_MODEL`` does not apply; an index built with a custom embedding
        needs it passed again.

        Raises:
            IndexPersistError: a file is missing, corrupt or malformed (named).
            ConfigurationError: the embedding is not the recorded one, or a store-kept index
                without ``vector_index``.
        """
        from llama_index_car.indices._storage import read

        return read(cls, Path(persist_dir), **kwargs)


def _bind_vectors(
    nodes: Sequence[BaseNode] | None, vector_index: Any, embed_model: Any, show_progress: bool
) -> tuple[list[BaseNode], Any, Any]:
    """``(nodes, vector_index, embed_model)`` of :meth:`CriterionAwareIndex.from_defaults`: a
    ``VectorStoreIndex`` built over ``nodes``, or ``vector_index`` with its docstore's nodes."""
    if vector_index is None:
        if embed_model is None:
            from llama_index_car.providers import resolve_embed_model

            embed_model = resolve_embed_model()  # $LLAMA_CAR_EMBED_MODEL, else offline e5
        node_list = list(nodes or [])
        if not node_list:
            raise ConfigurationError("nodes is empty; pass the nodes to index")
        from llama_index_car.indices._dense import flat_index
        from llama_index_car.indices._writer import embed_with

        vectors = embed_with(embed_model, node_list, show_progress)
        return node_list, flat_index(vectors, node_list, embed_model), embed_model
    if embed_model is None:
        embed_model = getattr(vector_index, "_embed_model", None)
    if nodes is None:
        docstore = getattr(vector_index, "docstore", None)
        nodes = list(getattr(docstore, "docs", {}).values()) if docstore else []
    node_list = list(nodes)
    if not node_list:
        raise EmptyIndexError(
            "the index's docstore holds no nodes (a store-backed index keeps them in "
            "the store); pass nodes=[...] along with the index"
        )
    return node_list, vector_index, embed_model
