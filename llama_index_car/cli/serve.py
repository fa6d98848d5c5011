"""``llama-car serve DIR``: serve an index folder over HTTP, with a page at ``/``.

One long-lived process opens the folder read-only once (the query embedding is the provider
recorded in the folder), warms every model, then answers ``POST /v1/retrieve``,
``POST /v1/answer`` (cited answers; Server-Sent Events with ``"stream": true``),
``GET /v1/nodes/{id}``, ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json`` on
uvicorn. A ``llama-car index --update`` of the folder by another process is picked up without
a restart (checked every ``--reload-interval`` seconds; requests in flight finish on the old
generation). ``--ray --replicas N`` runs the same app on Ray Serve.

Safe by default: it binds 127.0.0.1; any other address needs ``--api-key`` (or
``$LLAMA_CAR_API_KEY``: a bearer token the API requires), else it refuses to start. Request
bodies are limited to 64 KiB, queries to the query guard's limit, each request to
``--deadline`` seconds; no CORS unless ``--cors-origin`` is given; SIGTERM stops accepting and
lets requests in flight finish. Details: docs/SERVE.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import threading
import time
from typing import Any

from llama_index_car._errors import ConfigurationError
from llama_index_car.cli._args import (
    existing_dir,
    positive_int,
    positive_seconds,
    store_uri,
    subcommand,
)

#: environment variable holding the API key (``--api-key`` wins)
API_KEY_ENV = "LLAMA_CAR_API_KEY"
#: shortest API key accepted (a bearer token guessable in a few tries protects nothing)
MIN_KEY_CHARS = 16

EPILOG = """examples:
  llama-car index ./guidelines --persist ./car-index
  llama-car serve ./car-index                      # http://127.0.0.1:8000/
  LLAMA_CAR_API_KEY=$(openssl rand -hex 24) llama-car serve ./car-index --host 0.0.0.0
  llama-car serve ./car-index --ray --replicas 2
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "serve",
        help="serve an index folder over HTTP (API + page), following its updates",
        doc=__doc__,
        epilog=EPILOG,
    )
    add_common(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; others need --api-key)")
    p.add_argument("--port", type=port_number, default=8000, help="port (default 8000)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help=f"bearer token required by the API (default ${API_KEY_ENV}); needed "
                   "for any address but loopback")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser calls from ORIGIN (repeatable; default: no CORS)")
    p.add_argument("--deadline", type=positive_seconds, default=30.0, metavar="SECONDS",
                   help="longest a request may take (default %(default)g; answers with an "
                   "LLM get --llm-timeout on top)")
    p.add_argument("--reload-interval", type=seconds_or_zero, default=1.0, metavar="SECONDS",
                   help="how often to look for a new generation of DIR (default %(default)g; "
                   "0: never)")
    p.add_argument("--threads", type=positive_int, default=4,
                   help="retrievals run at once (default %(default)s)")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument("--ray", action="store_true",
                   help="run on Ray Serve (pip install 'llama-index-car[ray]')")
    p.add_argument("--replicas", type=positive_int, default=None,
                   help="Ray Serve replicas (with --ray; default 1)")
    p.add_argument("--ray-address", default=None, metavar="ADDRESS",
                   help="an existing Ray cluster (default: start a local one)")
    return p


def add_common(p: argparse.ArgumentParser) -> None:
    """``DIR``, ``--store``, ``--llm``, ``--llm-timeout``: shared with ``llama-car mcp``."""
    from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE

    p.add_argument("persist_dir", metavar="DIR", type=existing_dir,
                   help="index folder (from llama-car index)")
    p.add_argument("--store", metavar="URI", type=store_uri, default=None,
                   help="the vector store of a folder built with --store URI (default "
                   "$LLAMA_CAR_STORE; a server's secret from $LLAMA_CAR_MILVUS_TOKEN or "
                   "$LLAMA_CAR_QDRANT_API_KEY)")
    p.add_argument("--llm", choices=("none", "anthropic"), default="none",
                   help="answer writer: none = the cited retrieval-only answer (default), "
                   "anthropic = claude-sonnet-4-6 (needs ANTHROPIC_API_KEY)")
    p.add_argument("--llm-timeout", type=positive_seconds, default=DEFAULT_LLM_DEADLINE,
                   metavar="SECONDS",
                   help="deadline of one answer's LLM call, retries included (default %(default)g)")


