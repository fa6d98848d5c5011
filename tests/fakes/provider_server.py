"""A scriptable fake of the provider HTTP APIs the package calls, on 127.0.0.1.

Speaks just enough of each API for the real SDKs (through the llama-index integrations):

* Anthropic ``POST /v1/messages``: a JSON message, or with ``"stream": true`` in the request
  (``stream_chat``/``astream_chat``, so ``LLM.stream``/``astream``) a ``text/event-stream`` of
  the events the SDK's ``Stream`` parses (:func:`anthropic_sse`: ``message_start``,
  ``content_block_start``, ``ping``, ``content_block_delta`` × n, ``content_block_stop``,
  ``message_delta``, ``message_stop``), optionally cut by an ``error`` event
  (``Reply.sse_error_after``);
* OpenAI ``POST /v1/embeddings`` (``float`` or ``base64`` per the request's
  ``encoding_format``; deterministic vectors computed from the input text);
* Cohere ``POST /v2/rerank`` (``ClientV2.rerank``, what ``CohereRerank`` uses) and
  ``/v1/rerank``; scores computed from character overlap with the query.

Every request is recorded (:attr:`FakeProviderServer.requests`). Tests script replies per path
with :meth:`FakeProviderServer.enqueue` (a FIFO of :class:`Reply` objects or callables); when
the queue of a path is empty the default handler answers. A reply can carry a ``delay`` (to
trigger client timeouts), any status (429 then 200 for retries, 500 for fallbacks).

>>> server = FakeProviderServer().start()
>>> server.url.startswith("http://127.0.0.1:")
True
>>> server.stop()
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import struct
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "FakeProviderServer",
    "RecordedRequest",
    "Reply",
    "HOSTILE_TEXTS",
    "anthropic_message",
    "anthropic_sse",
    "point_sdks_at",
    "serving",
    "provider_server",
    "provider_env",
]

DEFAULT_ANTHROPIC_TEXT = "가설: 신축이음장치 설치기준\n기준어: 신축이음장치, 설치기준"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received: float = field(default_factory=time.monotonic)  # time.monotonic() on arrival

    def header(self, name: str) -> str | None:
        """Case-insensitive header lookup."""
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


@dataclass
class Reply:
    """A scripted reply: ``status``, JSON ``body`` (``None`` → the default handler's body),
    extra ``headers`` and a ``delay`` in seconds before answering."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: seconds between the bytes of an endless reply (0: a normal reply); see :meth:`drip`
    drip: float = 0.0
    drip_headers: bool = False
    #: size of a huge 200 reply streamed in 64 KiB writes (0: a normal reply); see :meth:`huge`
    huge_bytes: int = 0
    declare_length: bool = True
    #: body bytes sent verbatim instead of JSON (e.g. a gzip body with its header)
    raw: bytes | None = None
    #: a streamed Messages reply sends an SSE ``error`` event after this many text deltas
    #: (``None``: the stream ends normally)
    sse_error_after: int | None = None

    @classmethod
    def slow_drip(cls, interval: float = 0.05, *, headers: bool = False) -> Reply:
        """An endless reply, one byte every ``interval`` seconds: a chunked body of spaces
        after complete headers, or (``headers=True``) a header block that never ends. Every
        byte arrives well within any read timeout; only an overall deadline ends it."""
        return cls(drip=interval, drip_headers=headers)

    @classmethod
    def huge(cls, n_bytes: int, *, declare_length: bool = True) -> Reply:
        """A valid Messages reply of ``n_bytes`` bytes (its text padded), sent with a
        ``Content-Length`` or chunked (``declare_length=False``)."""
        return cls(huge_bytes=n_bytes, declare_length=declare_length)

    @classmethod
    def hang(cls, seconds: float = 3600.0) -> Reply:
        """A reply that never comes in practice: the handler sleeps ``seconds`` (woken and
        dropped without an answer when the server stops)."""
        return cls(delay=seconds)

    @classmethod
    def error(cls, status: int, retry_after: float | str | None = None) -> Reply:
        """An error ``status`` (429, 500, 503 …) with an optional ``Retry-After`` header."""
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        return cls(status=status, headers=headers)

    @classmethod
    def anthropic_text(cls, text: str) -> Reply:
        """A 200 Anthropic Messages reply carrying ``text`` verbatim (e.g. hostile output)."""
        return cls(body=anthropic_message(text))


Action = Reply | Callable[[RecordedRequest], Reply]

#: LLM outputs an attacker controlling the provider (or a prompt injection) could return:
#: terminal escape sequences (clear screen, window title, OSC 8 hyperlink, C1 CSI), bidi
#: overrides (U+202E), zero-width characters, NULs and a flood of text.
HOSTILE_TEXTS: dict[str, str] = {
    "ansi": "가설: \x1b[2J\x1b[H\x1b[31m신축이음장치\x1b[0m 설치기준\n기준어: 신축이음장치, 설치기준",
    "osc": "가설: 신축이음장치 설치기준\x1b]0;pwned\x07\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\"
    "\n기준어: 신축이음장치, 설치기준",
    "bidi": "가설: 신축이음장치 \u202e준기치설\u202c\u2066 설치기준\n기준어: 신축이음장치\u200b, 설치기준",
    "c1": "가설: 신축이음장치\x9b2J 설치기준\x00\n기준어: 신축이음장치, 설치\x07기준",
    "flood": "가설: " + "신축이음장치 설치기준 " * 20000 + "\n기준어: " + ", ".join(
        f"기준어{i}" for i in range(5000)
    ),
    "only_escapes": "\x1b[2J\x1b[H\u202e\u200b\x07",
    "labelled_escapes": "가설: \x1b[2J\u202e\n기준어: \x1b[0m\u2066",
}


def anthropic_message(text: str, model: str = "claude-sonnet-4-6") -> dict[str, Any]:
    """An Anthropic Messages API response body carrying ``text``."""
    return {
        "id": "msg_fake_0001",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 318, "output_tokens": 93},
    }


