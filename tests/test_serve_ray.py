"""``llama-car serve DIR --ray --replicas 2`` on a local Ray cluster: both replicas answer
(each names itself in ``/readyz``), every response names the folder's generation, and SIGTERM
stops the cluster."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.serve_folder import shared_folder
from tests.test_serve_cli import _env, _free_port, _wait_ready

pytest.importorskip("ray.serve", reason="the [ray] extra is needed")


@pytest.mark.slow
def test_two_ray_serve_replicas_share_the_folder(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
) -> None:
    folder = shared_folder(tmp_path_factory)[1]
    generation = json.loads((folder / "CURRENT").read_text())["generation"]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_index_car", "serve", str(folder), "--ray", "--replicas",
         "2", "--port", str(port)], env=_env(), stdout=subprocess.DEVNULL,
        stderr=log.open("wb"))
    try:
        _wait_ready(url, proc, seconds=900)
        replicas = set()
        with httpx.Client(base_url=url, timeout=120) as c:
            # the proxy learns of the second replica from Serve's controller a moment after
            # `serve.run` returns: ask until both have answered (or give up after 5 minutes)
            until = time.monotonic() + 300
            while len(replicas) < 2 and time.monotonic() < until:
                replicas.add(c.get("/readyz").json()["replica"])
                time.sleep(0.05)
            for kind in ("car", "hybrid", "bm25", "dense"):
                r = c.post("/v1/retrieve", json={"query": "난간 높이", "retriever": kind})
                assert r.status_code == 200
                assert r.json()["generation"] == r.headers["x-index-generation"] == generation
                assert r.json()["hits"]
        assert len(replicas) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
