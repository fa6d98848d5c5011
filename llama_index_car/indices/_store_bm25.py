"""The Kiwi BM25 of an index whose vectors are in Milvus or Qdrant: kept in that store.

:class:`StoreBM25` takes the place of the :class:`~llama_index_car.bm25.BM25Okapi` arrays in a
:class:`~llama_index_car.indices._lexical.Lexical` state. The store holds one sparse row per
node (document-side weights, term counts, length, write-time mean length:
:mod:`llama_index_car.bm25_sparse`); the state holds the document-frequency table
(:class:`~llama_index_car.bm25_sparse.BM25Stats`, frozen: a state is never changed) from which
queries take their idf, and a search is exact (the drift bound and exact rescoring of
:func:`~llama_index_car.bm25_sparse.exact_search`). :meth:`StoreBM25.without` and
:meth:`StoreBM25.plus` return new states and write nothing: the rows a new state adds are its
``pending`` rows, written by the index's writer where it writes the vectors
(:meth:`write_pending`), and removed rows are deleted with the vectors (:meth:`delete`), so the
store follows the update protocol of the vector store. A query of a state accepts only the
rows of its own nodes (rows of a newer or a removed node only take a slot in the store's top).
A folder keeps the table as ``bm25_df.json`` (:data:`DF_NAME`) and no BM25 arrays; its
``index.json`` names the collection holding the rows.

Rows keep the mean length they were written at (a write version each); when the drift makes
queries over-fetch (:func:`~llama_index_car.bm25_sparse.needs_reweight`),
:meth:`StoreBM25.reweighted` writes every row of a state at today's mean length into another
(new, empty) collection and returns the state over it — one write version — leaving the rows
the previous state reads untouched, so a crash before the new state is committed leaves the
previous one exact (the folder's update drops whichever collection is not committed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index_car._errors import IndexPersistError
from llama_index_car.bm25_sparse import (
    BM25Stats,
    DocRow,
    SparseBackend,
    exact_search,
    make_row,
    reweighted,
)

#: the document-frequency table of a store-kept BM25 in a generation
DF_NAME = "bm25_df.json"
#: rows written per store call
_BATCH = 1000


@dataclass(frozen=True, eq=False)
class StoreBM25:
    """One version of a store-kept BM25 (module docstring)."""

    backend: SparseBackend
    stats: BM25Stats
    #: rows this state adds to the store (written by the index's writer)
    pending: tuple[DocRow, ...] = ()
    over_fetch: int = 4
    _idf: dict[int, float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_idf", self.stats.idf())

    @property
    def corpus_size(self) -> int:
        return self.stats.n_docs

    @property
    def k1(self) -> float:
        return self.stats.k1

    @property
    def b(self) -> float:
        return self.stats.b

    @property
    def epsilon(self) -> float:
        return self.stats.epsilon

    @classmethod
    def of_counts(
        cls, backend: SparseBackend, docs: Sequence[tuple[str, Mapping[str, int]]], *,
        k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25,
    ) -> StoreBM25:
        """The state of ``docs`` (``(node id, token counts)``), all rows pending."""
        return cls(backend, BM25Stats(k1, b, epsilon)).plus(docs)

    def plus(self, docs: Sequence[tuple[str, Mapping[str, int]]]) -> StoreBM25:
        """A new state with ``docs`` added: df, N and total length grow, their rows (pending)
        are weighted at the mean length after the insert (one new write version; the rows
        already written keep theirs, so a generation left by a crash stays exact)."""
        st = self.stats.frozen()
        for _, counts in docs:
            st.n_docs += 1
            st.total_len += sum(counts.values())
        avgdl = st.avgdl
        rows = []
        for doc_id, counts in docs:
            row = make_row(st, doc_id, counts, avgdl)
            for t in row.tf:
                st.df[t] = st.df.get(t, 0) + 1
            rows.append(row)
        if rows:
            st.versions[avgdl] = st.versions.get(avgdl, 0) + len(rows)
        return StoreBM25(self.backend, st, tuple(rows), self.over_fetch)

    def without(self, doc_ids: Sequence[str]) -> StoreBM25:
        """A new state without ``doc_ids``: their term counts (read back from the store)
        leave df, N and the total length; the rows stay until :meth:`delete`."""
        if not doc_ids:
            return self
        rows = self.rows(doc_ids)
        st = self.stats.frozen()
        for row in rows.values():
            st.n_docs -= 1
            st.total_len -= row.doc_len
            left = st.versions.get(row.avgdl, 0) - 1
            if left > 0:
                st.versions[row.avgdl] = left
            else:
                st.versions.pop(row.avgdl, None)
            for t in row.tf:
                d = st.df.get(t, 0) - 1
                if d > 0:
                    st.df[t] = d
                else:
                    st.df.pop(t, None)
        if st.n_docs < 0 or st.total_len < 0:
            raise IndexPersistError(f"{self._where()}: its rows disagree with the df table; "
                                    "rebuild the index")
        return StoreBM25(self.backend, st, (), self.over_fetch)

    def rows(self, doc_ids: Sequence[str]) -> dict[str, DocRow]:
        """The store's rows of ``doc_ids`` (every one must be there)."""
        got: dict[str, DocRow] = {}
        ids = list(doc_ids)
        for i in range(0, len(ids), _BATCH):
            got.update(self.backend.fetch(ids[i : i + _BATCH]))
        missing = [d for d in ids if d not in got]
        if missing:
            raise IndexPersistError(
                f"{self._where()} holds no BM25 row of {missing[:3]}; rebuild the index")
        return got

    def _where(self) -> str:
        return str(getattr(self.backend, "where", type(self.backend).__name__))

    def reweighted(self, backend: SparseBackend, doc_ids: Sequence[str]) -> StoreBM25:
        """This state with its rows (those of ``doc_ids``, its nodes) written at today's mean
        length into ``backend`` (another collection, empty): one write version. Nothing this
        state reads is written."""
        ids = list(doc_ids)
        st = self.stats.frozen()
        if len(ids) != st.n_docs:
            raise IndexPersistError(f"{self._where()}: {len(ids)} nodes for {st.n_docs} "
                                    "documents in the df table; rebuild the index")
        for i in range(0, len(ids), _BATCH):
            rows = self.rows(ids[i : i + _BATCH])
            backend.upsert([reweighted(rows[d], st.avgdl, st.k1, st.b) for d in ids[i : i + _BATCH]])
        st.versions = {st.avgdl: st.n_docs} if st.n_docs else {}
        return StoreBM25(backend, st, (), self.over_fetch)

    # ------------------------------------------------------------------ store writes
    def write_pending(self) -> None:
        """Write this state's pending rows to the store (the index's writer)."""
        rows = self.pending
        for i in range(0, len(rows), _BATCH):
            self.backend.upsert(rows[i : i + _BATCH])

    def delete(self, doc_ids: Sequence[str]) -> None:
        """Delete the rows of ``doc_ids`` (none of this state's nodes)."""
        ids = list(doc_ids)
        for i in range(0, len(ids), _BATCH):
            self.backend.delete(ids[i : i + _BATCH])

    # ------------------------------------------------------------------ queries
    def search(
        self, tokens: Sequence[str], k: int, accept: Callable[[str], bool]
    ) -> list[tuple[str, float]]:
        """The exact top-``k`` ``(node id, score)`` among the nodes ``accept`` takes."""
        return exact_search(self.backend, self.stats, self._idf, tokens, k,
                            over_fetch=self.over_fetch, accept=accept)

    def doc_term_counts(self, doc_id: str) -> dict[str, int]:
        """``{token: count}`` of node ``doc_id`` (its store row)."""
        row = self.rows([doc_id])[doc_id]
        terms = {i: t for t, i in self.stats.term_ids.items() if i in row.tf}
        return {terms[i]: c for i, c in row.tf.items() if i in terms}

    # ------------------------------------------------------------------ persistence
    def write_to(self, gen: Path) -> dict[str, Any]:
        """Write the df table into the generation ``gen``; the index.json record."""
        self.stats.save(gen / DF_NAME)
        return {"store": True, "table": DF_NAME, "documents": self.stats.n_docs,
                "collection": self.backend.collection,
                "k1": self.k1, "b": self.b, "epsilon": self.epsilon}


def read_table(got: Any, path: Path, nodes: int) -> BM25Stats:
    """The df table ``got`` (parsed from ``path``) of a generation of ``nodes`` nodes,
    checked (:meth:`BM25Stats.from_json`, and its sizes against the nodes)."""
    stats = BM25Stats.from_json(got, path)
    if stats.n_docs != nodes:
        raise IndexPersistError(
            f"{path}: {stats.n_docs} documents for {nodes} nodes; rebuild the index")
    if sum(stats.versions.values()) != stats.n_docs:
        raise IndexPersistError(f"{path}: write versions do not add up to the documents; "
                                "rebuild the index")
    return stats
