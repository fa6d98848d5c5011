"""``llama-car mcp DIR`` spoken to by the MCP SDK's own client over stdio (the server is a real
subprocess over a real index folder). Oracles: the library on the same folder (hits) and the
reader's ``node_cells()`` (cell coordinates).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import REPO_ROOT
from tests.fakes.serve_folder import shared_folder

pytest.importorskip("mcp", reason="the [mcp] extra is needed")

QUESTION = "난간 높이는 몇 m 이상?"


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


def test_mcp_tools_over_stdio_return_hits_cells_and_answers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from mcp import Client, StdioServerParameters

    from llama_index_car.folder import load_index

    folder = shared_folder(tmp_path_factory)[1]
    env = {"PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), str(REPO_ROOT / "readers" / "llama-index-readers-hwpx")]),
        "LLAMA_CAR_CACHE": os.environ.get("LLAMA_CAR_CACHE", ""), "CAR_LLM": "none"}
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "llama_index_car", "mcp", str(folder)], env=env)

    async def session() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(params, read_timeout_seconds=600) as client:
            out["tools"] = {t.name: t for t in (await client.list_tools()).tools}
            out["search"] = _structured(await client.call_tool(
                "search", {"query": QUESTION, "top_k": 3}))
            node_id = out["search"]["hits"][0]["node_id"]
            out["section"] = _structured(await client.call_tool("get_section",
                                                                {"node_id": node_id}))
            out["answer"] = _structured(await client.call_tool("answer", {"query": QUESTION}))
            out["bad"] = await client.call_tool("search", {"query": QUESTION, "top_k": 500})
            out["missing"] = await client.call_tool("get_section", {"node_id": "nope"})
        return out

    got = anyio.run(session)
    assert set(got["tools"]) == {"search", "answer", "get_section"}
    assert got["tools"]["search"].input_schema["properties"]["retriever"]["enum"] == [
        "car", "hybrid", "bm25", "dense"]

    local = load_index(folder)
    want = local.as_retriever("car", similarity_top_k=3).retrieve(QUESTION)
    hits = got["search"]["hits"]
    generation = json.loads((Path(folder) / "CURRENT").read_text())["generation"]
    assert got["search"]["generation"] == generation
    assert [h["node_id"] for h in hits] == [w.node.node_id for w in want]

    from llama_index.readers.hwpx import node_cells

    nodes = {n.node_id: n for n in local.nodes}
    cells_seen = 0
    for h in hits:
        truth = {(c.table, c.row, c.col): c for c in node_cells(nodes[h["node_id"]])}
        for s in h["spans"]:
            if s["kind"] == "cell":
                assert " ".join(truth[(s["table_index"], s["row"], s["col"])].text.split()) \
                    == s["text"]
                cells_seen += 1
    assert cells_seen > 0

    section = got["section"]
    top = nodes[hits[0]["node_id"]]
    assert section["text"] == top.get_content()
    assert {(t["table"], c["row"], c["col"], c["text"]) for t in section["tables"]
            for c in t["cells"]} == {(c.table, c.row, c.col, c.text) for c in node_cells(top)}
    answer = got["answer"]
    assert answer["fallback"] is True and answer["citations"]
    assert all(c["node_id"] in nodes for c in answer["citations"])
    assert got["bad"].is_error and got["missing"].is_error
