"""``llama_index_car._persist``: generations, manifest binding, locking, crash safety."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llama_index_car._errors import IndexPersistError
from llama_index_car._files import write_json
from llama_index_car._persist import (
    CURRENT_NAME,
    MANIFEST_NAME,
    live_dir,
    load_live,
    read_manifest,
    replace_dir,
    write_manifest,
)

KIND = "TestThing"


def _persist(target: Path, value: int, **kw: float) -> None:
    with replace_dir(target, **kw) as gen:
        write_json(gen / "a.json", {"value": value})
        (gen / "sub").mkdir()
        write_json(gen / "sub" / "b.json", {"value": value})
        write_manifest(gen, kind=KIND, format_version=2)


def _load(root: Path) -> int:
    read_manifest(root, kind=KIND, format_versions=(2,), required=("a.json", "sub/b.json"))
    a = json.loads((root / "a.json").read_text())["value"]
    b = json.loads((root / "sub" / "b.json").read_text())["value"]
    assert a == b
    return int(a)


def _generations(target: Path) -> list[str]:
    return sorted(p.name for p in target.iterdir() if p.name.startswith("gen-"))


def test_round_trip_and_only_two_generations_kept(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    for value in range(4):
        _persist(target, value)
        assert load_live(target, _load) == value
    assert len(_generations(target)) == 2  # current + previous
    pointer = json.loads((target / CURRENT_NAME).read_text())
    assert set(_generations(target)) == {pointer["generation"], pointer["previous"]}


def test_manifest_lists_every_file_with_size_and_hash(tmp_path: Path) -> None:
    import hashlib

    _persist(tmp_path / "idx", 7)
    root = live_dir(tmp_path / "idx")
    files = json.loads((root / MANIFEST_NAME).read_text())["files"]
    assert sorted(files) == ["a.json", "sub/b.json"]
    for name, entry in files.items():
        data = (root / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda r: (r / "a.json").write_text('{"value": 8}'), "a.json is corrupt"),
        (lambda r: (r / "sub" / "b.json").unlink(), "b.json is missing"),
        (lambda r: (r / MANIFEST_NAME).unlink(), "manifest.json is missing"),
        (lambda r: (r / MANIFEST_NAME).write_text("{not json"), "damaged"),
        (lambda r: (r / MANIFEST_NAME).write_text('{"files": null}'), "no valid 'files'"),
        (
            lambda r: _edit_manifest(r, lambda m: m["files"]["a.json"].update(bytes=True)),
            "no valid 'files'",
        ),
        (lambda r: _edit_manifest(r, lambda m: m.update(kind="Other")), "'Other'"),
        (lambda r: _edit_manifest(r, lambda m: m.update(format_version=9)), "format_version 9"),
        (lambda r: _edit_manifest(r, lambda m: m.update(format_version=True)), "format_version"),
        (lambda r: _edit_manifest(r, lambda m: m["files"].pop("a.json")), "does not list"),
        (
            lambda r: _edit_manifest(
                r, lambda m: m["files"].update({"../../x": {"sha256": "0", "bytes": 0}})
            ),
            "outside",
        ),
    ],
)
def test_tampered_parts_raise_typed_errors_naming_the_file(
    tmp_path: Path, tamper: object, message: str
) -> None:
    _persist(tmp_path / "idx", 1)
    root = live_dir(tmp_path / "idx")
    tamper(root)  # type: ignore[operator]
    with pytest.raises(IndexPersistError, match=message):
        load_live(tmp_path / "idx", _load)


def _edit_manifest(root: Path, edit: object) -> None:
    m = json.loads((root / MANIFEST_NAME).read_text())
    edit(m)  # type: ignore[operator]
    (root / MANIFEST_NAME).write_text(json.dumps(m))


@pytest.mark.parametrize(
    "pointer",
    ["{", '{"generation": "../../etc"}', '{"generation": 3}', "[]", '{"generation": "gen-x"}'],
)
def test_damaged_pointer_is_a_typed_error(tmp_path: Path, pointer: str) -> None:
    _persist(tmp_path / "idx", 1)
    (tmp_path / "idx" / CURRENT_NAME).write_text(pointer)
    with pytest.raises(IndexPersistError, match=CURRENT_NAME):
        live_dir(tmp_path / "idx")
    _persist(tmp_path / "idx", 2)  # a writer repairs it
    assert load_live(tmp_path / "idx", _load) == 2


def test_pointer_to_missing_generation(tmp_path: Path) -> None:
    _persist(tmp_path / "idx", 1)
    pointer = json.loads((tmp_path / "idx" / CURRENT_NAME).read_text())
    import shutil

    shutil.rmtree(tmp_path / "idx" / pointer["generation"])
    with pytest.raises(IndexPersistError, match="missing"):
        live_dir(tmp_path / "idx")


def test_failed_write_leaves_the_old_index(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    _persist(target, 1)
    before = _generations(target)
    with pytest.raises(RuntimeError), replace_dir(target) as gen:
        write_json(gen / "a.json", {"value": 2})
        raise RuntimeError("disk full")
    assert _generations(target) == before
    assert load_live(target, _load) == 1


def test_refuses_to_overwrite_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.txt").write_text("precious")
    with pytest.raises(IndexPersistError, match="refusing"), replace_dir(tmp_path / "mine"):
        pass
    assert (tmp_path / "mine" / "thesis.txt").read_text() == "precious"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(IndexPersistError, match="is a file"), replace_dir(tmp_path / "afile"):
        pass


def test_a_flat_folder_is_read_in_place_but_never_overwritten(tmp_path: Path) -> None:
    """A folder with a manifest and no ``CURRENT`` (how a generation's sub-folders such as
    ``bm25/`` are laid out) reads in place; as a write target it is not ours: refused, kept."""
    target = tmp_path / "idx"
    target.mkdir()
    write_json(target / "a.json", {"value": 5})
    (target / "sub").mkdir()
    write_json(target / "sub" / "b.json", {"value": 5})
    write_manifest(target, kind=KIND, format_version=2)
    assert load_live(target, _load) == 5  # no CURRENT: read in place
    before = sorted(p.name for p in target.iterdir())
    with pytest.raises(IndexPersistError, match="not a llama-index-car index"):
        _persist(target, 6)
    assert sorted(p.name for p in target.iterdir()) == before


def test_concurrent_writers_are_serialised(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(15):
                _persist(target, offset + i)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k * 100,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert load_live(target, _load) in {14, 114, 214, 314}
    assert len(_generations(target)) == 2


def test_lock_timeout_is_a_typed_error(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with replace_dir(target) as gen:
            write_json(gen / "a.json", {"value": 1})
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(10)
    try:
        with pytest.raises(IndexPersistError, match="another process"):
            _persist(target, 2, lock_timeout=0.2)
    finally:
        release.set()
        holder.join()


def test_reader_retries_when_writers_swap_under_it(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    _persist(target, 1)
    calls: list[Path] = []

    def loader(root: Path) -> int:
        calls.append(root)
        if len(calls) == 1:  # two writers finish while this reader is loading
            _persist(target, 2)
            _persist(target, 3)
        return _load(root)

    assert load_live(target, loader) == 3
    assert len(calls) == 2


_WRITER = """
import json, sys
from pathlib import Path
from llama_index_car._persist import replace_dir, write_manifest
from llama_index_car._files import write_json
target = Path(sys.argv[1])
i = 1000
while True:
    i += 1
    with replace_dir(target) as gen:
        write_json(gen / "a.json", {"value": i})
        (gen / "sub").mkdir()
        write_json(gen / "sub" / "b.json", {"value": i, "pad": "x" * 200000})
        write_manifest(gen, kind="TestThing", format_version=2)
"""


@pytest.mark.slow
def test_sigkill_at_random_instants_always_leaves_a_complete_index(tmp_path: Path) -> None:
    target = tmp_path / "idx"
    _persist(target, 1)
    rng = random.Random(13)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    seen: set[int] = set()
    for _ in range(25):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], env=env)
        time.sleep(0.4 + rng.random() * 0.6)  # import time + a few generations
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        seen.add(load_live(target, _load))  # old or new, complete, hash-consistent
    assert len(seen) > 5  # the writer did make progress between kills
    _persist(target, 2)
    assert load_live(target, _load) == 2
    assert len(_generations(target)) == 2  # the killed writers' leftovers are gone
    assert not [p for p in target.iterdir() if p.name.startswith(".tmp-")]
