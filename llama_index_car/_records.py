"""Keyed records that are read, not loaded: a memory-mapped offsets table and one blob read
with ``pread``.

A record set ``NAME`` in a folder is five plain files (no pickle), written once by
:func:`write_records` inside a caller's crash-safe generation (``_persist.replace_dir``; the
caller's manifest binds them) and opened by :class:`RecordFile`:

* ``NAME.blob``: record ``i`` is ``blob[offsets[i]:offsets[i + 1]]``, its first
  ``key_len[i]`` bytes the UTF-8 key, the rest the payload (any bytes; node JSON here);
* ``NAME.offsets.npy`` uint64 ``(n + 1,)``, ``offsets[0] = 0``, ``offsets[n] = len(blob)``;
* ``NAME.key_len.npy`` uint32 ``(n,)``;
* ``NAME.key_hash.npy`` uint64 ``(n,)``: the keys' 8-byte BLAKE2b digests, sorted, and
  ``NAME.key_order.npy`` int64 ``(n,)``: the record of each sorted digest (lookup by key =
  a binary search, then the key bytes compared);
* ``NAME.meta.json``: ``{"kind": "CarRecords", "format_version": 1, "count": n,
  "blob_bytes": len(blob)}``.

Opening reads the meta file and the ``.npy`` headers, checks every size against ``count`` and
``blob_bytes``, maps the tables and keeps the blob open: nothing proportional to ``n`` is read,
so open time and resident memory do not grow with the number of records (``verify="full"`` also checks the
whole tables once, O(n)). Every read is bounds-checked where it happens (record index in
range, ``offsets[i] <= offsets[i + 1] <= blob_bytes``, ``key_len <= length``, length at most
:data:`MAX_RECORD_BYTES`), so a table damaged after opening gives
:class:`~llama_index_car._errors.IndexPersistError` naming the file, never a wrong slice.
The blob is read with ``os.pread``, not mapped: a record costs the reader its bytes, not the
pages around them (a query process's resident memory does not grow with the records it has
read), and a blob truncated after opening is a short read, an ``IndexPersistError``.
Truncating a mapped table while it is open raises SIGBUS (inherent to mmap: deploy folders
read-only). Chosen over SQLite by ``benchmarks/records_bench.py`` (per-record reads several
times faster; both open in constant time).

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     root = pathlib.Path(d)
...     _ = write_records(root, "nodes", [("a", b'{"x": 1}'), ("b", b"")])
...     rf = RecordFile.open(root, "nodes")
...     rf.key(1), rf.payload(0), rf.find("b"), rf.find("c")
('b', b'{"x": 1}', 1, None)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._files import (
    PositionalFile,
    open_regular,
    read_json,
    write_error,
    write_json,
)
from llama_index_car._npy import open_npy, write_npy

RECORDS_FORMAT_VERSION = 1
KIND = "CarRecords"
#: Largest record (key + payload) read; a longer one is damage, not data.
MAX_RECORD_BYTES = 256 << 20
_MAX_KEY_BYTES = 4096


def key_digest(key: str) -> int:
    """The 8-byte BLAKE2b digest of ``key`` (UTF-8) as an unsigned little-endian int."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


def _names(name: str) -> dict[str, str]:
    return {
        part: f"{name}.{part}" + ("" if part == "blob" else ".json" if part == "meta" else ".npy")
        for part in ("blob", "offsets", "key_len", "key_hash", "key_order", "meta")
    }


