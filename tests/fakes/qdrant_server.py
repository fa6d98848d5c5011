"""A Qdrant REST server on 127.0.0.1 backed by qdrant-client's own local engine.

No Qdrant server binary can be installed here, so this serves the part of Qdrant's REST API
(``/collections/...``) that ``qdrant_client.QdrantClient(url=..., prefer_grpc=False)`` and
llama-index's ``QdrantVectorStore`` call in our flows (create, exists, info, delete a
collection; payload index; upsert, retrieve, scroll, count, delete points; query and batch
query), over a ``QdrantClient(":memory:")``: the semantics are Qdrant local mode's. Bodies are
parsed with ``qdrant_client.http.models`` (a body the real API would reject is a 400 here
too), answers are ``{"result": ..., "status": "ok", "time": 0}``, errors
``{"status": {"error": ...}}`` with 404 for a missing collection. A route outside the subset
is a 404 naming it, recorded in :attr:`FakeQdrantServer.unknown`; an engine failure a 500,
recorded in :attr:`FakeQdrantServer.errors` (a test can assert both empty).

Every request is recorded with its ``api-key`` header (:attr:`FakeQdrantServer.requests`), so
a test can check which secret reached the server. ``api_key=`` makes the server refuse
requests without it (401), as a Qdrant server with ``service.api_key`` set does.

>>> server = FakeQdrantServer().start()
>>> server.uri.startswith("qdrant+http://127.0.0.1:")
True
>>> server.stop()
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeQdrantServer", "Seen"]


@dataclass(frozen=True)
class Seen:
    """One request the server received."""

    method: str
    path: str
    api_key: str | None


class NotFound(Exception):
    """A collection or a route that is not there (HTTP 404)."""


def _dump(value: Any) -> Any:
    """A qdrant model (or a list/tuple/dict of them) as JSON-ready data."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


