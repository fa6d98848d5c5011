"""httpx transports that end every LLM HTTP attempt on time and cap what they read.

One attempt (:class:`_Attempt`) holds the bounds and does the work; the sync and async
transports are thin hooks around it:

* **time** — an attempt ends by ``min(start + attempt_timeout, deadline)``, the deadline being
  :func:`~llama_index_car.llms.deadline.current_deadline`. httpx timeouts bound each socket read,
  so a server dripping a byte a second never trips them; here the sync transport gives every
  connect, write and read of its ``httpcore`` pool at most the time left (a network backend
  wrapper), and the async one cancels the attempt when the time is up (``asyncio.wait_for``
  around the headers and each body chunk). Either way the socket is closed and the caller
  returns at the end. Past the attempt's own timeout the error is an ``httpx`` timeout, which
  the SDK may retry; past the deadline it is
  :class:`~llama_index_car._errors.LLMDeadlineError` (the SDK raises its own error types as
  they are, see ``BoundedAnthropic``), as is a network error whose retry would pass it.
* **size** — a declared ``Content-Length`` above ``max_response_bytes`` is refused before any
  body byte is read; a body growing past it is cut at the first chunk that crosses it, with
  :class:`~llama_index_car._errors.ResponseTooLargeError`. A compressed reply is refused (the
  clients ask for ``Accept-Encoding: identity``; a gzip bomb would inflate past the cap above
  the transport).
* **retry waits** — under a deadline, an error response whose retry would not fit in the time
  left (:func:`retry_fits`) gets ``x-should-retry: false``, the Stainless SDKs' own switch, so
  the SDK gives up at once instead of sleeping past the deadline or retrying before the
  server's ``Retry-After``.

The async transport keeps no connection alive (a socket belongs to the event loop that opened
it), so one client works under repeated ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import httpcore
import httpx

from llama_index_car._errors import ConfigurationError, LLMDeadlineError, ResponseTooLargeError
from llama_index_car.llms.deadline import current_deadline

#: default cap on one LLM response body (1 MiB; a criterion hypothesis is a few hundred bytes)
DEFAULT_MAX_RESPONSE_BYTES = 1 << 20
_SDK_MAX_HINT = 60.0  # Stainless SDKs obey a server's retry hint only in (0, 60] seconds
_SDK_BACKOFF = (0.5, 8.0)  # else min(0.5 * 2**retries_taken, 8.0), jitter only shortens it
_LATE = 0.05  # a timeout this close to the deadline is the deadline's
_TIMEOUTS = (httpcore.TimeoutException, httpx.TimeoutException, TimeoutError, asyncio.TimeoutError)
_FAILURES = (*_TIMEOUTS, httpcore.NetworkError, httpcore.ProtocolError, httpx.TransportError)
_T = TypeVar("_T")


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


# --------------------------------------------------------------------------- one attempt
@dataclass(frozen=True)
class Bounds:
    """What the transports enforce, and the exception factories they raise.

    Args:
        attempt_timeout: seconds one HTTP attempt may take in all (connect to last body
            byte); ``None``: only the deadline bounds it.
        max_response_bytes: cap on a response body (default :data:`DEFAULT_MAX_RESPONSE_BYTES`).
        too_large_error / deadline_error: exception factories (an SDK passes its own error
            types through unretried, so ``BoundedAnthropic`` gives ones mixing them in).

    Raises:
        ConfigurationError: a bound is not a finite positive number.
    """

    attempt_timeout: float | None = 60.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    too_large_error: Callable[[str], Exception] = ResponseTooLargeError
    deadline_error: Callable[[str], Exception] = LLMDeadlineError

    def __post_init__(self) -> None:
        t = self.attempt_timeout
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t > 0)
        ):
            raise ConfigurationError(f"timeout={t!r} must be a finite number > 0 or None")
        n = self.max_response_bytes
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigurationError(f"max_response_bytes={n!r} must be an integer >= 1")


@dataclass
class _Attempt:
    """One HTTP attempt: its end (``time.monotonic()``), the caller's deadline, bytes read."""

    bounds: Bounds
    request: httpx.Request
    end: float | None
    deadline: float | None
    seen: int = 0

    @classmethod
    def start(cls, bounds: Bounds, request: httpx.Request) -> _Attempt:
        """The attempt starting now; ``request`` asks for an uncompressed body."""
        request.headers["Accept-Encoding"] = "identity"
        deadline = current_deadline()
        end = None if bounds.attempt_timeout is None else time.monotonic() + bounds.attempt_timeout
        if deadline is not None:
            end = deadline if end is None else min(end, deadline)
        return cls(bounds, request, end, deadline)

    def cut(self, timeout: float | None, kind: type[Exception]) -> float | None:
        """``timeout`` cut to the time left; ``kind`` raised when none is left."""
        if self.end is None:
            return timeout
        left = self.end - time.monotonic()
        if left <= 0:
            raise kind("no time left for this LLM request")
        return left if timeout is None else min(timeout, left)

    async def within(self, awaitable: Awaitable[_T]) -> _T:
        """``awaitable``, cancelled (``TimeoutError``) when the attempt's time is up."""
        if self.end is None:
            return await awaitable
        return await asyncio.wait_for(awaitable, max(self.end - time.monotonic(), 0.0))

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Transport failures as the SDK should see them: ``httpx`` errors (retried), or the
        deadline error (not retried) for a timeout at the deadline or a failure whose retry
        backoff would pass it."""
        try:
            yield
        except _FAILURES as exc:
            mapped = self._mapped(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def _mapped(self, exc: Exception) -> Exception:
        url, name = self.request.url, type(exc).__name__
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if isinstance(exc, _TIMEOUTS) and left <= _LATE:
                return self.bounds.deadline_error(
                    f"LLM request to {url} passed its deadline; connection closed"
                )
            if not retry_fits({}, self._retries_taken(), time.time(), left):
                return self.bounds.deadline_error(
                    f"LLM request to {url} failed ({name}: {exc}) with no time left for a "
                    "retry before its deadline"
                )
        if isinstance(exc, httpx.TransportError):
            return exc
        if isinstance(exc, _TIMEOUTS) and not isinstance(exc, httpcore.TimeoutException):
            return httpx.ReadTimeout(f"LLM request to {url} passed its attempt timeout")
        return getattr(httpx, name, httpx.TransportError)(str(exc))  # httpcore → httpx

    def _retries_taken(self) -> int:
        count = self.request.headers.get("x-stainless-retry-count", "0")
        return int(count) if count.isdigit() else 0

    def refusal(self, response: httpx.Response) -> Exception | None:
        """Why ``response`` is refused before its body is read (``None``: admitted). An error
        response whose retry would not fit before the deadline gets ``x-should-retry: false``."""
        headers = response.headers
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return self._too_large(f"compressed body ({encoding!r}) although identity was asked")
        length = headers.get("content-length", "").strip()
        if length.isdigit() and int(length) > self.bounds.max_response_bytes:
            return self._too_large(f"Content-Length {int(length):,} bytes > max_response_bytes")
        if response.status_code >= 400 and self.deadline is not None:
            left = self.deadline - time.monotonic()
            if not retry_fits(headers, self._retries_taken(), time.time(), left):
                headers["x-should-retry"] = "false"
        return None

    def counted(self, chunk: bytes) -> bytes:
        """``chunk``, once the body read so far is within the cap."""
        self.seen += len(chunk)
        if self.seen > self.bounds.max_response_bytes:
            raise self._too_large(f"body passed {self.seen:,} bytes > max_response_bytes")
        return chunk

    def _too_large(self, why: str) -> Exception:
        return self.bounds.too_large_error(
            f"LLM response from {self.request.url} refused: {why} "
            f"({self.bounds.max_response_bytes:,})"
        )


# --------------------------------------------------------------------------- sync hook
_ACTIVE: ContextVar[_Attempt | None] = ContextVar("llama_index_car_llm_attempt", default=None)


@contextmanager
def _active(attempt: _Attempt) -> Iterator[None]:
    """Make ``attempt`` the one whose end bounds this thread's socket operations."""
    token = _ACTIVE.set(attempt)
    try:
        with attempt.errors():
            yield
    finally:
        _ACTIVE.reset(token)


