"""``SpanIndex``: one float16 unit vector per criterion span of every node, by node id.

The spans are :func:`llama_index_car.spans.node_spans` (body segments and table rows, with
offsets and cell coordinates), embedded once with the index's embedding in the passage role
(``get_text_embedding_batch``) — through the embedding cache when the index is built by
:mod:`llama_index_car.folder`. The index is never searched on its own: a re-ranker reads
the spans of the ≤ 100 nodes of a retriever's pool (:meth:`SpanIndex.best_spans`), so the
vectors live beside the index (its folder), not in a vector store.

Storage: unit vectors as float16 (2 bytes per dimension; the cosine error this costs is
measured in ``benchmarks/span_cost.py``), one contiguous ``(n_spans, dim)`` matrix, nodes as
``[offsets[i], offsets[i+1])`` row ranges. A :class:`SpanIndex` is immutable:
:meth:`with_nodes` / :meth:`without` return a new one, so a reader holding the old one is never
disturbed by an update.

Persisted as a folder: ``spans.json`` (format, dimension, node ids, offsets, span records) and
``vectors.npy`` (float16, no pickle); inside an index generation as files read when used
(:meth:`SpanIndex.persist_records` / :meth:`SpanIndex.open_records`: a record set of each
node's span records, the row offsets, the vectors read with ``pread`` (a node's rows cost the
query process their bytes, not resident mapped pages); a node's spans are parsed and checked
when a query reads them). :meth:`SpanIndex.load` treats both as untrusted: sizes,
shapes, dtype, offsets, finiteness and record fields are checked before use, and any problem
is an :class:`~llama_index_car._errors.IndexPersistError` naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car.spans import Span, node_spans

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car._npy import RowReader

__all__ = [
    "SpanIndex",
]

SPAN_FORMAT_VERSION = 1
RECORDS_NAME = "spans.json"
#: the record-set name of an index generation's spans (:meth:`SpanIndex.persist_records`)
SPANS_NAME = "spans"
VECTORS_NAME = "vectors.npy"
#: largest ``spans.json`` read (bytes): ~1.5 KB per node at 10⁵ nodes
MAX_RECORDS_BYTES = 1 << 30
#: largest accepted span text (characters) and dimension. A table row is not cut
#: (``spans.py``): a wide row of a store-backed corpus reached 4,206 characters, so the bound
#: only refuses absurd records; ``spans.json`` as a whole is bounded by MAX_RECORDS_BYTES
MAX_SPAN_CHARS = 1 << 20
MAX_DIM = 8_192
#: rows per read when ``open_records(full=True)`` checks every stored vector is finite
_CHECK_ROWS = 1 << 16
#: largest offset or count a span record may hold (an int64, and far beyond any document)
MAX_OFFSET = 1 << 53
_KINDS = ("sentence", "row")
_OPTIONAL = ("table_index", "row", "col", "row_span", "col_span")


@dataclass(frozen=True, slots=True)
class SpanHit:
    """A node's best span for a query: the span, its cosine and its row in the index."""

    span: Span
    score: float


def _finite(cos: np.ndarray) -> np.ndarray:
    """``cos``, unless a stored span vector was not finite (a damaged vectors file)."""
    if not np.isfinite(cos).all():
        raise IndexPersistError("a span vector is not finite: the span vectors file is damaged; "
                                "rebuild the index")
    return cos


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.maximum(norms, 1e-12)


class NodeSpans(NamedTuple):
    """The spans of a list of nodes: node ``i``'s are ``spans[offsets[i]:offsets[i + 1]]``."""

    node_ids: list[str]
    offsets: np.ndarray
    spans: list[Span]


def cut_nodes(nodes: Sequence[Any]) -> NodeSpans:
    """Every node's :func:`~llama_index_car.spans.node_spans`, in node order (cut once, then
    embedded by whoever holds the vectors: a model, the embedding cache, Ray workers)."""
    ids: list[str] = []
    spans: list[Span] = []
    offsets = [0]
    for node in nodes:
        ids.append(node.node_id)
        spans.extend(node_spans(node))
        offsets.append(len(spans))
    return NodeSpans(ids, np.asarray(offsets, dtype=np.int64), spans)


