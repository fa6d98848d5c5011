"""Open a real vector store from one URI (the ``[stores]`` extra; ``llama-car index --store``).

==============================  ==========================================================
URI                             store (through its llama-index integration)
==============================  ==========================================================
``milvus://PATH.db``            Milvus Lite file (``pymilvus`` + ``milvus-lite``),
                                ``MilvusVectorStore(uri=PATH.db, dim=dim)``, inner product
``milvus+http://HOST:PORT/DB``  a Milvus server (``milvus+https`` over TLS; port 19530 and
                                database ``default`` when omitted); the token is
                                ``$LLAMA_CAR_MILVUS_TOKEN`` (``user:password`` or an API key)
``postgresql://USER:PW@HOST/DB``  PostgreSQL + pgvector, ``PGVectorStore`` (psycopg2 for
                                sync, asyncpg for async calls)
``pgserver://DIR``              a local PostgreSQL + pgvector server kept in ``DIR``
                                (``pgserver``), started on first use and stopped at exit
``qdrant://DIR``                Qdrant local mode, ``QdrantClient(path=DIR)``
``qdrant+http://HOST:PORT``     a Qdrant server over REST (``qdrant+https`` over TLS; port
                                6333 when omitted); the API key is ``$LLAMA_CAR_QDRANT_API_KEY``
``chroma://DIR``                ``chromadb.PersistentClient(DIR)``, cosine space
==============================  ==========================================================

Each store holds one collection (``collection``, default ``llama_car``; PGVectorStore stores
it in the table ``data_<collection>``). ``dim`` (the embedding dimension) is needed to create
a Milvus collection or a pgvector table. ``overwrite=True`` drops the collection first.

``create=False`` (what loading an index folder uses) opens only what exists: a local path
that is missing, or a collection that is not there, is a :class:`ConfigurationError`, never a
new folder, file or database. Every SQL identifier (``schema``, the table) is checked against
``[A-Za-z_][A-Za-z0-9_]{0,62}`` and quoted by the dialect.

A server URI names a host, a port and (Milvus) a database, nothing else: a user, a password,
a query string or a fragment in it is a :class:`ConfigurationError` (its secret is not
echoed). Secrets come only from the environment (:data:`SECRET_ENV`), are sent only to the
host the URI names, and are never recorded nor printed: :func:`store_error` masks them in a
client's message. A server that cannot be reached is a one-line :class:`StoreError` naming the
URI.

One process can have one Qdrant local or Milvus Lite client per path: :func:`open_vector_store`
reuses the open one, and :func:`close_vector_store` releases it (do it before another process
opens the same path). Nodes must have UUID ids and flat metadata (what ``HWPXNodeParser``
produces) for Qdrant and Chroma to accept them.

>>> store_kind("qdrant:///tmp/q")
'qdrant'
>>> store_kind("milvus+https://milvus.example:19530")
'milvus'
>>> store_kind("postgresql://u:p@localhost:5432/db")
'postgresql'
>>> open_vector_store("redis://x")
Traceback (most recent call last):
...
llama_index_car._errors.ConfigurationError: unsupported store URI 'redis://x'; use milvus://PATH.db, milvus+http(s)://HOST:PORT/DB, postgresql://USER:PW@HOST:PORT/DB, pgserver://DIR, qdrant://DIR, qdrant+http(s)://HOST:PORT or chroma://DIR
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from llama_index_car._errors import CarError, ConfigurationError, StoreError, require
from llama_index_car._store_uris import (  # noqa: F401 - the URI grammar, re-exported
    _HINT,
    _NAME_RE,
    _SCHEMES,
    DEFAULT_COLLECTION,
    DEFAULT_PORTS,
    LOCAL_KINDS,
    SECRET_ENV,
    SERVER_SCHEMES,
    SERVER_TIMEOUT,
    STORE_KINDS,
    Server,
    _masked,
    _path_of,
    _safe,
    client_errors,
    is_server_uri,
    parse_server,
    ping_server,
    quiet_logs,
    store_error,
    store_fingerprint,
    store_kind,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.vector_stores.types import BasePydanticVectorStore

__all__ = [
    "STORE_KINDS",
    "close_vector_store",
    "fetch_embeddings",
    "open_vector_store",
]


_lock = threading.Lock()
_clients: dict[tuple[str, str], Any] = {}  # (kind, path) -> open client / server
_client_locks: dict[str, threading.RLock] = {}  # Qdrant local path -> its calls' lock


def open_vector_store(
    uri: str,
    *,
    dim: int | None = None,
    collection: str = DEFAULT_COLLECTION,
    overwrite: bool = False,
    create: bool = True,
) -> BasePydanticVectorStore:
    """The llama-index vector store for ``uri`` (see the module docstring).

    ``create=False`` opens only an existing local path and an existing collection (and never
    with ``overwrite``): nothing is created.

    Raises:
        ConfigurationError: unknown scheme, bad collection or schema name, a server URI with
            a secret, query or path in it (:func:`parse_server`), ``dim`` missing where the
            store needs it to create its collection, or (``create=False``) a missing path or
            collection.
        StoreError: the store cannot be reached or refuses us (one line naming the URI; no
            secret).
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
    if overwrite and not create:
        raise ConfigurationError("overwrite=True needs create=True")
    server = parse_server(uri) if is_server_uri(uri) else None
    path = _path_of(uri) if kind in LOCAL_KINDS and server is None else ""
    if path and not create:
        check_local_store(uri, collection)
    try:
        if kind == "milvus":
            with quiet_logs("pymilvus"):  # its tracebacks of a refused connection
                return _milvus(path or str(uri), server, dim, collection, overwrite, create)
        if kind in ("postgresql", "pgserver"):
            return _postgres(uri, kind, dim, collection, overwrite, create)
        if kind == "qdrant":
            if server is not None:
                return _qdrant_server(uri, server, collection, overwrite, create)
            return _qdrant(path, collection, overwrite, create)
        return _chroma(path, collection, overwrite, create)
    except CarError:
        raise
    except client_errors() as exc:
        raise store_error(uri, exc) from exc


