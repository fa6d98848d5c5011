"""Store adapters for :class:`~llama_index_car.bm25_sparse.SparseBM25`: Milvus and Qdrant.

Each adapter is thin: it writes a :class:`~llama_index_car.bm25_sparse.DocRow` as one row (the
doc-side weights as a sparse vector, the term counts, length and write-time mean length as
scalar fields), searches by inner product, fetches rows by id and deletes them. Nothing is
created on open unless ``create=True``. Rows read back are checked (a store is as untrusted
as a folder): ``StoreError``/``IndexPersistError`` name the store and the row.

* :class:`MilvusSparse` — ``pymilvus.MilvusClient`` (Milvus Lite ``PATH.db``, a server URI
  ``milvus+http(s)://HOST:PORT/DB`` as :func:`~llama_index_car.stores.open_vector_store`
  takes it, or the client of the index's vector store), one collection: ``id`` VARCHAR primary key, ``w`` ``SPARSE_FLOAT_VECTOR`` with a
  ``SPARSE_INVERTED_INDEX`` and metric ``IP`` (exact: no ``drop_ratio``), ``dl`` INT64,
  ``avgdl`` DOUBLE, ``tf`` JSON; strong consistency; every write is flushed (Milvus Lite
  searches unflushed rows by brute force: 569 ms against 3.5 ms flushed for 6,000 rows here).
  Milvus returns at most 16,384 results per search (``max_limit``; a smaller one may be
  given).
* :class:`QdrantSparse` — ``qdrant_client.QdrantClient`` (local mode ``path=`` or a server
  ``url=``), one collection with the sparse vector ``w`` (dot product); point ids are
  ``uuid5`` of the document id, the payload holds ``doc_id``, ``dl``, ``avgdl``, ``tf``.

An index keeps its rows in the collection its generation names: :data:`BM25_COLLECTION` when
built, a fresh :func:`new_collection_name` each time an update rewrites every row at today's
mean length (:func:`bm25_collections` lists them, :func:`drop_bm25_collection` drops one).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llama_index_car._errors import ConfigurationError, StoreError, require
from llama_index_car.bm25_sparse import DocRow, parse_tf

__all__ = [
    "BM25_COLLECTION",
    "MilvusSparse",
    "QdrantSparse",
    "bm25_collections",
    "drop_bm25_collection",
    "new_collection_name",
    "sparse_backend",
]

_NS = uuid.UUID("6f1c1f0e-3b55-4c55-9a51-3f1c9e0b2d7a")
_MAX_ID_CHARS = 512


def _check_id(doc_id: str) -> str:
    if not isinstance(doc_id, str) or not 0 < len(doc_id) <= _MAX_ID_CHARS:
        raise ConfigurationError(f"document ids are 1-{_MAX_ID_CHARS} characters, got {doc_id!r}")
    return doc_id


def _row_from(doc_id: Any, dl: Any, avgdl: Any, tf: Any, where: str) -> DocRow:
    if not isinstance(doc_id, str):
        raise StoreError(f"{where}: a row has no string id")
    if not isinstance(dl, int) or isinstance(dl, bool) or dl < 0:
        raise StoreError(f"{where}: row {doc_id!r} has length {dl!r}")
    if not isinstance(avgdl, int | float) or not math.isfinite(avgdl) or avgdl < 0:
        raise StoreError(f"{where}: row {doc_id!r} has mean length {avgdl!r}")
    counts = parse_tf(tf, f"{where}: row {doc_id!r}")
    if sum(counts.values()) != dl:
        raise StoreError(f"{where}: row {doc_id!r}: term counts do not add up to its length")
    return DocRow(doc_id, {}, counts, dl, float(avgdl))


def _check_limit(max_limit: int | None, cap: int) -> int:
    if max_limit is None:
        return cap
    if not isinstance(max_limit, int) or isinstance(max_limit, bool) or not 1 <= max_limit <= cap:
        raise ConfigurationError(f"max_limit must be an int in 1..{cap}, got {max_limit!r}")
    return max_limit


def _milvus_connect(uri: str) -> dict[str, Any]:
    """``MilvusClient`` arguments for a Milvus Lite ``PATH.db`` or a ``milvus+http(s)://``
    server URI (its token from ``$LLAMA_CAR_MILVUS_TOKEN``)."""
    from llama_index_car.stores import is_server_uri, parse_server

    if not is_server_uri(uri):
        return {"uri": uri}
    server = parse_server(uri)
    if server.kind != "milvus":
        raise ConfigurationError(f"{uri} is not a Milvus server URI")
    return server.client_args()


class MilvusSparse:
    """BM25 rows in a Milvus collection (module docstring)."""

    #: Milvus's own cap on the results of one search
    CAP = 16384

    def __init__(
        self, uri: str | Any, collection: str = "car_bm25", *, create: bool = False,
        overwrite: bool = False, max_limit: int | None = None,
    ) -> None:
        require("pymilvus", extra="stores", package="pymilvus")
        from pymilvus import DataType, MilvusClient

        #: most results one search asks for
        self.max_limit = _check_limit(max_limit, self.CAP)
        self.where = f"milvus {collection}"
        self.collection = collection
        # a Lite path, a server URI, or the open client of the index's vector store (one
        # Milvus Lite per path)
        self.client = MilvusClient(**_milvus_connect(uri)) if isinstance(uri, str) else uri
        if overwrite and self.client.has_collection(collection):
            self.client.drop_collection(collection)
        if not self.client.has_collection(collection):
            if not create:
                raise ConfigurationError(f"{self.where}: no such collection (nothing is created)")
            schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=_MAX_ID_CHARS)
            schema.add_field("w", DataType.SPARSE_FLOAT_VECTOR)
            schema.add_field("dl", DataType.INT64)
            schema.add_field("avgdl", DataType.DOUBLE)
            schema.add_field("tf", DataType.JSON)
            index = self.client.prepare_index_params()
            index.add_index(field_name="w", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
            self.client.create_collection(collection, schema=schema, index_params=index,
                                          consistency_level="Strong")
        self.client.load_collection(collection)

    def upsert(self, rows: Sequence[DocRow]) -> None:
        if rows:
            self.client.upsert(self.collection, [
                {"id": _check_id(r.doc_id), "w": dict(r.weights), "dl": r.doc_len,
                 "avgdl": r.avgdl, "tf": {str(t): c for t, c in r.tf.items()}}
                for r in rows
            ])
            self.client.flush(self.collection)

    def delete(self, doc_ids: Sequence[str]) -> None:
        if doc_ids:
            self.client.delete(self.collection, ids=[_check_id(d) for d in doc_ids])
            self.client.flush(self.collection)

    def search(self, weights: Mapping[int, float], limit: int) -> list[tuple[str, float]]:
        res = self.client.search(
            self.collection, data=[dict(weights)], anns_field="w", limit=int(limit),
            search_params={"metric_type": "IP", "params": {}}, output_fields=[],
        )
        return [(str(h["id"]), float(h["distance"])) for h in res[0]]

    def fetch(self, doc_ids: Sequence[str]) -> dict[str, DocRow]:
        if not doc_ids:
            return {}
        got = self.client.get(self.collection, ids=[_check_id(d) for d in doc_ids],
                              output_fields=["dl", "avgdl", "tf"])
        rows = [_row_from(g.get("id"), g.get("dl"), g.get("avgdl"), g.get("tf"), self.where)
                for g in got]
        return {r.doc_id: r for r in rows}

    def ids(self) -> list[str]:
        it = self.client.query_iterator(self.collection, batch_size=1000, filter='id != ""',
                                        output_fields=["id"])
        out: list[str] = []
        try:
            while batch := it.next():
                out.extend(str(r["id"]) for r in batch)
        finally:
            it.close()
        return out

    def scan(self, batch: int) -> Iterator[list[DocRow]]:
        it = self.client.query_iterator(self.collection, batch_size=int(batch),
                                        filter='id != ""', output_fields=["dl", "avgdl", "tf"])
        try:
            while got := it.next():
                yield [_row_from(g.get("id"), g.get("dl"), g.get("avgdl"), g.get("tf"),
                                 self.where) for g in got]
        finally:
            it.close()

    def drop(self) -> None:
        """Drop the collection."""
        if self.client.has_collection(self.collection):
            self.client.drop_collection(self.collection)

    def close(self) -> None:
        self.client.close()


class QdrantSparse:
    """BM25 rows in a Qdrant collection (module docstring)."""

    #: most results one search asks for by default
    CAP = 100_000

    def __init__(
        self, client: Any, collection: str = "car_bm25", *, create: bool = False,
        overwrite: bool = False, lock: Any = None, max_limit: int | None = None,
    ) -> None:
        require("qdrant_client", extra="stores", package="qdrant-client")
        from qdrant_client import models

        #: most results one search asks for
        self.max_limit = _check_limit(max_limit, self.CAP)

        self.models = models
        # a local client is shared with the vector store: its calls hold the store's lock
        self.client = client if lock is None else _Locked(client, lock)
        client = self.client
        self.collection = collection
        self.where = f"qdrant {collection}"
        if overwrite and client.collection_exists(collection):
            client.delete_collection(collection)
        if not client.collection_exists(collection):
            if not create:
                raise ConfigurationError(f"{self.where}: no such collection (nothing is created)")
            client.create_collection(
                collection, vectors_config={},
                sparse_vectors_config={"w": models.SparseVectorParams()},
            )

    @staticmethod
    def point_id(doc_id: str) -> str:
        return str(uuid.uuid5(_NS, _check_id(doc_id)))

    def upsert(self, rows: Sequence[DocRow]) -> None:
        m = self.models
        if rows:
            self.client.upsert(self.collection, points=[
                m.PointStruct(
                    id=self.point_id(r.doc_id),
                    vector={"w": m.SparseVector(indices=list(r.weights), values=list(r.weights.values()))},
                    payload={"doc_id": r.doc_id, "dl": r.doc_len, "avgdl": r.avgdl,
                             "tf": {str(t): c for t, c in r.tf.items()}},
                )
                for r in rows
            ])

    def delete(self, doc_ids: Sequence[str]) -> None:
        if doc_ids:
            self.client.delete(self.collection, points_selector=self.models.PointIdsList(
                points=[self.point_id(d) for d in doc_ids]))

    def search(self, weights: Mapping[int, float], limit: int) -> list[tuple[str, float]]:
        m = self.models
        res = self.client.query_points(
            self.collection, query=m.SparseVector(indices=list(weights), values=list(weights.values())),
            using="w", limit=int(limit), with_payload=["doc_id"],
        )
        out = []
        for p in res.points:
            doc_id = (p.payload or {}).get("doc_id")
            if not isinstance(doc_id, str):
                raise StoreError(f"{self.where}: point {p.id} has no doc_id")
            out.append((doc_id, float(p.score)))
        return out

    def fetch(self, doc_ids: Sequence[str]) -> dict[str, DocRow]:
        if not doc_ids:
            return {}
        got = self.client.retrieve(self.collection, ids=[self.point_id(d) for d in doc_ids],
                                   with_payload=True)
        rows = [self._row(p) for p in got]
        return {r.doc_id: r for r in rows}

    def _row(self, p: Any) -> DocRow:
        pl = p.payload or {}
        row = _row_from(pl.get("doc_id"), pl.get("dl"), pl.get("avgdl"), pl.get("tf"), self.where)
        if self.point_id(row.doc_id) != str(p.id):
            raise StoreError(f"{self.where}: point {p.id} holds another document's row")
        return row

    def scan(self, batch: int) -> Iterator[list[DocRow]]:
        offset = None
        while True:
            points, offset = self.client.scroll(self.collection, limit=int(batch),
                                                offset=offset, with_payload=True)
            if points:
                yield [self._row(p) for p in points]
            if offset is None:
                return

    def drop(self) -> None:
        """Drop the collection."""
        if self.client.collection_exists(self.collection):
            self.client.delete_collection(self.collection)

    def ids(self) -> list[str]:
        out: list[str] = []
        offset = None
        while True:
            points, offset = self.client.scroll(self.collection, limit=1000, offset=offset,
                                                with_payload=["doc_id"])
            out.extend(str((p.payload or {}).get("doc_id")) for p in points)
            if offset is None:
                return out


class _Locked:
    """A Qdrant local client whose calls made through it hold ``lock`` (the lock of the
    vector store sharing the client: local mode is not thread-safe)."""

    def __init__(self, client: Any, lock: Any) -> None:
        self._client, self._lock = client, lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


#: the collection of a store-kept index's BM25 rows (next to the vectors' collection)
BM25_COLLECTION = "llama_car_bm25"
#: the names of BM25 collections: the built one, and those updates write (a 32-hex suffix)
_COLLECTION_RE = re.compile(r"^llama_car_bm25(_[0-9a-f]{32})?$")


def check_collection(name: Any, where: str) -> str:
    """``name`` if it is a BM25 collection's name (it is read from a folder: untrusted)."""
    if not isinstance(name, str) or not _COLLECTION_RE.match(name):
        raise StoreError(f"{where}: {name!r} is not a BM25 collection name")
    return name


