"""The on-disk form of a BM25 index (format 2): plain ``.npy`` arrays bound by a manifest.

One directory holds ``indptr.npy`` int64 (V+1), ``indices.npy`` int32 (document ids
ascending per term), ``tf.npy`` uint8/16/32, ``doc_len.npy`` int64 (N), the term table
(``terms.npy`` UTF-8 bytes, ``term_offsets.npy`` int64 (V+1), ``term_hash.npy`` uint64 sorted,
``term_order.npy`` int32) and ``manifest.json`` (kind, version, k1/b/epsilon, sizes, each
file's sha256; :mod:`llama_index_car._persist`). No pickle.

* :func:`write_index` is the one writer: every array fsynced (:func:`write_npy`), arrays too
  large for memory filled in place through pre-allocated memory maps (:class:`Reserved`),
  then the manifest. ``BM25Okapi.write_to`` and the out-of-core ``BM25Okapi.merge`` use it.
* :func:`read_index` is the one reader, and where integrity is checked, once: every file
  opened non-blocking as a regular file, its ``.npy`` header parsed and its declared size
  matched before anything is mapped, dtypes and shapes against the manifest, the O(V + N)
  structure (pointers, term table); with ``verify="full"`` also each file's sha256 and every
  posting (:func:`~llama_index_car._bm25_arrays.check_postings`, lengths = column sums, term
  hashes). Any failure is an :class:`~llama_index_car._errors.IndexPersistError` naming the
  file.

>>> import tempfile
>>> from llama_index_car._bm25_build import build
>>> with tempfile.TemporaryDirectory() as d:
...     p = build([["a", "b"], ["b"]], batch_size=10)
...     write_index(Path(d), p.arrays(), index_meta((1.5, 0.75, 0.25), 2, 2, 3, np.uint8))
...     got = read_index(Path(d), mmap=False, verify="full")
>>> got.params, got.postings.terms, got.full
((1.5, 0.75, 0.25), ['a', 'b'], True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llama_index_car._bm25_arrays import MappedTerms, Postings, check_postings, term_hash
from llama_index_car._errors import IndexPersistError
from llama_index_car._files import sha256_file, write_error
from llama_index_car._npy import open_npy, write_npy
from llama_index_car._persist import read_manifest, write_manifest

#: Version of the directory layout written by :func:`write_index`.
BM25_FORMAT_VERSION = 2
KIND = "BM25Okapi"
#: ``verify="auto"`` hashes every file when the index is at most this many bytes.
AUTO_VERIFY_BYTES = 16 << 20
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
Verify = Literal["auto", "full", "lazy"]


def npy_name(name: str, prefix: str = "") -> str:
    """The file name of array ``name`` (``prefix`` + name + ``.npy``)."""
    return prefix + name + ".npy"


# ----------------------------------------------------------------------------- writing
@dataclass(frozen=True)
class Reserved:
    """An array :func:`write_index` allocates on disk and hands to its ``fill`` callback."""

    dtype: np.dtype[Any]
    count: int


def _out_memmap(path: Path, dtype: np.dtype[Any], count: int) -> np.ndarray:
    """A writable ``.npy`` memory map of ``count`` entries whose blocks are allocated up
    front (``posix_fallocate``): a full disk is an :class:`IndexPersistError` here, never a
    SIGBUS when a page of the map is first written."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0, dtype=dtype))
    header["shape"] = (count,)
    try:
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, header)
            offset = fh.tell()
            total = offset + count * np.dtype(dtype).itemsize
            if hasattr(os, "posix_fallocate") and total > offset:
                os.posix_fallocate(fh.fileno(), offset, total - offset)
            else:  # pragma: no cover - platforms without fallocate
                fh.truncate(total)
        if count == 0:
            return np.zeros(0, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r+", offset=offset, shape=(count,))
    except OSError as exc:
        raise write_error(path, exc) from exc


def _sync_mapped(path: Path, arr: np.ndarray) -> None:
    try:
        if isinstance(arr, np.memmap):
            arr.flush()
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(path, exc) from exc


def write_index(
    root: Path,
    arrays: Mapping[str, np.ndarray | Reserved],
    meta: dict[str, Any],
    fill: Callable[[dict[str, np.ndarray]], None] | None = None,
    *,
    prefix: str = "",
    manifest: bool = True,
) -> None:
    """Write ``arrays`` (files ``prefix + name + .npy``) and, with ``manifest``,
    ``manifest.json`` (with ``meta``) into the directory ``root``; without it the caller's
    own manifest binds the files (and keeps ``meta`` for :func:`read_index`'s ``bound``).

    :class:`Reserved` entries are allocated as writable memory maps and passed, by name, to
    ``fill``, which writes their contents; they are then flushed and fsynced like the others.
    """
    reserved = {k: v for k, v in arrays.items() if isinstance(v, Reserved)}
    if reserved:
        maps = {
            k: _out_memmap(root / npy_name(k, prefix), r.dtype, r.count)
            for k, r in reserved.items()
        }
        if fill is not None:
            fill(maps)
        for name, m in maps.items():
            _sync_mapped(root / npy_name(name, prefix), m)
        del maps
    for name, arr in arrays.items():
        if not isinstance(arr, Reserved):
            write_npy(root / npy_name(name, prefix), arr)
    if manifest:
        write_manifest(root, kind=KIND, format_version=BM25_FORMAT_VERSION, meta=meta)


def index_meta(
    params: tuple[float, float, float], n: int, v: int, nnz: int, tf_dtype: Any
) -> dict[str, Any]:
    """The manifest's ``meta`` table: parameters, N, V, nnz and the count dtype."""
    k1, b, epsilon = params
    return {
        "k1": k1,
        "b": b,
        "epsilon": epsilon,
        "corpus_size": int(n),
        "vocab_size": int(v),
        "nnz": int(nnz),
        "tf_dtype": np.dtype(tf_dtype).name,
    }


# ----------------------------------------------------------------------------- reading
def _int_field(meta: dict[str, Any], key: str, where: Path) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise IndexPersistError(f"{where}: meta.{key} must be an int >= 0, got {value!r}")
    return value


def _float_field(meta: dict[str, Any], key: str, where: Path) -> float:
    value = meta.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise IndexPersistError(f"{where}: meta.{key} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Loaded:
    """What :func:`read_index` returns: ``(k1, b, epsilon)`` as recorded (range-checked by
    the caller), the postings, and whether every posting was verified (``full``)."""

    params: tuple[float, float, float]
    postings: Postings
    full: bool


def _checked_sizes(root: Path, files: dict[str, Any], prefix: str = "") -> int:
    """Total bytes of the files the reader reads, each matching its manifest entry."""
    total = 0
    for name in (npy_name(a, prefix) for a in ARRAYS):
        fp = root / name
        try:
            st = os.stat(fp)
        except OSError as exc:
            raise IndexPersistError(f"{fp} is missing; save the index again") from exc
        if st.st_size != files[name]["bytes"]:
            raise IndexPersistError(
                f"{fp} is {st.st_size} bytes, manifest.json says {files[name]['bytes']}; "
                "save the index again"
            )
        total += st.st_size
    return total


def read_index(
    root: Path,
    mmap: bool,
    verify: Verify,
    *,
    prefix: str = "",
    bound: tuple[dict[str, Any], Any] | None = None,
) -> Loaded:
    """Read and check the index directory ``root`` (see the module docstring).

    ``verify``: ``"full"`` (sha256 of every file and every posting), ``"lazy"`` (sizes,
    dtypes, shapes, O(V + N) structure; postings are checked per column on first use by the
    caller) or ``"auto"`` (``"full"`` up to :data:`AUTO_VERIFY_BYTES` of files).
    ``bound``: ``(files, meta)`` of the caller's manifest, already read (arrays named
    ``prefix + name + .npy`` in a directory with one manifest); default: ``root``'s own
    ``manifest.json``.
    """
    required = [npy_name(a, prefix) for a in ARRAYS]
    if bound is None:
        manifest = read_manifest(
            root, kind=KIND, format_versions=(BM25_FORMAT_VERSION,), verify=False,
            required=required,
        )
        bound = (manifest["files"], manifest.get("meta"))
    files: dict[str, Any] = bound[0]
    missing = [name for name in required if name not in files]
    if missing:
        raise IndexPersistError(f"{root / 'manifest.json'} does not list {missing}; save again")
    # decide and check from the files this reader reads, never from what the manifest
    # merely lists (a padding entry cannot push a small index to "lazy")
    total = _checked_sizes(root, files, prefix)
    full = verify == "full" or (verify == "auto" and total <= AUTO_VERIFY_BYTES)
    if full:
        for name in required:
            if sha256_file(root / name) != files[name]["sha256"]:
                raise IndexPersistError(
                    f"{root / name} is corrupt (sha256 differs from manifest.json); "
                    "save the index again"
                )
    meta = bound[1]
    mpath = root / "manifest.json"
    if not isinstance(meta, dict):
        raise IndexPersistError(f"{mpath} has no meta table; save the index again")
    n = _int_field(meta, "corpus_size", mpath)
    v = _int_field(meta, "vocab_size", mpath)
    nnz = _int_field(meta, "nnz", mpath)
    if n > np.iinfo(np.int32).max:
        raise IndexPersistError(f"{mpath}: corpus_size {n} exceeds int32 document ids")
    expect: dict[str, tuple[tuple[Any, ...], int | None]] = {  # dtypes, length
        "indptr": ((np.int64,), v + 1), "indices": ((np.int32,), nnz),
        "tf": ((np.uint8, np.uint16, np.uint32), nnz), "doc_len": ((np.int64,), n),
        "terms": ((np.uint8,), None), "term_offsets": ((np.int64,), v + 1),
        "term_hash": ((np.uint64,), v), "term_order": ((np.int32,), v),
    }
    p = {name: root / npy_name(name, prefix) for name in ARRAYS}
    a = {name: open_npy(p[name], dtypes=expect[name][0], ndim=1, shape=(expect[name][1],),
                        mmap=mmap, fix="save the index again") for name in ARRAYS}
    # a private copy (V + 1 int64, the size of idf): the kernels index with it, so it must
    # not change under them (indices/tf may stay mapped: every id is checked as read)
    indptr = np.array(a["indptr"])
    if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) <= 0).any():
        raise IndexPersistError(
            f"{p['indptr']}: column pointers must start at 0, increase strictly and end at "
            f"nnz={nnz}; save the index again"
        )
    doc_len = np.asarray(a["doc_len"])
    if n and doc_len.min() < 0:
        raise IndexPersistError(f"{p['doc_len']}: negative document length")
    off = np.asarray(a["term_offsets"])
    if off[0] != 0 or off[-1] != a["terms"].shape[0] or (np.diff(off) < 0).any():
        raise IndexPersistError(f"{p['term_offsets']}: offsets do not fit terms.npy")
    hashes = np.asarray(a["term_hash"])
    order = np.asarray(a["term_order"])
    if v and (
        (hashes[1:] < hashes[:-1]).any()
        or order.min() < 0
        or order.max() >= v
        or not (np.bincount(order, minlength=v) == 1).all()
    ):
        raise IndexPersistError(f"{p['term_hash']} / term_order.npy: not a valid term index")
    table = MappedTerms(a["terms"], off, hashes, order)
    if full:
        _check_all(root, a, table, n, indptr, prefix)
    params = tuple(_float_field(meta, key, mpath) for key in ("k1", "b", "epsilon"))
    postings = Postings(indptr, a["indices"], a["tf"], doc_len, table)
    return Loaded(params, postings, full)  # type: ignore[arg-type]


