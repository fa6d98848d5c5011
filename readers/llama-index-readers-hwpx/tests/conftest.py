"""Fixtures for the HWPX reader tests (no global hooks, markers or options here).

Markers ``slow`` and ``corpus`` are declared in the repository's root pyproject.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.readers.hwpx import HWPXReader
from llama_index.readers.hwpx.writer import HWPXBuilder

# readers/llama-index-readers-hwpx/tests/conftest.py -> parents[3] is the repository root
SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
CORPUS = SHARED / "corpus" / "hwpx"


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """``../shared/corpus/hwpx``; tests using it carry ``@pytest.mark.corpus``."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus/hwpx is not present (CI provides it)")
    return CORPUS


@pytest.fixture()
def reader() -> HWPXReader:
    return HWPXReader()


@pytest.fixture()
def write(tmp_path: Path) -> Callable[..., Path]:
    """``write(builder, name="doc.hwpx", **to_bytes_options) -> Path`` in tmp_path."""

    def _write(builder: HWPXBuilder, name: str = "doc.hwpx", **opts: object) -> Path:
        path = tmp_path / name
        path.write_bytes(builder.to_bytes(**opts))  # type: ignore[arg-type]
        return path

    return _write
