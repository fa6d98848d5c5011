"""Benchmark: ingestion throughput on Ray with 1 vs 2 workers, and without Ray.

The shared HWPX corpus (``../shared/corpus/hwpx``, recursively: its ``bad/`` files become
recorded failures) goes through the per-file work of ``llama-car index`` — HWPX reading, node
parsing (chunk 1000/150), Kiwi tokenization and embedding (``--embed``, default e5) — three
ways, in one run:

* ``no Ray``: the same stages in this process (BLAS/OpenMP limited to one thread, as Ray
  does for its workers; cold: Kiwi and the model load inside the timed call) (``read_documents``, ``parse_nodes``,
  ``KiwiTokenizer.tokenize_batch`` with one Kiwi thread, the embedding in batches of 32 with
  ``threads=1``): the serial baseline;
* ``Ray, N workers``: :func:`llama_index_car.folder.ray.ingest_ray` on a local cluster
  started with ``ray.init(num_cpus=N)`` (N = 1, 2); on each cluster a cold run (worker
  processes start, each loads Kiwi and the model) then a warm one; the clusters alternate
  (1, 2, 1, 2, ...) for ``--repeat`` rounds so load drift hits both, and the best wall time
  per configuration is compared.

Wall seconds exclude ``ray.init`` (reported apart). CPU seconds are user + system time of
this process plus every descendant process (Ray's GCS, raylet and workers; read from
``/proc``), over the timed call. Every Ray run is checked against the serial one: same node
ids and the same BM25 count matrix. The machine is shared: run with ``nice`` and read the
ratios, measured in the same run.

Usage::

    nice -n 10 python benchmarks/ray_ingest.py [--corpus ../shared/corpus/hwpx]
        [--embed e5] [--repeat 2] [--workers 1 2]
"""

from __future__ import annotations

import os

# one BLAS/OpenMP thread everywhere, as Ray gives its workers (OMP_NUM_THREADS=1 per CPU):
# the serial baseline then really runs on one core
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """``(ppid, user + system seconds incl. reaped children)`` of ``pid`` from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ppid, ticks / TICK


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and all its live descendants (and their reaped children)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(int(entry))
            if s is not None:
                stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


def serial(files: list[Path], embed: str) -> dict[str, Any]:
    from llama_index.core.schema import MetadataMode

    from llama_index_car.bm25 import BM25Okapi
    from llama_index_car.folder.sources import parse_nodes, read_documents
    from llama_index_car.providers import resolve_embed_model
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    model = resolve_embed_model(embed)
    if "threads" in type(model).model_fields:
        model = model.model_copy(update={"threads": 1})
    tok = KiwiTokenizer(num_workers=0)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    docs, failures = read_documents(files)
    nodes = parse_nodes(docs)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    tokens = tok.tokenize_batch(texts)
    for i in range(0, len(texts), 32):
        model.get_text_embedding_batch(texts[i : i + 32])
    bm25 = BM25Okapi(tokens)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"wall": wall, "cpu": cpu, "ids": [n.node_id for n in nodes], "bm25": bm25,
            "chars": sum(map(len, texts)), "failures": len(failures)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus" / "hwpx")
    ap.add_argument("--embed", default="e5")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()

    import ray

    from llama_index_car.folder import BuildOptions
    from llama_index_car.folder.ray import ingest_ray
    from llama_index_car.folder.sources import find_source_files

    files = find_source_files(args.corpus)
    base = serial(files, args.embed)
    n_nodes = len(base["ids"])
    rows = [("no Ray (1 process, 1 thread, cold)", "", base["wall"], base["cpu"])]
    me = os.getpid()
    for r in range(args.repeat):  # interleaved (1, 2, 1, 2, ...) so load drift hits both
        for n in args.workers:
            t = time.perf_counter()
            ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)
            init_s = time.perf_counter() - t
            for phase in ("cold", "warm"):
                cpu0, t0 = tree_cpu(me), time.perf_counter()
                res = ingest_ray(files, BuildOptions(embed=args.embed))
                wall, cpu = time.perf_counter() - t0, tree_cpu(me) - cpu0
                assert [x.node_id for x in res.nodes] == base["ids"], "node ids differ"
                assert (res.bm25.counts != base["bm25"].counts).nnz == 0, "BM25 counts differ"
                assert len(res.failures) == base["failures"]
                label = f"Ray, {n} worker{'s' if n > 1 else ''} ({phase}, round {r + 1})"
                rows.append((label, f"{init_s:.1f}" if phase == "cold" else "", wall, cpu))
            ray.shutdown()

    print(f"{len(files)} files ({base['failures']} failed), {n_nodes} nodes, "
          f"{base['chars'] / 1000:.0f} kchar, embed={args.embed}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
    print("| run | ray.init s | wall s | files/s | nodes/s | kchar/s | CPU s | CPU/wall |")
    print("|---|---|---|---|---|---|---|---|")
    for label, init_s, wall, cpu in rows:
        print(f"| {label} | {init_s} | {wall:.1f} | {len(files) / wall:.2f} | "
              f"{n_nodes / wall:.1f} | {base['chars'] / 1000 / wall:.1f} | {cpu:.1f} | "
              f"{cpu / wall:.2f} |")
    best: dict[str, dict[str, float]] = {}
    for label, _, wall, _ in rows[1:]:
        name, phase = label.split(" (")[0], label.split("(")[1].split(",")[0]
        slot = best.setdefault(name, {})
        slot[phase] = min(wall, slot.get(phase, float("inf")))
    if len(best) == 2:
        (n1, one), (n2, two) = best.items()
        for phase in ("cold", "warm"):
            print(f"best {phase} wall, {n2} vs {n1}: {one[phase] / two[phase]:.2f}x faster")
    print(f"serial / best warm Ray: {base['wall'] / min(v['warm'] for v in best.values()):.2f}x")

if __name__ == "__main__":
    main()