#: what each local store's client has written once it holds ``collection`` (paths under the
#: store's path; ``{c}`` is the collection): a store opened with ``create=False`` must hold it,
#: else the client would create it. Milvus Lite 2.x kept one file, 3.x keeps a folder.
STORE_FILES: dict[str, tuple[tuple[str, ...], ...]] = {
    "qdrant": (("meta.json", ".lock", "collection/{c}/storage.sqlite"),),
    "chroma": (("chroma.sqlite3",),),
    "milvus": (("",), ("collections/{c}/schema.json",)),
    "pgserver": (("PG_VERSION", "postgresql.conf", "global/pg_control"),),
}


def check_local_store(uri: str, collection: str = DEFAULT_COLLECTION) -> None:
    """Refuse to open the local store ``uri`` unless its client already made it: each file of
    one of its :data:`STORE_FILES` layouts is there as a regular file (Milvus Lite 2.x: the
    path itself). Opening it then creates nothing new (a Qdrant ``.lock``, a Chroma
    ``chroma.sqlite3``, a pgserver ``initdb``): what ``create=False`` promises.

    >>> check_local_store("qdrant:///nonexistent/q")
    Traceback (most recent call last):
    ...
    llama_index_car._errors.ConfigurationError: qdrant:///nonexistent/q: no qdrant store at /nonexistent/q (meta.json, .lock, collection/llama_car/storage.sqlite missing); give the path of the store this index was built with (nothing is created when an index is opened)
    """
    import stat

    kind = store_kind(uri)
    if kind not in LOCAL_KINDS or is_server_uri(uri):
        return
    root = Path(_path_of(uri))
    missing: list[str] = []
    for layout in STORE_FILES[kind]:
        names = [n.format(c=collection) for n in layout]
        gone = []
        for name in names:
            try:
                mode = (root / name if name else root).lstat().st_mode
            except OSError:
                mode = 0
            if not stat.S_ISREG(mode):
                gone.append(name or root.name)
        if not gone:
            return
        missing = missing or gone
    raise ConfigurationError(
        f"{uri}: no {kind} store at {root} ({', '.join(missing)} missing); give the path of "
        "the store this index was built with (nothing is created when an index is opened)"
    )


