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
from tests.fakes.provider_server import (
    FakeProviderServer,
    Reply,
    fake_vector,
    overlap_score,
)

QUERY = "온도에 따라 늘었다 줄었다 하는 이음부는 어떻게 설치하나요?"


def claude_hypothesizer(
    *, llm_timeout: float | None = 10.0, max_retries: int = 0, **kw: Any
) -> LLMCriterionHypothesizer:
    llm = resolve_llm("anthropic", timeout=llm_timeout, max_retries=max_retries)
    return LLMCriterionHypothesizer(llm=llm, **kw)


# ----------------------------------------------------------------------------- Anthropic
def test_anthropic_request_and_parsing(fake: FakeProviderServer) -> None:
    result = claude_hypothesizer().hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert result.criteria == ("신축이음장치", "설치기준")
    (request,) = fake.requests_to("/v1/messages")
    assert request.method == "POST"
    assert request.header("x-api-key") == "sk-ant-fake"
    assert request.header("anthropic-version")
    body = request.body
    assert body["model"] == "claude-sonnet-4-6"
    assert body.get("stream") in (None, False)
    prompt = json.dumps(body["messages"], ensure_ascii=False)
    assert QUERY in prompt and "기준어" in prompt


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_bounded_anthropic_sends_what_its_parent_sends(
    fake: FakeProviderServer, mode: str
) -> None:
    """``BoundedAnthropic`` changes the transport only: its requests carry the headers
    LlamaIndex's own ``Anthropic`` sends with the same arguments (the oracle), its
    ``User-Agent`` included (before: the subclass rebuilt the SDK clients and sent the SDK's)."""
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.anthropic import Anthropic

    from llama_index_car.llms import BoundedAnthropic

    kw: dict[str, Any] = {"model": "claude-sonnet-4-6", "api_key": "sk-ant-fake", "max_retries": 0,
                          "base_url": fake.url, "timeout": 10.0,
                          "default_headers": {"x-team": "car"}}
    messages = [ChatMessage(role="user", content=QUERY)]
    for llm in (Anthropic(**kw), BoundedAnthropic(**kw)):
        if mode == "async":
            await llm.achat(messages)
        else:
            llm.chat(messages)
    parent, bounded = fake.requests_to("/v1/messages")
    varying = {"accept-encoding", "idempotency-key", "x-stainless-async", "content-length"}

    def sent(request: Any) -> dict[str, str]:
        return {k.lower(): v for k, v in request.headers.items() if k.lower() not in varying}

    assert sent(bounded) == sent(parent)
    assert sent(bounded)["x-team"] == "car" and "llama-index" in sent(bounded)["user-agent"]
    assert bounded.header("accept-encoding") == "identity"
    assert bounded.body == parent.body


async def test_anthropic_async_path(fake: FakeProviderServer) -> None:
    fake.anthropic_text = lambda req: (
        '```json\n{"가설": "방호울타리 설치기준", "기준어": ["방호울타리", "설치기준"]}\n```'
    )
    hyp = claude_hypothesizer()
    result = await hyp.ahypothesize("차가 길 밖으로 못 나가게 막는 울타리 기준")
    assert result.criteria == ("방호울타리", "설치기준")
    assert len(fake.requests_to("/v1/messages")) == 1
    assert (await hyp.ahypothesize("차가 길 밖으로 못 나가게 막는 울타리 기준")).cached
    assert len(fake.requests_to("/v1/messages")) == 1


def test_anthropic_429_then_success(fake: FakeProviderServer) -> None:
    fake.enqueue("/v1/messages", Reply(status=429), Reply(status=529))
    result = claude_hypothesizer(max_retries=2).hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert len(fake.requests_to("/v1/messages")) == 3


