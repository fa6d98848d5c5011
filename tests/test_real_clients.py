"""The real anthropic / openai / cohere SDKs, through the llama-index integrations, against a
local fake of their HTTP APIs (``tests/fakes/provider_server.py``): request shape, response
parsing, timeout, 429 retry and 500 fallback — all offline."""

from __future__ import annotations

import base64
import json
import struct
import time
from typing import Any

import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import HypothesisError
from llama_index_car.hypothesizers.llm import HyDEHypothesizer, LLMCriterionHypothesizer
from llama_index_car.providers import resolve_embed_model, resolve_llm, resolve_reranker
from tests.fakes.provider_server import (  # noqa: F401 - fixtures
    FakeProviderServer,
    Reply,
    fake_vector,
    overlap_score,
    provider_env,
    provider_server,
)

QUERY = "온도에 따라 늘었다 줄었다 하는 이음부는 어떻게 설치하나요?"


def claude_hypothesizer(
    *, llm_timeout: float | None = 10.0, **kw: Any
) -> LLMCriterionHypothesizer:
    llm = resolve_llm("anthropic", timeout=llm_timeout, max_retries=0)
    kw.setdefault("backoff", 0.01)
    return LLMCriterionHypothesizer(llm=llm, **kw)


# ----------------------------------------------------------------------------- Anthropic
def test_anthropic_request_and_parsing(provider_env: FakeProviderServer) -> None:
    result = claude_hypothesizer().hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert result.criteria == ("신축이음장치", "설치기준")
    (request,) = provider_env.requests_to("/v1/messages")
    assert request.method == "POST"
    assert request.header("x-api-key") == "sk-ant-fake"
    assert request.header("anthropic-version")
    body = request.body
    assert body["model"] == "claude-sonnet-4-6"
    assert body.get("stream") in (None, False)
    prompt = json.dumps(body["messages"], ensure_ascii=False)
    assert QUERY in prompt and "기준어" in prompt


async def test_anthropic_async_path(provider_env: FakeProviderServer) -> None:
    provider_env.anthropic_text = lambda req: (
        '```json\n{"가설": "방호울타리 설치기준", "기준어": ["방호울타리", "설치기준"]}\n```'
    )
    hyp = claude_hypothesizer()
    result = await hyp.ahypothesize("차가 길 밖으로 못 나가게 막는 울타리 기준")
    assert result.criteria == ("방호울타리", "설치기준")
    assert len(provider_env.requests_to("/v1/messages")) == 1
    assert (await hyp.ahypothesize("차가 길 밖으로 못 나가게 막는 울타리 기준")).cached
    assert len(provider_env.requests_to("/v1/messages")) == 1


