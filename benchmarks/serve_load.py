"""Load test of ``llama-car serve`` against an index folder of the lhcs corpus, with the same
retrievals in-process as the ceiling and 2 Ray Serve replicas, in one run.

Steps (each server is a real ``llama-car serve`` subprocess on 127.0.0.1; clients are asyncio
``httpx`` tasks in this process, each asking the lhcs questions of ``../shared/eval`` in turn):

1. the corpus (651 passages) written as HWPX files, one per LHCS document and one section per
   passage (the reader's own ``HWPXBuilder``), indexed by ``llama-car index`` (default e5);
2. one cold ``llama-car query`` (wall seconds), then ``llama-car serve``'s time from spawn to
   ``/readyz`` 200 and its resident memory;
3. for 8, 32 and 128 concurrent clients: ``/v1/retrieve`` car and hybrid and ``/v1/answer``
   (retrieval-only): requests/s, p50/p95/p99 latency, errors (anything but 200); the 8-client
   car phase runs ``--long`` requests (default 10,000) with the server's RSS read at the
   1,000th and the last request;
4. ``llama-car index --update`` (a demo document added) run by another process while 32
   clients ask: errors, and whether every response naming the new generation (and none naming
   the old) finds the new document;
5. the same retrievals in-process (``FolderEngine.retrieve``, JSON-ready hits) with 1 and 8
   threads, in a fresh process with the server stopped: the ceiling;
6. ``llama-car serve --ray --replicas 2``: car at 8 and 32 clients.

Writes the tables to ``--out`` (markdown, default docs/results/serve_load.md) and the raw
figures next to it as JSON. Usage::

    python benchmarks/serve_load.py --work /tmp/serve-load            # ~40 min on 2 cores
    python benchmarks/serve_load.py --work /tmp/serve-load --quick    # 300 requests a phase
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
EVAL = REPO.parent / "shared" / "eval" / "lhcs_construction"
#: the document the update adds, and a question only it answers
NEW_DOC = "dg2012_tunnel.hwpx"
NEW_QUESTION = "터널 비상주차대는 얼마 간격으로 두나요?"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "readers" /
                                                      "llama-index-readers-hwpx")])
    return e


def llama_car(*args: str) -> list[str]:
    return [sys.executable, "-m", "llama_index_car", *args]


# ----------------------------------------------------------------------------- corpus
def write_corpus(dest: Path) -> int:
    """The lhcs passages as HWPX files (one per document title, a section per passage)."""
    from llama_index.readers.hwpx.writer import HWPXBuilder

    docs: dict[str, list[str]] = {}
    with open(EVAL / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            docs.setdefault(row["title"], []).append(row["text"])
    dest.mkdir(parents=True, exist_ok=True)
    for i, (title, texts) in enumerate(sorted(docs.items())):
        b = HWPXBuilder(title=title)
        s = b.add_section()
        for j, text in enumerate(texts, start=1):
            s.heading(f"{title} ({j})", level=1)
            s.paragraph(text)
        b.save(str(dest / f"lhcs_{i:03d}.hwpx"))
    return sum(len(t) for t in docs.values())


def questions() -> list[str]:
    with open(EVAL / "queries.jsonl", encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh]


# ----------------------------------------------------------------------------- servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    """A ``llama-car serve`` subprocess; ``ready`` seconds from spawn to ``/readyz`` 200."""

    def __init__(self, folder: Path, *extra: str, log: Path) -> None:
        import http.client

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        start = time.perf_counter()
        self.proc = subprocess.Popen(
            llama_car("serve", str(folder), "--port", str(self.port), *extra),
            env=env(), stdout=self.log, stderr=subprocess.STDOUT)
        while True:  # a cheap probe (no TLS context, no client object) every 50 ms
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited; see {log}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.05)
        self.ready = time.perf_counter() - start

    def rss(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# ----------------------------------------------------------------------------- load
async def load(url: str, path: str, bodies: list[dict[str, Any]], clients: int, total: int,
               on_count: dict[int, Any] | None = None) -> dict[str, Any]:
    """``total`` requests from ``clients`` concurrent tasks, cycling through ``bodies``."""
    import httpx

    latencies: list[float] = []
    errors: dict[str, int] = {}
    generations: set[str] = set()
    counter = iter(range(total))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        async def worker() -> None:
            for i in counter:
                t = time.perf_counter()
                try:
                    r = await client.post(path, json=bodies[i % len(bodies)])
                    ok = r.status_code == 200
                    if ok:
                        generations.add(r.headers.get("x-index-generation", "?"))
                    else:
                        errors[str(r.status_code)] = errors.get(str(r.status_code), 0) + 1
                except httpx.HTTPError as exc:
                    ok = False
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                latencies.append(time.perf_counter() - t)
                if on_count and len(latencies) in on_count:
                    on_count[len(latencies)]()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - start
    return summary(latencies, wall) | {"errors": sum(errors.values()), "error_kinds": errors,
                                       "generations": sorted(generations)}


def summary(latencies: list[float], wall: float) -> dict[str, Any]:
    ms = np.asarray(latencies) * 1000
    return {"n": len(latencies), "rps": len(latencies) / wall,
            "p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "p99": float(np.percentile(ms, 99))}


def run_load(url: str, path: str, bodies: list[dict[str, Any]], clients: int, total: int,
             on_count: dict[int, Any] | None = None) -> dict[str, Any]:
    return asyncio.run(load(url, path, bodies, clients, total, on_count))


# ----------------------------------------------------------------------------- in-process
IN_PROCESS = r"""
import json, sys, threading, time
from llama_index_car.serve._engine import FolderEngine
folder, kind, threads, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
qs = json.loads(sys.stdin.read())
engine = FolderEngine(folder); gen = engine.open()
lat = []; it = iter(range(total)); lock = threading.Lock()
def work():
    for i in it:
        t = time.perf_counter()
        engine.retrieve(gen, qs[i % len(qs)], kind, 5)
        with lock: lat.append(time.perf_counter() - t)
