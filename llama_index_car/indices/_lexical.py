"""The Kiwi BM25 part of an index: one immutable state and the tokenization that feeds it.

:class:`Lexical` is what a query reads — the :class:`~llama_index_car.bm25.BM25Okapi` arrays
and their nodes, of the same version (document ``i`` is ``nodes[i]``). It is never changed:
:meth:`Lexical.plus` and :meth:`Lexical.without` return new states over new arrays, so a
query holding the old one keeps a consistent view. :class:`Tokens` turns node texts
(``MetadataMode.EMBED``) into Kiwi tokens through a cache keyed by the tokenizer spec and the
text's sha256, so re-indexing unchanged texts skips Kiwi.

>>> from llama_index.core.schema import TextNode
>>> from llama_index_car.bm25 import BM25Okapi
>>> nodes = [TextNode(text="a b", id_="x"), TextNode(text="b", id_="y")]
>>> lex = Lexical.of(BM25Okapi([["a", "b"], ["b"]]), nodes, ["h1", "h2"])
>>> [n.node_id for n in lex.without(["x"]).nodes], [n.node_id for n in lex.nodes]
(['y'], ['x', 'y'])
>>> dict(lex.token_counts("x"))
{'a': 1, 'b': 1}
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._filters import matches
from llama_index_car.bm25 import BM25Okapi, top_k_from_scores
from llama_index_car.indices._node_records import NodeTable
from llama_index_car.indices._store_bm25 import StoreBM25

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.bm25_sparse import SparseBackend


def text_hash(text: str) -> str:
    """sha256 hex digest of ``text`` (UTF-8): the token cache key and the persisted hash."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_unique(nodes: Sequence[BaseNode], existing: Iterable[str] = ()) -> None:
    """Raise :class:`ConfigurationError` naming repeated node ids."""
    seen = set(existing)
    dup: list[str] = []
    for n in nodes:
        if n.node_id in seen:
            dup.append(n.node_id)
        seen.add(n.node_id)
    if dup:
        raise ConfigurationError(f"duplicate node ids: {dup[:5]}; node ids must be unique")


