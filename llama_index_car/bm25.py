"""Pure sparse BM25Okapi that scores exactly like ``rank_bm25.BM25Okapi`` (numpy/scipy only).

The scoring is rank_bm25 0.2.2's ``BM25Okapi`` (Trotman et al. 2014, "Improvements to BM25
and Language Models Examined"), the variant used by the paper:

* ``idf(t) = ln(N - df(t) + 0.5) - ln(df(t) + 0.5)`` over the N documents;
* a negative idf (``df > N/2``) is replaced by ``epsilon * average_idf``, where
  ``average_idf`` is the mean of the *unfloored* idf over every term of the corpus;
* ``score(D, Q) = sum_{q in Q} idf(q) * tf(q, D) * (k1 + 1)
  / (tf(q, D) + k1 * (1 - b + b * |D| / avgdl))``.

The sum runs over the query tokens *with repetition*, as rank_bm25 does: a token that occurs
twice in the query adds its term score twice. Tokens absent from the corpus add 0.

Differences from rank_bm25, all on inputs where rank_bm25 raises or returns NaN:

* an empty corpus (N = 0) gives empty score arrays (rank_bm25 raises ``ZeroDivisionError``);
* a corpus whose documents are all empty gives all-zero scores (rank_bm25 raises);
* with ``k1 = 0`` or ``b = 1`` rank_bm25 computes ``0/0 = NaN`` for documents that lack a
  query term (``k1 = 0``) or are empty (``b = 1``); here such documents score 0.

Layout and speed: the index is a CSC posting matrix -- per term, the ascending ids of the
documents holding it (int32) and the term counts (uint8/16/32, the narrowest that fits) -- plus
per-document lengths. It is built streaming from batches of token lists (no dense and no
per-token intermediates: about 10 bytes per posting while building, 5 at rest), and a query is
term-at-a-time over the columns of its terms with the per-document length norm
``k1 * (1 - b + b * |D| / avgdl)`` precomputed once. With numba installed (``[fast]`` extra)
``top_k`` runs one compiled kernel that touches only the postings of the query terms and keeps
a k-heap; without numba a numpy path gives bit-identical scores. ``save``/``load`` write plain
versioned ``.npy`` arrays bound by a sha256 manifest and memory-map them on load.

A repeated query token is scored as ``count * w`` where rank_bm25 adds ``w`` ``count`` times;
the two differ by at most a few ulps (far inside the 1e-9 parity tolerance).

Example:
    >>> bm25 = BM25Okapi([["설치", "기준"], ["배수", "시설"], ["설치", "시설"], ["기준"], ["배수"]])
    >>> idx, scores = bm25.top_k(["설치", "기준"], k=2)
    >>> idx.tolist(), scores.round(4).tolist()
    ([0, 3], [0.6049, 0.4048])
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from llama_index_car import _bm25_kernels
from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._persist import (
    load_live,
    open_regular,
    read_manifest,
    replace_dir,
    sha256_file,
    write_error,
    write_manifest,
)

__all__ = ["BM25_FORMAT_VERSION", "BM25Okapi", "top_k_from_scores"]

#: Version of the directory layout written by :meth:`BM25Okapi.save`.
BM25_FORMAT_VERSION = 2
_KIND = "BM25Okapi"
#: ``backend="auto"`` uses the numba kernels from this many documents on (below, the numpy
#: path is as fast and a process neither imports numba nor compiles anything).
AUTO_NUMBA_MIN_DOCS = 50_000
#: ``verify="auto"`` hashes every file when the index is at most this many bytes.
AUTO_VERIFY_BYTES = 16 << 20
#: Largest ``k1`` accepted (beyond it ``k1 + 1`` swamps every count; 1e308 made every
#: score inf). ``epsilon`` is accepted in ``[-EPSILON_MAX, EPSILON_MAX]``.
K1_MAX = 1000.0
EPSILON_MAX = 1000.0
Verify = Literal["auto", "full", "lazy"]
Backend = Literal["auto", "numba", "numpy"]


def robertson_idf(n_docs: int, df: np.ndarray) -> np.ndarray:
    """``ln(N - df + 0.5) - ln(df + 0.5)`` elementwise (rank_bm25 ``BM25Okapi._calc_idf``).

    >>> robertson_idf(4, np.array([1, 2, 4])).round(4).tolist()
    [0.8473, 0.0, -2.1972]
    """
    dff = df.astype(np.float64)
    return np.log(n_docs - dff + 0.5) - np.log(dff + 0.5)


def floor_idf(idf: np.ndarray, epsilon: float) -> tuple[np.ndarray, float]:
    """Replace negative idf values by ``epsilon * mean(idf)``; return ``(idf, mean(idf))``.

    The mean is taken over all terms before flooring and summed exactly (``math.fsum``), so
    it does not depend on the order of the vocabulary. An empty vocabulary has mean 0.
    """
    average = math.fsum(idf.tolist()) / idf.size if idf.size else 0.0
    out = idf.copy()
    out[idf < 0] = epsilon * average
    return out, average


def okapi_term_weights(
    tf: np.ndarray, doc_len: np.ndarray, idf: np.ndarray, avgdl: float, k1: float, b: float
) -> np.ndarray:
    """``idf * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / avgdl)))`` elementwise.

    The expression is written in rank_bm25's order of operations. ``tf > 0`` everywhere
    (these are the stored entries of the sparse matrix), so no 0/0 occurs for ``avgdl > 0``.
    """
    return idf * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / avgdl)))


def _check_tokens(tokens: object, what: str) -> None:
    if isinstance(tokens, str | bytes):
        raise ConfigurationError(
            f"{what} is a string ({tokens[:30]!r}); BM25Okapi expects a list of tokens, "
            "e.g. KiwiTokenizer().tokenize(text)"
        )


def _best_of(pool: np.ndarray, scores: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` best of the (ascending) indices ``pool``: score desc, then index asc."""
    ps = scores[pool]
    if k < pool.size:
        part = np.argpartition(ps, pool.size - k)[pool.size - k :]
        kth = ps[part].min()
        cand = np.flatnonzero(ps >= kth)  # the top k plus every tie at the boundary
    else:
        cand = np.arange(pool.size)
    order = np.lexsort((cand, -ps[cand]))[:k]
    return np.asarray(pool[cand[order]], dtype=np.int64)


