"""Exact Kiwi BM25 served by a store's sparse inner product (pure maths + the query engine).

rank_bm25's ``BM25Okapi`` (the local channel, :mod:`llama_index_car.bm25`) splits into a
document side and a query side:

    score(D, Q) = Σ_{t ∈ Q} count(t, Q) · idf(t) · w(t, D)
    w(t, D)     = tf·(k1 + 1) / (tf + k1·(1 − b + b·|D| / avgdl))          (doc_weights)
    q(t)        = count(t, Q) · idf(t)                                      (query_weights)
    idf(t)      = ln(N − df + 0.5) − ln(df + 0.5), floored at ε·mean(idf) when negative

so a store holding ``w(·, D)`` as a sparse vector per document returns ``Σ q(t)·w(t, D)`` as
its inner product (Milvus ``SPARSE_FLOAT_VECTOR`` with metric ``IP``, Qdrant sparse vectors).
``idf`` is query-side: it comes from the document-frequency table :class:`BM25Stats` keeps (and
persists), so inserts and deletes change it for free. ``avgdl`` is document-side: a document
written when the mean length was ``A_D`` holds weights for ``A_D``, not for today's ``A``.

**The drift bound.** With ``n(A) = k1·(1 − b + b·|D|/A)``, ``w = tf(k1+1)/(tf + n)`` and
``ρ_D = A / A_D``: for ``A ≥ A_D``, ``1 ≤ n(A_D)/n(A) ≤ ρ_D`` (because ``1 − b ≤ ρ_D(1 − b)``), so
``1 ≤ w(A)/w(A_D) = (tf + n(A_D))/(tf + n(A)) ≤ ρ_D``; symmetrically ``ρ_D ≤ w(A)/w(A_D) ≤ 1``
for ``A < A_D``. Hence, for non-negative query weights, the exact score of every document lies
in ``[lo·s_D, hi·s_D]`` where ``s_D`` is the store's (stale) inner product,
``lo = min(1, min_D ρ_D)`` and ``hi = max(1, max_D ρ_D)`` (:func:`drift_bounds`; the distinct
``A_D`` are the write versions :class:`BM25Stats` counts). A search (:meth:`SparseBM25.search`)
fetches the store's top ``K ≥ k``, rescores those documents exactly in float64 from their stored
term counts and length, and stops when ``hi·s_K·(1 + δ) < θ``, ``θ`` the k-th exact score and
``δ`` the float32 error of the store's sum (:func:`certified_over_fetch`); otherwise it fetches
4× more, up to the store's cap on one search's results (``max_limit``: 16,384 in Milvus). A
search the cap stops before it is certified, and a query with a negative weight (an idf floored
below zero: only in corpora whose mean idf is negative), rescore every document that holds a
query term (one search per term to exhaustion) or, past the cap, every row the store holds
(a scan: slow but exact; never an error). The result is exactly the local BM25's top-k (ties
by id). :meth:`SparseBM25.reweight` rewrites every document at today's ``avgdl`` (a version
bump); :func:`needs_reweight` says when the drift makes over-fetching costly
(``hi`` above :data:`REWEIGHT_AT`).

Term ids are the store's sparse dimensions: uint32, assigned once per term and never reused.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._files import read_json, write_json
from llama_index_car.bm25 import _check_params, floor_idf, robertson_idf

logger = logging.getLogger(__name__)

__all__ = [
    "REWEIGHT_AT",
    "BM25Stats",
    "SearchTrace",
    "SparseBM25",
    "certified_over_fetch",
    "drift_bounds",
    "needs_reweight",
]

#: Largest term id: Milvus and Qdrant take uint32 indices (Milvus reserves 2**32 - 1).
MAX_TERM_ID = 2**32 - 3
#: A dimension every row holds with weight 1 and no query asks for: Milvus refuses an empty
#: sparse vector, and a document without tokens still counts in N and avgdl.
PRESENCE_DIM = 2**32 - 2
#: float32 relative error allowance per summed term of a store's inner product
_F32 = 2.0**-23
#: rows fetched per store call when rescoring many
_FETCH = 1000
#: the drift bound ``hi = max(1, max ρ)`` above which an update rewrites every row at
#: today's mean length. Measured (``benchmarks/sparse_drift_bench.py``, docs/SCALE.md §3):
#: up to ``hi`` 1.25 the first fetch (4·k rows) certifies ≥ 81 % of the queries (mean rounds
#: ≤ 1.19); at 1.5 it is 26 % on legal (1.74 rounds, 4× the rows), at 2, 4 % (12× the rows),
#: and the rows fetched keep growing with the corpus until a search reaches the store's cap.
#: A shrinking mean (``min ρ < 1``) costs little: the certificate uses only ``hi``.
REWEIGHT_AT = 1.25


def doc_weights(tf: np.ndarray, doc_len: float, avgdl: float, k1: float, b: float) -> np.ndarray:
    """``tf·(k1+1) / (tf + k1·(1 − b + b·doc_len/avgdl))`` elementwise (rank_bm25's order of
    operations; 0 where ``avgdl`` is 0, as the local channel).

    >>> doc_weights(np.array([1.0, 2.0]), 3, 3.0, 1.5, 0.75).round(4).tolist()
    [1.0, 1.4286]
    """
    tf = np.asarray(tf, dtype=np.float64)
    if avgdl <= 0:
        return np.zeros_like(tf)
    return tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / avgdl))


def query_weights(counts: Mapping[int, int], idf: Mapping[int, float]) -> dict[int, float]:
    """``{term id: count · idf}`` over the query's known terms."""
    return {t: c * idf[t] for t, c in counts.items() if t in idf}


