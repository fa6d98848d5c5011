"""Drop-in proof: the package's components inside stock LlamaIndex engines and pipelines.

* ``IngestionPipeline([HWPXNodeParser(), CriterialReframer(), UniversalSentenceEncoderEmbedding()])``
  over an HWPX built in code;
* ``RetrieverQueryEngine.from_args(retriever=CAR, llm=MockLLM(), node_postprocessors=[CohereRerank])``
  with the real Cohere SDK talking to the local fake server;
* ``CondensePlusContextChatEngine.from_defaults(retriever=CAR, llm=MockLLM())``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader
from llama_index.readers.hwpx.writer import HWPXBuilder

from llama_index_car.embeddings import UniversalSentenceEncoderEmbedding
from llama_index_car.providers import resolve_reranker
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from llama_index_car.transformers import CriterialReframer
from tests.fakes.provider_server import FakeProviderServer

PLAN_TITLE = "교량 고정식 점검시설 확충방안"


def build_hwpx(path: Path) -> Path:
    builder = HWPXBuilder(title="고속도로 설계실무지침 (시험용)")
    s = builder.add_section()
    s.heading(PLAN_TITLE, level=1)
    s.paragraph("교량 점검시설은 유지관리를 위해 확충한다.")
    s.paragraph("점검시설의 설치기준은 다음과 같다. 통로 폭은 0.6 m 이상으로 한다.")
    s.table([["구분", "설치기준"], ["점검통로", "폭 0.6 m 이상"], ["난간", "높이 1.1 m 이상"]],
            caption="점검시설 설치기준")
    s.heading("포장 설계기준", level=1)
    s.paragraph("아스팔트 포장의 두께는 설계 교통량에 따라 정한다. 포장 설치기준은 별도로 정한다.")
    s.heading("터널 환기 개선방안 검토", level=1)
    s.paragraph("환기설비의 용량기준은 터널 연장과 교통량을 고려하여 정한다.")
    s.paragraph("제트팬의 설치기준은 터널 단면에 따른다.")
    s.heading("졸음쉼터 확충계획", level=1)
    s.paragraph("졸음쉼터의 설치기준은 휴게소 간격 25 km 이상인 구간에 적용한다.")
    s.paragraph("주차면 용량기준은 교통량에 비례하여 정한다.")
    s.heading("휴게소 조경", level=1)
    s.paragraph("휴게소 조경은 지역 수종을 우선한다.")
    builder.save(path)
    return path


@pytest.fixture(scope="module")
def embed_model() -> UniversalSentenceEncoderEmbedding:
    return UniversalSentenceEncoderEmbedding()


@pytest.fixture(scope="module")
def nodes(
    tmp_path_factory: pytest.TempPathFactory, embed_model: UniversalSentenceEncoderEmbedding
) -> list[BaseNode]:
    path = build_hwpx(tmp_path_factory.mktemp("hwpx") / "guide.hwpx")
    documents = HWPXReader().load_data(path)
    pipeline = IngestionPipeline(
        transformations=[HWPXNodeParser(), CriterialReframer(), embed_model]
    )
    return list(pipeline.run(documents=documents))


@pytest.fixture(scope="module")
def car(nodes: list[BaseNode], embed_model: UniversalSentenceEncoderEmbedding) -> Iterator[Any]:
    yield CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=embed_model, pool_top_k=10, similarity_top_k=4
    )


def by_title(nodes: list[BaseNode], original: str) -> BaseNode:
    for n in nodes:
        if n.metadata.get("original_section_title", n.metadata.get("section_title")) == original:
            return n
    raise AssertionError(f"no node for {original!r}: {[n.metadata for n in nodes]}")


def test_ingestion_pipeline_reframes_and_embeds(nodes: list[BaseNode]) -> None:
    assert len(nodes) >= 4
    assert all(n.embedding is not None and len(n.embedding) == 512 for n in nodes)
    plan = by_title(nodes, PLAN_TITLE)
    assert plan.metadata["section_title"] == "교량 고정식 점검시설 설치기준"
    assert plan.get_content(MetadataMode.NONE).startswith("## 교량 고정식 점검시설 설치기준\n\n")
    assert "확충방안" not in plan.get_content(MetadataMode.EMBED)
    tunnel = by_title(nodes, "터널 환기 개선방안 검토")
    assert tunnel.metadata["section_title"] == "터널 환기 용량기준"
    assert by_title(nodes, "졸음쉼터 확충계획").metadata["section_title"] == "졸음쉼터 설치기준"
    standard = by_title(nodes, "포장 설계기준")
    assert "original_section_title" not in standard.metadata
    neither = by_title(nodes, "휴게소 조경")
    assert "original_section_title" not in neither.metadata


def test_query_engine_with_cohere_rerank(car: Any, fake: FakeProviderServer) -> None:
    rerank = resolve_reranker("cohere", top_n=2, max_retries=1)
    assert rerank is not None
    engine = RetrieverQueryEngine.from_args(
        retriever=car, llm=MockLLM(), node_postprocessors=[rerank]
    )
    response = engine.query("점검통로는 얼마나 넓어야 하나요")
    assert len(response.source_nodes) == 2
    (request,) = fake.requests_to("/v2/rerank")
    assert request.body["model"] == "rerank-multilingual-v3.0"
    assert request.body["query"] == "점검통로는 얼마나 넓어야 하나요"
    assert len(request.body["documents"]) == 4  # CAR's similarity_top_k feeds the reranker
    for source in response.source_nodes:
        assert "car_explain" in source.node.metadata
        assert "car_explain" not in source.node.get_content(MetadataMode.LLM)
    assert str(response)  # MockLLM answered over the reranked context


def test_chat_engine(car: Any) -> None:
    chat = CondensePlusContextChatEngine.from_defaults(retriever=car, llm=MockLLM())
    first = chat.chat("터널 환기설비 용량은 어떻게 정하나요")
    assert first.source_nodes
    assert first.source_nodes[0].node.metadata["car_explain"]["routed"] in ("car", "hybrid")
    second = chat.chat("그럼 점검시설은요?")
    assert second.source_nodes
    assert len(chat.chat_history) == 4


async def test_chat_engine_async(car: Any) -> None:
    chat = CondensePlusContextChatEngine.from_defaults(retriever=car, llm=MockLLM())
    response = await chat.achat("점검시설 설치기준")
    assert response.source_nodes