def _check_all(
    root: Path, a: dict[str, np.ndarray], table: MappedTerms, n: int, indptr: np.ndarray,
    prefix: str = "",
) -> None:
    """``verify="full"``'s content checks: every posting, the lengths, the term hashes."""
    indices = np.asarray(a["indices"])
    problem = check_postings(indices, a["tf"], n, indptr[1:-1])
    if problem is not None:
        name = npy_name("tf" if problem == "zero term counts" else "indices", prefix)
        raise IndexPersistError(f"{root / name}: {problem}")
    tf = np.asarray(a["tf"])
    sums = np.bincount(indices, weights=tf, minlength=n) if n else np.zeros(0)
    if not np.array_equal(sums.astype(np.int64), np.asarray(a["doc_len"])):
        raise IndexPersistError(
            f"{root / npy_name('doc_len', prefix)}: lengths differ from the sums of the term counts"
        )
    # every term's hash must be where the sorted index says it is
    raw = bytes(table.blob)
    off = table.offsets.tolist()
    got = np.fromiter(
        (term_hash(raw[off[j] : off[j + 1]]) for j in table.order.tolist()),
        dtype=np.uint64,
        count=len(table),
    )
    if not np.array_equal(got, np.asarray(table.hashes)):
        raise IndexPersistError(f"{root / npy_name('term_hash', prefix)}: term hashes do not match terms")
    table.terms()  # decodes, or raises IndexPersistError
