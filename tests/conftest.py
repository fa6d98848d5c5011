"""Shared fixtures: the ``../shared`` data (corpus, eval sets) when it exists."""

from __future__ import annotations

from pathlib import Path

import pytest

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
