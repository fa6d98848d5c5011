"""The layering rule of ``docs/ARCHITECTURE.md``, checked on the real import graph.

Every module of ``llama_index_car`` is parsed with ``ast``; every import it executes counts —
at module top or inside a function (a lazy import is still a dependency), and the module names
a package facade resolves lazily (the ``"llama_index_car.…"`` strings of an ``__init__.py``).
Imports under ``if TYPE_CHECKING:`` run only for the type checker and are left out. An edge
``a → b`` is ``a`` importing module ``b`` (``from pkg import mod`` is an edge to ``pkg.mod``).

The rule: each module sits in one layer (:data:`LAYERS`, by module prefix); no module imports
one of a layer above its own; and the graph has no cycle once the declared lazy edges
(:data:`LAZY_UP`, LlamaIndex's ``index.as_retriever`` pattern: an index makes its views, the
views know their index) are taken out — they must be function-level imports. A failure names
the offending edge (or cycle) with the file and line.

The reader package (``readers/llama-index-readers-hwpx``, :data:`READER_PACKAGE`) is parsed the
same way: it has no layers, but it may have no import cycle, and the cap on a module's length
holds there too.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "llama_index_car"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: layer number → (name, module prefixes relative to the package); a module takes the layer of
#: its longest matching prefix. Lower layers never import higher ones.
LAYERS: dict[int, tuple[str, tuple[str, ...]]] = {
    0: ("base", ("_errors", "_env", "_files", "_jsonl", "_lazy", "_npy", "_persist", "_records")),
    1: ("components", (
        "tokenizers", "bm25", "_bm25_arrays", "_bm25_build", "_bm25_heap", "_bm25_storage", "_bm25_kernels",
        "_bm25_numba", "bm25_sparse", "fusion", "framing", "spans", "span_index", "embeddings",
        "_filters", "_nodes", "stores", "_store_uris", "_qdrant_local", "sparse_stores", "flat_store", "_flat_math",
        "_flat_storage", "llms", "providers", "hypothesizers", "transformers", "postprocessors",
        "query_guard", "demo",
    )),
    2: ("index", ("indices",)),
    3: ("retrieval", ("retrievers", "query_engines")),
    4: ("folder", ("folder",)),
    5: ("evaluation", ("evaluation",)),
    6: ("apps", ("cli", "serve", "__main__", "")),  # "": the package facade itself
}

#: the declared upward edges (importer, imported), each a function-level import
LAZY_UP: frozenset[tuple[str, str]] = frozenset({
    (f"{PACKAGE}.indices.criterion_aware", f"{PACKAGE}.retrievers.views"),
})


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    lazy: bool  # inside a function

    def __str__(self) -> str:
        where = "in a function" if self.lazy else "at module top"
        return (f"{self.src} ({layer_name(self.src)}) imports {self.dst} "
                f"({layer_name(self.dst)}) at {module_path(self.src)}:{self.line}, {where}")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}

READER_PACKAGE = "llama_index.readers.hwpx"
READER_ROOT = ROOT.parent / "readers" / "llama-index-readers-hwpx" / "llama_index" / "readers" / "hwpx"
READER_MODULES: dict[str, Path] = {
    ".".join([READER_PACKAGE, *p.relative_to(READER_ROOT).with_suffix("").parts]).removesuffix(
        ".__init__"): p
    for p in sorted(READER_ROOT.rglob("*.py"))
}


def module_path(name: str) -> str:
    return str({**MODULES, **READER_MODULES}[name].relative_to(ROOT.parent))


def layer_of(name: str) -> int | None:
    rel = name[len(PACKAGE) + 1:] if name != PACKAGE else ""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for number, (_, prefixes) in LAYERS.items():
        for prefix in prefixes:
            if rel == prefix or (prefix and rel.startswith(prefix + ".")):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), number)
    return None if best is None else best[1]


def layer_name(name: str) -> str:
    if name.startswith(READER_PACKAGE):
        return "reader"
    number = layer_of(name)
    return "unplaced" if number is None else f"{LAYERS[number][0]}, layer {number}"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def _resolve(target: str, modules: Mapping[str, Path] = MODULES) -> str | None:
    """The longest module of ``modules`` that ``target`` names or lies in."""
    parts = target.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


def imports_of(name: str, package: str = PACKAGE,
               modules: Mapping[str, Path] = MODULES) -> list[Edge]:
    """The edges of the module ``name`` of ``package`` (whose modules are ``modules``)."""
    path = modules[name]
    return edges_in(name, path.read_text(encoding="utf-8"), path.name == "__init__.py",
                    package, modules)


def edges_in(name: str, source: str, is_package: bool = False, package: str = PACKAGE,
             modules: Mapping[str, Path] = MODULES) -> list[Edge]:
    """The edges of a module ``name`` of ``package`` whose text is ``source``: its imports of
    ``modules``."""
    tree = ast.parse(source, name)
    skip = _type_checking_nodes(tree)
    lazy_ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            lazy_ids.update(id(n) for n in ast.walk(node) if n is not node)
    edges: list[Edge] = []

    def add(target: str | None, node: ast.AST) -> None:
        if target is None or not target.startswith(package):
            return
        dst = _resolve(target, modules)
        if dst is not None and dst != name:
            edges.append(Edge(name, dst, getattr(node, "lineno", 0), id(node) in lazy_ids))

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # ``from pkg import mod``: the module mod, else pkg
                full = f"{module}.{alias.name}"
                add(full if full in modules else module, node)
        elif is_package and isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith(package + ".") and node.value in modules:
                edges.append(Edge(name, node.value, node.lineno, True))  # a lazy facade
    return edges


def find_cycle(edges: list[Edge], exempt: frozenset[tuple[str, str]] = LAZY_UP) -> list[Edge]:
    """One import cycle of ``edges`` (its edges in order) once the ``exempt`` edges are taken
    out; ``[]`` when there is none."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        graph.setdefault(e.dst, {})
        if (e.src, e.dst) not in exempt:
            graph.setdefault(e.src, {}).setdefault(e.dst, e)
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return [graph[a][b] for a, b in zip(cycle, cycle[1:], strict=False)]
    return []