def new_collection_name() -> str:
    """A fresh BM25 collection name (``llama_car_bm25_`` and 32 random hex digits)."""
    return f"{BM25_COLLECTION}_{uuid.uuid4().hex}"


def _kind(vector_store: Any) -> str | None:
    name = type(vector_store).__name__
    if name == "MilvusVectorStore":
        return "milvus"
    if name in ("QdrantVectorStore", "LockedQdrantVectorStore"):
        return "qdrant"
    return None


def sparse_backend(
    vector_store: Any, *, create: bool = False, collection: str = BM25_COLLECTION,
    max_limit: int | None = None,
) -> MilvusSparse | QdrantSparse | None:
    """The BM25 rows' backend on the client of ``vector_store`` (Milvus or Qdrant, as opened
    by :func:`llama_index_car.stores.open_vector_store`), ``None`` for any other store (it
    keeps BM25 in the folder). ``create=True`` (a new build, or an update's new collection)
    replaces the collection."""
    collection = check_collection(collection, "sparse_backend")
    kind = _kind(vector_store)
    if kind == "milvus":
        return MilvusSparse(vector_store.client, collection, create=create, overwrite=create,
                            max_limit=max_limit)
    if kind == "qdrant":
        lock = getattr(vector_store, "_car_lock", None)
        return QdrantSparse(vector_store.client, collection, create=create, overwrite=create,
                            lock=lock, max_limit=max_limit)
    return None