def test_anthropic_sdk_timeout_is_retried_then_fails(fake: FakeProviderServer) -> None:
    """``timeout`` bounds each attempt; the SDK retries a timed-out attempt (max_retries=1)."""
    fake.enqueue("/v1/messages", Reply(delay=3.0), Reply(delay=3.0))
    hyp = claude_hypothesizer(llm_timeout=0.3, max_retries=1)
    with pytest.raises(HypothesisError, match="APITimeoutError"):
        hyp.hypothesize(QUERY)
    retries = [r.header("x-stainless-retry-count") for r in fake.requests_to("/v1/messages")]
    assert retries == ["0", "1"]


async def test_anthropic_deadline_async(fake: FakeProviderServer) -> None:
    from llama_index_car.llms import AnthropicDeadlineError, llm_deadline

    fake.enqueue("/v1/messages", Reply(delay=3.0))
    hyp = claude_hypothesizer(max_retries=2)
    with llm_deadline(0.3), pytest.raises(HypothesisError, match="deadline") as info:
        await hyp.ahypothesize(QUERY)
    assert isinstance(info.value.__cause__, AnthropicDeadlineError)
    assert len(fake.requests_to("/v1/messages")) == 1  # a passed deadline is not retried


def test_anthropic_401_not_retried(fake: FakeProviderServer) -> None:
    fake.enqueue("/v1/messages", Reply(status=401))
    with pytest.raises(HypothesisError, match="HTTP 401.*API key"):
        claude_hypothesizer(max_retries=3).hypothesize(QUERY)
    assert len(fake.requests_to("/v1/messages")) == 1


def test_anthropic_500_exhausts_retries(fake: FakeProviderServer) -> None:
    fake.enqueue("/v1/messages", *[Reply(status=500)] * 3)
    with pytest.raises(HypothesisError, match="HTTP 500"):
        claude_hypothesizer(max_retries=2).hypothesize(QUERY)
    assert len(fake.requests_to("/v1/messages")) == 3


def test_anthropic_garbage_output(fake: FakeProviderServer) -> None:
    fake.anthropic_text = "죄송하지만 이 질문에는 답변드릴 수 없습니다. " * 6 + "\n다른 질문을 해 주세요."
    with pytest.raises(HypothesisError, match="unusable"):
        claude_hypothesizer().hypothesize(QUERY)


def test_hyde_through_anthropic(fake: FakeProviderServer) -> None:
    fake.anthropic_text = "신축이음장치는 온도 변화에 따른 교량의 신축을 흡수한다."
    llm = resolve_llm("anthropic", timeout=10.0, max_retries=0)
    result = HyDEHypothesizer(llm=llm, term_extractor=str.split).hypothesize(QUERY)
    assert result.text.startswith("신축이음장치는")
    body = fake.requests_to("/v1/messages")[0].body
    assert QUERY in json.dumps(body["messages"], ensure_ascii=False)


# ----------------------------------------------------------------------------- OpenAI
def test_openai_embeddings_request_and_parsing(fake: FakeProviderServer) -> None:
    emb = resolve_embed_model("openai", max_retries=1)
    vector = emb.get_query_embedding("배수시설 설치기준")
    expected = fake_vector("배수시설 설치기준", 1536)
    assert len(vector) == 1536
    assert max(abs(a - b) for a, b in zip(vector, expected, strict=True)) < 1e-6
    (request,) = fake.requests_to("/v1/embeddings")
    assert request.header("authorization") == "Bearer sk-openai-fake"
    assert request.body["model"] == "text-embedding-3-large"
    assert request.body["dimensions"] == 1536
    assert request.body["input"] in (["배수시설 설치기준"], "배수시설 설치기준")


def test_openai_float_and_base64_encodings(fake: FakeProviderServer) -> None:
    url = fake.url + "/v1/embeddings"
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