@dataclass(frozen=True, eq=False)
class Lexical:
    """BM25 arrays and their nodes, one version (see the module docstring)."""

    #: the arrays, or the rows in a Milvus or Qdrant store (``_store_bm25``)
    bm25: BM25Okapi | StoreBM25
    #: a tuple, or a loaded generation's :class:`~llama_index_car.indices._node_records.NodeTable`
    #: (nodes parsed when read)
    nodes: Sequence[BaseNode]
    hashes: Sequence[str]
    positions: Mapping[str, int] = field(repr=False)
    #: metadata masks of this state by filter (computed once: a loaded table reads every
    #: node's metadata for a new filter)
    _masks: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, bm25: BM25Okapi | StoreBM25, nodes: Sequence[BaseNode], hashes: Sequence[str]) -> Lexical:
        """The state whose document ``i`` is ``nodes[i]`` with text hash ``hashes[i]``."""
        if not len(nodes) == len(hashes) == bm25.corpus_size:
            raise ConfigurationError(
                f"{len(nodes)} nodes for a BM25 index of {bm25.corpus_size} documents"
            )
        check_unique(nodes)
        return cls(bm25, tuple(nodes), tuple(hashes), {n.node_id: i for i, n in enumerate(nodes)})

    @classmethod
    def stored(cls, bm25: BM25Okapi | StoreBM25, table: NodeTable) -> Lexical:
        """The state of a loaded generation: document ``i`` is ``table[i]``, read when used
        (ids looked up through the table's keys; nothing proportional to the nodes read)."""
        if len(table) != bm25.corpus_size:
            raise IndexPersistError(
                f"{table.path}: {len(table)} nodes for BM25 arrays of {bm25.corpus_size} "
                "documents; rebuild the index")
        return cls(bm25, table, table.hashes, table.positions)

    @classmethod
    def build(
        cls, nodes: Sequence[BaseNode], tokens: Tokens, *, k1: float = 1.5, b: float = 0.75,
        epsilon: float = 0.25,
    ) -> Lexical:
        """The state over ``nodes`` (unique ids) tokenized by ``tokens``: BM25Okapi with
        ``k1``, ``b``, ``epsilon`` (rank_bm25's defaults)."""
        nodes = list(nodes)
        check_unique(nodes)
        toks, hashes = tokens.of(nodes)
        return cls.of(BM25Okapi(toks, k1=k1, b=b, epsilon=epsilon), nodes, hashes)

    @classmethod
    def over(cls, bm25: BM25Okapi, nodes: Sequence[BaseNode]) -> Lexical:
        """The state over a prebuilt ``bm25`` whose document ``i`` is ``nodes[i]`` (e.g.
        merged Ray shards): nothing tokenized, the text hashes of the nodes' EMBED text."""
        nodes = list(nodes)
        hashes = [text_hash(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes]
        return cls.of(bm25, nodes, hashes)

    def into_store(self, backend: SparseBackend, over_fetch: int = 4) -> Lexical:
        """This state with its BM25 kept in ``backend`` (a Milvus or Qdrant collection, empty):
        the same documents, parameters and scores, every row written now (``over_fetch``:
        the first fetch of a search is ``over_fetch·k`` rows)."""
        bm25 = self.bm25
        if isinstance(bm25, StoreBM25):
            raise ConfigurationError("this BM25 is already kept in a store")
        docs = [(self.node_id(i), bm25.doc_term_counts(i)) for i in range(len(self.nodes))]
        rows = StoreBM25.of_counts(backend, docs, k1=bm25.k1, b=bm25.b, epsilon=bm25.epsilon)
        rows.write_pending()
        return Lexical(StoreBM25(backend, rows.stats, (), over_fetch), self.nodes, self.hashes, self.positions)

    def reweighted(self, backend: SparseBackend) -> Lexical:
        """This state with its store-kept rows rewritten at today's mean length into
        ``backend`` (a new, empty collection: :meth:`StoreBM25.reweighted`)."""
        bm25 = self.bm25
        if not isinstance(bm25, StoreBM25):
            raise ConfigurationError("this BM25 is not kept in a store")
        ids = [self.node_id(i) for i in range(len(self.nodes))]
        return Lexical(bm25.reweighted(backend, ids), self.nodes, self.hashes, self.positions,
                       self._masks)

    def without(self, node_ids: Iterable[str]) -> Lexical:
        """A new state without ``node_ids`` (unknown ids: :class:`ConfigurationError`)."""
        ids = list(node_ids)
        missing = [i for i in ids if i not in self.positions]
        if missing:
            raise ConfigurationError(f"cannot delete unknown node ids: {missing[:5]}")
        if not ids:
            return self
        drop = {self.positions[i] for i in ids}
        keep = [i for i in range(len(self.nodes)) if i not in drop]
        bm25 = self.bm25
        return Lexical.of(
            bm25.without(ids) if isinstance(bm25, StoreBM25)
            else bm25.remove_documents(sorted(drop)),
            [self.nodes[i] for i in keep],
            [self.hashes[i] for i in keep],
        )

    def plus(
        self, nodes: Sequence[BaseNode], tokens: Sequence[Sequence[str]], hashes: Sequence[str]
    ) -> Lexical:
        """A new state with ``nodes`` appended (their ids must be new)."""
        if not nodes:
            return self
        check_unique(nodes, self.positions)
        bm25 = self.bm25
        return Lexical.of(
            bm25.plus([(n.node_id, Counter(t)) for n, t in zip(nodes, tokens, strict=True)])
            if isinstance(bm25, StoreBM25) else bm25.add_documents(tokens), [*self.nodes, *nodes], [*self.hashes, *hashes]
        )

    def by_id(self) -> Mapping[str, BaseNode]:
        """``{node id: node}`` of this state, each node read when looked up (no copy)."""
        return _ById(self.nodes, self.positions)

    def node_id(self, i: int) -> str:
        """The id of node ``i`` (a loaded table's key: nothing parsed)."""
        nodes = self.nodes
        return nodes.node_id(i) if isinstance(nodes, NodeTable) else nodes[i].node_id

    def node(self, node_id: str) -> BaseNode:
        """The node ``node_id`` of this state; an id it does not hold (a vector file that
        names another node) is an :class:`IndexPersistError`."""
        pos = self.positions.get(node_id)
        if pos is None:
            raise IndexPersistError(
                f"the vectors name node {node_id[:80]!r}, which the index does not hold; "
                "rebuild the index")
        return self.nodes[pos]

    def token_counts(self, node_id: str) -> Counter[str]:
        """The indexed token counts of one node."""
        pos = self.positions.get(node_id)
        if pos is None:
            raise ConfigurationError(f"unknown node id {node_id!r}")
        bm25 = self.bm25
        if isinstance(bm25, StoreBM25):
            return Counter(bm25.doc_term_counts(node_id))
        return Counter(bm25.doc_term_counts(pos))

    def search(
        self, tokens: Sequence[str], k: int, mask: np.ndarray | None
    ) -> list[NodeWithScore]:
        """The ``k`` best nonzero scores (score desc, then index asc), within ``mask``."""
        nodes, bm25 = self.nodes, self.bm25
        if not tokens or not nodes:
            return []
        k = min(k, len(nodes))
        if isinstance(bm25, StoreBM25):  # exact, in the store: this state's nodes only
            pos = self.positions
            accept = (lambda d: d in pos) if mask is None else (  # noqa: E731
                lambda d: (i := pos.get(d)) is not None and bool(mask[i]))
            return [NodeWithScore(node=nodes[pos[d]], score=s)
                    for d, s in bm25.search(list(tokens), k, accept)]
        if mask is None:
            # fast path (compiled top-k when numba is installed): valid when all k are > 0
            idx, top = bm25.top_k(list(tokens), k)
            if idx.size == k and (top > 0).all():
                return [
                    NodeWithScore(node=nodes[i], score=s)
                    for i, s in zip(idx.tolist(), top.tolist(), strict=True)
                ]
        scores = bm25.get_scores(list(tokens))
        keep = scores != 0
        if mask is not None:
            keep &= mask
        cand = np.flatnonzero(keep)
        order, top = top_k_from_scores(scores[cand], k)
        return [
            NodeWithScore(node=nodes[int(cand[i])], score=float(s))
            for i, s in zip(order.tolist(), top.tolist(), strict=True)
        ]

    def mask(self, filters: MetadataFilters | None) -> np.ndarray | None:
        """Which nodes pass ``filters`` (``None``: no filter), by
        :func:`llama_index_car._filters.matches`: the one meaning of a filter on
        every channel."""
        if filters is None or not filters.filters:
            return None
        key = filters.model_dump_json()
        got = self._masks.get(key)
        if got is None:
            nodes = self.nodes
            metadata = (nodes.metadata(i) if isinstance(nodes, NodeTable) else dict(
                nodes[i].metadata) for i in range(len(nodes)))
            got = np.fromiter((matches(filters, m) for m in metadata), dtype=bool,
                              count=len(nodes))
            got.setflags(write=False)
            if len(self._masks) < 64:
                self._masks[key] = got
        return got


class _ById(Mapping[str, BaseNode]):
    def __init__(self, nodes: Sequence[BaseNode], positions: Mapping[str, int]) -> None:
        self._nodes, self._positions = nodes, positions

    def __getitem__(self, key: str) -> BaseNode:
        return self._nodes[self._positions[key]]

    def __contains__(self, key: object) -> bool:
        return key in self._positions

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions)


