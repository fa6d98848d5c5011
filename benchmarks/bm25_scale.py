"""BM25 at scale: ours vs bm25s (numpy, numba) vs rank_bm25 at 10k / 100k / 1M chunks.

Corpus: sentences of the shared eval corpora (``../shared/eval/*/corpus.jsonl``) are tokenized
ONCE with :class:`KiwiTokenizer` (cached in ``--cache``); each synthetic chunk concatenates
random sentences until it has >= 150 tokens (seeded), so every engine gets the same token
lists. Queries: 5 or 30 tokens drawn from random chunks (top 10).

Every (engine, N) is measured in its own subprocess so the memory figures are its own:

* build s, and peak RSS delta (``VmHWM`` minus the RSS once the token lists exist) and the
  retained RSS delta after the build;
* Q5 / Q30 p50 latency of top-10 (ours: ``top_k``; bm25s: ``retrieve([q], k=10)``;
  rank_bm25: ``get_scores`` + argpartition);
* disk bytes of the saved index (ours ``save``; bm25s ``save``; rank_bm25: ``np.save`` of its
  arrays + JSON of its dicts, as no format exists), and load seconds + RSS delta in a fresh
  process (ours ``load(mmap=True)``, bm25s ``load(mmap=True)``) before the first query;
* max relative score difference of ours vs rank_bm25 (N <= ``--rank-max``);
* a "race" per peer: ours and that peer's saved index (not rank_bm25) loaded in ONE process
  and queried interleaved, query by query, after a warm-up pass, so machine load hits both
  alike (one process per pair: a third engine's allocations would flush the caches between
  the two being compared).

Latencies are p50 after a warm-up pass over all the queries (so ours has done its
once-per-term posting check and quantization for them, and numba has compiled).

Usage::

    nice -n 10 python benchmarks/bm25_scale.py                       # 10k, 100k, 1M (~15 min)
    python benchmarks/bm25_scale.py --sizes 10000 --queries 50        # quick
    nice -n 10 python benchmarks/bm25_scale.py --sharded 3000000 --shard-size 1000000

``--sharded N`` builds N chunks as shards streamed from a generator (no token lists held),
saves each, then ``BM25Okapi.merge`` of the memory-mapped shards, and prints time, peak RSS
and disk per phase with the memory model's prediction.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

EVAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "eval"
_SENT = re.compile(r"(?<=[.?!다])\s+|\n+")
CHUNK_TOKENS = 150


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # pragma: no cover
        pass


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- corpus
def sentence_tokens(cache: Path, n_sentences: int = 100_000) -> list[list[str]]:
    if cache.is_file():
        return json.loads(cache.read_text("utf-8"))  # type: ignore[no-any-return]
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    passages: list[str] = []
    for folder in sorted(EVAL.iterdir()):
        if (folder / "corpus.jsonl").is_file():
            for line in (folder / "corpus.jsonl").read_text("utf-8").splitlines():
                d = json.loads(line)
                passages.append((d.get("title") or "") + "\n" + d["text"])
    sents = [s.strip() for p in passages for s in _SENT.split(p) if len(s.strip()) >= 10]
    random.Random(0).shuffle(sents)
    log(f"tokenizing {min(n_sentences, len(sents))} sentences once (cached in {cache})")
    toks = [t for t in KiwiTokenizer().tokenize_batch(sents[:n_sentences]) if t]
    cache.write_text(json.dumps(toks, ensure_ascii=False), "utf-8")
    return toks


def chunks(sents: list[list[str]], n: int, seed: int) -> Iterator[list[str]]:
    rng = np.random.default_rng(seed)
    m = len(sents)
    for start in range(0, n, 1 << 16):  # sentence picks drawn per block: O(1) memory in n
        for row in rng.integers(0, m, size=(min(1 << 16, n - start), 40)).tolist():
            out: list[str] = []
            for i in row:
                out.extend(sents[i])
                if len(out) >= CHUNK_TOKENS:
                    break
            yield out


def make_queries(sents: list[list[str]], length: int, n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    qs = []
    for _ in range(n):
        doc: list[str] = []
        while len(doc) < length:
            doc.extend(sents[rng.randrange(len(sents))])
        qs.append(rng.sample(doc, length))
    return qs


# ----------------------------------------------------------------------------- engines
def p50_ms(fn: Callable[[list[str]], Any], queries: list[list[str]]) -> float:
    """p50 after one warm-up pass over all the queries (compiles, faults pages in, and lets
    our kernel do its once-per-term posting check; the same pass for every engine)."""
    for q in queries:
        fn(q)
    ts = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        ts.append((time.perf_counter() - t) * 1000)
    return statistics.median(ts)


def build(engine: str, corpus: list[list[str]]) -> Any:
    if engine == "ours":
        from llama_index_car.bm25 import BM25Okapi

        return BM25Okapi(corpus)
    if engine.startswith("bm25s"):
        import bm25s

        r = bm25s.BM25(method="robertson", backend=engine.split("-")[1])
        r.index(corpus, show_progress=False)
        return r
    import rank_bm25

    return rank_bm25.BM25Okapi(corpus)


def top10(engine: str, obj: Any) -> Callable[[list[str]], Any]:
    if engine == "ours":
        return lambda q: obj.top_k(q, 10)
    if engine.startswith("bm25s"):
        return lambda q: obj.retrieve([q], k=10, show_progress=False)

    def rb(q: list[str]) -> Any:
        s = obj.get_scores(q)
        return np.argpartition(-s, 10)[:10]

    return rb


def save(engine: str, obj: Any, path: Path) -> None:
    if engine == "ours":
        obj.save(path)
    elif engine.startswith("bm25s"):
        obj.save(str(path))
    else:
        path.mkdir(parents=True)
        np.save(path / "doc_len.npy", np.asarray(obj.doc_len))
        (path / "stats.json").write_text(
            json.dumps({"idf": obj.idf, "doc_freqs": obj.doc_freqs, "avgdl": obj.avgdl})
        )


def worker_build(engine: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    sents = sentence_tokens(Path(args.cache))
    corpus = list(chunks(sents, n, seed=n))
    nq = args.rank_queries if engine == "rank_bm25" else args.queries
    q5 = make_queries(sents, 5, nq, 5)
    q30 = make_queries(sents, 30, nq, 30)
    base = rss_mb()
    reset_peak()
    t = time.perf_counter()
    obj = build(engine, corpus)
    secs = time.perf_counter() - t
    peak = rss_mb("VmHWM") - base
    kept = rss_mb() - base
    fn = top10(engine, obj)
    row: dict[str, Any] = {
        "engine": engine,
        "N": n,
        "tokens": sum(map(len, corpus)),
        "build_s": secs,
        "peak_mb": peak,
        "retained_mb": kept,
        "q5_ms": p50_ms(fn, q5),
        "q30_ms": p50_ms(fn, q30),
    }
    if engine == "ours":
        row["nnz"] = obj.nnz
        row["vocab"] = len(obj.terms)
    if engine == "rank_bm25":
        from llama_index_car.bm25 import BM25Okapi

        ours = BM25Okapi(corpus)
        diff = 0.0
        for q in q5[:10] + q30[:10]:
            a, b = ours.get_scores(q), np.asarray(obj.get_scores(q))
            diff = max(diff, float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))))
        row["max_rel_diff_vs_ours"] = diff
    path = Path(args.tmp) / f"{engine}-{n}"
    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    save(engine, obj, path)
    row["save_s"] = time.perf_counter() - t
    row["disk_mb"] = dir_bytes(path) / 1e6
    (Path(args.tmp) / f"q-{n}.json").write_text(json.dumps(q5[:20]))
    return row


def worker_load(engine: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    path = Path(args.tmp) / f"{engine}-{n}"
    qs = json.loads((Path(args.tmp) / f"q-{n}.json").read_text())
    if engine == "ours":
        from llama_index_car.bm25 import BM25Okapi

        base = rss_mb()
        t = time.perf_counter()
        obj = BM25Okapi.load(path, mmap=True)
    else:
        import bm25s

        base = rss_mb()
        t = time.perf_counter()
        obj = bm25s.BM25.load(str(path), mmap=True)
        obj.backend = engine.split("-")[1]
    secs = time.perf_counter() - t
    mb = rss_mb() - base
    fn = top10(engine, obj)
    t = time.perf_counter()
    fn(qs[0])
    first = (time.perf_counter() - t) * 1000
    return {"load_s": secs, "load_mb": mb, "first_query_ms": first}


def worker_race(engines: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Queries of every saved engine in ONE process, interleaved query by query, so machine
    load hits all engines alike (the fair latency comparison on a shared machine)."""
    sents = sentence_tokens(Path(args.cache))
    fns: dict[str, Callable[[list[str]], Any]] = {}
    for engine in engines.split(","):
        path = Path(args.tmp) / f"{engine}-{n}"
        if engine == "ours":
            from llama_index_car.bm25 import BM25Okapi

            fns[engine] = top10(engine, BM25Okapi.load(path, mmap=True))
        else:
            import bm25s

            obj = bm25s.BM25.load(str(path), mmap=True)
            obj.backend = engine.split("-")[1]
            fns[engine] = top10(engine, obj)
    out: dict[str, Any] = {}
    for length in (5, 30):
        qs = make_queries(sents, length, args.queries, length)
        for fn in fns.values():  # warm: compile, fault in the pages
            for q in qs:
                fn(q)
        ts: dict[str, list[float]] = {e: [] for e in fns}
        for q in qs:
            for e, fn in fns.items():
                t = time.perf_counter()
                fn(q)
                ts[e].append((time.perf_counter() - t) * 1000)
        for e in fns:
            out[f"{e}:q{length}_race_ms"] = statistics.median(ts[e])
    return out


