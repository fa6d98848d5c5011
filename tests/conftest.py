"""Shared fixtures: the ``../shared`` data (corpus, eval sets) when it exists, ``fake`` (the
local fake of the provider HTTP APIs, ``tests/fakes/provider_server.py``), and the stopping of
every PostgreSQL a test starts, however the session ends (``pg_data_dir``,
``tests/pg_reaper.py``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.fakes.provider_server import FakeProviderServer

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ``../shared``; tests using it carry the ``corpus`` marker."""
    return SHARED.joinpath(*parts)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present (CI provides it)")
    return SHARED


@pytest.fixture(scope="session")
def eval_dir(shared_dir: Path) -> Path:
    return shared_dir / "eval"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProviderServer]:
    """A running fake of the Anthropic/OpenAI/Cohere HTTP APIs with every SDK pointed at it
    through the environment; stopped after the test."""
    from tests.fakes.provider_server import serving

    with serving(monkeypatch) as server:
        yield server


@pytest.fixture(autouse=True, scope="session")
def _private_embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests never read or write the user's shared embedding cache (``~/.cache``): every
    default cache location points into a session temporary folder instead."""
    import os

    old = os.environ.get("LLAMA_CAR_CACHE")
    os.environ["LLAMA_CAR_CACHE"] = str(tmp_path_factory.mktemp("embedding-cache"))
    yield
    if old is None:
        os.environ.pop("LLAMA_CAR_CACHE", None)
    else:
        os.environ["LLAMA_CAR_CACHE"] = old


#: a folder mixing every format the project reads: ``{name in the folder: path under
#: ../shared/corpus}`` (small real files; ``hwp5_named.hwpx`` holds HWP 5 bytes)
MIXED_FORMATS = {
    "nodehwp-table-simple-1.hwp": "hwp/nodehwp-table-simple-1.hwp",
    "kaist-055.hwp": "hwp/kaist-055.hwp",
    "hwpxlib_table_small.hwpx": "hwpx/hwpxlib_table_small.hwpx",
    "osk_textbox_table.hml": "hml/osk_textbox_table.hml",
    "sub/kaist_double_major_form.hml": "hml/kaist_double_major_form.hml",
    "hwp5_named.hwpx": "hwp/issue1510_coanchored_float_tables.hwp",
}


def copy_mixed_formats(shared: Path, dest: Path) -> Path:
    """Copy :data:`MIXED_FORMATS` from ``shared/corpus`` into ``dest`` (made writable)."""
    import shutil

    for name, rel in MIXED_FORMATS.items():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared / "corpus" / rel, target)
    return dest


# ----------------------------------------------------------------------------- PostgreSQL
def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends the session as ^C does (pytest then tears every fixture down and runs the
    atexit handlers); by default it would kill the process on the spot."""
    import threading

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread() and signal.getsignal(
            signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


@pytest.fixture(autouse=True, scope="session")
def _postgres_roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """The folders under which this session's PostgreSQL data folders live (its temporary
    tree and one ``car-pg-`` folder of its own), and the guarantee that every server there
    is stopped when the session ends: by this fixture's teardown (a normal end, ^C, SIGTERM),
    else by a watchdog process that waits for this process to end in any way (SIGKILL, a
    killed xdist worker) — ``tests/pg_reaper.py``."""
    from tests.pg_reaper import stop_postgres_under

    roots = [tmp_path_factory.getbasetemp(), Path(tempfile.mkdtemp(prefix="car-pg-"))]
    watchdog = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("pg_reaper.py")), *map(str, roots)],
        stdin=subprocess.PIPE, start_new_session=True,
    )
    try:
        yield roots
    finally:
        stop_postgres_under(roots)
        if watchdog.stdin is not None:
            watchdog.stdin.close()
        watchdog.wait(timeout=120)
        import shutil

        shutil.rmtree(roots[1], ignore_errors=True)


@pytest.fixture
def pg_data_dir(_postgres_roots: list[Path]) -> Iterator[Path]:
    """A fresh folder for a PostgreSQL data folder (pgserver: ``pg_data_dir / "pg"``); the
    servers started under it are stopped after the test. Outside pytest's private temporary
    tree, which pgserver's own user (when run as root) cannot always enter."""
    from tests.pg_reaper import stop_postgres_under

    folder = Path(tempfile.mkdtemp(prefix="data-", dir=_postgres_roots[1]))
    try:
        yield folder
    finally:
        stop_postgres_under([folder])


@pytest.fixture
def tmpfs_mount(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs_mount(options)`` → a fresh tmpfs mount point (``mount -t tmpfs -o options``),
    unmounted after the test: a full disk or a read-only mount caused for real."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs (the CI machine is root)")
    points: list[Path] = []

    def make(options: str) -> Path:
        point = tmp_path / f"mnt{len(points)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        points.append(point)
        return point

    yield make
    for point in points:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``milvus+http://127.0.0.1:PORT`` of a real Milvus gRPC server (milvus-lite's own,
    ``tests/fakes/milvus_server.py``) over a fresh data folder; stopped after the test."""
    for module in ("pymilvus", "milvus_lite", "llama_index.vector_stores.milvus"):
        pytest.importorskip(module)
    from tests.fakes.milvus_server import milvus_serving

    with milvus_serving(tmp_path_factory.mktemp("milvus-server") / "data") as uri:
        yield uri


@pytest.fixture
def qdrant_server() -> Iterator[Any]:
    """A Qdrant REST server on 127.0.0.1 over qdrant-client's local engine
    (``tests/fakes/qdrant_server.py``; ``.uri`` is its store URI); stopped after the test,
    which must have called nothing outside the REST subset it serves."""
    for module in ("qdrant_client", "llama_index.vector_stores.qdrant"):
        pytest.importorskip(module)
    from tests.fakes.qdrant_server import FakeQdrantServer

    server = FakeQdrantServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert server.unknown == [] and server.errors == [], (server.unknown, server.errors)
