"""Speed, memory and score parity of our BM25Okapi vs rank_bm25 and bm25s (prints tables).

Corpora of 10k / 20k / 100k "chunks" of real Korean text: passages of ``../shared/eval``
are split into sentences, a sample of sentences is tokenized ONCE with :class:`KiwiTokenizer`,
and each chunk concatenates the token lists of 3-8 random sentences (seeded). Every engine
gets the same token lists; queries are real eval queries tokenized the same way.

Engines: ours (``llama_index_car.bm25.BM25Okapi``), ``rank_bm25.BM25Okapi`` (only up to 20k
chunks, few queries: ~0.1 s per query), ``bm25s.BM25(method="robertson")`` with its numpy
backend (the default) and, when numba is installed, its numba backend.

Measured: build seconds; single-query latency p50/p95 of "top 10" (ours: ``top_k``;
rank_bm25: ``get_scores`` + argsort; bm25s: ``retrieve([q], k=10)``); batched throughput
(ours ``top_k_batch`` vs bm25s ``retrieve(all)``); memory (tracemalloc: peak during the
build and retained after it); max relative score difference vs rank_bm25; Kiwi tokenization
throughput with 1 vs 2 workers; KiwiBM25Retriever re-index speed with a warm token cache.

Usage::

    PYTHONPATH=. python benchmarks/bm25_bench.py                  # full run (~5-10 min)
    PYTHONPATH=. python benchmarks/bm25_bench.py --sizes 10000 --queries 100 --quick
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_car.bm25 import BM25Okapi
from llama_index_car.tokenizers.kiwi import KiwiTokenizer

EVAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "eval"
_SENT = re.compile(r"(?<=[.?!다])\s+|\n+")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_texts() -> tuple[list[str], list[str]]:
    passages: list[str] = []
    queries: list[str] = []
    for folder in sorted(EVAL.iterdir()):
        if not (folder / "corpus.jsonl").is_file():
            continue
        for line in (folder / "corpus.jsonl").read_text("utf-8").splitlines():
            d = json.loads(line)
            passages.append((d.get("title") or "") + "\n" + d["text"])
        for line in (folder / "queries.jsonl").read_text("utf-8").splitlines():
            queries.append(json.loads(line)["text"])
    return passages, queries


def sentence_pool(passages: list[str], n_sentences: int, rng: random.Random) -> list[str]:
    sents = [s.strip() for p in passages for s in _SENT.split(p) if len(s.strip()) >= 10]
    rng.shuffle(sents)
    return sents[:n_sentences]


def make_chunks(sent_tokens: list[list[str]], n: int, rng: random.Random) -> list[list[str]]:
    out: list[list[str]] = []
    m = len(sent_tokens)
    for _ in range(n):
        toks: list[str] = []
        for _ in range(rng.randint(3, 8)):
            toks.extend(sent_tokens[rng.randrange(m)])
        out.append(toks)
    return out


def measure_build(fn: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """(object, seconds, peak MB during build, retained MB after build) via tracemalloc."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    obj = fn()
    secs = time.perf_counter() - t
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return obj, secs, (peak - base) / 2**20, (cur - base) / 2**20


def latencies(fn: Callable[[list[str]], Any], queries: list[list[str]]) -> tuple[float, float]:
    fn(queries[0])  # warm-up
    ts: list[float] = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    p95 = ts[min(len(ts) - 1, int(round(0.95 * (len(ts) - 1))))]
    return statistics.median(ts), p95


def _bm25s_top10(engine: Any, q: list[str]) -> Any:
    return engine.retrieve([q], k=10, show_progress=False)


def max_rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))) if a.size else 0.0