# ----------------------------------------------------------------------------- sharded
class RssSampler:
    """Peak anonymous RSS (``RssAnon``: heap, not file-backed mapped pages) sampled at 5 Hz."""

    def __init__(self) -> None:
        import threading

        self.peak = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, rss_mb("RssAnon"))

    def take(self) -> float:
        """The peak since the last call, then reset."""
        peak, self.peak = max(self.peak, rss_mb("RssAnon")), 0.0
        return peak


def worker_sharded(n: int, shard: int, args: argparse.Namespace) -> dict[str, Any]:
    from llama_index_car.bm25 import BM25Okapi

    sents = sentence_tokens(Path(args.cache))
    root = Path(args.tmp) / f"sharded-{n}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    base_anon = rss_mb("RssAnon")
    sampler = RssSampler()
    sampler.take()
    t0 = time.perf_counter()
    gen = chunks(sents, n, seed=n)
    paths: list[Path] = []
    done = 0
    while done < n:
        m = min(shard, n - done)
        part = BM25Okapi(next(gen) for _ in range(m))
        p = root / f"shard-{len(paths):03d}"
        part.save(p)
        paths.append(p)
        done += m
        del part
        log(
            f"  shard {len(paths)}: {done:,}/{n:,} docs, {time.perf_counter() - t0:.0f} s, "
            f"anon peak {sampler.peak - base_anon:.0f} MB"
        )
    build_s = time.perf_counter() - t0
    build_anon = sampler.take() - base_anon
    build_hwm = rss_mb("VmHWM")
    reset_peak()
    t = time.perf_counter()
    shards = [BM25Okapi.load(p, verify="lazy") for p in paths]
    merged = BM25Okapi.merge(shards, out=root / "merged")
    merge_s = time.perf_counter() - t
    merge_anon = sampler.take() - base_anon
    merge_hwm = rss_mb("VmHWM")
    row = {
        "N": n,
        "shards": len(paths),
        "tokens_per_doc": CHUNK_TOKENS,
        "nnz": merged.nnz,
        "vocab": merged._index.n_terms,
        "build_s": build_s,
        "build_anon_peak_mb": build_anon,
        "build_vmhwm_mb": build_hwm,
        "merge_s": merge_s,
        "merge_anon_peak_mb": merge_anon,
        "merge_vmhwm_mb": merge_hwm,
        "shards_disk_mb": sum(dir_bytes(p) for p in paths) / 1e6,
        "disk_mb": dir_bytes(root / "merged") / 1e6,
        "load_avg": os.getloadavg(),
    }
    log(json.dumps(row))
    del merged, shards
    base = rss_mb()
    t = time.perf_counter()
    loaded = BM25Okapi.load(root / "merged", verify="lazy")
    row["load_s"] = time.perf_counter() - t
    row["load_mb"] = rss_mb() - base
    for length in (5, 30):
        qs = make_queries(sents, length, 50, length)
        row[f"q{length}_ms"] = p50_ms(lambda q: loaded.top_k(q, 10), qs)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return row