def layer_violations(edges: list[Edge], exempt: frozenset[tuple[str, str]] = LAZY_UP
                     ) -> list[Edge]:
    """The edges of ``edges`` from a module to one of a higher layer, but the ``exempt``."""
    return [e for e in edges if (layer_of(e.dst) or 0) > (layer_of(e.src) or 0)
            and (e.src, e.dst) not in exempt]


GRAPH: list[Edge] = [e for name in MODULES for e in imports_of(name)]
READER_GRAPH: list[Edge] = [
    e for name in READER_MODULES for e in imports_of(name, READER_PACKAGE, READER_MODULES)
]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(n for n in MODULES if layer_of(n) is None)
    assert not unplaced, f"place these modules in a layer of LAYERS: {unplaced}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    up = layer_violations(GRAPH)
    assert not up, "imports against the layering:\n" + "\n".join(map(str, up))


def test_the_declared_lazy_edges_are_function_level_and_exist() -> None:
    for src, dst in sorted(LAZY_UP):
        found = [e for e in GRAPH if (e.src, e.dst) == (src, dst)]
        assert found, f"declared lazy edge {src} -> {dst} is gone: drop it from LAZY_UP"
        top = [e for e in found if not e.lazy]
        assert not top, "a declared lazy edge must be imported inside a function:\n" + "\n".join(
            map(str, top))


def test_no_import_cycle_but_the_declared_lazy_pair() -> None:
    cycle = find_cycle(GRAPH)
    assert not cycle, "an import cycle:\n" + "\n".join(map(str, cycle))


def test_the_declared_pair_is_the_as_retriever_pair() -> None:
    """Taking the declared edges out is what makes the graph acyclic: with them it has the
    index -> views cycle (else LAZY_UP would exempt an edge nobody needs)."""
    cycle = find_cycle(GRAPH, exempt=frozenset())
    assert cycle and any((e.src, e.dst) in LAZY_UP for e in cycle), cycle


def test_the_checker_sees_function_level_and_facade_imports() -> None:
    """The parser itself, on the package: a lazy import inside a function is an edge, and the
    root facade's edges are exactly its one top-level import (``_lazy``) and, lazily, the
    module of every name it exports (else the rule would pass vacuously)."""
    import llama_index_car

    lazy = [e for e in GRAPH if e.lazy and not MODULES[e.src].name == "__init__.py"]
    assert lazy, "no function-level import found"
    facade = [e for e in GRAPH if e.src == PACKAGE]
    assert {e.dst for e in facade if not e.lazy} == {f"{PACKAGE}._lazy"}
    exported = set(llama_index_car._EXPORTS.values())  # type: ignore[attr-defined]
    assert {e.dst for e in facade if e.lazy} == exported
    assert layer_of(f"{PACKAGE}.folder.build") == 4 and layer_of(f"{PACKAGE}._bm25_arrays") == 1


def test_the_checker_finds_what_it_is_for() -> None:
    """The rule's three checks on planted modules: an import inside a function closing a
    cycle, an upward import, and an exempt edge (which must be inside a function)."""
    fusion, build = f"{PACKAGE}.fusion", f"{PACKAGE}.folder.build"
    kiwi, dense = f"{PACKAGE}.retrievers.kiwi_bm25", f"{PACKAGE}.retrievers.dense"
    edges = [
        *edges_in(kiwi, f"from {PACKAGE}.retrievers import dense\n"),
        *edges_in(dense, f"def f():\n    from {PACKAGE}.retrievers.kiwi_bm25 import x\n"),
        *edges_in(fusion, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                  f"    from {PACKAGE}.folder import build\n"),
    ]
    assert [(e.src, e.dst, e.lazy) for e in edges] == [(kiwi, dense, False), (dense, kiwi, True)]
    assert {(e.src, e.dst) for e in find_cycle(edges)} == {(kiwi, dense), (dense, kiwi)}
    assert find_cycle(edges, exempt=frozenset({(dense, kiwi)})) == []
    up = edges_in(fusion, f"import {PACKAGE}.folder.build\n")
    assert [(e.src, e.dst) for e in layer_violations(up)] == [(fusion, build)]
    assert layer_violations(up, exempt=frozenset({(fusion, build)})) == []