def top_k_from_scores(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``min(k, len(scores))`` best ``(indices, scores)``: score desc, then index asc.

    Only positive scores are partitioned; when fewer than ``k`` are positive, zero scores
    follow in index order, then negative ones (so the cost stays that of the matches).

    >>> top_k_from_scores(np.array([0.5, 2.0, 0.5, 1.0]), 3)[0].tolist()
    [1, 3, 0]
    >>> top_k_from_scores(np.array([0.0, -1.0, 3.0, 0.0]), 4)[0].tolist()
    [2, 0, 3, 1]
    """
    n = scores.shape[0]
    k = max(0, min(int(k), n))
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    stride = int(math.sqrt(n / k))
    if stride >= 4:
        # Threshold from a strided sample: its k-th largest value ``thr`` is reached by at
        # least k documents (the sampled ones), so every top-k document and every tie at
        # the boundary has a score >= thr. Expected pool ~ sqrt(n * k) documents.
        sample = scores[::stride]
        thr = np.partition(sample, sample.size - k)[sample.size - k]
        if thr > 0:
            return _finish_top_k(_best_of(np.flatnonzero(scores >= thr), scores, k), scores)
    pos = np.flatnonzero(scores > 0)
    if pos.size >= k:
        idx = _best_of(pos, scores, k)
    else:
        parts = [_best_of(pos, scores, pos.size)]
        need = k - pos.size
        zeros = np.flatnonzero(scores == 0)[:need]
        parts.append(zeros.astype(np.int64))
        need -= zeros.size
        if need > 0:
            parts.append(_best_of(np.flatnonzero(scores < 0), scores, need))
        idx = np.concatenate(parts)
    return _finish_top_k(idx, scores)


def _finish_top_k(idx: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return idx, scores[idx]


# ----------------------------------------------------------------------------- vocabulary
def _term_hash(data: bytes) -> int:
    """64-bit blake2b of a term's UTF-8 bytes (the key of the persisted term table)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class _AutoVocab(dict[str, int]):
    """token -> column id, assigning the next id to an unseen token on lookup."""

    def __missing__(self, key: str) -> int:
        value = self[key] = len(self)
        return value


class _MappedTerms:
    """The persisted term table: UTF-8 blob + offsets (column order) and a sorted hash index.

    Lookups hash the token, binary-search the (memory-mapped) sorted hashes and compare bytes,
    so nothing proportional to the vocabulary is decoded or allocated at load.
    """

    def __init__(
        self, blob: np.ndarray, offsets: np.ndarray, hashes: np.ndarray, order: np.ndarray
    ) -> None:
        self.blob, self.offsets, self.hashes, self.order = blob, offsets, hashes, order

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def term_bytes(self, j: int) -> bytes:
        return bytes(self.blob[int(self.offsets[j]) : int(self.offsets[j + 1])])

    def get(self, token: str) -> int | None:
        data = token.encode("utf-8", "surrogatepass")
        h = np.uint64(_term_hash(data))
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


def _term_table(terms: Sequence[str]) -> dict[str, np.ndarray]:
    encoded = [t.encode("utf-8", "surrogatepass") for t in terms]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum(
            np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:]
        )
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    hashes = np.fromiter(map(_term_hash, encoded), dtype=np.uint64, count=len(encoded))
    order = np.argsort(hashes, kind="stable").astype(np.int32)
    return {"terms": blob, "term_offsets": offsets, "term_hash": hashes[order], "term_order": order}


# ----------------------------------------------------------------------------- building
def _narrow_uint(max_value: int) -> type[np.unsignedinteger[Any]]:
    for dt in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dt).max:
            return dt
    raise ConfigurationError(f"a term occurs {max_value} times in one document (> 2**32 - 1)")


class _Builder:
    """Streaming CSC construction: per batch, (term, count) pairs sorted by document; at the
    end one counting-sort scatter into the column arrays. Bytes held: 4 (term) + 1-4 (count)
    per posting of the batches, then 4 + 1-4 per posting of the result (batches are freed as
    they are scattered)."""

    def __init__(self) -> None:
        self.vocab = _AutoVocab()
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (terms, tf, per_doc)
        self.lengths: list[np.ndarray] = []
        self.n_docs = 0

    def add(self, docs: Sequence[Sequence[str]]) -> None:
        n = len(docs)
        if not n:
            return
        lengths = np.empty(n, dtype=np.int64)
        for i, doc in enumerate(docs):
            _check_tokens(doc, f"document {self.n_docs + i}")
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
        tf_dt = _narrow_uint(int(tf.max()) if tf.size else 0)
        self.chunks.append((terms.astype(np.int32), tf.astype(tf_dt), per_doc))
        self.lengths.append(lengths)
        self.n_docs += n

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
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
        return indptr, indices, tf_out, doc_len, list(self.vocab)


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


# ----------------------------------------------------------------------------- persistence
_ARRAYS = (
    "indptr",
    "indices",
    "tf",
    "doc_len",
    "terms",
    "term_offsets",
    "term_hash",
    "term_order",
)


def _npy_name(name: str) -> str:
    return name + ".npy"


_NPY_ERRORS = (
    ValueError,
    SyntaxError,
    TypeError,
    OverflowError,
    MemoryError,
    RecursionError,
    EOFError,
    UnicodeDecodeError,
    tokenize.TokenError,
)