class Tokens:
    """Kiwi tokens of node texts through a cache (``spec prefix + text sha256`` → tokens).

    ``cache``: ``True`` = a new dict, ``False``/``None`` = none, or a mapping to share.
    """

    def __init__(
        self,
        tokenizer: Any,
        cache: bool | MutableMapping[str, list[str]] | None = True,
        show_progress: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.show_progress = show_progress
        self.cache: MutableMapping[str, list[str]] | None
        if cache is True:
            self.cache = {}
        elif cache is False or cache is None:
            self.cache = None
        else:
            self.cache = cache
        self.prefix = tokenizer.spec_hash[:16] + ":"

    def of(self, nodes: Sequence[BaseNode]) -> tuple[list[list[str]], list[str]]:
        """``(tokens, text hashes)`` of each node's EMBED text, from the cache when possible."""
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        hashes = [text_hash(t) for t in texts]
        out: list[list[str] | None] = [None] * len(texts)
        todo: list[int] = []
        cache = self.cache
        for i, h in enumerate(hashes):
            hit = cache.get(self.prefix + h) if cache is not None else None
            if hit is not None:
                out[i] = list(hit)
            else:
                todo.append(i)
        if todo:
            fresh = self.tokenizer.tokenize_batch(
                [texts[i] for i in todo], show_progress=self.show_progress
            )
            for i, toks in zip(todo, fresh, strict=True):
                out[i] = toks
                if cache is not None:
                    cache[self.prefix + hashes[i]] = list(toks)
        return [o if o is not None else [] for o in out], hashes

    def answering_from(self, lexical: Lexical) -> None:
        """Let the cache answer ``lexical``'s texts from its stored counts (a loaded index
        analysed by the same Kiwi: BM25 only needs token multisets)."""
        if self.cache is not None and isinstance(lexical.bm25, BM25Okapi):
            self.cache = _StoredTokens(self.cache, self.prefix, lexical.hashes, lexical.bm25)


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
