"""Benchmark: the dense channel at 10^4 / 10^5 / 10^6 vectors, and the ranking loss of f16/int8.

Two tables, one run:

1. **Ranking loss on real e5 vectors** (the three eval sets' passages and queries, embedded once
   by ``_eval_vectors.py`` into ``--cache``): exact float64 cosine as the reference; float16
   vectors, int8 codes alone (no rescoring) and ``FlatVectorStore`` (int8 + certified
   rescoring) against it: top-10 / top-100 overlap and MRR@10 on the qrels.
2. **Scale**: ``--sizes`` vectors, 384-d, unit norm, made from real e5 passage vectors sampled
   with replacement plus Gaussian noise (σ = ``--noise`` per component, renormalised), queried
   by the real e5 query vectors. Every method is built in one process and queried in a fresh
   one that opens what the build wrote (the query process a service runs): build s, open s,
   top-100 p50/p95 ms, resident memory of the query process (VmRSS after the queries), recall
   of the exact top-100, and ratios against the numpy float32 matmul roofline (the same
   queries, vectors in memory) and ``SimpleVectorStore`` in the same run. ``SimpleVectorStore``
   is a pure-Python scan: run at 10^4 and 10^5 only (10^6 would take ~1 min per query and
   ~25 GB of Python floats).

Methods: ``simple`` (LlamaIndex ``SimpleVectorStore``; its "open" is re-adding the vectors in
the query process, since parsing its persisted JSON took 260 s at 10^4 here), ``numpy`` (roofline),
``flat`` (``FlatVectorStore``, int8 scan + exact rescoring, memory-mapped folder), ``flat32``
(its float32 scan), ``faiss-flat`` (``IndexFlatIP``, exact), ``faiss-sq8`` (8-bit scalar
quantizer, approximate), ``faiss-hnsw`` (HNSW32 over float32, efSearch 200, approximate),
``usearch-hnsw`` (i8 HNSW, expansion_search 200, approximate, ``restore(view=True)``), ``lancedb`` (no index: exact brute force).
Every child runs with ``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=--threads`` (default 1: the query
process of a service shares its cores with the other channels; on this shared machine
multi-threaded BLAS/OpenMP scans thrash). "open s" excludes importing the library.
sqlite-vec is on the registry but needs ``sqlite3.enable_load_extension``, which this
machine's Python lacks: reported as not run. Missing libraries are reported, not fatal
(``pip install faiss-cpu usearch lancedb``).

Usage::

    nice -n 10 python benchmarks/_eval_vectors.py --cache /tmp/car-scale/cache lhcs autorag legal
    nice -n 10 python benchmarks/dense_scale.py --cache /tmp/car-scale/cache --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _proc import rss_mb  # noqa: E402 - after the path insert

K = 100
#: HNSW search breadth (faiss efSearch, usearch expansion_search): 2·K
EF_SEARCH = 200
METHODS = ["simple", "numpy", "flat", "flat32", "faiss-flat", "faiss-sq8", "faiss-hnsw",
           "usearch-hnsw", "lancedb"]
IMPORTS = {"simple": "llama_index.core.vector_stores", "flat": "llama_index_car.flat_store",
           "flat32": "llama_index_car.flat_store", "faiss-flat": "faiss", "faiss-sq8": "faiss",
           "faiss-hnsw": "faiss", "usearch-hnsw": "usearch.index", "lancedb": "lancedb"}


# ----------------------------------------------------------------------------- table 1
def ranking_loss(cache: Path, sets: list[str]) -> None:
    from _eval_vectors import load_set, vectors

    from llama_index_car import _flat_math as fm
    from llama_index_car._flat_storage import memory_segment
    from llama_index_car.flat_store import FlatState

    print("\n## Ranking loss against exact float64 cosine (real e5 vectors)\n")
    print("| set | docs | queries | variant | top-10 overlap | top-100 overlap | MRR@10 | ΔMRR@10 |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for name in sets:
        ids, _, qids, _, qrels = load_set(name)
        docs, queries = vectors(name, cache)
        x64 = docs.astype(np.float64)
        ref = x64 @ queries.astype(np.float64).T  # (n, q)
        variants: dict[str, np.ndarray] = {
            "float64 (reference)": ref,
            "float16": (docs.astype(np.float16).astype(np.float32) @ queries.T.astype(np.float16).astype(np.float32)),
        }
        codes, scale, _, _, _ = fm.quantize_rows(docs)
        int8 = np.empty_like(ref)
        for j, q in enumerate(queries):
            qc, qs, _, _ = fm.quantize_query(q)
            int8[:, j] = fm.approx_scores(codes.astype(np.int32) @ qc.astype(np.int32), scale, qs)
        variants["int8 codes alone"] = int8
        seg = memory_segment(docs, ids, [(None, {})] * len(ids))
        state = FlatState(docs.shape[1], (seg,), (np.ones(len(ids), dtype=bool),), "int8")
        base_mrr = None
        for label, scores in [*variants.items(), ("FlatVectorStore (int8 + rescoring)", None)]:
            o10 = o100 = mrr = 0.0
            for j, qid in enumerate(qids):
                want = _top(ref[:, j], ids, K)
                if scores is None:
                    got = [d for d, _ in state.search(queries[j], K)]
                else:
                    got = _top(scores[:, j], ids, K)
                o10 += len(set(got[:10]) & set(want[:10])) / 10
                o100 += len(set(got) & set(want)) / K
                rel = qrels.get(qid, {})
                mrr += next((1 / (r + 1) for r, d in enumerate(got[:10]) if rel.get(d, 0) > 0), 0.0)
            n = len(qids)
            mrr /= n
            base_mrr = mrr if base_mrr is None else base_mrr
            print(f"| {name} | {len(ids)} | {n} | {label} | {o10 / n:.4f} | {o100 / n:.4f} | "
                  f"{mrr:.4f} | {mrr - base_mrr:+.4f} |")


def _top(scores: np.ndarray, ids: list[str], k: int) -> list[str]:
    order = np.lexsort((np.arange(scores.size), -scores))[:k]
    return [ids[i] for i in order]


# ----------------------------------------------------------------------------- data
def make_vectors(cache: Path, sets: list[str], n: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from _eval_vectors import vectors

    docs, queries = [], []
    for name in sets:
        d, q = vectors(name, cache)
        docs.append(d)
        queries.append(q)
    base = np.concatenate(docs)
    rng = np.random.default_rng(seed)
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        blk = base[rng.integers(0, len(base), b - a)] + noise * rng.standard_normal((b - a, base.shape[1]), dtype=np.float32)
        out[a:b] = blk / np.linalg.norm(blk, axis=1, keepdims=True)
    return out, np.concatenate(queries)


# ----------------------------------------------------------------------------- methods
def build(method: str, x: np.ndarray, where: Path) -> None:
    d = x.shape[1]
    if method in ("flat", "flat32"):
        from llama_index.core.schema import TextNode

        from llama_index_car.flat_store import FlatVectorStore

        store = FlatVectorStore(dim=d, scan="int8" if method == "flat" else "float32")
        store.add_vectors([f"n{i:08d}" for i in range(len(x))], x)
        store.persist(str(where / "flat"))
    elif method == "simple":
        from llama_index.core.schema import TextNode
        from llama_index.core.vector_stores import SimpleVectorStore

        store = SimpleVectorStore()
        store.add([TextNode(id_=f"n{i:08d}", text="", embedding=x[i].tolist()) for i in range(len(x))])
        np.save(where / "x.npy", x)  # its JSON takes minutes to parse: the query process re-adds
    elif method == "numpy":
        np.save(where / "x.npy", x)
    elif method.startswith("faiss"):
        import faiss

        if method == "faiss-flat":
            index = faiss.IndexFlatIP(d)
        elif method == "faiss-sq8":
            index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
            index.train(x[: min(len(x), 200_000)])
        else:
            index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        index.add(x)
        faiss.write_index(index, str(where / "faiss.index"))
    elif method == "usearch-hnsw":
        from usearch.index import Index

        index = Index(ndim=d, metric="ip", dtype="i8")
        index.add(np.arange(len(x)), x)
        index.save(str(where / "usearch.index"))
    elif method == "lancedb":
        import lancedb
        import pyarrow as pa

        db = lancedb.connect(str(where / "lance"))
        table = pa.table({"id": pa.array(np.arange(len(x), dtype=np.int64)),
                          "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), d)})
        db.create_table("v", table)
    else:
        raise ValueError(method)


def open_searcher(method: str, where: Path, d: int):  # type: ignore[no-untyped-def]
    """A function ``q -> top-K row ids`` over what :func:`build` wrote."""
    if method in ("flat", "flat32"):
        from llama_index_car.flat_store import FlatVectorStore

        state = FlatVectorStore.from_persist_dir(
            str(where / "flat"), scan="int8" if method == "flat" else "float32").snapshot()
        return lambda q: [int(i[1:]) for i, _ in state.search(q, K)]
    if method == "simple":
        from llama_index.core.schema import TextNode
        from llama_index.core.vector_stores import SimpleVectorStore
        from llama_index.core.vector_stores.types import VectorStoreQuery

        x = np.load(where / "x.npy")
        store = SimpleVectorStore()
        store.add([TextNode(id_=f"n{i:08d}", text="", embedding=x[i].tolist()) for i in range(len(x))])
        del x
        return lambda q: [int(i[1:]) for i in store.query(
            VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=K)).ids]
    if method == "numpy":
        x = np.load(where / "x.npy")

        def roof(q: np.ndarray) -> list[int]:
            s = x @ q
            top = np.argpartition(-s, K)[:K]
            return top[np.argsort(-s[top])].tolist()

        return roof
    if method.startswith("faiss"):
        import faiss

        index = faiss.read_index(str(where / "faiss.index"),
                                 faiss.IO_FLAG_MMAP if method == "faiss-flat" else 0)
        if method == "faiss-hnsw":
            index.hnsw.efSearch = EF_SEARCH
        return lambda q: index.search(q[None, :].astype(np.float32), K)[1][0].tolist()
    if method == "usearch-hnsw":
        from usearch.index import Index

        index = Index.restore(str(where / "usearch.index"), view=True)
        index.expansion_search = EF_SEARCH
        return lambda q: index.search(q.astype(np.float32), K).keys.tolist()
    if method == "lancedb":
        import lancedb

        table = lancedb.connect(str(where / "lance")).open_table("v")
        return lambda q: table.search(q.astype(np.float32)).metric("dot").limit(K).select(["id"]).to_arrow()["id"].to_pylist()
    raise ValueError(method)


def child(args: argparse.Namespace) -> None:
    """One method at one size, in its own process: build, or open + query."""
    where = Path(args.child_dir)
    if args.child_phase == "build":
        x = np.load(where / "data.npy")
        t0 = time.perf_counter()
        build(args.child_method, x, where)
        print(json.dumps({"build_s": time.perf_counter() - t0}))
        return
    q = np.load(where / "queries.npy")[: args.child_queries]
    truth = np.load(where / "truth.npy")[: args.child_queries]
    if args.child_method in IMPORTS:
        __import__(IMPORTS[args.child_method])
    t0 = time.perf_counter()
    search = open_searcher(args.child_method, where, q.shape[1])
    open_s = time.perf_counter() - t0
    search(q[0])  # warm-up (first touch of the maps)
    times, recall = [], []
    for j in range(len(q)):
        t1 = time.perf_counter()
        got = search(q[j])
        times.append(time.perf_counter() - t1)
        recall.append(len(set(got) & set(truth[j].tolist())) / K)
    print(json.dumps({"open_s": open_s, "p50": float(np.percentile(times, 50)) * 1000,
                      "p95": float(np.percentile(times, 95)) * 1000, "rss_mb": rss_mb(),
                      "anon_mb": rss_mb("RssAnon"), "file_mb": rss_mb("RssFile"),
                      "recall": float(np.mean(recall)), "queries": len(q)}))


def run_one(method: str, where: Path, queries: int, log: Path, threads: int) -> dict[str, float] | str:
    def call(phase: str) -> dict[str, float] | str:
        cmd = [sys.executable, __file__, "--child-method", method, "--child-dir", str(where),
               "--child-phase", phase, "--child-queries", str(queries)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        with open(log, "a") as fh:
            fh.write(f"--- {method} {phase}\n{p.stderr[-3000:]}\n")
        if p.returncode != 0:
            tail = (p.stderr.strip().splitlines() or ["?"])[-1]
            return f"failed: {tail[:120]}"
        return json.loads(p.stdout.strip().splitlines()[-1])

    built = call("build")
    if isinstance(built, str):
        return built
    got = call("query")
    if isinstance(got, str):
        return got
    return {**built, **got, "bytes": sum(f.stat().st_size for f in where.rglob("*") if f.is_file()
                                         and f.name not in ("data.npy", "queries.npy", "truth.npy"))}


def scale_table(args: argparse.Namespace) -> None:
    print("\n## Scale: top-100 by cosine, 384-d unit vectors (e5 passages + noise), e5 queries\n")
    print(f"noise σ = {args.noise} per component; {args.queries} queries per method "
          f"({args.simple_queries} for SimpleVectorStore); build and query in separate processes; "
          f"{args.threads} BLAS/OpenMP thread(s)\n")
    print("| n | method | build s | open s | p50 ms | p95 ms | query RSS MB (anon + file) | folder MB | recall@100 | p50 ÷ numpy | SimpleVectorStore p50 ÷ this |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    log = Path(args.log)
    for n in args.sizes:
        x, q = make_vectors(Path(args.cache), args.sets, n, args.noise)
        q = q[: max(args.queries, args.simple_queries)]
        x64 = x.astype(np.float64)
        truth = np.stack([np.lexsort((np.arange(n), -(x64 @ qq.astype(np.float64))))[:K] for qq in q])
        del x64
        rows: dict[str, dict[str, float] | str] = {}
        for method in args.methods:
            if method == "simple" and n > args.simple_max:
                rows[method] = "not run: pure-Python scan (~1 min/query, ~25 GB of floats at 10^6)"
                continue
            if method == "faiss-hnsw" and n > args.hnsw_max or method == "usearch-hnsw" and n > args.hnsw_max:
                rows[method] = f"not run above {args.hnsw_max} (graph build time on 2 cores)"
                continue
            tmp = Path(tempfile.mkdtemp(prefix=f"dense-{method}-", dir=args.workdir))
            try:
                np.save(tmp / "data.npy", x)
                np.save(tmp / "queries.npy", q)
                np.save(tmp / "truth.npy", truth)
                nq = args.simple_queries if method == "simple" else args.queries
                rows[method] = run_one(method, tmp, nq, log, args.threads)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"[{n} {method}] {rows[method]}", file=sys.stderr, flush=True)
        roof = rows.get("numpy")
        simple = rows.get("simple")
        for method, r in rows.items():
            if isinstance(r, str):
                print(f"| {n:,} | {method} | {r} | | | | | | | | |")
                continue
            vs_roof = f"{r['p50'] / roof['p50']:.2f}" if isinstance(roof, dict) else ""
            vs_simple = f"{simple['p50'] / r['p50']:.0f}×" if isinstance(simple, dict) else ""
            print(f"| {n:,} | {method} | {r['build_s']:.1f} | {r['open_s']:.2f} | {r['p50']:.1f} | "
                  f"{r['p95']:.1f} | {r['rss_mb']:.0f} ({r.get('anon_mb', float('nan')):.0f} + {r.get('file_mb', float('nan')):.0f}) | {r['bytes'] / 2**20:.0f} | {r['recall']:.3f} | "
                  f"{vs_roof} | {vs_simple} |", flush=True)


def interleaved(args: argparse.Namespace) -> None:
    """All methods in one process, queries round-robin: ratios robust to a machine whose load
    drifts during the run (each method sees the same moments)."""
    print("\n## Interleaved in one process (round-robin queries; p50 ms, ratio to numpy)\n")
    print("| n | " + " | ".join(args.interleave_methods) + " |")
    print("|---:|" + "---:|" * len(args.interleave_methods))
    for n in args.sizes:
        x, q = make_vectors(Path(args.cache), args.sets, n, args.noise)
        q = q[: args.queries]
        tmp = Path(tempfile.mkdtemp(prefix="dense-inter-", dir=args.workdir))
        try:
            searchers = {}
            for m in args.interleave_methods:
                if m == "simple" and n > args.simple_max:
                    continue
                (tmp / m).mkdir()
                build(m, x, tmp / m)
                searchers[m] = open_searcher(m, tmp / m, x.shape[1])
                searchers[m](q[0])
            gc.collect()
            gc.freeze()  # SimpleVectorStore's millions of floats would make every GC pass long
            times: dict[str, list[float]] = {m: [] for m in searchers}
            for j in range(len(q)):
                for m, fn in searchers.items():
                    if m == "simple" and j >= args.simple_queries:
                        continue
                    t0 = time.perf_counter()
                    fn(q[j])
                    times[m].append(time.perf_counter() - t0)
        finally:
            gc.unfreeze()
            shutil.rmtree(tmp, ignore_errors=True)
        p50 = {m: float(np.percentile(t, 50)) * 1000 for m, t in times.items()}
        cells = []
        for m in args.interleave_methods:
            if m not in p50:
                cells.append("not run")
            else:
                cells.append(f"{p50[m]:.1f} ({p50[m] / p50['numpy']:.2f}×)" if "numpy" in p50 else f"{p50[m]:.1f}")
        print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)
        if "simple" in p50:
            print(f"\nSimpleVectorStore p50 ÷ flat p50 at {n:,}: {p50['simple'] / p50['flat']:.0f}×"
                  f" (÷ flat32: {p50['simple'] / p50['flat32']:.0f}×)\n" if "flat" in p50 and "flat32" in p50 else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="/tmp/car-scale/cache")
    ap.add_argument("--sets", nargs="+", default=["lhcs", "autorag"])
    ap.add_argument("--loss-sets", nargs="*", default=None, help="default: --sets")
    ap.add_argument("--sizes", nargs="*", type=int, default=[10_000, 100_000])
    ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--simple-queries", type=int, default=5)
    ap.add_argument("--simple-max", type=int, default=100_000)
    ap.add_argument("--hnsw-max", type=int, default=100_000)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--log", default="/tmp/car-scale/dense_scale.log")
    ap.add_argument("--interleave", action="store_true", help="only the interleaved table")
    ap.add_argument("--interleave-methods", nargs="+", default=["numpy", "flat", "flat32", "faiss-flat", "simple"])
    ap.add_argument("--child-method")
    ap.add_argument("--child-dir")
    ap.add_argument("--child-phase")
    ap.add_argument("--child-queries", type=int, default=50)
    args = ap.parse_args()
    if args.child_method:
        child(args)
        return
    print(f"# dense_scale: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    if args.interleave:
        interleaved(args)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
        return
    ranking_loss(Path(args.cache), args.loss_sets if args.loss_sets is not None else args.sets)
    if args.sizes:
        scale_table(args)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
