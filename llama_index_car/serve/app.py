"""The ASGI application of ``llama-car serve``: FastAPI routes over one :class:`FolderEngine`.

Endpoints (JSON unless said; each response names the index ``generation`` it was served from,
in its body and in the ``x-index-generation`` header):

* ``POST /v1/retrieve`` ``{query, retriever: car|hybrid|bm25|dense, top_k, filters}`` → hits
  with each channel's rank and score and their criterion spans (cell coordinates);
* ``POST /v1/answer`` ``{query, retriever, top_k, stream}`` → the ``SpanCitationQueryEngine``
  answer with its citations resolved to (file, section, table, row, col); ``stream: true`` →
  Server-Sent Events: ``{"type": "delta", "data": TEXT}`` token deltas, one
  ``{"type": "sources", "data": {"nodes": [...]}}`` (llama-index-server's shape), then
  ``{"type": "done", "data": {...}}`` with the citations;
* ``GET /v1/nodes/{node_id}`` → the node's text, its text/table segments and its tables (cells
  with coordinates, and HTML with ``rowspan``/``colspan``);
* ``GET /healthz`` (alive), ``GET /readyz`` (the index is open and warm), ``GET /metrics``
  (Prometheus text), ``GET /openapi.json``; ``GET /`` the page (static files, no CDN).

Limits: bodies ≤ 64 KiB (413 ``body_too_large``), queries within the query guard's limit
(400 ``invalid_query``), ``top_k`` ≤ 50, a deadline per request (504 ``deadline_exceeded``;
answers with an LLM get the LLM's deadline on top), at most ``threads`` retrievals at once.
Errors are ``{"error": {"code", "message"}, "generation"}`` with one line of message, never a
traceback (logged server-side).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, TypeVar

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles

from llama_index_car._errors import CarError, ConfigurationError, QueryError
from llama_index_car.serve._asgi import BearerAuth, BodyLimit, SecurityHeaders, one_line
from llama_index_car.serve._engine import FolderEngine, dumps
from llama_index_car.serve._metrics import Metrics

logger = logging.getLogger("llama_index_car.serve")

T = TypeVar("T")

#: request bodies above this many bytes are refused
MAX_BODY_BYTES = 64 * 1024
#: largest ``top_k`` a request may ask for
MAX_TOP_K = 50

Kind = Literal["car", "hybrid", "bm25", "dense"]


@dataclass(frozen=True)
class ServeSettings:
    """Options of the service (``llama-car serve`` flags).

    Attributes:
        api_key: bearer token required on ``/v1/*`` and ``/metrics`` (``None``: none).
        cors_origins: origins allowed to call the API from a browser (default none: no CORS).
        deadline: seconds a request may take (retrieval; answers add the LLM's deadline).
        reload_interval: seconds between checks of the folder's ``CURRENT`` (0: never).
        threads: retrievals run at once (others wait their turn within their deadline).
        max_body: request body limit, bytes.
    """

    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    deadline: float = 30.0
    reload_interval: float = 1.0
    threads: int = 4
    max_body: int = MAX_BODY_BYTES


# ----------------------------------------------------------------------------- schemas
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrieveRequest(_Strict):
    query: str = Field(description="the question (at most the query guard's limit, default "
                       "2000 characters; control and bidi characters are removed)")
    retriever: Kind = Field("car", description="car (default), hybrid, bm25 or dense")
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description="hits to return")
    filters: dict[str, Any] | None = Field(
        None, description='LlamaIndex MetadataFilters JSON, e.g. {"filters": [{"key": '
        '"file_name", "value": "a.hwpx", "operator": "=="}]}')


class AnswerRequest(_Strict):
    query: str = Field(description="the question")
    retriever: Kind = Field("car", description="the retriever whose hits are cited")
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description="hits whose spans are the sources")
    stream: bool = Field(False, description="Server-Sent Events: deltas, sources, done")


class Span(BaseModel):
    kind: str | None = Field(description="sentence, row or cell")
    text: str | None
    score: float | None
    start: int | None = Field(description="offset into the node's text")
    end: int | None
    table_index: int | None
    row: int | None = Field(description="0-based, as node_cells()")
    col: int | None
    row_span: int | None
    col_span: int | None
    header: str | None = Field(description="the column header text")
    row_header: str | None = Field(description="the row's labels")


class Channel(BaseModel):
    rank: int | None
    score: float | None


class Hit(BaseModel):
    rank: int
    node_id: str
    file: str
    section_title: str
    heading_path: str
    table_index: int | None
    score: float | None
    channels: dict[str, Channel]
    spans: list[Span]
    hypothesis: str | None
    fallback: bool


class RetrieveResponse(BaseModel):
    generation: str
    retriever: str
    query: str
    hits: list[Hit]


class Citation(BaseModel):
    number: int
    kind: str
    text: str
    node_id: str
    file: str | None
    section_title: str | None
    score: float | None
    start: int | None
    end: int | None
    table_index: int | None
    row: int | None
    col: int | None
    row_span: int | None
    col_span: int | None
    header: str | None
    row_header: str | None


class SourceNode(BaseModel):
    id: str
    metadata: dict[str, Any]
    score: float | None
    text: str
    url: str | None


class AnswerResponse(BaseModel):
    generation: str
    query: str
    answer: str
    citations: list[Citation]
    sources: list[SourceNode]
    fallback: bool
    error: str | None


class TableCell(BaseModel):
    row: int
    col: int
    row_span: int
    col_span: int
    text: str


class Table(BaseModel):
    table: int
    depth: int
    parent: list[int] | None
    cells: list[TableCell]
    html: str


class Segment(BaseModel):
    kind: str
    start: int
    end: int
    text: str | None = None
    table: int | None = None


class NodeResponse(BaseModel):
    generation: str
    node_id: str
    file: str
    section_title: str
    heading_path: str
    text: str
    segments: list[Segment]
    tables: list[Table]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
    generation: str | None


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 404, 413, 503, 504)
}


# ----------------------------------------------------------------------------- the app
class _Failure(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _json(payload: Any, status: int = 200) -> Response:
    return Response(dumps(payload), status_code=status, media_type="application/json")


def create_app(engine: FolderEngine, settings: ServeSettings | None = None) -> Any:
    """The ASGI application over ``engine`` (opened here at startup if it is not yet): the
    FastAPI app wrapped in the security headers, the API key check and the body limit."""
    settings = settings or ServeSettings()
    metrics = Metrics()
    limiter = anyio.CapacityLimiter(max(1, settings.threads))

    def generation() -> str | None:
        gen = engine.current
        return gen.name if gen is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if engine.current is None:
            await anyio.to_thread.run_sync(engine.open)
        poller = None
        if settings.reload_interval > 0:
            poller = asyncio.create_task(_poll(engine, metrics, settings.reload_interval))
        try:
            yield
        finally:
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller

    app = FastAPI(
        title="llama-car serve",
        summary="Criterion-aware retrieval over an index folder of Korean technical standards",
        version=_version(),
        docs_url=None, redoc_url=None, openapi_url="/openapi.json",  # no CDN pages
        lifespan=lifespan,
    )
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type"])

    async def bounded(request: Request, fn: Callable[[], T], seconds: float) -> T:
        """``fn()`` in a worker thread (at most ``threads`` at once) within ``seconds``."""
        try:
            with anyio.fail_after(seconds):
                return await anyio.to_thread.run_sync(fn, limiter=limiter,
                                                      abandon_on_cancel=True)
        except TimeoutError:
            raise _Failure(504, "deadline_exceeded",
                           f"the request took longer than its deadline ({seconds:g} s)") from None

    def leased(request: Request, work: Callable[[Any], T]) -> Callable[[], T]:
        def run() -> T:
            with engine.lease() as gen:
                request.state.generation = gen.name
                return work(gen)
        return run

    # -- middleware: timing + metrics (inside the error handlers' responses) -------------
    @app.middleware("http")
    async def observe(request: Request, call_next: Any) -> Any:
        started = time.perf_counter()
        metrics.enter()
        try:
            response = await call_next(request)
        except Exception as exc:  # noqa: BLE001 - a bug: one JSON line, the traceback logged
            logger.exception("internal error on %s", request.url.path)
            response = failure(request, 500, "internal_error",
                               f"internal error ({type(exc).__name__}); see the server log")
        finally:
            metrics.leave()
        route = request.scope.get("route")
        endpoint = getattr(route, "path", None) or "other"
        retriever = getattr(request.state, "retriever", "") or ""
        code = getattr(request.state, "error_code", None)
        metrics.observe(endpoint, retriever, response.status_code,
                        time.perf_counter() - started, code)
        return response

    def failure(request: Request, status: int, code: str, message: str) -> Response:
        request.state.error_code = code
        gen = getattr(request.state, "generation", None) or generation()
        return _json({"error": {"code": code, "message": one_line(message)},
                      "generation": gen}, status)

    @app.exception_handler(_Failure)
    async def _on_failure(request: Request, exc: _Failure) -> Response:
        return failure(request, exc.status, exc.code, exc.message)

    @app.exception_handler(QueryError)
    async def _on_query(request: Request, exc: QueryError) -> Response:
        return failure(request, 400, "invalid_query", str(exc))

    @app.exception_handler(ConfigurationError)
    async def _on_config(request: Request, exc: ConfigurationError) -> Response:
        return failure(request, 400, "invalid_request", str(exc))

    @app.exception_handler(CarError)
    async def _on_car(request: Request, exc: CarError) -> Response:
        logger.warning("index error: %s", exc)
        return failure(request, 503, "index_unavailable", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _on_invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return failure(request, 400, "invalid_request", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed", 415: "unsupported_media_type"}
        return failure(request, exc.status_code, codes.get(exc.status_code, "http_error"),
                       str(exc.detail))

    @app.exception_handler(Exception)
    async def _on_bug(request: Request, exc: Exception) -> Response:
        logger.exception("internal error on %s", request.url.path)
        return failure(request, 500, "internal_error",
                       f"internal error ({type(exc).__name__}); see the server log")

    # -- API ---------------------------------------------------------------------------
    @app.post("/v1/retrieve", response_model=RetrieveResponse, responses=_ERRORS)
    async def retrieve(body: RetrieveRequest, request: Request) -> Response:
        """Hits with channel ranks and criterion spans."""
        request.state.retriever = body.retriever

        def work(gen: Any) -> dict[str, Any]:
            hits = engine.retrieve(gen, body.query, body.retriever, body.top_k, body.filters)
            return {"generation": gen.name, "retriever": body.retriever, "query": body.query,
                    "hits": hits}

        return _json(await bounded(request, leased(request, work), settings.deadline))

    @app.post("/v1/answer", response_model=AnswerResponse, responses={
        **_ERRORS, 200: {"content": {"text/event-stream": {}}}})
    async def answer(body: AnswerRequest, request: Request) -> Response:
        """The cited answer; ``stream`` for Server-Sent Events."""
        request.state.retriever = body.retriever
        seconds = settings.deadline + (engine.llm_timeout if engine.llm is not None else 0.0)
        if body.stream:
            return await _stream(request, body, seconds)

        def work(gen: Any) -> dict[str, Any]:
            a = engine.answer(gen, body.query, body.retriever, body.top_k)
            return {"generation": gen.name, "query": body.query, "answer": a.text,
                    "citations": a.citations, "sources": a.sources, "fallback": a.fallback,
                    "error": a.error}

        return _json(await bounded(request, leased(request, work), seconds))

    async def _stream(request: Request, body: AnswerRequest, seconds: float) -> Response:
        holder = contextlib.ExitStack()
        gen = holder.enter_context(engine.lease())  # held until the last event is sent
        request.state.generation = gen.name
        try:
            sources, tokens, finish = await bounded(
                request, lambda: engine.answer_stream(gen, body.query, body.retriever,
                                                      body.top_k), seconds)
        except BaseException:
            holder.close()
            raise
        deadline = anyio.current_time() + seconds

        async def events() -> AsyncIterator[bytes]:
            try:
                while True:
                    left = deadline - anyio.current_time()
                    if left <= 0:
                        yield _sse({"type": "error", "data": {
                            "code": "deadline_exceeded",
                            "message": f"the answer took longer than {seconds:g} s"}})
                        return
                    with anyio.move_on_after(left):
                        token = await anyio.to_thread.run_sync(next, tokens, None,
                                                               abandon_on_cancel=True)
                    if token is None:
                        break
                    yield _sse({"type": "delta", "data": token})
                yield _sse({"type": "sources", "data": {"nodes": sources}})
                done = finish()
                yield _sse({"type": "done", "data": {
                    "generation": gen.name, "citations": done.citations,
                    "fallback": done.fallback, "error": done.error}})
            finally:
                holder.close()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    @app.get("/v1/nodes/{node_id}", response_model=NodeResponse, responses=_ERRORS)
    async def node(node_id: str, request: Request) -> Response:
        """A node's text and tables (HTML with rowspan/colspan, and cells)."""
        if len(node_id) > 200:
            raise _Failure(404, "not_found", "no such node")

        def work(gen: Any) -> dict[str, Any] | None:
            found = engine.node(gen, node_id)
            return None if found is None else {"generation": gen.name, **found}

        found = await bounded(request, leased(request, work), settings.deadline)
        if found is None:
            raise _Failure(404, "not_found", "no node with this id in the served generation")
        return _json(found)

    @app.get("/healthz")
    async def healthz(request: Request) -> Response:
        """The process answers (the index may still be opening)."""
        return _json({"status": "ok", "generation": generation()})

    @app.get("/readyz", responses={503: {"model": ErrorResponse}})
    async def readyz(request: Request) -> Response:
        """Ready: the index is open and every model warm."""
        gen = engine.current
        if gen is None:
            raise _Failure(503, "not_ready", "the index is still opening")
        return _json({"status": "ready", **engine.describe(gen)})

    @app.get("/metrics")
    async def metrics_text(request: Request) -> Response:
        """Prometheus text format: requests, errors, latency histograms."""
        return Response(metrics.render(generation()),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    static = resources.files("llama_index_car.serve") / "static"
    page = (static / "index.html").read_bytes()

    @app.get("/", include_in_schema=False)
    async def index_page(request: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8")

    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    stack: Any = SecurityHeaders(app, generation)
    stack = BearerAuth(stack, settings.api_key, generation)
    stack = BodyLimit(stack, settings.max_body, generation)
    return _Wrapped(stack, app, metrics)


class _Wrapped:
    """The middleware stack, callable as ASGI, exposing the FastAPI ``app`` and ``metrics``."""

    def __init__(self, asgi: Any, app: FastAPI, metrics: Metrics) -> None:
        self._asgi, self.fastapi, self.metrics = asgi, app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._asgi(scope, receive, send)


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + dumps(event) + b"\n\n"


async def _poll(engine: FolderEngine, metrics: Metrics, interval: float) -> None:
    """Check the folder for a new generation every ``interval`` seconds."""
    while True:
        await asyncio.sleep(interval)
        try:
            swapped = await anyio.to_thread.run_sync(engine.refresh)
        except (CarError, OSError) as exc:
            metrics.reloaded(False)
            logger.warning("reload failed: %s", one_line(exc))
            continue
        except Exception:  # noqa: BLE001 - the poller must outlive any one failure
            metrics.reloaded(False)
            logger.exception("reload failed")
            continue
        if swapped is not None:
            metrics.reloaded(True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-index-car")
    except PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0"


def openapi_json(app: Any) -> str:
    """The OpenAPI schema of ``app`` (what ``/openapi.json`` serves) as text."""
    return json.dumps(app.fastapi.openapi(), ensure_ascii=False, indent=1)
