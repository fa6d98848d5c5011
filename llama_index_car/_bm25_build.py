"""Building, merging and editing the :class:`~llama_index_car._bm25_arrays.Postings` of a BM25 index.

* :func:`build` streams batches of token lists into CSC arrays (:class:`Builder`: per batch,
  (term, count) pairs sorted by document; at the end one counting-sort scatter into the
  column arrays; no dense and no per-token intermediates);
* :func:`from_counts` takes a (documents x terms) count matrix;
* :func:`plan_merge` + :func:`merge_postings` unite shards in order (the one merge, used by
  ``BM25Okapi.merge`` in memory and out of core, and so by the Ray path): the vocabularies
  are united in shard order, each shard's columns are copied after the previous shards' part
  of the same global column with document ids offset by the documents before the shard;
* :func:`remove` drops documents.

Every result equals a fresh build on the resulting corpus (same columns, same postings).

>>> p = build([["a", "b"], ["b"]], batch_size=1)
>>> p.terms, p.indptr.tolist(), p.indices.tolist()
(['a', 'b'], [0, 1, 3], [0, 0, 1])
>>> plan = plan_merge([p, build([["c", "a"]], batch_size=10)])
>>> plan.terms, plan.indptr.tolist(), plan.doc_len.tolist()
(['a', 'b', 'c'], [0, 2, 4, 5], [2, 1, 2])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from llama_index_car._bm25_arrays import AutoVocab, Postings, narrow_uint
from llama_index_car._bm25_storage import Reserved, index_meta, write_index
from llama_index_car._errors import ConfigurationError

#: postings per block of the merge copy (bounds its temporaries)
MERGE_BLOCK = 1 << 22


def check_tokens(tokens: object, what: str) -> None:
    """Refuse a string where a list of tokens is expected (a common mistake)."""
    if isinstance(tokens, str | bytes):
        raise ConfigurationError(
            f"{what} is a string ({tokens[:30]!r}); BM25Okapi expects a list of tokens, "
            "e.g. KiwiTokenizer().tokenize(text)"
        )


class Builder:
    """Streaming CSC construction. Bytes held: 4 (term) + 1-4 (count) per posting of the
    batches, then 4 + 1-4 per posting of the result (batches are freed as scattered)."""

    def __init__(self) -> None:
        self.vocab = AutoVocab()
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (terms, tf, per_doc)
        self.lengths: list[np.ndarray] = []
        self.n_docs = 0

    def add(self, docs: Sequence[Sequence[str]]) -> None:
        """Add one batch of token lists."""
        n = len(docs)
        if not n:
            return
        lengths = np.empty(n, dtype=np.int64)
        for i, doc in enumerate(docs):
            check_tokens(doc, f"document {self.n_docs + i}")
            lengths[i] = len(doc)
        total = int(lengths.sum())
        cols = np.fromiter(
            map(self.vocab.__getitem__, chain.from_iterable(docs)), dtype=np.int64, count=total
        )
        keys = np.repeat(np.arange(n, dtype=np.int64), lengths) * len(self.vocab) + cols
        del cols
        keys.sort()
        if total:
            starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
            uniq = keys[starts]
            tf = np.diff(np.append(starts, total))
        else:
            uniq = np.zeros(0, dtype=np.int64)
            tf = np.zeros(0, dtype=np.int64)
        del keys
        rows, terms = np.divmod(uniq, len(self.vocab))
        per_doc = np.bincount(rows, minlength=n).astype(np.int32)
        tf_dt = narrow_uint(int(tf.max()) if tf.size else 0)
        self.chunks.append((terms.astype(np.int32), tf.astype(tf_dt), per_doc))
        self.lengths.append(lengths)
        self.n_docs += n

    def finish(self) -> Postings:
        """The postings of every batch added (the builder is emptied)."""
        v = len(self.vocab)
        df = np.zeros(v, dtype=np.int64)
        for terms, _, _ in self.chunks:
            df += np.bincount(terms, minlength=v)
        indptr = np.zeros(v + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        tf_dt = np.result_type(np.uint8, *(tf.dtype for _, tf, _ in self.chunks))
        indices = np.empty(nnz, dtype=np.int32)
        tf_out = np.empty(nnz, dtype=tf_dt)
        cursor = indptr[:-1].copy()
        offset = 0
        chunks = self.chunks
        self.chunks = []
        while chunks:
            terms, tf, per_doc = chunks.pop(0)
            docs = np.repeat(np.arange(offset, offset + per_doc.size, dtype=np.int32), per_doc)
            _scatter(terms, docs, tf, cursor, indices, tf_out, v)
            offset += per_doc.size
        doc_len = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        return Postings(indptr, indices, tf_out, doc_len, list(self.vocab))


def _scatter(
    terms: np.ndarray,
    docs: np.ndarray,
    tf: np.ndarray,
    cursor: np.ndarray,
    indices: np.ndarray,
    tf_out: np.ndarray,
    v: int,
) -> None:
    """Append postings (docs ascending within each term) at ``cursor[term]``; advance it."""
    m = terms.size
    if not m:
        return
    order = np.argsort(terms, kind="stable")
    ts = terms[order]
    starts = np.flatnonzero(np.concatenate(([True], ts[1:] != ts[:-1])))
    rank = np.arange(m, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, m)))
    pos = cursor[ts] + rank
    del rank
    indices[pos] = docs[order]
    tf_out[pos] = tf[order]
    cursor += np.bincount(terms, minlength=v)


def _batched(docs: Iterable[Sequence[str]], size: int) -> Iterator[list[Sequence[str]]]:
    it = iter(docs)
    while batch := list(islice(it, size)):
        yield batch


def build(docs: Iterable[Sequence[str]], batch_size: int) -> Postings:
    """Postings of ``docs`` (one token list per document), consumed in batches."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if isinstance(docs, str | bytes):
        raise ConfigurationError("tokenized_corpus is a string; pass a list of token lists")
    builder = Builder()
    for batch in _batched(docs, batch_size):
        builder.add(batch)
    return builder.finish()