def bench_size(
    n: int,
    chunks: list[list[str]],
    queries: list[list[str]],
    n_rank: int,
    with_rank: bool,
    numba: bool,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    corpus = chunks[:n]
    log(f"[{n}] building ours")
    ours, secs, peak, kept = measure_build(lambda: BM25Okapi(corpus))
    p50, p95 = latencies(lambda q: ours.top_k(q, 10), queries)
    t = time.perf_counter()
    ours.top_k_batch(queries, 10)
    qps = len(queries) / (time.perf_counter() - t)
    rows.append(
        dict(
            engine="ours BM25Okapi",
            n=n,
            build=secs,
            peak=peak,
            kept=kept,
            p50=p50,
            p95=p95,
            qps=qps,
            diff=None,
        )
    )
    import bm25s

    backends = ["numpy"] + (["numba"] if numba else [])
    for backend in backends:
        log(f"[{n}] building bm25s ({backend})")

        def build_bm25s(backend: str = backend) -> Any:
            r = bm25s.BM25(method="robertson", backend=backend)
            r.index(corpus, show_progress=False)
            return r

        b25, secs, peak, kept = measure_build(build_bm25s)
        p50, p95 = latencies(partial(_bm25s_top10, b25), queries)
        t = time.perf_counter()
        b25.retrieve(queries, k=10, show_progress=False)
        qps = len(queries) / (time.perf_counter() - t)
        rows.append(
            dict(
                engine=f"bm25s robertson ({backend})",
                n=n,
                build=secs,
                peak=peak,
                kept=kept,
                p50=p50,
                p95=p95,
                qps=qps,
                diff=None,
                obj=b25,
            )
        )
    if with_rank:
        import rank_bm25

        log(f"[{n}] building rank_bm25")
        rb, secs, peak, kept = measure_build(lambda: rank_bm25.BM25Okapi(corpus))
        sub = queries[:n_rank]

        def rb_top(q: list[str]) -> Any:
            s = rb.get_scores(q)
            return np.argsort(s)[::-1][:10]

        p50, p95 = latencies(rb_top, sub)
        diff = max(max_rel_diff(ours.get_scores(q), rb.get_scores(q)) for q in sub)
        rows[0]["diff"] = diff
        for r in rows[1:]:
            r["diff"] = max(
                max_rel_diff(np.asarray(r["obj"].get_scores(q), dtype=np.float64), rb.get_scores(q))
                for q in sub
            )
        rows.append(
            dict(
                engine="rank_bm25 BM25Okapi",
                n=n,
                build=secs,
                peak=peak,
                kept=kept,
                p50=p50,
                p95=p95,
                qps=1000 / p50,
                diff=0.0,
            )
        )
    for r in rows:
        r.pop("obj", None)
    return rows


def speed_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| chunks | engine | build s | peak MB | retained MB | p50 ms | p95 ms | batch q/s "
        "| p50 vs ours | max rel. diff vs rank_bm25 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sorted({r["n"] for r in rows}):
        group = [r for r in rows if r["n"] == n]
        ours = next(r for r in group if r["engine"].startswith("ours"))
        for r in group:
            diff = "-" if r["diff"] is None else f"{r['diff']:.1e}"
            ratio = r["p50"] / ours["p50"]
            lines.append(
                f"| {n:,} | {r['engine']} | {r['build']:.2f} | {r['peak']:.0f} | {r['kept']:.0f} "
                f"| {r['p50']:.3f} | {r['p95']:.3f} | {r['qps']:.0f} | {ratio:.2f}x | {diff} |"
            )
    return "\n".join(lines)


def bench_tokenization(texts: list[str], repeats: int) -> str:
    chars = sum(map(len, texts))
    res: dict[int, float] = {}
    cpu: dict[int, float] = {}
    for workers in (0, 2):
        tok = KiwiTokenizer(num_workers=workers)
        tok.tokenize_batch(["준비", "시작"])
        best = float("inf")
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            tok.tokenize_batch(texts)
            wall = time.perf_counter() - t
            if wall < best:
                best, cpu[workers] = wall, (time.process_time() - c) / wall
        res[workers] = best
        log(f"tokenize workers={workers}: {best:.2f}s")
    lines = [
        f"Kiwi tokenization of {len(texts)} passages ({chars / 1e6:.2f} M chars), best of "
        f"{repeats}:",
        "",
        "| workers | seconds | k chars/s | speed-up | process CPU s / wall s |",
        "|---|---|---|---|---|",
    ]
    for w, s in res.items():
        lines.append(
            f"| {max(w, 1)} | {s:.2f} | {chars / s / 1e3:.0f} | {res[0] / s:.2f}x | {cpu[w]:.2f} |"
        )
    try:
        import os

        lines.append(
            f"\n(load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )
    except OSError:
        pass
    return "\n".join(lines)


def bench_cache(texts: list[str]) -> str:
    from llama_index.core.schema import TextNode

    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(texts)]
    tok = KiwiTokenizer()
    tok.tokenize("준비")
    t = time.perf_counter()
    cold = KiwiBM25Retriever.from_defaults(nodes=nodes, tokenizer=tok)
    cold_s = time.perf_counter() - t
    t = time.perf_counter()
    warm = KiwiBM25Retriever.from_defaults(nodes=nodes, tokenizer=tok, token_cache=cold.token_cache)
    warm_s = time.perf_counter() - t
    same = all(
        cold.bm25.get_scores(q).tolist() == warm.bm25.get_scores(q).tolist()
        for q in (tok.tokenize(texts[0][:50]), tok.tokenize(texts[-1][:50]))
    )
    return (
        f"KiwiBM25Retriever build over {len(nodes)} nodes: cold {cold_s:.2f}s, "
        f"warm token cache {warm_s:.3f}s -> {cold_s / warm_s:.0f}x faster; scores identical: {same}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 20_000, 100_000])
    p.add_argument("--rank-max", type=int, default=20_000, help="largest size run with rank_bm25")
    p.add_argument("--queries", type=int, default=300, help="queries for ours / bm25s")
    p.add_argument("--rank-queries", type=int, default=20, help="queries for rank_bm25")
    p.add_argument("--sentences", type=int, default=12_000, help="sentences tokenized by Kiwi")
    p.add_argument("--tok-passages", type=int, default=600, help="passages for the 1-vs-2 test")
    p.add_argument("--cache-nodes", type=int, default=600, help="nodes for the cache test")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-numba", action="store_true", help="skip bm25s' numba backend")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument(
        "--parts",
        nargs="*",
        default=["tokenize", "cache", "engines"],
        choices=["tokenize", "cache", "engines"],
        help="which measurements to run",
    )
    args = p.parse_args(argv)

    rng = random.Random(args.seed)
    passages, raw_queries = load_texts()
    rng.shuffle(raw_queries)
    sample = passages[:]
    rng.shuffle(sample)
    out: list[str] = []

    if "tokenize" in args.parts:
        out.append(bench_tokenization(sample[: args.tok_passages], args.repeats))
        out.append("")
    if "cache" in args.parts:
        out.append(bench_cache(sample[: args.cache_nodes]))
    if "engines" not in args.parts:
        print("\n".join(out))
        return 0

    tok = KiwiTokenizer()
    sents = sentence_pool(passages, args.sentences, rng)
    log(f"tokenizing {len(sents)} sentences and {args.queries} queries")
    sent_tokens = [t for t in tok.tokenize_batch(sents) if t]
    queries = [q for q in tok.tokenize_batch(raw_queries[: args.queries]) if q]
    chunks = make_chunks(sent_tokens, max(args.sizes), rng)
    mean_len = statistics.mean(len(c) for c in chunks[: min(args.sizes)])
    rows: list[dict[str, Any]] = []
    numba = not args.no_numba
    if numba:
        try:
            import numba as _  # noqa: F401
        except ImportError:
            numba = False
    for n in args.sizes:
        rows.extend(bench_size(n, chunks, queries, args.rank_queries, n <= args.rank_max, numba))
    out.append("")
    out.append(
        f"BM25 engines on the same Kiwi token lists ({len(sent_tokens)} real sentences "
        f"recombined into chunks of ~{mean_len:.0f} tokens; {len(queries)} real queries, "
        f"rank_bm25 on the first {args.rank_queries}):"
    )
    out.append("")
    out.append(speed_table(rows))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
