"""What a store URI names (:mod:`llama_index_car.stores` opens it): its kind, a local path
or a Milvus / Qdrant server, and a fingerprint without secrets; and the one-line error of a
store that fails, without them. Standard library only.

A server URI is ``milvus+http(s)://HOST:PORT[/DB]`` or ``qdrant+http(s)://HOST:PORT``
(:data:`SERVER_SCHEMES`): a host, a port and (Milvus) a database, nothing else. Its secret
comes only from the environment (:data:`SECRET_ENV`, read with the ``LLAMA_CAR_`` prefix), is
never recorded, and every message built here shows it as ``***`` (:func:`_safe`).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from llama_index_car._errors import ConfigurationError, StoreError

__all__ = [
    "DEFAULT_COLLECTION",
    "DEFAULT_PORTS",
    "LOCAL_KINDS",
    "SECRET_ENV",
    "SERVER_SCHEMES",
    "SERVER_TIMEOUT",
    "STORE_KINDS",
    "Server",
    "client_errors",
    "is_server_uri",
    "parse_server",
    "ping_server",
    "store_fingerprint",
    "store_error",
    "store_kind",
]

STORE_KINDS: tuple[str, ...] = ("milvus", "postgresql", "pgserver", "qdrant", "chroma")
#: kinds whose data is a local path (the others connect over the network)
LOCAL_KINDS: tuple[str, ...] = ("milvus", "pgserver", "qdrant", "chroma")
DEFAULT_COLLECTION = "llama_car"
_SCHEMES = {"postgres": "postgresql", "postgresql+psycopg2": "postgresql"}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_HINT = (
    "use milvus://PATH.db, milvus+http(s)://HOST:PORT/DB, postgresql://USER:PW@HOST:PORT/DB, "
    "pgserver://DIR, qdrant://DIR, qdrant+http(s)://HOST:PORT or chroma://DIR"
)
#: server URI schemes → (store kind, transport); ``milvus://``/``qdrant://`` stay local paths
SERVER_SCHEMES: dict[str, tuple[str, str]] = {
    "milvus+http": ("milvus", "http"), "milvus+https": ("milvus", "https"),
    "qdrant+http": ("qdrant", "http"), "qdrant+https": ("qdrant", "https"),
}
#: the port of a server URI that names none
DEFAULT_PORTS: dict[str, int] = {"milvus": 19530, "qdrant": 6333}
#: the variable (``LLAMA_CAR_`` + name, :mod:`llama_index_car._env`) holding a server's secret
SECRET_ENV: dict[str, str] = {"milvus": "MILVUS_TOKEN", "qdrant": "QDRANT_API_KEY"}
#: seconds a server client waits to connect and for each call
SERVER_TIMEOUT = 30.0


def store_kind(uri: str) -> str:
    """The store named by ``uri`` (one of :data:`STORE_KINDS`); ConfigurationError otherwise."""
    scheme = urlsplit(str(uri)).scheme.lower()
    kind = SERVER_SCHEMES[scheme][0] if scheme in SERVER_SCHEMES else _SCHEMES.get(scheme, scheme)
    if kind not in STORE_KINDS:
        raise ConfigurationError(f"unsupported store URI {uri!r}; {_HINT}")
    return kind


def store_fingerprint(uri: str) -> str:
    """What identifies the store ``uri`` names, without secrets: for PostgreSQL, the sha256
    (16 hex digits) of ``host:port/database`` and the ``schema``; for a Milvus or Qdrant
    server, of the kind, ``host:port`` and (Milvus) the database, whatever the transport;
    ``""`` for local stores, whose folder may move with the index. An index folder records it
    so that a store URI the user gives later can be checked against the one it was built with.

    >>> store_fingerprint("qdrant:///tmp/q")
    ''
    >>> a = store_fingerprint("postgresql://u:secret@db.example:5432/car")
    >>> a == store_fingerprint("postgresql://other@db.example:5432/car") and len(a)
    16
    >>> m = store_fingerprint("milvus+http://Milvus.example")
    >>> m == store_fingerprint("milvus+https://milvus.example:19530/default") and len(m)
    16
    >>> m == store_fingerprint("milvus+http://milvus.example:19531")
    False
    """
    import hashlib

    kind = store_kind(uri)
    if is_server_uri(uri):
        server = parse_server(uri)
        where = f"{kind}://{server.host}:{server.port}/{server.database}"
        return hashlib.sha256(where.encode("utf-8")).hexdigest()[:16]
    if kind != "postgresql":
        return ""
    parts = urlsplit(str(uri))
    schema = parse_qs(parts.query).get("schema", ["public"])[0]
    where = f"{(parts.hostname or '').lower()}:{parts.port or 5432}{parts.path}?schema={schema}"
    return hashlib.sha256(where.encode("utf-8")).hexdigest()[:16]


def is_server_uri(uri: str) -> bool:
    """Whether ``uri`` names a Milvus or Qdrant server (:data:`SERVER_SCHEMES`)."""
    return urlsplit(str(uri)).scheme.lower() in SERVER_SCHEMES


@dataclass(frozen=True)
class Server:
    """A Milvus or Qdrant server named by a URI: never a secret (:func:`parse_server`)."""

    kind: str
    #: ``http`` or ``https``
    transport: str
    host: str
    port: int
    #: the Milvus database (``default``); ``""`` for Qdrant
    database: str

    @property
    def url(self) -> str:
        """What the client connects to: ``transport://host:port``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.transport}://{host}:{self.port}"

    @property
    def secret(self) -> str:
        """The token or API key of this server's kind from the environment (``""``: none)."""
        from llama_index_car._env import env

        return env(SECRET_ENV[self.kind]) or ""

    def client_args(self) -> dict[str, Any]:
        """Keyword arguments of this server's client: ``pymilvus.MilvusClient`` or
        ``qdrant_client.QdrantClient`` (REST, no version probe at open)."""
        if self.kind == "milvus":
            return {"uri": self.url, "token": self.secret, "db_name": self.database,
                    "timeout": SERVER_TIMEOUT}
        return {"url": self.url, "api_key": self.secret or None, "prefer_grpc": False,
                "timeout": int(SERVER_TIMEOUT), "check_compatibility": False}


