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

Where things live: the score functions and :class:`BM25Okapi` here; the index arrays and term
table in :mod:`~llama_index_car._bm25_arrays`; building and the one merge in
:mod:`~llama_index_car._bm25_build`; files, the one writer and the integrity checks (run once,
at load) in :mod:`~llama_index_car._bm25_storage`; query-time scoring (numpy path, numba
kernels, buffer pool) in :mod:`~llama_index_car._bm25_kernels`.

Example:
    >>> bm25 = BM25Okapi([["설치", "기준"], ["배수", "시설"], ["설치", "시설"], ["기준"], ["배수"]])
    >>> idx, scores = bm25.top_k(["설치", "기준"], k=2)
    >>> idx.tolist(), scores.round(4).tolist()
    ([0, 3], [0.6049, 0.4048])
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from llama_index_car import _bm25_build as _build
from llama_index_car._bm25_arrays import Postings
from llama_index_car._bm25_arrays import term_table as _term_table  # noqa: F401 - re-export
from llama_index_car._bm25_build import check_tokens as _check_tokens
from llama_index_car._bm25_kernels import AUTO_NUMBA_MIN_DOCS as AUTO_NUMBA_MIN_DOCS
from llama_index_car._bm25_kernels import Backend, Scorer, check_backend
from llama_index_car._bm25_storage import AUTO_VERIFY_BYTES as AUTO_VERIFY_BYTES
from llama_index_car._bm25_storage import (
    Verify,
    index_meta,
    read_index,
    write_index,
)
from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._npy import write_npy as _write_npy  # noqa: F401 - re-export
from llama_index_car._persist import load_live, replace_dir

__all__ = [
    "BM25Okapi",
    "lucene_bm25",
    "okapi_term_weights",
    "robertson_idf",
]

#: Largest ``k1`` accepted (beyond it ``k1 + 1`` swamps every count; 1e308 made every
#: score inf). ``epsilon`` is accepted in ``[-EPSILON_MAX, EPSILON_MAX]``.
K1_MAX = 1000.0
EPSILON_MAX = 1000.0


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


def lucene_bm25(
    query: Sequence[str],
    counts: Sequence[Mapping[str, int]],
    lengths: Sequence[int],
    collection: Sequence[Mapping[str, int]],
    collection_lengths: Sequence[int],
    k1: float = 1.5,
    b: float = 0.75,
) -> list[float]:
    """Okapi BM25 of a handful of documents (``counts[i]``: term → count, ``lengths[i]``
    tokens of document ``i``) for the distinct ``query`` terms, with the document frequencies
    and average length of ``collection`` (term counts and lengths)::

        bm25(d) = Σ_{t ∈ set(query)} idf(t) · tf(t,d)·(k1+1) / (tf(t,d) + k1·(1 − b + b·|d|/avgdl))
        idf(t)  = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))

    The idf is Robertson–Spärck Jones' in Lucene's non-negative form (``BM25Similarity``),
    not :func:`robertson_idf` floored by ``epsilon`` (rank_bm25, :class:`BM25Okapi`): over a
    node's few spans most terms occur in half of them or more, where the floored form gives
    ``epsilon`` · the mean idf instead of a positive idf that still orders the spans. Used by
    the criterion span ranker (:mod:`llama_index_car.postprocessors.criterion_spans`); pure
    Python (a node has tens of spans). With one term in one of two equally long documents the
    score is the idf alone (the tf part is ``(k1 + 1) / (1 + k1) = 1``): ``ln 2``.

    >>> from collections import Counter
    >>> docs = [Counter(["a", "b"]), Counter(["b", "c"])]
    >>> [round(x, 4) for x in lucene_bm25(["a", "a"], docs, [2, 2], docs, [2, 2])]
    [0.6931, 0.0]
    """
    n = len(collection)
    if n == 0 or not counts:
        return [0.0] * len(counts)
    terms = list(dict.fromkeys(query))
    avgdl = sum(collection_lengths) / n or 1.0
    idf = {}
    for t in terms:
        df = sum(1 for d in collection if t in d)
        idf[t] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    out = []
    for tf, dl in zip(counts, lengths, strict=True):
        norm = k1 * (1.0 - b + b * dl / avgdl)
        score = 0.0
        for t in terms:
            f = tf.get(t, 0)
            if f:
                score += idf[t] * f * (k1 + 1.0) / (f + norm)
        out.append(score)
    return out


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


def _check_params(k1: object, b: object, epsilon: object) -> tuple[float, float, float]:
    """``(k1, b, epsilon)`` as floats, or a :class:`ConfigurationError` naming the range."""

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
    return float(k1), float(b), float(epsilon)  # type: ignore[arg-type]


