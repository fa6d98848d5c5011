"""The files of an embedding cache folder (:mod:`llama_index_car.embeddings.cache`): the
format of ``index.json`` and of a shard, their checks, and the locked, no-symlink writes.
Pure functions over bytes and parsed JSON (the cache's trust rules are in its module
docstring).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 2
#: largest ``index.json`` read (an entry takes ~85 bytes: some 3 million texts)
MAX_INDEX_BYTES = 256 << 20
#: largest shard (rows x dim float32 and the ``.npy`` header) and vector width accepted
MAX_SHARD_BYTES = 1 << 30
MAX_DIM = 1 << 16
_SHARD_NAME = re.compile(r"shard-[0-9a-f]{32}\.npy")
_KEY = re.compile(r"[tq]:[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)

@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (``fcntl.flock``; a no-op where unavailable),
    opened without following a symlink and without blocking on a FIFO."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist; never through a symlink), mode 0644, with ``data``;
    a partial file is removed when a write fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


@dataclass(frozen=True)
class Shard:
    """One shard as ``index.json`` records it."""

    name: str
    rows: int
    bytes: int
    sha256: str


def _int_in(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def shard_bytes(rows: int, dim: int) -> int:
    """Size of the ``.npy`` file of a float32 ``(rows, dim)`` matrix, as :meth:`EmbeddingCache._add <llama_index_car.embeddings.cache.EmbeddingCache._add>` writes it
    (numpy's version 1.0 header, then the data).

    >>> shard_bytes(4, 3)
    176
    """
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (rows, dim)}
    )
    return len(header.getvalue()) + 4 * rows * dim


def parse_index(
    data: Any, spec: dict[str, Any]
) -> tuple[int, list[Shard], dict[str, tuple[int, int]]]:
    """``(dim, shards, entries)`` of a parsed ``index.json`` of the model ``spec``, every field
    checked: the format version, the model, ``dim`` in 1..:data:`MAX_DIM`, shard names of the
    form ``shard-<32 hex>.npy`` (so they stay inside the folder), row counts and sizes that fit
    ``dim``, keys ``t:``/``q:`` + sha256, and each entry's shard and row in range.

    Raises:
        ValueError: naming the first field that is wrong.
    """
    if not isinstance(data, dict):
        raise ValueError("it is not a JSON object")
    if data.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"format_version {data.get('format_version')!r} is not {FORMAT_VERSION}")
    if data.get("model") != spec:
        raise ValueError("it describes another model")
    raw_dim = data.get("dim")
    if not isinstance(raw_dim, int) or not _int_in(raw_dim, 1, MAX_DIM):
        raise ValueError(f"dim {raw_dim!r} is not in 1..{MAX_DIM}")
    dim = raw_dim
    raw_shards, raw_entries = data.get("shards"), data.get("entries")
    if not isinstance(raw_shards, list) or not isinstance(raw_entries, dict):
        raise ValueError("it has no 'shards' list or no 'entries' table")
    shards: list[Shard] = []
    for rec in raw_shards:
        if not isinstance(rec, dict):
            raise ValueError("a shard record is not an object")
        name, rows, size, sha = rec.get("name"), rec.get("rows"), rec.get("bytes"), rec.get("sha256")
        rows = rows if isinstance(rows, int) else 0
        if not isinstance(name, str) or not _SHARD_NAME.fullmatch(name):
            raise ValueError(f"shard name {str(name)[:80]!r} is not shard-<32 hex>.npy")
        if not _int_in(rows, 1, MAX_SHARD_BYTES // (4 * dim)) or size != shard_bytes(rows, dim):
            raise ValueError(f"{name}: {rows!r} rows of {size!r} bytes do not fit dim {dim}")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise ValueError(f"{name}: sha256 {str(sha)[:80]!r} is not 64 hex digits")
        shards.append(Shard(name, rows, size, sha))
    if len({sh.name for sh in shards}) != len(shards):
        raise ValueError("a shard is listed twice")
    entries: dict[str, tuple[int, int]] = {}
    for key, value in raw_entries.items():
        if not _KEY.fullmatch(key):
            raise ValueError(f"key {key[:80]!r} is not t:/q: + sha256")
        if not (isinstance(value, list) and len(value) == 2
                and _int_in(value[0], 0, len(shards) - 1)
                and _int_in(value[1], 0, shards[value[0]].rows - 1)):
            raise ValueError(f"entry {key[:10]}…: {str(value)[:80]} is not a shard and row in range")
        entries[key] = (value[0], value[1])
    return dim, shards, entries


def decode_shard(data: bytes, shard: Shard, dim: int) -> np.ndarray:
    """The read-only float32 ``(rows, dim)`` matrix of a shard's bytes, after checking the
    sha256 ``index.json`` records, the ``.npy`` header and that every value is finite.

    Raises:
        ValueError: naming what is wrong.
    """
    if hashlib.sha256(data).hexdigest() != shard.sha256:
        raise ValueError("its sha256 is not the one index.json records (overwritten or damaged)")
    try:
        arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except (ValueError, TypeError, SyntaxError, EOFError, OSError) as exc:
        raise ValueError(f"it is not a readable .npy file ({exc})") from exc
    if arr.dtype != np.dtype("<f4") or arr.shape != (shard.rows, dim):
        raise ValueError(
            f"it holds {arr.dtype} {arr.shape}, not float32 ({shard.rows}, {dim})"
        )
    if not np.isfinite(arr).all():
        raise ValueError("it holds NaN or infinite values")
    arr.setflags(write=False)
    return arr