def write_records(root: Path, name: str, items: Iterable[tuple[str, bytes]]) -> dict[str, Any]:
    """Write the record set ``name`` into the existing directory ``root`` from ``(key,
    payload)`` pairs in order (streamed to the blob; 20 bytes per record held). Keys must be
    unique, at most 4 KiB of UTF-8. Every file is fsynced; returns the meta dict.

    Raises:
        ConfigurationError: a repeated or oversized key, a payload that is not bytes.
        IndexPersistError: a write failed (naming the file).
    """
    files = _names(name)
    offsets: list[int] = [0]
    key_len: list[int] = []
    digests: list[int] = []
    seen: set[str] = set()
    blob_path = root / files["blob"]
    try:
        with open(blob_path, "wb") as fh:
            pos = 0
            for key, payload in items:
                if not isinstance(key, str) or not isinstance(payload, bytes | bytearray):
                    raise ConfigurationError("records are (str key, bytes payload) pairs")
                k = key.encode("utf-8")
                if len(k) > _MAX_KEY_BYTES or len(k) + len(payload) > MAX_RECORD_BYTES:
                    raise ConfigurationError(f"record {key[:40]!r} is too large")
                if key in seen:
                    raise ConfigurationError(f"duplicate record key {key!r}")
                seen.add(key)
                fh.write(k)
                fh.write(payload)
                pos += len(k) + len(payload)
                offsets.append(pos)
                key_len.append(len(k))
                digests.append(key_digest(key))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(blob_path, exc) from exc
    hashes = np.asarray(digests, dtype=np.uint64)
    order = np.argsort(hashes, kind="stable").astype(np.int64)
    write_npy(root / files["offsets"], np.asarray(offsets, dtype=np.uint64))
    write_npy(root / files["key_len"], np.asarray(key_len, dtype=np.uint32))
    write_npy(root / files["key_hash"], hashes[order])
    write_npy(root / files["key_order"], order)
    meta = {
        "kind": KIND,
        "format_version": RECORDS_FORMAT_VERSION,
        "count": len(key_len),
        "blob_bytes": offsets[-1],
    }
    write_json(root / files["meta"], meta)
    return meta


class RecordFile:
    """A read-only record set (see the module docstring). Thread-safe: it holds no mutable
    state after :meth:`open`."""

    def __init__(
        self,
        paths: dict[str, Path],
        count: int,
        offsets: np.ndarray,
        key_len: np.ndarray,
        key_hash: np.ndarray,
        key_order: np.ndarray,
        blob: PositionalFile,
        blob_bytes: int,
    ) -> None:
        self._paths = paths
        self.count = count
        self._offsets, self._key_len = offsets, key_len
        self._key_hash, self._key_order = key_hash, key_order
        self._blob = blob
        self._blob_bytes = blob_bytes

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls, root: Path, name: str, *, verify: Literal["lazy", "full"] = "lazy"
    ) -> RecordFile:
        """Open the record set ``name`` in ``root`` (checks of the module docstring).

        Raises:
            IndexPersistError: naming the file and the problem.
        """
        if verify not in ("lazy", "full"):
            raise ConfigurationError(f"verify must be 'lazy' or 'full', got {verify!r}")
        paths = {part: root / fname for part, fname in _names(name).items()}
        try:
            meta = read_json(paths["meta"], max_bytes=4096, max_depth=1)
        except FileNotFoundError as exc:
            raise IndexPersistError(f"{paths['meta']} is missing; write the folder again") from exc
        count, blob_bytes = _meta_sizes(meta, paths["meta"])
        offsets = open_npy(paths["offsets"], dtypes=(np.uint64,), ndim=1, shape=(count + 1,))
        key_len = open_npy(paths["key_len"], dtypes=(np.uint32,), ndim=1, shape=(count,))
        key_hash = open_npy(paths["key_hash"], dtypes=(np.uint64,), ndim=1, shape=(count,))
        key_order = open_npy(paths["key_order"], dtypes=(np.int64,), ndim=1, shape=(count,))
        blob = _open_blob(paths["blob"], blob_bytes)
        self = cls(paths, count, offsets, key_len, key_hash, key_order, blob, blob_bytes)
        if verify == "full":
            self._check_all()
        return self

    def _check_all(self) -> None:
        """O(n) checks of every table (``verify="full"``)."""
        off = np.asarray(self._offsets)
        if off.size and (off[0] != 0 or off[-1] != self._blob_bytes or (np.diff(off.astype(np.int64)) < 0).any()):
            raise IndexPersistError(f"{self._paths['offsets']}: offsets are not a partition of the blob")
        lengths = np.diff(off.astype(np.int64))
        if (np.asarray(self._key_len, dtype=np.int64) > lengths).any():
            raise IndexPersistError(f"{self._paths['key_len']}: a key is longer than its record")
        h = np.asarray(self._key_hash)
        if h.size > 1 and (h[1:] < h[:-1]).any():
            raise IndexPersistError(f"{self._paths['key_hash']}: digests are not sorted")
        order = np.asarray(self._key_order)
        if order.size and not np.array_equal(np.sort(order), np.arange(self.count)):
            raise IndexPersistError(f"{self._paths['key_order']}: not a permutation")

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self.count

    def _span(self, i: int) -> tuple[int, int, int]:
        """``(start, key end, end)`` of record ``i``, bounds-checked."""
        if not isinstance(i, int | np.integer) or not 0 <= i < self.count:
            raise IndexError(f"record {i!r} out of range [0, {self.count})")
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        k = int(self._key_len[i])
        if not a <= b <= self._blob_bytes or b - a > MAX_RECORD_BYTES:
            raise IndexPersistError(
                f"{self._paths['offsets']}: record {i} spans bytes [{a}, {b}) of a "
                f"{self._blob_bytes}-byte blob; write the folder again"
            )
        if k > b - a or k > _MAX_KEY_BYTES:
            raise IndexPersistError(
                f"{self._paths['key_len']}: record {i} has a {k}-byte key in {b - a} bytes; "
                "write the folder again"
            )
        return a, a + k, b

    def key(self, i: int) -> str:
        """The key of record ``i``."""
        a, k, _ = self._span(i)
        try:
            return self._blob.pread(k - a, a).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise IndexPersistError(f"{self._paths['blob']}: record {i} has a damaged key") from exc

    def payload(self, i: int) -> bytes:
        """The payload bytes of record ``i`` (a copy)."""
        _, k, b = self._span(i)
        return self._blob.pread(b - k, k)

    def json(self, i: int) -> Any:
        """The payload of record ``i`` parsed as UTF-8 JSON."""
        try:
            return json.loads(self.payload(i))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise IndexPersistError(
                f"{self._paths['blob']}: record {i} is not valid JSON ({exc}); write the folder again"
            ) from exc

    def find(self, key: str) -> int | None:
        """The index of the record keyed ``key``, or ``None``."""
        h = np.uint64(key_digest(key))
        j = int(np.searchsorted(self._key_hash, h, side="left"))
        want = key.encode("utf-8")
        while j < self.count and self._key_hash[j] == h:
            i = int(self._key_order[j])
            if not 0 <= i < self.count:
                raise IndexPersistError(
                    f"{self._paths['key_order']}: entry {j} names record {i} of {self.count}"
                )
            a, k, _ = self._span(i)
            if self._blob.pread(k - a, a) == want:
                return i
            j += 1
        return None

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        """``(key, payload)`` of every record, in order."""
        for i in range(self.count):
            a, k, b = self._span(i)
            record = self._blob.pread(b - a, a)
            try:
                key = record[: k - a].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise IndexPersistError(f"{self._paths['blob']}: record {i} has a damaged key") from exc
            yield key, record[k - a :]

    def close(self) -> None:
        """Close the blob (reads after this fail)."""
        self._blob.close()