def from_counts(counts: sp.spmatrix, terms: Sequence[str]) -> Postings:
    """Postings of a (documents x terms) count matrix; columns with no occurrence dropped."""
    m = sp.csc_matrix(counts, copy=True)
    if m.shape[1] != len(terms):
        raise ConfigurationError(
            f"count matrix has {m.shape[1]} columns but {len(terms)} terms were given"
        )
    if m.nnz and ((m.data < 0).any() or (m.data != np.round(m.data)).any()):
        raise ConfigurationError("count matrix holds negative or non-integer term counts")
    m.eliminate_zeros()
    m.sum_duplicates()
    m.sort_indices()
    data = m.data.astype(np.int64)
    tf = data.astype(narrow_uint(int(data.max()) if data.size else 0))
    doc_len = np.asarray(m.sum(axis=1)).ravel().astype(np.int64)
    return Postings.from_columns(
        m.indptr.astype(np.int64), m.indices.astype(np.int32), tf, doc_len, list(terms)
    )


@dataclass(frozen=True)
class MergePlan:
    """The merged index minus its posting arrays: global ``indptr``, ``terms`` (shard order),
    ``doc_len``, the count dtype, and each shard's column -> global column ``remaps``."""

    indptr: np.ndarray
    terms: list[str]
    doc_len: np.ndarray
    tf_dtype: np.dtype[np.unsignedinteger]
    remaps: list[np.ndarray]

    @property
    def nnz(self) -> int:
        """Postings of the merged index."""
        return int(self.indptr[-1])


def plan_merge(shards: Sequence[Postings]) -> MergePlan:
    """The :class:`MergePlan` of ``shards`` (reads their term tables and column pointers)."""
    vocab: dict[str, int] = {}
    remaps = [
        np.fromiter((vocab.setdefault(t, len(vocab)) for t in s.terms), dtype=np.int64)
        for s in shards
    ]
    df = np.zeros(len(vocab), dtype=np.int64)
    for s, remap in zip(shards, remaps, strict=True):
        np.add.at(df, remap, np.diff(s.indptr))
    indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    total_docs = sum(s.n_docs for s in shards)
    if total_docs > np.iinfo(np.int32).max:
        raise ConfigurationError(f"{total_docs} documents exceed the int32 document ids")
    tf_dt = np.result_type(np.uint8, *(s.tf.dtype for s in shards))
    doc_len = np.concatenate([np.asarray(s.doc_len, dtype=np.int64) for s in shards])
    return MergePlan(indptr, list(vocab), doc_len, tf_dt, remaps)


