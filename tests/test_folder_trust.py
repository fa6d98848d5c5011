"""An index folder is data (issue 20, items 1-3): whatever its manifest says, it cannot make a
query connect to a host, send a password, run SQL or create files anywhere.

Hostile folders are built in code from a real small index (USE embedding, one demo file) by
rewriting ``car_index.json`` and re-binding the generation's manifest, as an attacker who
controls the folder can. A fake PostgreSQL server on 127.0.0.1 speaks just enough of the wire
protocol to ask for a cleartext password and records every connection and password; the
positive control shows it does receive one when the *user* names it.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_index_car import _persist
from llama_index_car._errors import CarError, ConfigurationError
from llama_index_car._persist import live_dir
from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR


class FakePostgres:
    """Accepts connections, answers the startup message with AuthenticationCleartextPassword
    and records what arrives (``connections``, ``passwords``), then closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.passwords: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(5)
                try:
                    self._talk(conn)
                except OSError:
                    pass

    def _talk(self, conn: socket.socket) -> None:
        length, code = struct.unpack("!ii", conn.recv(8))
        if code == 80877103:  # SSLRequest: no SSL, then the real startup message
            conn.sendall(b"N")
            length, code = struct.unpack("!ii", conn.recv(8))
        conn.recv(length - 8)
        conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        head = conn.recv(5)
        if head[:1] == b"p":
            (size,) = struct.unpack("!i", head[1:5])
            self.passwords.append(conn.recv(size - 4).rstrip(b"\0").decode())

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def fake_pg() -> Iterator[FakePostgres]:
    server = FakePostgres()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    shutil.copy(DEMO_CORPUS_DIR / "dg2012_tunnel.hwpx", src / "dg2012_tunnel.hwpx")
    out = tmp_path_factory.mktemp("idx") / "index"
    assert main(["index", str(src), "--persist", str(out), "--embed", "use",
                 "--no-progress"]) == 0
    return out


def _hostile(folder: Path, tmp_path: Path, store: Any) -> Path:
    """A copy of ``folder`` whose manifest names ``store``, re-bound so hashes agree."""
    copy = tmp_path / "hostile"
    shutil.copytree(folder, copy)
    gen = live_dir(copy)
    manifest = json.loads((gen / "car_index.json").read_text(encoding="utf-8"))
    manifest["store"] = store
    (gen / "car_index.json").write_text(json.dumps(manifest), encoding="utf-8")
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    return copy


def _query(capsys: pytest.CaptureFixture[str], folder: Path, *extra: str) -> tuple[int, str]:
    rc = main(["query", str(folder), "터널 조명 기준", *extra])
    return rc, capsys.readouterr().err


def _tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.mark.parametrize("record", [
    "postgresql://victim@127.0.0.1:{port}/db",  # the format of the attack: a URI
    {"kind": "postgresql", "collection": "llama_car", "inside": False, "fingerprint": ""},
])
def test_a_folder_cannot_make_a_query_connect_or_send_a_password(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    fake_pg: FakePostgres, monkeypatch: pytest.MonkeyPatch, record: Any,
) -> None:
    monkeypatch.setenv("PGPASSWORD", "s3cret-of-the-user")
    if isinstance(record, str):
        record = record.format(port=fake_pg.port)
    rc, err = _query(capsys, _hostile(folder, tmp_path, record))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert fake_pg.connections == 0 and fake_pg.passwords == []


