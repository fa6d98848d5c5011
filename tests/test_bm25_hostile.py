"""An index folder is untrusted input (issue 20, the BM25 / folder part).

Hostile folders are built in code with real files (FIFOs, symlinks to devices, crafted
``.npy`` headers, in-place overwrites of memory-mapped arrays). What could kill or hang the
interpreter runs in a child process: a signal or a hang then fails the test (the child's
timeout only turns a hang into a failure; nothing here asserts a duration).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._files import fsync_write, read_json, write_error
from llama_index_car._persist import CURRENT_NAME, live_dir, write_manifest
from llama_index_car.bm25 import BM25Okapi, _term_table, _write_npy
from tests.fakes.bm25_folders import (
    corpus,
    npy_bytes,
    npy_header,
    overwrite_data,
    rewrite_manifest,
    run_fuzz_subprocess,
    saved_index,
)

ROOT = Path(__file__).resolve().parents[1]
#: turns a hang into a failure; not a performance bound
HANG_GUARD_S = 600


def _child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (address space capped at 4 GiB)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    prelude = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        cwd=ROOT,
        env=env,
    )


# ----------------------------------------------------------------------------- item 4
INPLACE = """
import sys
from pathlib import Path
import numpy as np
from llama_index_car._errors import IndexPersistError
from llama_index_car.bm25 import BM25Okapi
from tests.fakes.bm25_folders import overwrite_data, saved_index

root = Path(sys.argv[1])
fill = bytes.fromhex(sys.argv[2])
name = sys.argv[3]
gen = saved_index(root, n_docs=3000, seed=3)
bm = BM25Okapi.load(root, verify="full", backend="numba")
queries = [["w1", "w7", "w30"], ["w0", "w2"], ["w45", "w5", "w5"]]
before = [bm.top_k(q, 5)[0].tolist() for q in queries]
path = gen / name
size = path.stat().st_size
ino = path.stat().st_ino
overwrite_data(path, fill * size)
assert path.stat().st_ino == ino  # the same inode: the mapping sees the new bytes
outcomes = []
for q in queries:
    for call in (lambda: bm.top_k(q, 5), lambda: bm.top_k(q, 3000), lambda: bm.get_scores(q)):
        try:
            call()
            outcomes.append("ok")
        except IndexPersistError as exc:
            outcomes.append("typed")