def drift_bounds(avgdl: float, versions: Mapping[float, int]) -> tuple[float, float]:
    """``(lo, hi)``: exact doc-side weights lie in ``[lo, hi]`` × the stored ones, for
    documents written at the mean lengths ``versions`` (``{A_D: live documents}``) when the mean
    length is now ``avgdl`` (see the module docstring).

    >>> drift_bounds(12.0, {10.0: 3, 12.0: 5, 15.0: 1})
    (0.8, 1.2)
    """
    ratios = [avgdl / a for a, n in versions.items() if n > 0 and a > 0]
    if not ratios:
        return 1.0, 1.0
    return min(1.0, min(ratios)), max(1.0, max(ratios))


def needs_reweight(stats: BM25Stats, at: float = REWEIGHT_AT) -> bool:
    """Whether the rows of ``stats``'s write versions have drifted past ``at`` (``hi`` of
    :func:`drift_bounds`, the factor a search over-fetches by, above it): then a rewrite at
    today's mean length pays.

    >>> st = BM25Stats(n_docs=2, total_len=30, versions={10.0: 1, 20.0: 1})
    >>> drift_bounds(st.avgdl, st.versions), needs_reweight(st), needs_reweight(st, 2.0)
    ((0.75, 1.5), True, False)
    """
    return drift_bounds(stats.avgdl, stats.versions)[1] > at


def certified_over_fetch(
    kth_exact: float | None, last_stored: float | None, hi: float, n_terms: int, exhausted: bool
) -> bool:
    """Whether a fetch of the store's top ``K`` already holds the exact top-k: every document
    not fetched has a stored score ``<= last_stored`` (the K-th), hence an exact score ``<=
    hi·last_stored·(1 + δ)`` with ``δ = (n_terms + 2)·2**-23`` (float32 weights and sum); it
    must be *strictly* below the k-th exact score (a tie needs its id compared)."""
    if exhausted:
        return True
    if kth_exact is None or last_stored is None:
        return False
    bound = hi * last_stored * (1 + (n_terms + 2) * _F32) if last_stored > 0 else 0.0
    return bound + 1e-12 < kth_exact


