"""Benchmark: one ``llama-car query`` from a cold process: wall time, peak RSS, and where they go.

Two measurements on an index folder built by ``llama-car index``:

* **CLI**: ``llama-car query DIR QUESTION`` run ``--repeat`` times, each in a new process;
  wall seconds and the child's peak RSS (``os.wait4``), min and median;
* **breakdown**: one new process that goes through the same steps one at a time and reads its
  clock and RSS after each: imports, building the embedding model the manifest names, loading
  the folder (``load_index``, model given), loading Kiwi's model (the first tokenization), the
  first query, and a second query. The figure "without models" is the total minus the two
  model loads (embedding and Kiwi), as the issue asks them reported apart.

Usage::

    llama-car index ../shared/corpus/hwpx --persist /tmp/idx
    python benchmarks/query_cold_start.py /tmp/idx [--question "배수시설 설치기준"] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BREAKDOWN = r"""
import json, sys, time
def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
steps = []
t = time.perf_counter()
def mark(name):
    global t
    now = time.perf_counter()
    steps.append((name, now - t, rss()))
    t = now
mark("interpreter")
from llama_index_car.folder import load_index
from llama_index_car.folder.record import read_record
from llama_index_car.providers import resolve_embed_model
mark("imports")
folder, question, retriever = sys.argv[1], sys.argv[2], sys.argv[3]
provider = read_record(folder)["embed"]["provider"]
model = resolve_embed_model(provider)
model.get_query_embedding("워밍업")
mark("embedding model")
index = load_index(folder, embed_model=model)
mark("load_index")
index.tokenizer.tokenize("워밍업")
mark("Kiwi model")
r = index.as_retriever(retriever, similarity_top_k=5)
r.retrieve(question)
mark("first query")
r.retrieve(question + " 기준")
mark("second query")
print(json.dumps({"steps": steps, "nodes": len(index), "embed": provider}))
"""


def cli_run(folder: Path, question: str, retriever: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one ``llama-car query`` in a new process."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_index_car", "query", str(folder), question,
         "--retriever", retriever, "--top-k", "5"],
        stdout=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"llama-car query failed (status {status})")
    return wall, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="index folder (llama-car index --persist)")
    ap.add_argument("--question", default="배수시설 설치기준")
    ap.add_argument("--retriever", default="car")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    runs = [cli_run(args.folder, args.question, args.retriever) for _ in range(args.repeat)]
    out = subprocess.run(
        [sys.executable, "-c", BREAKDOWN, str(args.folder), args.question, args.retriever],
        check=True, capture_output=True, text=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    steps = report["steps"]
    load = os.getloadavg()
    walls, peaks = [w for w, _ in runs], [m for _, m in runs]
    print(f"Measured {time.strftime('%Y-%m-%d', time.gmtime())}: retriever `{args.retriever}` "
          f"on an index of {report['nodes']:,} nodes (`{report['embed']}` embedding); {os.cpu_count()} cores, load "
          f"average {load[0]:.1f} (other jobs share the machine when it is above ~1). "
          "`llama-car serve` pays the two model loads once.")
    print("\n| `llama-car query`, new process | min | median |\n|---|---|---|")
    print(f"| wall s | {min(walls):.2f} | {statistics.median(walls):.2f} |")
    print(f"| peak RSS MB | {min(peaks):.0f} | {statistics.median(peaks):.0f} |")
    print("\n| step (one process) | s | RSS after, MB | RSS added, MB |\n|---|---|---|---|")
    prev = 0.0
    for name, secs, rss in steps:
        print(f"| {name} | {secs:.2f} | {rss:.0f} | {rss - prev:+.0f} |")
        prev = rss
    by = {name: (secs, rss) for name, secs, rss in steps}
    rss_at = {name: rss for name, _, rss in steps}
    names = [name for name, _, _ in steps]

    def added(name: str) -> float:
        i = names.index(name)
        return rss_at[name] - (rss_at[names[i - 1]] if i else 0.0)

    to_first = sum(by[n][0] for n in names[: names.index("first query") + 1])
    models_s = by["embedding model"][0] + by["Kiwi model"][0]
    models_mb = added("embedding model") + added("Kiwi model")
    peak_first = rss_at["first query"]
    print(
        f"\nto the first answer: {to_first:.2f} s, {peak_first:.0f} MB; of which model loads "
        f"(embedding {by['embedding model'][0]:.2f} s / {added('embedding model'):+.0f} MB, "
        f"Kiwi {by['Kiwi model'][0]:.2f} s / {added('Kiwi model'):+.0f} MB); without them: "
        f"{to_first - models_s:.2f} s, {peak_first - models_mb:.0f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
