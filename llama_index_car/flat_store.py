"""An exact, memory-mapped flat vector store: int8 scan, certified float64 rescoring.

:class:`FlatVectorStore` is a LlamaIndex ``BasePydanticVectorStore`` (``stores_text=False``,
like ``SimpleVectorStore``, whose results it reproduces: cosine similarity, the same top-k)
built to stay fast at 10⁶ vectors:

* **Search** (:meth:`FlatState.search`): one pass over int8 codes of every row (numkong's
  SIMD int8 dot product when installed, ``scan="int8"``; else a float32 numpy matrix-vector
  product, ``scan="float32"``) gives approximate scores with a proven per-row error bound
  (:mod:`~llama_index_car._flat_math`); rows are then taken in order of their upper bound and
  rescored exactly (float64 cosine of the stored float32 vectors) until every row not
  rescored has an upper bound strictly below the k-th exact score. The result is the exact
  top-k of a brute-force float64 scan, ties broken by node id ascending.
* **Filters**: ``MetadataFilters`` mean exactly what they mean on the BM25 channel
  (``_lexical.matches`` on the node's ``metadata``; checked first by
  ``_filters.check_filters``); they are evaluated lazily, only on the rows the
  search considers, in upper-bound order.
* **Snapshots**: a :class:`FlatState` is immutable; ``add``/``delete``/``delete_nodes`` build a
  new state (appended rows in memory, a new alive mask) and swap it in under one writer lock,
  so a query that took the old state (:meth:`FlatVectorStore.snapshot`) stays correct.
  ``add`` of an id that is present replaces it.
* **Persistence**: :meth:`FlatVectorStore.persist` writes one crash-safe generation
  (``_persist.replace_dir``) of plain files bound by ``manifest.json`` (kind
  ``FlatVectorStore``, format 1): ``vectors.npy`` float32 (n, d), ``codes.npy`` int8 (n, d),
  ``scale.npy``/``code_norm.npy``/``resid.npy`` float32 (n,), ``norm.npy`` float64 (n,), the
  record sets ``nodes`` (key: node id; payload: ``{"ref": ref_doc_id, "metadata": {...}}``)
  and ``refs`` (key: ref_doc_id; payload: its node ids) of
  :mod:`~llama_index_car._records`, and ``flat.json`` (dim, count). No pickle.
  :meth:`FlatVectorStore.from_persist_dir` maps them: the small files are hashed against the
  manifest, every other file's size is checked against it, every ``.npy`` header, dtype and
  shape is checked before mapping (``_npy.open_npy``), and every record read is
  bounds-checked; any failure is an ``IndexPersistError`` naming the file. Resident memory
  after load is constant; a query touches the codes (d bytes per row) and per-row
  coefficients (12 bytes), and reads the rows it rescores with ``pread`` (not through the
  map: a mapped read would keep a 64 KiB neighbourhood resident per row).

Memory at rest per row: ``5·d + 20`` bytes of arrays plus the records; a query process
scanning int8 keeps ``d + 12`` bytes per row resident (396 MB at 10⁶ × 384).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_car import _flat_math as fm
from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._filters import check_filters, matches
from llama_index_car._flat_storage import (
    MAX_DIM,
    MAX_INT8_DIM,
    REQUIRED,
    Segment,
    memory_segment,
    read_segment,
    write_state,
)
from llama_index_car._persist import live_dir, read_manifest, replace_dir, write_manifest

__all__ = [
    "FlatState",
    "FlatVectorStore",
    "open_state",
    "write_state",
]

FLAT_FORMAT_VERSION = 1
KIND = "FlatVectorStore"
Scan = Literal["auto", "int8", "float32"]
_U32 = 2.0**-24  # unit roundoff of float32
_MAX_DIM = MAX_DIM
#: first round of rescoring: max(_POOL_PER_K·k, _FIRST_POOL) rows by upper bound (measured:
#: e5-like vectors at 10^5-10^6 need ~16·k rows for k = 100; benchmarks/dense_scale.py)
_FIRST_POOL = 256
_POOL_PER_K = 16


@lru_cache(maxsize=1)
def _numkong() -> Any:
    if importlib.util.find_spec("numkong") is None:
        return None
    import numkong

    return numkong


def resolve_scan(scan: str, dim: int) -> str:
    """``"int8"`` or ``"float32"`` for a ``scan`` option and ``dim``-dimensional vectors
    (``"auto"``: int8 with numkong up to :data:`MAX_INT8_DIM` dimensions, else float32; both
    are exact after rescoring).

    >>> resolve_scan("float32", 384), resolve_scan("auto", 3072)
    ('float32', 'float32')
    """
    if scan not in ("auto", "int8", "float32"):
        raise ConfigurationError(f"scan must be 'auto', 'int8' or 'float32', got {scan!r}")
    if scan == "auto":
        return "int8" if _numkong() is not None and dim <= MAX_INT8_DIM else "float32"
    if scan == "int8" and dim > MAX_INT8_DIM:
        raise ConfigurationError(
            f"scan='int8' takes at most {MAX_INT8_DIM} dimensions (its integer dot products must "
            f"stay exact in float32); {dim}-d vectors: use scan='float32' or 'auto'"
        )
    if scan == "int8" and _numkong() is None:
        raise ConfigurationError("scan='int8' needs numkong: pip install 'llama-index-car[fast]'")
    return scan


# ----------------------------------------------------------------------------- the state
@dataclass(frozen=True, eq=False)
class FlatState:
    """One immutable version of the store: segments and their alive masks (never changed in
    place; :meth:`plus` and :meth:`without` return new states)."""

    dim: int
    segments: tuple[Segment, ...]
    alive: tuple[np.ndarray, ...]
    scan: str

    @classmethod
    def empty(cls, dim: int, scan: str) -> FlatState:
        return cls(dim, (), (), scan)

    @property
    def count(self) -> int:
        """Live rows."""
        return int(sum(int(a.sum()) for a in self.alive))

    def _locate(self, node_id: str) -> tuple[int, int] | None:
        for s, seg in enumerate(self.segments):
            i = seg.find(node_id)
            if i is not None and self.alive[s][i]:
                return s, i
        return None

    def without(self, rows: Iterable[tuple[int, int]]) -> FlatState:
        """A state with ``(segment, row)`` pairs marked dead."""
        alive = list(self.alive)
        copied: set[int] = set()
        for s, i in rows:
            if s not in copied:
                alive[s] = alive[s].copy()
                copied.add(s)
            alive[s][i] = False
        return FlatState(self.dim, self.segments, tuple(alive), self.scan)

    def plus(
        self, vectors: np.ndarray, ids: Sequence[str],
        meta: Sequence[tuple[str | None, dict[str, Any]]],
    ) -> FlatState:
        """A state with rows appended (ids present are replaced). The last in-memory segment
        is copied with them appended (old states keep theirs); only new rows are quantized."""
        state = self.without(p for p in map(self._locate, ids) if p is not None)
        segs, alive = list(state.segments), list(state.alive)
        last = None
        mask = np.ones(len(ids), dtype=bool)
        if segs and segs[-1].records is None:
            last = segs.pop()
            mask = np.concatenate([alive.pop(), mask])
        segs.append(memory_segment(vectors, ids, meta, before=last))
        alive.append(mask)
        return FlatState(self.dim, tuple(segs), tuple(alive), self.scan)

    # ------------------------------------------------------------------ search
    def _row(self, g: int, starts: np.ndarray) -> tuple[Segment, int]:
        s = int(np.searchsorted(starts, g, side="right")) - 1
        return self.segments[s], g - int(starts[s])

    def _exact(self, rows: np.ndarray, starts: np.ndarray, q: np.ndarray, qn: float) -> np.ndarray:
        """Exact float64 cosines of the global ``rows`` (one gather per segment)."""
        out = np.zeros(rows.size, dtype=np.float64)
        seg_of = np.searchsorted(starts, rows, side="right") - 1
        for s in np.unique(seg_of).tolist():
            pick = np.flatnonzero(seg_of == s)
            local = rows[pick] - int(starts[s])
            seg = self.segments[s]
            order = np.argsort(local, kind="stable")  # ascending reads of the map
            vecs = seg.rows(local[order])
            norm = np.asarray(seg.norm[local[order]], dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                cos = np.where(norm > 0, (vecs @ q) / (norm * qn), 0.0)
            out[pick[order]] = cos
        if not np.isfinite(out).all():
            raise IndexPersistError("a stored vector is not finite: the vectors file is damaged")
        return out

    def _upper(self, q: np.ndarray, qn: float) -> tuple[np.ndarray, np.ndarray]:
        """``(upper, bound)``: an upper bound of every row's cosine to ``q`` (dead rows: -inf)
        from the first pass (int8 codes, or float32 vectors), and the half-width of the
        interval (``upper − 2·bound`` is a lower bound)."""
        parts, bounds = [], []
        if self.scan == "int8":
            qc, qs, qr, _ = fm.quantize_query(q)
            nk = _numkong()
        else:
            q32 = q.astype(np.float32)
            q_err = float(np.linalg.norm(q - q32.astype(np.float64)))
            gamma = self.dim * _U32 / (1 - self.dim * _U32)
        for seg, mask in zip(self.segments, self.alive, strict=True):
            if seg.size == 0:
                continue
            if self.scan == "int8":
                son, cnn, ron = seg.coefficients()
                dots = np.asarray(nk.cdist(seg.codes, qc[None, :], metric="dot",
                                           out_dtype="float32")).reshape(-1)
                # cos ≈ dots·s·t/(‖x‖‖q‖), error <= (‖s·c‖‖e_q‖ + ‖e_x‖‖q‖)/(‖x‖‖q‖); float32
                # arithmetic on values <= ~1 errs by < 1e-6 (SLACK32)
                bnd = cnn * np.float32(qr / qn)
                bnd += ron
                bnd += np.float32(fm.SLACK32)
                up = son * np.float32(qs / qn)
                np.multiply(dots, up, out=up)
                up += bnd
            else:
                norm = np.asarray(seg.norm, dtype=np.float64)
                a = np.asarray(seg.vectors @ q32, dtype=np.float64)
                # |fl(x·q32) − x·q32| <= γ_d·‖x‖‖q32‖; |x·(q − q32)| <= ‖x‖·‖q − q32‖
                e = norm * (gamma * float(np.linalg.norm(q32)) * (1 + 1e-6) + q_err) + fm.SLACK
                with np.errstate(divide="ignore", invalid="ignore"):
                    bnd = np.where(norm > 0, e / (norm * qn), fm.SLACK)
                    up = np.where(norm > 0, a / (norm * qn), 0.0) + bnd
            if not mask.all():
                up = np.where(mask, up, -np.inf)
            parts.append(up)
            bounds.append(bnd)
        if not parts:
            return np.zeros(0), np.zeros(0)
        if len(parts) == 1:
            return parts[0], bounds[0]
        return np.concatenate(parts), np.concatenate(bounds)

    def search(
        self,
        query: Sequence[float] | np.ndarray,
        k: int,
        filters: MetadataFilters | None = None,
        node_ids: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """The exact top-``k`` ``(node id, cosine)`` among live rows passing ``filters``
        (and among ``node_ids`` when given): cosine desc, then id asc."""
        check_filters(filters)
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        if q.shape[0] != self.dim:
            raise ConfigurationError(f"query has {q.shape[0]} dimensions, the store {self.dim}")
        if not np.isfinite(q).all():
            raise ConfigurationError("the query embedding holds NaN or infinity")
        k = int(k)
        qn = float(np.linalg.norm(q))
        if k <= 0 or not self.segments or qn == 0:
            return []
        starts = np.cumsum([0] + [s.size for s in self.segments])[:-1]
        passes: dict[int, bool] = {}

        def keep(g: int) -> bool:
            if filters is None or not filters.filters:
                return True
            if g not in passes:
                seg, i = self._row(g, starts)
                passes[g] = matches(filters, seg.meta(i)[1])
            return passes[g]

        if node_ids is not None:
            rows = []
            for nid in dict.fromkeys(node_ids):
                loc = self._locate(nid)
                if loc is not None:
                    rows.append(int(starts[loc[0]]) + loc[1])
            cand = np.asarray([g for g in rows if keep(g)], dtype=np.int64)
            return self._best(cand, self._exact(cand, starts, q, qn), starts, k)
        upper, _ = self._upper(q, qn)
        n = upper.size
        considered = np.zeros(n, dtype=bool)
        m = min(n, max(_POOL_PER_K * k, _FIRST_POOL))
        rows_done: list[np.ndarray] = []
        scores_done: list[np.ndarray] = []
        while True:
            if m < n:
                part = np.argpartition(-upper, m)
                top, rest = part[:m], float(upper[part[m]])  # rest >= every row outside top
            else:
                top, rest = np.arange(n), -np.inf
            new = top[~considered[top] & (upper[top] > -np.inf)]
            considered[top] = True
            new = new[np.lexsort((new, -upper[new]))]
            if filters is not None and filters.filters:
                new = np.asarray([g for g in new.tolist() if keep(g)], dtype=np.int64)
            rows_done.append(new)
            scores_done.append(self._exact(new, starts, q, qn))
            got = np.concatenate(scores_done)
            kth = float(np.partition(got, got.size - k)[got.size - k]) if got.size >= k else None
            if rest == -np.inf or fm.certified(rest, kth) or m >= n:
                break
            m = min(n, m * 4)
        return self._best(np.concatenate(rows_done), np.concatenate(scores_done), starts, k)

    def _best(self, rows: np.ndarray, scores: np.ndarray, starts: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The top ``k`` by (score desc, id asc); ids are read only for the top ``k`` and
        the rows tied with the k-th score."""
        if rows.size > k:
            kth = np.partition(scores, rows.size - k)[rows.size - k]
            pick = np.flatnonzero(scores >= kth)
            rows, scores = rows[pick], scores[pick]
        ids = []
        for g in rows.tolist():
            seg, i = self._row(g, starts)
            ids.append(seg.node_id(i))
        ranked = sorted(zip(ids, scores.tolist(), strict=True), key=lambda t: (-t[1], t[0]))
        return ranked[:k]

    # ------------------------------------------------------------------ iteration
    def live_rows(self) -> Iterable[tuple[Segment, int]]:
        for seg, mask in zip(self.segments, self.alive, strict=True):
            for i in np.flatnonzero(mask).tolist():
                yield seg, i


