"""Shared fixtures: the ``../shared`` data (corpus, eval sets) when it exists, and ``fake``
(the local fake of the provider HTTP APIs, ``tests/fakes/provider_server.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.fakes.provider_server import FakeProviderServer

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ``../shared``; tests using it carry the ``corpus`` marker."""
    return SHARED.joinpath(*parts)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present (CI provides it)")
    return SHARED


@pytest.fixture(scope="session")
def eval_dir(shared_dir: Path) -> Path:
    return shared_dir / "eval"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProviderServer]:
    """A running fake of the Anthropic/OpenAI/Cohere HTTP APIs with every SDK pointed at it
    through the environment; stopped after the test."""
    from tests.fakes.provider_server import serving

    with serving(monkeypatch) as server:
        yield server


@pytest.fixture(autouse=True, scope="session")
def _private_embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests never read or write the user's shared embedding cache (``~/.cache``): every
    default cache location points into a session temporary folder instead."""
    import os

    old = os.environ.get("LLAMA_CAR_CACHE")
    os.environ["LLAMA_CAR_CACHE"] = str(tmp_path_factory.mktemp("embedding-cache"))
    yield
    if old is None:
        os.environ.pop("LLAMA_CAR_CACHE", None)
    else:
        os.environ["LLAMA_CAR_CACHE"] = old


#: a folder mixing every format the project reads: ``{name in the folder: path under
#: ../shared/corpus}`` (small real files; ``hwp5_named.hwpx`` holds HWP 5 bytes)
MIXED_FORMATS = {
    "nodehwp-table-simple-1.hwp": "hwp/nodehwp-table-simple-1.hwp",
    "kaist-055.hwp": "hwp/kaist-055.hwp",
    "hwpxlib_table_small.hwpx": "hwpx/hwpxlib_table_small.hwpx",
    "osk_textbox_table.hml": "hml/osk_textbox_table.hml",
    "sub/kaist_double_major_form.hml": "hml/kaist_double_major_form.hml",
    "hwp5_named.hwpx": "hwp/issue1510_coanchored_float_tables.hwp",
}


def copy_mixed_formats(shared: Path, dest: Path) -> Path:
    """Copy :data:`MIXED_FORMATS` from ``shared/corpus`` into ``dest`` (made writable)."""
    import shutil

    for name, rel in MIXED_FORMATS.items():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared / "corpus" / rel, target)
    return dest
