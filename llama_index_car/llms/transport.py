"""httpx transports that end every LLM HTTP attempt on time and cap what they read.

:class:`BoundedTransport` (sync) and :class:`AsyncBoundedTransport` are ``httpx`` transports over
an ``httpcore`` connection pool whose network backend bounds each socket operation:

* **time** — an attempt must end by ``min(start + attempt_timeout, deadline)``, where the
  deadline is :func:`~llama_index_car.llms.deadline.current_deadline`. Connect, TLS, every write
  and every read get at most the time left (``httpx`` timeouts bound each read, so a server
  dripping one byte a second never trips them), so a call abandoned at its deadline really ends
  there: its socket is closed and its thread returns. Past the attempt's own timeout the
  transport raises ``httpx.ReadTimeout`` (and friends), which the SDK may retry; past the
  deadline it raises :class:`~llama_index_car._errors.LLMDeadlineError` (the SDK passes its own
  error types through unretried when the class mixes one in, see ``BoundedAnthropic``).
* **size** — the body is read chunk by chunk; a declared ``Content-Length`` above
  ``max_response_bytes`` is refused before any byte is read, a body growing past it is cut at
  the first chunk that crosses it, with :class:`~llama_index_car._errors.ResponseTooLargeError`.
  Requests ask for ``Accept-Encoding: identity`` and a compressed reply is refused (a gzip bomb
  would otherwise inflate past the cap above the transport).
* **retry waits** — under a deadline, an error response whose retry would not fit in the time
  left (:func:`retry_fits`: the server's ``Retry-After`` or the SDK's backoff reaching past it)
  gets ``x-should-retry: false``, the Stainless SDKs' own switch, so the SDK gives up at once
  instead of sleeping past the deadline or retrying before the server allows.

Async connections are never kept alive (each request's socket lives and dies on its own event
loop), and each event loop gets its own pool, so one client works under repeated
``asyncio.run``. Redirects are not followed by the clients built on these transports; proxies
from the environment are not used.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from llama_index_car._errors import LLMDeadlineError, ResponseTooLargeError
from llama_index_car.llms.deadline import current_deadline

__all__ = [
    "AsyncBoundedTransport",
    "BoundedTransport",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "retry_fits",
    "sdk_retry_wait",
]

#: default cap on one LLM response body (1 MiB; a criterion hypothesis is a few hundred bytes)
DEFAULT_MAX_RESPONSE_BYTES = 1 << 20
_SDK_MAX_HINT = 60.0  # Stainless SDKs obey a server's retry hint only in (0, 60] seconds
_SDK_BACKOFF = (0.5, 8.0)  # else min(0.5 * 2**retries_taken, 8.0), jitter only shortens it
_LATE = 0.05  # a timeout this close to the deadline is the deadline's


ErrorFactory = Callable[[str], Exception]


@dataclass(frozen=True)
class _Attempt:
    """The time bounds of one HTTP attempt (``time.monotonic()`` values)."""

    end: float | None  # min(start + attempt_timeout, deadline)
    deadline: float | None  # the caller's llm_deadline end

    @classmethod
    def start(cls, attempt_timeout: float | None) -> _Attempt:
        deadline = current_deadline()
        end = None if attempt_timeout is None else time.monotonic() + attempt_timeout
        if deadline is not None:
            end = deadline if end is None else min(end, deadline)
        return cls(end=end, deadline=deadline)

    def bound(self, timeout: float | None, kind: type[httpcore.TimeoutException]) -> float | None:
        """``timeout`` cut to the time left; ``kind`` raised when none is left."""
        if self.end is None:
            return timeout
        left = self.end - time.monotonic()
        if left <= 0:
            raise kind("no time left for this LLM request")
        return left if timeout is None else min(timeout, left)

    def deadline_passed(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline - _LATE


_ATTEMPT: ContextVar[_Attempt | None] = ContextVar("llama_index_car_http_attempt", default=None)


def _bound(timeout: float | None, kind: type[httpcore.TimeoutException]) -> float | None:
    attempt = _ATTEMPT.get()
    return timeout if attempt is None else attempt.bound(timeout, kind)


# --------------------------------------------------------------------------- pure helpers
def _retry_hint(headers: Mapping[str, str], now: float) -> float | None:
    """The server's retry hint in seconds, read as the Stainless SDKs read it: ``retry-after-ms``,
    else ``retry-after`` as a number, else as an HTTP date (``now`` is ``time.time()``)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            parsed = email.utils.parsedate_tz(value)
            return None if parsed is None else float(email.utils.mktime_tz(parsed) - now)
        return seconds if math.isfinite(seconds) else None
    return None