def test_anthropic_429_then_success(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v1/messages", Reply(status=429), Reply(status=529))
    result = claude_hypothesizer(max_retries=2).hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert len(provider_env.requests_to("/v1/messages")) == 3


def test_anthropic_sdk_timeout_is_retried_then_fails(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v1/messages", Reply(delay=3.0), Reply(delay=3.0))
    hyp = claude_hypothesizer(llm_timeout=0.3, timeout=None, max_retries=1)
    start = time.perf_counter()
    with pytest.raises(HypothesisError, match=r"after 2 attempt\(s\).*Timeout"):
        hyp.hypothesize(QUERY)
    assert time.perf_counter() - start < 2.5
    assert len(provider_env.requests_to("/v1/messages")) == 2


async def test_anthropic_hypothesizer_timeout_async(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v1/messages", Reply(delay=3.0))
    hyp = claude_hypothesizer(timeout=0.3, max_retries=0)
    start = time.perf_counter()
    with pytest.raises(HypothesisError, match="no answer within 0.3"):
        await hyp.ahypothesize(QUERY)
    assert time.perf_counter() - start < 1.5


def test_anthropic_401_not_retried(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v1/messages", Reply(status=401))
    with pytest.raises(HypothesisError, match="not retryable.*API key"):
        claude_hypothesizer(max_retries=3).hypothesize(QUERY)
    assert len(provider_env.requests_to("/v1/messages")) == 1


def test_anthropic_500_exhausts_retries(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v1/messages", *[Reply(status=500)] * 3)
    with pytest.raises(HypothesisError, match="HTTP 500"):
        claude_hypothesizer(max_retries=2).hypothesize(QUERY)
    assert len(provider_env.requests_to("/v1/messages")) == 3


def test_anthropic_garbage_output(provider_env: FakeProviderServer) -> None:
    provider_env.anthropic_text = "죄송하지만 이 질문에는 답변드릴 수 없습니다. " * 6 + "\n다른 질문을 해 주세요."
    with pytest.raises(HypothesisError, match="unusable"):
        claude_hypothesizer().hypothesize(QUERY)


def test_hyde_through_anthropic(provider_env: FakeProviderServer) -> None:
    provider_env.anthropic_text = "신축이음장치는 온도 변화에 따른 교량의 신축을 흡수한다."
    llm = resolve_llm("anthropic", timeout=10.0, max_retries=0)
    result = HyDEHypothesizer(llm=llm, term_extractor=str.split).hypothesize(QUERY)
    assert result.text.startswith("신축이음장치는")
    body = provider_env.requests_to("/v1/messages")[0].body
    assert QUERY in json.dumps(body["messages"], ensure_ascii=False)


# ----------------------------------------------------------------------------- OpenAI
def test_openai_embeddings_request_and_parsing(provider_env: FakeProviderServer) -> None:
    emb = resolve_embed_model("openai", max_retries=1)
    vector = emb.get_query_embedding("배수시설 설치기준")
    expected = fake_vector("배수시설 설치기준", 1536)
    assert len(vector) == 1536
    assert max(abs(a - b) for a, b in zip(vector, expected, strict=True)) < 1e-6
    (request,) = provider_env.requests_to("/v1/embeddings")
    assert request.header("authorization") == "Bearer sk-openai-fake"
    assert request.body["model"] == "text-embedding-3-large"
    assert request.body["dimensions"] == 1536
    assert request.body["input"] in (["배수시설 설치기준"], "배수시설 설치기준")


def test_openai_float_and_base64_encodings(provider_env: FakeProviderServer) -> None:
    url = provider_env.url + "/v1/embeddings"
    import urllib.request

    for fmt in ("float", "base64"):
        req = urllib.request.Request(
            url,
            data=json.dumps({"input": ["가"], "model": "m", "dimensions": 4,
                             "encoding_format": fmt}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - local fake
            data = json.loads(resp.read())["data"][0]["embedding"]
        if fmt == "base64":
            data = list(struct.unpack("<4f", base64.b64decode(data)))
        assert max(abs(a - b) for a, b in zip(data, fake_vector("가", 4), strict=True)) < 1e-6


def test_openai_batch_order_and_429_retry(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v1/embeddings", Reply(status=429, headers={"retry-after-ms": "10"}))
    emb = resolve_embed_model("openai", max_retries=2)
    texts = ["설치기준", "구조기준", "배수시설"]
    vectors = emb.get_text_embedding_batch(texts)
    for text, vec in zip(texts, vectors, strict=True):
        assert max(abs(a - b) for a, b in zip(vec, fake_vector(text, 1536), strict=True)) < 1e-6
    assert len(provider_env.requests_to("/v1/embeddings")) >= 2  # the 429, then the retry


# ----------------------------------------------------------------------------- Cohere
def _nodes(texts: list[str]) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=f"d{i}", text=t), score=0.0)
            for i, t in enumerate(texts)]


def test_cohere_rerank_request_and_parsing(provider_env: FakeProviderServer) -> None:
    texts = ["터널 환기", "교량 점검시설 설치기준", "배수시설 설치기준 및 구조기준"]
    query = "배수시설 설치기준"
    rerank = resolve_reranker("cohere", top_n=2, max_retries=1)
    assert rerank is not None
    out = rerank.postprocess_nodes(_nodes(texts), QueryBundle(query))
    expected = sorted(range(3), key=lambda i: (-overlap_score(query, texts[i]), i))[:2]
    assert [n.node.node_id for n in out] == [f"d{i}" for i in expected]
    assert [n.score for n in out] == pytest.approx([overlap_score(query, texts[i]) for i in expected])
    (request,) = provider_env.requests_to("/v2/rerank")
    assert request.header("authorization") == "Bearer co-fake"
    assert request.body["model"] == "rerank-multilingual-v3.0"
    assert request.body["query"] == query
    assert request.body["top_n"] == 2
    assert request.body["documents"] == texts


def test_cohere_500_surfaces(provider_env: FakeProviderServer) -> None:
    provider_env.enqueue("/v2/rerank", Reply(status=500))
    rerank = resolve_reranker("cohere", top_n=2, max_retries=1)
    assert rerank is not None
    with pytest.raises(Exception, match="500"):
        rerank.postprocess_nodes(_nodes(["a", "b"]), QueryBundle("a"))