def merge_postings(
    shards: Sequence[Postings], plan: MergePlan, indices: np.ndarray, tf: np.ndarray
) -> None:
    """Fill ``indices`` / ``tf`` (``plan.nnz`` entries, arrays or writable memory maps) with
    the shards' postings; blocks of whole columns of at most ~``MERGE_BLOCK`` postings bound
    the temporaries, and a shard is read one block at a time (it may be memory-mapped)."""
    cursor = plan.indptr[:-1].copy()
    offset = 0
    for s, remap in zip(shards, plan.remaps, strict=True):
        sptr = np.asarray(s.indptr)
        ncols = sptr.size - 1
        c0 = 0
        while c0 < ncols:
            c1 = int(np.searchsorted(sptr, sptr[c0] + MERGE_BLOCK, side="right")) - 1
            c1 = min(max(c1, c0 + 1), ncols)
            p0, p1 = int(sptr[c0]), int(sptr[c1])
            sdf = np.diff(sptr[c0 : c1 + 1])
            pos = np.repeat(cursor[remap[c0:c1]] - sptr[c0:c1], sdf)
            pos += np.arange(p0, p1, dtype=np.int64)
            indices[pos] = np.asarray(s.indices[p0:p1]) + np.int32(offset)
            tf[pos] = s.tf[p0:p1]
            del pos
            cursor[remap[c0:c1]] += sdf
            c0 = c1
        offset += s.n_docs


def merge(shards: Sequence[Postings], plan: MergePlan) -> Postings:
    """The merged postings in memory."""
    indices = np.empty(plan.nnz, dtype=np.int32)
    tf = np.empty(plan.nnz, dtype=plan.tf_dtype)
    merge_postings(shards, plan, indices, tf)
    return Postings.from_columns(plan.indptr, indices, tf, plan.doc_len, plan.terms)


def merge_to(
    root: Path, shards: Sequence[Postings], plan: MergePlan, params: tuple[float, float, float]
) -> None:
    """Write the merged index into the directory ``root`` with the one writer
    (:func:`~llama_index_car._bm25_storage.write_index`): the posting arrays are filled in
    place through its memory maps, so they never need anonymous memory."""
    empty = np.zeros(0, np.int32), np.zeros(0, plan.tf_dtype)
    arrays: dict[str, np.ndarray | Reserved] = dict(
        Postings(plan.indptr, *empty, plan.doc_len, plan.terms).arrays()
    )
    arrays["indices"] = Reserved(np.dtype(np.int32), plan.nnz)
    arrays["tf"] = Reserved(np.dtype(plan.tf_dtype), plan.nnz)

    def fill(maps: dict[str, np.ndarray]) -> None:
        merge_postings(shards, plan, maps["indices"], maps["tf"])

    n, v = plan.doc_len.shape[0], plan.indptr.shape[0] - 1
    write_index(root, arrays, index_meta(params, n, v, plan.nnz, plan.tf_dtype), fill)


def remove(p: Postings, indices: Iterable[int]) -> Postings:
    """``p`` without the documents at ``indices`` (the others keep their order)."""
    n = p.n_docs
    drop = np.zeros(n, dtype=bool)
    idx = np.asarray(list(indices), dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ConfigurationError(
            f"document indices must be in [0, {n}), got {idx.tolist()[:10]}"
        )
    drop[idx] = True
    new_id = np.cumsum(~drop) - 1
    keep_post = ~drop[p.indices]
    v = p.n_terms
    col_of = np.repeat(np.arange(v, dtype=np.int64), np.diff(p.indptr))
    kept_per_col = np.bincount(col_of[keep_post], minlength=v)
    del col_of
    indptr = np.zeros(p.indptr.size, dtype=np.int64)
    np.cumsum(kept_per_col, out=indptr[1:])
    new_indices = new_id[np.asarray(p.indices)[keep_post]].astype(np.int32)
    new_tf = np.asarray(p.tf)[keep_post]
    doc_len = np.asarray(p.doc_len)[~drop].astype(np.int64)
    return Postings.from_columns(indptr, new_indices, new_tf, doc_len, p.terms)
