"""Hostile BM25 index folders built in code, and the BM25 fuzz run (``python -m``).

Everything here writes real files with real syscalls (FIFOs, symlinks to devices, in-place
overwrites of memory-mapped arrays); nothing is mocked. The fuzz runs in a child process
(:func:`run_fuzz_subprocess`) so that a signal (SIGSEGV, SIGBUS) or a hang fails the test
instead of killing pytest: the child prints one JSON line per case *before* running it, so
the parent names the case that died.

Usage (what the tests run)::

    python -c "from tests.fakes.bm25_folders import fuzz; fuzz(0, 40, Path('/tmp/f'))"
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_car._persist import live_dir, write_manifest

__all__ = [
    "ARRAYS",
    "corpus",
    "npy_bytes",
    "overwrite_data",
    "rewrite_manifest",
    "run_fuzz_subprocess",
    "saved_index",
]

ARRAYS = (
    "indptr",
    "indices",
    "tf",
    "doc_len",
    "terms",
    "term_offsets",
    "term_hash",
    "term_order",
)


def corpus(n_docs: int, seed: int, vocab: int = 60) -> list[list[str]]:
    """Zipf-ish token lists (a few empty documents included)."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    docs = []
    for d in range(n_docs):
        length = 0 if d % 37 == 5 else rng.randint(1, 12)
        docs.append(rng.choices(words, weights, k=length))
    return docs


def saved_index(root: Path, n_docs: int = 300, seed: int = 0) -> Path:
    """Save a BM25 index of :func:`corpus` at ``root``; return its live generation dir."""
    from llama_index_car.bm25 import BM25Okapi

    BM25Okapi(corpus(n_docs, seed), backend="numpy").save(root)
    return live_dir(root)


def npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """A format 1.0 ``.npy`` header (magic, length, dict), padded as numpy pads it."""
    head = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape!r}, }}"
    pad = 64 - (10 + len(head) + 1) % 64
    text = (head + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


def npy_bytes(header_text: str, payload: bytes = b"") -> bytes:
    """Raw ``.npy`` bytes with an arbitrary header text (for damaged headers)."""
    text = header_text.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def data_offset(path: Path) -> int:
    """Where the data of a format 1.0/2.0 ``.npy`` file starts."""
    raw = path.read_bytes()[:12]
    if raw[6] == 1:
        return 10 + struct.unpack("<H", raw[8:10])[0]
    return 12 + struct.unpack("<I", raw[8:12])[0]


def overwrite_data(path: Path, data: bytes, at: int = 0) -> None:
    """Write ``data`` into the data region of ``path`` in place (same inode, same size)."""
    off = data_offset(path)
    size = path.stat().st_size
    data = data[: max(0, size - off - at)]
    with open(path, "r+b") as fh:
        fh.seek(off + at)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def rewrite_manifest(gen: Path, meta_update: dict[str, Any] | None = None) -> None:
    """Re-bind ``gen``'s files in its manifest (a crafted folder whose hashes match)."""
    old = json.loads((gen / "manifest.json").read_text())
    meta = dict(old["meta"]) | (meta_update or {})
    (gen / "manifest.json").unlink()
    write_manifest(gen, kind=old["kind"], format_version=old["format_version"], meta=meta)


# ----------------------------------------------------------------------------- fuzz
def _mutations(rng: random.Random) -> list[tuple[str, Callable[[Path], None]]]:
    """Pre-load mutations of a generation dir: (name, apply)."""

    def values(name: str, kind: str) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            p = gen / f"{name}.npy"
            arr = np.load(p)
            if not arr.size:
                return
            info = np.iinfo(arr.dtype)
            if kind == "random":
                new = rng.randbytes(arr.nbytes)
            elif kind == "max":
                new = np.full(arr.size, info.max, arr.dtype).tobytes()
            elif kind == "min":
                new = np.full(arr.size, info.min, arr.dtype).tobytes()
            elif kind == "minus1":
                new = np.full(arr.size, -1 if info.min < 0 else info.max, arr.dtype).tobytes()
            elif kind == "zeros":
                new = bytes(arr.nbytes)
            elif kind == "shuffle":
                perm = arr.copy()
                np.random.default_rng(rng.randrange(1 << 30)).shuffle(perm)
                new = perm.tobytes()
            else:  # one entry
                at = rng.randrange(arr.size) * arr.itemsize
                overwrite_data(p, rng.randbytes(arr.itemsize), at)
                return
            overwrite_data(p, new)

        return apply

    def reshape(name: str, delta: int) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            p = gen / f"{name}.npy"
            arr = np.load(p)
            new = np.resize(arr, max(0, arr.size + delta))
            np.save(p, new)

        return apply

    def redtype(name: str, dtype: str) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            p = gen / f"{name}.npy"
            np.save(p, np.load(p).astype(dtype))

        return apply

    def header(name: str, kind: str) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            p = gen / f"{name}.npy"
            payload = p.read_bytes()[data_offset(p) :]
            if kind == "huge":
                p.write_bytes(npy_header("<i8", (1 << 40,)) + payload)
            elif kind == "token":
                p.write_bytes(npy_bytes("{'descr': '<i8', '''\n", payload))
            elif kind == "garbage":
                p.write_bytes(npy_bytes(rng.randbytes(54).decode("latin1") + "\n", payload))
            elif kind == "2d":
                p.write_bytes(npy_header("<i4", (1, len(payload) // 4)) + payload)
            elif kind == "object":
                p.write_bytes(npy_header("|O", (1,)) + payload)
            else:  # truncated before load
                p.write_bytes(p.read_bytes()[: data_offset(p) + len(payload) // 2])

        return apply

    def special(name: str, kind: str) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            p = gen / name
            p.unlink()
            if kind == "fifo":
                os.mkfifo(p)
            elif kind == "zero":
                p.symlink_to("/dev/zero")
            else:
                p.mkdir()

        return apply

    def meta(update: dict[str, Any]) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            rewrite_manifest(gen, update)

        return apply

    def raw_manifest(text: str) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            (gen / "manifest.json").write_text(text)

        return apply

    muts: list[tuple[str, Callable[[Path], None]]] = []
    for name in ARRAYS:
        for kind in ("random", "max", "min", "minus1", "zeros", "shuffle", "one"):
            muts.append((f"{name}:{kind}", values(name, kind)))
        for delta in (-1, 1):
            muts.append((f"{name}:len{delta:+d}", reshape(name, delta)))
        for kind in ("huge", "token", "garbage", "2d", "object", "truncate"):
            muts.append((f"{name}:header-{kind}", header(name, kind)))
        muts.append((f"{name}:dtype", redtype(name, "<i8" if name != "indptr" else "<i4")))
        for kind in ("fifo", "zero", "dir"):
            muts.append((f"{name}:{kind}", special(f"{name}.npy", kind)))
    for kind in ("fifo", "zero", "dir"):
        muts.append((f"manifest:{kind}", special("manifest.json", kind)))
    for key, value in (
        ("k1", 1e308),
        ("k1", -1),
        ("b", 2.0),
        ("epsilon", 1e300),
        ("corpus_size", 1 << 40),
        ("corpus_size", 1),
        ("vocab_size", 0),
        ("nnz", 1 << 40),
        ("k1", "1.5"),
    ):
        muts.append((f"meta:{key}={value!r}", meta({key: value})))
    muts.append(("manifest:deep", raw_manifest("[" * 100_000 + "]" * 100_000)))
    muts.append(("manifest:digits", raw_manifest('{"kind": ' + "1" * 5000 + "}")))
    return muts


def _post_load(rng: random.Random) -> list[tuple[str, Callable[[Path], None]]]:
    """In-place overwrites of a loaded (mapped) generation's arrays: same inode, same size."""

    def over(name: str, kind: str) -> Callable[[Path], None]:
        def apply(gen: Path) -> None:
            p = gen / f"{name}.npy"
            size = p.stat().st_size - data_offset(p)
            if kind == "random":
                data = rng.randbytes(size)
            elif kind == "ff":
                data = b"\xff" * size
            elif kind == "7f":
                data = b"\x7f" * size
            else:
                data = bytes(size)
            overwrite_data(p, data)

        return apply

    return [
        (f"after:{name}:{kind}", over(name, kind))
        for name in ARRAYS
        for kind in ("random", "ff", "7f", "zeros")
    ]


def _query_all(bm: Any, queries: list[list[str]], n: int) -> None:
    for q in queries:
        for k in (1, 5, n):
            bm.top_k(q, k)
        bm.get_scores(q)


def fuzz(seed: int, cases: int, workdir: Path) -> dict[str, int]:
    """Run ``cases`` crafted folders x verify modes x backends; print one line per case."""
    from llama_index_car._errors import CarError
    from llama_index_car.bm25 import BM25Okapi

    rng = random.Random(seed)
    pre = _mutations(rng)
    post = _post_load(rng)
    counts = {"cases": 0, "typed": 0, "ok": 0, "untyped": 0}
    untyped: list[str] = []
    for case in range(cases):
        n_docs = rng.choice((40, 300, 2000))
        use_post = case % 3 == 2
        name, apply = rng.choice(post if use_post else pre)
        rebind = (not use_post) and rng.random() < 0.5 and not name.startswith("manifest")
        verify = rng.choice(("full", "lazy", "auto"))
        backend = rng.choice(("numpy", "numba"))
        mmap = rng.random() < 0.8
        print(json.dumps({"case": case, "mutation": name, "rebind": rebind, "verify": verify,
                          "backend": backend, "mmap": mmap, "n": n_docs}), flush=True)
        root = workdir / f"c{case}"
        gen = saved_index(root, n_docs, seed=rng.randrange(1 << 30))
        words = [f"w{i}" for i in range(60)]
        queries = [rng.sample(words, rng.randint(1, 6)) for _ in range(3)] + [["w0", "w0", "w1"]]
        try:
            if use_post:
                bm = BM25Okapi.load(root, verify=verify, backend=backend, mmap=mmap)  # type: ignore[arg-type]
                _query_all(bm, queries, n_docs)
                apply(gen)
                _query_all(bm, queries, n_docs)
            else:
                apply(gen)
                if rebind:
                    rewrite_manifest(gen)
                bm = BM25Okapi.load(root, verify=verify, backend=backend, mmap=mmap)  # type: ignore[arg-type]
                _query_all(bm, queries, n_docs)
            counts["ok"] += 1
        except CarError:
            counts["typed"] += 1
        except Exception as exc:  # noqa: BLE001 - what the fuzz counts
            counts["untyped"] += 1
            untyped.append(f"case {case} {name}: {type(exc).__name__}: {exc}"[:300])
        counts["cases"] += 1
    print(json.dumps({"summary": counts, "untyped": untyped}), flush=True)
    return counts


def run_fuzz_subprocess(seed: int, cases: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """Run :func:`fuzz` in a child; returns ``{"returncode", "summary", "untyped", "last"}``.

    ``timeout`` only turns a hang into a failure (it is no performance assertion).
    """
    code = (
        "import sys; from pathlib import Path; from tests.fakes.bm25_folders import fuzz; "
        f"fuzz({seed}, {cases}, Path(sys.argv[1]))"
    )
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(workdir)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=root,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        lines = out.strip().splitlines()
        return {"returncode": None, "summary": None, "untyped": [], "last": lines[-1:]}
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith('{"summary"') else None
    return {
        "returncode": proc.returncode,
        "summary": summary and summary["summary"],
        "untyped": summary["untyped"] if summary else [],
        "last": lines[-1:],
        "stderr": proc.stderr[-2000:],
    }