def sdk_retry_wait(headers: Mapping[str, str], retries_taken: int, now: float) -> float:
    """Upper bound of the sleep a Stainless SDK (``anthropic``, ``openai``) takes before
    retrying a response with these ``headers`` after ``retries_taken`` retries.

    The server's hint when it lies in (0, 60] s, else ``min(0.5 * 2**retries_taken, 8)``
    (the SDK's jitter only shortens it).

    >>> sdk_retry_wait({"retry-after": "3"}, 0, 0.0), sdk_retry_wait({}, 2, 0.0)
    (3.0, 2.0)
    >>> sdk_retry_wait({"retry-after": "3600"}, 5, 0.0)
    8.0
    """
    hint = _retry_hint(headers, now)
    if hint is not None and 0 < hint <= _SDK_MAX_HINT:
        return hint
    initial, ceiling = _SDK_BACKOFF
    return min(initial * 2.0 ** min(retries_taken, 64), ceiling)


def retry_fits(
    headers: Mapping[str, str], retries_taken: int, now: float, time_left: float
) -> bool:
    """Whether a retry of this error response can happen within ``time_left`` seconds:
    the server's hint (when given) and the SDK's wait (:func:`sdk_retry_wait`) must both end
    before it. A hint beyond the time left means no retry, never an early one (the SDK
    would replace a hint above 60 s by its short backoff).

    >>> retry_fits({"retry-after": "3600"}, 0, 0.0, 30.0), retry_fits({}, 0, 0.0, 30.0)
    (False, True)
    >>> retry_fits({"retry-after": "1"}, 0, 0.0, 0.5)
    False
    """
    hint = _retry_hint(headers, now)
    if hint is not None and hint >= time_left:
        return False
    return sdk_retry_wait(headers, retries_taken, now) < time_left


def _retries_taken(request: httpx.Request) -> int:
    try:
        return max(0, int(request.headers.get("x-stainless-retry-count", "0")))
    except ValueError:
        return 0


def _request_headers(request: httpx.Request) -> list[tuple[bytes, bytes]]:
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"accept-encoding"]
    headers.append((b"Accept-Encoding", b"identity"))
    return headers


def _extensions(request: httpx.Request, attempt: _Attempt) -> dict[str, Any]:
    extensions = dict(request.extensions)
    timeouts = dict(extensions.get("timeout") or {})
    if attempt.end is not None:  # waiting for a pooled connection is bounded too
        left = max(attempt.end - time.monotonic(), 0.001)
        pool = timeouts.get("pool")
        timeouts["pool"] = left if pool is None else min(pool, left)
    extensions["timeout"] = timeouts
    return extensions


def _core_request(request: httpx.Request, attempt: _Attempt, content: Any) -> httpcore.Request:
    return httpcore.Request(
        method=request.method,
        url=httpcore.URL(
            scheme=request.url.raw_scheme,
            host=request.url.raw_host,
            port=request.url.port,
            target=request.url.raw_path,
        ),
        headers=_request_headers(request),
        content=content,
        extensions=_extensions(request, attempt),
    )


_HTTPCORE_TO_HTTPX: dict[type[Exception], type[httpx.HTTPError]] = {
    getattr(httpcore, name): getattr(httpx, name)
    for name in (
        "TimeoutException", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout",
        "NetworkError", "ConnectError", "ReadError", "WriteError", "ProxyError",
        "UnsupportedProtocol", "ProtocolError", "LocalProtocolError", "RemoteProtocolError",
    )
}