# ----------------------------------------------------------------------------- the store
class FlatVectorStore(BasePydanticVectorStore):
    """Exact flat vector store over memory-mapped arrays (see the module docstring).

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> from llama_index.core.vector_stores.types import VectorStoreQuery
        >>> store = FlatVectorStore(dim=2)
        >>> _ = store.add([TextNode(id_="a", embedding=[1.0, 0.0]), TextNode(id_="b", embedding=[0.6, 0.8])])
        >>> store.query(VectorStoreQuery(query_embedding=[0.0, 1.0], similarity_top_k=1)).ids
        ['b']
    """

    stores_text: bool = False
    flat_metadata: bool = False
    dim: int = Field(gt=0, le=_MAX_DIM, description="Vector dimensions.")
    scan: Scan = Field(
        default="auto",
        description="First pass: 'int8' (numkong SIMD codes), 'float32' (numpy) or 'auto' "
        "(int8 when numkong is installed and dim <= 1040). Results are exact either way.",
    )
    _state: FlatState = PrivateAttr()
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self._state = FlatState.empty(self.dim, resolve_scan(self.scan, self.dim))

    @classmethod
    def class_name(cls) -> str:
        return "FlatVectorStore"

    @property
    def client(self) -> Any:
        return None

    def snapshot(self) -> FlatState:
        """The current immutable state (a query pinned to it stays correct across updates)."""
        return self._state

    def __len__(self) -> int:
        return self._state.count

    def publish(self, state: FlatState) -> None:
        """Make ``state`` (of this store's dimensions) the current one: the owner of the
        rows (an index publishing its snapshots) swaps in the state it built."""
        if state.dim != self.dim:
            raise ConfigurationError(f"a {state.dim}-d state for a {self.dim}-d store")
        with self._lock:
            self._state = state

    # ------------------------------------------------------------------ writes
    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        if not nodes:
            return []
        vecs = np.asarray([n.get_embedding() for n in nodes], dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self.dim:
            raise ConfigurationError(f"embeddings must have {self.dim} dimensions, got {vecs.shape}")
        if not np.isfinite(vecs).all():
            raise ConfigurationError("an embedding holds NaN or infinity")
        ids = [n.node_id for n in nodes]
        if len(set(ids)) != len(ids):
            raise ConfigurationError("duplicate node ids in one add")
        meta = [(n.ref_doc_id, json.loads(json.dumps(dict(n.metadata), ensure_ascii=False)))
                for n in nodes]
        with self._lock:
            self._state = self._state.plus(vecs, ids, meta)
        return ids

    def add_vectors(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[dict[str, Any]] | None = None,
        ref_doc_ids: Sequence[str | None] | None = None,
    ) -> None:
        """Bulk :meth:`add` from arrays (no ``BaseNode`` per row): ``vectors`` (n, dim),
        ``metadata`` JSON-serialisable dicts (default empty), ``ref_doc_ids`` (default None)."""
        vecs = np.asarray(vectors, dtype=np.float32)
        n = len(ids)
        if vecs.ndim != 2 or vecs.shape != (n, self.dim):
            raise ConfigurationError(f"vectors must have shape ({n}, {self.dim}), got {vecs.shape}")
        if not np.isfinite(vecs).all():
            raise ConfigurationError("a vector holds NaN or infinity")
        if len(set(ids)) != n:
            raise ConfigurationError("duplicate ids in one add")
        mds = list(metadata) if metadata is not None else [{}] * n
        refs = list(ref_doc_ids) if ref_doc_ids is not None else [None] * n
        if len(mds) != n or len(refs) != n:
            raise ConfigurationError("metadata and ref_doc_ids must have one entry per id")
        meta = [(r, json.loads(json.dumps(dict(m), ensure_ascii=False))) for r, m in zip(refs, mds, strict=True)]
        with self._lock:
            self._state = self._state.plus(vecs, list(ids), meta)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        with self._lock:
            st = self._state
            rows = [(s, i) for s, seg in enumerate(st.segments) for i in seg.rows_of_ref(ref_doc_id)
                    if st.alive[s][i]]
            self._state = st.without(rows)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        check_filters(filters)
        with self._lock:
            st = self._state
            rows: list[tuple[int, int]] = []
            if node_ids is not None:
                rows = [p for p in map(st._locate, node_ids) if p is not None]
            if filters is not None and filters.filters:
                want = set(rows) if node_ids is not None else None
                rows = []
                for s, (seg, mask) in enumerate(zip(st.segments, st.alive, strict=True)):
                    for i in np.flatnonzero(mask).tolist():
                        if (want is None or (s, i) in want) and matches(filters, seg.meta(i)[1]):
                            rows.append((s, i))
            self._state = st.without(rows)

    def clear(self) -> None:
        with self._lock:
            self._state = FlatState.empty(self.dim, self._state.scan)

    # ------------------------------------------------------------------ query
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise ConfigurationError(f"FlatVectorStore supports the default mode, not {query.mode}")
        if query.query_embedding is None:
            raise ConfigurationError("FlatVectorStore needs a query embedding")
        state = self._state
        node_ids = query.node_ids
        if query.doc_ids is not None:
            ref_rows = [seg.node_id(i) for seg in state.segments for r in query.doc_ids
                        for i in seg.rows_of_ref(r)]
            allowed = set(ref_rows)
            node_ids = ref_rows if node_ids is None else [x for x in node_ids if x in allowed]
        hits = state.search(query.query_embedding, query.similarity_top_k, query.filters, node_ids)
        return VectorStoreQueryResult(
            ids=[h[0] for h in hits], similarities=[h[1] for h in hits], nodes=None
        )

    # ------------------------------------------------------------------ persistence
    def persist(self, persist_path: str, fs: Any = None) -> None:
        """Write the live rows as one generation of ``persist_path`` (a directory)."""
        if fs is not None:
            raise ConfigurationError("FlatVectorStore persists to a local directory (fs=None)")
        state = self._state
        with replace_dir(persist_path) as gen:
            write_state(gen, state)
            write_manifest(gen, kind=KIND, format_version=FLAT_FORMAT_VERSION,
                           meta={"dim": state.dim, "count": state.count})

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str, *, scan: Scan = "auto", verify: Literal["lazy", "full"] = "lazy"
    ) -> FlatVectorStore:
        """Open a folder written by :meth:`persist` (checks of the module docstring)."""
        root = live_dir(persist_dir)
        manifest = read_manifest(root, kind=KIND, format_versions=(FLAT_FORMAT_VERSION,),
                                 verify=(lambda n: True) if verify == "full" else
                                 (lambda n: n.endswith(".json")), required=REQUIRED)
        state = open_state(root, manifest["files"], scan=scan, verify=verify)
        store = cls(dim=state.dim, scan=scan)
        store._state = state
        return store


def open_state(
    root: Path, files: Mapping[str, Any], *, scan: Scan = "auto",
    verify: Literal["lazy", "full"] = "lazy",
) -> FlatState:
    """The state in ``root`` (the files :func:`write_state` wrote there), whose manifest
    entries ``files`` (name under ``root`` → ``{"bytes", ...}``) a caller has read: every
    required file listed, every listed file of the recorded size, then the checks of
    :func:`~llama_index_car._flat_storage.read_segment` (headers, shapes, records).

    Raises:
        IndexPersistError: naming the first file missing, of another size, or malformed.
    """
    missing = [n for n in REQUIRED if n not in files]
    if missing:
        raise IndexPersistError(f"{root}: the manifest does not list {missing}; rebuild")
    for name, entry in files.items():
        path = root / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise IndexPersistError(f"{path} is missing or its size differs from manifest.json")
    seg, dim = read_segment(root, verify)
    return FlatState(dim, (seg,), (np.ones(seg.size, dtype=bool),), resolve_scan(scan, dim))
