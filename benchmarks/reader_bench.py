"""Benchmark: llama-index-readers-hwpx vs peers on the shared corpus, HWPX and binary HWP 5.

Each reader does the same job per file: the document text with tables, and every table
(nested ones included) with each cell's (row, col, row_span, col_span, text).

HWPX (``--corpus``, default ``../shared/corpus/hwpx``):

- ours:        ``HWPXReader().load_data(path)`` (one parse gives text + all tables/cells;
               the cells ride in the Document's structure metadata) and the cell list read
               back from that metadata;
- python-hwpx: ``HwpxDocument.open(path)``, ``export_markdown(doc)`` and a walk over
               ``doc.tables.all`` (recursing into ``cell.tables``) reading ``cell.address``,
               ``cell.span`` and ``cell.text``.

Binary HWP 5 (``--hwp-corpus``, default ``../shared/corpus/hwp``, every ``*.hwp``):

- ours:            ``HWPReader().load_data(path)``, tables counted as above (same model: cells
                   with coordinates and spans);
- hwp-hwpx-parser: ``Reader(path)``, ``extract_text()`` and ``get_tables()`` (its API: text,
                   and tables as grids of strings, without spans or coordinates; Apache-2.0,
                   ``pip install hwp-hwpx-parser``, a benchmark peer only, never a dependency).

A peer that is not installed is skipped with a message (its row and the ratio column go).

Throughput is measured in-process: each file is processed ``--repeat`` times per reader
(interleaved) and the fastest time per file is kept; MB/s = total input bytes / sum of
fastest times, tables/s likewise. Peak memory is measured per reader in a fresh subprocess:
peak RSS (``VmHWM``) over all files, and for the largest file alone the peak's growth over
the RSS after imports and a warm-up run on the smallest file (lxml allocates outside Python,
so tracemalloc would undercount).

``--scaling`` instead measures node parsing against document size (issue 13: it must be
linear). A synthetic HWPX document (``HWPXBuilder``: per unit 40 sections of a heading,
three paragraphs and a 6-row table, plus one 120-row table that must be split) is built at
1x/2x/4x/8x units, read once, and parsed (fastest of ``--repeat``) by

- ``HWPXNodeParser`` (this package);
- ``pre-fix emulation``: the same parser with the pre-0.3 relationship handling put back
  (each node's SOURCE built by ``Document.as_related_node_info()``, which hashes the text
  and the whole structure metadata per node, and LlamaIndex's base
  ``_postprocess_parsed_nodes``, which copies the Document metadata into every node,
  searches the Document text per node and embeds each neighbour's metadata in the
  PREVIOUS/NEXT links);
- ``SentenceSplitter`` (chunk_size 1000, overlap 150) on the plain text, a linear peer;
- ``HWPXReader.load_bytes`` (reading the package, for scale; its count is Documents).

Each row prints seconds and the time ratio to 1x; linear means ratio ~ size ratio.

Usage::

    python benchmarks/reader_bench.py [--corpus ../shared/corpus/hwpx]
        [--hwp-corpus ../shared/corpus/hwp] [--formats hwpx,hwp] [--repeat 3]
    python benchmarks/reader_bench.py --scaling [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus" / "hwpx"
DEFAULT_HWP_CORPUS = ROOT / ".." / "shared" / "corpus" / "hwp"


def ours(path: Path) -> tuple[int, int]:
    """(text length, table count) with llama-index-readers-hwpx's HWPXReader."""
    from llama_index.readers.hwpx import HWPXReader

    return _ours(HWPXReader(), path)


def ours_hwp(path: Path) -> tuple[int, int]:
    """(text length, table count) with llama-index-readers-hwpx's HWPReader."""
    from llama_index.readers.hwpx import HWPReader

    return _ours(HWPReader(), path)


def _ours(reader: Any, path: Path) -> tuple[int, int]:
    from llama_index.readers.hwpx import STRUCTURE_KEY

    docs = reader.load_data(path)
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


def hwp_hwpx_parser(path: Path) -> tuple[int, int]:
    """(text length, table count) with hwp-hwpx-parser's text and table APIs."""
    from hwp_hwpx_parser import Reader

    with Reader(str(path)) as r:
        text = r.extract_text()
        tables = r.get_tables()
    return len(text), len(tables)


