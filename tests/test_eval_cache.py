"""The on-disk embedding cache: a second run re-embeds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_car._errors import CacheWarning
from llama_index_car.embeddings.cache import EmbeddingCache


class CountingEmbedding(BaseEmbedding):
    """Deterministic 3-d vectors; counts every string it embeds (query and text apart)."""

    model_name: str = "counting"
    text_calls: int = 0
    query_calls: int = 0

    def _vec(self, s: str) -> list[float]:
        return [float(len(s)), float(sum(map(ord, s)) % 97), 1.0]

    def _get_query_embedding(self, query: str) -> list[float]:
        self.query_calls += 1
        return [-x for x in self._vec(query)]

    def _get_text_embedding(self, text: str) -> list[float]:
        self.text_calls += 1
        return self._vec(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def test_second_run_reembeds_nothing(tmp_path: Path) -> None:
    texts = ["배수시설", "설치기준", "배수시설", "x" * 50]
    m1 = CountingEmbedding()
    first = EmbeddingCache(tmp_path, m1).embed(texts)
    assert m1.text_calls == 3  # the duplicate is embedded once
    m2 = CountingEmbedding()
    c2 = EmbeddingCache(tmp_path, m2)
    again = c2.embed(texts)
    assert m2.text_calls == 0 and c2.hits == 4 and c2.misses == 0
    np.testing.assert_array_equal(first, again)
    assert first.dtype == np.float32
    np.testing.assert_array_equal(first[0], np.asarray(m1._vec("배수시설"), dtype=np.float32))


def test_query_and_text_kinds_are_separate_for_asymmetric_models(tmp_path: Path) -> None:
    m = CountingEmbedding()
    cache = EmbeddingCache(tmp_path, m)
    t = cache.embed(["a"], "text")
    q = cache.embed(["a"], "query")
    assert m.text_calls == 1 and m.query_calls == 1
    assert q[0][0] == -t[0][0]
    cache.embed(["a", "b"], "query")
    assert m.query_calls == 2


def test_model_spec_separates_folders(tmp_path: Path) -> None:
    a = EmbeddingCache(tmp_path, CountingEmbedding(model_name="m1"))
    b = EmbeddingCache(tmp_path, CountingEmbedding(model_name="m2"))
    a.embed(["x"])
    assert a.path != b.path and len(b) == 0
    index = json.loads((a.path / "index.json").read_text())
    assert index["format_version"] == 2 and index["dim"] == 3
    (shard,) = index["shards"]
    assert shard["name"].endswith(".npy") and shard["rows"] == 1
    assert shard["bytes"] == (a.path / shard["name"]).stat().st_size


def test_damaged_index_is_one_warning_and_the_texts_are_embedded_again(tmp_path: Path) -> None:
    """Before: a damaged index.json stopped the job (IndexPersistError); a cache that cannot be
    used never breaks the main job: it is reported, recomputed and rewritten."""
    cache = EmbeddingCache(tmp_path, CountingEmbedding())
    cache.embed(["x"])
    (cache.path / "index.json").write_text("{broken")
    m = CountingEmbedding()
    with pytest.warns(CacheWarning, match=r"index\.json is not usable"):
        again = EmbeddingCache(tmp_path, m)
    np.testing.assert_array_equal(again.embed(["x"]), cache.embed(["x"]))
    assert m.text_calls == 1
    assert len(EmbeddingCache(tmp_path, CountingEmbedding())) == 1  # rewritten


def test_empty_input(tmp_path: Path) -> None:
    assert EmbeddingCache(tmp_path, CountingEmbedding()).embed([]).shape[0] == 0


def test_two_writers_share_one_cache(tmp_path: Path) -> None:
    a = EmbeddingCache(tmp_path, CountingEmbedding())
    b = EmbeddingCache(tmp_path, CountingEmbedding())  # loaded before a writes
    a.embed(["from-a"])
    b.embed(["from-b"])  # must not drop a's entry from the index on disk
    m = CountingEmbedding()
    c = EmbeddingCache(tmp_path, m)
    c.embed(["from-a", "from-b"])
    assert m.text_calls == 0 and len(c) == 2
    b.embed(["from-a"])  # b adopted the merged index when it saved: a hit
    assert b.misses == 1
    assert len(EmbeddingCache(tmp_path, CountingEmbedding())) == 2


class KernelEmbedding(CountingEmbedding):
    """Same engine, a given kernel family (as ``MultilingualE5Embedding.kernel_id`` reports)."""

    kernels: str = ""

    @property
    def engine_id(self) -> str:
        return "onnx-nbits4-v3"

    @property
    def kernel_id(self) -> str:
        return self.kernels


def test_vectors_of_two_kernel_families_never_share_a_folder(tmp_path: Path) -> None:
    """Before: the key was the engine alone, so a cache written on an AVX2 machine served its
    (slightly different) vectors to an AVX-512 one."""
    avx2 = EmbeddingCache(tmp_path, KernelEmbedding(kernels="ort1.32.0-x86_64-avx2+fma"))
    avx512 = EmbeddingCache(tmp_path, KernelEmbedding(kernels="ort1.32.0-x86_64-avx2+avx512f"))
    avx2.embed(["x"])
    same = EmbeddingCache(tmp_path, KernelEmbedding(kernels="ort1.32.0-x86_64-avx2+fma"))
    assert avx2.path != avx512.path and len(avx512) == 0
    assert same.path == avx2.path and len(same) == 1
    assert avx2.spec["kernels"] == "ort1.32.0-x86_64-avx2+fma"


def test_kernel_id_reads_the_dispatch_features() -> None:
    from llama_index_car.embeddings._e5_onnx import kernel_id

    x86 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512_vnni amx_int8\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n"
    assert kernel_id(x86).endswith("-avx2+fma+avx512f+avx512_vnni+amx_int8")
    assert kernel_id(arm).endswith("-asimd+asimddp+i8mm")
    assert kernel_id("").endswith("-none")
    assert kernel_id(x86) != kernel_id(x86.replace(" amx_int8", ""))