def anthropic_sse(
    text: str, model: str = "claude-sonnet-4-6", *, chunk: int = 4,
    error_after: int | None = None,
) -> bytes:
    """The ``text/event-stream`` body of a streamed Messages reply carrying ``text`` in deltas
    of ``chunk`` characters, in the event order of the Messages streaming API; with
    ``error_after`` an ``overloaded_error`` event replaces the rest after that many deltas.

    >>> body = anthropic_sse("가나다", chunk=2).decode()
    >>> [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    ['message_start', 'content_block_start', 'ping', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']
    """
    message = anthropic_message("", model=model)
    message.update(content=[], stop_reason=None, usage={"input_tokens": 318, "output_tokens": 1})
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("ping", {"type": "ping"}),
    ]
    pieces = [text[i : i + chunk] for i in range(0, len(text), chunk)]
    for n, piece in enumerate(pieces):
        if error_after is not None and n >= error_after:
            break
        events.append(("content_block_delta", {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": piece},
        }))
    if error_after is not None:
        events.append(("error", {"type": "error", "error": {
            "type": "overloaded_error", "message": "fake overloaded mid-stream"}}))
    else:
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 93}}),
            ("message_stop", {"type": "message_stop"}),
        ]
    return "".join(
        f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n" for name, data in events
    ).encode("utf-8")


def fake_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for ``text`` (sha256-seeded; same text → same vector)."""
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    values = values[:dimensions]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def overlap_score(query: str, document: str) -> float:
    """Share of the query's distinct non-space characters found in ``document``."""
    chars = {c for c in query if not c.isspace()}
    if not chars:
        return 0.0
    return sum(c in document for c in chars) / len(chars)


def _error_body(path: str, status: int) -> dict[str, Any]:
    kind = {429: "rate_limit_error", 401: "authentication_error"}.get(status, "api_error")
    message = f"fake {status} for {path}"
    if path.endswith("/messages"):
        return {"type": "error", "error": {"type": kind, "message": message}}
    if path.endswith("/embeddings"):
        return {"error": {"message": message, "type": kind, "code": str(status)}}
    return {"message": message}


