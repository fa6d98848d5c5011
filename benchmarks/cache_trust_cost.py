"""Benchmark: what treating the caches as untrusted costs at load (issue 37, item 3).

Two measurements, each in fresh child processes, for this tree and for a ``--peer`` checkout
(e.g. the code before the fix: ``git worktree add /tmp/peer <commit>``), in the same run:

* **e5 onnx engine load**: ``OnnxE5(2)``, then the first short query (builds the all-4-bit
  session), then the first window of 64+ tokens (graph v3). The peer kept graph v3 in a
  conversion cache: measured cold (empty ``$LLAMA_CAR_CACHE``) and warm (second run on it).
  This tree keeps no conversion cache: graph v3 is calibrated and built in memory on the first
  long window, so every run is the same.
* **embedding cache, warm**: open an ``EmbeddingCache`` of ``--texts`` cached 384-d vectors
  (shards of ``--batch`` rows, 32 as ``llama-car index`` writes them) and read them all back
  (every text a hit). This tree reads each shard with ``O_NOFOLLOW`` + ``fstat``, checks its
  sha256, ``.npy`` header, shape and finite values; the peer memory-mapped it unchecked.

Wall and CPU seconds are medians over ``--repeats`` runs (CPU: the child's user + system time,
less sensitive to other processes on a shared machine). Ratios are this tree over the peer.

Usage::

    python benchmarks/cache_trust_cost.py --peer /tmp/peer [--repeats 5] [--texts 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONG = "콘크리트 타설 후 7일 동안은 습윤 상태를 유지하여야 하며, 기온이 5 ℃ 이하인 경우 보온 양생을 실시한다. " * 6


def _clock() -> tuple[float, float]:
    t = os.times()
    return time.perf_counter(), t.user + t.system


def _since(start: tuple[float, float]) -> list[float]:
    now = _clock()
    return [now[0] - start[0], now[1] - start[1]]


def child_engine() -> dict[str, list[float]]:
    from llama_index_car.embeddings._e5_onnx import OnnxE5

    out: dict[str, list[float]] = {}
    start = _clock()
    engine = OnnxE5(2)
    out["construct"] = _since(start)
    step = _clock()
    engine.encode(["배수시설 설치기준"], True)
    out["first query"] = _since(step)
    step = _clock()
    engine.encode([LONG], False)
    out["first long window"] = _since(step)
    out["total"] = _since(start)
    return out


def _texts(n: int) -> list[str]:
    return [f"문장 {i} 배수시설 설치기준" for i in range(n)]


def child_fill(root: str, n: int, batch: int) -> dict[str, list[float]]:
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_car.embeddings.cache import EmbeddingCache

    start = _clock()
    EmbeddingCache(root, MockEmbedding(embed_dim=384), batch_size=batch).embed(_texts(n))
    return {"fill": _since(start)}


def child_read(root: str, n: int, batch: int) -> dict[str, list[float]]:
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_car.embeddings.cache import EmbeddingCache

    texts = _texts(n)
    start = _clock()
    cache = EmbeddingCache(root, MockEmbedding(embed_dim=384), batch_size=batch)
    out = {"open": _since(start)}
    step = _clock()
    vectors = cache.embed(texts)
    out["read all"] = _since(step)
    out["total"] = _since(start)
    if cache.misses or vectors.shape != (n, 384):
        raise RuntimeError(f"expected {n} hits, got {cache.misses} misses")
    return out


def _run(tree: Path, args: list[str], env_extra: dict[str, str]) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tree), str(tree / "readers" / "llama-index-readers-hwpx")]), **env_extra)
    done = subprocess.run([sys.executable, __file__, *args], env=env, check=True,
                          capture_output=True, text=True)
    result: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median(runs: list[dict[str, list[float]]]) -> dict[str, tuple[float, float]]:
    return {k: (statistics.median(r[k][0] for r in runs), statistics.median(r[k][1] for r in runs))
            for k in runs[0]}


def _table(title: str, rows: dict[str, dict[str, tuple[float, float]]], base: str) -> None:
    print(f"\n{title}\n")
    steps = list(next(iter(rows.values())))
    print("| run | " + " | ".join(f"{s} wall / CPU (s)" for s in steps) + f" | total × {base} |")
    print("|---|" + "---:|" * (len(steps) + 1))
    for name, r in rows.items():
        cells = " | ".join(f"{r[s][0]:.3f} / {r[s][1]:.3f}" for s in steps)
        ratio = r["total"][0] / rows[base]["total"][0]
        cpu = r["total"][1] / rows[base]["total"][1]
        print(f"| {name} | {cells} | {ratio:.2f} (CPU {cpu:.2f}) |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, required=False, help="checkout to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = {
            "engine": child_engine,
            "fill": lambda: child_fill(args.root, args.texts, args.batch),
            "read": lambda: child_read(args.root, args.texts, args.batch),
        }[args.child]()
        print(json.dumps(result))
        return 0
    trees = {"this tree": ROOT, **({"peer": args.peer.resolve()} if args.peer else {})}
    engine: dict[str, list[dict[str, list[float]]]] = {}
    reads: dict[str, list[dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):  # interleaved, so drifting load hits every row alike
            for name, tree in trees.items():
                conv = Path(tmp) / f"conv-{name}-{r}"
                env = {"LLAMA_CAR_CACHE": str(conv), "XDG_CACHE_HOME": str(conv)}
                cold = _run(tree, ["--child", "engine"], env)
                key = name if name == "this tree" else f"{name}, cold conversion cache"
                engine.setdefault(key, []).append(cold)
                if name != "this tree":
                    warm = _run(tree, ["--child", "engine"], env)
                    engine.setdefault(f"{name}, warm conversion cache", []).append(warm)
        for name, tree in trees.items():
            root = Path(tmp) / f"emb-{name}"
            common = ["--root", str(root), "--texts", str(args.texts), "--batch", str(args.batch)]
            _run(tree, ["--child", "fill", *common], {})
        for _ in range(args.repeats):
            for name, tree in trees.items():
                root = Path(tmp) / f"emb-{name}"
                common = ["--root", str(root), "--texts", str(args.texts),
                          "--batch", str(args.batch)]
                reads.setdefault(name, []).append(_run(tree, ["--child", "read", *common], {}))
    print(f"median of {args.repeats} runs; load average at the end: "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    base = "peer, warm conversion cache" if args.peer else "this tree"
    _table("e5 onnx engine load (fresh process each)",
           {k: _median(v) for k, v in engine.items()}, base)
    _table(f"embedding cache, warm: {args.texts} texts, 384-d, shards of {args.batch} rows",
           {k: _median(v) for k, v in reads.items()}, "peer" if args.peer else "this tree")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
