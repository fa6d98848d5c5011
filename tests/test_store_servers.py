"""Milvus and Qdrant servers as stores (issue 39): ``milvus+http(s)://HOST:PORT[/DB]`` and
``qdrant+http(s)://HOST:PORT``, secrets only from ``LLAMA_CAR_MILVUS_TOKEN`` /
``LLAMA_CAR_QDRANT_API_KEY``.

Against real servers on 127.0.0.1 (``tests/fakes``: milvus-lite's own gRPC server; a Qdrant
REST server over qdrant-client's local engine): a folder built on a server records a
fingerprint, never the host or the secret, and a query must name the same server again; a
missing collection is refused and nothing is created; a server that is down or refuses the
key is one line naming the URI, without the secret. The round trips (index → query →
``--update`` → query; BM25 equal to ``rank_bm25``) are in ``test_cli_store_roundtrip.py``
and ``test_store_lexical.py``.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from llama_index_car._errors import ConfigurationError, StoreError
from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from llama_index_car.stores import parse_server, store_fingerprint, store_kind

SECRET = "s3cret-token-of-the-user"
FILES = ("dg2012_tunnel.hwpx", "dg2015_rest.hwpx")


def _dead_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.parametrize(("uri", "url", "database"), [
    ("milvus+http://Milvus.Example", "http://milvus.example:19530", "default"),
    ("milvus+https://m.example:443/car_db", "https://m.example:443", "car_db"),
    ("milvus+http://[::1]:19531/", "http://[::1]:19531", "default"),
    ("qdrant+http://q.example", "http://q.example:6333", ""),
    ("qdrant+https://q.example:443", "https://q.example:443", ""),
])
def test_a_server_uri_names_a_host_a_port_and_a_database(
    uri: str, url: str, database: str
) -> None:
    server = parse_server(uri)
    assert (server.url, server.database) == (url, database)
    assert store_kind(uri) == uri.split("+", 1)[0]


@pytest.mark.parametrize(("uri", "message"), [
    ("milvus+http://root:Milvus@m.example:19530", "no user or password"),
    (f"qdrant+http://{SECRET}@q.example", "no user or password"),
    (f"milvus+http://m.example:19530?token={SECRET}", "no query"),
    ("milvus+http://m.example:99999", "port"),
    ("milvus+http://m.example:0", "HOST:PORT"),
    ("milvus+http://:19530", "HOST:PORT"),
    ("qdrant+http://q.example:6333/prefix", "no path"),
    ("milvus+http://m.example:19530/a;drop", "database"),
])
def test_a_server_uri_with_a_secret_or_more_is_refused_without_echoing_it(
    uri: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        parse_server(uri)
    assert SECRET not in str(raised.value) and "Milvus@" not in str(raised.value)
    src = tmp_path / "src"
    src.mkdir()
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(tmp_path / "idx"),
                      "--store", uri)  # refused by the parser: nothing read, nothing made
    assert rc == 2 and SECRET not in err and "Milvus@" not in err, err
    assert not (tmp_path / "idx").exists()


def test_a_fingerprint_names_the_server_not_the_transport_nor_a_secret() -> None:
    base = store_fingerprint("milvus+http://m.example:19530")
    assert len(base) == 16 and "m.example" not in base
    same = ("milvus+https://m.example:19530", "milvus+http://M.EXAMPLE",
            "milvus+http://m.example:19530/default")
    assert {store_fingerprint(u) for u in same} == {base}
    other = ("milvus+http://m.example:19531", "milvus+http://n.example:19530",
             "milvus+http://m.example:19530/other", "qdrant+http://m.example:19530",
             "milvus://m.db")
    assert base not in {store_fingerprint(u) for u in other}
    assert len({store_fingerprint(u) for u in other}) == len(other)


def test_a_local_store_folder_does_not_open_at_a_server_nor_the_reverse(tmp_path: Path) -> None:
    """Local and server Milvus share the kind ``milvus``: the fingerprint tells them apart
    both ways (a local store's is ``""``)."""
    from llama_index_car.folder.store import store_record, store_uri_for

    local = store_record(f"milvus://{tmp_path / 'm.db'}")
    server = store_record("milvus+http://m.example:19530")
    assert local is not None and server is not None
    with pytest.raises(ConfigurationError, match="a local store"):
        store_uri_for(local, tmp_path, "milvus+http://m.example:19530")
    with pytest.raises(ConfigurationError, match="a server store"):
        store_uri_for(server, tmp_path, f"milvus://{tmp_path / 'm.db'}")
    assert store_uri_for(server, tmp_path, "milvus+https://M.example") == (
        "milvus+https://M.example")


def test_a_folder_on_a_milvus_server_opens_only_at_that_server(
    milvus_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pymilvus import MilvusClient

    from llama_index_car.folder.store import store_record

    monkeypatch.setenv("LLAMA_CAR_MILVUS_TOKEN", SECRET)
    src, idx = tmp_path / "src", tmp_path / "idx"
    src.mkdir()
    for name in FILES:
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                        "--store", milvus_server, "--no-progress")
    assert rc == 0, err
    record = store_record(milvus_server)
    assert record == {"kind": "milvus", "collection": "llama_car", "inside": False,
                      "fingerprint": store_fingerprint(milvus_server)}
    port = milvus_server.rsplit(":", 1)[1]
    for f in (f for f in idx.rglob("*") if f.is_file()):  # no secret, no host, no port
        raw = f.read_bytes()
        assert SECRET.encode() not in raw and f"127.0.0.1:{port}".encode() not in raw, f

    question = ("query", str(idx), "터널 조명 기준", "--retriever", "bm25", "--json")
    rc, out, err = _run(capsys, *question, "--store", milvus_server)
    assert rc == 0 and '"hits"' in out, err
    monkeypatch.setenv("LLAMA_CAR_STORE", milvus_server)  # the same, from the environment
    rc, again, err = _run(capsys, *question)
    assert rc == 0 and again == out, err
    monkeypatch.delenv("LLAMA_CAR_STORE")

    dead = f"milvus+http://127.0.0.1:{_dead_port()}"
    for wrong, says in ((None, "pass its URI"), (dead, "another milvus store"),
                        (f"milvus://{tmp_path / 'm.db'}", "another milvus store"),
                        (f"qdrant+http://127.0.0.1:{port}", "built with milvus")):
        rc, _, err = _run(capsys, *question, *(("--store", wrong) if wrong else ()))
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, (wrong, err)
    assert not (tmp_path / "m.db").exists()

    client = MilvusClient(uri=parse_server(milvus_server).url)
    before = sorted(client.list_collections())
    assert before == ["llama_car", "llama_car_bm25"]
    from llama_index_car.sparse_stores import MilvusSparse
    from llama_index_car.stores import open_vector_store

    with pytest.raises(ConfigurationError, match="holds no collection nope"):
        open_vector_store(milvus_server, collection="nope", create=False)
    with pytest.raises(ConfigurationError, match="nothing is created"):
        MilvusSparse(milvus_server, "nope_bm25")  # the BM25 rows' backend, from the URI
    assert sorted(client.list_collections()) == before  # nothing created
    assert MilvusSparse(milvus_server, "llama_car_bm25").ids()  # the URI opens the rows
    client.close()


@pytest.mark.parametrize("kind", ["milvus", "qdrant"])
def test_a_server_that_is_down_is_one_line_naming_it_without_the_secret(
    kind: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """One line on stderr (``capfd``: pymilvus logs its traceback to the process's stderr)."""
    pytest.importorskip("pymilvus" if kind == "milvus" else "qdrant_client")
    from llama_index_car.stores import open_vector_store

    monkeypatch.setenv("LLAMA_CAR_MILVUS_TOKEN", SECRET)
    monkeypatch.setenv("LLAMA_CAR_QDRANT_API_KEY", SECRET)
    uri = f"{kind}+http://127.0.0.1:{_dead_port()}"
    with pytest.raises(StoreError) as raised:
        open_vector_store(uri, create=False)
    text = str(raised.value)
    assert text.startswith(f"cannot use the store {uri}: ") and SECRET not in text, text
    assert len(text.splitlines()) == 1
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DEMO_CORPUS_DIR / FILES[0], src / FILES[0])
    capfd.readouterr()
    rc, _, err = _run(capfd, "index", str(src), "--persist", str(tmp_path / "idx"),
                      "--embed", "use", "--store", uri, "--no-progress")
    assert rc == 2 and uri in err and SECRET not in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err


def test_a_qdrant_server_gets_the_key_and_nothing_is_created_on_open(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("qdrant_client")
    from llama_index_car.stores import open_vector_store
    from tests.fakes.qdrant_server import FakeQdrantServer

    server = FakeQdrantServer(api_key=SECRET).start()
    try:
        monkeypatch.setenv("LLAMA_CAR_QDRANT_API_KEY", "not-the-key")
        with pytest.raises(StoreError) as raised:  # the server refuses a wrong key: 401
            open_vector_store(server.uri, create=False)
        assert server.uri in str(raised.value) and "not-the-key" not in str(raised.value)
        monkeypatch.setenv("LLAMA_CAR_QDRANT_API_KEY", SECRET)
        with pytest.raises(ConfigurationError, match="holds no collection llama_car"):
            open_vector_store(server.uri, create=False)
        assert server.engine.get_collections().collections == []  # nothing created
        assert not any(seen.method in ("PUT", "DELETE") for seen in server.requests)
        store: Any = open_vector_store(server.uri, dim=4)  # a build creates on first add
        assert type(store).__name__ == "QdrantVectorStore"
        assert {seen.api_key for seen in server.requests} == {"not-the-key", SECRET}
        assert server.unknown == [] and server.errors == []
    finally:
        server.stop()


def test_the_cli_takes_every_store_scheme() -> None:
    """``--store``'s parser and :func:`open_vector_store` accept the same schemes."""
    from llama_index_car.cli._args import STORE_SCHEMES
    from llama_index_car.stores import _SCHEMES, SERVER_SCHEMES, STORE_KINDS

    assert set(STORE_SCHEMES) == set(STORE_KINDS) | set(_SCHEMES) - {"postgresql+psycopg2"} | set(
        SERVER_SCHEMES)


@pytest.mark.slow
def test_a_server_gone_away_prints_no_traceback(tmp_path: Path) -> None:
    """pymilvus logs a multi-line traceback on the process's stderr when a server it was
    connected to is gone, then raises; opening the store drops that record and reports one
    line. In a child process (pytest's log capture would hide the record here): a server,
    a first open, the server stopped, a second open."""
    pytest.importorskip("milvus_lite")
    import os
    import subprocess
    import sys

    code = f"""
from milvus_lite.adapter.grpc.server import start_server_in_thread
from llama_index_car.stores import open_vector_store
server, db, port = start_server_in_thread({str(tmp_path / "data")!r}, host="127.0.0.1", port=0)
uri = f"milvus+http://127.0.0.1:{{port}}"
open_vector_store(uri, dim=4)
server.stop(grace=0)
db.close()
try:
    open_vector_store(uri, create=False)
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    env = dict(os.environ, LLAMA_CAR_MILVUS_TOKEN=SECRET)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.stdout.startswith("StoreError cannot use the store milvus+http://127.0.0.1:"), (
        done.stdout, done.stderr[-2000:])
    assert SECRET not in done.stdout and "Traceback" not in done.stderr, done.stderr[-2000:]



@pytest.mark.parametrize("kind", ["milvus", "qdrant"])
def test_a_build_checks_its_server_before_reading_or_embedding(kind: str, tmp_path: Path) -> None:
    """A server that cannot be reached is the build's first error: no file is read, nothing is
    embedded and no folder is made (before, it came after the whole corpus was embedded)."""
    pytest.importorskip("pymilvus" if kind == "milvus" else "qdrant_client")
    from llama_index_car.folder import BuildOptions, build_index
    from tests.fakes.embeddings import HashedBigramEmbedding

    class Counting(HashedBigramEmbedding):
        def _vec(self, text: str) -> list[float]:
            calls.append(text)
            return super()._vec(text)

    calls: list[str] = []
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken.hwpx").write_bytes(b"not a zip")  # reading it would record a failure
    shutil.copy(DEMO_CORPUS_DIR / FILES[0], src / FILES[0])
    uri = f"{kind}+http://127.0.0.1:{_dead_port()}"
    with pytest.raises(StoreError, match=re.escape(f"cannot use the store {uri}: ")):
        build_index(src, tmp_path / "idx", BuildOptions(embed_model=Counting(), store=uri,
                                                        use_cache=False))
    assert calls == [] and not (tmp_path / "idx").exists()