def parse_server(uri: str) -> Server:
    """The server a ``milvus+http(s)://`` or ``qdrant+http(s)://`` URI names.

    >>> parse_server("qdrant+https://q.example").url
    'https://q.example:6333'
    >>> parse_server("milvus+http://u:pw@m.example")
    Traceback (most recent call last):
    ...
    llama_index_car._errors.ConfigurationError: milvus+http://***@m.example: a server URI holds no user or password; set LLAMA_CAR_MILVUS_TOKEN instead

    Raises:
        ConfigurationError: another scheme, no host, a bad port, a user or password, a query
            string or fragment, or a path (other than a Milvus database name).
    """
    from llama_index_car._env import env_name

    text = str(uri)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in SERVER_SCHEMES:
        raise ConfigurationError(f"{_safe(text)} is not a server URI; {_HINT}")
    kind, transport = SERVER_SCHEMES[scheme]
    if "@" in parts.netloc:
        raise ConfigurationError(
            f"{_safe(text)}: a server URI holds no user or password; set "
            f"{env_name(SECRET_ENV[kind])} instead"
        )
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise ConfigurationError(f"{_safe(text)}: a server URI takes no query or fragment")
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"{_safe(text)}: the port is not a number in 1-65535") from None
    host = (parts.hostname or "").lower()
    if not host or port == 0:
        raise ConfigurationError(f"{_safe(text)}: name the server as {scheme}://HOST:PORT")
    path = parts.path.strip("/")
    if kind == "qdrant" and path:
        raise ConfigurationError(f"{_safe(text)}: a Qdrant server URI has no path")
    if path and not _NAME_RE.match(path):
        raise ConfigurationError(
            f"{_safe(text)}: the database {path!r} is invalid; use letters, digits and _ "
            "(max 63)"
        )
    database = (path or "default") if kind == "milvus" else ""
    return Server(kind, transport, host, port or DEFAULT_PORTS[kind], database)


def _path_of(uri: str) -> str:
    """``scheme://PATH`` → PATH (relative paths allowed: ``qdrant://./q`` or ``qdrant://q``)."""
    rest = str(uri).split("://", 1)[1].split("?", 1)[0]
    if not rest:
        raise ConfigurationError(f"{uri!r} names no path; {_HINT}")
    return str(Path(rest).expanduser())


