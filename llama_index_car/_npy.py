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
from llama_index_car._files import open_regular, write_error

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
    fmt = np.lib.format
    allowed = [np.dtype(d) for d in dtypes]
    try:
        fh = open_regular(path)
    except FileNotFoundError as exc:
        raise IndexPersistError(f"{path} is missing; {fix}") from exc
    with fh:
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
