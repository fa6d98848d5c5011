"""The arrays of one BM25 index: a CSC posting matrix, document lengths and the term table.

:class:`Postings` holds, per term (column) ``j``, the ascending ids of the documents holding
it, ``indices[indptr[j]:indptr[j + 1]]`` (int32), their term counts ``tf`` (uint8/16/32, the
narrowest that fits) and, per document, its length ``doc_len`` (int64). Columns have df > 0
(rank_bm25's vocabulary). The term table maps tokens to columns: a list of strings for a
built index, or the persisted :class:`MappedTerms` (UTF-8 blob, offsets and a sorted
blake2b-64 hash index) for a loaded one, looked up without decoding the vocabulary.

:func:`check_postings` states the posting invariants (ids in ``[0, N)`` and strictly
increasing within a column, counts > 0); the loader runs it once over every posting
(``verify="full"``) or once per column on the column's first use (``verify="lazy"``).

>>> p = Postings.from_columns(
...     np.array([0, 2, 2, 3]), np.array([0, 1, 1], np.int32), np.array([1, 2, 1], np.uint8),
...     np.array([1, 3], np.int64), ["a", "unused", "b"])
>>> p.terms, p.nnz, p.column("b"), p.doc_term_counts(1)
(['a', 'b'], 3, 1, {'a': 2, 'b': 1})
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from llama_index_car._errors import ConfigurationError, IndexPersistError

#: Query tokens whose column lookup a loaded index remembers (then the memo is cleared).
MEMO_MAX = 1 << 16


def term_hash(data: bytes) -> int:
    """64-bit blake2b of a term's UTF-8 bytes (the key of the persisted term table).

    >>> term_hash("설치".encode()) == term_hash("설치".encode()) != term_hash(b"x")
    True
    """
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class AutoVocab(dict[str, int]):
    """token -> column id, assigning the next id to an unseen token on lookup.

    >>> v = AutoVocab(); v["b"], v["a"], v["b"]
    (0, 1, 0)
    """

    def __missing__(self, key: str) -> int:
        value = self[key] = len(self)
        return value


def narrow_uint(max_value: int) -> type[np.unsignedinteger[Any]]:
    """The narrowest of uint8/16/32 holding ``max_value`` (a term count).

    >>> narrow_uint(255).__name__, narrow_uint(256).__name__
    ('uint8', 'uint16')
    """
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dt).max:
            return dt
    raise ConfigurationError(f"a term occurs {max_value} times in one document (> 2**32 - 1)")


class MappedTerms:
    """The persisted term table: UTF-8 blob + offsets (column order) and a sorted hash index.

    Lookups hash the token, binary-search the (memory-mapped) sorted hashes and compare bytes,
    so nothing proportional to the vocabulary is decoded or allocated at load.

    >>> t = term_table(["a", "b"])
    >>> m = MappedTerms(t["terms"], t["term_offsets"], t["term_hash"], t["term_order"])
    >>> m.get("b"), m.get("c"), m.terms()
    (1, None, ['a', 'b'])
    """

    def __init__(
        self, blob: np.ndarray, offsets: np.ndarray, hashes: np.ndarray, order: np.ndarray
    ) -> None:
        self.blob, self.offsets, self.hashes, self.order = blob, offsets, hashes, order

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def term_bytes(self, j: int) -> bytes:
        """The UTF-8 bytes of column ``j``'s term."""
        return bytes(self.blob[int(self.offsets[j]) : int(self.offsets[j + 1])])

    def get(self, token: str) -> int | None:
        """The column of ``token``, or ``None``."""
        data = token.encode("utf-8", "surrogatepass")
        h = np.uint64(term_hash(data))
        lo = int(np.searchsorted(self.hashes, h, side="left"))
        while lo < self.hashes.shape[0] and self.hashes[lo] == h:
            j = int(self.order[lo])
            if not 0 <= j < len(self):  # the mapped table changed after its check
                raise IndexPersistError(
                    f"term table is inconsistent (column {j} of {len(self)}): the index files "
                    "were altered after loading; load or build the index again"
                )
            if self.term_bytes(j) == data:
                return j
            lo += 1
        return None

    def terms(self) -> list[str]:
        """Every term, decoded, in column order."""
        raw = bytes(self.blob)
        off = self.offsets.tolist()
        try:
            return [
                raw[off[j] : off[j + 1]].decode("utf-8", "surrogatepass")
                for j in range(len(off) - 1)
            ]
        except UnicodeDecodeError as exc:
            raise IndexPersistError(
                f"term table is not UTF-8 ({exc}); save the index again"
            ) from exc

    def arrays(self) -> dict[str, np.ndarray]:
        """The four persisted arrays (the :func:`term_table` layout)."""
        return {
            "terms": np.asarray(self.blob),
            "term_offsets": np.asarray(self.offsets),
            "term_hash": np.asarray(self.hashes),
            "term_order": np.asarray(self.order),
        }


def term_table(terms: Sequence[str]) -> dict[str, np.ndarray]:
    """The persisted term table of ``terms``: ``terms`` (UTF-8 bytes), ``term_offsets``,
    ``term_hash`` (sorted blake2b-64) and ``term_order`` (column of each sorted hash).

    >>> term_table(["ab", "c"])["term_offsets"].tolist()
    [0, 2, 3]
    """
    encoded = [t.encode("utf-8", "surrogatepass") for t in terms]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum(
            np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:]
        )
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    hashes = np.fromiter(map(term_hash, encoded), dtype=np.uint64, count=len(encoded))
    order = np.argsort(hashes, kind="stable").astype(np.int32)
    return {"terms": blob, "term_offsets": offsets, "term_hash": hashes[order], "term_order": order}


