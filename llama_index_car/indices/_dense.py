"""The vectors of an in-memory index, one immutable version per snapshot.

LlamaIndex's ``SimpleVectorStore`` keeps its vectors in dicts that ``insert``/``delete``
change in place, and its retriever looks every hit up in a second dict afterwards: a query
running during an update saw ids vanish between the two (a ``KeyError`` in 25 of 876 queries
with four query threads). So an index whose vectors live in memory keeps them here as well,
aligned with its BM25 nodes and replaced, never changed, by each update
(:meth:`DenseVectors.without` / :meth:`DenseVectors.plus` return new arrays, as
:class:`~llama_index_car.indices._lexical.Lexical` does): the dense channel searches the snapshot it
pinned, whatever the writer does meanwhile.

Scores are the cosine similarity of ``SimpleVectorStore``'s default mode,
``cos(q, v) = q·v / (‖q‖ ‖v‖)`` (0 when either norm is 0), ranked by score descending, then by
index order.

>>> dv = DenseVectors.of({"a": [1.0, 0.0], "b": [1.0, 1.0]}, ["a", "b"])
>>> [(i, round(s, 4)) for i, s in dv.search([1.0, 0.0], 2, None)]
[('a', 1.0), ('b', 0.7071)]
>>> dv.without(["a"]).ids, dv.ids
(('b',), ('a', 'b'))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def local_vectors(vector_index: Any) -> dict[str, list[float]] | None:
    """``{node_id: vector}`` of an in-memory ``SimpleVectorStore`` (None for other stores)."""
    from llama_index.core.vector_stores.simple import SimpleVectorStore

    store = getattr(vector_index, "vector_store", None)
    if not isinstance(store, SimpleVectorStore):
        return None
    return dict(store.data.embedding_dict)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class DenseVectors:
    """Row ``i`` is the vector of node ``ids[i]`` (``present[i]``: it has one; absent rows
    are zero and never returned). Arrays are read-only; updates return new objects."""

    ids: tuple[str, ...]
    matrix: np.ndarray  # (n, d) float32
    norms: np.ndarray  # (n,) float32
    present: np.ndarray  # (n,) bool

    @classmethod
    def of(
        cls, vectors: Mapping[str, Sequence[float]], order: Sequence[str],
        dim: int | None = None,
    ) -> DenseVectors:
        """Rows in ``order`` from ``vectors`` (ids it lacks get absent rows)."""
        if dim is None:
            dim = next((len(v) for v in vectors.values()), 0)
        matrix = np.zeros((len(order), dim), dtype=np.float32)
        present = np.zeros(len(order), dtype=bool)
        for i, node_id in enumerate(order):
            vec = vectors.get(node_id)
            if vec is None:
                continue
            if len(vec) != dim:
                from llama_index_car._errors import ConfigurationError

                raise ConfigurationError(
                    f"node {node_id!r} has a {len(vec)}-d vector; the index's are {dim}-d"
                )
            matrix[i] = vec
            present[i] = True
        return cls.from_matrix(tuple(order), matrix, present)

    @classmethod
    def from_matrix(
        cls, ids: Sequence[str], matrix: np.ndarray, present: np.ndarray | None = None
    ) -> DenseVectors:
        """Over a ``(len(ids), d)`` matrix whose rows are all present unless ``present``."""
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        if present is None:
            present = np.ones(len(ids), dtype=bool)
        norms = np.linalg.norm(matrix, axis=1).astype(np.float32) if len(ids) else np.zeros(0)
        return cls(tuple(ids), _frozen(matrix), _frozen(norms.astype(np.float32)),
                   _frozen(np.asarray(present, dtype=bool)))

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def vectors(self) -> dict[str, list[float]]:
        """``{node_id: vector}`` of the present rows."""
        return {i: row.tolist() for i, row, p in zip(self.ids, self.matrix, self.present,
                                                        strict=True) if p}

    def without(self, node_ids: Iterable[str]) -> DenseVectors:
        """A new version without the rows of ``node_ids`` (unknown ids are ignored)."""
        drop = set(node_ids)
        if not drop & set(self.ids):
            return self
        keep = np.asarray([i not in drop for i in self.ids], dtype=bool)
        return DenseVectors.from_matrix(
            [i for i in self.ids if i not in drop], self.matrix[keep], self.present[keep])

    def plus(self, vectors: Mapping[str, Sequence[float]], order: Sequence[str]) -> DenseVectors:
        """A new version with rows for ``order`` appended (from ``vectors``)."""
        if not order:
            return self
        added = DenseVectors.of(vectors, order, self.dim if self.present.any() else None)
        if self.ids and added.dim != self.dim:  # the index held no vector yet
            return DenseVectors.of({**self.vectors(), **vectors}, [*self.ids, *order])
        return DenseVectors.from_matrix(
            [*self.ids, *added.ids], np.vstack([self.matrix, added.matrix]),
            np.concatenate([self.present, added.present]),
        )

    def search(
        self, query: Sequence[float], k: int, allowed: np.ndarray | None
    ) -> list[tuple[str, float]]:
        """The ``k`` best ``(id, cosine)`` among the present rows (and ``allowed``, a mask
        over the rows), score descending then row order."""
        q = np.asarray(query, dtype=np.float32)
        if not self.ids or k < 1 or q.shape != (self.dim,):
            return []
        mask = self.present if allowed is None else self.present & allowed
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return []
        qn = float(np.linalg.norm(q))
        denom = self.norms[rows].astype(np.float64) * qn
        dots = self.matrix[rows] @ q
        scores = np.divide(dots.astype(np.float64), denom, out=np.zeros(rows.size),
                           where=denom > 0)
        order = np.lexsort((rows, -scores))[:k]  # score desc, then row (index order)
        return [(self.ids[int(rows[j])], float(scores[j])) for j in order]