class RecordKeys(Sequence[str]):
    """The keys of a record set in record order, read when indexed."""

    def __init__(self, records: RecordFile) -> None:
        self._rf = records

    def __len__(self) -> int:
        return len(self._rf)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._rf.key(j) for j in range(*i.indices(len(self)))]
        return self._rf.key(i)


class KeyPositions(Mapping[str, int]):
    """``{key: record position}`` of a record set, looked up through its key table."""

    def __init__(self, records: RecordFile) -> None:
        self._rf = records

    def __getitem__(self, key: str) -> int:
        i = self._rf.find(key) if isinstance(key, str) else None
        if i is None:
            raise KeyError(key)
        return i

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._rf.find(key) is not None

    def __len__(self) -> int:
        return len(self._rf)

    def __iter__(self) -> Iterator[str]:
        return iter(RecordKeys(self._rf))


def _meta_sizes(meta: Any, path: Path) -> tuple[int, int]:
    if not isinstance(meta, dict) or meta.get("kind") != KIND:
        raise IndexPersistError(f"{path} does not describe a {KIND} record set")
    if meta.get("format_version") != RECORDS_FORMAT_VERSION:
        raise IndexPersistError(
            f"{path} has format_version {meta.get('format_version')!r}; this version reads "
            f"{RECORDS_FORMAT_VERSION}: write the folder again"
        )
    out = []
    for field in ("count", "blob_bytes"):
        v = meta.get(field)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 62:
            raise IndexPersistError(f"{path}: {field} must be an int >= 0, got {v!r}")
        out.append(v)
    return out[0], out[1]


def _open_blob(path: Path, blob_bytes: int) -> PositionalFile:
    try:
        fh = open_regular(path)
    except FileNotFoundError as exc:
        raise IndexPersistError(f"{path} is missing; write the folder again") from exc
    try:
        size = os.fstat(fh.fileno()).st_size
        if size != blob_bytes:
            raise IndexPersistError(
                f"{path} has {size} bytes, its meta file says {blob_bytes}; write the folder again"
            )
        return PositionalFile.of(fh, path)
    finally:
        fh.close()
