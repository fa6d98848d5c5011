"""Open a real vector store from one URI (the ``[stores]`` extra; ``llama-car index --store``).

==============================  ==========================================================
URI                             store (through its llama-index integration)
==============================  ==========================================================
``milvus://PATH.db``            Milvus Lite file (``pymilvus`` + ``milvus-lite``),
                                ``MilvusVectorStore(uri=PATH.db, dim=dim)``, inner product
``postgresql://USER:PW@HOST/DB``  PostgreSQL + pgvector, ``PGVectorStore`` (psycopg2 for
                                sync, asyncpg for async calls)
``pgserver://DIR``              a local PostgreSQL + pgvector server kept in ``DIR``
                                (``pgserver``), started on first use and stopped at exit
``qdrant://DIR``                Qdrant local mode, ``QdrantClient(path=DIR)``
``chroma://DIR``                ``chromadb.PersistentClient(DIR)``, cosine space
==============================  ==========================================================

Each store holds one collection (``collection``, default ``llama_car``; PGVectorStore stores
it in the table ``data_<collection>``). ``dim`` (the embedding dimension) is needed to create
a Milvus collection or a pgvector table. ``overwrite=True`` drops the collection first.

One process can have one Qdrant local or Milvus Lite client per path: :func:`open_vector_store`
reuses the open one, and :func:`close_vector_store` releases it (do it before another process
opens the same path). Nodes must have UUID ids and flat metadata (what ``HWPXNodeParser``
produces) for Qdrant and Chroma to accept them.

>>> store_kind("qdrant:///tmp/q")
'qdrant'
>>> store_kind("postgresql://u:p@localhost:5432/db")
'postgresql'
>>> open_vector_store("redis://x")
Traceback (most recent call last):
...
llama_index_car._errors.ConfigurationError: unsupported store URI 'redis://x'; use milvus://PATH.db, postgresql://USER:PW@HOST:PORT/DB, pgserver://DIR, qdrant://DIR or chroma://DIR
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from llama_index_car._errors import ConfigurationError, require

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.vector_stores.types import BasePydanticVectorStore

__all__ = [
    "STORE_KINDS",
    "close_vector_store",
    "fetch_embeddings",
    "open_vector_store",
    "store_kind",
]

STORE_KINDS: tuple[str, ...] = ("milvus", "postgresql", "pgserver", "qdrant", "chroma")
DEFAULT_COLLECTION = "llama_car"
_SCHEMES = {"postgres": "postgresql", "postgresql+psycopg2": "postgresql"}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_HINT = (
    "use milvus://PATH.db, postgresql://USER:PW@HOST:PORT/DB, pgserver://DIR, qdrant://DIR "
    "or chroma://DIR"
)

_lock = threading.Lock()
_clients: dict[tuple[str, str], Any] = {}  # (kind, path) -> open client / server


def store_kind(uri: str) -> str:
    """The store named by ``uri`` (one of :data:`STORE_KINDS`); ConfigurationError otherwise."""
    scheme = urlsplit(str(uri)).scheme.lower()
    kind = _SCHEMES.get(scheme, scheme)
    if kind not in STORE_KINDS:
        raise ConfigurationError(f"unsupported store URI {uri!r}; {_HINT}")
    return kind


def _path_of(uri: str) -> str:
    """``scheme://PATH`` → PATH (relative paths allowed: ``qdrant://./q`` or ``qdrant://q``)."""
    rest = str(uri).split("://", 1)[1].split("?", 1)[0]
    if not rest:
        raise ConfigurationError(f"{uri!r} names no path; {_HINT}")
    return str(Path(rest).expanduser())