def _masked(text: str) -> str:
    """``text`` with every server secret of the environment (:data:`SECRET_ENV`) as ``***``."""
    from llama_index_car._env import env

    for name in SECRET_ENV.values():
        secret = env(name)
        if secret:
            text = text.replace(secret, "***")
    return text


def _safe(uri: str) -> str:
    """``uri`` without its password (for messages).

    >>> _safe("milvus+http://root:Milvus@m.example:19530?token=x")
    'milvus+http://***@m.example:19530?***'
    >>> _safe("postgresql://car:pw@db.example/car")
    'postgresql://car:***@db.example/car'
    """
    parts = urlsplit(str(uri))
    if parts.scheme.lower() in SERVER_SCHEMES:  # a token as the user, or in a query
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rsplit("@", 1)[1]
        hidden = parts._replace(netloc=netloc, query="***" if parts.query else "",
                                fragment="***" if parts.fragment else "")
        return _masked(hidden.geturl())
    try:
        password = parts.password
    except ValueError:
        password = None
    if password is None:
        return _masked(str(uri))
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return _masked(parts._replace(netloc=netloc).geturl())


def client_errors() -> tuple[type[BaseException], ...]:
    """The exception bases of the installed store clients (and ``OSError``): what a store
    raises when it is down, refuses us or its files cannot be opened."""
    found: list[type[BaseException]] = [OSError]
    for module, name in (
        ("sqlalchemy.exc", "SQLAlchemyError"),
        ("psycopg2", "Error"),
        ("asyncpg", "PostgresError"),
        ("pymilvus.exceptions", "MilvusException"),
        ("qdrant_client.http.exceptions", "ApiException"),
        ("chromadb.errors", "ChromaError"),
    ):
        cls = getattr(sys.modules.get(module), name, None)  # only clients already in use
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def store_error(uri: str, exc: BaseException) -> StoreError:
    """One line naming the store (password hidden) and the client's first line of cause."""
    cause = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps the driver's error
    said = getattr(cause, "message", None)  # pymilvus: the server's message without the repr
    said = said if isinstance(said, str) and said.strip() else str(cause)
    lines = [ln.strip() for ln in _masked(said).splitlines() if ln.strip()]
    text = lines[0] if lines else type(cause).__name__
    return StoreError(f"cannot use the store {_safe(uri)}: {text[:300]}")


def ping_server(uri: str) -> None:
    """Connect to the Milvus or Qdrant server ``uri`` names and list its collections: a build
    calls it before it reads and embeds anything, so a server it cannot use is reported then,
    not after the embedding work.

    Raises:
        StoreError: the server cannot be reached or refuses us (one line naming the URI,
            without the secret).
    """
    server = parse_server(uri)
    try:
        with quiet_logs("pymilvus"):  # its traceback of a refused connection
            if server.kind == "milvus":
                from pymilvus import MilvusClient

                client = MilvusClient(**server.client_args())
                try:
                    client.list_collections()
                finally:
                    client.close()
            else:
                import warnings

                from qdrant_client import QdrantClient

                with warnings.catch_warnings():  # +http with a key is the user's choice
                    warnings.filterwarnings("ignore", "Api key is used with an insecure connection")
                    qclient = QdrantClient(**server.client_args())
                try:
                    qclient.get_collections()
                finally:
                    qclient.close()
    except client_errors() as exc:
        raise store_error(uri, exc) from exc


@contextlib.contextmanager
def quiet_logs(name: str) -> Iterator[None]:
    """Drop the records of the logger ``name`` and its children emitted in this thread while
    active, at the handlers of ``name`` and of the root logger (a client that logs a
    multi-line traceback of the error it then raises, which we report in one line)."""
    import logging

    me = threading.get_ident()

    def keep(record: logging.LogRecord) -> bool:
        return record.thread != me or not (record.name == name
                                           or record.name.startswith(name + "."))

    handlers = [*logging.getLogger(name).handlers, *logging.getLogger().handlers]
    for handler in handlers:
        handler.addFilter(keep)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(keep)