def check_confined(where: Path) -> None:
    """Refuse a store folder ``where`` that its index did not create: it must be a real
    folder (not a symlink) holding only folders, regular files with one link, and sockets —
    no symlink, hard link, FIFO or device that would let a store client read or write
    outside it. (An index folder is data: whoever wrote it may have planted any of those.)"""
    import os
    import stat

    def refuse(path: Path, what: str) -> ConfigurationError:
        return ConfigurationError(
            f"{path} is {what}; the store of an index folder is a plain folder it created "
            "(rebuild the index, or pass the store's path with --store)"
        )

    try:
        top = os.lstat(where)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise refuse(where, f"unreadable ({exc.strerror})") from exc
    if stat.S_ISLNK(top.st_mode):
        raise refuse(where, "a symlink")
    if not stat.S_ISDIR(top.st_mode):
        raise refuse(where, "not a folder")
    def unreadable(exc: OSError) -> None:
        raise refuse(Path(str(exc.filename)), f"unreadable ({exc.strerror})")

    for base, dirs, files in os.walk(where, onerror=unreadable):
        for name in (*dirs, *files):
            path = Path(base) / name
            try:
                mode = os.lstat(path)
            except OSError as exc:
                raise refuse(path, f"unreadable ({exc.strerror})") from exc
            if stat.S_ISLNK(mode.st_mode):
                raise refuse(path, "a symlink")
            if stat.S_ISREG(mode.st_mode) and mode.st_nlink > 1:
                raise refuse(path, "a hard link")
            if not (stat.S_ISREG(mode.st_mode) or stat.S_ISDIR(mode.st_mode)
                    or stat.S_ISSOCK(mode.st_mode)):
                raise refuse(path, "not a regular file or folder")


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
    name = store.class_name() if hasattr(store, "class_name") else type(store).__name__
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


def _milvus(
    target: str, server: Server | None, dim: int | None, collection: str, overwrite: bool,
    create: bool,
) -> Any:
    """A ``MilvusVectorStore`` over the Milvus Lite file ``target`` or the ``server``."""
    require("pymilvus", extra="stores", package="pymilvus")
    require("llama_index.vector_stores.milvus", extra="stores",
            package="llama-index-vector-stores-milvus")
    from llama_index.vector_stores.milvus import MilvusVectorStore

    if server is None:
        if not target.endswith(".db"):
            raise ConfigurationError(f"milvus://{target}: a Milvus Lite file must end in .db")
        if create:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        where = f"milvus://{target}"
        connect: dict[str, Any] = {"uri": target}
    else:
        where = target  # the URI as given: it holds no secret (parse_server)
        connect = server.client_args()
    exists = False
    if not overwrite:
        from pymilvus import MilvusClient

        probe = MilvusClient(**connect)
        try:
            exists = probe.has_collection(collection)
        finally:
            probe.close()
    if not create and not exists:
        raise ConfigurationError(f"{where} holds no collection {collection}")
    if dim is None and not exists:
        raise ConfigurationError(f"{where}: pass dim= to create collection {collection}")
    store = MilvusVectorStore(
        **connect, dim=dim, collection_name=collection, overwrite=overwrite,
        similarity_metric="IP", use_async_client=False,
    )
    if exists:  # a reopened collection starts released
        store.client.load_collection(collection)
    if server is None:
        with _lock:
            _remember(("milvus", target), store)
    return store


def _pg_server(path: str) -> str:
    """The URI of the pgserver PostgreSQL kept in ``path``, started (``initdb`` first for a new
    folder) on first use.

    Raises:
        StoreError: ``initdb``, the server or ``CREATE EXTENSION vector`` failed: one line
            naming the folder and the command's own error (e.g. ``initdb: error: directory
            "…" exists but is not empty``); pgserver's multi-line log of it is not printed.
    """
    require("pgserver", extra="stores", package="pgserver")
    import subprocess

    import pgserver

    def start(p: str) -> Any:
        with _kept_log("pgserver") as log:
            try:
                server = pgserver.get_server(p, cleanup_mode="stop")
                server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
            except subprocess.CalledProcessError as exc:
                raise StoreError(
                    f"pgserver://{p}: cannot initialise or start PostgreSQL in {p}: "
                    f"{_command_error(log, exc)}"
                ) from exc
        return server

    return str(_shared("pgserver", path, start).get_uri())


