"""``llama-car mcp DIR``: the service's retrieval as Model Context Protocol tools over stdio
(the official ``mcp`` SDK, ``[mcp]`` extra).

Tools (each result names the index ``generation`` it was served from):

* ``search(query, retriever="car", top_k=5)`` → the hits with their channel ranks and
  criterion spans (sentence offsets; table, row, col, spans and headers of cells);
* ``answer(query, retriever="car", top_k=5)`` → the cited answer (retrieval-only without an
  LLM), its citations resolved to (file, section, table, row, col);
* ``get_section(node_id)`` → a node's text and its tables (cells with coordinates, HTML).

The folder's ``CURRENT`` is checked at most once a second, at a tool call, so a
``llama-car index --update`` is picked up without a restart. Stdout carries the protocol
only: anything a library prints while the folder opens goes to stderr.
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any, Literal

import anyio
from pydantic import Field

from llama_index_car._errors import CarError
from llama_index_car.serve._engine import FolderEngine

#: seconds between two checks of the folder's ``CURRENT``
REFRESH_SECONDS = 1.0

Kind = Literal["car", "hybrid", "bm25", "dense"]
TopK = Annotated[int, Field(ge=1, le=50, description="hits (1..50)")]
Query = Annotated[str, Field(min_length=1, max_length=2000, description="the question")]


def build_server(engine: FolderEngine) -> Any:
    """An ``MCPServer`` with the three tools over ``engine`` (opened by the caller)."""
    from mcp.server import MCPServer

    from llama_index_car.serve.app import _version

    server = MCPServer(
        name="llama-car",
        title="llama-index-car: criterion-aware search over Korean technical standards",
        instructions=(
            "Search a folder of Korean technical standards (HWP/HWPX/HML) for the clause that "
            "states a criterion. `search` returns hits whose criterion spans name the sentence "
            "(offsets) or the table cell (table, row, col; 0-based) that governs; `answer` "
            "returns an answer citing them as [n]; `get_section` returns a hit's whole text "
            "and tables so a cited cell can be shown with its headers."),
        version=_version(),
    )
    checked = [time.monotonic()]
    lock = threading.Lock()

    def follow() -> None:
        with lock:
            if time.monotonic() - checked[0] < REFRESH_SECONDS:
                return
            checked[0] = time.monotonic()
        try:
            engine.refresh()
        except (CarError, OSError):
            pass  # the old generation keeps serving; the failure is logged by the engine

    def search_sync(query: str, retriever: str, top_k: int) -> dict[str, Any]:
        follow()
        with engine.lease() as gen:
            hits = engine.retrieve(gen, query, retriever, top_k)
            return {"generation": gen.name, "retriever": retriever, "hits": hits}

    def answer_sync(query: str, retriever: str, top_k: int) -> dict[str, Any]:
        follow()
        with engine.lease() as gen:
            a = engine.answer(gen, query, retriever, top_k)
            return {"generation": gen.name, "answer": a.text, "citations": a.citations,
                    "fallback": a.fallback, "error": a.error}

    def section_sync(node_id: str) -> dict[str, Any]:
        follow()
        with engine.lease() as gen:
            found = engine.node(gen, node_id)
            if found is None:
                raise CarError(f"no node {node_id!r} in generation {gen.name}")
            return {"generation": gen.name, **found}

    @server.tool(description="Search the standards: hits with criterion spans (sentence "
                 "offsets, or table/row/col of the governing cell) and channel ranks.")
    async def search(query: Query, retriever: Kind = "car", top_k: TopK = 5) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(search_sync, query, retriever, top_k)

    @server.tool(description="Answer a question citing the spans [n]; each citation names "
                 "its file, section and (for a table cell) table, row and column.")
    async def answer(query: Query, retriever: Kind = "car", top_k: TopK = 5) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(answer_sync, query, retriever, top_k)

    @server.tool(description="A hit's whole section: its text, text/table segments and its "
                 "tables (cells with row/col coordinates, and as HTML).")
    async def get_section(node_id: Annotated[str, Field(max_length=200)]) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(section_sync, node_id)

    return server
