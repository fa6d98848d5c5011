"""An interrupted pytest stops the PostgreSQL servers its fixtures started (issue 37, item 15).

A tiny pytest session runs in a subprocess with this repository's conftest: its one test
starts a pgserver the way the store tests do and waits. The session is then ended by a
signal — SIGTERM (what ``timeout`` and CI runners send), SIGINT to its process group (^C), or
SIGKILL (nothing in the process runs: the conftest's watchdog process stops the server) — and
no ``postgres -D`` of that data folder may remain.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.pg_reaper import postmasters_under, stop_postgres_under

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pgserver") is None or not Path("/proc").is_dir(),
    reason="pgserver not installed ([stores] extra) or no /proc",
)

CHILD = textwrap.dedent('''
    import os
    import tempfile
    import threading
    from pathlib import Path

    import pytest


    @pytest.fixture
    def data_dir(request):
        try:  # the conftest's folder, whose servers it stops
            return request.getfixturevalue("pg_data_dir")
        except pytest.FixtureLookupError:
            return Path(tempfile.mkdtemp(prefix="car-pg-"))


    def test_start_a_server_and_wait(data_dir):
        import pgserver

        server = pgserver.get_server(data_dir / "pg", cleanup_mode="stop")
        try:
            Path(os.environ["CAR_PG_READY"]).write_text(str(data_dir / "pg"))
            threading.Event().wait()  # until the session is interrupted
        finally:
            server.cleanup()
''')


def _session(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "test_child.py").write_text(CHILD)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    ready = tmp_path / "ready"
    env = {**os.environ, "CAR_PG_READY": str(ready),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
         "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / "test_child.py")],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return child, ready


def _interrupt_and_check(tmp_path: Path, how: signal.Signals, group: bool = False) -> None:
    child, ready = _session(tmp_path)
    data: Path | None = None
    try:
        deadline = time.monotonic() + 300  # pgserver's initdb on two busy cores
        while not ready.exists():
            assert child.poll() is None, "the child session ended before starting its server"
            assert time.monotonic() < deadline, "the child never started its server"
            time.sleep(0.1)
        data = Path(ready.read_text())
        assert postmasters_under([data]), "the server is not running"
        if group:
            os.killpg(child.pid, how)
        else:
            child.send_signal(how)
        child.wait(timeout=120)
        deadline = time.monotonic() + 120  # after SIGKILL, the watchdog stops it
        while postmasters_under([data]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert postmasters_under([data]) == {}, f"postgres of {data} still runs after {how.name}"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if data is not None:
            stop_postgres_under([data.parent])


def test_sigterm_stops_the_server_a_fixture_started(tmp_path: Path) -> None:
    _interrupt_and_check(tmp_path, signal.SIGTERM)


@pytest.mark.slow
def test_sigint_to_the_process_group_stops_the_server(tmp_path: Path) -> None:
    _interrupt_and_check(tmp_path, signal.SIGINT, group=True)


@pytest.mark.slow
def test_sigkill_leaves_it_to_the_watchdog(tmp_path: Path) -> None:
    _interrupt_and_check(tmp_path, signal.SIGKILL)