class SpanIndex:
    """Span vectors of a set of nodes (module docstring).

    Build with :meth:`from_nodes`; read with :meth:`best_spans`; update with
    :meth:`with_nodes` / :meth:`without`; :meth:`persist` / :meth:`load` a folder.

    >>> from llama_index.core.schema import TextNode
    >>> node = TextNode(id_="n1", text="폭은 1.5m 이상으로 하고 높이는 2.0m 이상으로 한다.")
    >>> index = SpanIndex.from_span_vectors([node], [[[3.0, 4.0]]])
    >>> [round(float(x), 2) for x in index.span_cosines([1.0, 0.0], ["n1"])[0]]
    [0.6]
    """

    def __init__(
        self,
        node_ids: Sequence[str],
        offsets: np.ndarray,
        spans: Sequence[Span],
        vectors: np.ndarray,
    ) -> None:
        offsets = np.asarray(offsets, dtype=np.int64)
        if len(offsets) != len(node_ids) + 1 or offsets[0] != 0 or offsets[-1] != len(spans):
            raise ConfigurationError("SpanIndex: offsets do not match the nodes and spans")
        if np.any(np.diff(offsets) < 0):
            raise ConfigurationError("SpanIndex: offsets must not decrease")
        if vectors.ndim != 2 or vectors.shape[0] != len(spans):
            raise ConfigurationError("SpanIndex: one vector per span is needed")
        # lists and a dict here; a stored index (open_records) reads them from its files
        self._ids: Sequence[str] = list(node_ids)
        self._row: Mapping[str, int] = {d: i for i, d in enumerate(self._ids)}
        if len(self._row) != len(self._ids):
            raise ConfigurationError("SpanIndex: node ids must be unique")
        self._offsets = offsets
        self._spans: Sequence[Span] = list(spans)
        # float16 rows: an array here; a stored index reads them from its file (RowReader)
        self._vectors: np.ndarray | RowReader = np.ascontiguousarray(vectors, dtype=np.float16)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_nodes(
        cls, nodes: Sequence[Any], embed_model: Any, *, show_progress: bool = False
    ) -> SpanIndex:
        """Cut ``nodes`` into spans and embed them with ``embed_model`` (passage role)."""
        cut = cut_nodes(nodes)
        texts = [s.text for s in cut.spans]
        raw = embed_model.get_text_embedding_batch(texts, show_progress=show_progress) if texts else []
        return cls.from_cut(cut, raw)

    @classmethod
    def from_cut(cls, cut: NodeSpans, vectors: Any) -> SpanIndex:
        """An index over ``cut`` (:func:`cut_nodes`) with ``vectors[j]`` the embedding of
        ``cut.spans[j]`` (normalised here), e.g. read from an embedding cache.

        Raises:
            ConfigurationError: the vector count differs from the span count.
        """
        matrix = np.asarray(vectors, dtype=np.float32)
        if len(cut.spans) == 0:
            matrix = np.zeros((0, 1), dtype=np.float32)
        elif matrix.ndim != 2 or matrix.shape[0] != len(cut.spans):
            raise ConfigurationError(
                f"SpanIndex: {matrix.shape[0] if matrix.ndim else 0} vectors for "
                f"{len(cut.spans)} spans"
            )
        return cls(cut.node_ids, cut.offsets, cut.spans, _unit(matrix))

    @classmethod
    def from_span_vectors(
        cls, nodes: Sequence[Any], vectors: Sequence[Sequence[Sequence[float]]]
    ) -> SpanIndex:
        """An index from vectors embedded elsewhere (e.g. on Ray workers): ``vectors[i]`` holds
        one vector per span of ``nodes[i]``, in :func:`~llama_index_car.spans.node_spans` order.

        Raises:
            ConfigurationError: a node's vector count differs from its span count.
        """
        if len(vectors) != len(nodes):
            raise ConfigurationError(
                f"SpanIndex: {len(vectors)} vector lists for {len(nodes)} nodes"
            )
        cut = cut_nodes(nodes)
        counts = np.diff(cut.offsets)
        for node, count, vecs in zip(nodes, counts, vectors, strict=True):
            if count != len(vecs):
                raise ConfigurationError(
                    f"SpanIndex: node {node.node_id} has {count} spans but {len(vecs)} vectors"
                )
        return cls.from_cut(cut, [v for vecs in vectors for v in vecs])

    def with_nodes(self, nodes: Sequence[Any], embed_model: Any) -> SpanIndex:
        """A new index with ``nodes`` added (a node id already present is replaced)."""
        added = SpanIndex.from_nodes(nodes, embed_model)
        if added.dim and self.dim and added.dim != self.dim:
            raise ConfigurationError(
                f"span vectors are {self.dim}-d but the embedding gives {added.dim}-d ones; "
                "rebuild the index"
            )
        return SpanIndex.concat([self.without(added.node_ids), added])

    def without(self, node_ids: Iterable[str]) -> SpanIndex:
        """A new index without ``node_ids`` (unknown ids are ignored)."""
        drop = {d for d in node_ids if d in self._row}
        if not drop:
            return self
        keep = [i for i, d in enumerate(self._ids) if d not in drop]
        return self._subset(keep)

    def _subset(self, keep: Sequence[int]) -> SpanIndex:
        rows = [np.arange(self._offsets[i], self._offsets[i + 1]) for i in keep]
        sel = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        counts = [int(self._offsets[i + 1] - self._offsets[i]) for i in keep]
        return SpanIndex(
            [self._ids[i] for i in keep],
            np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
            [self._spans[int(j)] for j in sel],
            self._vectors[sel] if sel.size else self._vectors[:0],
        )

    @staticmethod
    def concat(parts: Sequence[SpanIndex]) -> SpanIndex:
        """One index of several with disjoint node ids (e.g. Ray shards)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return SpanIndex([], np.zeros(1, dtype=np.int64), [], np.zeros((0, 1), np.float16))
        dims = {p.dim for p in parts if p.n_spans}
        if len(dims) > 1:
            raise ConfigurationError(f"span vectors of different dimensions: {sorted(dims)}")
        dim = dims.pop() if dims else 1
        ids: list[str] = []
        spans: list[Span] = []
        offsets = [np.zeros(1, dtype=np.int64)]
        for p in parts:
            offsets.append(p._offsets[1:] + len(spans))
            ids.extend(p._ids)
            spans.extend(p._spans)
        vectors = [p._vectors if p.n_spans else np.zeros((0, dim), np.float16) for p in parts]
        return SpanIndex(ids, np.concatenate(offsets), spans, np.concatenate(vectors))

    # ------------------------------------------------------------------ read
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._row

    @property
    def node_ids(self) -> list[str]:
        return list(self._ids)

    @property
    def n_spans(self) -> int:
        return len(self._spans)

    @property
    def dim(self) -> int:
        return int(self._vectors.shape[1]) if self._spans else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the vector matrix."""
        return int(self._vectors.nbytes)

    def spans_of(self, node_id: str) -> list[Span]:
        i = self._row[node_id]
        return list(self._spans[int(self._offsets[i]) : int(self._offsets[i + 1])])

    def _query(self, query_vector: Sequence[float] | np.ndarray) -> np.ndarray:
        q = np.asarray(query_vector, dtype=np.float32).ravel()
        if self.n_spans and q.shape[0] != self.dim:
            raise ConfigurationError(
                f"query vector is {q.shape[0]}-d, span vectors are {self.dim}-d: the index "
                "was built with another embedding"
            )
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def span_cosines(
        self, query_vector: Sequence[float] | np.ndarray, node_ids: Sequence[str]
    ) -> list[np.ndarray | None]:
        """For each of ``node_ids`` the cosine of every one of its spans (:meth:`spans_of`
        order) with ``query_vector`` (None for a node the index does not hold)."""
        q = self._query(query_vector)
        out: list[np.ndarray | None] = []
        for d in node_ids:
            i = self._row.get(d)
            if i is None:
                out.append(None)
                continue
            rows = self._vectors[self._offsets[i] : self._offsets[i + 1]]
            out.append(_finite(rows.astype(np.float32) @ q) if len(rows)
                       else np.zeros(0, np.float32))
        return out

    def best_spans(
        self, query_vector: Sequence[float] | np.ndarray, node_ids: Sequence[str]
    ) -> list[SpanHit | None]:
        """For each of ``node_ids`` its best span by cosine with ``query_vector`` (None for a
        node the index does not hold or that has no span)."""
        q = self._query(query_vector)
        out: list[SpanHit | None] = [None] * len(node_ids)
        present = [
            (j, self._row[d]) for j, d in enumerate(node_ids)
            if d in self._row and self._offsets[self._row[d] + 1] > self._offsets[self._row[d]]
        ]
        if not present:
            return out
        starts = np.asarray([self._offsets[i] for _, i in present])
        ends = np.asarray([self._offsets[i + 1] for _, i in present])
        lengths = ends - starts
        rows = np.repeat(ends - np.cumsum(lengths), lengths) + np.arange(int(lengths.sum()))
        cos = _finite(self._vectors[rows].astype(np.float32) @ q)
        bounds = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        best = np.maximum.reduceat(cos, bounds)
        for (j, _), lo, hi, b in zip(present, bounds, bounds + lengths, best, strict=True):
            k = int(lo + np.argmax(cos[lo:hi]))  # first maximum: text order breaks ties
            out[j] = SpanHit(self._spans[int(rows[k])], float(b))
        return out

    # ------------------------------------------------------------------ records
    def persist_records(self, root: str | os.PathLike[str], name: str = SPANS_NAME) -> None:
        """Write the index as files read when used (an index generation's layout): the record
        set ``NAME.*`` (:mod:`~llama_index_car._records`; record ``i``: key node ``i``'s id,
        payload the JSON list of its span records), ``NAME.rows.npy`` (int64, the nodes' row
        offsets) and ``NAME.vectors.npy`` (float16 unit vectors) in the existing ``root``."""
        import json

        from llama_index_car._npy import write_npy
        from llama_index_car._records import write_records

        out = Path(root)
        write_records(out, name, (
            (d, json.dumps([s.to_dict() for s in self.spans_of(d)], ensure_ascii=False).encode())
            for d in self._ids))
        write_npy(out / f"{name}.rows.npy", np.asarray(self._offsets, dtype=np.int64))
        write_npy(out / f"{name}.vectors.npy", np.asarray(self._vectors, dtype=np.float16))

    @classmethod
    def open_records(
        cls, root: str | os.PathLike[str], name: str = SPANS_NAME, *, nodes: int, spans: int,
        dim: int, full: bool = False,
    ) -> SpanIndex:
        """The index :meth:`persist_records` wrote, expected to hold ``nodes`` nodes and
        ``spans`` spans of ``dim`` dimensions: the row offsets are checked whole (8 bytes per
        node), the vectors read by rows with ``pread``, each node's span records parsed and checked when
        read; ``full`` also checks the record tables and that every vector is finite (else a
        non-finite cosine is an error when computed).

        Raises:
            IndexPersistError: naming the file that is missing, malformed or disagrees.
        """
        from llama_index_car._npy import open_npy, open_rows
        from llama_index_car._records import KeyPositions, RecordFile, RecordKeys

        out = Path(root)
        rf = RecordFile.open(out, name, verify="full" if full else "lazy")
        if len(rf) != nodes:
            raise IndexPersistError(f"{out / (name + '.meta.json')}: spans of {len(rf)} nodes, "
                                    f"not of the index's {nodes} nodes; rebuild the index")
        rows_path, vec_path = out / f"{name}.rows.npy", out / f"{name}.vectors.npy"
        offsets = np.asarray(open_npy(rows_path, dtypes=(np.int64,), ndim=1, shape=(nodes + 1,),
                                      fix="rebuild the index"))
        if offsets[0] != 0 or offsets[-1] != spans or (np.diff(offsets) < 0).any():
            raise IndexPersistError(f"{rows_path}: offsets do not partition the {spans} spans")
        if not 0 <= dim <= MAX_DIM or (spans and dim == 0):
            raise IndexPersistError(f"{vec_path}: dimension {dim} is out of range")
        vectors = open_rows(vec_path, dtypes=(np.float16,), shape=(spans, dim if spans else None),
                            fix="rebuild the index")
        if full and any(not np.isfinite(vectors.rows(lo, lo + _CHECK_ROWS)).all()
                        for lo in range(0, spans, _CHECK_ROWS)):
            raise IndexPersistError(f"{vec_path} holds non-finite values; rebuild the index")
        self = cls.__new__(cls)
        self._ids = RecordKeys(rf)
        self._row = KeyPositions(rf)
        self._offsets = offsets
        self._spans = _StoredSpans(rf, offsets)
        self._vectors = vectors
        return self

    # ------------------------------------------------------------------ persistence
    def persist(
        self, folder: str | os.PathLike[str], *, names: tuple[str, str] = (RECORDS_NAME, VECTORS_NAME)
    ) -> None:
        """Write ``spans.json`` and ``vectors.npy`` (or the two ``names``) into ``folder``
        (created; files fsynced by the caller's generation, see :mod:`llama_index_car._persist`)."""
        from llama_index_car._files import fsync_write, write_json

        records_name, vectors_name = names
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        write_json(
            out / records_name,
            {
                "format_version": SPAN_FORMAT_VERSION,
                "dim": self.dim,
                "node_ids": self._ids,
                "offsets": [int(x) for x in self._offsets],
                "spans": [s.to_dict() for s in self._spans],
            },
        )
        import io

        buf = io.BytesIO()
        np.save(buf, self._vectors, allow_pickle=False)
        fsync_write(out / vectors_name, buf.getvalue())

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], *, names: tuple[str, str] = (RECORDS_NAME, VECTORS_NAME)
    ) -> SpanIndex:
        """Read what :meth:`persist` wrote; every field is checked (module docstring)."""
        from llama_index_car._files import read_json

        root = Path(folder)
        records_path = root / names[0]
        try:
            data = read_json(records_path, max_bytes=MAX_RECORDS_BYTES)
        except FileNotFoundError as exc:
            raise IndexPersistError(f"{records_path} is missing; rebuild the index") from exc
        if not isinstance(data, dict) or data.get("format_version") != SPAN_FORMAT_VERSION:
            raise IndexPersistError(
                f"{records_path}: not a span index of format {SPAN_FORMAT_VERSION}; rebuild it"
            )
        ids, offsets, records, dim = (
            data.get("node_ids"), data.get("offsets"), data.get("spans"), data.get("dim")
        )
        if not (
            isinstance(ids, list) and all(isinstance(d, str) for d in ids)
            and isinstance(offsets, list)
            and all(type(o) is int and 0 <= o <= MAX_OFFSET for o in offsets)
            and isinstance(records, list) and type(dim) is int and 0 <= dim <= MAX_DIM
        ):
            raise IndexPersistError(f"{records_path}: malformed node ids, offsets, spans or dim")
        off = np.asarray(offsets, dtype=np.int64)
        if (
            len(off) != len(ids) + 1 or (len(off) and off[0] != 0)
            or np.any(np.diff(off) < 0) or int(off[-1]) != len(records)
            or len(set(ids)) != len(ids)
        ):
            raise IndexPersistError(f"{records_path}: offsets do not match the node ids and spans")
        spans = [_record(r, records_path) for r in records]
        vectors = _load_vectors(root / names[1], len(spans), dim)
        return cls(ids, off, spans, vectors)