# ----------------------------------------------------------------------------- driver
def run_worker(argv: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, *argv]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def fmt(rows: list[dict[str, Any]]) -> str:
    head = (
        "| N | engine | build s | peak RSS delta | retained | Q5 p50 / Q30 p50 | "
        "same-process race Q5 / Q30 | disk | load from disk (RSS) |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        load = f"{r['load_s']:.2f} s ({r['load_mb']:.0f} MB)" if "load_s" in r else "-"
        race = f"{r['q5_race_ms']:.2f} / {r['q30_race_ms']:.2f} ms" if "q5_race_ms" in r else "-"
        if r["engine"] == "ours":  # one figure per pairwise race
            race = "<br>".join(
                f"{r[k]:.2f} / {r[k.replace('q5', 'q30', 1)]:.2f} ms (vs {k[len('q5_race_vs_'):-3]})"
                for k in sorted(r)
                if k.startswith("q5_race_vs_")
            ) or "-"
        lines.append(
            f"| {r['N']:,} | {r['engine']} | {r['build_s']:.1f} | {r['peak_mb'] / 1024:.2f} GB | "
            f"{r['retained_mb']:.0f} MB | {r['q5_ms']:.2f} / {r['q30_ms']:.2f} ms | {race} | "
            f"{r['disk_mb']:.0f} MB | {load} |"
        )
    lines.append("")
    lines.append("Ratios ours / peer (same run; < 1 = ours better):")
    lines.append(
        "| N | peer | build | peak RSS | Q5 p50 | Q30 p50 | race Q5 | race Q30 | disk | load s |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    by = {(r["N"], r["engine"]): r for r in rows}
    for (n, eng), r in by.items():
        o = by.get((n, "ours"))
        if eng == "ours" or o is None:
            continue

        def ratio(
            key: str, mine: str | None = None, o: dict[str, Any] = o, r: dict[str, Any] = r
        ) -> str:
            mine = mine or key
            return f"{o[mine] / r[key]:.2f}" if mine in o and key in r and r[key] else "-"

        lines.append(
            f"| {n:,} | {eng} | {ratio('build_s')} | {ratio('peak_mb')} | {ratio('q5_ms')} | "
            f"{ratio('q30_ms')} | {ratio('q5_race_ms', f'q5_race_vs_{eng}_ms')} | "
            f"{ratio('q30_race_ms', f'q30_race_vs_{eng}_ms')} | "
            f"{ratio('disk_mb')} | {ratio('load_s')} |"
        )
    diffs = [r for r in rows if "max_rel_diff_vs_ours" in r]
    for r in diffs:
        lines.append(
            f"\nN={r['N']:,}: max relative score difference ours vs rank_bm25 = "
            f"{r['max_rel_diff_vs_ours']:.2e}"
        )
    for r in rows:
        if r["engine"] == "ours" and "nnz" in r:
            lines.append(
                f"N={r['N']:,}: {r['tokens']:,} tokens, {r['nnz']:,} postings, vocab {r['vocab']:,}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--engines", default="ours,bm25s-numpy,bm25s-numba,rank_bm25")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rank-queries", type=int, default=10)
    p.add_argument("--rank-max", type=int, default=100_000)
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "bm25_scale_sents.json"))
    p.add_argument("--tmp", default=os.path.join(tempfile.gettempdir(), "bm25_scale"))
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--sharded", type=int, help="sharded build + merge of this many chunks")
    p.add_argument("--shard-size", type=int, default=1_000_000)
    p.add_argument("--keep", action="store_true", help="keep the sharded index on disk")
    p.add_argument("--worker", nargs=3, metavar=("KIND", "ENGINE", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    if args.worker:
        kind, engine, n = args.worker
        fn = {"build": worker_build, "load": worker_load, "race": worker_race}.get(kind)
        if kind == "sharded":
            row = worker_sharded(int(n), int(engine), args)
        else:
            assert fn is not None
            row = fn(engine, int(n), args)
        print(json.dumps(row))
        return 0
    sentence_tokens(Path(args.cache))
    common = [
        "--cache",
        args.cache,
        "--tmp",
        args.tmp,
        "--queries",
        str(args.queries),
        "--rank-queries",
        str(args.rank_queries),
    ]
    if args.sharded:
        if args.keep:
            common.append("--keep")
        row = run_worker(["--worker", "sharded", str(args.shard_size), str(args.sharded), *common])
        print(json.dumps(row, indent=1))
        return 0
    rows: list[dict[str, Any]] = []
    for n in [int(x) for x in args.sizes.split(",")]:
        for engine in args.engines.split(","):
            if engine == "rank_bm25" and n > args.rank_max:
                continue
            log(f"[{n}] {engine}: build")
            row = run_worker(["--worker", "build", engine, str(n), *common])
            if engine != "rank_bm25":
                log(f"[{n}] {engine}: load")
                row.update(run_worker(["--worker", "load", engine, str(n), *common]))
            rows.append(row)
            log(json.dumps(row))
        racers = [e for e in args.engines.split(",") if e not in ("rank_bm25", "ours")]
        if "ours" in args.engines.split(","):
            # one race per peer, ours vs that peer alone in a process: a third engine's
            # allocations would also flush the caches between the two being compared
            for peer in racers:
                log(f"[{n}] race: ours vs {peer}")
                race = run_worker(["--worker", "race", f"ours,{peer}", str(n), *common])
                for row in rows:
                    for length in (5, 30):
                        if row["N"] != n:
                            continue
                        key = f"{row['engine']}:q{length}_race_ms"
                        if row["engine"] == peer and key in race:
                            row[f"q{length}_race_ms"] = race[key]
                        elif row["engine"] == "ours" and key in race:
                            row[f"q{length}_race_vs_{peer}_ms"] = race[key]
        for engine in args.engines.split(","):
            shutil.rmtree(Path(args.tmp) / f"{engine}-{n}", ignore_errors=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print(fmt(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
