"""Record files (``_records``): round trips, lookups, and hostile folders -> typed errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._records import RecordFile, key_digest, write_records


def _items(n: int) -> list[tuple[str, bytes]]:
    return [
        (f"노드-{i}", json.dumps({"text": "설치 기준 " * (i % 7), "i": i}, ensure_ascii=False).encode())
        for i in range(n)
    ]


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    write_records(tmp_path, "nodes", _items(50))
    return tmp_path


def test_round_trip_find_and_iterate(folder: Path) -> None:
    items = _items(50)
    rf = RecordFile.open(folder, "nodes", verify="full")
    assert len(rf) == 50
    assert list(rf) == items
    for i, (k, p) in enumerate(items):
        assert rf.key(i) == k and rf.payload(i) == p and rf.json(i)["i"] == i
        assert rf.find(k) == i
    assert rf.find("없는 키") is None


def test_empty_set_and_empty_payloads(tmp_path: Path) -> None:
    write_records(tmp_path, "e", [])
    assert len(RecordFile.open(tmp_path, "e", verify="full")) == 0
    write_records(tmp_path, "z", [("a", b""), ("b", b"")])
    rf = RecordFile.open(tmp_path, "z", verify="full")
    assert [rf.payload(0), rf.payload(1)] == [b"", b""]


def test_colliding_digests_are_resolved_by_the_key_bytes(folder: Path) -> None:
    # force every digest equal: the lookup must compare keys, not trust the digest
    rf = RecordFile.open(folder, "nodes")
    np.save(folder / "nodes.key_hash.npy", np.full(50, key_digest("노드-7"), dtype=np.uint64))
    rf = RecordFile.open(folder, "nodes")
    assert rf.find("노드-7") == 7 and rf.find("노드-8") is None


def test_duplicate_keys_and_bad_items_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="duplicate"):
        write_records(tmp_path, "d", [("a", b"1"), ("a", b"2")])
    with pytest.raises(ConfigurationError):
        write_records(tmp_path, "d", [("a", "not bytes")])  # type: ignore[list-item]


def test_truncated_blob_is_refused_at_open(folder: Path) -> None:
    blob = folder / "nodes.blob"
    blob.write_bytes(blob.read_bytes()[:-10])
    with pytest.raises(IndexPersistError, match="nodes.blob"):
        RecordFile.open(folder, "nodes")


def test_offsets_out_of_range_fail_on_the_read_that_uses_them(folder: Path) -> None:
    off = np.load(folder / "nodes.offsets.npy")
    off[21] = np.uint64(1 << 60)  # record 20 ends, record 21 starts far outside the blob
    np.save(folder / "nodes.offsets.npy", off)
    rf = RecordFile.open(folder, "nodes")  # lazy: the table is not scanned at open
    assert rf.json(5)["i"] == 5
    with pytest.raises(IndexPersistError, match="nodes.offsets.npy: record 20"):
        rf.payload(20)
    with pytest.raises(IndexPersistError, match="nodes.offsets.npy"):
        RecordFile.open(folder, "nodes", verify="full")


def test_decreasing_offsets_and_long_keys_are_refused(folder: Path) -> None:
    off = np.load(folder / "nodes.offsets.npy")
    off[3], off[4] = off[4], off[3]
    np.save(folder / "nodes.offsets.npy", off)
    rf = RecordFile.open(folder, "nodes")
    with pytest.raises(IndexPersistError):
        rf.payload(3)
    kl = np.load(folder / "nodes.key_len.npy")
    kl[10] = 10**6
    np.save(folder / "nodes.key_len.npy", kl)
    with pytest.raises(IndexPersistError, match="key_len"):
        RecordFile.open(folder, "nodes").key(10)


def test_key_order_out_of_range_is_an_error_not_a_wrong_record(folder: Path) -> None:
    order = np.load(folder / "nodes.key_order.npy")
    order[:] = 10**9
    np.save(folder / "nodes.key_order.npy", order)
    with pytest.raises(IndexPersistError, match="key_order"):
        RecordFile.open(folder, "nodes").find("노드-3")


def test_huge_header_shape_is_refused_before_mapping(folder: Path) -> None:
    path = folder / "nodes.offsets.npy"
    with open(path, "wb") as fh:
        header = {"descr": "<u8", "fortran_order": False, "shape": (1 << 40,)}
        np.lib.format.write_array_header_1_0(fh, header)
    with pytest.raises(IndexPersistError, match="nodes.offsets.npy"):
        RecordFile.open(folder, "nodes")


@pytest.mark.parametrize(
    ("part", "content"),
    [
        ("nodes.meta.json", b'{"kind": "Other", "format_version": 1, "count": 50, "blob_bytes": 1}'),
        ("nodes.meta.json", b'{"kind": "CarRecords", "format_version": 9, "count": 50, "blob_bytes": 1}'),
        ("nodes.meta.json", b'{"kind": "CarRecords", "format_version": 1, "count": -1, "blob_bytes": 1}'),
        ("nodes.meta.json", b"[1, 2"),
        ("nodes.key_len.npy", b"\x93NUMPY garbage"),
    ],
)
def test_damaged_parts_are_typed_errors_naming_the_file(folder: Path, part: str, content: bytes) -> None:
    (folder / part).write_bytes(content)
    with pytest.raises(IndexPersistError, match=part.replace(".", r"\.")):
        RecordFile.open(folder, "nodes")


def test_wrong_dtype_and_missing_and_fifo_parts(folder: Path) -> None:
    np.save(folder / "nodes.key_len.npy", np.zeros(50, dtype=np.float64))
    with pytest.raises(IndexPersistError, match="dtype"):
        RecordFile.open(folder, "nodes")
    write_records(folder, "nodes", _items(50))
    os.unlink(folder / "nodes.blob")
    with pytest.raises(IndexPersistError, match="missing"):
        RecordFile.open(folder, "nodes")
    os.mkfifo(folder / "nodes.blob")
    with pytest.raises(IndexPersistError, match="regular file"):
        RecordFile.open(folder, "nodes")


def test_payload_that_is_not_json_is_a_typed_error(tmp_path: Path) -> None:
    write_records(tmp_path, "n", [("a", b"\xff\xfe")])
    with pytest.raises(IndexPersistError, match="not valid JSON"):
        RecordFile.open(tmp_path, "n").json(0)


def test_index_out_of_range_is_an_index_error(folder: Path) -> None:
    rf = RecordFile.open(folder, "nodes")
    with pytest.raises(IndexError):
        rf.payload(50)
    with pytest.raises(IndexError):
        rf.key(-1)


def _mapped(path: Path) -> bool:
    """Whether ``path`` is mapped into this process (``/proc/self/maps``)."""
    target = str(path.resolve())
    with open("/proc/self/maps") as fh:
        return any(line.rstrip("\n").endswith(target) for line in fh)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_the_blob_is_read_not_mapped(folder: Path) -> None:
    """A record costs the reader its bytes: reading every record leaves no page of the blob in
    the process (with a mapped blob they stayed resident, growing with the records read)."""
    rf = RecordFile.open(folder, "nodes")
    assert list(rf) == _items(50) and rf.payload(7) == _items(50)[7][1]
    assert not _mapped(folder / "nodes.blob")


def test_blob_truncated_after_open_is_a_typed_error_on_read(folder: Path) -> None:
    """Truncated after opening (a mapped blob raised SIGBUS and killed the process)."""
    rf = RecordFile.open(folder, "nodes")
    assert rf.payload(0) == _items(50)[0][1]
    os.truncate(folder / "nodes.blob", 10)
    with pytest.raises(IndexPersistError, match=r"nodes\.blob was truncated after it was opened"):
        rf.payload(49)
    rf.close()
    with pytest.raises(ValueError, match="closed"):
        rf.payload(0)