class _StoredSpans(Sequence[Span]):
    """Span ``j`` of a stored index: its node's record parsed (and checked) when read."""

    def __init__(self, rf: Any, offsets: np.ndarray) -> None:
        self._rf, self._offsets = rf, offsets
        self._path = Path(rf._paths["blob"])
        self._cache: dict[int, list[Span]] = {}

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def node(self, i: int) -> list[Span]:
        got = self._cache.get(i)
        if got is None:
            recs = self._rf.json(i)
            want = int(self._offsets[i + 1] - self._offsets[i])
            if not isinstance(recs, list) or len(recs) != want:
                raise IndexPersistError(f"{self._path}: record {i} is not a list of its {want} "
                                        "spans; rebuild the index")
            got = [_record(r, self._path) for r in recs]
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[i] = got
        return got

    def _at(self, j: int) -> tuple[int, int]:
        i = int(np.searchsorted(self._offsets, j, side="right")) - 1
        return i, j - int(self._offsets[i])

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            a, b, step = j.indices(len(self))
            if a >= b:
                return []
            i, k = self._at(a)
            if step == 1 and b <= int(self._offsets[i + 1]):
                return self.node(i)[k : k + b - a]
            return [self[x] for x in range(a, b, step)]
        if not 0 <= int(j) < len(self):
            raise IndexError(j)
        i, k = self._at(int(j))
        return self.node(i)[k]

    def __iter__(self) -> Iterator[Span]:
        for i in range(len(self._offsets) - 1):
            yield from self.node(i)


