"""Kiwi tokenization for index builds: 1 process vs N processes, in one run (prints a table).

Texts: passages of the shared eval corpora (``../shared/eval/*/corpus.jsonl``), the first
``--texts`` of them. Modes, run interleaved ``--repeats`` times so machine load hits all alike:

* ``1 proc, 1 thread``: ``KiwiTokenizer(num_workers=0)`` (Kiwi single-threaded);
* ``1 proc, Kiwi threads``: ``KiwiTokenizer()`` (Kiwi's own thread pool, all cores);
* ``N procs``: ``KiwiTokenizer(processes=N)`` (spawned workers, single-threaded Kiwi each;
  the wall time includes starting the workers and loading their models).

Reported: wall seconds and kchar/s (best of the repeats), the wall speedup vs 1 process /
1 thread, and CPU seconds (this process + its reaped workers, ``resource.getrusage``). On a
machine shared with other jobs the wall speedup is capped by the cores we actually get; the
CPU-time figures show the work done: ``cpu-bound speedup = N * cpu(1 proc) / cpu(N procs)``
is the speedup N idle cores would give (process overhead included, start-up not amortised).
Every mode's tokens are checked equal.

Usage::

    python benchmarks/tokenize_parallel.py --texts 2000 --processes 2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Sequence
from pathlib import Path

from llama_index_car.tokenizers.kiwi import KiwiTokenizer

EVAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "eval"


def load_texts(n: int) -> list[str]:
    out: list[str] = []
    for folder in sorted(EVAL.iterdir()):
        f = folder / "corpus.jsonl"
        if f.is_file():
            for line in f.read_text("utf-8").splitlines():
                d = json.loads(line)
                out.append((d.get("title") or "") + "\n" + d["text"])
    return out[:n]


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def run(tok: KiwiTokenizer, texts: list[str]) -> tuple[float, float, list[list[str]]]:
    c0, t0 = cpu_seconds(), time.perf_counter()
    out = tok.tokenize_batch(texts)
    return time.perf_counter() - t0, cpu_seconds() - c0, out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--texts", type=int, default=2000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    texts = load_texts(args.texts)
    chars = sum(map(len, texts))
    modes = {
        "1 proc, 1 thread": KiwiTokenizer(num_workers=0),
        "1 proc, Kiwi threads": KiwiTokenizer(),
        f"{args.processes} procs": KiwiTokenizer(processes=args.processes),
    }
    for tok in modes.values():  # load the in-process models before timing
        tok.tokenize("워밍업")
    best: dict[str, tuple[float, float]] = {}
    ref: list[list[str]] | None = None
    for _ in range(args.repeats):
        for name, tok in modes.items():
            wall, cpu, out = run(tok, texts)
            if ref is None:
                ref = out
            assert out == ref, f"{name}: tokens differ"
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    load = os.getloadavg()
    print(
        f"{len(texts)} texts, {chars / 1000:.0f} kchar; {os.cpu_count()} cores; "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    print("| mode | wall s | kchar/s | speedup (wall) | CPU s | kchar per CPU s |")
    print("|---|---|---|---|---|---|")
    base_wall, base_cpu = best["1 proc, 1 thread"]
    for name, (wall, cpu) in best.items():
        print(
            f"| {name} | {wall:.1f} | {chars / 1000 / wall:.1f} | {base_wall / wall:.2f}x | "
            f"{cpu:.1f} | {chars / 1000 / cpu:.1f} |"
        )
    n = args.processes
    wall_n, cpu_n = best[f"{n} procs"]
    print(
        f"\ncpu-bound speedup of {n} procs (if each had an idle core) = "
        f"{n} * {base_cpu:.1f} / {cpu_n:.1f} = {n * base_cpu / cpu_n:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
