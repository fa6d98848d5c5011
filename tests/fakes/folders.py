"""Small real index folders built in code, for tests that damage copies of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from tests.fakes.embeddings import HashedBigramEmbedding


def tunnel_folder(tmp_path_factory: pytest.TempPathFactory, label: str) -> Path:
    """An index folder of the demo's tunnel guideline (one HWPX file, tables included),
    embedded with :class:`HashedBigramEmbedding` and no cache."""
    from llama_index_car.folder import BuildOptions, build_index

    src = tmp_path_factory.mktemp("src")
    shutil.copy(DEMO_CORPUS_DIR / "dg2012_tunnel.hwpx", src)
    out = tmp_path_factory.mktemp(label) / "base"
    build_index(src, out, BuildOptions(embed_model=HashedBigramEmbedding(), use_cache=False))
    return out
