"""``SpanCitationQueryEngine``: answers whose ``[n]`` resolve to criterion spans by coordinates.

The LLM is the real ``anthropic`` SDK (through :class:`BoundedAnthropic`) talking to the local
fake server (``tests/fakes/provider_server.py``, JSON and SSE replies). The index is the
bundled demo corpus with a hashed-bigram embedding. Oracles: the retriever's own hits (the
spans CAR attached, numbered hit by hit, span by span, as the docstring says) and the
reader's ``node_cells()`` for every table coordinate.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeRelationship
from llama_index.readers.hwpx import node_cells

from llama_index_car._errors import ConfigurationError
from llama_index_car.demo import demo_corpus_dir
from llama_index_car.folder import BuildOptions, build_index, load_index
from llama_index_car.hypothesizers.base import sanitize_text
from llama_index_car.indices import CriterionAwareIndex as LocalIndex
from llama_index_car.llms import BoundedAnthropic
from llama_index_car.query_engines import Citation, SpanCitationQueryEngine
from llama_index_car.query_engines._citations import (
    DEFAULT_MAX_ANSWER_CHARS,
    MAX_INVALID_CITATIONS,
    NO_SOURCE_ANSWER,
    cited_numbers,
    clean_answer,
    retrieval_only_answer,
    sources_from_hits,
)
from tests.fakes.embeddings import HashedBigramEmbedding
from tests.fakes.provider_server import FakeProviderServer, Reply

#: a demo question whose hits carry table-cell spans (the drainage table's 적용 구간 cells)
Q_CELL = "산을 깎아 만든 길옆 경사면은 얼마나 완만해야 해?"
Q_REST = "졸음쉼터는 몇 km마다 만들어야 돼?"
TOP_K, SPANS = 5, 3


def _ws(text: Any) -> str:
    return " ".join(str(text).split())


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> LocalIndex:
    folder = tmp_path_factory.mktemp("cite") / "index"
    build_index(demo_corpus_dir(), folder, BuildOptions(embed_model=HashedBigramEmbedding(), use_cache=False))
    return load_index(folder, embed_model=HashedBigramEmbedding())


def _llm(fake: FakeProviderServer, **kw: Any) -> BoundedAnthropic:
    kw.setdefault("timeout", 10.0)
    kw.setdefault("max_retries", 0)
    return BoundedAnthropic(api_key="sk-ant-fake", base_url=fake.url, **kw)


def _prompt(fake: FakeProviderServer, i: int = -1) -> str:
    return json.dumps(fake.requests_to("/v1/messages")[i].body["messages"], ensure_ascii=False)


def _expected_sources(local: LocalIndex, query: str) -> list[tuple[Any, dict[str, Any]]]:
    """The oracle numbering: the same retriever's hits, each hit's spans in order."""
    hits = local.as_retriever("car", similarity_top_k=TOP_K, criterion_spans=SPANS).retrieve(query)
    return [(h, s) for h in hits for s in h.node.metadata["criterion_spans"]][:15]


def _first_cell(local: LocalIndex, query: str) -> tuple[int, Any, dict[str, Any]]:
    for number, (hit, span) in enumerate(_expected_sources(local, query), start=1):
        if span["kind"] == "cell":
            return number, hit, span
    raise AssertionError(f"no cell span for {query!r}")  # precondition of the test


def _check_cell(citation: Citation, hit: Any, span: dict[str, Any]) -> None:
    """The citation is the retriever's span, and the reader's cell at those coordinates."""
    assert citation.kind == "cell"
    assert (citation.file, citation.section_title, citation.node_id) == (
        hit.node.metadata["file_name"], hit.node.metadata["section_title"], hit.node.node_id)
    coords = (citation.table_index, citation.row, citation.col, citation.row_span,
              citation.col_span)
    assert coords == tuple(span[k] for k in ("table_index", "row", "col", "row_span",
                                             "col_span"))
    (cell,) = [c for c in node_cells(hit.node)
               if (c.table, c.row, c.col, c.row_span, c.col_span) == coords]
    assert _ws(cell.text) == citation.text == span["text"]
    assert (citation.start, citation.end) == (span["start"], span["end"])


# ----------------------------------------------------------------------------- pure parts
def test_cited_numbers_reads_lists_and_ranges_and_ignores_the_rest() -> None:
    assert cited_numbers("a [2] b [1, 3] c [2-4] d [3]", 4) == ([2, 1, 3, 4], [])
    assert cited_numbers("[0] [5] [1] [99999]", 4) == ([1], [0, 5, 99999])
    # every number is kept as given, negative and long ones too; a range past 50 is its two
    # ends; words are no citation
    assert cited_numbers("[12345678901234567890] [1-999999] [a] [출처 1] [] [-1] [1234567]",
                         3) == ([1], [12345678901234567890, 999999, -1, 1234567])
    assert cited_numbers("no citation at all", 3) == ([], [])
    # the invalid list is bounded: the first MAX_INVALID_CITATIONS distinct numbers
    many = " ".join(f"[{n}]" for n in range(100, 100 + 3 * MAX_INVALID_CITATIONS))
    assert cited_numbers(many + " [2]", 3) == (
        [2], list(range(100, 100 + MAX_INVALID_CITATIONS)))


def test_clean_answer_sanitises_and_bounds() -> None:
    """The answer gets exactly what ``llama-car query`` prints (sanitize_text, newlines
    kept), cut after max_chars characters with the cut marked."""
    raw = "기준은\x1b[31m 3.5m\x1b[0m [1]\u202e\u2066입니다\x07\n\x1b]0;title\x07다음 줄\ud800"
    assert clean_answer(raw) == sanitize_text(raw, keep_newlines=True) == (
        "기준은 3.5m [1]입니다\n다음 줄")
    assert clean_answer("가" * 50, 10) == "가" * 10 + "…"
    # a huge answer is read only up to its bound, however much of it is escape sequences
    huge = "\x1b[0m" * 2_000_000 + "끝"
    assert clean_answer(huge, 100) == "…"


def test_retrieval_only_answer_cites_each_source() -> None:
    sources = [Citation(number=i, kind="sentence", text=f"문장 {i}", node_id="n", file="f.hwpx")
               for i in (1, 2, 3)]
    text = retrieval_only_answer(sources, 2, "APIError")
    assert "APIError" in text.splitlines()[0]
    assert text.splitlines()[1:] == ["[1] f.hwpx — 문장 1", "[2] f.hwpx — 문장 2"]
    assert cited_numbers(text, 3) == ([1, 2], [])


# ----------------------------------------------------------------------------- mapping
def test_a_cited_cell_resolves_to_its_coordinates(local: LocalIndex, fake: FakeProviderServer) -> None:
    k, hit, span = _first_cell(local, Q_CELL)
    fake.anthropic_text = f"깎기부에는 U형 측구를 둡니다 [{k}]. 비탈면은 표를 따릅니다 [1]."
    engine = local.as_citation_engine(_llm(fake))
    response = engine.query(Q_CELL)
    assert isinstance(response, Response)
    assert response.metadata["fallback"] is False and response.metadata["error"] is None
    citations = response.metadata["citations"]
    assert [c.number for c in citations] == [k, 1]
    _check_cell(citations[0], hit, span)
    # source_nodes: one per span, in the oracle's numbering
    expected = _expected_sources(local, Q_CELL)
    assert len(response.source_nodes) == len(expected)
    for n, (source, (h, s)) in enumerate(zip(response.source_nodes, expected, strict=True), 1):
        meta = source.node.metadata
        assert (meta["source_number"], meta["kind"], meta["parent_node_id"]) == (
            n, s["kind"], h.node.node_id)
        assert source.score == s["score"]
        assert source.node.relationships[NodeRelationship.PARENT].node_id == h.node.node_id
        assert source.node.get_content().startswith(f"Source {n} (")
        assert source.node.get_content(MetadataMode.LLM) == source.node.get_content()
    cell_meta = response.source_nodes[k - 1].node.metadata
    assert (cell_meta["table_index"], cell_meta["row"], cell_meta["col"]) == (
        span["table_index"], span["row"], span["col"])
    # the LLM saw the cell as numbered source k, with its coordinates and header
    prompt = _prompt(fake)
    where = f"table {span['table_index']}, row {span['row']}, col {span['col']}"
    assert f"Source {k} (" in prompt and where in prompt
    assert f"{span['header']}: {span['text']}" in prompt
    assert "parent_node_id" not in prompt and "criterion_spans" not in prompt


def test_out_of_range_citations_are_ignored(local: LocalIndex, fake: FakeProviderServer) -> None:
    fake.anthropic_text = "기준은 [2]와 [0], [16], [999999] 그리고 [2, 40]입니다."
    response = local.as_citation_engine(_llm(fake)).query(Q_REST)
    assert [c.number for c in response.metadata["citations"]] == [2]
    assert response.metadata["invalid_citations"] == [0, 16, 999999, 40]
    assert response.metadata["fallback"] is False
    assert str(response) == fake.anthropic_text


_HOSTILE = "기준은 \x1b[2J\x1b]8;;http://x\x07여기\x1b]8;;\x07 \u202e[1]\u2066 입니다\x9b31m."


def test_the_answer_is_sanitised_and_bounded(local: LocalIndex, fake: FakeProviderServer) -> None:
    """Escape sequences, bidi controls and C1 controls in the LLM's answer are removed (the
    oracle: sanitize_text, as ``llama-car query`` prints); a 10 MB answer comes back cut after
    DEFAULT_MAX_ANSWER_CHARS characters, and what it cites is read from what is kept."""
    fake.anthropic_text = _HOSTILE
    response = local.as_citation_engine(_llm(fake)).query(Q_REST)
    assert str(response) == sanitize_text(_HOSTILE, keep_newlines=True) == "기준은 여기 [1] 입니다."
    assert [c.number for c in response.metadata["citations"]] == [1]
    fake.anthropic_text = "기준 [2]. " + "가" * 3_500_000 + " [3]"  # 10.5 MB of UTF-8
    # an LLM that takes a 10 MB body (BoundedAnthropic's own cap is 1 MiB by default)
    big = local.as_citation_engine(_llm(fake, max_response_bytes=64 << 20)).query(Q_REST)
    assert len(big.response) == DEFAULT_MAX_ANSWER_CHARS + 1 and big.response.endswith("…")
    assert [c.number for c in big.metadata["citations"]] == [2]  # [3] was cut off
    fake.anthropic_text = "기준 [2]. " + "가" * 100
    small = local.as_citation_engine(_llm(fake), max_answer_chars=10).query(Q_REST)
    assert small.response == "기준 [2]. 가가…"
    with pytest.raises(ConfigurationError, match="max_answer_chars"):
        local.as_citation_engine(_llm(fake), max_answer_chars=0)


def test_a_streamed_answer_is_sanitised_token_by_token_and_bounded(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    """The fake server streams 4 characters a delta, so every escape sequence of the answer
    is split across tokens: none reaches the user, not even its tail (``[2J``)."""
    fake.anthropic_text = _HOSTILE
    response = local.as_citation_engine(_llm(fake), streaming=True).query(Q_REST)
    tokens = list(response.response_gen)
    assert "".join(tokens) == "기준은 여기 [1] 입니다."
    assert [c.number for c in response.metadata["citations"]] == [1]
    fake.anthropic_text = "기준 [2]. " + "가" * 20_000
    cut = local.as_citation_engine(_llm(fake), streaming=True, max_answer_chars=100).query(Q_REST)
    text = "".join(cut.response_gen)
    assert text == ("기준 [2]. " + "가" * 20_000)[:100] + "…"
    assert [c.number for c in cut.metadata["citations"]] == [2]

    async def run() -> str:
        engine = local.as_citation_engine(_llm(fake), streaming=True, max_answer_chars=100)
        streamed = await engine.aquery(Q_REST)
        return "".join([t async for t in streamed.async_response_gen()])

    assert asyncio.run(run()) == text


def test_a_replaced_answer_keeps_its_invalid_citations(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    fake.anthropic_text = "근거는 [99]와 [-1], [1234567]입니다."
    for streaming in (False, True):
        response = local.as_citation_engine(_llm(fake), streaming=streaming).query(Q_REST)
        if streaming:
            response = response.get_response()
        assert response.metadata["fallback"] is True
        assert response.metadata["invalid_citations"] == [99, -1, 1234567]
        assert [c.number for c in response.metadata["citations"]] == [1, 2, 3]


@pytest.mark.parametrize("text", ["[0] [99] 만 인용합니다.", "", "죄송하지만 답할 수 없습니다."])
def test_an_answer_citing_no_valid_source_is_replaced(
    local: LocalIndex, fake: FakeProviderServer, text: str
) -> None:
    fake.anthropic_text = text
    response = local.as_citation_engine(_llm(fake)).query(Q_REST)
    assert response.metadata["fallback"] is True
    assert response.metadata["error"] == "UncitedAnswerError"
    assert [c.number for c in response.metadata["citations"]] == [1, 2, 3]
    assert response.response.startswith("LLM 답변을 만들지 못해")  # replaced, not appended
    kept = local.as_citation_engine(_llm(fake), require_citation=False).query(Q_REST)
    assert (kept.response, kept.metadata["fallback"], kept.metadata["citations"]) == (
        text, False, [])


# ----------------------------------------------------------------------------- fallback
def _assert_fallback(response: Any, error: str, n_sources: int = 3) -> None:
    meta = response.metadata
    assert (meta["fallback"], meta["error"]) == (True, error), meta
    text = str(response)
    assert any(f"({error}):" in line for line in text.splitlines())  # the notice line
    assert [c.number for c in meta["citations"]] == list(range(1, n_sources + 1))
    for c in meta["citations"]:
        assert f"[{c.number}]" in text and c.label in text


@pytest.mark.parametrize("reply, error", [
    (Reply.error(500), "InternalServerError"),
    (Reply.error(529), "OverloadedError"),
    (Reply(raw=b"<html>garbage</html>"), "JSONDecodeError"),
    (Reply(body={"type": "message", "content": [{"type": "text", "text": 7}]}),
     "ValidationError"),
])
def test_llm_failure_gives_the_cited_retrieval_only_answer(
    local: LocalIndex, fake: FakeProviderServer, reply: Reply, error: str
) -> None:
    fake.enqueue("/v1/messages", reply)
    response = local.as_citation_engine(_llm(fake)).query(Q_CELL)
    _assert_fallback(response, error)
    assert len(response.source_nodes) == len(_expected_sources(local, Q_CELL))
    assert len(fake.requests_to("/v1/messages")) == 1


def test_timeouts_fall_back(local: LocalIndex, fake: FakeProviderServer) -> None:
    fake.enqueue("/v1/messages", Reply(delay=3.0), Reply(delay=3.0))
    sdk_engine = local.as_citation_engine(_llm(fake, timeout=0.3))
    deadline_engine = local.as_citation_engine(_llm(fake), llm_timeout=0.3)
    start = time.monotonic()
    sdk = sdk_engine.query(Q_REST)
    middle = time.monotonic()
    deadline = deadline_engine.query(Q_REST)
    # each ends well before the server's 3 s reply (retrieval included, on a loaded machine)
    assert middle - start < 2.5 and time.monotonic() - middle < 2.5
    _assert_fallback(sdk, "APITimeoutError")
    _assert_fallback(deadline, "AnthropicDeadlineError")
    fake.enqueue("/v1/messages", Reply(delay=3.0))
    streamed = local.as_citation_engine(_llm(fake), llm_timeout=0.3, streaming=True)
    _assert_fallback(streamed.query(Q_REST).get_response(), "AnthropicDeadlineError")


def test_no_hits_is_a_no_source_answer_without_an_llm_call(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    for streaming in (False, True):
        engine = local.as_citation_engine(_llm(fake), kind="bm25", streaming=streaming)
        response = engine.query("qqq zzz")
        assert str(response) == NO_SOURCE_ANSWER
        assert response.source_nodes == [] and response.metadata["citations"] == []
        assert response.metadata["no_source"] is True
    assert fake.requests_to("/v1/messages") == []


# ----------------------------------------------------------------------------- streaming
def test_streaming_citations_resolve_after_the_stream(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    k, hit, span = _first_cell(local, Q_CELL)
    fake.anthropic_text = f"U형 측구를 둡니다 [{k}]."
    response = local.as_citation_engine(_llm(fake), streaming=True).query(Q_CELL)
    assert isinstance(response, StreamingResponse)
    assert len(response.source_nodes) == len(_expected_sources(local, Q_CELL))
    assert response.metadata["citations"] == []  # not consumed yet
    tokens = list(response.response_gen)
    assert len(tokens) > 2 and "".join(tokens) == fake.anthropic_text
    assert fake.requests_to("/v1/messages")[0].body["stream"] is True
    (citation,) = response.metadata["citations"]
    _check_cell(citation, hit, span)


def test_a_stream_that_breaks_off_gets_the_fallback_appended(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    fake.anthropic_text = "깎기부에는 U형 측구를 두고 흙쌓기부에는 L형 측구를 둡니다."
    fake.enqueue("/v1/messages", Reply(sse_error_after=2))
    response = local.as_citation_engine(_llm(fake), streaming=True).query(Q_CELL)
    text = response.get_response().response
    assert text.startswith(fake.anthropic_text[:8])  # the two deltas sent
    _assert_fallback(response, "APIStatusError")
    # a stream that ends without a valid citation: the fallback follows what was streamed
    fake.enqueue("/v1/messages", Reply.anthropic_text("출처 없이 답합니다 [42]."))
    uncited = local.as_citation_engine(_llm(fake), streaming=True).query(Q_CELL)
    assert uncited.get_response().response.startswith("출처 없이 답합니다 [42].\n\n")
    _assert_fallback(uncited, "UncitedAnswerError")
    assert uncited.metadata["invalid_citations"] == [42]
    fake.enqueue("/v1/messages", Reply.error(500))
    failed = local.as_citation_engine(_llm(fake), streaming=True).query(Q_CELL)
    assert isinstance(failed, StreamingResponse)
    _assert_fallback(failed.get_response(), "InternalServerError")


# ----------------------------------------------------------------------------- async
def test_async_query_and_stream(local: LocalIndex, fake: FakeProviderServer) -> None:
    k, hit, span = _first_cell(local, Q_CELL)
    fake.anthropic_text = f"U형 측구를 둡니다 [{k}]."

    async def run() -> tuple[Any, Any, str, Any]:
        plain = await local.as_citation_engine(_llm(fake)).aquery(Q_CELL)
        streamed = await local.as_citation_engine(_llm(fake), streaming=True).aquery(Q_CELL)
        assert isinstance(streamed, AsyncStreamingResponse)
        text = "".join([t async for t in streamed.async_response_gen()])
        fake.enqueue("/v1/messages", Reply.error(500))
        failed = await local.as_citation_engine(_llm(fake)).aquery(Q_CELL)
        fake.enqueue("/v1/messages", Reply(sse_error_after=1))
        broken = await local.as_citation_engine(_llm(fake), streaming=True).aquery(Q_CELL)
        return plain, streamed, text, failed, await broken.get_response()

    plain, streamed, text, failed, broken = asyncio.run(run())
    assert str(plain) == text == fake.anthropic_text
    for response in (plain, streamed):
        (citation,) = response.metadata["citations"]
        _check_cell(citation, hit, span)
    _assert_fallback(failed, "InternalServerError")
    _assert_fallback(broken, "APIStatusError")
    assert broken.response.startswith(fake.anthropic_text[:4])  # the one delta sent


# ----------------------------------------------------------------------------- chat
def test_a_chat_answer_cites_a_table_cell_by_coordinates(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    k, hit, span = _first_cell(local, Q_CELL)

    def reply(request: Any) -> str:
        prompt = json.dumps(request.body["messages"], ensure_ascii=False)
        if "Source 1" in prompt:  # the answer prompt
            return f"깎기부 노측 측구는 U형입니다 [{k}]." if "경사면" in prompt else "25km [1]."
        return Q_CELL  # the condense prompt: the standalone question

    fake.anthropic_text = reply
    llm = _llm(fake)
    chat = CondenseQuestionChatEngine.from_defaults(
        query_engine=local.as_citation_engine(llm), llm=llm)
    first = chat.chat(Q_REST)
    assert str(first) == "25km [1]."
    second = chat.chat("그럼 깎은 비탈면 옆 도랑은요?")
    assert f"Query: {Q_CELL}" in _prompt(fake)  # condensed, then answered
    assert len(fake.requests_to("/v1/messages")) == 3  # answer, condense, answer
    query_response = second.sources[0].raw_output
    (citation,) = query_response.metadata["citations"]
    _check_cell(citation, hit, span)
    assert second.source_nodes[k - 1].node.metadata["col"] == span["col"]
    assert isinstance(local.as_citation_engine(llm).as_chat_engine(),
                      CondenseQuestionChatEngine)


def test_a_streamed_chat_turn_resolves_its_citations(
    local: LocalIndex, fake: FakeProviderServer
) -> None:
    k, hit, span = _first_cell(local, Q_CELL)
    fake.anthropic_text = f"깎기부 노측 측구는 U형입니다 [{k}]."
    chat = local.as_citation_engine(_llm(fake), streaming=True).as_chat_engine()
    streamed = chat.stream_chat(Q_CELL)
    assert "".join(streamed.response_gen) == fake.anthropic_text
    (citation,) = streamed.sources[0].raw_output.metadata["citations"]
    _check_cell(citation, hit, span)


# ----------------------------------------------------------------------------- surface
def test_prompts_are_exposed_and_updatable(local: LocalIndex, fake: FakeProviderServer) -> None:
    fake.anthropic_text = "답 [1]"
    engine = local.as_citation_engine(_llm(fake))
    assert set(engine.get_prompts()) == {"citation_qa_template"}
    engine.update_prompts({"citation_qa_template": PromptTemplate(
        "MARKER\n{context_str}\nQ: {query_str}\nA: ")})
    engine.query(Q_REST)
    assert "MARKER" in _prompt(fake) and "Source 1 (" in _prompt(fake)


def test_hybrid_with_the_span_postprocessor_and_a_folder_without_spans(
    local: LocalIndex, fake: FakeProviderServer, tmp_path: Path
) -> None:
    fake.anthropic_text = "답 [1]"
    hybrid = local.as_citation_engine(_llm(fake), kind="hybrid").query(Q_CELL)
    assert {s.node.metadata["kind"] for s in hybrid.source_nodes} <= {"sentence", "row", "cell"}
    build_index(demo_corpus_dir(), tmp_path / "plain", BuildOptions(embed_model=HashedBigramEmbedding(), use_cache=False, spans=False))
    plain = load_index(tmp_path / "plain", embed_model=HashedBigramEmbedding())
    response = plain.as_citation_engine(_llm(fake)).query(Q_CELL)
    assert {s.node.metadata["kind"] for s in response.source_nodes} == {"section"}
    assert len(response.source_nodes) == TOP_K
    (citation,) = response.metadata["citations"]
    assert citation.node_id == plain.as_retriever("car", similarity_top_k=TOP_K).retrieve(
        Q_CELL)[0].node.node_id


def test_sources_are_capped_and_counted_in_hit_order(local: LocalIndex) -> None:
    hits = local.as_retriever("car", similarity_top_k=TOP_K).retrieve(Q_CELL)
    spans = [s for h in hits for s in h.node.metadata["criterion_spans"]]
    assert [c.text for c in sources_from_hits(hits, max_sources=4)] == [
        _ws(s["text"]) for s in spans[:4]]
    assert [c.number for c in sources_from_hits(hits)] == list(range(1, len(spans) + 1))


def test_validation(local: LocalIndex, fake: FakeProviderServer) -> None:
    retriever = local.as_retriever("bm25")
    with pytest.raises(ConfigurationError, match="LLM"):
        SpanCitationQueryEngine(retriever, llm=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="BaseRetriever"):
        SpanCitationQueryEngine([], llm=_llm(fake))  # type: ignore[arg-type]
    for bad in ({"max_sources": 0}, {"fallback_sources": True}, {"llm_timeout": -1}):
        with pytest.raises(ConfigurationError):
            SpanCitationQueryEngine(retriever, _llm(fake), **bad)

