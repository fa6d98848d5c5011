"""No import cycle among the reader's modules, counting imports inside functions.

Every module of ``llama_index.readers.hwpx`` is parsed with ``ast``; an import executed at
module top or in a function (not under ``if TYPE_CHECKING:``) is an edge. The readers of the
other formats register themselves with the HWPX reader as their classes are defined
(``HWPXReader.__init_subclass__``) and their errors live in ``_errors``, so ``base`` imports
neither ``hwp`` nor ``hml``, and no ``_hwp5_*`` module imports ``hwp``. A failure names the
cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import llama_index.readers.hwpx as package

PACKAGE = "llama_index.readers.hwpx"
ROOT = Path(package.__file__).resolve().parent
MODULES = {(PACKAGE if p.name == "__init__.py" else f"{PACKAGE}.{p.stem}"): p
           for p in ROOT.glob("*.py")}


def _edges(name: str) -> set[str]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
            for child in node.body for n in ast.walk(child)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            target = full if full in MODULES else node.module
            if target in MODULES and target != name:
                out.add(target)
    return out


def test_the_reader_modules_import_in_one_direction() -> None:
    graph = {name: _edges(name) for name in MODULES}
    graph[PACKAGE] = set()  # the facade imports everything; nothing may import it back
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, node])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        cycle = visit(start, []) if start not in state else None
        assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
    assert f"{PACKAGE}.hwp" not in graph[f"{PACKAGE}.base"]
    hwp5 = [name for name in graph if name.startswith(f"{PACKAGE}._hwp5_")]
    assert hwp5 and not [name for name in hwp5 if f"{PACKAGE}.hwp" in graph[name]]
