"""Benchmark: llama-index-readers-hwpx vs python-hwpx on the shared HWPX corpus.

Both readers do the same job per file: the document text with tables, and every table
(nested ones included) with each cell's (row, col, row_span, col_span, text).

- ours:        ``HWPXReader().load_data(path)`` (one parse gives text + all tables/cells;
               the cells ride in the Document's structure metadata) and the cell list read
               back from that metadata;
- python-hwpx: ``HwpxDocument.open(path)``, ``export_markdown(doc)`` and a walk over
               ``doc.tables.all`` (recursing into ``cell.tables``) reading ``cell.address``,
               ``cell.span`` and ``cell.text``.

Throughput is measured in-process: each file is processed ``--repeat`` times per reader
(interleaved) and the fastest time per file is kept; MB/s = total input bytes / sum of
fastest times, tables/s likewise. Peak memory is measured per reader in a fresh subprocess:
peak RSS (``VmHWM``) over all files, and for the largest file alone the peak's growth over
the RSS after imports and a warm-up run on the smallest file (lxml allocates outside Python,
so tracemalloc would undercount).

Usage::

    python benchmarks/reader_bench.py [--corpus ../shared/corpus/hwpx] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus" / "hwpx"


def ours(path: Path) -> tuple[int, int]:
    """(text length, table count) with llama-index-readers-hwpx."""
    from llama_index.readers.hwpx import STRUCTURE_KEY, HWPXReader

    docs = HWPXReader().load_data(path)
    n_tables = 0
    for doc in docs:
        struct = json.loads(doc.metadata[STRUCTURE_KEY])
        n_tables += sum(1 for b in struct["blocks"] if b["type"] == "table")
    return sum(len(d.text) for d in docs), n_tables


def python_hwpx(path: Path) -> tuple[int, int]:
    """(text length, table count) with python-hwpx's text and table APIs."""
    from hwpx import HwpxDocument
    from hwpx.tools.exporter import export_markdown

    doc = HwpxDocument.open(str(path))
    text = export_markdown(doc)
    cells: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    n_tables = 0
    stack = list(doc.tables.all)
    while stack:
        table = stack.pop()
        n_tables += 1
        for row in table.rows:
            for cell in row.cells:
                cells.append((cell.address, cell.span, cell.text))
                stack.extend(cell.tables)
    return len(text), n_tables


READERS: dict[str, Callable[[Path], tuple[int, int]]] = {
    "llama-index-readers-hwpx": ours,
    "python-hwpx": python_hwpx,
}


def _status_mb(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` from /proc/self/status in MB (VmHWM resets at exec, unlike
    ``ru_maxrss``, which a child inherits from the benchmark process)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_child(name: str, warm: str, files: list[str]) -> None:
    """Run in a subprocess: print JSON with baseline and peak RSS in MB.

    ``warm`` (the smallest corpus file) is read first so imports and caches are in the
    baseline; the growth is then what reading ``files`` costs."""
    fn = READERS[name]
    fn(Path(warm))
    base = _status_mb("VmRSS")
    for f in files:
        fn(Path(f))
    peak = _status_mb("VmHWM")
    print(json.dumps({"baseline_mb": base, "peak_mb": peak}))


def measure_memory(name: str, warm: Path, files: list[Path]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, str(warm), *map(str, files)],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-file", action="store_true", help="also print a per-file table")
    ap.add_argument("--memory-child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_child:
        memory_child(args.memory_child[0], args.memory_child[1], args.memory_child[2:])
        return 0
    files = sorted(args.corpus.glob("*.hwpx"))
    if not files:
        print(f"no .hwpx files in {args.corpus}", file=sys.stderr)
        return 2
    sizes = {f: f.stat().st_size for f in files}
    best: dict[str, dict[Path, float]] = {n: {} for n in READERS}
    tables: dict[str, dict[Path, int]] = {n: {} for n in READERS}
    for f in files:
        for warm in READERS.values():
            warm(f)  # warm-up (imports, caches)
        for _ in range(args.repeat):
            for name, fn in READERS.items():
                t0 = time.perf_counter()
                _, n_tables = fn(f)
                dt = time.perf_counter() - t0
                best[name][f] = min(dt, best[name].get(f, float("inf")))
                tables[name][f] = n_tables
    total_mb = sum(sizes.values()) / 2**20
    largest = max(files, key=lambda f: sizes[f])
    smallest = min(files, key=lambda f: sizes[f])
    rows = []
    for name in READERS:
        secs = sum(best[name].values())
        n_tab = sum(tables[name].values())
        mem_all = measure_memory(name, smallest, files)
        mem_big = measure_memory(name, smallest, [largest])
        rows.append((name, secs, n_tab, mem_all, mem_big))
    ref_secs = rows[1][1]
    print(
        f"Corpus: {len(files)} files, {total_mb:.2f} MB ({args.corpus}); fastest of "
        f"{args.repeat} runs per file; largest file {largest.name} "
        f"({sizes[largest] / 2**20:.2f} MB)\n"
    )
    print(
        "| reader | seconds | MB/s | tables | tables/s | peak RSS MB (all files) "
        "| RSS growth MB (largest file) | speed vs python-hwpx |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, secs, n_tab, mem_all, mem_big in rows:
        print(
            f"| {name} | {secs:.3f} | {total_mb / secs:.2f} | {n_tab} | {n_tab / secs:.0f} | "
            f"{mem_all['peak_mb']:.0f} | {mem_big['peak_mb'] - mem_big['baseline_mb']:.1f} | "
            f"{ref_secs / secs:.2f}x |"
        )
    if args.per_file:
        print("\n| file | KB | ours ms | python-hwpx ms | ratio | tables (ours / python-hwpx) |")
        print("|---|---:|---:|---:|---:|---|")
        names = list(READERS)
        for f in files:
            a, b = best[names[0]][f], best[names[1]][f]
            print(
                f"| {f.name} | {sizes[f] / 1024:.0f} | {a * 1e3:.1f} | {b * 1e3:.1f} | "
                f"{b / a:.2f}x | {tables[names[0]][f]} / {tables[names[1]][f]} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