start = time.perf_counter()
ts = [threading.Thread(target=work) for _ in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps({"lat": lat, "wall": time.perf_counter() - start}))
"""


def in_process(folder: Path, kind: str, threads: int, total: int, qs: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(folder), kind, str(threads),
                          str(total)], input=json.dumps(qs), capture_output=True, text=True,
                         env=env(), check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return summary(data["lat"], data["wall"]) | {"errors": 0}


# ----------------------------------------------------------------------------- update
def update_under_load(src: Path, folder: Path, url: str, bodies: list[dict[str, Any]],
                      clients: int, work: Path) -> dict[str, Any]:
    """``llama-car index --update`` (a document added) by another process while ``clients``
    ask; a probe asks the new document's question every 0.2 s."""
    import threading

    import httpx

    from llama_index_car.demo.loader import DEMO_CORPUS_DIR

    old = json.loads((folder / "CURRENT").read_text())["generation"]
    probes: list[tuple[str, str]] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=url, timeout=120) as c:
            while not stop.is_set():
                r = c.post("/v1/retrieve", json={"query": NEW_QUESTION, "top_k": 1})
                hits = (r.json().get("hits") if r.status_code == 200 else None) or [{}]
                probes.append((r.headers.get("x-index-generation", "?"),
                               hits[0].get("file", "")))
                time.sleep(0.2)

    result: dict[str, Any] = {}

    def writer() -> None:
        time.sleep(5)
        shutil.copy(DEMO_CORPUS_DIR / NEW_DOC, src / NEW_DOC)
        t = time.perf_counter()
        with open(work / "update.log", "wb") as log:
            rc = subprocess.call(llama_car("index", str(src), "--persist", str(folder),
                                           "--update", "--no-progress"), env=env(),
                                 stdout=log, stderr=subprocess.STDOUT)
        result["update_rc"], result["update_s"] = rc, time.perf_counter() - t
        new = json.loads((folder / "CURRENT").read_text())["generation"]
        result["new"] = new
        t = time.perf_counter()
        while not any(g == new for g, _ in probes) and time.perf_counter() - t < 600:
            time.sleep(0.1)
        result["swap_s"] = time.perf_counter() - t
        time.sleep(5)
        stop.set()

    threads = [threading.Thread(target=probe), threading.Thread(target=writer)]
    for t in threads:
        t.start()

    stats = asyncio.run(_until(url, bodies, clients, stop))
    for t in threads:
        t.join()
    new = result["new"]
    return stats | {
        "old": old, "new": new, "update_rc": result["update_rc"],
        "update_s": result["update_s"], "swap_after_commit_s": result["swap_s"],
        "probes": len(probes),
        "probes_new": sum(g == new for g, _ in probes),
        "new_doc_found_in_new": all(f == NEW_DOC for g, f in probes if g == new),
        "new_doc_absent_in_old": all(f != NEW_DOC for g, f in probes if g == old),
    }


async def _until(url: str, bodies: list[dict[str, Any]], clients: int, stop: Any) -> dict:
    import httpx

    latencies: list[float] = []
    errors: dict[str, int] = {}
    generations: set[str] = set()
    async with httpx.AsyncClient(base_url=url, timeout=300,
                                 limits=httpx.Limits(max_connections=clients)) as client:
        async def worker(k: int) -> None:
            i = k
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    r = await client.post("/v1/retrieve", json=bodies[i % len(bodies)])
                    if r.status_code == 200:
                        generations.add(r.headers.get("x-index-generation", "?"))
                    else:
                        errors[str(r.status_code)] = errors.get(str(r.status_code), 0) + 1
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                latencies.append(time.perf_counter() - t)
                i += clients

        start = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(clients)))
        wall = time.perf_counter() - start
    return summary(latencies, wall) | {"errors": sum(errors.values()), "error_kinds": errors,
                                       "generations": sorted(generations)}


