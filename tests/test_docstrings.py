"""Docstring examples run (``doctest``) and every public name is documented.

``MODULES`` lists every module of both distributions explicitly; a test checks the list
against the files on disk, so a new module cannot be left out silently (add it here). Each
module's doctests must pass; examples that need data not available in a docstring are marked
``# doctest: +SKIP`` at the source.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import io
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
READER_ROOT = REPO / "readers" / "llama-index-readers-hwpx"

MODULES: tuple[str, ...] = (
    "llama_index_car",
    "llama_index_car._bm25_arrays",
    "llama_index_car._bm25_build",
    "llama_index_car._bm25_heap",
    "llama_index_car._bm25_kernels",
    "llama_index_car._bm25_numba",
    "llama_index_car._bm25_storage",
    "llama_index_car._env",
    "llama_index_car._errors",
    "llama_index_car._files",
    "llama_index_car._filters",
    "llama_index_car._flat_math",
    "llama_index_car._flat_storage",
    "llama_index_car._jsonl",
    "llama_index_car._lazy",
    "llama_index_car._nodes",
    "llama_index_car._npy",
    "llama_index_car._persist",
    "llama_index_car._qdrant_local",
    "llama_index_car._records",
    "llama_index_car.bm25",
    "llama_index_car.bm25_sparse",
    "llama_index_car.cli",
    "llama_index_car.cli._args",
    "llama_index_car.cli.demo",
    "llama_index_car.cli.eval",
    "llama_index_car.cli.index",
    "llama_index_car.cli.preserve",
    "llama_index_car.cli.probe",
    "llama_index_car.cli.query",
    "llama_index_car.cli.mcp",
    "llama_index_car.cli.serve",
    "llama_index_car.demo",
    "llama_index_car.demo._documents",
    "llama_index_car.demo._types",
    "llama_index_car.demo.loader",
    "llama_index_car.demo.spec",
    "llama_index_car.embeddings",
    "llama_index_car.embeddings._cache_files",
    "llama_index_car.embeddings._e5_format",
    "llama_index_car.embeddings._e5_onnx",
    "llama_index_car.embeddings._e5_tokenizer",
    "llama_index_car.embeddings._onnx_proto",
    "llama_index_car.embeddings.e5",
    "llama_index_car.embeddings.use",
    "llama_index_car.embeddings.cache",
    "llama_index_car.evaluation",
    "llama_index_car.evaluation.io",
    "llama_index_car.evaluation.metrics",
    "llama_index_car.evaluation.overlap",
    "llama_index_car.evaluation.pathways",
    "llama_index_car.evaluation.pdf_tables",
    "llama_index_car.evaluation.plots",
    "llama_index_car.evaluation.preservation",
    "llama_index_car.evaluation.probe",
    "llama_index_car.evaluation.report",
    "llama_index_car.evaluation.runner",
    "llama_index_car.evaluation.span_eval",
    "llama_index_car.evaluation.span_hits",
    "llama_index_car.evaluation.stats",
    "llama_index_car.evaluation.systems",
    "llama_index_car.folder",
    "llama_index_car.folder.build",
    "llama_index_car.folder.embed",
    "llama_index_car.folder.keys",
    "llama_index_car.folder.load",
    "llama_index_car.folder.options",
    "llama_index_car.folder.ray",
    "llama_index_car.folder.record",
    "llama_index_car.folder.sources",
    "llama_index_car.folder.store",
    "llama_index_car.folder.update",
    "llama_index_car.flat_store",
    "llama_index_car.framing",
    "llama_index_car.fusion",
    "llama_index_car.hypothesizers",
    "llama_index_car.hypothesizers.base",
    "llama_index_car.hypothesizers.events",
    "llama_index_car.hypothesizers.llm",
    "llama_index_car.hypothesizers.prompts",
    "llama_index_car.indices",
    "llama_index_car.indices._dense",
    "llama_index_car.indices._layout",
    "llama_index_car.indices._node_records",
    "llama_index_car.indices._store_bm25",
    "llama_index_car.indices._lexical",
    "llama_index_car.indices._snapshot",
    "llama_index_car.indices._storage",
    "llama_index_car.indices._writer",
    "llama_index_car.indices.criterion_aware",
    "llama_index_car.llms",
    "llama_index_car.llms.anthropic",
    "llama_index_car.llms.deadline",
    "llama_index_car.llms.transport",
    "llama_index_car.providers",
    "llama_index_car.query_engines",
    "llama_index_car.query_engines._citations",
    "llama_index_car.query_engines.span_citation",
    "llama_index_car.query_guard",
    "llama_index_car.retrievers",
    "llama_index_car.retrievers._channels",
    "llama_index_car.retrievers.car",
    "llama_index_car.retrievers.car_hypothesis",
    "llama_index_car.retrievers.car_offline",
    "llama_index_car.retrievers.criterion_aware",
    "llama_index_car.retrievers.kiwi_bm25",
    "llama_index_car.retrievers.dense",
    "llama_index_car.retrievers.routing",
    "llama_index_car.retrievers.views",
    "llama_index_car.postprocessors",
    "llama_index_car.postprocessors.criterion_spans",
    "llama_index_car.postprocessors.span_rerank",
    "llama_index_car.serve",
    "llama_index_car.serve._asgi",
    "llama_index_car.serve._engine",
    "llama_index_car.serve._html",
    "llama_index_car.serve._mcp",
    "llama_index_car.serve._metrics",
    "llama_index_car.serve._ray",
    "llama_index_car.serve.app",
    "llama_index_car.span_index",
    "llama_index_car.spans",
    "llama_index_car.sparse_stores",
    "llama_index_car.retrievers.weighted_rrf",
    "llama_index_car.stores",
    "llama_index_car._store_uris",
    "llama_index_car.tokenizers",
    "llama_index_car.tokenizers._domain",
    "llama_index_car.tokenizers.kiwi",
    "llama_index_car.transformers",
    "llama_index_car.transformers.reframing",
    "llama_index.readers.hwpx",
    "llama_index.readers.hwpx._errors",
    "llama_index.readers.hwpx._headings",
    "llama_index.readers.hwpx._hwp5_container",
    "llama_index.readers.hwpx._hwp5_records",
    "llama_index.readers.hwpx._hwp5_section",
    "llama_index.readers.hwpx._hwp5_xml",
    "llama_index.readers.hwpx.hwp",
    "llama_index.readers.hwpx._model",
    "llama_index.readers.hwpx._package",
    "llama_index.readers.hwpx._node_meta",
    "llama_index.readers.hwpx._parse",
    "llama_index.readers.hwpx._render",
    "llama_index.readers.hwpx.base",
    "llama_index.readers.hwpx.hml",
    "llama_index.readers.hwpx.hml_writer",
    "llama_index.readers.hwpx.node_parser",
    "llama_index.readers.hwpx.writer",
    "llama_index.readers.hwpx._writer_markup",
)

#: packages whose ``__all__`` is the public surface checked for documented examples
PUBLIC_PACKAGES: tuple[str, ...] = ("llama_index_car", "llama_index.readers.hwpx")

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules_on_disk() -> set[str]:
    found = {
        _module_name(p, REPO)
        for p in (REPO / "llama_index_car").rglob("*.py")
        if p.name != "__main__.py"  # running it would start the CLI
    }
    found |= {_module_name(p, READER_ROOT) for p in (READER_ROOT / "llama_index").rglob("*.py")}
    return found


def test_every_module_is_listed() -> None:
    on_disk = _modules_on_disk()
    missing, stale = sorted(on_disk - set(MODULES)), sorted(set(MODULES) - on_disk)
    assert not missing, f"add to MODULES in tests/test_docstrings.py: {missing}"
    assert not stale, f"remove from MODULES (no such file): {stale}"


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests_pass(name: str) -> None:
    module = importlib.import_module(name)
    is_package = Path(str(module.__file__)).name == "__init__.py"
    if not is_package:  # re-export-only __init__ files may go without a module docstring
        assert module.__doc__ and module.__doc__.strip(), f"{name} has no module docstring"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, name):
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()


def _has_example(text: str) -> bool:
    return ">>>" in text or "Example" in text or "::\n" in text


def _public_objects() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                out.append((f"{package}.{name}", obj))
    return out


@pytest.mark.parametrize(
    ("qualname", "obj"), [pytest.param(q, o, id=q) for q, o in _public_objects()]
)
def test_public_name_is_documented_with_an_example(qualname: str, obj: object) -> None:
    """A docstring on every public class/function; an example in it or in its module's.

    Exceptions and warnings only need the docstring (their use is ``raise`` / ``except``).
    """
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{qualname} has no docstring"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return
    module_doc = inspect.getdoc(inspect.getmodule(obj)) or ""
    assert _has_example(doc) or _has_example(module_doc), f"{qualname}: no example"
