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
* ``filters`` (LlamaIndex ``MetadataFilters``; every operator, AND/OR/NOT, nested groups,
  with the one meaning of :func:`llama_index_car._filters.matches` that every
  channel shares) restrict the returned nodes; the BM25 statistics stay those of the whole
  corpus (as LlamaIndex's ``BM25Retriever`` does);
* a view: the nodes, arrays and tokenizer belong to a
  :class:`~llama_index_car.indices.CriterionAwareIndex` (``from_defaults(nodes=...)`` builds a
  private, BM25-only one); every query reads the snapshot current at its start. Update and
  persist through ``retriever.index`` (``insert_nodes`` / ``delete_nodes`` re-tokenize only
  new texts and score exactly like a fresh build on the same nodes in the same order;
  ``persist`` / ``CriterionAwareIndex.load``);
* a token cache (text hash + tokenizer spec -> tokens) lets re-indexing skip Kiwi.

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
import copy
import warnings
from collections import Counter
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError
from llama_index_car.bm25 import BM25Okapi
from llama_index_car.indices._lexical import Lexical, Tokens
from llama_index_car.indices._store_bm25 import StoreBM25
from llama_index_car.query_guard import guarded_retrieve
from llama_index_car.retrievers._channels import check_view_filters
from llama_index_car.tokenizers.kiwi import KiwiTokenizer

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.indices._snapshot import IndexSnapshot
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex


class KiwiBM25Retriever(BaseRetriever):
    """BM25Okapi retriever over Kiwi morphemes: a view of a ``CriterionAwareIndex`` (see the
    module docstring).

    Args:
        nodes: nodes to index in a private, BM25-only index (unique node ids); pass
            ``index=`` instead to view an existing one.
        tokenizer: a :class:`KiwiTokenizer`; default ``KiwiTokenizer()``.
        similarity_top_k: results per query (default 10; clamped to the corpus size).
        k1, b, epsilon: BM25Okapi parameters (defaults 1.5, 0.75, 0.25, as rank_bm25).
        filters: ``MetadataFilters`` applied to every query.
        show_progress: tqdm bar while tokenizing.
        token_cache: ``True`` (default) = a new in-memory cache, ``False``/``None`` = none,
            or a dict to share, e.g. ``old_retriever.token_cache``, so unchanged texts are not
            analysed again.
        index: the :class:`~llama_index_car.indices.CriterionAwareIndex` to view (then
            ``nodes``, ``tokenizer``, BM25 parameters and ``token_cache`` are the index's).
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
        *,
        index: CriterionAwareIndex | None = None,
        warn_small: bool = True,
    ) -> None:
        from llama_index_car.indices.criterion_aware import CriterionAwareIndex

        if not isinstance(similarity_top_k, int) or similarity_top_k < 1:
            raise ConfigurationError(
                f"similarity_top_k must be an int >= 1, got {similarity_top_k!r}"
            )
        self.filters = check_view_filters(filters)
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        if index is None:
            index = CriterionAwareIndex(nodes, tokenizer=tokenizer, k1=k1, b=b, epsilon=epsilon,
                                        token_cache=token_cache, show_progress=show_progress)
        elif list(nodes) or tokenizer is not None:
            raise ConfigurationError(
                "pass nodes=/tokenizer= to build a private index, or index= to view one "
                "(its nodes and tokenizer), not both"
            )
        self.index = index
        self.similarity_top_k = similarity_top_k
        self.snapshot: IndexSnapshot | None = None
        self._mask: tuple[Lexical, np.ndarray | None] | None = None
        if warn_small:
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
        """Build from exactly one of ``nodes``, ``docstore`` or ``index`` (a
        ``VectorStoreIndex``: its docstore's nodes; a ``CriterionAwareIndex``: a view of it).

        Raises:
            EmptyIndexError: ``index``/``docstore`` holds no nodes (a store-backed index):
                a BM25 channel over nothing would make a "hybrid" silently dense-only.
        """
        from llama_index_car.indices.criterion_aware import CriterionAwareIndex

        given = [x is not None for x in (nodes, docstore, index)]
        if sum(given) != 1:
            raise ConfigurationError(
                "pass exactly one of nodes=, docstore= or index= to KiwiBM25Retriever.from_defaults"
            )
        if isinstance(index, CriterionAwareIndex):
            return cls(index=index, similarity_top_k=similarity_top_k, filters=filters,
                       callback_manager=callback_manager)
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
                    "CriterionAwareIndex"
                )
        return cls(
            nodes=list(nodes or ()), tokenizer=tokenizer, similarity_top_k=similarity_top_k,
            k1=k1, b=b, epsilon=epsilon, filters=filters, show_progress=show_progress,
            token_cache=token_cache, callback_manager=callback_manager,
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
        """A view of a private index over a prebuilt BM25 whose document ``i`` is
        ``nodes[i]`` (no tokenization), e.g. the merged shards of
        :func:`llama_index_car.folder.ray.merge_bm25_shards`; the tokens must be
        ``tokenizer``'s of each node's EMBED text.

        Raises:
            ConfigurationError: ``len(nodes) != bm25.corpus_size`` or duplicate node ids.
        """
        from llama_index_car.indices.criterion_aware import CriterionAwareIndex

        lexical = Lexical.over(bm25, nodes)
        tokens = Tokens(tokenizer if tokenizer is not None else KiwiTokenizer())
        index = CriterionAwareIndex.from_parts(lexical, tokens)
        return cls(index=index, similarity_top_k=similarity_top_k, filters=filters,
                   callback_manager=callback_manager)

    def at(self, snapshot: IndexSnapshot) -> KiwiBM25Retriever:
        """A copy reading ``snapshot`` (a fused retriever binds its channels to one)."""
        clone = copy.copy(self)
        clone.snapshot = snapshot
        return clone

    def _warn_if_small(self) -> None:
        n = len(self.index)
        if self.similarity_top_k > n:
            warnings.warn(
                f"similarity_top_k={self.similarity_top_k} exceeds the {n} indexed nodes; "
                f"at most {n} results will be returned",
                UserWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ accessors
    def _lexical(self) -> Lexical:
        return (self.snapshot or self.index.snapshot).lexical

    @property
    def tokenizer(self) -> KiwiTokenizer:
        """The tokenizer used for documents and queries."""
        return self.index.tokenizer

    @property
    def bm25(self) -> BM25Okapi | StoreBM25:
        """The BM25 arrays (document ``i`` is ``self.nodes[i]``) of the snapshot read, or
        its rows in a Milvus or Qdrant store (an index built with ``--store milvus|qdrant``)."""
        return self._lexical().bm25

    @property
    def nodes(self) -> list[BaseNode]:
        """The indexed nodes, in index order (a new list)."""
        return list(self._lexical().nodes)

    @property
    def token_cache(self) -> MutableMapping[str, list[str]] | None:
        """The token cache (pass it to a new retriever to skip Kiwi for unchanged texts)."""
        return self.index.tokens.cache

    def __len__(self) -> int:
        return len(self._lexical().nodes)

    def token_counts(self, node_id: str) -> Counter[str]:
        """The indexed token counts of one node (for inspection)."""
        return self._lexical().token_counts(node_id)

    # ------------------------------------------------------------------ retrieval
    def _filter_mask(self, lexical: Lexical) -> np.ndarray | None:
        cached = self._mask
        if cached is not None and cached[0] is lexical:
            return cached[1]
        mask = lexical.mask(self.filters)  # once per state (a racing duplicate is harmless)
        self._mask = (lexical, mask)
        return mask

    @guarded_retrieve
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        tokens = self.tokenizer.tokenize(query_bundle.query_str)
        if self.snapshot is not None:
            lexical = self.snapshot.lexical
            return lexical.search(tokens, self.similarity_top_k, self._filter_mask(lexical))
        with self.index.pinned() as snap:  # one consistent (BM25, nodes) pair for the query
            lexical = snap.lexical
            return lexical.search(tokens, self.similarity_top_k, self._filter_mask(lexical))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Runs :meth:`_retrieve` in a worker thread, so the event loop is not blocked."""
        return await asyncio.to_thread(self._retrieve, query_bundle)
