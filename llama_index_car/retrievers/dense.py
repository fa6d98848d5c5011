"""The dense channel of an index: :class:`IndexDense`, what ``index.as_retriever("dense")``
builds and what the fused retrievers search with.
"""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING

from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers._channels import check_view_filters

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.indices._snapshot import IndexSnapshot
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

__all__ = ["IndexDense"]


class IndexDense(VectorIndexRetriever):
    """The dense channel: a ``VectorIndexRetriever`` over the index's vector store with
    ``filters`` applied by the store, its hits restricted to the ids of the snapshot it reads
    (the one it is bound to, else the one pinned at query start). An index that keeps its
    vectors itself (the default ``FlatVectorStore``) is searched in that snapshot's own
    vector state (:mod:`~llama_index_car.indices._dense`: exact cosine; filters evaluated as
    the BM25 channel does), which an update replaces and never changes.

    Every query goes through the package's query guard
    (:func:`~llama_index_car.query_guard.guarded_retrieve`) before anything is embedded.
    Async queries run the synchronous store call in a worker thread (store async clients
    differ in what they support).
    """

    def __init__(
        self,
        index: CriterionAwareIndex,
        similarity_top_k: int,
        filters: MetadataFilters | None = None,
    ) -> None:
        if index.vector_index is None:
            raise ConfigurationError(
                "this CriterionAwareIndex has no vector index (BM25 only): build it with "
                "CriterionAwareIndex.from_defaults(nodes=..., embed_model=...) for dense views"
            )
        # a store-kept index: the store applies the filters, with the meaning they have on
        # the other channels or not at all
        store = index.vector_index.vector_store if index.snapshot.dense is None else None
        super().__init__(index.vector_index, similarity_top_k=similarity_top_k,
                         filters=check_view_filters(filters, store),
                         embed_model=index.embed_model)
        self.index = index
        self.snapshot: IndexSnapshot | None = None

    @property
    def filters(self) -> MetadataFilters | None:
        """The ``MetadataFilters`` the store applies."""
        return self._filters

    def at(self, snapshot: IndexSnapshot) -> IndexDense:
        """A copy reading ``snapshot``."""
        clone = copy.copy(self)
        clone.snapshot = snapshot
        return clone

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.snapshot is not None:
            return self._search(query_bundle, self.snapshot)
        with self.index.pinned() as snap:
            return self._search(query_bundle, snap)

    def _search(self, query_bundle: QueryBundle, snap: IndexSnapshot) -> list[NodeWithScore]:
        if snap.dense is not None:
            return self._search_memory(query_bundle, snap)
        return [h for h in super()._retrieve(query_bundle) if h.node.node_id in snap.ids]

    def _search_memory(
        self, query_bundle: QueryBundle, snap: IndexSnapshot
    ) -> list[NodeWithScore]:
        """Exact cosine top-k over the snapshot's vectors (``SimpleVectorStore``'s cosine)."""
        dense = snap.dense
        if dense is None:  # pragma: no cover - _search checked it
            return []
        embedding = query_bundle.embedding
        if embedding is None:
            embedding = self._embed_model.get_agg_embedding_from_queries(
                query_bundle.embedding_strs)
        lexical = snap.lexical
        hits = dense.search(embedding, self._similarity_top_k, self._filters)
        return [NodeWithScore(node=lexical.node(i), score=score) for i, score in hits]

    @guarded_retrieve
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)
