"""Benchmark: what avgdl drift costs an exact store-kept BM25 query (the reweight threshold).

A store row keeps the doc-side weights of the mean length ``A_D`` it was written at; a query
over-fetches by the drift bound ``hi = max(1, max ρ)`` (``ρ = A / A_D``) and rescores exactly
(``llama_index_car.bm25_sparse.exact_search``). This measures, against the drift
``max ρ / min ρ``, the store round trips and the rows fetched per query, on the Kiwi tokens
of an eval set (every document, real Korean): half the rows (every other document) are
written at a stale mean length, the other half at today's (two write versions, as after
updates), for

* ``grow``: the stale rows written at ``A / r`` (long documents came in: ``hi = r``), and
* ``shrink``: at ``A · r`` (short ones came in: ``lo = 1 / r``, ``hi = 1``),

and every query (top ``k``, first fetch ``over_fetch · k``) is checked against the local
``BM25Okapi`` (ids and scores). ``--store memory`` is an exact float32 inner product in
numpy (the roofline of a store: the rounds and rows depend only on the scores, not on the
store); ``--store milvus|qdrant`` runs Milvus Lite or Qdrant local mode (the same counts).
Printed: one table, the drift ``r`` against mean / p95 rounds, mean / p95 rows fetched
(and ÷ k), the share of queries needing more than one round, and top-k = local.

Usage::

    nice -n 10 python benchmarks/_eval_vectors.py --cache /tmp/car-scale/cache --no-vectors
    nice -n 10 python benchmarks/sparse_drift_bench.py --cache /tmp/car-scale/cache --set legal
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

DRIFTS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0)


class MemorySparse:
    """An exact float32 sparse inner product over rows kept in memory (a store's roofline)."""

    def __init__(self, max_limit: int = 16384) -> None:
        self.max_limit = max_limit
        self.collection = "memory"
        self.rows: dict[str, Any] = {}
        self._mat: Any = None
        self._ids: list[str] = []

    def upsert(self, rows: Sequence[Any]) -> None:
        for r in rows:
            self.rows[r.doc_id] = r
        self._mat = None

    def delete(self, doc_ids: Sequence[str]) -> None:
        for d in doc_ids:
            self.rows.pop(d, None)
        self._mat = None

    def _matrix(self) -> Any:
        if self._mat is None:
            from scipy.sparse import csr_matrix

            self._ids = sorted(self.rows)
            data: list[float] = []
            ind: list[int] = []
            ptr = [0]
            for d in self._ids:
                w = {t: v for t, v in self.rows[d].weights.items() if t < 2**31}
                ind.extend(w)
                data.extend(w.values())
                ptr.append(len(ind))
            width = max(ind, default=0) + 1
            self._mat = csr_matrix((np.asarray(data, np.float32), ind, ptr),
                                   shape=(len(self._ids), width))
        return self._mat

    def search(self, weights: Mapping[int, float], limit: int) -> list[tuple[str, float]]:
        mat = self._matrix()
        q = np.zeros(mat.shape[1], np.float32)
        for t, w in weights.items():
            if t < mat.shape[1]:
                q[t] = w
        s = np.asarray(mat @ q).ravel()
        hit = np.flatnonzero(s)
        top = hit[np.argsort(-s[hit], kind="stable")][:limit]
        return [(self._ids[i], float(s[i])) for i in top]

    def fetch(self, doc_ids: Sequence[str]) -> dict[str, Any]:
        return {d: self.rows[d] for d in doc_ids if d in self.rows}

    def ids(self) -> list[str]:
        return list(self.rows)

    def scan(self, batch: int) -> Iterator[list[Any]]:
        ids = list(self.rows)
        for i in range(0, len(ids), batch):
            yield [self.rows[d] for d in ids[i : i + batch]]


def _backend(kind: str, tmp: Path, i: int) -> Any:
    if kind == "memory":
        return MemorySparse()
    if kind == "milvus":
        from llama_index_car.sparse_stores import MilvusSparse

        return MilvusSparse(str(tmp / f"m{i}.db"), create=True)
    from qdrant_client import QdrantClient

    from llama_index_car.sparse_stores import QdrantSparse

    return QdrantSparse(QdrantClient(path=str(tmp / f"q{i}")), create=True)


def run(name: str, cache: Path, kind: str, k: int, over_fetch: int, max_queries: int) -> list[str]:
    from _eval_vectors import load_set, tokens

    from llama_index_car.bm25 import BM25Okapi
    from llama_index_car.bm25_sparse import (
        BM25Stats,
        SearchTrace,
        drift_bounds,
        exact_search,
        make_row,
    )

    ids, _, _, _, _ = load_set(name)
    dt, qt = tokens(name, cache)
    queries = [q for q in qt if q][:max_queries]
    local = BM25Okapi(dt)
    want = []
    for q in queries:
        idx, sc = local.top_k(q, k)
        got = [(ids[i], float(s)) for i, s in zip(idx.tolist(), sc.tolist(), strict=True) if s]
        want.append(sorted(got, key=lambda t: (-t[1], t[0])))
    lines = []
    tmp = Path(tempfile.mkdtemp(prefix="car-drift-"))
    try:
        for j, (direction, r) in enumerate((d, r) for r in DRIFTS for d in ("grow", "shrink")):
            if r == 1.0 and direction == "shrink":
                continue
            st = BM25Stats()
            for toks in dt:
                st.n_docs += 1
                st.total_len += len(toks)
            a = st.avgdl
            stale = a / r if direction == "grow" else a * r
            rows = []
            for i, (doc_id, toks) in enumerate(zip(ids, dt, strict=True)):
                at = stale if i % 2 == 0 else a
                row = make_row(st, doc_id, Counter(toks), at)
                for t in row.tf:
                    st.df[t] = st.df.get(t, 0) + 1
                st.versions[at] = st.versions.get(at, 0) + 1
                rows.append(row)
            backend = _backend(kind, tmp, j)
            for i in range(0, len(rows), 1000):
                backend.upsert(rows[i : i + 1000])
            lo, hi = drift_bounds(st.avgdl, st.versions)
            idf = st.idf()
            rounds, fetched, same = [], [], 0
            for q, w in zip(queries, want, strict=True):
                trace = SearchTrace()
                got = exact_search(backend, st, idf, q, k, over_fetch=over_fetch, trace=trace)
                rounds.append(trace.rounds)
                fetched.append(trace.rows)
                same += [g[0] for g in got] == [x[0] for x in w] and np.allclose(
                    [g[1] for g in got], [x[1] for x in w], rtol=1e-6)
            rd, fe = np.asarray(rounds), np.asarray(fetched)
            lines.append(
                f"| {name} | {len(ids)} | {kind} | {direction} | {hi / lo:.2f} | {hi:.2f} | "
                f"{rd.mean():.2f} | {np.percentile(rd, 95):.0f} | {(rd > 1).mean():.0%} | "
                f"{fe.mean():.0f} | {np.percentile(fe, 95):.0f} | {fe.mean() / k:.1f} | "
                f"{same}/{len(queries)} |")
            print(lines[-1], flush=True)
            if hasattr(backend, "client"):
                backend.client.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--set", dest="sets", action="append", choices=["lhcs", "autorag", "legal"])
    ap.add_argument("--store", choices=["memory", "milvus", "qdrant"], default="memory")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--over-fetch", type=int, default=4)
    ap.add_argument("--max-queries", type=int, default=200)
    args = ap.parse_args()
    print(f"k = {args.k}, first fetch {args.over_fetch}·k; half the rows stale (module docstring)")
    print("| set | docs | store | drift | max ρ / min ρ | hi | rounds mean | rounds p95 | "
          "> 1 round | rows fetched mean | rows p95 | rows ÷ k | top-k = local |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.sets or ["legal"]:
        run(name, args.cache, args.store, args.k, args.over_fetch, args.max_queries)


if __name__ == "__main__":
    main()