def check_postings(
    indices: np.ndarray, tf: np.ndarray, n: int, starts: np.ndarray | None = None
) -> str | None:
    """What is wrong with a run of postings, or ``None``: ids in ``[0, n)``, strictly
    increasing except where a new column starts (``starts``: offsets into the run; ``None``
    for one column), counts > 0.

    >>> check_postings(np.array([0, 2, 1], np.int32), np.ones(3, np.uint8), 3)
    'document ids not increasing within a term'
    >>> check_postings(np.array([0, 2, 1], np.int32), np.ones(3, np.uint8), 3, np.array([2]))
    """
    indices = np.asarray(indices)
    if indices.size:
        if indices.min() < 0 or indices.max() >= n:
            return f"document ids out of [0, {n})"
        step = np.diff(indices.astype(np.int64))
        bad = step <= 0
        if starts is not None and bad.any():
            starts = starts[(starts > 0) & (starts <= step.size)]
            bad[starts - 1] = False
        if bad.any():
            return "document ids not increasing within a term"
    tf = np.asarray(tf)
    if tf.size and tf.min() == 0:
        return "zero term counts"
    return None


class Postings:
    """Immutable CSC arrays of one index and its term lookup (see the module docstring).

    ``indptr`` is always a private in-memory copy (the kernels index with it); ``indices``,
    ``tf`` and a :class:`MappedTerms` may be memory-mapped.
    """

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
        terms: list[str] | MappedTerms,
    ) -> None:
        self.indptr, self.indices, self.tf, self.doc_len = indptr, indices, tf, doc_len
        self.source = terms
        self._terms: list[str] | None = terms if isinstance(terms, list) else None
        self._vocab: dict[str, int] | None = None
        self._memo: dict[str, int | None] = {}
        self._csr: sp.csr_matrix | None = None

    @classmethod
    def from_columns(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
        terms: list[str],
    ) -> Postings:
        """Postings from CSC arrays, dropping columns with no posting."""
        df = np.diff(indptr)
        if df.size and not df.all():
            keep = np.flatnonzero(df > 0)
            indptr = np.zeros(keep.size + 1, dtype=np.int64)
            np.cumsum(df[keep], out=indptr[1:])
            terms = [terms[i] for i in keep.tolist()]
        return cls(indptr, indices, tf, doc_len, terms)

    @property
    def n_docs(self) -> int:
        """N, the number of documents."""
        return int(self.doc_len.shape[0])

    @property
    def n_terms(self) -> int:
        """V, the number of columns."""
        return int(self.indptr.shape[0]) - 1

    @property
    def nnz(self) -> int:
        """Number of postings (distinct (document, term) pairs)."""
        return int(self.indptr[-1]) if self.indptr.size else 0

    @property
    def terms(self) -> list[str]:
        """Column id -> token (decoded on first use for a loaded index)."""
        if self._terms is None:
            assert isinstance(self.source, MappedTerms)
            self._terms = self.source.terms()
        return self._terms

    @property
    def vocab(self) -> dict[str, int]:
        """Token -> column id (built on first use for a loaded index)."""
        if self._vocab is None:
            self._vocab = {t: i for i, t in enumerate(self.terms)}
        return self._vocab

    def column(self, token: str) -> int | None:
        """The column of ``token`` (hash lookups in a mapped table, memoised), or ``None``."""
        if self._vocab is not None or isinstance(self.source, list):
            return self.vocab.get(token)
        memo = self._memo
        if token in memo:
            return memo[token]
        j = self.source.get(token)
        if len(memo) >= MEMO_MAX:
            memo.clear()
        memo[token] = j
        return j

    def doc_rows(self) -> sp.csr_matrix:
        """The (documents x terms) count matrix, row-major (built once, shared)."""
        if self._csr is None:
            csc = sp.csc_matrix(
                (
                    np.asarray(self.tf, dtype=np.float64),
                    np.asarray(self.indices),
                    np.asarray(self.indptr),
                ),
                shape=(self.n_docs, self.n_terms),
            )
            self._csr = csc.tocsr()
        return self._csr

    def doc_term_counts(self, i: int) -> dict[str, int]:
        """``{token: count}`` of document ``i``."""
        if not 0 <= i < self.n_docs:
            raise ConfigurationError(f"document index must be in [0, {self.n_docs}), got {i}")
        rows = self.doc_rows()
        lo, hi = int(rows.indptr[i]), int(rows.indptr[i + 1])
        terms = self.terms
        return {
            terms[j]: int(c)
            for j, c in zip(rows.indices[lo:hi].tolist(), rows.data[lo:hi].tolist(), strict=True)
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """The eight persisted arrays, by name (the ``BM25Okapi.save`` layout)."""
        if isinstance(self.source, MappedTerms):
            table = self.source.arrays()
        else:
            table = term_table(self.terms)
        return {
            "indptr": np.asarray(self.indptr, dtype=np.int64),
            "indices": np.asarray(self.indices, dtype=np.int32),
            "tf": np.asarray(self.tf),
            "doc_len": np.asarray(self.doc_len, dtype=np.int64),
            **table,
        }
