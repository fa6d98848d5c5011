"""``llama-car query --llm anthropic`` against a broken provider: requests and exit time.

Runs the real CLI (a fresh process per case) with the real anthropic SDK pointed at the local
fake server (``tests/fakes/provider_server.py``) answering every ``/v1/messages`` request with:
``ok`` (a hypothesis), ``500``, ``429`` with ``Retry-After: 3600``, or ``hung`` (never answers).
Prints, per case, the process exit code, the wall time until the process has exited and the
number of requests the server received. The ``ok`` row is the peer: the other rows' extra
time is what the failure costs. ``--pythonpath OLD_CHECKOUT`` runs an older tree (e.g. a
``git archive`` of a previous commit) for a before/after table.

Run::

    llama-car index llama_index_car/data/demo_corpus --persist /tmp/idx --no-progress
    python benchmarks/llm_failure_modes.py /tmp/idx [--llm-timeout 30] [--pythonpath OLD]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.provider_server import FakeProviderServer, Reply  # noqa: E402

CASES = {
    "ok": None,
    "500": Reply.error(500),
    "429 Retry-After 3600": Reply.error(429, retry_after=3600),
    "hung": Reply.hang(),
}


def main() -> None:
    """Print one row per failure mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", help="an index folder built by llama-car index")
    parser.add_argument("--question", default="배수시설 설치기준은?")
    parser.add_argument("--llm-timeout", default=None, help="passed to llama-car query")
    parser.add_argument("--pythonpath", default=None, help="run another checkout's package")
    args = parser.parse_args()
    server = FakeProviderServer().start()
    env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-fake", ANTHROPIC_BASE_URL=server.url)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    extra = ["--llm-timeout", args.llm_timeout] if args.llm_timeout else []
    print(f"{'case':<22} {'exit':>4} {'seconds':>8} {'× ok':>6} {'requests':>8}  hypothesis")
    base = None
    try:
        for name, reply in CASES.items():
            server.reset()
            server.set_default("/v1/messages", reply)
            start = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "llama_index_car",
                    "query",
                    args.index,
                    args.question,
                    "--llm",
                    "anthropic",
                    "--top-k",
                    "1",
                    *extra,
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            seconds = time.monotonic() - start
            base = base or seconds
            hyp = next(
                (
                    ln.split(":", 1)[1].split("   ")[0].strip()
                    for ln in proc.stdout.splitlines()
                    if ln.startswith("criterion")
                ),
                "-",
            )
            print(
                f"{name:<22} {proc.returncode:>4} {seconds:>8.1f} {seconds / base:>6.1f} "
                f"{len(server.requests_to('/v1/messages')):>8}  {hyp}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