@dataclass(frozen=True)
class _Limits:
    """What a transport enforces, and the error types it raises."""

    attempt_timeout: float | None
    max_response_bytes: int
    too_large: ErrorFactory
    deadline: ErrorFactory

    @contextmanager
    def mapped(self, attempt: _Attempt, request: httpx.Request) -> Iterator[None]:
        """httpcore errors as httpx errors; a timeout at the deadline, or a network error
        whose retry backoff would pass it, as ``deadline`` (which the SDK does not retry)."""
        try:
            yield
        except Exception as exc:
            target = next(
                (_HTTPCORE_TO_HTTPX[c] for c in type(exc).__mro__ if c in _HTTPCORE_TO_HTTPX),
                None,
            )
            if target is None:
                raise
            if isinstance(exc, httpcore.TimeoutException) and attempt.deadline_passed():
                raise self.deadline(
                    f"LLM request to {request.url} passed its deadline; connection closed"
                ) from exc
            if attempt.deadline is not None and not retry_fits(
                {}, _retries_taken(request), time.time(), attempt.deadline - time.monotonic()
            ):
                raise self.deadline(
                    f"LLM request to {request.url} failed ({type(exc).__name__}: {exc}) with "
                    "no time left for a retry before its deadline"
                ) from exc
            raise target(str(exc)) from exc

    def check_headers(
        self, request: httpx.Request, status: int, headers: list[tuple[bytes, bytes]],
        attempt: _Attempt,
    ) -> list[tuple[bytes, bytes]] | str:
        """The response headers to hand on, or why the response is refused."""
        view = httpx.Headers(headers)
        encoding = view.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return f"compressed body ({encoding!r}) although identity was asked"
        length = view.get("content-length")
        if length is not None and length.strip().isdigit():
            if int(length) > self.max_response_bytes:
                return f"Content-Length {int(length):,} bytes > max_response_bytes"
        if status >= 400 and attempt.deadline is not None:
            left = attempt.deadline - time.monotonic()
            if not retry_fits(view, _retries_taken(request), time.time(), left):
                headers = [(k, v) for k, v in headers if k.lower() != b"x-should-retry"]
                headers.append((b"x-should-retry", b"false"))
        return headers

    def refuse(self, url: httpx.URL, why: str) -> Exception:
        return self.too_large(
            f"LLM response from {url} refused: {why} ({self.max_response_bytes:,})"
        )

    def count(self, url: httpx.URL, seen: int) -> None:
        if seen > self.max_response_bytes:
            raise self.refuse(url, f"body passed {seen:,} bytes > max_response_bytes")


def _check_positive(name: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} must be a finite number of seconds > 0 or None")


def _limits(
    attempt_timeout: float | None, max_response_bytes: int,
    too_large_error: ErrorFactory | None, deadline_error: ErrorFactory | None,
) -> _Limits:
    _check_positive("attempt_timeout", attempt_timeout)
    if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or (
        max_response_bytes < 1
    ):
        raise ValueError(f"max_response_bytes={max_response_bytes!r} must be an integer >= 1")
    return _Limits(
        attempt_timeout, max_response_bytes,
        too_large_error or ResponseTooLargeError, deadline_error or LLMDeadlineError,
    )