@contextlib.contextmanager
def _kept_log(name: str) -> Iterator[list[str]]:
    """The messages the logger ``name`` emits at ERROR or above while active, kept in a list
    instead of reaching Python's last-resort handler (which prints them on stderr)."""
    import logging

    messages: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(name)
    handler = _Keep(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def _command_error(log: list[str], exc: Any) -> str:
    """The first ``error``/``FATAL`` line of the stderr pgserver logged for a failed command,
    else the command's name and exit status."""
    for message in log:
        if "stderr:" not in message:
            continue
        for line in message.rsplit("stderr:", 1)[1].splitlines():
            line = " ".join(line.split())
            if "error:" in line.lower() or line.startswith("FATAL"):
                return line[:300]
    cmd = exc.cmd[0] if isinstance(exc.cmd, list | tuple) and exc.cmd else exc.cmd
    return f"{Path(str(cmd)).name} exited with status {exc.returncode}"


def _postgres(
    uri: str, kind: str, dim: int | None, collection: str, overwrite: bool, create: bool
) -> Any:
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
    if not _NAME_RE.match(schema):
        raise ConfigurationError(
            f"schema={schema!r} is invalid; use letters, digits and _ (max 63)"
        )
    table = f"data_{collection}"
    engine = create_engine(sync_url)
    try:
        quote = engine.dialect.identifier_preparer.quote_identifier
        qualified = f"{quote(schema)}.{quote(table)}"
        with engine.begin() as conn:
            if create:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            if overwrite:
                conn.execute(text(f"DROP TABLE IF EXISTS {qualified}"))
            exists = conn.execute(text("SELECT to_regclass(:name)"), {"name": qualified}).scalar()
            if not create and exists is None:
                raise ConfigurationError(f"{_safe(uri)} holds no table {schema}.{table}")
            if dim is None and exists is not None:
                found = (
                    conn.execute(
                        text(
                            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(:n) "
                            "AND attname = 'embedding'"
                        ),
                        {"n": qualified},
                    ).scalar()
                )
                dim = int(found) if found else None
    finally:
        engine.dispose()
    if dim is None:
        raise ConfigurationError(f"{_safe(uri)}: pass dim= to create the table {table}")
    return PGVectorStore.from_params(
        connection_string=sync_url.render_as_string(hide_password=False),
        async_connection_string=async_url.render_as_string(hide_password=False),
        table_name=collection,
        schema_name=schema,
        embed_dim=dim,
    )


def _qdrant(path: str, collection: str, overwrite: bool, create: bool) -> Any:
    require("qdrant_client", extra="stores", package="qdrant-client")
    require("llama_index.vector_stores.qdrant", extra="stores",
            package="llama-index-vector-stores-qdrant")
    from qdrant_client import QdrantClient

    from llama_index_car._qdrant_local import locked_qdrant_store

    client = _shared("qdrant", path, lambda p: QdrantClient(path=p))
    with _lock:
        lock = _client_locks.setdefault(path, threading.RLock())
    with lock:
        if overwrite and client.collection_exists(collection):
            client.delete_collection(collection)
        if not create and not client.collection_exists(collection):
            raise ConfigurationError(f"qdrant://{path} holds no collection {collection}")
    return locked_qdrant_store(client, collection, lock)


def _qdrant_server(
    uri: str, server: Server, collection: str, overwrite: bool, create: bool
) -> Any:
    """A ``QdrantVectorStore`` over the Qdrant ``server`` (REST; thread-safe, so unlocked)."""
    require("qdrant_client", extra="stores", package="qdrant-client")
    require("llama_index.vector_stores.qdrant", extra="stores",
            package="llama-index-vector-stores-qdrant")
    import warnings

    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    # no version probe at open (it only warns); ``+http`` is the user's choice of a plain
    # connection (docs/STORES.md), for Qdrant as for Milvus: no warning line on each command
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Api key is used with an insecure connection")
        client = QdrantClient(**server.client_args())
    if overwrite and client.collection_exists(collection):
        client.delete_collection(collection)
    if not create and not client.collection_exists(collection):
        raise ConfigurationError(f"{uri} holds no collection {collection}")
    return QdrantVectorStore(client=client, collection_name=collection)


def _chroma(path: str, collection: str, overwrite: bool, create: bool) -> Any:
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
    if create:
        coll = client.get_or_create_collection(collection, metadata={"hnsw:space": "cosine"})
    elif collection not in {getattr(c, "name", c) for c in client.list_collections()}:
        raise ConfigurationError(f"chroma://{path} holds no collection {collection}")
    else:
        coll = client.get_collection(collection)
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
