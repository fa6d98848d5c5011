"""The embedding cache is untrusted input, as ssh treats ``~/.ssh`` (issue 37, items 3 and 4).

Each test plays one attack on a cache folder written by the cache itself and checks that what
the attacked file held is never used: a :class:`CacheWarning` names the file, the texts are
embedded again (the model is called for them), the vectors returned are the model's, and the
job goes on. The index edits work on either ``index.json`` layout (shards as names, as before
this fix, or as records), so each attack is the same one the code before the fix fell for.
A full cache disk is a real tmpfs mount (root, as on CI).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_car._errors import CacheWarning
from llama_index_car.embeddings.cache import EmbeddingCache

TEXTS = ["배수시설 설치기준", "콘크리트 양생", "측구 간격 50 m", "방수층 함수율"]
#: watchdog for an operation that must not block (a FIFO): generous, it only ends a hang
HANG_GUARD_S = 60.0


class VecModel(BaseEmbedding):
    """Deterministic ``dim``-d vectors; counts the strings it embeds."""

    model_name: str = "vec"
    dim: int = 4
    calls: int = 0

    def _vec(self, s: str) -> list[float]:
        digest = hashlib.sha256(s.encode()).digest() * (self.dim // 32 + 1)
        return [float(b) / 255.0 + 0.5 for b in digest[: self.dim]]

    def _get_query_embedding(self, query: str) -> list[float]:
        self.calls += 1
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self.calls += 1
        return self._vec(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def _truth(texts: list[str]) -> np.ndarray:
    return np.asarray([VecModel()._vec(t) for t in texts], np.float32)


def _cached(root: Path) -> Path:
    """A cache under ``root`` holding :data:`TEXTS` (one shard); its folder."""
    cache = EmbeddingCache(root, VecModel())
    cache.embed(TEXTS)
    return cache.path


def _index(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "index.json").read_text("utf-8"))


def _write_index(folder: Path, index: dict[str, Any]) -> None:
    (folder / "index.json").write_text(json.dumps(index), "utf-8")


def _shard_name(index: dict[str, Any], i: int = 0) -> str:
    shard = index["shards"][i]
    return str(shard if isinstance(shard, str) else shard["name"])


def _point_shard(index: dict[str, Any], name: str, data: bytes, i: int = 0) -> None:
    """Make shard ``i`` of ``index`` name ``name`` holding ``data``, recorded consistently (an
    attacker who rewrites ``index.json`` too)."""
    if isinstance(index["shards"][i], str):
        index["shards"][i] = name
    else:
        index["shards"][i].update(
            name=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
        )


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _reopen(root: Path, texts: list[str] = TEXTS) -> tuple[np.ndarray, VecModel, list[str]]:
    """A new cache over ``root`` embedding ``texts``: (vectors, its model, CacheWarnings)."""
    model = VecModel()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = EmbeddingCache(root, model).embed(texts)
    return out, model, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def _within(fn: Callable[[], Any], unblock: Callable[[], None]) -> Any:
    """``fn()`` in a daemon thread; if it blocks past :data:`HANG_GUARD_S`, ``unblock()`` is
    called (e.g. open the FIFO's other end) and the test fails."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # reported to the test below
            result["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    if worker.is_alive():
        unblock()
        worker.join(HANG_GUARD_S)
        pytest.fail(f"blocked for more than {HANG_GUARD_S:g} s")
    if "error" in result:
        raise result["error"]
    return result["value"]


def _open_writer(fifo: Path) -> None:
    """Let a reader blocked on ``fifo`` go (it then reads end-of-file)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


# ----------------------------------------------------------------------------- names
def test_a_shard_named_outside_the_cache_folder_is_never_read(tmp_path: Path) -> None:
    """Before: ``"../../x.npy"`` in index.json was loaded from outside the cache folder."""
    folder = _cached(tmp_path / "cache")
    decoy = -_truth(TEXTS)
    data = _npy(decoy)
    (tmp_path / "x.npy").write_bytes(data)
    index = _index(folder)
    _point_shard(index, "../../x.npy", data)
    _write_index(folder, index)
    out, model, warned = _reopen(tmp_path / "cache")
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and "index.json" in warned[0] and "x.npy" in warned[0], warned


# ----------------------------------------------------------------------------- content
def test_an_overwritten_shard_is_refused(tmp_path: Path) -> None:
    """Before: a shard overwritten with other vectors of the same shape was used silently."""
    folder = _cached(tmp_path)
    shard = folder / _shard_name(_index(folder))
    shard.write_bytes(_npy(_truth(TEXTS)[::-1].copy()))
    out, model, warned = _reopen(tmp_path)
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and str(shard) in warned[0] and "sha256" in warned[0], warned
    # the refused shard left the index: the next run is all hits, and warns no more
    again, model, warned = _reopen(tmp_path)
    np.testing.assert_array_equal(again, out)
    assert model.calls == 0 and warned == []


def test_nan_vectors_are_refused_even_with_a_consistent_index(tmp_path: Path) -> None:
    """Before: NaN vectors were served (``index`` succeeded, then every query failed)."""
    folder = _cached(tmp_path)
    index = _index(folder)
    name = _shard_name(index)
    poisoned = _truth(TEXTS)
    poisoned[1, 2] = np.nan
    data = _npy(poisoned)
    (folder / name).write_bytes(data)
    _point_shard(index, name, data)
    _write_index(folder, index)
    out, model, warned = _reopen(tmp_path)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert len(warned) == 1 and "NaN" in warned[0] and name in warned[0], warned


def test_an_out_of_range_row_is_refused(tmp_path: Path) -> None:
    """Before: an entry's row past its shard's end was an ``IndexError`` traceback."""
    folder = _cached(tmp_path)
    index = _index(folder)
    key = next(iter(index["entries"]))
    index["entries"][key] = [0, 10**6]
    _write_index(folder, index)
    out, model, warned = _reopen(tmp_path)
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and "index.json" in warned[0] and "row" in warned[0], warned


@pytest.mark.parametrize("dim", [3, 5, 0, "4", 10**30])
def test_a_wrong_dimension_is_refused(tmp_path: Path, dim: Any) -> None:
    """Before: a ``dim`` that is not the shards' was a ``ValueError`` traceback."""
    folder = _cached(tmp_path)
    index = _index(folder)
    index["dim"] = dim
    _write_index(folder, index)
    out, model, warned = _reopen(tmp_path)
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and "index.json" in warned[0], warned


def test_a_shard_of_another_shape_or_dtype_is_refused(tmp_path: Path) -> None:
    folder = _cached(tmp_path)
    index = _index(folder)
    name = _shard_name(index)
    for bad in (_truth(TEXTS)[:, :3].copy(), _truth(TEXTS).astype(np.float64),
                _truth(TEXTS)[:2].copy()):
        data = _npy(bad)
        (folder / name).write_bytes(data)
        _point_shard(index, name, data)
        _write_index(folder, index)
        out, _, warned = _reopen(tmp_path)
        np.testing.assert_array_equal(out, _truth(TEXTS))
        assert len(warned) == 1, warned
        _cached(tmp_path)  # a clean cache again for the next case
        index = _index(folder)
        name = _shard_name(index)


# ----------------------------------------------------------------------------- file kinds
def test_a_symlinked_shard_is_refused(tmp_path: Path) -> None:
    """Before: a shard replaced by a symlink (here to a copy of itself) was followed."""
    folder = _cached(tmp_path / "cache")
    shard = folder / _shard_name(_index(folder))
    elsewhere = tmp_path / "elsewhere.npy"
    shutil.copyfile(shard, elsewhere)
    shard.unlink()
    shard.symlink_to(elsewhere)
    out, model, warned = _reopen(tmp_path / "cache")
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and "symbolic link" in warned[0] and str(shard) in warned[0], warned


def test_a_fifo_shard_does_not_block(tmp_path: Path) -> None:
    """Before: a FIFO in place of a shard blocked the embedding forever."""
    folder = _cached(tmp_path)
    shard = folder / _shard_name(_index(folder))
    shard.unlink()
    os.mkfifo(shard)
    out, model, warned = _within(lambda: _reopen(tmp_path), lambda: _open_writer(shard))
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert len(warned) == 1 and "not a regular file" in warned[0], warned


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_an_index_that_is_a_fifo_or_a_device_is_refused_with_one_line(
    tmp_path: Path, kind: str
) -> None:
    """Before: silently ignored (no word to the user); a read would block or never end."""
    folder = _cached(tmp_path)
    index = folder / "index.json"
    index.unlink()
    if kind == "fifo":
        os.mkfifo(index)
    else:
        index.symlink_to("/dev/zero")
    out, model, warned = _within(lambda: _reopen(tmp_path), lambda: _open_writer(index))
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and str(index) in warned[0], warned
    # the cache replaced the odd file with its own index: the next run is all hits
    _, model, warned = _reopen(tmp_path)
    assert model.calls == 0 and warned == []


# ----------------------------------------------------------------------------- ownership
@pytest.mark.parametrize("what", ["index", "shard"])
def test_files_writable_by_others_are_refused(tmp_path: Path, what: str) -> None:
    """Before: a world-writable index or shard (anyone could have changed it) was used."""
    folder = _cached(tmp_path)
    path = folder / ("index.json" if what == "index" else _shard_name(_index(folder)))
    path.chmod(0o666)
    out, model, warned = _reopen(tmp_path)
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and str(path) in warned[0] and "group or others" in warned[0], warned


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root (the CI machine is root)")
@pytest.mark.parametrize("what", ["index", "shard"])
def test_files_owned_by_another_user_are_refused(tmp_path: Path, what: str) -> None:
    folder = _cached(tmp_path)
    path = folder / ("index.json" if what == "index" else _shard_name(_index(folder)))
    os.chown(path, 65534, -1)
    out, model, warned = _reopen(tmp_path)
    np.testing.assert_array_equal(out, _truth(TEXTS))
    assert model.calls == len(TEXTS)
    assert len(warned) == 1 and "owned by uid 65534" in warned[0], warned


def test_files_the_cache_writes_are_0644_whatever_the_umask(tmp_path: Path) -> None:
    """With a group-writable umask (002, common for users with a private group), files
    created with Python's default mode would be refused by the check above on the next run."""
    old = os.umask(0o002)
    try:
        folder = _cached(tmp_path)
    finally:
        os.umask(old)
    for path in folder.iterdir():
        if path.name != ".lock":
            assert path.stat().st_mode & 0o777 == 0o644, path
    _, model, warned = _reopen(tmp_path)
    assert model.calls == 0 and warned == []


def test_the_lock_file_is_never_followed(tmp_path: Path) -> None:
    """A ``.lock`` symlink would make the cache create or open a file elsewhere: the cache
    stops writing instead (one warning) and the run goes on."""
    folder = _cached(tmp_path / "cache")
    (folder / ".lock").unlink()
    target = tmp_path / "created-elsewhere"
    (folder / ".lock").symlink_to(target)
    model = VecModel()
    with pytest.warns(CacheWarning, match="cannot write"):
        out = EmbeddingCache(tmp_path / "cache", model).embed(["새 문장"])
    np.testing.assert_array_equal(out, _truth(["새 문장"]))
    assert not target.exists()


def test_a_model_returning_nan_is_an_error_not_a_cache_entry(tmp_path: Path) -> None:
    from llama_index_car._errors import IndexPersistError

    class NanModel(VecModel):
        def _get_text_embedding(self, text: str) -> list[float]:
            return [float("nan")] * self.dim

    with pytest.raises(IndexPersistError, match="NaN"):
        EmbeddingCache(tmp_path, NanModel()).embed(["x"])
    assert len(EmbeddingCache(tmp_path, NanModel())) == 0


# ----------------------------------------------------------------------------- disk full
def test_a_full_cache_disk_is_one_warning_naming_the_file_and_the_job_goes_on(
    tmpfs_mount: Callable[[str], Path],
) -> None:
    """Before: ``OSError: 12288 requested and 11232 written`` ended the job."""
    root = tmpfs_mount("size=16k")
    model = VecModel(dim=512)
    texts = [f"문장 {i}" for i in range(64)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = EmbeddingCache(root, model, batch_size=8)
        out = cache.embed(texts)
        again = cache.embed(texts)
    warned = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    np.testing.assert_array_equal(out, _truth_dim(texts, 512))
    np.testing.assert_array_equal(again, out)
    assert model.calls == len(texts)  # nothing embedded twice: the vectors stayed in memory
    assert len(warned) == 1, warned
    assert "no space left on device" in warned[0] and str(cache.path) in warned[0], warned
    assert not list(cache.path.glob("*.tmp"))


def _truth_dim(texts: list[str], dim: int) -> np.ndarray:
    return np.asarray([VecModel(dim=dim)._vec(t) for t in texts], np.float32)


@pytest.mark.slow
def test_index_on_a_full_cache_disk_warns_once_and_builds(
    tmpfs_mount: Callable[[str], Path], fake: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``llama-car index --cache-dir FULL`` ended with ``error: 12288 requested and
    11232 written``; now one warning names the cache file and the cause, and the index is
    built (OpenAI embeddings from the local fake server, so the test embeds nothing real)."""
    from llama_index_car.cli import main
    from llama_index_car.demo.loader import DEMO_CORPUS_DIR

    src = tmp_path / "src"
    src.mkdir()
    for path in sorted(DEMO_CORPUS_DIR.glob("*.hwpx"))[:2]:
        shutil.copy(path, src / path.name)
    cache = tmpfs_mount("size=16k")
    rc = main(["index", str(src), "--persist", str(tmp_path / "idx"), "--embed", "openai",
               "--cache-dir", str(cache), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    full = [line for line in err.splitlines() if "no space left on device" in line]
    assert len(full) == 1 and "warning" in full[0] and str(cache) in full[0], err
    assert "error" not in err, err
    assert (tmp_path / "idx" / "CURRENT").is_file()


# ----------------------------------------------------------------------------- pgserver
def test_a_failing_pgserver_initdb_is_one_typed_line(capfd: pytest.CaptureFixture[str]) -> None:
    """Before: a folder initdb refuses (here: not empty) was a ``CalledProcessError``
    traceback after pgserver's multi-line log; now a :class:`StoreError` naming the folder
    and initdb's own error line, and nothing else on stderr. Real pgserver, real initdb."""
    pytest.importorskip("pgserver")
    pytest.importorskip("llama_index.vector_stores.postgres")
    import tempfile

    from llama_index_car._errors import StoreError
    from llama_index_car.stores import open_vector_store

    # mkdtemp, not tmp_path: as root, pgserver opens the folder's parents to its own user
    root = Path(tempfile.mkdtemp())
    folder = root / "pg"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a database", "utf-8")
    try:
        with pytest.raises(StoreError) as info:
            open_vector_store(f"pgserver://{folder}", dim=3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    message = str(info.value)
    assert "\n" not in message and str(folder) in message, message
    assert "initdb: error:" in message and "exists but is not empty" in message, message
    assert "initdb" not in capfd.readouterr().err