def _cut(timeout: float | None, kind: type[Exception]) -> float | None:
    attempt = _ACTIVE.get()
    return timeout if attempt is None else attempt.cut(timeout, kind)


class _Stream(httpcore.NetworkStream):
    """A socket stream whose every operation ends by the active attempt's end."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _cut(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _cut(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        timeout = _cut(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.SyncBackend):
    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        timeout = _cut(timeout, httpcore.ConnectTimeout)
        return _Stream(super().connect_tcp(host, port, timeout, local_address, socket_options))


class _SyncBody(httpx.SyncByteStream):
    def __init__(self, core: httpcore.Response, attempt: _Attempt) -> None:
        self._core, self._attempt = core, attempt

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._core.stream)  # type: ignore[arg-type]  # sync pool: sync body
        while True:
            with _active(self._attempt):
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield self._attempt.counted(chunk)

    def close(self) -> None:
        self._core.close()


class BoundedTransport(httpx.BaseTransport):
    """A sync ``httpx`` transport bounding each attempt's time and response size
    (a connection pool of 20, 5 kept alive for 5 s)."""

    def __init__(self, bounds: Bounds | None = None) -> None:
        self._bounds = bounds or Bounds()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(), max_connections=20,
            max_keepalive_connections=5, keepalive_expiry=5.0, network_backend=_Backend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        attempt = _Attempt.start(self._bounds, request)
        url = request.url
        with _active(attempt):
            timeouts = {k: attempt.cut(v, httpcore.PoolTimeout)
                        for k, v in request.extensions.get("timeout", {}).items()}
            core = self._pool.handle_request(httpcore.Request(
                request.method,
                httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                             target=url.raw_path),
                headers=request.headers.raw, content=request.stream,
                extensions={**request.extensions, "timeout": timeouts},
            ))
        response = httpx.Response(core.status, headers=core.headers,
                                  stream=_SyncBody(core, attempt), extensions=core.extensions)
        refusal = attempt.refusal(response)
        if refusal is not None:
            response.close()
            raise refusal
        return response

    def close(self) -> None:
        self._pool.close()


# --------------------------------------------------------------------------- async hook
class _AsyncBody(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, attempt: _Attempt) -> None:
        self._inner, self._attempt = inner, attempt

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        while True:
            with self._attempt.errors():
                chunk = await self._attempt.within(anext(chunks, None))
            if chunk is None:
                return
            yield self._attempt.counted(chunk)

    async def aclose(self) -> None:
        await self._inner.aclose()


class AsyncBoundedTransport(httpx.AsyncBaseTransport):
    """The async hook over ``httpx.AsyncHTTPTransport`` (20 connections, none kept alive,
    no proxy from the environment)."""

    def __init__(self, bounds: Bounds | None = None) -> None:
        self._bounds = bounds or Bounds()
        self._inner = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=20, max_keepalive_connections=0),
            trust_env=False,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempt = _Attempt.start(self._bounds, request)
        with attempt.errors():
            inner = await attempt.within(self._inner.handle_async_request(request))
        response = httpx.Response(inner.status_code, headers=inner.headers,
                                  stream=_AsyncBody(inner.stream, attempt),  # type: ignore[arg-type]
                                  extensions=inner.extensions)
        refusal = attempt.refusal(response)
        if refusal is not None:
            await response.aclose()
            raise refusal
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
