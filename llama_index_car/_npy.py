"""Checked ``.npy`` files of an untrusted folder: header, dtype and shape before any mapping.

:func:`open_npy` is the one reader of an index folder's arrays (the BM25 arrays, the
index's and the span index's vectors, the record files, the flat store): the file must be a
regular file (opened non-blocking), its header is parsed with numpy's reader (format 1.0 / 2.0, no pickle, C order),
its dtype must be one of the allowed ones, its number of dimensions the expected one, and the
size it declares must equal the file's size before anything is mapped or allocated (a header
declaring 2**40 rows is refused, not a ``MemoryError``). :func:`write_npy` is the fsynced
writer (``np.save``'s layout). Failures are :class:`~llama_index_car._errors.IndexPersistError`
naming the file.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     p = pathlib.Path(d) / "a.npy"
...     write_npy(p, np.arange(6, dtype=np.int8).reshape(2, 3))
...     open_npy(p, dtypes=(np.int8,), ndim=2).tolist()
[[0, 1, 2], [3, 4, 5]]
"""

from __future__ import annotations

import math
import mmap as _mmap
import os
import tokenize
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_car._errors import IndexPersistError
from llama_index_car._files import PositionalFile, open_regular, write_error

_WRITE_BLOCK = 1 << 24
_HEADER_ERRORS = (
    ValueError,
    SyntaxError,
    TypeError,
    OverflowError,
    MemoryError,
    RecursionError,
    EOFError,
    UnicodeDecodeError,
    tokenize.TokenError,
)


def write_npy(path: Path, arr: np.ndarray) -> None:
    """``arr`` in ``np.save``'s layout (format 1.0, C order, no pickle), fsynced; a failed
    write (a full disk, a read-only mount) is an :class:`IndexPersistError` naming ``path`` and
    the cause (numpy's own writer reports a full disk as "N requested and M written")."""
    arr = np.ascontiguousarray(arr)
    try:
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(arr))
            view = arr.reshape(-1).view(np.uint8).data
            for start in range(0, len(view), _WRITE_BLOCK):
                fh.write(view[start : start + _WRITE_BLOCK])
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_error(path, exc) from exc


def open_npy(
    path: Path,
    *,
    dtypes: Sequence[Any],
    ndim: int,
    shape: Sequence[int | None] | None = None,
    mmap: bool = True,
    random_access: bool = False,
    fix: str = "write the folder again",
) -> np.ndarray:
    """The array in ``path``, read-only memory-mapped (``mmap``) or read, after the checks
    of the module docstring. ``shape``: the expected shape, ``None`` for a free dimension.
    ``random_access``: advise the kernel that the map is read at random places
    (``MADV_RANDOM``: no read-ahead, so reading one row brings in one page, not 128 KiB).
    ``fix``: what every message tells the user to do (the folder's own remedy).

    Raises:
        IndexPersistError: naming ``path``, the problem and ``fix`` (a missing file included).
    """
    fh, got_shape, dtype, offset = _checked(path, dtypes, ndim, shape, fix)
    count = math.prod(got_shape)
    with fh:
        try:
            if count == 0:
                return np.zeros(got_shape, dtype=dtype)
            if mmap:  # a plain read-only ndarray over the map (np.memmap's item access is slow)
                mm = _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_READ)
                if random_access and hasattr(mm, "madvise") and hasattr(_mmap, "MADV_RANDOM"):
                    mm.madvise(_mmap.MADV_RANDOM)
                arr = np.frombuffer(mm, dtype=dtype, count=count, offset=offset)
                return arr.reshape(got_shape)
            arr = np.fromfile(fh, dtype=dtype, count=count)
        except (OSError, ValueError) as exc:
            raise IndexPersistError(f"{path} is unreadable ({exc}); {fix}") from exc
        if arr.size != count:
            raise IndexPersistError(f"{path} was truncated while read; {fix}")
        return arr.reshape(got_shape)


def open_rows(
    path: Path,
    *,
    dtypes: Sequence[Any],
    shape: Sequence[int | None] | None = None,
    fix: str = "write the folder again",
) -> RowReader:
    """The 2-D array in ``path`` as a :class:`RowReader` (rows read with ``pread`` when
    indexed), after the checks of :func:`open_npy`."""
    fh, got_shape, dtype, offset = _checked(path, dtypes, 2, shape, fix)
    with fh:
        return RowReader(PositionalFile.of(fh, path, fix), offset, got_shape, dtype)