class FakeQdrantServer:
    """The REST subset (module docstring) over one in-memory local engine."""

    def __init__(self, api_key: str | None = None) -> None:
        from qdrant_client import QdrantClient

        self.api_key = api_key
        self.engine = QdrantClient(":memory:")
        self.lock = threading.Lock()  # the local engine is not thread-safe
        self.requests: list[Seen] = []
        self.unknown: list[str] = []
        #: requests the engine failed on (500): a test can assert none
        self.errors: list[str] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        c = r"/collections/(?P<c>[^/]+)"
        self.routes: list[tuple[str, re.Pattern[str], Callable[..., Any]]] = [
            ("GET", re.compile(r"/"), self._root),
            ("GET", re.compile(r"/collections"), self._list),
            ("GET", re.compile(c + r"/exists"), self._exists),
            ("GET", re.compile(c), self._info),
            ("PUT", re.compile(c), self._create),
            ("DELETE", re.compile(c), self._drop),
            ("PUT", re.compile(c + r"/index"), self._payload_index),
            ("PUT", re.compile(c + r"/points"), self._upsert),
            ("POST", re.compile(c + r"/points"), self._retrieve),
            ("POST", re.compile(c + r"/points/delete"), self._delete),
            ("POST", re.compile(c + r"/points/scroll"), self._scroll),
            ("POST", re.compile(c + r"/points/count"), self._count),
            ("POST", re.compile(c + r"/points/query"), self._query),
            ("POST", re.compile(c + r"/points/query/batch"), self._query_batch),
        ]

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def uri(self) -> str:
        """The store URI of this server (``qdrant+http://127.0.0.1:PORT``)."""
        return f"qdrant+http://127.0.0.1:{self.port}"

    def start(self) -> FakeQdrantServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _any(self) -> None:
                server._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _any

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        self.engine.close()

    # ------------------------------------------------------------------ dispatch
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        key = h.headers.get("api-key")
        self.requests.append(Seen(h.command, parts.path, key))
        status, payload = 200, None
        try:
            if self.api_key is not None and key != self.api_key:
                status, payload = 401, {"status": {"error": "Invalid api-key"}, "time": 0}
            else:
                body = json.loads(raw) if raw else {}
                result = self._dispatch(h.command, parts.path, parse_qs(parts.query), body)
                payload = {"result": _dump(result), "status": "ok", "time": 0}
        except NotFound as exc:
            status, payload = 404, {"status": {"error": f"Not found: {exc}"}, "time": 0}
        except (ValueError, KeyError, TypeError) as exc:  # pydantic ValidationError included
            status, payload = 400, {"status": {"error": f"Bad request: {exc}"}, "time": 0}
        except Exception as exc:  # the engine's own failure: a 500, as a server answers
            self.errors.append(f"{h.command} {parts.path}: {type(exc).__name__}: {exc}")
            status, payload = 500, {"status": {"error": f"Service internal error: {exc}"},
                                    "time": 0}
        data = json.dumps(payload).encode("utf-8")
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _dispatch(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        for verb, pattern, handler in self.routes:
            m = pattern.fullmatch(path)
            if verb == method and m:
                with self.lock:
                    return handler(body, **m.groupdict())
        self.unknown.append(f"{method} {path}")
        raise NotFound(f"{method} {path} is not served by this fake")

    def _known(self, c: str) -> str:
        if not self.engine.collection_exists(c):
            raise NotFound(f"Collection `{c}` doesn't exist!")
        return c

    # ------------------------------------------------------------------ routes
    def _root(self, body: Any) -> Any:
        return {"title": "qdrant - vector search engine (fake over local mode)",
                "version": "1.15.0"}

    def _list(self, body: Any) -> Any:
        return self.engine.get_collections()

    def _exists(self, body: Any, c: str) -> Any:
        return {"exists": self.engine.collection_exists(c)}

    def _info(self, body: Any, c: str) -> Any:
        return self.engine.get_collection(self._known(c))

    def _create(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        req = models.CreateCollection.model_validate(body)
        if self.engine.collection_exists(c):
            raise ValueError(f"Collection `{c}` already exists!")
        return self.engine.create_collection(
            c, vectors_config=req.vectors if req.vectors is not None else {},
            sparse_vectors_config=req.sparse_vectors)

    def _drop(self, body: Any, c: str) -> Any:
        return self.engine.delete_collection(c)

    def _payload_index(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        req = models.CreateFieldIndex.model_validate(body)
        with warnings.catch_warnings():  # "payload indexes have no effect in local mode"
            warnings.simplefilter("ignore", UserWarning)
            return self.engine.create_payload_index(self._known(c), req.field_name,
                                                    field_schema=req.field_schema)

    def _upsert(self, body: Any, c: str) -> Any:
        from pydantic import TypeAdapter
        from qdrant_client.http import models

        req: Any = TypeAdapter(models.PointInsertOperations).validate_python(body)
        points = req.points if isinstance(req, models.PointsList) else req.batch
        return self.engine.upsert(self._known(c), points=points)

    def _retrieve(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        req = models.PointRequest.model_validate(body)
        return self.engine.retrieve(
            self._known(c), req.ids,
            with_payload=True if req.with_payload is None else req.with_payload,
            with_vectors=False if req.with_vector is None else req.with_vector)

    def _delete(self, body: Any, c: str) -> Any:
        from pydantic import TypeAdapter
        from qdrant_client.http import models

        req: Any = TypeAdapter(models.PointsSelector).validate_python(body)
        return self.engine.delete(self._known(c), points_selector=req)

    def _scroll(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        req = models.ScrollRequest.model_validate(body)
        points, nxt = self.engine.scroll(
            self._known(c), scroll_filter=req.filter, limit=req.limit or 10,
            order_by=req.order_by, offset=req.offset,
            with_payload=True if req.with_payload is None else req.with_payload,
            with_vectors=False if req.with_vector is None else req.with_vector)
        return models.ScrollResult(points=points, next_page_offset=nxt)

    def _count(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        req = models.CountRequest.model_validate(body)
        return self.engine.count(self._known(c), count_filter=req.filter,
                                 exact=True if req.exact is None else req.exact)

    def _one_query(self, c: str, req: Any) -> Any:
        return self.engine.query_points(
            c, query=req.query, using=req.using, prefetch=req.prefetch, query_filter=req.filter,
            search_params=req.params, limit=req.limit or 10, offset=req.offset,
            with_payload=False if req.with_payload is None else req.with_payload,
            with_vectors=False if req.with_vector is None else req.with_vector,
            score_threshold=req.score_threshold, lookup_from=req.lookup_from)

    def _query(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        return self._one_query(self._known(c), models.QueryRequest.model_validate(body))

    def _query_batch(self, body: Any, c: str) -> Any:
        from qdrant_client.http import models

        req = models.QueryRequestBatch.model_validate(body)
        return [self._one_query(self._known(c), r) for r in req.searches]
