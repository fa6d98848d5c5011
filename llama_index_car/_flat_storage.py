"""Storage of :mod:`llama_index_car.flat_store`: segments (rows, codes, bounds, ids and
metadata), and one folder generation's files (written by
:func:`write_state`, read and checked by :func:`read_segment`; layout in the flat store's
module docstring).

>>> import numpy as np
>>> seg = memory_segment(np.eye(2, dtype=np.float32), ["a", "b"], [(None, {}), (None, {})])
>>> seg.size, seg.find("b"), seg.node_id(0)
(2, 1, 'a')
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_car import _flat_math as fm
from llama_index_car._errors import IndexPersistError
from llama_index_car._files import read_json, write_json
from llama_index_car._npy import RowReader, open_npy, open_rows, write_npy
from llama_index_car._records import RecordFile, write_records

if TYPE_CHECKING:
    from llama_index_car.flat_store import FlatState


#: the most dimensions a folder may declare (a bound on what its data makes us allocate)
MAX_DIM = 8_192
#: the most dimensions the int8 first pass takes: its dot products stay below 2**24, exact in
#: float32 (wider vectors, e.g. OpenAI's 1536/3072, are scanned in float32)
MAX_INT8_DIM = 1040


@dataclass(frozen=True, eq=False)
class Segment:
    """Rows ``0..n-1``: their vectors, int8 codes and bounds, ids and metadata (a record file
    for a loaded segment, lists for rows added in memory)."""

    vectors: np.ndarray
    codes: np.ndarray
    scale: np.ndarray
    code_norm: np.ndarray
    resid: np.ndarray
    norm: np.ndarray
    records: RecordFile | None = None
    refs: RecordFile | None = None
    rows_file: RowReader | None = None
    mem_ids: tuple[str, ...] = ()
    mem_meta: tuple[tuple[str | None, dict[str, Any]], ...] = ()
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def rows(self, local: np.ndarray) -> np.ndarray:
        """float64 vectors of the rows ``local`` (ascending): read with ``pread`` from a
        loaded segment's file (a row costs its bytes, not a mapped page neighbourhood: the
        query process's resident memory does not grow with the rows it rescores)."""
        if self.rows_file is not None:
            return self.rows_file.take(local).astype(np.float64)
        return np.asarray(self.vectors[local], dtype=np.float64)

    def coefficients(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """float32 ``(scale/‖x‖, ‖s·c‖/‖x‖, ‖e_x‖/‖x‖)`` per row (0 for a zero row; the two
        bounds rounded up), computed once per segment: 12 bytes per row."""
        got = self._cache.get("coef")
        if got is None:
            got = fm.cosine_coefficients(
                np.asarray(self.scale), np.asarray(self.code_norm), np.asarray(self.resid),
                np.asarray(self.norm),
            )
            self._cache["coef"] = got
        return got  # type: ignore[no-any-return]

    @property
    def size(self) -> int:
        return int(self.vectors.shape[0])

    def node_id(self, i: int) -> str:
        return self.records.key(i) if self.records is not None else self.mem_ids[i]

    def meta(self, i: int) -> tuple[str | None, dict[str, Any]]:
        if self.records is None:
            return self.mem_meta[i]
        rec = self.records.json(i)
        ref, md = (rec.get("ref"), rec.get("metadata")) if isinstance(rec, dict) else (None, None)
        if not (ref is None or isinstance(ref, str)) or not isinstance(md, dict):
            raise IndexPersistError(f"{self.records._paths['blob']}: record {i} is not a node record")
        return ref, md

    def find(self, node_id: str) -> int | None:
        if self.records is not None:
            return self.records.find(node_id)
        pos = self._cache.get("pos")
        if pos is None:  # built once per in-memory segment (segments never change)
            pos = self._cache["pos"] = {x: i for i, x in enumerate(self.mem_ids)}
        got: int | None = pos.get(node_id)
        return got

    def rows_of_ref(self, ref: str) -> list[int]:
        if self.records is None:
            return [i for i, (r, _) in enumerate(self.mem_meta) if r == ref]
        if self.refs is None:
            return []
        j = self.refs.find(ref)
        if j is None:
            return []
        ids = self.refs.json(j)
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            raise IndexPersistError(f"{self.refs._paths['blob']}: record {j} is not a list of ids")
        return [i for i in (self.records.find(x) for x in ids) if i is not None]


def memory_segment(
    vectors: np.ndarray, ids: Sequence[str], meta: Sequence[tuple[str | None, dict[str, Any]]],
    before: Segment | None = None,
) -> Segment:
    """An in-memory segment of ``vectors`` (quantized here), appended to ``before``'s rows
    (whose arrays are copied, not re-quantized)."""
    parts = fm.quantize_rows(vectors)
    arrays = [vectors, *parts]
    if before is not None:
        old = (before.vectors, before.codes, before.scale, before.code_norm, before.resid, before.norm)
        arrays = [np.concatenate([a, b]) for a, b in zip(old, arrays, strict=True)]
        ids, meta = [*before.mem_ids, *ids], [*before.mem_meta, *meta]
    vecs, codes, scale, code_norm, resid, norm = arrays
    return Segment(vecs, codes, scale, code_norm, resid, norm,
                    mem_ids=tuple(ids), mem_meta=tuple(meta))



ARRAYS = ("vectors", "codes", "scale", "code_norm", "resid", "norm")
REQUIRED = ("flat.json", *(f"{a}.npy" for a in ARRAYS), "nodes.meta.json", "refs.meta.json")


def write_state(gen: Path, state: FlatState) -> None:
    """The live rows of ``state`` as one segment (arrays gathered per segment, not
    re-quantized; records streamed)."""
    live = [(seg, np.flatnonzero(mask)) for seg, mask in zip(state.segments, state.alive, strict=True)]
    count = int(sum(idx.size for _, idx in live))
    for name in ARRAYS:
        parts = [np.asarray(getattr(seg, name)[idx]) for seg, idx in live]
        shape = (0, state.dim) if name in ("vectors", "codes") else (0,)
        dtype = {"vectors": np.float32, "codes": np.int8, "norm": np.float64}.get(name, np.float32)
        write_npy(gen / f"{name}.npy", np.concatenate(parts) if parts else np.zeros(shape, dtype=dtype))
    refs: dict[str, list[str]] = {}

    def node_items() -> Iterable[tuple[str, bytes]]:
        for seg, idx in live:
            for i in idx.tolist():
                nid = seg.node_id(i)
                ref, md = seg.meta(i)
                if ref is not None:
                    refs.setdefault(ref, []).append(nid)
                yield nid, json.dumps({"ref": ref, "metadata": md}, ensure_ascii=False).encode()

    write_records(gen, "nodes", node_items())
    write_records(gen, "refs", ((r, json.dumps(v, ensure_ascii=False).encode()) for r, v in refs.items()))
    write_json(gen / "flat.json", {"dim": state.dim, "count": count})


def read_segment(root: Path, verify: str) -> tuple[Segment, int]:
    info = read_json(root / "flat.json", max_bytes=4096, max_depth=1)
    dim, count = (info.get(k) if isinstance(info, dict) else None for k in ("dim", "count"))
    for key, v, hi in (("dim", dim, MAX_DIM), ("count", count, 1 << 40)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi or (key == "dim" and v == 0):
            raise IndexPersistError(f"{root / 'flat.json'}: {key} must be an int in range, got {v!r}")
    assert isinstance(dim, int) and isinstance(count, int)
    two = {"vectors": np.float32, "codes": np.int8}
    arrays = {}
    for name in ARRAYS:
        if name in two:  # vectors are read a row at a time: no read-ahead
            arrays[name] = open_npy(root / f"{name}.npy", dtypes=(two[name],), ndim=2,
                                    shape=(count, dim), random_access=name == "vectors")
        else:
            dt = np.float64 if name == "norm" else np.float32
            arrays[name] = open_npy(root / f"{name}.npy", dtypes=(dt,), ndim=1, shape=(count,))
    records = RecordFile.open(root, "nodes", verify="full" if verify == "full" else "lazy")
    refs = RecordFile.open(root, "refs", verify="full" if verify == "full" else "lazy")
    if len(records) != count:
        raise IndexPersistError(f"{root / 'nodes.meta.json'}: {len(records)} records for {count} rows")
    if verify == "full":
        for name in ("scale", "code_norm", "resid", "norm"):
            a = np.asarray(arrays[name])
            if not (np.isfinite(a).all() and (a >= 0).all()):
                raise IndexPersistError(f"{root / (name + '.npy')}: values must be finite and >= 0")
        if not math.isfinite(float(np.asarray(arrays["vectors"]).sum(dtype=np.float64))):
            raise IndexPersistError(f"{root / 'vectors.npy'}: a value is not finite")
    rows = open_rows(root / "vectors.npy", dtypes=(np.float32,), shape=(count, dim)) if count else None
    seg = Segment(arrays["vectors"], arrays["codes"], arrays["scale"], arrays["code_norm"],
                   arrays["resid"], arrays["norm"], records=records, refs=refs,
                   rows_file=rows)
    return seg, dim