def test_the_fake_server_does_record_a_password_the_user_sends(
    fake_pg: FakePostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Positive control: naming the server yourself does reach it (so 0 above means 0)."""
    pytest.importorskip("llama_index.vector_stores.postgres")
    from llama_index_car.stores import open_vector_store

    monkeypatch.setenv("PGPASSWORD", "s3cret-of-the-user")
    with pytest.raises(Exception):  # noqa: B017 - the fake server ends the session
        open_vector_store(f"postgresql://victim@127.0.0.1:{fake_pg.port}/db", dim=4)
    assert fake_pg.passwords == ["s3cret-of-the-user"]


@pytest.mark.parametrize("schema", [
    'public"."data_llama_car"; CREATE TABLE pwned_by_uri(x int); --',
    "a b", "x" * 64, "1abc",
])
def test_sql_identifiers_are_validated_before_any_connection(
    fake_pg: FakePostgres, schema: str
) -> None:
    pytest.importorskip("llama_index.vector_stores.postgres")
    from urllib.parse import quote

    from llama_index_car.stores import open_vector_store

    uri = f"postgresql://u@127.0.0.1:{fake_pg.port}/db?schema={quote(schema)}"
    with pytest.raises(ConfigurationError, match="schema="):
        open_vector_store(uri, dim=4, overwrite=True)
    assert fake_pg.connections == 0


@pytest.mark.parametrize("kind", ["milvus", "qdrant", "chroma"])
def test_a_folder_cannot_choose_where_a_query_writes(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    old_style = f"{kind}://{target / 'x.db' if kind == 'milvus' else target / 'x'}"
    outside = {"kind": kind, "collection": "llama_car", "inside": False, "fingerprint": ""}
    inside = dict(outside, inside=True)  # names no path: DIR/store, which does not exist
    for record in (old_style, outside, inside):
        hostile = _hostile(folder, tmp_path, record)
        before = _tree(tmp_path)
        rc, err = _query(capsys, hostile)
        assert rc == 2 and len(err.strip().splitlines()) == 1, (record, err)
        assert _tree(tmp_path) == before, record  # nothing created, anywhere
        shutil.rmtree(hostile)


def test_a_user_given_store_must_be_the_recorded_one(tmp_path: Path) -> None:
    from llama_index_car.folder.store import store_record, store_uri_for

    pg = store_record("postgresql://u:pw@db.example:5432/car")
    assert pg is not None and "pw" not in json.dumps(pg) and "db.example" not in json.dumps(pg)
    assert store_uri_for(pg, tmp_path, "postgresql://other@db.example:5432/car")
    for wrong in ("postgresql://u@evil.example:5432/car", "qdrant:///tmp/q"):
        with pytest.raises(ConfigurationError):
            store_uri_for(pg, tmp_path, wrong)
    with pytest.raises(ConfigurationError, match="--store"):
        store_uri_for(pg, tmp_path, None)
    inside = store_record("qdrant")
    assert inside is not None
    assert store_uri_for(inside, tmp_path, None) == f"qdrant://{tmp_path / 'store'}"
    with pytest.raises(CarError):
        store_record("redis")


def _planted(store: Path, outside: Path, how: str) -> None:
    """``DIR/store`` as whoever wrote the folder may have left it."""
    if how == "empty":
        store.mkdir()
    elif how == "symlink":
        store.symlink_to(outside, target_is_directory=True)
    else:  # a folder whose files a store client would open, one of them a symlink
        store.mkdir()
        for name in ("meta.json", ".lock", "chroma.sqlite3", "PG_VERSION", "postgresql.conf"):
            (store / name).symlink_to(outside / name)


@pytest.mark.parametrize("how", ["empty", "symlink", "symlinked-files"])
@pytest.mark.parametrize("kind", ["qdrant", "chroma", "milvus", "pgserver"])
def test_an_inside_store_the_index_did_not_create_is_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, how: str
) -> None:
    """Issue 37, item 1: a record of an inside store whose ``DIR/store`` is an empty folder or
    a symlink made a query create Qdrant's ``.lock``/``meta.json``, Chroma's
    ``chroma.sqlite3`` or a 38 MB pgserver ``initdb`` there. Now: one line, exit 2, and no
    file created anywhere (the symlink's target included)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    hostile = _hostile(folder, tmp_path,
                       {"kind": kind, "collection": "llama_car", "inside": True, "fingerprint": ""})
    _planted(hostile / "store", outside, how)
    before = _tree(tmp_path)
    rc, err = _query(capsys, hostile, "--retriever", "dense")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert ("symlink" in err) if how != "empty" else ("no " + kind + " store" in err), err
    assert _tree(tmp_path) == before  # nothing created, here or through the symlink


def test_a_store_path_the_user_gives_must_hold_a_store_already(tmp_path: Path) -> None:
    """``create=False`` (loading, updating) opens only a store its client made: an empty
    folder is refused before the client can create its files in it."""
    from llama_index_car.stores import open_vector_store

    for uri in (f"qdrant://{tmp_path}/q", f"chroma://{tmp_path}/c", f"milvus://{tmp_path}/m.db",
                f"pgserver://{tmp_path}/pg"):
        path = Path(uri.split("://", 1)[1])
        path.mkdir()
        with pytest.raises(ConfigurationError, match="nothing is created"):
            open_vector_store(uri, create=False)
        assert list(path.iterdir()) == [], uri