print(" ".join(outcomes))
"""


@pytest.mark.parametrize(
    ("fill", "name"),
    [("7f", "indices.npy"), ("ff", "indices.npy"), ("a5c3", "indices.npy"), ("00", "tf.npy")],
)
def test_inplace_overwrite_after_full_verification_numba_no_signal(
    tmp_path: Path, fill: str, name: str
) -> None:
    """verify="full", one query (every column prepared), then indices.npy / tf.npy is
    overwritten in place: the next queries end typed or with results, never a signal
    (before: SIGSEGV, ``top_k`` wrote out of bounds)."""
    pytest.importorskip("numba")
    proc = _child(INPLACE, str(tmp_path / "idx"), fill, name)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    outcomes = proc.stdout.split()
    assert len(outcomes) == 9
    if name == "indices.npy" and fill in ("7f", "ff"):
        # every id is out of [0, N): each query reads one and says so
        assert set(outcomes) == {"typed"}


def test_overwritten_term_table_is_typed(tmp_path: Path) -> None:
    """term_order.npy overwritten after load: the lookup names the inconsistency."""
    gen = saved_index(tmp_path / "idx", n_docs=50)
    bm = BM25Okapi.load(tmp_path / "idx", verify="full")
    assert bm.top_k(["w1"], 3)[0].size == 3
    overwrite_data(gen / "term_order.npy", b"\x7f" * (gen / "term_order.npy").stat().st_size)
    with pytest.raises(IndexPersistError, match="term table"):
        for i in range(60):
            bm.top_k([f"w{i}", "zz-new"], 3)


# ----------------------------------------------------------------------------- item 5
def test_fifo_current_does_not_hang_load_or_writer(tmp_path: Path) -> None:
    """CURRENT replaced by a FIFO: load is a typed error naming it, a writer replaces it."""
    root = tmp_path / "idx"
    saved_index(root, n_docs=30)
    (root / CURRENT_NAME).unlink()
    os.mkfifo(root / CURRENT_NAME)
    proc = _child(
        """
        import sys
        from llama_index_car._errors import IndexPersistError
        from llama_index_car.bm25 import BM25Okapi
        from tests.fakes.bm25_folders import corpus
        try:
            BM25Okapi.load(sys.argv[1])
        except IndexPersistError as exc:
            print("typed:", exc)
        BM25Okapi(corpus(30, 1)).save(sys.argv[1])   # a writer, holding the lock
        print("saved", len(BM25Okapi.load(sys.argv[1])))
        """,
        str(root),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "typed:" in proc.stdout and "not a regular file" in proc.stdout
    assert str(root / CURRENT_NAME) in proc.stdout
    assert "saved 30" in proc.stdout


def test_current_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    """CURRENT -> /dev/zero: refused before reading (before: read until MemoryError)."""
    root = tmp_path / "idx"
    saved_index(root, n_docs=30)
    (root / CURRENT_NAME).unlink()
    (root / CURRENT_NAME).symlink_to("/dev/zero")
    proc = _child(
        """
        import sys
        from llama_index_car._errors import IndexPersistError
        from llama_index_car.bm25 import BM25Okapi
        try:
            BM25Okapi.load(sys.argv[1])
        except IndexPersistError as exc:
            print("typed:", exc)
        """,
        str(root),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "typed:" in proc.stdout and "not a regular file" in proc.stdout


@pytest.mark.parametrize("what", ["manifest.json", "indices.npy"])
def test_fifo_or_device_inside_a_generation_is_typed(tmp_path: Path, what: str) -> None:
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=30)
    (gen / what).unlink()
    os.mkfifo(gen / what)
    proc = _child(
        """
        import sys
        from llama_index_car._errors import IndexPersistError
        from llama_index_car.bm25 import BM25Okapi
        for verify in ("full", "lazy"):
            try:
                BM25Okapi.load(sys.argv[1], verify=verify)
            except IndexPersistError as exc:
                print("typed")
        """,
        str(root),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["typed", "typed"]


def test_oversized_current_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    saved_index(root, n_docs=30)
    pointer = json.loads((root / CURRENT_NAME).read_text())
    (root / CURRENT_NAME).write_text(json.dumps(pointer) + " " * 100_000)
    with pytest.raises(IndexPersistError, match="bytes, more than"):
        BM25Okapi.load(root)


# ----------------------------------------------------------------------------- item 6
def test_auto_verify_ignores_files_the_manifest_merely_lists(tmp_path: Path) -> None:
    """A 17 MiB padding entry in the manifest no longer pushes a small index to "lazy": an
    altered tf.npy is caught by its sha256 (before: it loaded with changed scores)."""
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=200)
    with open(gen / "padding.bin", "wb") as fh:
        fh.truncate(17 << 20)
    rewrite_manifest(gen)  # binds padding.bin (and the unaltered arrays)
    manifest = json.loads((gen / "manifest.json").read_text())
    assert "padding.bin" in manifest["files"]
    tf = np.load(gen / "tf.npy")
    overwrite_data(gen / "tf.npy", bytes([int(tf[0]) % 200 + 1]))  # same size, new count
    assert np.load(gen / "tf.npy")[0] != tf[0]
    with pytest.raises(IndexPersistError, match=r"tf\.npy is corrupt"):
        BM25Okapi.load(root, verify="auto")
    # lazy is what it says: sizes and structure, not content
    assert len(BM25Okapi.load(root, verify="lazy")) == 200


# ----------------------------------------------------------------------------- item 10
def _replace_npy(gen: Path, name: str, raw: bytes) -> None:
    (gen / f"{name}.npy").write_bytes(raw)
    rewrite_manifest(gen)


def test_npy_header_that_does_not_tokenize_is_typed(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=30)
    _replace_npy(gen, "doc_len", npy_bytes("{'descr': '<i8', '''\n", bytes(240)))
    for verify in ("full", "lazy"):
        with pytest.raises(IndexPersistError, match=r"doc_len\.npy.*damaged header"):
            BM25Okapi.load(root, verify=verify)  # type: ignore[arg-type]


@pytest.mark.parametrize("mmap", [False, True])
def test_npy_in_fortran_order_is_typed(tmp_path: Path, mmap: bool) -> None:
    """The BM25 arrays are read by the one checked reader (``_npy.open_npy``), so a header
    that is not C order is refused as for every other array of a folder (the BM25 loader
    let it through before)."""
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=30)
    raw = (gen / "doc_len.npy").read_bytes()
    text = raw[10:raw.index(b"}") + 1].decode("latin1").replace("False", "True")
    _replace_npy(gen, "doc_len", npy_bytes(text, raw[128:]))
    with pytest.raises(IndexPersistError, match=r"doc_len\.npy: .*Fortran order; save the"):
        BM25Okapi.load(root, mmap=mmap, verify="lazy")


@pytest.mark.parametrize("mmap", [False, True])
def test_npy_header_declaring_2_pow_40_entries_is_typed(tmp_path: Path, mmap: bool) -> None:
    """The declared size is checked against the file before allocating (before: MemoryError
    with mmap=False)."""
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=30)
    payload = (gen / "doc_len.npy").read_bytes()[128:]
    _replace_npy(gen, "doc_len", npy_header("<i8", (1 << 40,)) + payload)
    with pytest.raises(IndexPersistError, match=r"doc_len\.npy: the header declares 1099511627776"):
        BM25Okapi.load(root, mmap=mmap, verify="lazy")


@pytest.mark.parametrize("which", ["manifest", "current"])
def test_json_nested_100000_deep_is_typed(tmp_path: Path, which: str) -> None:
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=30)
    target = gen / "manifest.json" if which == "manifest" else root / CURRENT_NAME
    target.write_text("[" * 100_000 + "]" * 100_000)
    # CURRENT is refused by its size bound first (4 KiB), a manifest by its nesting
    with pytest.raises(IndexPersistError, match="nests JSON deeper|bytes, more than"):
        BM25Okapi.load(root)
    target.write_text("[" * 2000 + "]" * 2000)  # within any size bound: the nesting
    with pytest.raises(IndexPersistError, match="nests JSON deeper"):
        BM25Okapi.load(root)
    target.write_text('{"a": ' * 40 + "1" + "}" * 40)  # parses, but deeper than any format
    with pytest.raises(IndexPersistError, match="nests JSON deeper"):
        read_json(target)


def _crafted(root: Path, arrays: dict[str, np.ndarray], meta: dict[str, object]) -> None:
    root.mkdir()
    for name, arr in arrays.items():
        np.save(root / f"{name}.npy", arr)
    write_manifest(root, kind="BM25Okapi", format_version=2, meta=meta)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_zero_count_for_empty_documents_is_typed_lazy(tmp_path: Path, backend: str) -> None:
    """tf = 0 where every document is empty (norm 0): 0/0 (before, lazy + numba:
    ZeroDivisionError)."""
    if backend == "numba":
        pytest.importorskip("numba")
    table = _term_table(["a", "b"])
    arrays: dict[str, np.ndarray] = {
        "indptr": np.array([0, 1, 2], np.int64),
        "indices": np.array([0, 1], np.int32),
        "tf": np.array([0, 0], np.uint8),
        "doc_len": np.array([0, 0], np.int64),
        **table,
    }
    meta = {"k1": 1.5, "b": 0.75, "epsilon": 0.25, "corpus_size": 2, "vocab_size": 2, "nnz": 2,
            "tf_dtype": "uint8"}
    _crafted(tmp_path / "idx", arrays, meta)
    bm = BM25Okapi.load(tmp_path / "idx", verify="lazy", backend=backend)  # type: ignore[arg-type]
    with pytest.raises(IndexPersistError, match="zero counts"):
        bm.top_k(["a"], 1)
    with pytest.raises(IndexPersistError, match="zero counts"):
        bm.get_scores(["b"])
    with pytest.raises(IndexPersistError, match="zero term counts"):
        BM25Okapi.load(tmp_path / "idx", verify="full", backend=backend)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("k1", 1e308, r"\[0, 1000\]"),
        ("k1", float("inf"), r"\[0, 1000\]"),
        ("k1", -0.5, r"\[0, 1000\]"),
        ("b", float("nan"), r"\[0, 1\]"),
        ("epsilon", 1e300, r"\[-1000, 1000\]"),
        ("epsilon", float("-inf"), r"\[-1000, 1000\]"),
    ],
)
def test_parameters_must_be_finite_and_in_range(
    tmp_path: Path, key: str, value: float, allowed: str
) -> None:
    """k1=1e308 made every score inf; now a ConfigurationError naming the allowed values,
    and a folder recording it an IndexPersistError."""
    with pytest.raises(ConfigurationError, match=allowed):
        BM25Okapi(corpus(10, 0), **{key: value})  # type: ignore[arg-type]
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=10)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["meta"][key] = value
    (gen / "manifest.json").write_text(json.dumps(manifest))  # json writes Infinity / NaN
    with pytest.raises(IndexPersistError, match=allowed):
        BM25Okapi.load(root, verify="lazy")


def test_extreme_parameters_in_range_give_finite_scores() -> None:
    docs = corpus(50, 2)
    for k1, eps in ((1000.0, 1000.0), (0.0, -1000.0)):
        scores = BM25Okapi(docs, k1=k1, epsilon=eps).get_scores(["w0", "w1", "w2"])
        assert np.isfinite(scores).all()


# ----------------------------------------------------------------------------- writes
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="/dev/full is Linux-only")
def test_full_disk_names_the_path_and_the_cause() -> None:
    """/dev/full answers every write with ENOSPC, as a full disk does (before: numpy's
    "N requested and M written" or a bare OSError)."""
    with pytest.raises(IndexPersistError, match=r"cannot write /dev/full: no space left on device"):
        _write_npy(Path("/dev/full"), np.arange(1 << 20, dtype=np.int64))
    with pytest.raises(IndexPersistError, match=r"cannot write /dev/full: no space left on device"):
        fsync_write(Path("/dev/full"), b"x" * 100_000)


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_write_error_names_path_and_cause(tmp_path: Path, code: int, cause: str) -> None:
    exc = write_error(tmp_path / "x.npy", OSError(code, os.strerror(code)))
    assert isinstance(exc, IndexPersistError)
    assert str(exc).startswith(f"cannot write {tmp_path / 'x.npy'}: {cause}; ")


def test_lock_file_that_is_a_fifo_is_typed(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    saved_index(root, n_docs=10)
    (root / ".lock").unlink()
    os.mkfifo(root / ".lock")
    with pytest.raises(IndexPersistError, match="not a regular file"):
        BM25Okapi(corpus(10, 0)).save(root)
    assert len(BM25Okapi.load(root)) == 10  # the live generation is untouched


# ----------------------------------------------------------------------------- fuzz
def _fuzz(tmp_path: Path, seed: int, cases: int) -> None:
    pytest.importorskip("numba")
    got = run_fuzz_subprocess(seed, cases, tmp_path, timeout=HANG_GUARD_S * 3)
    assert got["returncode"] is not None, f"hang (no answer) after {got['last']}"
    assert got["returncode"] == 0, f"signal/exit {got['returncode']} in {got['last']}: " + str(
        got.get("stderr")
    )
    assert got["untyped"] == []
    summary = got["summary"]
    assert summary["cases"] == cases and summary["untyped"] == 0
    # the fuzz exercises both outcomes (a fuzz that only hits errors checks nothing)
    assert summary["typed"] > 0 and summary["ok"] > 0


def test_bm25_fuzz_small(tmp_path: Path) -> None:
    """Crafted arrays x verify modes x backends (numpy/numba), incl. in-place overwrites
    after load: 0 signals, 0 untyped exceptions, 0 hangs."""
    _fuzz(tmp_path, seed=20, cases=40)


@pytest.mark.slow
def test_bm25_fuzz_large(tmp_path: Path) -> None:
    _fuzz(tmp_path, seed=2020, cases=1500)


def test_live_dir_of_a_saved_index_still_loads(tmp_path: Path) -> None:
    """Sanity for the helpers above: an unaltered folder loads and ranks like a fresh build."""
    root = tmp_path / "idx"
    gen = saved_index(root, n_docs=100, seed=9)
    assert live_dir(root) == gen
    fresh = BM25Okapi(corpus(100, 9))
    loaded = BM25Okapi.load(root, verify="full")
    for q in (["w1", "w3"], ["w0"]):
        assert loaded.top_k(q, 5)[0].tolist() == fresh.top_k(q, 5)[0].tolist()