def open_vector_store(
    uri: str,
    *,
    dim: int | None = None,
    collection: str = DEFAULT_COLLECTION,
    overwrite: bool = False,
) -> BasePydanticVectorStore:
    """The llama-index vector store for ``uri`` (see the module docstring).

    Raises:
        ConfigurationError: unknown scheme, bad collection name, or ``dim`` missing where the
            store needs it to create its collection.
        MissingDependencyError: the ``[stores]`` extra is not installed (the message says
            ``pip install 'llama-index-car[stores]'``).
    """
    kind = store_kind(uri)
    if not _NAME_RE.match(collection):
        raise ConfigurationError(
            f"collection={collection!r} is invalid; use letters, digits and _ (max 63)"
        )
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise ConfigurationError(f"dim={dim!r} is invalid; use the embedding dimension (>= 1)")
    if kind == "milvus":
        return _milvus(_path_of(uri), dim, collection, overwrite)
    if kind in ("postgresql", "pgserver"):
        return _postgres(uri, kind, dim, collection, overwrite)
    if kind == "qdrant":
        return _qdrant(_path_of(uri), collection, overwrite)
    return _chroma(_path_of(uri), collection, overwrite)


def close_vector_store(store: Any) -> None:
    """Release the client of ``store``: Qdrant local and Milvus Lite lock their path until
    then (another process cannot open it); PGVectorStore closes its engines."""
    with _lock:
        owned = [
            key for key, value in _clients.items()
            if value is store or value is getattr(store, "client", None)
        ]
        for key in owned:
            del _clients[key]
    name = type(store).__name__
    if name == "MilvusVectorStore":
        store.client.close()
        for _kind, path in owned:
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(path)
    elif name == "QdrantVectorStore":
        store.client.close()
    elif name == "PGVectorStore":
        import asyncio
        import inspect

        closing = store.close()
        if inspect.iscoroutine(closing):
            asyncio.run(closing)


def _close_all() -> None:
    """At exit: close the clients still open (Qdrant local otherwise complains at shutdown)."""
    with _lock:
        clients = list(_clients.items())
        _clients.clear()
    for (kind, _path), client in clients:
        if kind in ("qdrant", "milvus"):
            try:
                (client if kind == "qdrant" else client.client).close()
            except Exception:  # best effort while the interpreter shuts down
                pass


def _remember(key: tuple[str, str], client: Any) -> None:
    """Register an open client (called with ``_lock`` held); the first one arms the atexit."""
    if not _clients:
        import atexit

        atexit.register(_close_all)
    _clients[key] = client


def _shared(kind: str, path: str, open_client: Any) -> Any:
    """The process-wide client of ``kind`` at ``path``, opened once by ``open_client(path)``
    (after creating the folder) and closed at exit; local stores lock their folder."""
    with _lock:
        client = _clients.get((kind, path))
        if client is None:
            Path(path).mkdir(parents=True, exist_ok=True)
            client = open_client(path)
            _remember((kind, path), client)
    return client


def _milvus(path: str, dim: int | None, collection: str, overwrite: bool) -> Any:
    require("pymilvus", extra="stores", package="pymilvus")
    require("llama_index.vector_stores.milvus", extra="stores",
            package="llama-index-vector-stores-milvus")
    from llama_index.vector_stores.milvus import MilvusVectorStore

    if not path.endswith(".db"):
        raise ConfigurationError(f"milvus://{path}: a Milvus Lite file must end in .db")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    exists = False
    if not overwrite:
        from pymilvus import MilvusClient

        probe = MilvusClient(uri=path)
        try:
            exists = probe.has_collection(collection)
        finally:
            probe.close()
    if dim is None and not exists:
        raise ConfigurationError(f"milvus://{path}: pass dim= to create collection {collection}")
    store = MilvusVectorStore(
        uri=path, dim=dim, collection_name=collection, overwrite=overwrite,
        similarity_metric="IP", use_async_client=False,
    )
    if exists:  # a reopened Milvus Lite collection starts released
        store.client.load_collection(collection)
    with _lock:
        _remember(("milvus", path), store)
    return store


def _pg_server(path: str) -> str:
    require("pgserver", extra="stores", package="pgserver")
    import pgserver

    def start(p: str) -> Any:
        server = pgserver.get_server(p, cleanup_mode="stop")
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        return server

    return str(_shared("pgserver", path, start).get_uri())


