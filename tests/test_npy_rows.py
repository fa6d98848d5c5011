"""``_npy.open_rows``: rows of a checked ``.npy`` read with ``pread`` equal numpy's own
indexing of the same array, and a damaged or truncated file is a typed error naming it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from llama_index_car._errors import IndexPersistError
from llama_index_car._npy import open_rows, write_npy


@pytest.fixture()
def matrix(tmp_path: Path) -> tuple[Path, np.ndarray]:
    arr = np.random.default_rng(0).standard_normal((257, 5)).astype(np.float16)
    write_npy(tmp_path / "v.npy", arr)
    return tmp_path / "v.npy", arr


def test_every_kind_of_index_equals_numpy(matrix: tuple[Path, np.ndarray]) -> None:
    path, arr = matrix
    rows = open_rows(path, dtypes=(np.float16,))
    assert rows.shape == arr.shape and rows.dtype == arr.dtype and rows.nbytes == arr.nbytes
    rng = np.random.default_rng(1)
    for _ in range(200):  # random runs, repeats, descending and negative indices
        idx = rng.integers(-257, 257, rng.integers(0, 40))
        if rng.random() < 0.5:
            start = int(rng.integers(0, 250))
            idx = np.concatenate([idx, np.arange(start, start + int(rng.integers(1, 7)))])
        np.testing.assert_array_equal(rows[idx], arr[idx])
    for key in (slice(3, 9), slice(250, 400), slice(None), slice(9, 3), slice(1, 50, 7), 0, -1, 256):
        np.testing.assert_array_equal(rows[key], arr[key])
    np.testing.assert_array_equal(np.asarray(rows), arr)
    np.testing.assert_array_equal(np.concatenate([rows, arr[:2]]), np.concatenate([arr, arr[:2]]))
    with pytest.raises(IndexError):
        rows[[257]]
    with pytest.raises(IndexError):
        rows[-258]


def test_checks_of_open_npy_apply(matrix: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    path, _ = matrix
    with pytest.raises(IndexPersistError, match="dtype float16 is not one of"):
        open_rows(path, dtypes=(np.float32,))
    with pytest.raises(IndexPersistError, match=r"expected shape \(256, 5\)"):
        open_rows(path, dtypes=(np.float16,), shape=(256, 5))
    write_npy(tmp_path / "one.npy", np.zeros(4, dtype=np.float16))
    with pytest.raises(IndexPersistError, match="expected a C-order 2-D array"):
        open_rows(tmp_path / "one.npy", dtypes=(np.float16,))
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) - 1)
    with pytest.raises(IndexPersistError, match="the file has"):
        open_rows(path, dtypes=(np.float16,))


def test_truncated_after_open_is_a_typed_error(matrix: tuple[Path, np.ndarray]) -> None:
    path, arr = matrix
    rows = open_rows(path, dtypes=(np.float16,), fix="rebuild the index")
    np.testing.assert_array_equal(rows[[0, 1]], arr[[0, 1]])
    os.truncate(path, 200)
    with pytest.raises(IndexPersistError, match=r"v\.npy was truncated after it was opened; rebuild"):
        rows[[100]]
    rows.close()
    with pytest.raises(ValueError, match="closed"):
        rows[0:1]