def test_openai_batch_order_and_429_retry(fake: FakeProviderServer) -> None:
    fake.enqueue("/v1/embeddings", Reply(status=429, headers={"retry-after-ms": "10"}))
    emb = resolve_embed_model("openai", max_retries=2)
    texts = ["설치기준", "구조기준", "배수시설"]
    vectors = emb.get_text_embedding_batch(texts)
    for text, vec in zip(texts, vectors, strict=True):
        assert max(abs(a - b) for a, b in zip(vec, fake_vector(text, 1536), strict=True)) < 1e-6
    assert len(fake.requests_to("/v1/embeddings")) >= 2  # the 429, then the retry


# ----------------------------------------------------------------------------- Cohere
def _nodes(texts: list[str]) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(id_=f"d{i}", text=t), score=0.0)
            for i, t in enumerate(texts)]


def test_cohere_rerank_request_and_parsing(fake: FakeProviderServer) -> None:
    texts = ["터널 환기", "교량 점검시설 설치기준", "배수시설 설치기준 및 구조기준"]
    query = "배수시설 설치기준"
    rerank = resolve_reranker("cohere", top_n=2, max_retries=1)
    assert rerank is not None
    out = rerank.postprocess_nodes(_nodes(texts), QueryBundle(query))
    expected = sorted(range(3), key=lambda i: (-overlap_score(query, texts[i]), i))[:2]
    assert [n.node.node_id for n in out] == [f"d{i}" for i in expected]
    assert [n.score for n in out] == pytest.approx([overlap_score(query, texts[i]) for i in expected])
    (request,) = fake.requests_to("/v2/rerank")
    assert request.header("authorization") == "Bearer co-fake"
    assert request.body["model"] == "rerank-multilingual-v3.0"
    assert request.body["query"] == query
    assert request.body["top_n"] == 2
    assert request.body["documents"] == texts


def test_cohere_transient_500_is_retried_by_the_sdk(fake: FakeProviderServer) -> None:
    fake.enqueue("/v2/rerank", Reply(status=500))
    rerank = resolve_reranker("cohere", top_n=1, max_retries=1)
    assert rerank is not None
    out = rerank.postprocess_nodes(_nodes(["b", "a"]), QueryBundle("a"))
    assert [n.node.node_id for n in out] == ["d1"]
    assert len(fake.requests_to("/v2/rerank")) == 2


def test_cohere_persistent_500_surfaces(fake: FakeProviderServer) -> None:
    fake.enqueue("/v2/rerank", *[Reply(status=500)] * 5)
    rerank = resolve_reranker("cohere", top_n=2, max_retries=1)
    assert rerank is not None
    with pytest.raises(Exception, match="500"):
        rerank.postprocess_nodes(_nodes(["a", "b"]), QueryBundle("a"))


# ----------------------------------------------------------------------------- CAR end to end
SECTIONS = [
    ("교량 고정식 점검시설 확충방안", "점검시설의 설치기준은 통로 폭 0.6 m 이상으로 한다."),
    ("신축이음장치 개선방안", "신축이음장치 설치기준: 온도 변화에 따른 신축량을 흡수하도록 한다."),
    ("포장 설계기준", "아스팔트 포장의 두께는 교통량에 따라 정한다."),
    ("터널 환기 검토", "환기설비는 터널 연장과 교통량을 고려하여 계획한다."),
    ("배수시설 보완방안", "배수시설의 구조기준은 집중호우 빈도에 맞춘다."),
]


def _car(provider: FakeProviderServer, **kw: Any) -> Any:
    from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

    nodes = [TextNode(id_=f"s{i}", text=f"## {t}\n\n{b}", metadata={"section_title": t})
             for i, (t, b) in enumerate(SECTIONS)]
    hyp = claude_hypothesizer(max_retries=kw.pop("max_retries", 1), llm_timeout=10.0)
    return CriterionAwareRetriever.from_defaults(
        nodes=nodes,
        embed_model=resolve_embed_model("openai", max_retries=0),
        hypothesizer=hyp,
        pool_top_k=5,
        similarity_top_k=3,
        **kw,
    )


