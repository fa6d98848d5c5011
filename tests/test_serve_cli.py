"""``llama-car serve`` as a user runs it: it refuses unsafe addresses with one line before any
model loads, and on SIGTERM it stops accepting and lets the request in flight finish (a real
subprocess; the LLM is the local fake, its reply held until the signal was sent).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from llama_index_car.cli import main
from tests.conftest import REPO_ROOT
from tests.fakes.serve_folder import shared_folder

pytest.importorskip("fastapi", reason="the [serve] extra is needed")


@pytest.mark.parametrize("argv, message", [
    (["--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without an API key"),
    (["--host", "192.168.1.5", "--api-key", "short"], "at least 16 printable characters"),
    (["--replicas", "2"], "--replicas needs --ray"),
])
def test_unsafe_or_inconsistent_options_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    argv: list[str], message: str,
) -> None:
    monkeypatch.delenv("LLAMA_CAR_API_KEY", raising=False)
    assert main(["serve", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_store_option_reaches_the_folder_loader(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--store`` is the user's, checked against the folder's record before serving: a
    folder that keeps its own vectors refuses a store URI (one line, exit 2, nothing bound)."""
    folder = shared_folder(tmp_path_factory)[1]
    assert main(["serve", str(folder), "--store", f"qdrant://{tmp_path}/q",
                 "--port", str(_free_port())]) == 2
    err = capsys.readouterr().err
    assert "keeps its vectors in the folder" in err and err.count("\n") == 1


def test_loopback_addresses_need_no_key() -> None:
    from llama_index_car.cli.serve import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), str(REPO_ROOT / "readers" / "llama-index-readers-hwpx")])
    return env


def _wait_ready(url: str, proc: subprocess.Popen[bytes], seconds: float = 600) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert proc.poll() is None, "the server exited"
        try:
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("the server never became ready")


@pytest.mark.slow
def test_sigterm_drains_the_request_in_flight(
    tmp_path_factory: pytest.TempPathFactory, fake: Any
) -> None:
    from tests.fakes.provider_server import Reply

    folder = shared_folder(tmp_path_factory)[1]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_index_car", "serve", str(folder), "--port", str(port),
         "--llm", "anthropic", "--reload-interval", "0"],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_ready(url, proc)
        released = threading.Event()

        def gate(_: Any) -> Any:
            released.wait(300)
            return Reply.anthropic_text("간격은 750m 이내입니다 [1].")

        fake.enqueue("/v1/messages", gate)
        result: dict[str, Any] = {}

        def ask() -> None:
            r = httpx.post(url + "/v1/answer", json={"query": "비상주차대 간격"}, timeout=300)
            result["status"], result["body"] = r.status_code, r.json()

        asker = threading.Thread(target=ask)
        asker.start()
        while not fake.requests_to("/v1/messages"):
            assert asker.is_alive()
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        refused = False
        for _ in range(500):  # the listening socket closes first
            try:
                httpx.get(url + "/healthz", timeout=2)
            except httpx.TransportError:
                refused = True
                break
            time.sleep(0.02)
        assert refused and proc.poll() is None  # not accepting, still finishing
        released.set()
        asker.join(timeout=120)
        assert result["status"] == 200 and result["body"]["answer"] == "간격은 750m 이내입니다 [1]."
        # uvicorn re-raises the signal once drained: the exit status says SIGTERM ended it
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
