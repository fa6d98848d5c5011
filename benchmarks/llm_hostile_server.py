"""CAR with Claude against a hostile LLM server: threads, fds and RSS, old code vs new, one run.

Issue 20.8. The fake provider (``tests/fakes/provider_server.py``) runs in this process; each
case runs the client in a fresh process (so its threads, fds and RSS are the client's alone),
once with the old tree and once with this one:

* ``drip`` — every ``/v1/messages`` reply sends its headers, then one body byte every 50 ms for
  ever. ``--queries`` CAR queries (``hypothesis_timeout=--deadline``) all fall back; the table
  shows threads and open fds after a warm-up query, after the queries, and ``--settle`` seconds
  later (a leak stays).
* ``huge`` / ``huge-chunked`` — one reply of ``--huge-mb`` MB (a valid Messages body) with a
  ``Content-Length`` / chunked. The table shows the client's peak RSS (``VmHWM``) before and
  after the query, what the server managed to send (an upper bound of what the client read),
  and whether CAR fell back.
* ``loops`` — ``asyncio.run(car.aretrieve(q))`` six times with a healthy server: fallbacks and
  requests (6 and 6 when nothing fails).
* ``call-body`` / ``call-headers`` — one hypothesizer call alone, sync then async
  (``asyncio.run``), inside ``llm_deadline(--call-deadline)`` against a server dripping one
  byte every ``--call-drip`` seconds (default 1 s) in the body or in a header block that never
  ends: the seconds until the call returns, against the deadline (CAR's fallback hides this:
  it answers at the deadline whether or not the call has ended), then threads and fds after
  ``--settle`` seconds and how many dripping handlers ended (a handler ends only when the client
  closes its socket).

The old tree is ``git archive <--old-ref>`` (default ``main``) of ``llama_index_car``, or
``--old PATH`` (a directory holding an older ``llama_index_car``). Run::

    python benchmarks/llm_hostile_server.py [--queries 20] [--huge-mb 400] [--old-ref main] \
        [--cases drip,huge,huge-chunked,loops,call-body,call-headers]
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
if case.startswith("call"):
    from llama_index_car.llms import llm_deadline
    hyp = LLMCriterionHypothesizer(llm=resolve_llm("anthropic"))
    hyp.hypothesize("예열 질문")  # warm-up, answered normally
    for mode in ("sync", "async"):
        started = time.monotonic()
        try:
            with llm_deadline(deadline):
                if mode == "async":
                    asyncio.run(hyp.ahypothesize(f"이음부 질문 {mode}"))
                else:
                    hyp.hypothesize(f"이음부 질문 {mode}")
            outcome = "answered"
        except Exception as exc:  # the error the caller sees, and what caused it
            outcome = type(exc.__cause__ or exc).__name__
        out[mode] = {"seconds": time.monotonic() - started, "error": outcome}
    time.sleep(settle)
    out["settled"] = now()
elif case == "loops":
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
sys.stdin.readline()  # alive (its sockets too) until the parent has counted the server's side
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
    env.pop("LLAMA_CAR_LLM", None)
    deadline = {"drip": args.deadline}.get(case, args.call_deadline if "call" in case else 30.0)
    queries = args.queries if case == "drip" else 1
    settle = args.settle if case == "drip" or "call" in case else 0.0
    with tempfile.TemporaryFile("w+") as err, subprocess.Popen(
        [sys.executable, "-c", CHILD, case, str(queries), str(deadline), str(settle)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
        cwd=tempfile.gettempdir(),
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        line = next((ln for ln in proc.stdout if ln.startswith("RESULT ")), None)
        time.sleep(0.5)  # let the server's handlers see a closed socket
        ended = len(server.body_bytes_sent)  # counted while the client still lives
        proc.stdin.close()
        proc.wait(timeout=60)
        if line is None:
            err.seek(0)
            raise SystemExit(f"{case} on {tree}: no result\n{err.read()[-3000:]}")
    result: dict[str, Any] = json.loads(line[len("RESULT "):])
    result["handlers_ended"] = ended
    return result


def scripted(server: FakeProviderServer, case: str, args: argparse.Namespace) -> None:
    server.reset()
    server.body_bytes_sent.clear()
    if case == "drip":
        server.enqueue(MESSAGES, Reply())  # the warm-up query
        server.set_default(MESSAGES, Reply.slow_drip(0.05))
    elif case.startswith("huge"):
        server.enqueue(MESSAGES, Reply())
        server.set_default(
            MESSAGES, Reply.huge(args.huge_mb * 1_000_000, declare_length=case == "huge")
        )
    elif case.startswith("call"):
        server.enqueue(MESSAGES, Reply())
        server.set_default(MESSAGES, Reply.slow_drip(args.call_drip, headers=case.endswith("headers")))


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
    parser.add_argument("--call-deadline", type=float, default=3.0, help="llm_deadline, s")
    parser.add_argument("--call-drip", type=float, default=1.0, help="s between dripped bytes")
    parser.add_argument("--cases", default="drip,huge,huge-chunked,loops,call-body,call-headers")
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
                elif case.startswith("huge"):
                    label = f"{case} {args.huge_mb} MB"
                    rows.append((label, "peak RSS MB before",
                                 round(o["before"]["peak_mb"]), round(n["before"]["peak_mb"])))
                    rows.append((label, "peak RSS MB after",
                                 round(o["settled"]["peak_mb"]), round(n["settled"]["peak_mb"])))
                    rows.append((label, "server bytes sent (KB)",
                                 round(o["server_bytes"] / 1e3, 1),
                                 round(n["server_bytes"] / 1e3, 1)))
                    rows.append((label, "fallback", o["fallbacks"], n["fallbacks"]))
                elif case.startswith("call"):
                    for mode in ("sync", "async"):
                        rows.append((f"{case} {mode}", f"seconds to return (deadline "
                                     f"{args.call_deadline:g} s)", round(o[mode]["seconds"], 2),
                                     round(n[mode]["seconds"], 2)))
                        rows.append((f"{case} {mode}", "error", o[mode]["error"],
                                     n[mode]["error"]))
                    for key in ("threads", "fds"):
                        rows.append((case, f"{key} +{args.settle:g} s", o["settled"][key],
                                     n["settled"][key]))
                    rows.append((case, "dripping handlers ended (of 2)", o["handlers_ended"],
                                 n["handlers_ended"]))
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
