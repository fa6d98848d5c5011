"""Benchmark: node records read, not loaded: mmap'd offsets + blob (``_records``) vs SQLite vs
today's ``nodes.json``.

For ``--sizes`` records (payload: node JSON of real eval-set texts, ~``--bytes`` each, keys
like node ids), each format is written in one process and opened in a fresh one: open s,
resident memory after opening (VmRSS), random reads by position and by key (p50 / p95 µs,
``--reads`` of them, payload parsed as JSON), a full iteration (records/s) and bytes on disk.
SQLite: one table ``(pos INTEGER PRIMARY KEY, key TEXT UNIQUE, payload BLOB)``, read-only URI,
default page cache. ``nodes.json``: one JSON array parsed at open (today's layout), run up to
``--json-max`` records.

Usage::

    nice -n 10 python benchmarks/records_bench.py --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

FORMATS = ("records", "sqlite", "json")


def _items(n: int, size: int) -> list[tuple[str, bytes]]:
    from _eval_vectors import load_set

    _, texts, _, _, _ = load_set("lhcs")
    rng = random.Random(0)
    out = []
    for i in range(n):
        t = texts[rng.randrange(len(texts))]
        body = (t * (size // max(1, len(t.encode())) + 1))[: size // 3]
        node = {"id_": f"node-{i:09d}", "text": body, "metadata": {"file_name": f"f{i // 50}.hwpx",
                                                                   "section_title": body[:20]}}
        out.append((node["id_"], json.dumps(node, ensure_ascii=False).encode()))
    return out


def write(fmt: str, where: Path, n: int, size: int) -> None:
    items = _items(n, size)
    if fmt == "records":
        from llama_index_car._records import write_records

        write_records(where, "nodes", items)
    elif fmt == "sqlite":
        con = sqlite3.connect(where / "nodes.sqlite")
        con.execute("CREATE TABLE nodes (pos INTEGER PRIMARY KEY, key TEXT UNIQUE, payload BLOB)")
        con.executemany("INSERT INTO nodes VALUES (?, ?, ?)", ((i, k, p) for i, (k, p) in enumerate(items)))
        con.commit()
        con.close()
    else:
        (where / "nodes.json").write_bytes(b"[" + b",".join(p for _, p in items) + b"]")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def read(fmt: str, where: Path, n: int, reads: int) -> dict[str, float]:
    from llama_index_car._records import RecordFile  # imported before timing (all formats)

    rng = random.Random(1)
    pos = [rng.randrange(n) for _ in range(reads)]
    keys = [f"node-{i:09d}" for i in pos]
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    if fmt == "records":
        rf = RecordFile.open(where, "nodes")
        by_pos = rf.json

        def by_key(k: str) -> object:
            i = rf.find(k)
            return rf.json(i) if i is not None else None

        def scan() -> int:
            return sum(1 for _ in rf)
    elif fmt == "sqlite":
        con = sqlite3.connect(f"file:{where / 'nodes.sqlite'}?mode=ro", uri=True, check_same_thread=False)

        def by_pos(i: int) -> object:
            return json.loads(con.execute("SELECT payload FROM nodes WHERE pos = ?", (i,)).fetchone()[0])

        def by_key(k: str) -> object:
            return json.loads(con.execute("SELECT payload FROM nodes WHERE key = ?", (k,)).fetchone()[0])

        def scan() -> int:
            return sum(1 for _ in con.execute("SELECT key, payload FROM nodes"))
    else:
        data = json.loads((where / "nodes.json").read_bytes())
        index = {d["id_"]: j for j, d in enumerate(data)}

        def by_pos(i: int) -> object:
            return data[i]

        def by_key(k: str) -> object:
            return data[index[k]]

        def scan() -> int:
            return sum(1 for _ in data)
    open_s = time.perf_counter() - t0
    rss_open = _rss_mb()
    out: dict[str, float] = {"open_s": open_s, "rss_open_mb": rss_open, "rss_base_mb": rss0}
    for label, fn, args in (("pos", by_pos, pos), ("key", by_key, keys)):
        times = []
        for a in args:
            t1 = time.perf_counter()
            fn(a)  # type: ignore[operator]
            times.append(time.perf_counter() - t1)
        out[f"{label}_p50_us"] = float(np.percentile(times, 50)) * 1e6
        out[f"{label}_p95_us"] = float(np.percentile(times, 95)) * 1e6
    out["rss_reads_mb"] = _rss_mb()
    t0 = time.perf_counter()
    count = scan()
    out["scan_per_s"] = count / (time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000])
    ap.add_argument("--bytes", type=int, default=4500, help="payload bytes per record (4.5 KB: nodes.json per node today)")
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--json-max", type=int, default=100_000)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", nargs=4, metavar=("PHASE", "FMT", "DIR", "N"))
    args = ap.parse_args()
    if args.child:
        phase, fmt, where, n = args.child
        if phase == "write":
            t0 = time.perf_counter()
            write(fmt, Path(where), int(n), args.bytes)
            print(json.dumps({"write_s": time.perf_counter() - t0}))
        else:
            print(json.dumps(read(fmt, Path(where), int(n), args.reads)))
        return
    print(f"# records_bench: load average {os.getloadavg()[0]:.1f} at start; ~{args.bytes} B payloads\n")
    print("| records | format | write s | open s | RSS after open MB (Δ) | read by position p50 / p95 µs | read by key p50 / p95 µs | RSS after reads MB | scan records/s | bytes on disk |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        for fmt in FORMATS:
            if fmt == "json" and n > args.json_max:
                print(f"| {n:,} | json | not run (parses {n * args.bytes / 2**30:.1f} GB into Python objects at open) | | | | | | | |")
                continue
            where = Path(tempfile.mkdtemp(prefix=f"rec-{fmt}-", dir=args.workdir))
            try:
                got = {}
                for phase in ("write", "read"):
                    p = subprocess.run([sys.executable, __file__, "--bytes", str(args.bytes), "--reads", str(args.reads),
                                        "--child", phase, fmt, str(where), str(n)], capture_output=True, text=True)
                    if p.returncode:
                        got = {"error": p.stderr.strip().splitlines()[-1][:120]}
                        break
                    got.update(json.loads(p.stdout.strip().splitlines()[-1]))
                size = sum(f.stat().st_size for f in where.rglob("*") if f.is_file())
            finally:
                shutil.rmtree(where, ignore_errors=True)
            if "error" in got:
                print(f"| {n:,} | {fmt} | failed: {got['error']} | | | | | | | |", flush=True)
                continue
            print(f"| {n:,} | {fmt} | {got['write_s']:.1f} | {got['open_s']:.3f} | {got['rss_open_mb']:.0f} "
                  f"({got['rss_open_mb'] - got['rss_base_mb']:+.0f}) | {got['pos_p50_us']:.1f} / {got['pos_p95_us']:.1f} | "
                  f"{got['key_p50_us']:.1f} / {got['key_p95_us']:.1f} | {got['rss_reads_mb']:.0f} | "
                  f"{got['scan_per_s']:,.0f} | {size / n:,.0f} B/record |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
