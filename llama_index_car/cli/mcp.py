"""``llama-car mcp DIR``: serve an index folder as Model Context Protocol tools over stdio.

Tools: ``search`` (hits with criterion spans and cell coordinates), ``answer`` (the cited
answer; retrieval-only without ``--llm``), ``get_section`` (a node's text and tables). The
folder opens once (every model warm before the first message is read) and follows
``llama-car index --update``. Stdout carries the protocol; everything else goes to stderr.
Needs ``pip install 'llama-index-car[mcp]'``. Details: docs/SERVE.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from llama_index_car.cli._args import subcommand

EPILOG = """example (an MCP client's server entry):
  {"command": "llama-car", "args": ["mcp", "/data/car-index"]}
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``mcp`` on the ``llama-car`` subparsers."""
    from llama_index_car.cli.serve import add_common

    p = subcommand(
        subparsers, "mcp",
        help="serve an index folder as MCP tools over stdio (search, answer, get_section)",
        doc=__doc__,
        epilog=EPILOG,
    )
    add_common(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Open the folder, then speak MCP on stdin/stdout until the client closes it."""
    from llama_index_car._errors import require

    require("mcp", extra="mcp", package="mcp")
    from llama_index_car.cli.serve import engine_of
    from llama_index_car.serve._mcp import build_server

    engine = engine_of(args)
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's
        gen = engine.open()
    print(f"llama-car mcp: {args.persist_dir}: {gen.name}, {len(gen.nodes)} nodes",
          file=sys.stderr, flush=True)
    build_server(engine).run("stdio")
    return 0