def _embedded_queries(provider: FakeProviderServer) -> list[Any]:
    return [r.body["input"] for r in provider.requests_to("/v1/embeddings")]


def test_car_uses_claude_hypothesis(fake: FakeProviderServer) -> None:
    car = _car(fake)
    fake.reset()
    results = car.retrieve(QUERY)
    assert len(results) == 3
    explain = results[0].node.metadata["car_explain"]
    assert explain["hypothesis"] == "신축이음장치 설치기준"
    assert explain["criteria"] == ["신축이음장치", "설치기준"]
    assert (explain["fallback"], explain["routed"]) == (False, "car")
    # dense channel: the query concatenated with the hypothesis, through the OpenAI client
    # (llama-index's OpenAIEmbedding turns "\n" into " " before sending), after the
    # speculative plain-query embedding of the concurrent hybrid (if it started in time)
    embedded = _embedded_queries(fake)
    assert [QUERY + " 신축이음장치 설치기준"] in embedded
    assert all(e in ([QUERY], [QUERY + " 신축이음장치 설치기준"]) for e in embedded)
    # lexical channel: the criterion terms pull the 신축이음장치 section to the top
    assert results[0].node.node_id == "s1"


def test_car_falls_back_to_hybrid_on_500(fake: FakeProviderServer) -> None:
    car = _car(fake, max_retries=1)
    fake.reset()
    fake.enqueue("/v1/messages", Reply(status=500), Reply(status=500))
    results = car.retrieve(QUERY)
    assert results, "the fallback still answers"
    explain = results[0].node.metadata["car_explain"]
    assert (explain["fallback"], explain["routed"], explain["hypothesis"]) == (
        True, "hybrid", None,
    )
    assert "500" in explain["error"]
    assert len(fake.requests_to("/v1/messages")) == 2  # one retry, then fallback


def test_car_falls_back_on_timeout(fake: FakeProviderServer) -> None:
    car = _car(fake, max_retries=0, hypothesis_timeout=0.5)
    fake.reset()
    fake.enqueue("/v1/messages", Reply(delay=3.0))
    results = car.retrieve(QUERY)
    explain = results[0].node.metadata["car_explain"]
    assert explain["fallback"] is True and "timed out" in explain["error"], explain


async def test_car_async_fallback_and_strict(fake: FakeProviderServer) -> None:
    car = _car(fake, max_retries=0)
    fake.enqueue("/v1/messages", Reply(status=503))
    results = await car.aretrieve(QUERY)
    assert results[0].node.metadata["car_explain"]["fallback"] is True

    strict = _car(fake, max_retries=0, strict=True)
    fake.enqueue("/v1/messages", Reply(status=500))
    with pytest.raises(HypothesisError, match="500"):
        strict.retrieve(QUERY)


def test_car_with_slow_llm_then_cached_repeat(fake: FakeProviderServer) -> None:
    """Issue 4: with an LLM answering after 2 s, CAR waits for it (no fallback) and a repeat
    query is served from the hypothesis cache without another request. The timings
    themselves are measured in ``benchmarks/car_latency.py``, not asserted here."""
    car = _car(fake, max_retries=0)
    fake.enqueue("/v1/messages", Reply(delay=2.0))
    start = time.perf_counter()
    first = car.retrieve(QUERY)
    first_s = time.perf_counter() - start
    assert first[0].node.metadata["car_explain"]["fallback"] is False
    assert first_s >= 2.0  # the hypothesis was awaited, not skipped
    calls = len(fake.requests_to("/v1/messages"))
    assert calls == 1
    cached = car.hypothesizer.hypothesize(QUERY)
    assert cached.cached
    again = car.retrieve(QUERY)
    assert again[0].node.metadata["car_explain"]["hypothesis_cached"] is True
    assert len(fake.requests_to("/v1/messages")) == calls
    assert [n.node.node_id for n in again] == [n.node.node_id for n in first]
