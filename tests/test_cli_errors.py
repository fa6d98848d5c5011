"""Failures a user can cause are one line on stderr with exit 2 (issue 20, item 6).

Each case is caused for real: a full disk and a read-only mount are tmpfs mounts (``mount``
needs root, which the CI machine has; elsewhere these two cases skip with the reason), an
unreachable PostgreSQL is a port nothing listens on, a bad path is a file where a folder is
expected. ``LLAMA_CAR_DEBUG=1`` lets the traceback through. Metadata filters that a store's
client would choke on (``EQ None``, ``GT "f5"``, a quote in a key) are refused with a typed
error before they reach BM25 or a store, from the API and from a persisted ``config.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("src")
    for path in sorted(DEMO_CORPUS_DIR.glob("*.hwpx"))[:3]:
        shutil.copy(path, folder / path.name)
    return folder


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def _one_line(rc: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    return lines[0]


def test_a_full_disk_says_no_space_left_and_a_retry_is_not_refused(
    src: Path, tmpfs_mount: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    small = tmpfs_mount("size=40k")
    out = small / "idx"
    line = _one_line(*_run(capsys, "index", str(src), "--persist", str(out), "--no-progress"))
    assert "no space left on device" in line and str(out) in line, line
    assert not any(p.name.startswith("gen-") for p in out.iterdir())  # nothing half-written
    # the failed build left only its lock: the same command again fails the same way, it is
    # not refused as "not empty"
    again = _one_line(*_run(capsys, "index", str(src), "--persist", str(out), "--no-progress"))
    assert "no space left on device" in again, again


def test_a_read_only_mount_is_one_line(
    src: Path, tmpfs_mount: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ro = tmpfs_mount("ro,size=1m")
    line = _one_line(*_run(capsys, "index", str(src), "--persist", str(ro / "idx"),
                           "--no-progress"))
    assert "read-only file system" in line, line


def test_a_file_where_a_folder_should_be_is_one_line(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x", encoding="utf-8")
    line = _one_line(*_run(capsys, "index", str(src), "--persist", str(blocker / "idx"),
                           "--no-progress"))
    assert str(blocker) in line, line


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_postgres_is_one_line_naming_the_store_not_the_password(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("llama_index.vector_stores.postgres")
    monkeypatch.delenv("LLAMA_CAR_DEBUG", raising=False)
    uri = f"postgresql://u:hunter2@127.0.0.1:{_closed_port()}/db"
    line = _one_line(*_run(capsys, "index", str(src), "--persist", str(tmp_path / "idx"),
                           "--store", uri, "--no-progress"))
    assert "127.0.0.1" in line and "hunter2" not in line, line
    assert "refused" in line.lower(), line


def test_the_debug_switch_lets_the_traceback_through(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("LLAMA_CAR_DEBUG", "1")
    with pytest.raises(OSError):
        main(["index", str(src), "--persist", str(blocker / "idx"), "--no-progress"])


def test_a_store_flag_for_a_folder_without_a_store_is_refused(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "idx"
    assert main(["index", str(src), "--persist", str(out), "--embed", "use",
                 "--no-progress"]) == 0
    capsys.readouterr()
    line = _one_line(*_run(capsys, "query", str(out), "배수", "--store",
                           f"qdrant://{tmp_path / 'q'}"))
    assert "drop --store" in line, line
    assert not (tmp_path / "q").exists()


# ----------------------------------------------------------------------------- filters
BAD_FILTERS = [
    MetadataFilter(key="year", value=None),  # EQ None
    MetadataFilter(key="year", value="f5", operator=">"),  # GT a string
    MetadataFilter(key='file_name" OR 1=1 --', value="x"),  # a quote in a key
    MetadataFilter(key="year", value=float("nan"), operator="<"),
    MetadataFilter(key="year", value=[], operator="in"),
    MetadataFilter(key="", value="x"),
]


@pytest.mark.parametrize("leaf", BAD_FILTERS, ids=lambda f: f"{f.key[:8]}{f.operator.value}")
def test_filters_a_store_would_choke_on_are_refused_before_any_store(
    leaf: MetadataFilter, tmp_path: Path
) -> None:
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
    from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever
    from llama_index_car.stores import close_vector_store, open_vector_store
    from tests.fakes.embeddings import HashedBigramEmbedding

    nodes = [TextNode(text=f"배수 기준 {i}", id_=str(uuid.UUID(int=i + 1)),
                      metadata={"year": 2000 + i}) for i in range(3)]
    filters = MetadataFilters(filters=[leaf])
    with pytest.raises(ConfigurationError, match="filters"):
        KiwiBM25Retriever.from_defaults(nodes=nodes, filters=filters)
    store = open_vector_store(f"qdrant://{tmp_path / 'q'}", dim=64)
    try:
        index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(
            vector_store=store), embed_model=HashedBigramEmbedding())
        with pytest.raises(ConfigurationError, match="filters"):
            WeightedRRFRetriever.from_defaults(nodes, index=index, filters=filters)
    finally:
        close_vector_store(store)


def test_good_filters_pass_and_filter() -> None:
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    nodes = [TextNode(text=f"배수 기준 {i}", id_=f"n{i}", metadata={"year": 2000 + i})
             for i in range(3)]
    filters = MetadataFilters(filters=[MetadataFilter(key="year", value=2001, operator=">=")])
    hits = KiwiBM25Retriever.from_defaults(nodes=nodes, filters=filters).retrieve("배수 기준")
    assert sorted(h.node.node_id for h in hits) == ["n1", "n2"]


def test_a_hostile_index_spec_is_a_typed_error(tmp_path: Path) -> None:
    """Filters are options of a view and are not persisted; the index's own ``index.json``,
    re-bound by an attacker, is checked field by field before anything is loaded."""
    from llama_index_car import _persist
    from llama_index_car.indices import CriterionAwareIndex
    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    nodes = [TextNode(text=f"배수 기준 {i}", id_=f"n{i}") for i in range(3)]
    KiwiBM25Retriever.from_defaults(nodes=nodes).index.persist(tmp_path / "bm25")
    gen = _persist.live_dir(tmp_path / "bm25")
    spec = json.loads((gen / "index.json").read_text(encoding="utf-8"))
    spec["vectors"] = "elsewhere"
    (gen / "index.json").write_text(json.dumps(spec), encoding="utf-8")
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    with pytest.raises(IndexPersistError, match="index.json: malformed"):
        CriterionAwareIndex.load(tmp_path / "bm25")


def test_sigterm_ends_a_command_as_an_interrupt_and_runs_exit_handlers(tmp_path: Path) -> None:
    """Issue 37, item 15: a command killed by SIGTERM (``timeout``, a CI runner) died without
    its ``atexit`` handlers, so a pgserver it had started kept running. Once ``llama-car``
    has run a command in a process, SIGTERM takes the ^C path (``KeyboardInterrupt``: exit
    130 in the CLI, the handlers run). A child process runs a real command, then signals
    itself."""
    import sys

    child = (
        "import atexit, os, signal, sys, threading\n"
        "from llama_index_car.cli import main\n"
        "assert main(['query', sys.argv[1], 'q']) == 2  # not an index folder\n"
        "atexit.register(lambda: print('exit handlers ran', flush=True))\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    threading.Event().wait(60)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    (tmp_path / "idx").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path / "idx")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 130, (done.returncode, done.stderr[-500:])
    assert "exit handlers ran" in done.stdout