def _load_npy(root: Path, name: str, mmap: bool) -> np.ndarray:
    """One 1-D ``.npy`` array of ``root``, memory-mapped or read.

    The file is opened non-blocking and must be a regular file; its header is parsed with
    numpy's reader (any failure, a Python-2 header that does not tokenize included, is an
    :class:`IndexPersistError`), and the size it declares must equal the file's before any
    memory is allocated or mapped (a header declaring 2**40 entries is refused, not a
    ``MemoryError``). No pickle.
    """
    path = root / _npy_name(name)
    fmt = np.lib.format
    try:
        fh = open_regular(path)
    except FileNotFoundError as exc:
        raise IndexPersistError(f"{path} is missing; save the index again") from exc
    with fh:
        try:
            version = fmt.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = fmt.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = fmt.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except _NPY_ERRORS as exc:
            raise IndexPersistError(
                f"{path} is not a readable .npy array (damaged header: {exc}); save it again"
            ) from exc
        except OSError as exc:
            raise IndexPersistError(f"{path} is unreadable ({exc}); save it again") from exc
        if dtype.hasobject or len(shape) != 1 or shape[0] < 0:
            raise IndexPersistError(
                f"{path}: expected a 1-D array of numbers, got {dtype} with shape {shape}; "
                "save the index again"
            )
        count = int(shape[0])
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
        if offset + count * dtype.itemsize != size:
            raise IndexPersistError(
                f"{path}: the header declares {count} entries of {dtype} "
                f"({offset + count * dtype.itemsize} bytes with the header), the file has "
                f"{size} bytes; save the index again"
            )
        try:
            if count == 0:
                return np.zeros(0, dtype=dtype)
            if mmap:
                return np.memmap(fh, dtype=dtype, mode="r", offset=offset, shape=(count,))
            arr = np.fromfile(fh, dtype=dtype, count=count)
        except (OSError, ValueError) as exc:
            raise IndexPersistError(f"{path} is unreadable ({exc}); save it again") from exc
        if arr.shape[0] != count:
            raise IndexPersistError(f"{path} was truncated while read; save it again")
        return arr


def _write_npy(path: Path, arr: np.ndarray) -> None:
    """``np.save`` layout (format 1.0, no pickle), fsynced; a failed write (a full disk, a
    read-only mount) is an :class:`IndexPersistError` naming ``path`` and the cause (numpy's
    own writer reports a full disk as "N requested and M written")."""
    arr = np.ascontiguousarray(arr)
    try:
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_1_0(
                fh, np.lib.format.header_data_from_array_1_0(arr)
            )
            view = arr.reshape(-1).view(np.uint8).data
            for start in range(0, len(view), _WRITE_BLOCK):
                fh.write(view[start : start + _WRITE_BLOCK])
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(path, exc) from exc