_Params = tuple[float, float, float]


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
        params = _check_params(k1, b, epsilon)
        check_backend(backend)
        self._init(_build.build(tokenized_corpus, batch_size), params, backend, checked=True)

    # ------------------------------------------------------------------ construction
    def _init(self, postings: Postings, params: _Params, backend: str, checked: bool) -> None:
        """Set every statistic from ``postings`` (columns may not have df 0); ``checked``:
        every posting is known good (else each column is checked on its first use)."""
        self.k1, self.b, self.epsilon = params
        self.backend = backend
        self._index = postings
        self.doc_len = postings.doc_len
        n = self.corpus_size = postings.n_docs
        total = int(self.doc_len.sum(dtype=np.int64))
        self.avgdl = total / n if n else 0.0
        df = np.diff(postings.indptr)
        self.idf, self.average_idf = floor_idf(robertson_idf(n, df), self.epsilon)
        dl = self.doc_len.astype(np.float64)
        if self.avgdl > 0:
            # rank_bm25's expression and order of operations
            norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl)
        else:
            norm = np.zeros(n, dtype=np.float64)
        self._scorer = Scorer(postings, norm, self.k1 + 1, backend, checked)

    @classmethod
    def _of(
        cls, postings: Postings, params: _Params, backend: str = "auto", checked: bool = True
    ) -> BM25Okapi:
        self = cls.__new__(cls)
        self._init(postings, params, backend, checked)
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
        postings = _build.from_counts(counts, terms)
        return cls._of(postings, _check_params(k1, b, epsilon))

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
        directory, crash-safe generation swap, the writer of :meth:`write_to`) through
        memory maps and the saved index is returned memory-mapped, so the merged postings
        never need anonymous memory: the out-of-core path for corpora larger than RAM.

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
        k1b = params.pop()
        parts = [s._index for s in shards]
        checked = all(s._scorer.checked.all() for s in shards)
        plan = _build.plan_merge(parts)
        if out is None:
            return cls._of(_build.merge(parts, plan), k1b, backend, checked)
        with replace_dir(out) as gen:
            _build.merge_to(gen, parts, plan, k1b)
        return cls.load(out, verify="lazy", backend=backend)

    def add_documents(self, tokenized_docs: Iterable[Sequence[str]]) -> BM25Okapi:
        """A new index with ``tokenized_docs`` appended (their indices follow the old ones)."""
        extra = BM25Okapi(tokenized_docs, self.k1, self.b, self.epsilon)
        return BM25Okapi.merge([self, extra], backend=self.backend)  # type: ignore[arg-type]

    def remove_documents(self, indices: Iterable[int]) -> BM25Okapi:
        """A new index without the documents at ``indices`` (the others keep their order)."""
        kept = _build.remove(self._index, indices)
        return BM25Okapi._of(kept, (self.k1, self.b, self.epsilon), self.backend, bool(self._scorer.checked.all()))

    # ------------------------------------------------------------------ accessors
    @property
    def terms(self) -> list[str]:
        """Column id -> token (decoded on first use for a loaded index)."""
        return self._index.terms

    @property
    def vocab(self) -> dict[str, int]:
        """Token -> column id (built on first use for a loaded index)."""
        return self._index.vocab

    @property
    def nnz(self) -> int:
        """Number of postings (distinct (document, term) pairs)."""
        return self._index.nnz

    @property
    def counts(self) -> sp.csr_matrix:
        """The (documents x terms) term-count matrix (a new one; columns follow :attr:`terms`)."""
        return self._index.doc_rows().copy()

    def doc_term_counts(self, i: int) -> dict[str, int]:
        """``{token: count}`` of document ``i`` (builds a row index on first use)."""
        return self._index.doc_term_counts(i)

    # ------------------------------------------------------------------ scoring
    def _query_columns(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(columns, idf weights, counts) of the known query tokens, first-occurrence order."""
        _check_tokens(tokens, "query")
        cols: list[int] = []
        cnts: list[float] = []
        for tok, c in Counter(tokens).items():
            j = self._index.column(tok) if isinstance(tok, str) else None
            if j is not None:
                cols.append(j)
                cnts.append(float(c))
        idx = np.asarray(cols, dtype=np.int64)
        return idx, self.idf[idx], np.asarray(cnts, dtype=np.float64)

    def get_scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for one query (float64 array of length N).

        >>> BM25Okapi([["a"], ["b"], ["b"]]).get_scores(["a", "a"]).round(4).tolist()
        [1.0217, 0.0, 0.0]
        """
        cols, weights, cnts = self._query_columns(tokens)
        if not cols.size:
            return np.zeros(self.corpus_size, dtype=np.float64)
        return self._scorer.scores(cols, weights, cnts)

    def get_batch_scores(self, queries: Sequence[Sequence[str]]) -> np.ndarray:
        """Scores for many queries, shape ``(len(queries), N)``.

        Note: rank_bm25's ``get_batch_scores(query, doc_ids)`` scores one query on a subset of
        documents; this method scores many queries on all documents.
        """
        out = np.zeros((len(queries), self.corpus_size), dtype=np.float64)
        for i, q in enumerate(queries):
            out[i] = self.get_scores(q)
        return out

    def top_k(self, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``min(k, N)`` best documents: ``(indices, scores)``, score desc then index asc.

        Zero-score documents are included when fewer than ``k`` documents match.

        >>> BM25Okapi([["a"], ["b"], ["c"], ["d"], ["a", "b"]]).top_k(["b"], 2)[0].tolist()
        [1, 4]
        """
        if not isinstance(k, int | np.integer) or k < 0:
            raise ConfigurationError(f"k must be an int >= 0, got {k!r}")
        k = min(int(k), self.corpus_size)
        kern = self._scorer.kernel()
        if kern is None or k == 0:
            return top_k_from_scores(self.get_scores(tokens), k)
        cols, weights, cnts = self._query_columns(tokens)
        if not cols.size:
            return top_k_from_scores(np.zeros(self.corpus_size), k)
        got = self._scorer.top_k(kern, cols, weights, cnts, k)
        if got is None:  # fewer than k matching documents (or a negative idf): dense path
            return top_k_from_scores(self.get_scores(tokens), k)
        return got

    def top_k_batch(
        self, queries: Sequence[Sequence[str]], k: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top_k` for each query, in order."""
        if not isinstance(k, int | np.integer) or k < 0:
            raise ConfigurationError(f"k must be an int >= 0, got {k!r}")
        return [self.top_k(q, k) for q in queries]

    # ------------------------------------------------------------------ persistence
    def write_to(
        self, root: str | os.PathLike[str], *, prefix: str = "", manifest: bool = True
    ) -> dict[str, Any]:
        """Write the arrays (``prefix + name + .npy``) and, with ``manifest``,
        ``manifest.json`` into the existing directory ``root`` (no generations: for
        embedding in a caller's own crash-safe directory). Returns the manifest's ``meta``
        (parameters and sizes): a caller writing its own single manifest keeps it for
        :meth:`load`'s ``bound``."""
        p = self._index
        params = (self.k1, self.b, self.epsilon)
        meta = index_meta(params, self.corpus_size, p.n_terms, p.nnz, p.tf.dtype)
        write_index(Path(root), p.arrays(), meta, prefix=prefix, manifest=manifest)
        return meta

    def save(self, path: str | os.PathLike[str]) -> None:
        """Persist to the directory ``path`` (crash-safe generation swap, see ``_persist``).

        Layout (format 2): one plain ``.npy`` per array (postings, counts, lengths, term
        table) and ``manifest.json`` with each file's sha256; see
        :mod:`~llama_index_car._bm25_storage`. No pickle.
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
        prefix: str = "",
        bound: tuple[dict[str, Any], Any] | None = None,
    ) -> BM25Okapi:
        """Load an index written by :meth:`save` (or :meth:`write_to`); integrity is checked
        here, once, never again per query.

        Args:
            mmap: memory-map the arrays (pages are read on demand; nothing of size N x terms
                is read before the first query).
            verify: ``"full"``: every file's sha256 and every posting (ids in range and
                increasing, counts > 0, lengths = column sums, term hashes); ``"lazy"``: sizes,
                dtypes, shapes and the O(V + N) structure, and each column's postings once, on
                its first use; ``"auto"`` (default): ``"full"`` up to 16 MiB, else ``"lazy"``.
                Document ids are bounds-checked where used, so files altered after loading
                give ``IndexPersistError``, never an out-of-bounds access (truncating a mapped
                file raises SIGBUS, inherent to mmap: keep index files read-only).
            prefix, bound: arrays written by ``write_to(path, prefix=prefix,
                manifest=False)`` into a caller's directory ``path``, bound by the caller's
                manifest: ``bound`` = its ``files`` table (already read) and ``write_to``'s meta.

        Raises:
            IndexPersistError: naming the file and the problem (format 1 indices included:
                they must be rebuilt).
        """
        if verify not in ("auto", "full", "lazy"):
            raise ConfigurationError(f"verify must be 'auto', 'full' or 'lazy', got {verify!r}")
        if bound is not None:  # arrays inside a caller's directory, bound by its manifest
            return _load_dir(cls, Path(path), mmap, verify, backend, prefix, bound)
        return load_live(path, lambda root: _load_dir(cls, root, mmap, verify, backend))

    # ------------------------------------------------------------------ misc
    def __len__(self) -> int:
        return self.corpus_size

    def __repr__(self) -> str:
        return (
            f"BM25Okapi(N={self.corpus_size}, vocab={self._index.n_terms}, nnz={self.nnz}, "
            f"k1={self.k1}, b={self.b}, epsilon={self.epsilon})"
        )



def _load_dir(
    cls: type[BM25Okapi],
    root: Path,
    mmap: bool,
    verify: Verify,
    backend: Backend,
    prefix: str = "",
    bound: tuple[dict[str, Any], Any] | None = None,
) -> BM25Okapi:
    """:meth:`BM25Okapi.load` of one directory: read and checked once by ``read_index``."""
    got = read_index(root, mmap, verify, prefix=prefix, bound=bound)
    try:
        params = _check_params(*got.params)
    except ConfigurationError as exc:
        raise IndexPersistError(f"{root / 'manifest.json'}: {exc}") from exc
    check_backend(backend)
    return cls._of(got.postings, params, backend, checked=got.full)
