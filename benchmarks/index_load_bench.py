"""Benchmark: size of ``llama-car index`` folders and ``load_index`` time in a fresh process.

Each folder is loaded ``--repeat`` times, interleaved with the other folders (so machine load
hits all alike), each time in a new Python process that imports ``llama_index_car`` and calls
``load_index(DIR)`` (embedding model construction included, as a restarting service pays it);
``--model-given`` times ``load_index`` alone with the model built beforehand. Prints bytes
per folder and per part, and min / median seconds.

A ``PYTHONPATH=...`` prefix in a folder argument (``PATH=SRC:DIR``) loads that folder with
another source tree, e.g. an older checkout (``git archive main | tar -x -C /tmp/old``), to
compare old and new code on the same machine in the same run.

Usage::

    llama-car index ../shared/corpus/hwpx --persist /tmp/idx --embed use
    python benchmarks/index_load_bench.py /tmp/idx [/tmp/other-idx | SRC=/tmp/old:/tmp/old-idx]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CODE = """
import sys, time
t0 = time.perf_counter()
from llama_index_car.folder import load_index
from llama_index_car.folder.record import read_record
model = None
if sys.argv[2] == "1":
    from llama_index_car.providers import resolve_embed_model
    model = resolve_embed_model(read_record(sys.argv[1])["embed"]["provider"])
    t0 = time.perf_counter()
index = load_index(sys.argv[1], embed_model=model)
print(time.perf_counter() - t0, len(index.nodes))
"""


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", help="index folders, or SRC=PYTHONPATH:FOLDER")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model-given", action="store_true", help="exclude model construction")
    args = ap.parse_args(argv)
    runs: list[tuple[str, str, Path]] = []
    for spec in args.folders:
        src, _, folder = spec.partition("=")[2].rpartition(":") if "=" in spec else ("", "", spec)
        runs.append((spec, src, Path(folder)))
    times: dict[str, list[float]] = {spec: [] for spec, _, _ in runs}
    nodes: dict[str, int] = {}
    for _ in range(args.repeat):
        for spec, src, folder in runs:
            env = dict(os.environ, PYTHONPATH=src) if src else dict(os.environ)
            out = subprocess.run(
                [sys.executable, "-c", CODE, str(folder), "1" if args.model_given else "0"],
                capture_output=True, text=True, env=env, cwd="/", check=True, timeout=900,
            )
            secs, n = out.stdout.split()[-2:]
            times[spec].append(float(secs))
            nodes[spec] = int(n)
    print("| folder | nodes | bytes | parts (bytes) | load_index s (min / median) |")
    print("|---|---:|---:|---|---:|")
    for spec, _, folder in runs:
        parts = ", ".join(
            f"{p.name} {_size(p) if p.is_dir() else p.stat().st_size}"
            for p in sorted(folder.iterdir())
        )
        ts = times[spec]
        print(
            f"| {spec} | {nodes[spec]} | {_size(folder)} | {parts} | "
            f"{min(ts):.2f} / {statistics.median(ts):.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