def bm25_collections(vector_store: Any) -> list[str]:
    """The BM25 collections in ``vector_store``'s Milvus or Qdrant (sorted; ``[]`` for
    another store). One store holds one index (its collection names are fixed), so every one
    but the live generation's is a leftover of an update that did not finish."""
    kind = _kind(vector_store)
    if kind == "milvus":
        names = list(vector_store.client.list_collections())
    elif kind == "qdrant":
        lock = getattr(vector_store, "_car_lock", None)
        client = vector_store.client if lock is None else _Locked(vector_store.client, lock)
        names = [c.name for c in client.get_collections().collections]
    else:
        return []
    return sorted(n for n in names if isinstance(n, str) and _COLLECTION_RE.match(n))


def drop_bm25_collection(vector_store: Any, collection: str) -> None:
    """Drop the BM25 collection ``collection`` of ``vector_store`` (absent: nothing)."""
    collection = check_collection(collection, "drop_bm25_collection")
    kind = _kind(vector_store)
    if kind == "milvus":
        if vector_store.client.has_collection(collection):
            vector_store.client.drop_collection(collection)
    elif kind == "qdrant":
        lock = getattr(vector_store, "_car_lock", None)
        client = vector_store.client if lock is None else _Locked(vector_store.client, lock)
        if client.collection_exists(collection):
            client.delete_collection(collection)