def test_the_reader_package_has_no_import_cycle() -> None:
    """The reader package through the same parser (a function-level import counts, nothing is
    exempt): its facade imports its modules and the graph has no cycle."""
    assert len(READER_MODULES) > 10
    facade = {e.dst for e in READER_GRAPH if e.src == READER_PACKAGE}
    assert {f"{READER_PACKAGE}.base", f"{READER_PACKAGE}.hwp"} <= facade
    cycle = find_cycle(READER_GRAPH, exempt=frozenset())
    assert not cycle, "an import cycle in the reader package:\n" + "\n".join(map(str, cycle))


def test_the_checker_finds_a_cycle_in_the_reader_package() -> None:
    """A planted back edge (``hwp`` imported by ``_hwp5_section``, inside a function) closes a
    cycle with the real ``hwp -> _hwp5_section`` edge."""
    section, hwp = f"{READER_PACKAGE}._hwp5_section", f"{READER_PACKAGE}.hwp"
    planted = edges_in(section, f"def f():\n    from {READER_PACKAGE} import hwp\n",
                       package=READER_PACKAGE, modules=READER_MODULES)
    assert [(e.src, e.dst, e.lazy) for e in planted] == [(section, hwp, True)]
    cycle = find_cycle([*READER_GRAPH, *planted], exempt=frozenset())
    assert {(section, hwp), (hwp, section)} <= {(e.src, e.dst) for e in cycle}


#: the longest a module may be, in ``llama_index_car`` (``evaluation/`` excepted: its runner and
#: systems are one experiment each) and in the reader package
MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines_outside_evaluation() -> None:
    long = {name: n for name, path in {**MODULES, **READER_MODULES}.items()
            if not name.startswith(f"{PACKAGE}.evaluation")
            and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules (lines > {MAX_MODULE_LINES}): {long}"


def _module_map() -> list[list[str]]:
    """The first cells of ``docs/ARCHITECTURE.md``'s module map, as the paths they name
    (``a.py``, ``pkg/``; a bare name after a path lives in the folder of the one before)."""
    doc = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = doc[doc.index("| module | public names |"):].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        names, folder = [], ""
        for name in line.split("|")[1].replace("`", "").split(","):
            name = name.strip()
            if "/" in name.rstrip("/"):
                folder = name.rsplit("/", 1)[0] + "/"
            elif not name.endswith("/") and folder:
                name = folder + name
            names.append(name)
        rows.append(names)
    return rows


def test_the_module_map_names_every_module_and_only_modules() -> None:
    """ARCHITECTURE.md's module map matches the tree: every module of the package is named
    (its path, or a package row ``pkg/`` for all of a package), and every path named is a
    module (no stale row)."""
    named = [n for row in _module_map() for n in row]
    files = {str(p.relative_to(ROOT)) for p in MODULES.values()}
    packages = {n for n in named if n.endswith("/")}
    stale = [n for n in named if n not in files and not (n in packages and (ROOT / n).is_dir())]
    assert not stale, f"the module map names what is not in the tree: {stale}"
    missing = sorted(f for f in files if f not in named and not f.endswith("__init__.py")
                     and not any(f.startswith(pkg) for pkg in packages))
    assert not missing, f"modules missing from the module map: {missing}"


def test_the_picture_places_every_module_where_the_rule_does() -> None:
    """The layer table that opens ARCHITECTURE.md names, in each layer's row, every module
    prefix :data:`LAYERS` puts in that layer (``_bm25_*`` covers the ``_bm25_`` modules)."""
    import fnmatch
    import re

    doc = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows: dict[int, set[str]] = {}
    for line in doc.splitlines():
        found = re.match(r"\| (\d) [a-z]+ \| (.*?) \| [^|]* \|$", line)
        if found:
            rows[int(found[1])] = {n.rstrip("/").removesuffix(".py")
                                   for n in re.findall(r"`([^`]+)`", found[2])}
    assert sorted(rows) == sorted(LAYERS)
    wrong = {number: [p or "__init__" for p in prefixes
                      if not any(fnmatch.fnmatch(p or "__init__", n) for n in rows[number])]
             for number, (_, prefixes) in LAYERS.items()}
    assert not any(wrong.values()), f"missing from the picture's layer rows: {wrong}"
