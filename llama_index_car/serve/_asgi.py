"""Pure ASGI middleware of the service: body size limit, bearer-token check, security headers,
and JSON error bodies. Standard library only (they sit outside FastAPI, so they hold for
every route, the static page and Ray Serve replicas alike).

Every error body is ``{"error": {"code": CODE, "message": ONE_LINE}, "generation": NAME}``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Content-Security-Policy of every response: scripts, styles and fetches from this origin
#: only, no inline script or style attribute, no plugins, frames, forms elsewhere or base
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")

#: paths that never need the API key (liveness, readiness, the page and its files, the schema)
OPEN_PATHS = ("/healthz", "/readyz", "/openapi.json", "/", "/static/")


def one_line(message: Any, limit: int = 300) -> str:
    """``message`` as one line of at most ``limit`` characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_body(code: str, message: str, generation: str | None) -> bytes:
    """The JSON error body."""
    return json.dumps({"error": {"code": code, "message": one_line(message)},
                       "generation": generation}, ensure_ascii=False).encode("utf-8")


async def send_error(send: Send, status: int, code: str, message: str, generation: str | None,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = error_body(code, message, generation)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413 ``body_too_large``: by
    ``Content-Length`` before reading, else while reading (chunked bodies); the body (at most
    ``limit`` bytes) is read whole before the app sees it."""

    def __init__(self, app: ASGIApp, limit: int, generation: Callable[[], str | None]) -> None:
        self.app, self.limit, self.generation = app, int(limit), generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers") or []:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.limit + 1
                if declared > self.limit:
                    await self._refuse(send)
                    return
        # read the whole body first (at most ``limit`` bytes), then replay it to the app: a
        # chunked body over the limit is refused before the app parses any of it
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: http.disconnect when the client leaves

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await send_error(send, 413, "body_too_large",
                         f"the request body is over {self.limit} bytes", self.generation())


class BearerAuth:
    """Require ``Authorization: Bearer KEY`` (compared in constant time with
    :func:`hmac.compare_digest`) on every path but :data:`OPEN_PATHS` and ``OPTIONS``
    (a CORS preflight, which answers with headers only); else 401 ``unauthorized``.
    ``key=None``: no check."""

    def __init__(self, app: ASGIApp, key: str | None,
                 generation: Callable[[], str | None]) -> None:
        self.app, self.generation = app, generation
        self.key = None if key is None else key.encode("utf-8")

    @staticmethod
    def open_path(path: str) -> bool:
        return path in OPEN_PATHS[:4] or path.startswith(OPEN_PATHS[4])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (self.key is None or scope["type"] != "http" or scope.get("method") == "OPTIONS"
                or self.open_path(scope.get("path", ""))):  # a CORS preflight carries no key
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    given = token.strip()
        if not hmac.compare_digest(given, self.key):
            await send_error(send, 401, "unauthorized",
                             "a valid API key is required (Authorization: Bearer KEY)",
                             self.generation(), [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Add the CSP, ``nosniff``, ``no-referrer``, ``DENY`` framing and the index generation
    (``x-index-generation``) to every response."""

    def __init__(self, app: ASGIApp, generation: Callable[[], str | None]) -> None:
        self.app, self.generation = app, generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers") or []
                           if k.lower() != b"x-index-generation"]
                gen = scope.get("state", {}).get("generation") or self.generation()
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                ]
                if gen:
                    headers.append((b"x-index-generation", str(gen).encode("ascii", "replace")))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)