# --------------------------------------------------------------------------- sync
class _Stream(httpcore.NetworkStream):
    """A socket stream whose every operation ends by the current attempt's end."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bound(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bound(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._inner.start_tls(
                ssl_context, server_hostname, _bound(timeout, httpcore.ConnectTimeout)
            )
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._inner.connect_tcp(
                host, port, _bound(timeout, httpcore.ConnectTimeout), local_address,
                socket_options,
            )
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._inner.connect_unix_socket(
                path, _bound(timeout, httpcore.ConnectTimeout), socket_options
            )
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Body(httpx.SyncByteStream):
    def __init__(
        self, core: Iterable[bytes], attempt: _Attempt, limits: _Limits, request: httpx.Request
    ) -> None:
        self._core, self._attempt, self._limits = core, attempt, limits
        self._request, self._url = request, request.url

    def __iter__(self) -> Iterator[bytes]:
        chunks, seen = iter(self._core), 0
        while True:
            token = _ATTEMPT.set(self._attempt)  # set and reset within one resumption
            try:
                with self._limits.mapped(self._attempt, self._request):
                    chunk = next(chunks, None)
            finally:
                _ATTEMPT.reset(token)
            if chunk is None:
                return
            seen += len(chunk)
            self._limits.count(self._url, seen)
            yield chunk

    def close(self) -> None:
        close = getattr(self._core, "close", None)
        if close is not None:
            close()


class BoundedTransport(httpx.BaseTransport):
    """A sync ``httpx`` transport bounding each attempt's time and response size.

    Args:
        attempt_timeout: seconds one HTTP attempt may take in all (connect to last body
            byte); ``None``: only the deadline bounds it.
        max_response_bytes: cap on a response body (default :data:`DEFAULT_MAX_RESPONSE_BYTES`).
        too_large_error / deadline_error: exception factories (default
            :class:`~llama_index_car._errors.ResponseTooLargeError` /
            :class:`~llama_index_car._errors.LLMDeadlineError`).
        max_connections / max_keepalive_connections: pool limits (defaults 20 / 5).
        ssl_context: defaults to ``httpx.create_ssl_context()`` (system trust store).
    """

    def __init__(
        self,
        *,
        attempt_timeout: float | None = 60.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        too_large_error: ErrorFactory | None = None,
        deadline_error: ErrorFactory | None = None,
        max_connections: int = 20,
        max_keepalive_connections: int = 5,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._limits = _limits(attempt_timeout, max_response_bytes, too_large_error,
                               deadline_error)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=5.0,
            network_backend=_Backend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        limits = self._limits
        attempt = _Attempt.start(limits.attempt_timeout)
        if not isinstance(request.stream, Iterable):
            raise TypeError("BoundedTransport needs a sync request body")
        token = _ATTEMPT.set(attempt)
        try:
            with limits.mapped(attempt, request):
                response = self._pool.handle_request(
                    _core_request(request, attempt, request.stream)
                )
        finally:
            _ATTEMPT.reset(token)
        headers = limits.check_headers(request, response.status, response.headers, attempt)
        if isinstance(headers, str):
            response.close()
            raise limits.refuse(request.url, headers)
        stream = response.stream
        if not isinstance(stream, Iterable):  # pragma: no cover - httpcore's sync pool
            raise TypeError("httpcore returned an async body to a sync transport")
        return httpx.Response(
            status_code=response.status,
            headers=headers,
            stream=_Body(stream, attempt, limits, request),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


# --------------------------------------------------------------------------- async
class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, _bound(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, _bound(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._inner.start_tls(
                ssl_context, server_hostname, _bound(timeout, httpcore.ConnectTimeout)
            )
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._inner.connect_tcp(
                host, port, _bound(timeout, httpcore.ConnectTimeout), local_address,
                socket_options,
            )
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._inner.connect_unix_socket(
                path, _bound(timeout, httpcore.ConnectTimeout), socket_options
            )
        )

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(
        self, core: Any, attempt: _Attempt, limits: _Limits, request: httpx.Request
    ) -> None:
        self._core, self._attempt, self._limits = core, attempt, limits
        self._request, self._url = request, request.url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks, seen = self._core.__aiter__(), 0
        while True:
            token = _ATTEMPT.set(self._attempt)
            try:
                with self._limits.mapped(self._attempt, self._request):
                    try:
                        chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        return
            finally:
                _ATTEMPT.reset(token)
            seen += len(chunk)
            self._limits.count(self._url, seen)
            yield chunk

    async def aclose(self) -> None:
        aclose = getattr(self._core, "aclose", None)
        if aclose is not None:
            await aclose()


class AsyncBoundedTransport(httpx.AsyncBaseTransport):
    """The async twin of :class:`BoundedTransport` (same arguments): one connection pool per
    event loop, no keep-alive, so a client shared across ``asyncio.run`` calls never hands a
    socket of a closed loop to a new one."""

    def __init__(
        self,
        *,
        attempt_timeout: float | None = 60.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        too_large_error: ErrorFactory | None = None,
        deadline_error: ErrorFactory | None = None,
        max_connections: int = 20,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._limits = _limits(attempt_timeout, max_response_bytes, too_large_error,
                               deadline_error)
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._pools: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, httpcore.AsyncConnectionPool
        ] = weakref.WeakKeyDictionary()

    def _pool(self) -> httpcore.AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            if self._ssl_context is None:
                self._ssl_context = httpx.create_ssl_context()
            pool = httpcore.AsyncConnectionPool(
                ssl_context=self._ssl_context,
                max_connections=self._max_connections,
                max_keepalive_connections=0,
                network_backend=_AsyncBackend(),
            )
            self._pools[loop] = pool
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        limits = self._limits
        attempt = _Attempt.start(limits.attempt_timeout)
        token = _ATTEMPT.set(attempt)
        try:
            with limits.mapped(attempt, request):
                response = await self._pool().handle_async_request(
                    _core_request(request, attempt, request.stream)
                )
        finally:
            _ATTEMPT.reset(token)
        headers = limits.check_headers(request, response.status, response.headers, attempt)
        if isinstance(headers, str):
            await response.aclose()
            raise limits.refuse(request.url, headers)
        return httpx.Response(
            status_code=response.status,
            headers=headers,
            stream=_AsyncBody(response.stream, attempt, limits, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()
