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

Speed: the per-(document, term) contributions are precomputed once into a CSC matrix, so a
query is one column slice + mat-vec in scipy's C code (the layout of ``bm25s``; float64 to
keep parity). ``top_k`` partitions only the documents above a threshold taken from a strided
sample of the scores (about ``sqrt(N * k)`` of them), then orders by score desc, index asc.

A repeated query token is scored as ``count * w`` where rank_bm25 adds ``w`` ``count`` times;
the two differ by at most a few ulps (far inside the 1e-9 parity tolerance).

Example:
    >>> bm25 = BM25Okapi([["설치", "기준"], ["배수", "시설"], ["설치", "시설"], ["기준"], ["배수"]])
    >>> idx, scores = bm25.top_k(["설치", "기준"], k=2)
    >>> idx.tolist(), scores.round(4).tolist()
    ([0, 3], [0.6049, 0.4048])
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain

import numpy as np
import scipy.sparse as sp

from llama_index_car._errors import ConfigurationError

__all__ = ["BM25Okapi", "top_k_from_scores"]


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


class BM25Okapi:
    """Sparse BM25Okapi with rank_bm25's exact semantics (see the module docstring).

    Args:
        tokenized_corpus: one token list per document (e.g. ``KiwiTokenizer.tokenize_batch``).
        k1: term-frequency saturation, ``>= 0`` (default 1.5, as rank_bm25).
        b: length normalisation in ``[0, 1]`` (default 0.75).
        epsilon: floor factor for negative idf, ``epsilon * average_idf`` (default 0.25).

    Attributes:
        corpus_size: N. ``avgdl``: mean document length (0.0 for an empty corpus).
        vocab: token -> column id. ``idf``: floored idf per column. ``average_idf``: unfloored
        mean idf. ``doc_len``: tokens per document.

    Objects are immutable: :meth:`add_documents` and :meth:`remove_documents` return new ones
    whose scores equal a fresh build on the resulting corpus.

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
    ) -> None:
        self._set_params(k1, b, epsilon)
        docs = tokenized_corpus if isinstance(tokenized_corpus, list) else list(tokenized_corpus)
        lengths = np.empty(len(docs), dtype=np.int64)
        for i, doc in enumerate(docs):
            _check_tokens(doc, f"document {i}")
            lengths[i] = len(doc)
        flat = list(chain.from_iterable(docs))
        vocab = {t: i for i, t in enumerate(dict.fromkeys(flat))}
        cols = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        del flat
        n = len(docs)
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        counts = sp.csr_matrix(
            (np.ones(cols.size, dtype=np.float64), (rows, cols)), shape=(n, len(vocab))
        )
        counts.sum_duplicates()
        self._finish(counts, list(vocab))

    # ------------------------------------------------------------------ construction
    def _set_params(self, k1: float, b: float, epsilon: float) -> None:
        if not (math.isfinite(k1) and k1 >= 0):
            raise ConfigurationError(f"k1 must be a finite number >= 0, got {k1!r}")
        if not (math.isfinite(b) and 0 <= b <= 1):
            raise ConfigurationError(f"b must be in [0, 1], got {b!r}")
        if not math.isfinite(epsilon):
            raise ConfigurationError(f"epsilon must be a finite number, got {epsilon!r}")
        self.k1 = float(k1)
        self.b = float(b)
        self.epsilon = float(epsilon)

    def _finish(self, counts: sp.csr_matrix, terms: list[str]) -> None:
        """Set all statistics from a (N x V) term-count matrix whose columns all have df > 0."""
        self._counts = counts.tocsr()
        self.terms = terms
        self.vocab = {t: i for i, t in enumerate(terms)}
        n = counts.shape[0]
        self.corpus_size = int(n)
        self.doc_len = np.asarray(self._counts.sum(axis=1)).ravel().astype(np.int64)
        total = int(self.doc_len.sum())
        self.avgdl = total / n if n else 0.0
        csc = self._counts.tocsc()
        csc.sort_indices()
        df = np.diff(csc.indptr)
        self.idf, self.average_idf = floor_idf(robertson_idf(n, df), self.epsilon)
        if csc.nnz:
            col_of = np.repeat(np.arange(csc.shape[1]), df)
            data = okapi_term_weights(
                csc.data, self.doc_len[csc.indices], self.idf[col_of], self.avgdl, self.k1, self.b
            )
        else:
            data = np.zeros(0, dtype=np.float64)
        self._w = sp.csc_matrix(
            (np.asarray(data, dtype=np.float64), csc.indices, csc.indptr), shape=csc.shape
        )

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
        Used to reload a persisted index without re-tokenizing.
        """
        counts = sp.csc_matrix(counts, dtype=np.float64, copy=True)
        if counts.shape[1] != len(terms):
            raise ConfigurationError(
                f"count matrix has {counts.shape[1]} columns but {len(terms)} terms were given"
            )
        if counts.nnz and (counts.data < 0).any():
            raise ConfigurationError("count matrix holds negative term counts")
        counts.eliminate_zeros()
        keep = np.flatnonzero(np.diff(counts.indptr) > 0)
        self = cls.__new__(cls)
        self._set_params(k1, b, epsilon)
        self._finish(counts[:, keep].tocsr(), [terms[i] for i in keep.tolist()])
        return self

    def add_documents(self, tokenized_docs: Iterable[Sequence[str]]) -> BM25Okapi:
        """A new index with ``tokenized_docs`` appended (their indices follow the old ones)."""
        extra = BM25Okapi(tokenized_docs, self.k1, self.b, self.epsilon)
        terms = list(self.terms)
        vocab = dict(self.vocab)
        for t in extra.terms:
            if t not in vocab:
                vocab[t] = len(terms)
                terms.append(t)
        remap = np.array([vocab[t] for t in extra.terms], dtype=np.int64)
        old = self._counts.copy()
        old.resize((old.shape[0], len(terms)))
        new = extra._counts.tocoo()
        new = sp.csr_matrix(
            (new.data, (new.row, remap[new.col])), shape=(extra.corpus_size, len(terms))
        )
        return BM25Okapi.from_counts(sp.vstack([old, new]), terms, self.k1, self.b, self.epsilon)

    def remove_documents(self, indices: Iterable[int]) -> BM25Okapi:
        """A new index without the documents at ``indices`` (the others keep their order)."""
        drop = np.zeros(self.corpus_size, dtype=bool)
        idx = np.asarray(list(indices), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.corpus_size):
            raise ConfigurationError(
                f"document indices must be in [0, {self.corpus_size}), got {idx.tolist()[:10]}"
            )
        drop[idx] = True
        kept = self._counts[np.flatnonzero(~drop)]
        return BM25Okapi.from_counts(kept, self.terms, self.k1, self.b, self.epsilon)

    @property
    def counts(self) -> sp.csr_matrix:
        """The (documents x terms) term-count matrix (a copy; columns follow :attr:`terms`)."""
        return self._counts.copy()

    # ------------------------------------------------------------------ scoring
    def _query_columns(self, tokens: Sequence[str]) -> list[tuple[int, int]]:
        _check_tokens(tokens, "query")
        cols: list[tuple[int, int]] = []
        for tok, c in Counter(tokens).items():
            j = self.vocab.get(tok)
            if j is not None:
                cols.append((j, c))
        return cols

    def get_scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for one query (float64 array of length N).

        >>> BM25Okapi([["a"], ["b"], ["b"]]).get_scores(["a", "a"]).round(4).tolist()
        [1.0217, 0.0, 0.0]
        """
        cols = self._query_columns(tokens)
        if not cols:
            return np.zeros(self.corpus_size, dtype=np.float64)
        idx = np.fromiter((j for j, _ in cols), dtype=np.int64, count=len(cols))
        cnt = np.fromiter((c for _, c in cols), dtype=np.float64, count=len(cols))
        # scipy's CSC column slice + mat-vec: sum_j count_j * w[:, j], in C.
        return np.asarray(self._w[:, idx] @ cnt, dtype=np.float64)

    def get_batch_scores(self, queries: Sequence[Sequence[str]]) -> np.ndarray:
        """Scores for many queries, shape ``(len(queries), N)``.

        Note: rank_bm25's ``get_batch_scores(query, doc_ids)`` scores one query on a subset of
        documents; this method scores many queries on all documents.
        """
        q_rows: list[int] = []
        q_cols: list[int] = []
        q_vals: list[float] = []
        for qi, q in enumerate(queries):
            for j, c in self._query_columns(q):
                q_rows.append(j)
                q_cols.append(qi)
                q_vals.append(float(c))
        nq = len(queries)
        v = len(self.terms)
        qm = sp.csc_matrix((q_vals, (q_rows, q_cols)), shape=(v, nq), dtype=np.float64)
        return np.asarray((self._w @ qm).T.toarray(), dtype=np.float64)

    def top_k(self, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``min(k, N)`` best documents: ``(indices, scores)``, score desc then index asc.

        Zero-score documents are included when fewer than ``k`` documents match.

        >>> BM25Okapi([["a"], ["b"], ["c"], ["d"], ["a", "b"]]).top_k(["b"], 2)[0].tolist()
        [1, 4]
        """
        if k < 0:
            raise ConfigurationError(f"k must be >= 0, got {k}")
        return top_k_from_scores(self.get_scores(tokens), k)

    def top_k_batch(
        self, queries: Sequence[Sequence[str]], k: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top_k` for each query, in order.

        A loop over the single-query path: for top-k it is faster than materialising the
        dense ``(queries x N)`` matrix of :meth:`get_batch_scores`.
        """
        if k < 0:
            raise ConfigurationError(f"k must be >= 0, got {k}")
        return [self.top_k(q, k) for q in queries]

    def __len__(self) -> int:
        return self.corpus_size

    def __repr__(self) -> str:
        return (
            f"BM25Okapi(N={self.corpus_size}, vocab={len(self.terms)}, k1={self.k1}, "
            f"b={self.b}, epsilon={self.epsilon})"
        )