class _QuietServer(ThreadingHTTPServer):
    """A client that went away mid-request (a deadline, a killed process) is no error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class FakeProviderServer:
    """Threaded HTTP server faking the Anthropic, OpenAI and Cohere endpoints.

    Attributes:
        requests: every request received, in arrival order.
        anthropic_text: text (or ``callable(request) -> text``) of default ``/v1/messages``
            replies.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        #: body bytes the socket accepted for each finished drip / huge reply, in end order
        self.body_bytes_sent: list[int] = []
        self.anthropic_text: str | Callable[[RecordedRequest], str] = DEFAULT_ANTHROPIC_TEXT
        self._queues: dict[str, deque[Action]] = defaultdict(deque)
        self._sticky: dict[str, Action] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> FakeProviderServer:
        """Bind a random free port on 127.0.0.1 and serve in a daemon thread."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:  # noqa: N802
                server._handle(self)

            def do_GET(self) -> None:  # noqa: N802
                server._handle(self)

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and wake any delayed handler."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:<port>`` (no trailing slash)."""
        if self._httpd is None:
            raise RuntimeError("FakeProviderServer is not running; call start()")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # ---------------------------------------------------------------- scripting
    def enqueue(self, path: str, *actions: Action) -> None:
        """Queue replies for ``path`` (e.g. ``"/v1/messages"``), consumed one per request."""
        with self._lock:
            self._queues[path].extend(actions)

    def set_default(self, path: str, action: Action | None) -> None:
        """Answer every request to ``path`` with ``action`` once its queue is empty (e.g.
        ``Reply.hang()`` for a hung server); ``None`` restores the default handler."""
        with self._lock:
            if action is None:
                self._sticky.pop(path, None)
            else:
                self._sticky[path] = action

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The recorded requests whose path is ``path``."""
        return [r for r in self.requests if r.path == path]

    def reset(self) -> None:
        """Forget recorded requests and pending scripted replies."""
        with self._lock:
            self.requests.clear()
            self._queues.clear()
            self._sticky.clear()

    # ---------------------------------------------------------------- handling
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = raw.decode("utf-8", "replace")
        path = handler.path.split("?", 1)[0]
        request = RecordedRequest(handler.command, path, dict(handler.headers.items()), body)
        with self._lock:
            self.requests.append(request)
            queue = self._queues.get(path)
            action: Action | None = queue.popleft() if queue else self._sticky.get(path)
        reply = action(request) if callable(action) else action
        if reply is None:
            reply = Reply()
        if reply.delay and self._stopping.wait(reply.delay):
            return
        if reply.drip or reply.huge_bytes:
            sent = self._stream(handler, reply)
            with self._lock:
                self.body_bytes_sent.append(sent)
            handler.close_connection = True
            return
        payload = reply.body
        if payload is None:
            payload = (
                self._default(request) if reply.status < 400 else _error_body(path, reply.status)
            )
        if (
            path.endswith("/messages") and reply.status < 400 and reply.raw is None
            and isinstance(request.body, dict) and request.body.get("stream") is True
        ):
            self._send(handler, reply, self._sse(payload, reply), "text/event-stream")
            return
        data = reply.raw if reply.raw is not None else json.dumps(
            payload, ensure_ascii=False
        ).encode("utf-8")
        self._send(handler, reply, data, "application/json")

    @staticmethod
    def _sse(payload: Any, reply: Reply) -> bytes:
        """A JSON Messages body (scripted or default) as the SSE stream carrying its text."""
        content = payload.get("content") if isinstance(payload, dict) else None
        text = "".join(
            b.get("text", "") for b in content or [] if isinstance(b, dict)
        ) if isinstance(content, list) else ""
        model = payload.get("model", "claude-sonnet-4-6") if isinstance(payload, dict) else ""
        return anthropic_sse(text, model=str(model), error_after=reply.sse_error_after)

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler, reply: Reply, data: bytes, content_type: str
    ) -> None:
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            return

    def _stream(self, handler: BaseHTTPRequestHandler, reply: Reply) -> int:
        """Write a drip or huge reply raw; return the body bytes written before the end."""
        out = handler.wfile
        sent = 0
        try:
            if reply.drip:
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                if reply.drip_headers:  # "X-Drip: aaaa…", a header line that never ends
                    for byte in itertools.chain(head + b"X-Drip: ", itertools.repeat(97)):
                        out.write(bytes((byte,)))
                        out.flush()
                        if self._stopping.wait(reply.drip):
                            return sent
                out.write(head + b"Transfer-Encoding: chunked\r\n\r\n")
                out.flush()
                while not self._stopping.wait(reply.drip):
                    out.write(b"1\r\n \r\n")
                    out.flush()
                    sent += 1
                return sent
            prefix = json.dumps(anthropic_message("가설: "), ensure_ascii=False)
            cut = prefix.index('"가설: ') + len('"가설: ')
            start, end = prefix[:cut].encode(), prefix[cut:].encode()
            pad = max(0, reply.huge_bytes - len(start) - len(end))
            framing = (
                f"Content-Length: {len(start) + pad + len(end)}" if reply.declare_length
                else "Transfer-Encoding: chunked"
            )
            out.write(
                f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
                .encode()
            )
            block = b"x" * 65536
            parts = [start] + [block] * (pad // len(block)) + [b"x" * (pad % len(block)), end]
            for part in parts:
                if self._stopping.is_set():
                    break
                if not part:
                    continue
                out.write(part if reply.declare_length else b"%x\r\n%s\r\n" % (len(part), part))
                sent += len(part)
            if not reply.declare_length:
                out.write(b"0\r\n\r\n")
            out.flush()
        except OSError:  # the client closed the connection (BrokenPipe, reset)
            pass
        return sent

    def _default(self, request: RecordedRequest) -> Any:
        path = request.path
        body = request.body if isinstance(request.body, dict) else {}
        if path.endswith("/messages"):
            text = self.anthropic_text
            content = text(request) if callable(text) else text
            return anthropic_message(content, model=str(body.get("model", "claude-sonnet-4-6")))
        if path.endswith("/embeddings"):
            return self._embeddings(body)
        if path.endswith("/rerank"):
            return self._rerank(body)
        return {"message": f"fake server: no handler for {path}"}

    @staticmethod
    def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input", [])
        if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        dims = int(body.get("dimensions") or 8)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, item in enumerate(inputs):
            vec = fake_vector(item if isinstance(item, str) else json.dumps(item), dims)
            emb: Any = (
                base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode("ascii")
                if as_base64
                else vec
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", "text-embedding-3-large"),
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }

    @staticmethod
    def _rerank(body: dict[str, Any]) -> dict[str, Any]:
        query = str(body.get("query", ""))
        docs = [d if isinstance(d, str) else json.dumps(d) for d in body.get("documents", [])]
        scored = sorted(
            ((overlap_score(query, d), i) for i, d in enumerate(docs)), key=lambda t: (-t[0], t[1])
        )
        top_n = body.get("top_n") or len(docs)
        return {
            "id": "rerank_fake_0001",
            "results": [{"index": i, "relevance_score": s} for s, i in scored[:top_n]],
            "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
        }


def point_sdks_at(server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point every SDK at ``server`` through the env vars the SDKs (and
    :mod:`llama_index_car.providers`) read, with fake keys."""
    url = server.url
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-fake")
    monkeypatch.setenv("OPENAI_BASE_URL", url + "/v1")
    monkeypatch.setenv("COHERE_API_KEY", "co-fake")
    monkeypatch.setenv("CO_API_URL", url)


@contextmanager
def serving(monkeypatch: pytest.MonkeyPatch | None = None) -> Iterator[FakeProviderServer]:
    """A running :class:`FakeProviderServer` (SDKs pointed at it when ``monkeypatch`` is
    given), stopped on exit. Test modules wrap it in a fixture::

        @pytest.fixture
        def fake(monkeypatch):
            with serving(monkeypatch) as server:
                yield server
    """
    server = FakeProviderServer().start()
    try:
        if monkeypatch is not None:
            point_sdks_at(server, monkeypatch)
        yield server
    finally:
        server.stop()


@pytest.fixture
def provider_server() -> Iterator[FakeProviderServer]:
    """Fixture: a running :class:`FakeProviderServer` (register this module as a plugin)."""
    with serving() as server:
        yield server


@pytest.fixture
def provider_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProviderServer]:
    """Fixture: a running fake with every SDK pointed at it through the environment."""
    with serving(monkeypatch) as server:
        yield server
