"""Benchmark: exact Kiwi BM25 in Milvus Lite and Qdrant local mode vs the local BM25 channel.

For each eval set (Kiwi tokens of ``"## title\\n\\ntext"`` and of the queries, cached by
``_eval_vectors.py``): the local ``BM25Okapi`` (``top_k``) and ``SparseBM25`` over each store are
built on 90 % of the corpus, queried (top 10, every query), then a tenth is inserted and another
deleted (avgdl drifts) and every query is asked again. Printed per set and system: build s,
query p50 / p95 ms, mean store round trips per query (over-fetch rounds), and the number of
queries whose top-10 ids and scores (float32 tolerance, ties by id) equal the local channel's
(every document scored, ranked by score desc then id asc: ``BM25Okapi.top_k`` breaks ties by
corpus position, which after the update is not id order, so its own row can differ at a tie
on the 10th place). Query tokenization is excluded everywhere (the same token lists go to every system).

Usage::

    nice -n 10 python benchmarks/_eval_vectors.py --cache /tmp/car-scale/cache --no-vectors
    nice -n 10 python benchmarks/sparse_store_bench.py --cache /tmp/car-scale/cache
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

K = 10


def _local(docs: Sequence[tuple[str, list[str]]]) -> Callable[[list[str]], list[tuple[str, float]]]:
    from llama_index_car.bm25 import BM25Okapi

    bm = BM25Okapi([t for _, t in docs])
    ids = [d for d, _ in docs]

    def search(q: list[str]) -> list[tuple[str, float]]:
        idx, sc = bm.top_k(q, K)
        return [(ids[i], float(s)) for i, s in zip(idx.tolist(), sc.tolist(), strict=True) if s != 0]

    return search


def _oracle(docs: Sequence[tuple[str, list[str]]]) -> Callable[[list[str]], list[tuple[str, float]]]:
    """The reference top K: every document's score by the local channel (``BM25Okapi``, equal
    to ``rank_bm25``'s: ``tests/test_bm25.py``), ranked by score desc then id asc (the store
    engine's tie rule; ``top_k`` breaks ties by corpus position, and after the update the
    corpus is not in id order)."""
    from llama_index_car.bm25 import BM25Okapi

    bm = BM25Okapi([t for _, t in docs])
    ids = np.array([d for d, _ in docs])
    by_id = np.argsort(np.argsort(ids))

    def search(q: list[str]) -> list[tuple[str, float]]:
        sc = bm.get_scores(q)
        idx = np.flatnonzero(sc > 0)
        order = idx[np.lexsort((by_id[idx], -sc[idx]))][:K]
        return [(str(ids[i]), float(sc[i])) for i in order]

    return search


def _same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> bool:
    if len(got) != len(want):
        return False
    gs, ws = np.array([g[1] for g in got]), np.array([w[1] for w in want])
    if not np.allclose(gs, ws, rtol=1e-6, atol=1e-9):
        return False
    # ids equal up to the order of tied scores (the local top_k breaks ties by index)
    return sorted(zip(np.round(gs, 6), [g[0] for g in got], strict=True)) == sorted(
        zip(np.round(ws, 6), [w[0] for w in want], strict=True)) or [g[0] for g in got] == [w[0] for w in want]


def _timed(fn: Callable[[list[str]], list[tuple[str, float]]], queries: list[list[str]]) -> tuple[list[float], list[list[tuple[str, float]]]]:
    fn(queries[0])
    times, out = [], []
    for q in queries:
        t0 = time.perf_counter()
        out.append(fn(q))
        times.append(time.perf_counter() - t0)
    return times, out


def run_set(name: str, cache: Path, systems: list[str], max_queries: int) -> list[str]:
    from _eval_vectors import load_set, tokens
    from qdrant_client import QdrantClient

    from llama_index_car.bm25_sparse import SparseBM25
    from llama_index_car.sparse_stores import MilvusSparse, QdrantSparse

    ids, _, _, _, _ = load_set(name)
    dt, qt = tokens(name, cache)
    docs = list(zip(ids, dt, strict=True))
    queries = [q for q in qt if q][:max_queries]
    held = docs[::10]
    base = [d for i, d in enumerate(docs) if i % 10]
    gone = [d for d, _ in base[::9]]
    live = [x for x in base if x[0] not in set(gone)] + held
    rows = []
    for phase, corpus in (("initial", base), ("after +10 % / −10 %", live)):
        t0 = time.perf_counter()
        local = _local(corpus)
        rows.append((phase, "local BM25Okapi", time.perf_counter() - t0, *_timed(local, queries), None))
    want = {}
    for phase, corpus in (("initial", base), ("after +10 % / −10 %", live)):
        oracle = _oracle(corpus)
        want[phase] = [oracle(q) for q in queries]
    out = []
    for system in systems:
        tmp = Path(tempfile.mkdtemp(prefix=f"sparse-{system}-"))
        try:
            if system == "qdrant":
                client = QdrantClient(path=str(tmp / "q"))
                backend: object = QdrantSparse(client, create=True)
            else:
                client = None
                backend = MilvusSparse(str(tmp / "m.db"), create=True)
            eng = SparseBM25(backend)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            for i in range(0, len(base), 2000):
                eng.insert(base[i : i + 2000])
            build = time.perf_counter() - t0
            for phase in ("initial", "after +10 % / −10 %"):
                if phase != "initial":
                    t0 = time.perf_counter()
                    eng.insert(held)
                    eng.delete(gone)
                    build = time.perf_counter() - t0
                fetches: list[int] = []

                def search(q: list[str], eng: SparseBM25 = eng, fetches: list[int] = fetches) -> list[tuple[str, float]]:
                    r = eng.search(q, K)
                    fetches.append(eng.last_fetches)
                    return r

                times, res = _timed(search, queries)
                rows.append((phase, system, build, times, res, float(np.mean(fetches[1:]))))
            if system == "qdrant":
                client.close()  # type: ignore[union-attr]
            else:
                backend.close()  # type: ignore[attr-defined]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    local_p50 = {r[0]: float(np.percentile(r[3], 50)) for r in rows if r[1] == "local BM25Okapi"}
    for phase, system, build, times, res, fetch in rows:
        p50, p95 = float(np.percentile(times, 50)) * 1000, float(np.percentile(times, 95)) * 1000
        same = sum(_same(g, w) for g, w in zip(res, want[phase], strict=True))
        ratio = p50 / (local_p50[phase] * 1000)
        out.append(f"| {name} | {len(base) if phase == 'initial' else len(live)} | {len(queries)} | {phase} | "
                   f"{system} | {build:.1f} | {p50:.2f} | {p95:.2f} | {ratio:.1f}× | "
                   f"{'' if fetch is None else f'{fetch:.2f}'} | {same}/{len(queries)} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="/tmp/car-scale/cache")
    ap.add_argument("--sets", nargs="+", default=["lhcs", "autorag", "legal"])
    ap.add_argument("--systems", nargs="+", default=["milvus", "qdrant"], choices=["milvus", "qdrant"])
    ap.add_argument("--max-queries", type=int, default=2000)
    args = ap.parse_args()
    print(f"# sparse_store_bench: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start\n")
    print("| set | docs | queries | phase | system | build / update s | p50 ms | p95 ms | p50 ÷ local | store round trips / query | top-10 = local |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for name in args.sets:
        for line in run_set(name, Path(args.cache), args.systems, args.max_queries):
            print(line, flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
