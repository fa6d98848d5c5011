"""``llama-car index`` → ``query`` → ``index --update`` → ``query`` for every store kind
(issue 37, item 10).

``--store milvus`` built an index folder that no query could open: milvus-lite 3.2 keeps
``milvus.db`` as a folder and the check wanted a file ("no store file at …/milvus.db"), and an
explicit ``--store milvus://…`` failed the same way. Each case here is the user's whole path
through the CLI with a real store — inside the index folder (a bare kind) and outside it (a
URI given again to query and update; or a Milvus or Qdrant server on 127.0.0.1, issue 39) —
and the oracle is a fresh local build of the same files: the same nodes in the same dense
order, the same BM25 hits (the BM25 rows in the server too). The default tier runs the local
folder, Milvus Lite and both servers (Qdrant local in ``test_cli_update.py``); the rest are
slow.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR

FIRST = ("dg2012_tunnel.hwpx", "dg2015_rest.hwpx", "dg2016_slope.hwpx")
QUESTIONS = ("측구 깊이 기준", "터널 조명", "휴게소 주차")
MODULES = {
    "milvus": ("pymilvus", "milvus_lite", "llama_index.vector_stores.milvus"),
    "qdrant": ("qdrant_client", "llama_index.vector_stores.qdrant"),
    "chroma": ("chromadb", "llama_index.vector_stores.chroma"),
    "pgserver": ("pgserver", "llama_index.vector_stores.postgres"),
}
slow = pytest.mark.slow


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _hits(capsys: pytest.CaptureFixture[str], folder: Path, kind: str,
          *extra: str) -> dict[str, list[str]]:
    out = {}
    for q in QUESTIONS:
        rc, stdout, stderr = _run(capsys, "query", str(folder), q, "--retriever", kind,
                                  "--top-k", "20", "--json", *extra)
        assert rc == 0, stderr
        out[q] = [h["node_id"] for h in json.loads(stdout)["hits"]]
    return out


def _fresh(capsys: pytest.CaptureFixture[str], src: Path, out: Path) -> dict[str, Any]:
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(out), "--embed", "use",
                      "--no-progress")
    assert rc == 0, err
    return {kind: _hits(capsys, out, kind) for kind in ("dense", "bm25")}


@pytest.mark.parametrize(("kind", "where"), [
    ("local", ""), ("milvus", "inside"), ("milvus", "outside"),
    pytest.param("qdrant", "inside", marks=slow), pytest.param("qdrant", "outside", marks=slow),
    pytest.param("chroma", "inside", marks=slow), pytest.param("chroma", "outside", marks=slow),
    pytest.param("pgserver", "inside", marks=slow),
    pytest.param("pgserver", "outside", marks=slow),
    ("milvus", "server"), ("qdrant", "server"),  # on 127.0.0.1 (tests/fakes), a secret set
])
def test_index_query_update_query(
    kind: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    for module in MODULES.get(kind, ()):
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(
                module) is None:
            pytest.skip(f"{module} not installed ([stores] extra)")
    # pgserver: in the conftest's folder, whose servers it stops however the session ends
    root = request.getfixturevalue("pg_data_dir") if kind == "pgserver" else tmp_path
    src = tmp_path / "src"
    src.mkdir()
    for name in FIRST:
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    idx = root / "idx"
    uri = {"milvus": f"milvus://{root / 'm.db'}", "qdrant": f"qdrant://{root / 'q'}",
           "chroma": f"chroma://{root / 'c'}", "pgserver": f"pgserver://{root / 'pg'}"}.get(kind)
    secret = "s3cret-token-of-the-user"
    if where == "server":  # the secret comes from the environment, never from the folder
        server = request.getfixturevalue(f"{kind}_server")
        uri = server if isinstance(server, str) else server.uri
        name = {"milvus": "LLAMA_CAR_MILVUS_TOKEN", "qdrant": "LLAMA_CAR_QDRANT_API_KEY"}[kind]
        request.getfixturevalue("monkeypatch").setenv(name, secret)
    build = [] if kind == "local" else ["--store", kind if where == "inside" else str(uri)]
    again = build if where in ("outside", "server") else []

    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                        *build, "--no-progress")
    assert rc == 0 and "3 files" in out, err
    assert bool(list(idx.rglob("flat/vectors.npy"))) is (kind == "local")
    before = {k: _hits(capsys, idx, k, *again) for k in ("dense", "bm25")}
    assert all(before["dense"].values()) and all(before["bm25"].values())

    shutil.copy(DEMO_CORPUS_DIR / "dg2019_drainage.hwpx", src / "dg2016_slope.hwpx")
    shutil.copy(DEMO_CORPUS_DIR / "dg2018_bridge.hwpx", src / "dg2018_bridge.hwpx")
    (src / "dg2015_rest.hwpx").unlink()
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update", *again,
                        "--no-progress")
    assert rc == 0 and "2 changed or new, 1 removed, 1 unchanged" in out, err
    after = {k: _hits(capsys, idx, k, *again) for k in ("dense", "bm25")}
    assert after == _fresh(capsys, src, tmp_path / "fresh")  # same nodes, same order
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update", *again,
                        "--no-progress")
    assert rc == 0 and "0 changed or new, 0 removed, 3 unchanged" in out, err
    if where == "server":
        assert not any(secret.encode() in f.read_bytes() or str(uri).encode() in f.read_bytes()
                       for f in idx.rglob("*") if f.is_file())  # neither secret nor host
        if kind == "qdrant":  # the key did reach the server the user named
            assert {seen.api_key for seen in server.requests} == {secret}
