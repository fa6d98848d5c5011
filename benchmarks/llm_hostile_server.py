"""CAR with Claude against a hostile LLM server: threads, fds and RSS, old code vs new, one run.

Issue 20.8. The fake provider (``tests/fakes/provider_server.py``) runs in this process; each
case runs the client in a fresh process (so its threads, fds and RSS are the client's alone),
once with the old tree and once with this one:

* ``drip`` — every ``/v1/messages`` reply sends its headers, then one body byte every 50 ms for
  ever. ``--queries`` CAR queries (``hypothesis_timeout=--deadline``) all fall back; the table
  shows threads and open fds after a warm-up query, after the queries, and ``--settle`` seconds
  later (a leak stays).
* ``huge`` — one reply of ``--huge-mb`` MB (a valid Messages body). The table shows the client's
  peak RSS (``VmHWM``) before and after the query, what the server managed to send, and whether
  CAR fell back.
* ``loops`` — ``asyncio.run(car.aretrieve(q))`` six times with a healthy server: fallbacks and
  requests (6 and 6 when nothing fails).

The old tree is ``git archive <--old-ref>`` (default ``main``) of ``llama_index_car``, or
``--old PATH`` (a directory holding an older ``llama_index_car``). Run::

    python benchmarks/llm_hostile_server.py [--queries 20] [--huge-mb 400] [--old-ref main]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.provider_server import FakeProviderServer, Reply  # noqa: E402

MESSAGES = "/v1/messages"

CHILD = r'''
import asyncio, hashlib, json, os, sys, threading, time
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import TextNode
from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer
from llama_index_car.providers import resolve_llm
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

case, queries, deadline, settle = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

class Emb(BaseEmbedding):
    def _vec(self, text):
        d = hashlib.sha256(text.encode()).digest()
        return [b / 255.0 + 0.01 for b in d[:8]]
    def _get_query_embedding(self, q): return self._vec(q)
    def _get_text_embedding(self, t): return self._vec(t)
    async def _aget_query_embedding(self, q): return self._vec(q)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
def now():
    return {"threads": threading.active_count(), "fds": len(os.listdir("/proc/self/fd")),
            "rss_mb": status("VmRSS:"), "peak_mb": status("VmHWM:")}

nodes = [TextNode(id_="a", text="신축이음장치 설치기준: 온도 변화에 따른 신축량을 흡수한다."),
         TextNode(id_="b", text="배수시설의 구조기준은 집중호우 빈도에 맞춘다.")]
car = CriterionAwareRetriever.from_defaults(
    nodes=nodes, embed_model=Emb(), pool_top_k=2, similarity_top_k=2,
    hypothesizer=LLMCriterionHypothesizer(llm=resolve_llm("anthropic")),
    hypothesis_timeout=deadline,
)
out = {}
if case == "loops":
    fb = [asyncio.run(car.aretrieve(f"이음부 질문 {i}"))[0].node.metadata["car_explain"]["fallback"]
          for i in range(6)]
    out["fallbacks"] = sum(fb)
else:
    car.retrieve("예열 질문")  # warm-up, answered normally
    time.sleep(0.5)
    out["before"] = now()
    started = time.monotonic()
    fb = [car.retrieve(f"이음부 질문 {i}")[0].node.metadata["car_explain"]["fallback"]
          for i in range(queries)]
    out["seconds"] = time.monotonic() - started
    out["fallbacks"] = sum(fb)
    out["after"] = now()
    time.sleep(settle)
    out["settled"] = now()
print("RESULT " + json.dumps(out), flush=True)
os._exit(0)  # the old code's stuck threads must not hold the measurement
'''


def old_tree(args: argparse.Namespace, tmp: Path) -> Path:
    if args.old:
        return Path(args.old)
    archive = tmp / "old.tar"
    subprocess.run(
        ["git", "-C", str(REPO), "archive", "-o", str(archive), args.old_ref, "llama_index_car"],
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(tmp / "old", filter="data")
    return tmp / "old"


def run_child(
    tree: Path, server: FakeProviderServer, case: str, args: argparse.Namespace
) -> dict[str, Any]:
    env = dict(os.environ)
    reader = REPO / "readers" / "llama-index-readers-hwpx"
    env.update(
        PYTHONPATH=os.pathsep.join([str(tree), str(reader)]),
        ANTHROPIC_API_KEY="sk-ant-fake",
        ANTHROPIC_BASE_URL=server.url,
    )
    env.pop("CAR_LLM", None)
    deadline = args.deadline if case == "drip" else 30.0
    queries = args.queries if case == "drip" else 1
    settle = args.settle if case == "drip" else 0.0
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(queries), str(deadline), str(settle)],
        env=env, capture_output=True, text=True, timeout=1800, cwd=tempfile.gettempdir(),
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{case} on {tree}: no result\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(line[len("RESULT "):])
    return result


def scripted(server: FakeProviderServer, case: str, args: argparse.Namespace) -> None:
    server.reset()
    server.body_bytes_sent.clear()
    if case == "drip":
        server.enqueue(MESSAGES, Reply())  # the warm-up query
        server.set_default(MESSAGES, Reply.slow_drip(0.05))
    elif case == "huge":
        server.enqueue(MESSAGES, Reply())
        server.set_default(MESSAGES, Reply.huge(args.huge_mb * 1_000_000))


def ratio(old: float, new: float) -> str:
    return "—" if not old or not new else f"{old / new:.1f}×"


def main() -> None:
    """Print the before/after table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=0.5, help="hypothesis_timeout, s")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before recount")
    parser.add_argument("--huge-mb", type=int, default=400)
    parser.add_argument("--old-ref", default="main")
    parser.add_argument("--old", default=None, help="a directory holding an old llama_index_car")
    parser.add_argument("--cases", default="drip,huge,loops")
    args = parser.parse_args()
    rows: list[tuple[str, str, Any, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": old_tree(args, Path(tmp)), "new": REPO}
        server = FakeProviderServer().start()
        try:
            for case in args.cases.split(","):
                got: dict[str, dict[str, Any]] = {}
                for version, tree in trees.items():
                    scripted(server, case, args)
                    got[version] = run_child(tree, server, case, args)
                    time.sleep(0.5)  # let the server's handlers see the client go
                    got[version]["requests"] = len(server.requests_to(MESSAGES))
                    got[version]["server_bytes"] = sum(server.body_bytes_sent)
                o, n = got["old"], got["new"]
                if case == "drip":
                    for key in ("threads", "fds"):
                        for when in ("before", "after", "settled"):
                            label = {"before": "after warm-up", "after": f"after {args.queries}"
                                     f" queries", "settled": f"+{args.settle:g} s"}[when]
                            rows.append((f"drip {key}", label, o[when][key], n[when][key]))
                    rows.append(("drip", "fallbacks", o["fallbacks"], n["fallbacks"]))
                    rows.append(("drip", "seconds for the queries", round(o["seconds"], 1),
                                 round(n["seconds"], 1)))
                elif case == "huge":
                    rows.append((f"huge {args.huge_mb} MB", "peak RSS MB before",
                                 round(o["before"]["peak_mb"]), round(n["before"]["peak_mb"])))
                    rows.append((f"huge {args.huge_mb} MB", "peak RSS MB after",
                                 round(o["settled"]["peak_mb"]), round(n["settled"]["peak_mb"])))
                    rows.append((f"huge {args.huge_mb} MB", "server bytes sent (MB)",
                                 round(o["server_bytes"] / 1e6, 1),
                                 round(n["server_bytes"] / 1e6, 1)))
                    rows.append((f"huge {args.huge_mb} MB", "fallback", o["fallbacks"],
                                 n["fallbacks"]))
                else:
                    rows.append(("6 × asyncio.run", "fallbacks", o["fallbacks"], n["fallbacks"]))
                    rows.append(("6 × asyncio.run", "requests", o["requests"], n["requests"]))
        finally:
            server.stop()
    print(f"old = {args.old or args.old_ref}, new = {REPO} (working tree)")
    print("| case | metric | old | new | old/new |\n|---|---|---:|---:|---:|")
    for case, metric, old, new in rows:
        r = ratio(old, new) if isinstance(old, (int, float)) else "—"
        print(f"| {case} | {metric} | {old} | {new} | {r} |")


if __name__ == "__main__":
    main()