def _postgres(uri: str, kind: str, dim: int | None, collection: str, overwrite: bool) -> Any:
    require("llama_index.vector_stores.postgres", extra="stores",
            package="llama-index-vector-stores-postgres")
    from llama_index.vector_stores.postgres import PGVectorStore
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = _pg_server(_path_of(uri)) if kind == "pgserver" else str(uri).split("?", 1)[0]
    url = make_url(base)
    sync_url = url.set(drivername="postgresql+psycopg2")
    async_url = url.set(drivername="postgresql+asyncpg")
    if url.query.get("host"):  # a unix socket directory (pgserver): asyncpg takes it as host
        async_url = async_url.set(query={k: v for k, v in url.query.items() if k != "host"},
                                  host=str(url.query["host"]))
    query = parse_qs(urlsplit(str(uri)).query)
    schema = query.get("schema", ["public"])[0]
    table = f"data_{collection}"
    engine = create_engine(sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            if overwrite:
                conn.execute(text(f'DROP TABLE IF EXISTS "{schema}"."{table}"'))
            exists = conn.execute(
                text("SELECT to_regclass(:name)"), {"name": f'"{schema}"."{table}"'}
            ).scalar()
            if dim is None and exists is not None:
                found = (
                    conn.execute(
                        text(
                            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(:n) "
                            "AND attname = 'embedding'"
                        ),
                        {"n": f'"{schema}"."{table}"'},
                    ).scalar()
                )
                dim = int(found) if found else None
    finally:
        engine.dispose()
    if dim is None:
        raise ConfigurationError(f"{uri}: pass dim= to create the table {table}")
    return PGVectorStore.from_params(
        connection_string=sync_url.render_as_string(hide_password=False),
        async_connection_string=async_url.render_as_string(hide_password=False),
        table_name=collection,
        schema_name=schema,
        embed_dim=dim,
    )


def _qdrant(path: str, collection: str, overwrite: bool) -> Any:
    require("qdrant_client", extra="stores", package="qdrant-client")
    require("llama_index.vector_stores.qdrant", extra="stores",
            package="llama-index-vector-stores-qdrant")
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    client = _shared("qdrant", path, lambda p: QdrantClient(path=p))
    if overwrite and client.collection_exists(collection):
        client.delete_collection(collection)
    return QdrantVectorStore(client=client, collection_name=collection)


def _chroma(path: str, collection: str, overwrite: bool) -> Any:
    require("chromadb", extra="stores", package="chromadb")
    require("llama_index.vector_stores.chroma", extra="stores",
            package="llama-index-vector-stores-chroma")
    import chromadb
    from llama_index.vector_stores.chroma import ChromaVectorStore

    client = _shared("chroma", path, lambda p: chromadb.PersistentClient(path=p))
    if overwrite:
        try:
            client.delete_collection(collection)
        except Exception:  # chromadb raises its own NotFoundError types across versions
            pass
    coll = client.get_or_create_collection(collection, metadata={"hnsw:space": "cosine"})
    return ChromaVectorStore(chroma_collection=coll)


def fetch_embeddings(store: Any, node_ids: list[str], batch: int = 500) -> dict[str, list[float]]:
    """``{node_id: vector}`` for the ids the store can return vectors for (may be partial).

    Uses ``store.get_nodes`` (Milvus, pgvector, Qdrant return vectors) and, for Chroma, the
    collection's ``get(include=["embeddings"])``; ids it cannot serve are simply absent.
    """
    out: dict[str, list[float]] = {}
    collection = getattr(store, "_collection", None)
    for start in range(0, len(node_ids), batch):
        ids = node_ids[start:start + batch]
        try:
            if type(store).__name__ == "ChromaVectorStore" and collection is not None:
                got = collection.get(ids=ids, include=["embeddings"])
                for i, vec in zip(got["ids"], got["embeddings"], strict=True):
                    out[str(i)] = [float(x) for x in vec]
                continue
            for node in store.get_nodes(node_ids=ids):
                if node.embedding is not None:
                    out[node.node_id] = list(node.embedding)
        except (NotImplementedError, AttributeError, TypeError):
            return out
    return out