# ----------------------------------------------------------------------------- report
def table(rows: list[tuple[str, dict[str, Any]]], ceiling: dict[tuple[str, int], dict]
          ) -> list[str]:
    """The phases; a served retrieval at 8 clients gets its p50 over the in-process p50 of
    the same retriever with 8 threads (the same concurrency)."""
    out = ["| phase | clients | requests | req/s | p50 ms | p95 ms | p99 ms | errors | "
           "p50 / in-process p50 at 8 |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        kind = name.rsplit(" ", 1)[-1]
        peer = ceiling.get((kind, 8)) if "retrieve" in name else None
        ratio = (f"{r['p50'] / peer['p50']:.2f}×" if peer and r.get("clients") == 8
                 and not name.startswith("in-process") else "")
        out.append(f"| {name} | {r.get('clients', '')} | {r['n']} | {r['rps']:.1f} | "
                   f"{r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {r['errors']} | "
                   f"{ratio} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="scratch folder (kept: reused)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "serve_load.md")
    p.add_argument("--long", type=int, default=10_000, help="requests of the 8-client car phase")
    p.add_argument("--requests", type=int, default=1_000, help="requests of the other phases")
    p.add_argument("--clients", type=int, nargs="+", default=[8, 32, 128])
    p.add_argument("--quick", action="store_true", help="300 requests a phase (a smoke run)")
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--deadline", type=float, default=120.0,
                   help="the servers' --deadline (s): 128 closed-loop clients on 2 shared "
                   "cores queue for longer than the 30 s default")
    args = p.parse_args(argv)
    if args.quick:
        args.long = args.requests = 300
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    src, folder = work / "src", work / "idx"
    results: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                               "python": platform.python_version()}
    if not (folder / "CURRENT").is_file():
        shutil.rmtree(src, ignore_errors=True)
        results["passages"] = write_corpus(src)
        t = time.perf_counter()
        subprocess.run(llama_car("index", str(src), "--persist", str(folder), "--no-progress"),
                       env=env(), check=True)
        results["index_s"] = time.perf_counter() - t
    if (src / NEW_DOC).exists():  # a previous run's update: back to the corpus alone
        (src / NEW_DOC).unlink()
        subprocess.run(llama_car("index", str(src), "--persist", str(folder), "--update",
                                 "--no-progress"), env=env(), check=True)
    qs = questions()
    print(f"{len(qs)} questions; folder {folder}", flush=True)

    colds, readies = [], []
    for i in range(3):  # alternately: a cold query, a server start (medians; the load varies)
        t = time.perf_counter()
        subprocess.run(llama_car("query", str(folder), qs[i], "--top-k", "5"), env=env(),
                       check=True, stdout=subprocess.DEVNULL)
        colds.append(time.perf_counter() - t)
        if i < 2:
            probe = Server(folder, log=work / "serve-start.log")
            readies.append(probe.ready)
            probe.stop()
    results["cold_query_s"] = float(np.median(colds))
    results["cold_query_runs"] = colds

    load_before = os.getloadavg()
    results["load_average_start"] = load_before[0]
    results["deadline_s"] = args.deadline
    server = Server(folder, "--threads", "4", "--deadline", str(args.deadline),
                    log=work / "serve.log")
    readies.append(server.ready)
    results["ready_s"] = float(np.median(readies))
    results["ready_runs"] = readies
    results["rss_ready_mb"] = server.rss()
    print(f"cold query {results['cold_query_s']:.1f} s; server ready {server.ready:.1f} s, "
          f"{results['rss_ready_mb']:.0f} MB", flush=True)
    rows: list[tuple[str, dict[str, Any]]] = []
    phases = [("retrieve car", "/v1/retrieve", "car"), ("retrieve hybrid", "/v1/retrieve",
                                                         "hybrid"),
              ("answer (retrieval-only)", "/v1/answer", "car")]
    rss_marks: dict[str, float] = {}
    for clients in args.clients:
        for name, path, kind in phases:
            bodies = [{"query": q, "retriever": kind, "top_k": 5} for q in qs]
            long = clients == 8 and name == "retrieve car"
            total = args.long if long else args.requests
            marks = {}
            if long:
                marks = {min(1000, total): lambda: rss_marks.__setitem__("at_1000", server.rss())}
            r = run_load(server.url, path, bodies, clients, total, marks)
            if long:
                rss_marks["at_end"] = server.rss()
            r["clients"] = clients
            rows.append((f"serve: {name}", r))
            print(rows[-1], flush=True)
    results["rss_mb"] = rss_marks | {"end_of_load": server.rss()}
    bodies = [{"query": q, "retriever": "car", "top_k": 5} for q in qs]
    upd = update_under_load(src, folder, server.url, bodies, 32, work)
    upd["clients"] = 32
    results["update"] = upd
    print("update:", upd, flush=True)
    server.stop()

    (src / NEW_DOC).unlink()  # the in-process and Ray runs read the corpus alone again
    subprocess.run(llama_car("index", str(src), "--persist", str(folder), "--update",
                             "--no-progress"), env=env(), check=True)
    ceiling = {}
    for threads in (1, 8):
        for kind in ("car", "hybrid"):
            r = in_process(folder, kind, threads, min(args.requests, 1000), qs)
            r["clients"] = threads
            ceiling[(kind, threads)] = r
            rows.append((f"in-process: retrieve {kind}", r))
            print(rows[-1], flush=True)
    if not args.no_ray:
        ray = Server(folder, "--ray", "--replicas", "2", "--deadline", str(args.deadline),
                     log=work / "ray.log")
        results["ray_ready_s"] = ray.ready
        for clients in (8, 32):
            r = run_load(ray.url, "/v1/retrieve",
                         [{"query": q, "retriever": "car", "top_k": 5} for q in qs],
                         clients, args.requests)
            r["clients"] = clients
            rows.append(("Ray Serve ×2: retrieve car", r))
            print(rows[-1], flush=True)
        ray.stop()

    base = ceiling[("car", 8)]["p50"]
    serve8 = next(r for n, r in rows if n == "serve: retrieve car" and r["clients"] == 8)
    rss = results["rss_mb"]
    lines = [
        "# `llama-car serve` under load (lhcs corpus)",
        "",
        "Generated by `python benchmarks/serve_load.py --work DIR` (do not edit by hand). "
        f"Machine: {results['machine']}, Python {results['python']}; the clients run on the "
        f"same cores as the server (load average {load_before[0]:.1f} when the server started, "
        f"{os.getloadavg()[0]:.1f} at the end: other jobs shared the machine). Server: "
        f"`llama-car serve --threads 4 --deadline {args.deadline:g}`. "
        "Folder: the 651 lhcs passages written as HWPX "
        "(`llama-car index`, default e5 + spans); questions: the 342 lhcs questions of "
        "`../shared/eval`, in turn; `top_k` 5.",
        "",
        *table(rows, ceiling),
        "",
        f"* 8 clients, `/v1/retrieve` car: p50 {serve8['p50']:.1f} ms = "
        f"{serve8['p50'] / base:.2f}× the in-process p50 with 8 threads ({base:.1f} ms) and "
        f"{serve8['p50'] / ceiling[('car', 1)]['p50']:.2f}× one thread alone "
        f"({ceiling[('car', 1)]['p50']:.1f} ms); {serve8['errors']} errors over "
        f"{serve8['n']} requests.",
        f"* Server RSS: {results['rss_ready_mb']:.0f} MB when ready, "
        f"{rss.get('at_1000', float('nan')):.0f} MB at the 1,000th request of that phase, "
        f"{rss.get('at_end', float('nan')):.0f} MB at its last "
        f"({(rss.get('at_end', 0) / rss.get('at_1000', 1) - 1) * 100:+.1f} %); "
        f"{rss['end_of_load']:.0f} MB after every phase.",
        f"* Ready: `llama-car serve` answered `/readyz` {results['ready_s']:.1f} s after it was "
        f"spawned (median of 3 starts: {', '.join(f'{x:.1f}' for x in readies)}); one cold "
        f"`llama-car query` took {results['cold_query_s']:.1f} s (median of 3, alternating "
        f"with the starts: {', '.join(f'{x:.1f}' for x in colds)})"
        + (f"; Ray Serve with 2 replicas {results['ray_ready_s']:.1f} s." if "ray_ready_s" in
           results else "."),
        f"* `llama-car index --update` by another process under 32 clients: "
        f"{upd['errors']} errors over {upd['n']} requests ({upd['rps']:.1f} req/s, p50 "
        f"{upd['p50']:.0f} ms, p99 {upd['p99']:.0f} ms); the update took {upd['update_s']:.1f} s "
        f"(exit {upd['update_rc']}) and the server served the new generation "
        f"{upd['swap_after_commit_s']:.1f} s after it was committed; {upd['probes_new']} of "
        f"{upd['probes']} probes named it, every one of them found the new document: "
        f"{upd['new_doc_found_in_new']} (and none before: {upd['new_doc_absent_in_old']}).",
    ]
    results["load_average_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    results["rows"] = [(n, r) for n, r in rows]
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str),
                                             encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