def _record(r: Any, path: Path) -> Span:
    if not isinstance(r, dict):
        raise IndexPersistError(f"{path}: a span record is not an object")
    kind, text, start, end = r.get("kind"), r.get("text"), r.get("start"), r.get("end")
    if (
        kind not in _KINDS or not isinstance(text, str) or len(text) > MAX_SPAN_CHARS
        or type(start) is not int or type(end) is not int or not 0 <= start <= end <= MAX_OFFSET
    ):
        raise IndexPersistError(f"{path}: a span record has a bad kind, text or offsets")
    for k in _OPTIONAL:
        v = r.get(k)
        if v is not None and (type(v) is not int or not 0 <= v <= MAX_OFFSET):
            raise IndexPersistError(f"{path}: span field {k}={v!r} is not a count")
    header = r.get("header")
    if header is not None and (not isinstance(header, str) or len(header) > MAX_SPAN_CHARS):
        raise IndexPersistError(f"{path}: a span header is not a short string")
    return Span.from_dict(r)


def _load_vectors(path: Path, n: int, dim: int) -> np.ndarray:
    from llama_index_car._npy import open_npy

    # the header must declare the file's size: nothing is allocated before that check
    arr = open_npy(path, dtypes=(np.float16,), ndim=2, mmap=False, fix="rebuild the index")
    if arr.shape[0] != n or (n and arr.shape[1] != dim):
        raise IndexPersistError(
            f"{path} holds {arr.dtype} {arr.shape}, expected float16 ({n}, {dim})"
        )
    if n and not np.isfinite(arr).all():
        raise IndexPersistError(f"{path} holds non-finite values; rebuild the index")
    return arr