def seconds_or_zero(value: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not (number >= 0 and number < float("inf")):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds >= 0")
    return number


def port_number(value: str) -> int:
    """A TCP port, 1..65535."""
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (1..65535)")
    return port


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_key(args: argparse.Namespace) -> str | None:
    """``--api-key``, else ``$LLAMA_CAR_API_KEY``, else ``None``."""
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    return key or None


def check_args(args: argparse.Namespace) -> None:
    """Refuse a non-loopback address without an API key, a short key and ``--replicas``
    without ``--ray`` (one line, exit 2)."""
    key = api_key(args)
    if not is_loopback(args.host) and key is None:
        raise ConfigurationError(
            f"refusing to listen on {args.host} without an API key; pass --api-key KEY or set "
            f"{API_KEY_ENV} (or bind 127.0.0.1)"
        )
    if key is not None and (len(key) < MIN_KEY_CHARS or not key.isprintable() or " " in key):
        raise ConfigurationError(
            f"the API key must be at least {MIN_KEY_CHARS} printable characters without "
            "spaces (e.g. openssl rand -hex 24)"
        )
    if args.replicas is not None and not args.ray:
        raise ConfigurationError("--replicas needs --ray")


def settings_of(args: argparse.Namespace) -> Any:
    """The :class:`~llama_index_car.serve.ServeSettings` of the parsed flags."""
    from llama_index_car.serve.app import ServeSettings

    return ServeSettings(api_key=api_key(args), cors_origins=tuple(args.cors_origin),
                         deadline=float(args.deadline),
                         reload_interval=float(args.reload_interval), threads=args.threads)


def engine_of(args: argparse.Namespace) -> Any:
    """The :class:`~llama_index_car.serve.FolderEngine` of the parsed flags (not opened)."""
    from llama_index_car.providers import resolve_llm
    from llama_index_car.serve._engine import FolderEngine

    llm = resolve_llm(args.llm, timeout=float(args.llm_timeout))
    return FolderEngine(args.persist_dir, store=args.store, llm=llm,
                        llm_timeout=float(args.llm_timeout))


def run(args: argparse.Namespace) -> int:
    """Open the folder, then serve until SIGTERM/SIGINT (requests in flight finish)."""
    from llama_index_car._errors import require

    require("fastapi", extra="serve", package="fastapi")
    require("uvicorn", extra="serve", package="uvicorn")
    settings = settings_of(args)
    if args.ray:
        require("ray.serve", extra="ray", package="ray[serve]")
        from llama_index_car.serve._ray import serve_on_ray

        return serve_on_ray(args, settings)
    started = time.perf_counter()
    engine = engine_of(args)
    opened: dict[str, Any] = {}

    def open_engine() -> None:
        try:
            opened["gen"] = engine.open()
        except BaseException as exc:  # re-raised below, in the main thread
            opened["error"] = exc

    loader = threading.Thread(target=open_engine, daemon=True)
    loader.start()  # the folder and models load while the web stack imports and builds
    import uvicorn

    from llama_index_car.serve.app import create_app

    app = create_app(engine, settings)  # reads the engine only per request
    loader.join()
    if "error" in opened:
        raise opened["error"]
    gen = opened["gen"]
    print(f"llama-car serve: {args.persist_dir}: {gen.name}, {len(gen.nodes)} nodes, "
          f"ready in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    grace = settings.deadline + (float(args.llm_timeout) if engine.llm is not None else 0.0)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info",
                access_log=args.access_log, timeout_graceful_shutdown=int(grace) + 5,
                server_header=False, lifespan="on")
    return 0