# ----------------------------------------------------------------------------- statistics
@dataclass
class BM25Stats:
    """The document-frequency table and the sizes exact scores need (``k1, b, ε``, N, total
    length, term ids, df, the write versions ``{A_D: documents}``). Mutated only by the one
    writer of a :class:`SparseBM25`; queries read a frozen copy (:meth:`frozen`)."""

    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25
    n_docs: int = 0
    total_len: int = 0
    term_ids: dict[str, int] = field(default_factory=dict)
    df: dict[int, int] = field(default_factory=dict)
    versions: dict[float, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.k1, self.b, self.epsilon = _check_params(self.k1, self.b, self.epsilon)

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs if self.n_docs else 0.0

    def frozen(self) -> BM25Stats:
        return BM25Stats(self.k1, self.b, self.epsilon, self.n_docs, self.total_len,
                         dict(self.term_ids), dict(self.df), dict(self.versions))

    def idf(self) -> dict[int, float]:
        """Floored idf of every term with df > 0 (rank_bm25's vocabulary of the live corpus)."""
        ids = [t for t, d in self.df.items() if d > 0]
        raw = robertson_idf(self.n_docs, np.asarray([self.df[t] for t in ids], dtype=np.int64))
        floored, _ = floor_idf(raw, self.epsilon)
        return dict(zip(ids, floored.tolist(), strict=True))

    def term_id(self, term: str, create: bool) -> int | None:
        got = self.term_ids.get(term)
        if got is None and create:
            got = len(self.term_ids)
            if got > MAX_TERM_ID:
                raise ConfigurationError("more than 2**32 - 1 distinct terms: sparse ids overflow")
            self.term_ids[term] = got
        return got

    # ------------------------------------------------------------------ persistence
    def save(self, path: Path) -> None:
        """``path`` (a JSON file, fsynced): parameters, sizes, versions, terms and df."""
        terms = sorted(self.term_ids, key=self.term_ids.__getitem__)
        write_json(path, {
            "kind": "BM25Stats", "format_version": 1,
            "k1": self.k1, "b": self.b, "epsilon": self.epsilon,
            "n_docs": self.n_docs, "total_len": self.total_len,
            "versions": [[a, n] for a, n in self.versions.items()],
            "terms": terms, "df": [self.df.get(self.term_ids[t], 0) for t in terms],
        })

    @classmethod
    def load(cls, path: Path) -> BM25Stats:
        """Read :meth:`save`'s file, every field checked (``IndexPersistError`` naming it)."""
        try:
            got = read_json(path, max_bytes=1 << 30, max_depth=3)
        except FileNotFoundError as exc:
            raise IndexPersistError(f"{path} is missing") from exc
        return cls.from_json(got, path)

    @classmethod
    def from_json(cls, got: Any, path: Path) -> BM25Stats:
        """The table of :meth:`save`'s parsed JSON ``got`` (read from ``path``), every field
        checked (``IndexPersistError`` naming ``path``)."""

        def bad(what: str) -> IndexPersistError:
            return IndexPersistError(f"{path}: {what}; write the index again")

        if not isinstance(got, dict) or got.get("kind") != "BM25Stats" or got.get("format_version") != 1:
            raise bad("not a format-1 BM25Stats file")
        terms, df, versions = got.get("terms"), got.get("df"), got.get("versions")
        raw = [got.get("n_docs"), got.get("total_len")]
        ints = [v for v in raw if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(ints) != 2:
            raise bad("n_docs and total_len must be ints >= 0")
        if not (isinstance(terms, list) and isinstance(df, list) and len(terms) == len(df)
                and all(isinstance(t, str) for t in terms) and len(set(terms)) == len(terms)
                and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= ints[0] for d in df)):
            raise bad("terms and df must be equal-length lists (unique strings, 0 <= df <= n_docs)")
        if len(terms) > MAX_TERM_ID + 1:
            raise bad("too many terms")
        if not (isinstance(versions, list) and all(
                isinstance(v, list) and len(v) == 2 and isinstance(v[0], int | float)
                and math.isfinite(v[0]) and v[0] >= 0 and isinstance(v[1], int) and v[1] >= 0
                for v in versions)):
            raise bad("versions must be [[avgdl, documents], ...]")
        try:
            return cls(got.get("k1"), got.get("b"), got.get("epsilon"), ints[0], ints[1],  # type: ignore[arg-type]
                       {t: i for i, t in enumerate(terms)},
                       {i: d for i, d in enumerate(df) if d > 0},
                       {float(a): n for a, n in versions})
        except ConfigurationError as exc:
            raise bad(str(exc)) from exc


# ----------------------------------------------------------------------------- rows, backends
@dataclass(frozen=True)
class DocRow:
    """What a store holds for one document: its id, the sparse doc-side weights (term id →
    float, at mean length ``avgdl``, plus ``PRESENCE_DIM: 1``), its term counts and length
    (for exact rescoring)."""

    doc_id: str
    weights: dict[int, float]
    tf: dict[int, int]
    doc_len: int
    avgdl: float


class SparseBackend(Protocol):
    """A store adapter (:mod:`llama_index_car.sparse_stores`)."""

    #: most results one search may return
    max_limit: int
    #: the store's collection holding the rows
    collection: str

    def upsert(self, rows: Sequence[DocRow]) -> None: ...
    def delete(self, doc_ids: Sequence[str]) -> None: ...
    def search(self, weights: Mapping[int, float], limit: int) -> list[tuple[str, float]]: ...
    def fetch(self, doc_ids: Sequence[str]) -> dict[str, DocRow]: ...
    def ids(self) -> list[str]: ...
    def scan(self, batch: int) -> Iterator[list[DocRow]]:
        """Every row (term counts, length, mean length; no weights), ``batch`` at a time."""
        ...


def make_row(stats: BM25Stats, doc_id: str, counts: Mapping[str, int], avgdl: float) -> DocRow:
    """The store row of a document of token counts ``counts`` written at mean length
    ``avgdl`` (new terms get ids in ``stats``: its one writer calls this)."""
    tf = {stats.term_id(t, create=True): int(c) for t, c in counts.items() if c > 0}
    row = DocRow(doc_id, {}, tf, sum(tf.values()), avgdl)  # type: ignore[arg-type]
    return reweighted(row, avgdl, stats.k1, stats.b)


def reweighted(row: DocRow, avgdl: float, k1: float, b: float) -> DocRow:
    """``row`` (its term counts and length) weighted at mean length ``avgdl``."""
    tids = list(row.tf)
    w = doc_weights(np.asarray([row.tf[t] for t in tids], dtype=np.float64), row.doc_len,
                    avgdl, k1, b)
    weights = dict(zip(tids, w.tolist(), strict=True))
    weights[PRESENCE_DIM] = 1.0
    return DocRow(row.doc_id, weights, row.tf, row.doc_len, avgdl)


def query_term_weights(tokens: Sequence[str], st: BM25Stats, idf: Mapping[int, float]) -> dict[int, float]:
    """``{term id: count·idf}`` of a query's known terms with a nonzero weight."""
    counts: Counter[int] = Counter()
    for tok, c in Counter(tokens).items():
        t = st.term_ids.get(tok)
        if t is not None and t in idf:
            counts[t] += c
    return {t: w for t, w in query_weights(counts, idf).items() if w != 0}


def exact_scores(rows: Mapping[str, DocRow], qw: Mapping[int, float], st: BM25Stats) -> dict[str, float]:
    """Exact float64 BM25 of ``rows`` (their stored term counts and lengths) at ``st``."""
    out = {}
    for doc_id, row in rows.items():
        s = 0.0
        for t, w in qw.items():
            tf = row.tf.get(t)
            if tf:
                s += w * float(doc_weights(np.array([tf], dtype=np.float64), row.doc_len,
                                           st.avgdl, st.k1, st.b)[0])
        out[doc_id] = s
    return out


@dataclass
class SearchTrace:
    """What one :func:`exact_search` cost: store searches, rows fetched and rescored, and
    whether it fell back to scanning every row."""

    rounds: int = 0
    rows: int = 0
    scanned: bool = False


def _ranked(exact: Mapping[str, float], k: int) -> list[tuple[str, float]]:
    got = sorted(((d, s) for d, s in exact.items() if s != 0), key=lambda t: (-t[1], t[0]))
    return got[:k]


def exact_search(
    backend: SparseBackend, st: BM25Stats, idf: Mapping[int, float], tokens: Sequence[str],
    k: int, *, over_fetch: int = 4, accept: Callable[[str], bool] | None = None,
    trace: SearchTrace | None = None,
) -> list[tuple[str, float]]:
    """The exact BM25 top-``k`` ``(doc id, score)`` with a nonzero score among the documents
    ``accept`` takes (default all): score desc, then id asc. The store's top ``K`` (from
    ``over_fetch·k``, 4× more until certified) rescored exactly; a document the store holds
    but ``accept`` refuses (a filter, or a row of another version of the index) only takes a
    slot, so the bound for the documents not fetched still holds (module docstring). When
    the store's cap (``backend.max_limit``) comes before the certificate, every document
    holding a query term is rescored instead (:func:`_exhaustive`): exact, never an error."""
    trace = trace if trace is not None else SearchTrace()
    qw = query_term_weights(tokens, st, idf)
    if k <= 0 or not qw or st.n_docs == 0:
        return []
    _, hi = drift_bounds(st.avgdl, st.versions)
    if any(w < 0 for w in qw.values()):
        return _exhaustive(backend, qw, st, k, accept, trace)
    limit = min(over_fetch * k, backend.max_limit)
    while True:
        trace.rounds += 1
        hits = backend.search(qw, limit)
        ids = [h[0] for h in hits if accept is None or accept(h[0])]
        trace.rows += len(ids)
        got = _ranked(exact_scores(backend.fetch(ids), qw, st), len(ids))
        kth = got[k - 1][1] if len(got) >= k else None
        exhausted = len(hits) < limit
        last = hits[-1][1] if hits else None
        if certified_over_fetch(kth, last, hi, len(qw), exhausted):
            return got[:k]
        if limit >= backend.max_limit:
            logger.warning(
                "exact BM25: the store's top %d is not enough under the avgdl drift (x%.3f) "
                "or the filter; rescoring every document of the query's terms (an update "
                "reweights the rows)", limit, hi)
            return _exhaustive(backend, qw, st, k, accept, trace)
        limit = min(limit * 4, backend.max_limit)


def _exhaustive(
    backend: SparseBackend, qw: Mapping[int, float], st: BM25Stats, k: int,
    accept: Callable[[str], bool] | None, trace: SearchTrace,
) -> list[tuple[str, float]]:
    """Every document holding a query term, rescored: one search per term to exhaustion (a
    one-term query scores exactly the rows holding it), or, when a term has more rows than
    one search returns, a scan of every row."""
    cand: set[str] = set()
    for t in qw:
        trace.rounds += 1
        hits = backend.search({t: 1.0}, backend.max_limit)
        if len(hits) >= backend.max_limit:
            return _scan(backend, qw, st, k, accept, trace)
        cand.update(h[0] for h in hits if accept is None or accept(h[0]))
    ids = sorted(cand)
    trace.rows += len(ids)
    exact: dict[str, float] = {}
    for i in range(0, len(ids), _FETCH):
        exact.update(exact_scores(backend.fetch(ids[i : i + _FETCH]), qw, st))
    return _ranked(exact, k)


def _scan(
    backend: SparseBackend, qw: Mapping[int, float], st: BM25Stats, k: int,
    accept: Callable[[str], bool] | None, trace: SearchTrace,
) -> list[tuple[str, float]]:
    trace.scanned = True
    best: list[tuple[str, float]] = []
    for rows in backend.scan(_FETCH):
        trace.rounds += 1
        trace.rows += len(rows)
        keep = {r.doc_id: r for r in rows
                if (accept is None or accept(r.doc_id)) and any(t in r.tf for t in qw)}
        best = _ranked(dict(best) | exact_scores(keep, qw, st), k)
    return best


# ----------------------------------------------------------------------------- the engine
class SparseBM25:
    """Kiwi BM25 kept in a store as sparse vectors, queried exactly (module docstring).

    ``tokenize`` turns a text into tokens (the index's Kiwi tokenizer); documents are given as
    ``(doc_id, tokens)``. ``over_fetch``: the first search asks the store for
    ``over_fetch · k`` documents (then 4× more until certified). One writer at a time (``insert``/``delete``/``reweight``); ``search``
    reads a frozen copy of the statistics taken at its start.
    """

    def __init__(
        self, backend: SparseBackend, stats: BM25Stats | None = None, *, over_fetch: int = 4
    ) -> None:
        if not isinstance(over_fetch, int) or isinstance(over_fetch, bool) or over_fetch < 1:
            raise ConfigurationError(f"over_fetch must be an int >= 1, got {over_fetch!r}")
        self.over_fetch = over_fetch
        self.backend = backend
        self.stats = stats if stats is not None else BM25Stats()
        self._frozen = self.stats.frozen()
        self._idf = self._frozen.idf()
        #: what the last search cost (for the benchmark)
        self.last_trace = SearchTrace()

    def _publish(self) -> None:
        frozen = self.stats.frozen()
        self._idf, self._frozen = frozen.idf(), frozen

    def _row(self, doc_id: str, tokens: Sequence[str], avgdl: float) -> DocRow:
        return make_row(self.stats, doc_id, Counter(tokens), avgdl)

    def insert(self, docs: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Add documents (new ids): df, N and total length grow; rows are written at the
        mean length after the insert (one new version)."""
        st = self.stats
        for _, toks in docs:
            st.n_docs += 1
            st.total_len += len(toks)
        avgdl = st.avgdl
        rows = []
        for doc_id, toks in docs:
            row = self._row(doc_id, toks, avgdl)
            for t in row.tf:
                st.df[t] = st.df.get(t, 0) + 1
            rows.append(row)
        if rows:
            st.versions[avgdl] = st.versions.get(avgdl, 0) + len(rows)
        self.backend.upsert(rows)
        self._publish()

    def delete(self, doc_ids: Sequence[str]) -> None:
        """Remove documents: their term counts leave df (read back from the store first)."""
        rows = self.backend.fetch(list(doc_ids))
        missing = [d for d in doc_ids if d not in rows]
        if missing:
            raise ConfigurationError(f"cannot delete unknown document ids: {missing[:5]}")
        self.backend.delete(list(doc_ids))
        st = self.stats
        for row in rows.values():
            st.n_docs -= 1
            st.total_len -= row.doc_len
            st.versions[row.avgdl] = st.versions.get(row.avgdl, 0) - 1
            if st.versions[row.avgdl] <= 0:
                del st.versions[row.avgdl]
            for t in row.tf:
                st.df[t] -= 1
                if st.df[t] <= 0:
                    del st.df[t]
        self._publish()

    def reweight(self, batch: int = 1000) -> None:
        """Rewrite every document's weights at today's mean length, in place (one version
        left; not crash-safe: an index's update writes a new collection instead)."""
        st = self.stats
        ids = self.backend.ids()  # listed first: the rows change under a scan
        for i in range(0, len(ids), batch):
            rows = self.backend.fetch(ids[i : i + batch]).values()
            self.backend.upsert([reweighted(r, st.avgdl, st.k1, st.b) for r in rows])
        avgdl = st.avgdl
        self.stats.versions = {avgdl: self.stats.n_docs} if self.stats.n_docs else {}
        self._publish()

    # ------------------------------------------------------------------ query
    def search(self, tokens: Sequence[str], k: int) -> list[tuple[str, float]]:
        """The exact BM25 top-``k`` ``(doc id, score)`` with a nonzero score: score desc, then
        id asc (the local channel's scores within float64 rounding)."""
        self.last_trace = trace = SearchTrace()
        return exact_search(self.backend, self._frozen, self._idf, tokens, k,
                            over_fetch=self.over_fetch, trace=trace)

    @property
    def last_fetches(self) -> int:
        """Store searches of the last search."""
        return self.last_trace.rounds


def parse_tf(raw: Any, where: str) -> dict[int, int]:
    """A stored ``{"term id": count}`` JSON object, checked (store payloads are untrusted)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise IndexPersistError(f"{where}: damaged term counts") from exc
    if not isinstance(raw, dict):
        raise IndexPersistError(f"{where}: term counts must be an object")
    out: dict[int, int] = {}
    for key, value in raw.items():
        try:
            t = int(key)
        except (TypeError, ValueError) as exc:
            raise IndexPersistError(f"{where}: term id {key!r} is not an int") from exc
        if not 0 <= t <= MAX_TERM_ID or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise IndexPersistError(f"{where}: bad term count {key!r}: {value!r}")
        out[t] = value
    return out