def _out_memmap(path: Path, dtype: np.dtype[Any], count: int) -> np.memmap[Any, Any]:
    """A writable ``.npy`` memory map of ``count`` entries whose blocks are allocated up
    front (``posix_fallocate``): a full disk is an :class:`IndexPersistError` here, never a
    SIGBUS when a page of the map is first written."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0, dtype=dtype))
    header["shape"] = (count,)
    try:
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, header)
            offset = fh.tell()
            total = offset + count * np.dtype(dtype).itemsize
            if hasattr(os, "posix_fallocate") and total > offset:
                os.posix_fallocate(fh.fileno(), offset, total - offset)
            else:  # pragma: no cover - platforms without fallocate
                fh.truncate(total)
        if count == 0:
            return np.zeros(0, dtype=dtype)  # type: ignore[return-value]
        return np.memmap(path, dtype=dtype, mode="r+", offset=offset, shape=(count,))
    except OSError as exc:
        raise write_error(path, exc) from exc


def _expect(path: Path, arr: np.ndarray, dtypes: tuple[Any, ...], length: int | None) -> None:
    if arr.ndim != 1 or arr.dtype not in [np.dtype(d) for d in dtypes]:
        raise IndexPersistError(
            f"{path}: expected a 1-D array of {[np.dtype(d).name for d in dtypes]}, "
            f"got {arr.dtype} with shape {arr.shape}; save the index again"
        )
    if length is not None and arr.shape[0] != length:
        raise IndexPersistError(
            f"{path}: expected {length} entries, got {arr.shape[0]}; save the index again"
        )


def _int_field(meta: dict[str, Any], key: str, where: Path) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise IndexPersistError(f"{where}: meta.{key} must be an int >= 0, got {value!r}")
    return value


def _float_field(meta: dict[str, Any], key: str, where: Path) -> float:
    value = meta.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise IndexPersistError(f"{where}: meta.{key} must be a number, got {value!r}")
    return float(value)


_MERGE_BLOCK = 1 << 22
_WRITE_BLOCK = 1 << 24
#: Query tokens whose column lookup a loaded index remembers (then the memo is cleared).
_MEMO_MAX = 1 << 16


def _merge_postings(
    shards: Sequence[BM25Okapi],
    remaps: Sequence[np.ndarray],
    indptr: np.ndarray,
    indices: np.ndarray,
    tf: np.ndarray,
) -> None:
    """Copy each shard's columns after the previous shards' part of the same global column,
    with document ids offset by the documents before the shard; blocks of whole columns of
    at most ~``_MERGE_BLOCK`` postings bound the temporaries."""
    cursor = indptr[:-1].copy()
    offset = 0
    for s, remap in zip(shards, remaps, strict=True):
        sptr = np.asarray(s._indptr)
        ncols = sptr.size - 1
        c0 = 0
        while c0 < ncols:
            c1 = int(np.searchsorted(sptr, sptr[c0] + _MERGE_BLOCK, side="right")) - 1
            c1 = min(max(c1, c0 + 1), ncols)
            p0, p1 = int(sptr[c0]), int(sptr[c1])
            sdf = np.diff(sptr[c0 : c1 + 1])
            pos = np.repeat(cursor[remap[c0:c1]] - sptr[c0:c1], sdf)
            pos += np.arange(p0, p1, dtype=np.int64)
            indices[pos] = np.asarray(s._indices[p0:p1]) + np.int32(offset)
            tf[pos] = s._tf[p0:p1]
            del pos
            cursor[remap[c0:c1]] += sdf
            c0 = c1
        offset += s.corpus_size


# ----------------------------------------------------------------------------- index
class BM25Okapi:
    """Sparse BM25Okapi with rank_bm25's exact semantics (see the module docstring).

    Args:
        tokenized_corpus: one token list per document (e.g. ``KiwiTokenizer.tokenize_batch``);
            any iterable, consumed once in batches of ``batch_size`` documents (a generator
            streams: the token lists are never all held).
        k1: term-frequency saturation, ``>= 0`` (default 1.5, as rank_bm25).
        b: length normalisation in ``[0, 1]`` (default 0.75).
        epsilon: floor factor for negative idf, ``epsilon * average_idf`` (default 0.25).
        batch_size: documents per build batch (default 50,000).
        backend: ``"auto"`` (numba when installed and N >= 50,000, else numpy), ``"numba"``
            or ``"numpy"``; scores are identical, only speed differs.

    Attributes:
        corpus_size: N. ``avgdl``: mean document length (0.0 for an empty corpus).
        vocab: token -> column id. ``terms``: column id -> token. ``idf``: floored idf per
        column. ``average_idf``: unfloored mean idf. ``doc_len``: tokens per document.

    Objects are immutable: :meth:`add_documents`, :meth:`remove_documents` and :meth:`merge`
    return new ones whose scores equal a fresh build on the resulting corpus.

    Example:
        >>> bm25 = BM25Okapi([["a", "b"], ["b", "c"], ["c"]], k1=1.2)
        >>> float(bm25.get_scores(["d"]).sum())
        0.0
    """

    def __init__(
        self,
        tokenized_corpus: Iterable[Sequence[str]],
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        *,
        batch_size: int = 50_000,
        backend: Backend = "auto",
    ) -> None:
        self._set_params(k1, b, epsilon)
        self._set_backend(backend)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if isinstance(tokenized_corpus, str | bytes):
            raise ConfigurationError("tokenized_corpus is a string; pass a list of token lists")
        builder = _Builder()
        for batch in _batched(tokenized_corpus, batch_size):
            builder.add(batch)
        indptr, indices, tf, doc_len, terms = builder.finish()
        self._finish(indptr, indices, tf, doc_len, terms)

    # ------------------------------------------------------------------ construction
    def _set_params(self, k1: float, b: float, epsilon: float) -> None:
        def ok(x: object, lo: float, hi: float) -> bool:
            return (
                isinstance(x, int | float)
                and not isinstance(x, bool)
                and math.isfinite(x)
                and lo <= x <= hi
            )

        if not ok(k1, 0.0, K1_MAX):
            raise ConfigurationError(
                f"k1 must be a finite number in [0, {K1_MAX:g}] (usual: 1.2-2.0), got {k1!r}"
            )
        if not ok(b, 0.0, 1.0):
            raise ConfigurationError(f"b must be a finite number in [0, 1], got {b!r}")
        if not ok(epsilon, -EPSILON_MAX, EPSILON_MAX):
            raise ConfigurationError(
                f"epsilon must be a finite number in [-{EPSILON_MAX:g}, {EPSILON_MAX:g}] "
                f"(usual: 0.25), got {epsilon!r}"
            )
        self.k1 = float(k1)
        self.b = float(b)
        self.epsilon = float(epsilon)

    def _set_backend(self, backend: str) -> None:
        if backend not in ("auto", "numba", "numpy"):
            raise ConfigurationError(f"backend must be 'auto', 'numba' or 'numpy', got {backend!r}")
        self.backend = backend
        self._kernels: dict[str, Any] | None = None
        self._kernels_loaded = False
        self._pool: list[tuple[np.ndarray, np.ndarray]] = []
        self._pool_lock = threading.Lock()

    def _finish(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
        terms: list[str] | _MappedTerms,
    ) -> None:
        """Set every statistic from the CSC arrays (columns may not have df 0)."""
        self._indptr = indptr
        self._indices = indices
        self._tf = tf
        self.doc_len = doc_len
        self._terms_src = terms
        self._terms_list: list[str] | None = terms if isinstance(terms, list) else None
        self._vocab: dict[str, int] | None = None
        self._memo: dict[str, int | None] = {}
        # columns the compiled kernels have prepared (ids checked increasing and < N, largest
        # impact in colmax, quantized impact bytes in quant): see _bm25_numba.prepare; the
        # arrays are allocated on the kernels' first use (quant's pages as columns are used)
        self._valid = np.zeros(int(indptr.shape[0]) - 1, dtype=np.uint8)
        self._prepared: tuple[np.ndarray, np.ndarray] | None = None
        self._prepare_lock = threading.Lock()
        self._csr: sp.csr_matrix | None = None
        n = int(doc_len.shape[0])
        self.corpus_size = n
        total = int(doc_len.sum(dtype=np.int64))
        self.avgdl = total / n if n else 0.0
        df = np.diff(indptr)
        self.idf, self.average_idf = floor_idf(robertson_idf(n, df), self.epsilon)
        dl = doc_len.astype(np.float64)
        if self.avgdl > 0:
            # rank_bm25's expression and order of operations
            self._norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl)
        else:
            self._norm = np.zeros(n, dtype=np.float64)

    @classmethod
    def _from_arrays(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
        terms: list[str],
        k1: float,
        b: float,
        epsilon: float,
        backend: Backend = "auto",
    ) -> BM25Okapi:
        """Build from CSC arrays, dropping columns with no posting (rank_bm25's vocabulary)."""
        df = np.diff(indptr)
        if df.size and not df.all():
            keep = np.flatnonzero(df > 0)
            new_indptr = np.zeros(keep.size + 1, dtype=np.int64)
            np.cumsum(df[keep], out=new_indptr[1:])
            terms = [terms[i] for i in keep.tolist()]
            indptr = new_indptr
        self = cls.__new__(cls)
        self._set_params(k1, b, epsilon)
        self._set_backend(backend)
        self._finish(indptr, indices, tf, doc_len, terms)
        return self

    @classmethod
    def from_counts(
        cls,
        counts: sp.spmatrix,
        terms: Sequence[str],
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
    ) -> BM25Okapi:
        """Build from a (documents x terms) count matrix and its column names.

        Columns with no occurrence are dropped (rank_bm25's vocabulary has df > 0 only).
        """
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
        tf = data.astype(_narrow_uint(int(data.max()) if data.size else 0))
        doc_len = np.asarray(m.sum(axis=1)).ravel().astype(np.int64)
        return cls._from_arrays(
            m.indptr.astype(np.int64),
            m.indices.astype(np.int32),
            tf,
            doc_len,
            list(terms),
            k1,
            b,
            epsilon,
        )

    @classmethod
    def merge(
        cls,
        shards: Sequence[BM25Okapi],
        *,
        out: str | os.PathLike[str] | None = None,
        backend: Backend = "auto",
    ) -> BM25Okapi:
        """One index over the documents of ``shards`` in order (shard 0's first), with global
        statistics (N, avgdl, df and idf over all shards), equal to a fresh build on the
        concatenated corpus. Shards must share ``k1``, ``b`` and ``epsilon``; they may be
        memory-mapped (:meth:`load`) and are read one block of postings at a time.

        With ``out`` the posting arrays are written straight into ``out`` (a :meth:`save`
        directory, crash-safe generation swap) through memory maps and the saved index is
        returned memory-mapped, so the merged postings never need anonymous memory: the
        out-of-core path for corpora larger than RAM.

        Memory (``out=None``): the result, 5 bytes per posting (int32 id + uint8 count) + 16
        per document + the vocabulary, plus ~32 bytes per posting of one block (at most
        2**22 postings). With ``out``: the vocabulary, 16 bytes per document and the block.
        """
        shards = list(shards)
        if not shards:
            raise ConfigurationError("merge needs at least one shard")
        params = {(s.k1, s.b, s.epsilon) for s in shards}
        if len(params) != 1:
            raise ConfigurationError(f"shards have different (k1, b, epsilon): {sorted(params)}")
        k1, b, eps = params.pop()
        vocab: dict[str, int] = {}
        remaps: list[np.ndarray] = []
        for s in shards:
            remaps.append(
                np.fromiter((vocab.setdefault(t, len(vocab)) for t in s.terms), dtype=np.int64)
            )
        v = len(vocab)
        df = np.zeros(v, dtype=np.int64)
        for s, remap in zip(shards, remaps, strict=True):
            np.add.at(df, remap, np.diff(s._indptr))
        indptr = np.zeros(v + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        total_docs = sum(s.corpus_size for s in shards)
        if total_docs > np.iinfo(np.int32).max:
            raise ConfigurationError(f"{total_docs} documents exceed the int32 document ids")
        tf_dt = np.result_type(np.uint8, *(s._tf.dtype for s in shards))
        doc_len = np.concatenate([np.asarray(s.doc_len, dtype=np.int64) for s in shards])
        terms = list(vocab)
        del vocab
        if out is None:
            indices = np.empty(nnz, dtype=np.int32)
            tf = np.empty(nnz, dtype=tf_dt)
            _merge_postings(shards, remaps, indptr, indices, tf)
            return cls._from_arrays(indptr, indices, tf, doc_len, terms, k1, b, eps, backend)
        with replace_dir(out) as gen:
            m_ind = _out_memmap(gen / "indices.npy", np.dtype(np.int32), nnz)
            m_tf = _out_memmap(gen / "tf.npy", np.dtype(tf_dt), nnz)
            _merge_postings(shards, remaps, indptr, m_ind, m_tf)
            for m in (m_ind, m_tf):
                if isinstance(m, np.memmap):
                    m.flush()
            del m_ind, m_tf
            merged = cls._from_arrays(
                indptr, np.zeros(0, np.int32), np.zeros(0, np.uint8), doc_len, terms, k1, b, eps
            )
            for name, arr in merged._arrays().items():
                if name in ("indices", "tf"):
                    continue
                _write_npy(gen / _npy_name(name), arr)
            meta = merged._meta() | {"nnz": nnz, "tf_dtype": np.dtype(tf_dt).name}
            write_manifest(gen, kind=_KIND, format_version=BM25_FORMAT_VERSION, meta=meta)
        return cls.load(out, verify="lazy", backend=backend)

    def add_documents(self, tokenized_docs: Iterable[Sequence[str]]) -> BM25Okapi:
        """A new index with ``tokenized_docs`` appended (their indices follow the old ones)."""
        extra = BM25Okapi(tokenized_docs, self.k1, self.b, self.epsilon)
        return BM25Okapi.merge([self, extra], backend=self.backend)  # type: ignore[arg-type]

    def remove_documents(self, indices: Iterable[int]) -> BM25Okapi:
        """A new index without the documents at ``indices`` (the others keep their order)."""
        drop = np.zeros(self.corpus_size, dtype=bool)
        idx = np.asarray(list(indices), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.corpus_size):
            raise ConfigurationError(
                f"document indices must be in [0, {self.corpus_size}), got {idx.tolist()[:10]}"
            )
        drop[idx] = True
        new_id = np.cumsum(~drop) - 1
        keep_post = ~drop[self._indices]
        v = self._indptr.size - 1
        col_of = np.repeat(np.arange(v, dtype=np.int64), np.diff(self._indptr))
        kept_per_col = np.bincount(col_of[keep_post], minlength=v)
        del col_of
        indptr = np.zeros(self._indptr.size, dtype=np.int64)
        np.cumsum(kept_per_col, out=indptr[1:])
        new_indices = new_id[np.asarray(self._indices)[keep_post]].astype(np.int32)
        new_tf = np.asarray(self._tf)[keep_post]
        doc_len = np.asarray(self.doc_len)[~drop].astype(np.int64)
        return BM25Okapi._from_arrays(
            indptr,
            new_indices,
            new_tf,
            doc_len,
            self.terms,
            self.k1,
            self.b,
            self.epsilon,
            self.backend,  # type: ignore[arg-type]
        )

    # ------------------------------------------------------------------ accessors
    @property
    def terms(self) -> list[str]:
        """Column id -> token (decoded on first use for a loaded index)."""
        if self._terms_list is None:
            assert isinstance(self._terms_src, _MappedTerms)
            self._terms_list = self._terms_src.terms()
        return self._terms_list

    @property
    def vocab(self) -> dict[str, int]:
        """Token -> column id (built on first use for a loaded index)."""
        if self._vocab is None:
            self._vocab = {t: i for i, t in enumerate(self.terms)}
        return self._vocab

    @property
    def nnz(self) -> int:
        """Number of postings (distinct (document, term) pairs)."""
        return int(self._indptr[-1]) if self._indptr.size else 0

    def _column(self, token: str) -> int | None:
        if self._vocab is not None or isinstance(self._terms_src, list):
            return self.vocab.get(token)
        # loaded index: hash lookups in the mapped term table, memoised (bounded)
        memo = self._memo
        if token in memo:
            return memo[token]
        j = self._terms_src.get(token)
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[token] = j
        return j

    @property
    def counts(self) -> sp.csr_matrix:
        """The (documents x terms) term-count matrix (a new one; columns follow :attr:`terms`)."""
        return self._doc_rows().copy()

    def _doc_rows(self) -> sp.csr_matrix:
        if self._csr is None:
            csc = sp.csc_matrix(
                (
                    np.asarray(self._tf, dtype=np.float64),
                    np.asarray(self._indices),
                    np.asarray(self._indptr),
                ),
                shape=(self.corpus_size, len(self._indptr) - 1),
            )
            self._csr = csc.tocsr()
        return self._csr

    def doc_term_counts(self, i: int) -> dict[str, int]:
        """``{token: count}`` of document ``i`` (builds a row index on first use)."""
        if not 0 <= i < self.corpus_size:
            raise ConfigurationError(f"document index must be in [0, {self.corpus_size}), got {i}")
        rows = self._doc_rows()
        lo, hi = int(rows.indptr[i]), int(rows.indptr[i + 1])
        terms = self.terms
        return {
            terms[j]: int(c)
            for j, c in zip(rows.indices[lo:hi].tolist(), rows.data[lo:hi].tolist(), strict=True)
        }

    # ------------------------------------------------------------------ scoring
    def _query_columns(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(columns, idf weights, counts) of the known query tokens, first-occurrence order."""
        _check_tokens(tokens, "query")
        cols: list[int] = []
        cnts: list[float] = []
        for tok, c in Counter(tokens).items():
            j = self._column(tok) if isinstance(tok, str) else None
            if j is not None:
                cols.append(j)
                cnts.append(float(c))
        idx = np.asarray(cols, dtype=np.int64)
        return idx, self.idf[idx], np.asarray(cnts, dtype=np.float64)

    def _kernel(self) -> dict[str, Any] | None:
        if self.backend == "numpy" or (
            self.backend == "auto" and self.corpus_size < AUTO_NUMBA_MIN_DOCS
        ):
            return None
        if not self._kernels_loaded:
            self._kernels = _bm25_kernels.load()
            self._kernels_loaded = True
            if self._kernels is None and self.backend == "numba":
                raise ConfigurationError(
                    "backend='numba' needs numba; run: pip install 'llama-index-car[fast]'"
                )
        return self._kernels

    def _corrupt(self) -> IndexPersistError:
        return IndexPersistError(
            "posting lists are inconsistent (document ids out of range or not increasing, or "
            "zero counts); the index files (indices.npy, tf.npy) were altered after saving "
            "or while loaded: save or build the index again"
        )

    def get_scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for one query (float64 array of length N).

        >>> BM25Okapi([["a"], ["b"], ["b"]]).get_scores(["a", "a"]).round(4).tolist()
        [1.0217, 0.0, 0.0]
        """
        cols, weights, cnts = self._query_columns(tokens)
        out = np.zeros(self.corpus_size, dtype=np.float64)
        if not cols.size:
            return out
        k1p1 = self.k1 + 1
        kern = self._kernel()
        if kern is not None:
            self._prepare(kern, cols)
            if not kern["scores"](
                self._indptr, self._indices, self._tf, self._norm, cols, weights, cnts, k1p1, out
            ):
                raise self._corrupt()
            return out
        n = self.corpus_size
        for j, w, cnt in zip(cols.tolist(), weights.tolist(), cnts.tolist(), strict=True):
            lo, hi = int(self._indptr[j]), int(self._indptr[j + 1])
            if hi <= lo:
                continue
            docs = np.asarray(self._indices[lo:hi], dtype=np.int64)
            if docs[0] < 0 or docs[-1] >= n or (docs.size > 1 and (np.diff(docs) <= 0).any()):
                raise self._corrupt()
            t = np.asarray(self._tf[lo:hi], dtype=np.float64)
            if t.min() <= 0:  # a zero count (0/0 for an empty document): altered files
                raise self._corrupt()
            out[docs] += w * (t * k1p1 / (t + self._norm[docs])) * cnt
        return out

    def get_batch_scores(self, queries: Sequence[Sequence[str]]) -> np.ndarray:
        """Scores for many queries, shape ``(len(queries), N)``.

        Note: rank_bm25's ``get_batch_scores(query, doc_ids)`` scores one query on a subset of
        documents; this method scores many queries on all documents.
        """
        out = np.zeros((len(queries), self.corpus_size), dtype=np.float64)
        for i, q in enumerate(queries):
            out[i] = self.get_scores(q)
        return out

    def _prepare(self, kern: dict[str, Any], cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(colmax, quant) with every column of ``cols`` checked and quantized (once per
        column, under a lock; raises on corrupt postings)."""
        prepared = self._prepared
        if prepared is not None and self._valid[cols].all():
            return prepared
        with self._prepare_lock:
            if self._prepared is None:
                # np.zeros: pages are mapped lazily, so only used columns cost memory
                self._prepared = (
                    np.zeros(self._valid.shape[0], dtype=np.float64),
                    np.zeros(int(self._indices.shape[0]), dtype=np.uint8),
                )
            colmax, quant = self._prepared
            ok = kern["prepare"](
                self._indptr,
                self._indices,
                self._tf,
                self._norm,
                self.k1 + 1,
                cols,
                self._valid,
                colmax,
                quant,
            )
            if not ok:
                raise self._corrupt()
            return self._prepared

    def _buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """Reusable (float32 accumulator, int32 document ids) of length N; one pair per
        concurrent query (a pool). The kernel leaves the accumulator zeroed."""
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        n = self.corpus_size
        return np.zeros(n, np.float32), np.empty(n, np.int32)

    def top_k(self, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``min(k, N)`` best documents: ``(indices, scores)``, score desc then index asc.

        Zero-score documents are included when fewer than ``k`` documents match.

        >>> BM25Okapi([["a"], ["b"], ["c"], ["d"], ["a", "b"]]).top_k(["b"], 2)[0].tolist()
        [1, 4]
        """
        if not isinstance(k, int | np.integer) or k < 0:
            raise ConfigurationError(f"k must be an int >= 0, got {k!r}")
        k = min(int(k), self.corpus_size)
        kern = self._kernel()
        if kern is None or k == 0:
            return top_k_from_scores(self.get_scores(tokens), k)
        cols, weights, cnts = self._query_columns(tokens)
        if not cols.size:
            return top_k_from_scores(np.zeros(self.corpus_size), k)
        colmax, quant = self._prepare(kern, cols)
        acc, ids = self._buffers()
        out_s = np.empty(k, dtype=np.float64)
        out_i = np.empty(k, dtype=np.int64)
        status = -3
        try:
            size, status = kern["top_k"](
                self._indptr,
                self._indices,
                self._tf,
                cols,
                weights,
                cnts,
                self.k1 + 1,
                k,
                self._norm,
                colmax,
                quant,
                acc,
                ids,
                out_s,
                out_i,
            )
        finally:
            if status != -3:  # -3 (or an exception) leaves acc dirty: drop the pair
                with self._pool_lock:
                    self._pool.append((acc, ids))
        if status == -3:  # a posting read out of range: the mapped files changed
            raise self._corrupt()
        if status == -2:  # fewer than k matching documents (or a negative idf): dense path
            return top_k_from_scores(self.get_scores(tokens), k)
        order = np.lexsort((out_i, -out_s))
        return out_i[order], out_s[order]

    def top_k_batch(
        self, queries: Sequence[Sequence[str]], k: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top_k` for each query, in order."""
        if not isinstance(k, int | np.integer) or k < 0:
            raise ConfigurationError(f"k must be an int >= 0, got {k!r}")
        return [self.top_k(q, k) for q in queries]

    # ------------------------------------------------------------------ persistence
    def _arrays(self) -> dict[str, np.ndarray]:
        if isinstance(self._terms_src, _MappedTerms):
            t = self._terms_src
            table = {
                "terms": np.asarray(t.blob),
                "term_offsets": np.asarray(t.offsets),
                "term_hash": np.asarray(t.hashes),
                "term_order": np.asarray(t.order),
            }
        else:
            table = _term_table(self.terms)
        return {
            "indptr": np.asarray(self._indptr, dtype=np.int64),
            "indices": np.asarray(self._indices, dtype=np.int32),
            "tf": np.asarray(self._tf),
            "doc_len": np.asarray(self.doc_len, dtype=np.int64),
            **table,
        }

    def _meta(self) -> dict[str, Any]:
        return {
            "k1": self.k1,
            "b": self.b,
            "epsilon": self.epsilon,
            "corpus_size": self.corpus_size,
            "vocab_size": len(self._indptr) - 1,
            "nnz": self.nnz,
            "tf_dtype": np.dtype(self._tf.dtype).name,
        }

    def write_to(self, root: str | os.PathLike[str]) -> None:
        """Write the arrays and ``manifest.json`` into the existing empty directory ``root``
        (no generations: for embedding in a caller's own crash-safe directory)."""
        root = Path(root)
        for name, arr in self._arrays().items():
            _write_npy(root / _npy_name(name), arr)
        write_manifest(root, kind=_KIND, format_version=BM25_FORMAT_VERSION, meta=self._meta())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Persist to the directory ``path`` (crash-safe generation swap, see ``_persist``).

        Layout (format 2): ``indptr.npy`` int64 (V+1), ``indices.npy`` int32 (postings:
        document ids ascending per term), ``tf.npy`` uint8/16/32 (counts), ``doc_len.npy``
        int64 (N), the term table ``terms.npy`` (UTF-8 bytes), ``term_offsets.npy`` int64
        (V+1), ``term_hash.npy`` uint64 (sorted blake2b-64 of each term), ``term_order.npy``
        int32 (column of each sorted hash), and ``manifest.json`` (kind, version, k1/b/epsilon,
        sizes, each file's sha256). No pickle.
        """
        with replace_dir(path) as gen:
            self.write_to(gen)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        mmap: bool = True,
        verify: Verify = "auto",
        backend: Backend = "auto",
    ) -> BM25Okapi:
        """Load an index written by :meth:`save` (or :meth:`write_to`).

        Args:
            mmap: memory-map the arrays (pages are read on demand; nothing of size N x terms
                is read before the first query).
            verify: ``"full"`` checks every file's sha256 and every posting (ids in range and
                increasing, counts > 0, lengths = column sums, term hashes); ``"lazy"`` checks
                file sizes, dtypes, shapes and the O(V + N) structure (pointers monotone, term
                table consistent), and the query kernels check each posting they read;
                ``"auto"`` (default) is ``"full"`` up to 16 MiB of files, else ``"lazy"``.
                Either way every document id a kernel uses is bounds-checked where it is
                used, so arrays altered even after loading give ``IndexPersistError``, not an
                out-of-bounds access; truncating a memory-mapped file while it is loaded
                raises SIGBUS (inherent to mmap: keep index files read-only).

        Raises:
            IndexPersistError: naming the file and the problem (format 1 indices included:
                they must be rebuilt).
        """
        if verify not in ("auto", "full", "lazy"):
            raise ConfigurationError(f"verify must be 'auto', 'full' or 'lazy', got {verify!r}")
        return load_live(path, lambda root: cls._load_dir(root, mmap, verify, backend))

    @classmethod
    def _load_dir(cls, root: Path, mmap: bool, verify: str, backend: Backend) -> BM25Okapi:
        manifest = read_manifest(
            root,
            kind=_KIND,
            format_versions=(BM25_FORMAT_VERSION,),
            verify=False,
            required=[_npy_name(a) for a in _ARRAYS],
        )
        files: dict[str, Any] = manifest["files"]
        # decide and check from the files this loader reads, never from what the manifest
        # merely lists (a padding entry cannot push a small index to "lazy")
        read = [_npy_name(a) for a in _ARRAYS]
        sizes: dict[str, int] = {}
        for name in read:
            fp = root / name
            try:
                st = os.stat(fp)
            except OSError as exc:
                raise IndexPersistError(f"{fp} is missing; save the index again") from exc
            if st.st_size != files[name]["bytes"]:
                raise IndexPersistError(
                    f"{fp} is {st.st_size} bytes, manifest.json says {files[name]['bytes']}; "
                    "save the index again"
                )
            sizes[name] = st.st_size
        full = verify == "full" or (verify == "auto" and sum(sizes.values()) <= AUTO_VERIFY_BYTES)
        if full:
            for name in read:
                if sha256_file(root / name) != files[name]["sha256"]:
                    raise IndexPersistError(
                        f"{root / name} is corrupt (sha256 differs from manifest.json); "
                        "save the index again"
                    )
        meta = manifest.get("meta")
        mpath = root / "manifest.json"
        if not isinstance(meta, dict):
            raise IndexPersistError(f"{mpath} has no meta table; save the index again")
        n = _int_field(meta, "corpus_size", mpath)
        v = _int_field(meta, "vocab_size", mpath)
        nnz = _int_field(meta, "nnz", mpath)
        if n > np.iinfo(np.int32).max:
            raise IndexPersistError(f"{mpath}: corpus_size {n} exceeds int32 document ids")
        a = {name: _load_npy(root, name, mmap) for name in _ARRAYS}
        p = {name: root / _npy_name(name) for name in _ARRAYS}
        _expect(p["indptr"], a["indptr"], (np.int64,), v + 1)
        _expect(p["indices"], a["indices"], (np.int32,), nnz)
        _expect(p["tf"], a["tf"], (np.uint8, np.uint16, np.uint32), nnz)
        _expect(p["doc_len"], a["doc_len"], (np.int64,), n)
        _expect(p["terms"], a["terms"], (np.uint8,), None)
        _expect(p["term_offsets"], a["term_offsets"], (np.int64,), v + 1)
        _expect(p["term_hash"], a["term_hash"], (np.uint64,), v)
        _expect(p["term_order"], a["term_order"], (np.int32,), v)
        # a private copy (V + 1 int64, the size of idf): the kernels index with it, so it must
        # not change under them (indices/tf may stay mapped: every id is checked as read)
        indptr = np.array(a["indptr"])
        if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) <= 0).any():
            raise IndexPersistError(
                f"{p['indptr']}: column pointers must start at 0, increase strictly and end at "
                f"nnz={nnz}; save the index again"
            )
        doc_len = np.asarray(a["doc_len"])
        if n and doc_len.min() < 0:
            raise IndexPersistError(f"{p['doc_len']}: negative document length")
        off = np.asarray(a["term_offsets"])
        if off[0] != 0 or off[-1] != a["terms"].shape[0] or (np.diff(off) < 0).any():
            raise IndexPersistError(f"{p['term_offsets']}: offsets do not fit terms.npy")
        hashes = np.asarray(a["term_hash"])
        order = np.asarray(a["term_order"])
        if v and (
            (hashes[1:] < hashes[:-1]).any()
            or order.min() < 0
            or order.max() >= v
            or not (np.bincount(order, minlength=v) == 1).all()
        ):
            raise IndexPersistError(f"{p['term_hash']} / term_order.npy: not a valid term index")
        table = _MappedTerms(a["terms"], off, hashes, order)
        if full:
            cls._check_postings(root, a, table, n, indptr)
        self = cls.__new__(cls)
        try:
            self._set_params(
                _float_field(meta, "k1", mpath),
                _float_field(meta, "b", mpath),
                _float_field(meta, "epsilon", mpath),
            )
        except ConfigurationError as exc:
            raise IndexPersistError(f"{mpath}: {exc}") from exc
        self._set_backend(backend)
        self._finish(indptr, a["indices"], a["tf"], doc_len, table)
        return self

    @staticmethod
    def _check_postings(
        root: Path, a: dict[str, np.ndarray], table: _MappedTerms, n: int, indptr: np.ndarray
    ) -> None:
        indices = np.asarray(a["indices"])
        where = root / "indices.npy"
        if indices.size:
            if indices.min() < 0 or indices.max() >= n:
                raise IndexPersistError(f"{where}: document ids out of [0, {n})")
            step = np.diff(indices.astype(np.int64))
            boundary = np.zeros(step.size, dtype=bool)
            starts = indptr[1:-1]
            boundary[starts[(starts > 0) & (starts <= step.size)] - 1] = True
            if ((step <= 0) & ~boundary).any():
                raise IndexPersistError(f"{where}: document ids not increasing within a term")
        tf = np.asarray(a["tf"])
        if tf.size and tf.min() == 0:
            raise IndexPersistError(f"{root / 'tf.npy'}: zero term counts")
        sums = np.bincount(indices, weights=tf, minlength=n) if n else np.zeros(0)
        if not np.array_equal(sums.astype(np.int64), np.asarray(a["doc_len"])):
            raise IndexPersistError(
                f"{root / 'doc_len.npy'}: lengths differ from the sums of the term counts"
            )
        # every term's hash must be where the sorted index says it is
        raw = bytes(table.blob)
        off = table.offsets.tolist()
        got = np.fromiter(
            (_term_hash(raw[off[j] : off[j + 1]]) for j in table.order.tolist()),
            dtype=np.uint64,
            count=len(table),
        )
        if not np.array_equal(got, np.asarray(table.hashes)):
            raise IndexPersistError(f"{root / 'term_hash.npy'}: term hashes do not match terms")
        table.terms()  # decodes, or raises IndexPersistError

    # ------------------------------------------------------------------ misc
    def __len__(self) -> int:
        return self.corpus_size

    def __repr__(self) -> str:
        return (
            f"BM25Okapi(N={self.corpus_size}, vocab={len(self._indptr) - 1}, nnz={self.nnz}, "
            f"k1={self.k1}, b={self.b}, epsilon={self.epsilon})"
        )