class RowReader:
    """Rows of a checked C-order 2-D ``.npy`` file, read with ``os.pread`` when indexed
    (``reader[i]``, ``reader[a:b]``, ``reader[int_array]``) instead of mapped: a row costs
    the reader its bytes, not a page neighbourhood left resident, so a process that reads
    rows at random does not grow with the rows it has read. ``np.asarray(reader)`` reads the
    whole array. Positional reads: safe from any thread. A file truncated after opening is a
    short read, an :class:`IndexPersistError` naming it."""

    ndim = 2

    def __init__(self, file: PositionalFile, offset: int, shape: tuple[int, ...],
                 dtype: np.dtype[Any]) -> None:
        self.path, self._file, self._offset = file.path, file, offset
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = dtype
        self._row_bytes = self.shape[1] * dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self._row_bytes

    def _read_into(self, out: np.ndarray, runs: list[tuple[int, int, int]]) -> np.ndarray:
        """Fill ``out`` from ``(row, count, at)`` runs: ``count`` file rows from ``row`` into
        ``out[at:at + count]``, one ``pread`` each."""
        view, rb = out.reshape(-1).view(np.uint8).data, self._row_bytes
        for row, count, at in runs:
            self._file.pread_into(view[at * rb : (at + count) * rb], self._offset + row * rb)
        return out

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` (clipped to the array, like a slice)."""
        start, stop, _ = slice(start, stop).indices(self.shape[0])
        count = max(0, stop - start)
        out = np.empty((count, self.shape[1]), dtype=self.dtype)
        return self._read_into(out, [(start, count, 0)])

    def take(self, index: Any) -> np.ndarray:
        """Rows ``index`` (ints, any order, repeats allowed), consecutive rows read at once.

        Raises:
            IndexError: an index out of ``[-n, n)``.
        """
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        n = self.shape[0]
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"row index out of range [0, {n}) in {self.path}")
        idx = np.where(idx < 0, idx + n, idx)
        out = np.empty((idx.size, self.shape[1]), dtype=self.dtype)
        if not idx.size:
            return out
        cut = np.flatnonzero(np.diff(idx) != 1) + 1
        starts = np.concatenate(([0], cut))
        ends = np.concatenate((cut, [idx.size]))
        runs = [(int(idx[a]), int(b - a), int(a)) for a, b in zip(starts, ends, strict=True)]
        return self._read_into(out, runs)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            if key.step not in (None, 1):
                return self.take(np.arange(self.shape[0])[key])
            return self.rows(*key.indices(self.shape[0])[:2])
        if isinstance(key, int | np.integer):
            return self.take([key])[0]
        return self.take(key)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.rows(0, self.shape[0])
        return out if dtype is None else out.astype(dtype, copy=False)

    def close(self) -> None:
        self._file.close()


def _checked(
    path: Path, dtypes: Sequence[Any], ndim: int, shape: Sequence[int | None] | None, fix: str
) -> tuple[Any, tuple[int, ...], np.dtype[Any], int]:
    """``(open file, shape, dtype, data offset)`` of ``path`` after the module's checks (the
    caller closes the file)."""
    fmt = np.lib.format
    allowed = [np.dtype(d) for d in dtypes]
    try:
        fh = open_regular(path)
    except FileNotFoundError as exc:
        raise IndexPersistError(f"{path} is missing; {fix}") from exc
    try:
        try:
            version = fmt.read_magic(fh)
            if version == (1, 0):
                got_shape, fortran, dtype = fmt.read_array_header_1_0(fh)
            elif version == (2, 0):
                got_shape, fortran, dtype = fmt.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except _HEADER_ERRORS as exc:
            raise IndexPersistError(
                f"{path} is not a readable .npy array (damaged header: {exc}); {fix}"
            ) from exc
        except OSError as exc:
            raise IndexPersistError(f"{path} is unreadable ({exc}); {fix}") from exc
        if dtype not in allowed or dtype.hasobject:
            raise IndexPersistError(
                f"{path}: dtype {dtype} is not one of {[d.name for d in allowed]}; {fix}"
            )
        if fortran or len(got_shape) != ndim or any(s < 0 for s in got_shape):
            raise IndexPersistError(
                f"{path}: expected a C-order {ndim}-D array, got shape {got_shape}"
                + (" in Fortran order" if fortran else "") + f"; {fix}"
            )
        count = math.prod(got_shape)
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
        need = offset + count * dtype.itemsize
        if need != size:  # before anything is allocated or mapped
            raise IndexPersistError(
                f"{path}: the header declares {count} entries of {dtype}, shape {got_shape} "
                f"({need} bytes with the header), the file has {size} bytes; {fix}"
            )
        if shape is not None and any(
            want is not None and want != got for want, got in zip(shape, got_shape, strict=True)
        ):
            raise IndexPersistError(
                f"{path}: expected shape {tuple(shape)}, got {got_shape}; {fix}")
    except BaseException:
        fh.close()
        raise
    return fh, tuple(got_shape), dtype, offset