READERS: dict[str, Callable[[Path], tuple[int, int]]] = {
    "llama-index-readers-hwpx": ours,
    "python-hwpx": python_hwpx,
    "llama-index-readers-hwpx (HWPReader)": ours_hwp,
    "hwp-hwpx-parser": hwp_hwpx_parser,
}

#: format -> (file glob, our reader, peer reader, the peer's import name, its pip name)
SUITES: dict[str, tuple[str, str, str, str, str]] = {
    "hwpx": ("*.hwpx", "llama-index-readers-hwpx", "python-hwpx", "hwpx", "python-hwpx"),
    "hwp": ("*.hwp", "llama-index-readers-hwpx (HWPReader)", "hwp-hwpx-parser",
            "hwp_hwpx_parser", "hwp-hwpx-parser"),
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


def scaling_document(units: int) -> bytes:
    """The ``--scaling`` input: ``units`` copies of the base unit (module docstring)."""
    from llama_index.readers.hwpx.writer import HWPXBuilder

    b = HWPXBuilder(title="scaling")
    s = b.add_section()
    for u in range(units):
        for i in range(40):
            s.heading(f"{u}-{i}. 설치 기준", 1)
            for j in range(3):
                s.paragraph(f"제{j}항 배관은 {i}.{j} m 이하의 간격으로 지지하고 점검구를 둔다. " * 3)
            s.table([["구분", "기준", "비고"]] + [[f"설비{k}", f"{k}.5 m", "-"] for k in range(6)])
        s.heading(f"{u}. 부록 표", 1)
        s.table([["번호", "항목", "값"]] + [[str(k), f"항목 {k} 기준값", f"{k} mm"] for k in range(120)])
    return b.to_bytes()


def _legacy_parser() -> Any:
    """HWPXNodeParser with the pre-0.3 (quadratic) relationship handling put back."""
    from llama_index.core.node_parser import NodeParser
    from llama_index.core.schema import NodeRelationship
    from llama_index.readers.hwpx import HWPXNodeParser

    class PreFix(HWPXNodeParser):
        def _split_one(self, node: Any) -> list[Any]:
            out = super()._split_one(node)
            for child in out:
                child.relationships[NodeRelationship.SOURCE] = node.as_related_node_info()
            return out

        def _postprocess_parsed_nodes(self, nodes: Any, parent_doc_map: Any) -> Any:
            return NodeParser._postprocess_parsed_nodes(self, nodes, parent_doc_map)

    return PreFix()


def scaling(repeat: int) -> None:
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.schema import Document
    from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

    sizes = (1, 2, 4, 8)
    data = {k: scaling_document(k) for k in sizes}
    docs = {k: HWPXReader().load_bytes(data[k], f"scaling{k}x.hwpx") for k in sizes}
    plain = {k: [Document(text=d.text) for d in v] for k, v in docs.items()}
    runs: dict[str, Callable[[int], int]] = {
        "HWPXReader.load_bytes (read, for scale)": lambda k: len(
            HWPXReader().load_bytes(data[k], f"scaling{k}x.hwpx")
        ),
        "HWPXNodeParser": lambda k: len(HWPXNodeParser().get_nodes_from_documents(docs[k])),
        "pre-fix emulation": lambda k: len(_legacy_parser().get_nodes_from_documents(docs[k])),
        "SentenceSplitter (peer)": lambda k: len(
            SentenceSplitter(chunk_size=1000, chunk_overlap=150).get_nodes_from_documents(plain[k])
        ),
    }
    text_kb = {k: sum(len(d.text.encode()) for d in v) / 1024 for k, v in docs.items()}
    print("| parser | " + " | ".join(f"{k}x ({text_kb[k]:.0f} KB text)" for k in sizes)
          + " | 8x/1x time | s per 1x unit (1x → 8x) |")
    print("|---|" + "---:|" * (len(sizes) + 2))
    for name, fn in runs.items():
        fn(1)  # warm-up (tokenizer, imports)
        secs, nodes = {}, {}
        for k in sizes:
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                nodes[k] = fn(k)
                best = min(best, time.perf_counter() - t0)
            secs[k] = best
        unit = "docs" if name.startswith("HWPXReader") else "nodes"
        cells = " | ".join(f"{secs[k]:.3f} s ({nodes[k]} {unit})" for k in sizes)
        per_unit = " → ".join(f"{secs[k] / k:.3f}" for k in sizes)
        print(f"| {name} | {cells} | {secs[8] / secs[1]:.1f}x | {per_unit} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="HWPX folder")
    ap.add_argument("--hwp-corpus", type=Path, default=DEFAULT_HWP_CORPUS,
                    help="binary HWP 5 folder")
    ap.add_argument("--formats", default="hwpx,hwp", help="suites to run (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-file", action="store_true", help="also print a per-file table")
    ap.add_argument("--memory-child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--scaling", action="store_true", help="node parsing time vs document size")
    args = ap.parse_args(argv)
    if args.scaling:
        scaling(args.repeat)
        return 0
    if args.memory_child:
        memory_child(args.memory_child[0], args.memory_child[1], args.memory_child[2:])
        return 0
    corpora = {"hwpx": args.corpus, "hwp": args.hwp_corpus}
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(SUITES))
    if unknown:
        print(f"unknown --formats {unknown}; choose from {sorted(SUITES)}", file=sys.stderr)
        return 2
    for i, fmt in enumerate(formats):
        if i:
            print()
        rc = suite(fmt, corpora[fmt], args.repeat, args.per_file)
        if rc:
            return rc
    return 0


def suite(fmt: str, corpus: Path, repeat: int, per_file: bool) -> int:
    """Time our reader and the format's peer on every file of ``corpus``; print the table."""
    import importlib.util

    pattern, mine, peer, module, pip_name = SUITES[fmt]
    files = sorted(corpus.glob(pattern))
    if not files:
        print(f"no {pattern} files in {corpus}", file=sys.stderr)
        return 2
    names = [mine]
    if importlib.util.find_spec(module) is None:
        print(f"{peer} is not installed (pip install {pip_name}): its row and the ratio "
              "column are skipped")
    else:
        names.append(peer)
    sizes = {f: f.stat().st_size for f in files}
    best: dict[str, dict[Path, float]] = {n: {} for n in names}
    tables: dict[str, dict[Path, int]] = {n: {} for n in names}
    for f in files:
        for name in names:
            READERS[name](f)  # warm-up (imports, caches)
        for _ in range(repeat):
            for name in names:
                fn = READERS[name]
                t0 = time.perf_counter()
                _, n_tables = fn(f)
                dt = time.perf_counter() - t0
                best[name][f] = min(dt, best[name].get(f, float("inf")))
                tables[name][f] = n_tables
    total_mb = sum(sizes.values()) / 2**20
    largest = max(files, key=lambda f: sizes[f])
    smallest = min(files, key=lambda f: sizes[f])
    rows = []
    for name in names:
        secs = sum(best[name].values())
        n_tab = sum(tables[name].values())
        mem_all = measure_memory(name, smallest, files)
        mem_big = measure_memory(name, smallest, [largest])
        rows.append((name, secs, n_tab, mem_all, mem_big))
    ref_secs = rows[1][1] if len(rows) > 1 else None
    print(
        f"{fmt.upper()} corpus: {len(files)} files, {total_mb:.2f} MB ({corpus}); fastest of "
        f"{repeat} runs per file; largest file {largest.name} "
        f"({sizes[largest] / 2**20:.2f} MB)\n"
    )
    ratio_head = f" speed vs {peer} |" if ref_secs else ""
    print(
        "| reader | seconds | MB/s | tables | tables/s | peak RSS MB (all files) "
        "| RSS growth MB (largest file) |" + ratio_head
    )
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if ref_secs else ""))
    for name, secs, n_tab, mem_all, mem_big in rows:
        ratio = f" {ref_secs / secs:.2f}x |" if ref_secs else ""
        print(
            f"| {name} | {secs:.3f} | {total_mb / secs:.2f} | {n_tab} | {n_tab / secs:.0f} | "
            f"{mem_all['peak_mb']:.0f} | {mem_big['peak_mb'] - mem_big['baseline_mb']:.1f} |"
            + ratio
        )
    if per_file and len(names) > 1:
        print(f"\n| file | KB | ours ms | {peer} ms | ratio | tables (ours / {peer}) |")
        print("|---|---:|---:|---:|---:|---|")
        for f in files:
            a, b = best[names[0]][f], best[names[1]][f]
            print(
                f"| {f.name} | {sizes[f] / 1024:.0f} | {a * 1e3:.1f} | {b * 1e3:.1f} | "
                f"{b / a:.2f}x | {tables[names[0]][f]} / {tables[names[1]][f]} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
