"""LLMCriterionHypothesizer / HyDEHypothesizer: parsing, cache, errors, async."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.prompts import PromptTemplate

from llama_index_car._errors import HypothesisError, MissingCredentialsError
from llama_index_car.hypothesizers import llm as llm_mod
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer
from llama_index_car.hypothesizers.llm import (
    HyDEHypothesizer,
    LLMCriterionHypothesizer,
    parse_criterion_output,
)
from llama_index_car.hypothesizers.prompts import CRITERION_HYPOTHESIS_TMPL

GOOD = "가설: 신축이음장치 설치기준\n기준어: 신축이음장치, 설치기준"
QUERY = "온도에 따라 늘었다 줄었다 하는 이음부는 어떻게 설치하나요?"


class StatusError(Exception):
    """An SDK-like error carrying an HTTP status (and optional headers)."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.headers = headers or {}


class ScriptedLLM(CustomLLM):
    """Replies from a script: each item a string, an exception, or (delay, item)."""

    model: str = "scripted-1"
    chat_model: bool = False
    _script: list[Any] = PrivateAttr(default_factory=list)
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _paths: list[str] = PrivateAttr(default_factory=list)

    def __init__(self, script: Sequence[Any], **kw: Any) -> None:
        super().__init__(**kw)
        self._script = list(script)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=self.chat_model)

    def _next(self) -> tuple[float, Any]:
        item = self._script.pop(0) if len(self._script) > 1 else self._script[0]
        return item if isinstance(item, tuple) else (0.0, item)

    def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
        self._prompts.append(prompt)
        self._paths.append("complete")
        delay, item = self._next()
        if delay:
            time.sleep(delay)
        if isinstance(item, BaseException):
            raise item
        return CompletionResponse(text=item)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kw: Any
    ) -> CompletionResponse:
        self._prompts.append(prompt)
        self._paths.append("acomplete")
        delay, item = self._next()
        await asyncio.sleep(delay)
        if isinstance(item, BaseException):
            raise item
        return CompletionResponse(text=item)

    def chat(self, messages: Sequence[ChatMessage], **kw: Any) -> ChatResponse:
        self._paths.append("chat")
        text = self.complete(str(messages[-1].content)).text
        self._paths.pop()  # the inner complete() call
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponseGen:
        raise NotImplementedError

    @property
    def prompts(self) -> list[str]:
        return self._prompts

    @property
    def paths(self) -> list[str]:
        return self._paths


def make(script: Sequence[Any], **kw: Any) -> tuple[LLMCriterionHypothesizer, ScriptedLLM]:
    llm = ScriptedLLM(script)
    return LLMCriterionHypothesizer(llm=llm, **kw), llm


def test_doctests() -> None:
    import doctest

    from llama_index_car.hypothesizers import prompts as prompts_mod

    for module in (llm_mod, prompts_mod):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("raw", "text", "criteria"),
    [
        (GOOD, "신축이음장치 설치기준", ("신축이음장치", "설치기준")),
        ("물론입니다! 다음과 같습니다.\n\n" + GOOD + "\n\n도움이 되길 바랍니다.",
         "신축이음장치 설치기준", ("신축이음장치", "설치기준")),
        ("- **가설**: 배수시설 설치기준\n- **기준어**: 배수시설; 설치기준",
         "배수시설 설치기준", ("배수시설", "설치기준")),
        ("1. 가설：배수시설 설치기준\n2. 기준어：「배수시설」, '설치기준'.",
         "배수시설 설치기준", ("배수시설", "설치기준")),
        ("가설: 배수시설 설치기준\n기준어:\n- 배수시설\n- 설치기준\n\n끝",
         "배수시설 설치기준", ("배수시설", "설치기준")),
        ('```json\n{"가설": "방호울타리 설치기준", "기준어": "방호울타리, 설치기준"}\n```',
         "방호울타리 설치기준", ("방호울타리", "설치기준")),
        ('Sure: {"hypothesis": "난간 높이 기준", "criteria": ["난간높이", "안전기준"]} ok',
         "난간 높이 기준", ("난간높이", "안전기준")),
        ("Hypothesis: 터널 환기 설계기준\nCriteria: 환기, 설계기준",
         "터널 환기 설계기준", ("환기", "설계기준")),
        ("가설: 배수시설 설치기준 및 유지관리 기준", "배수시설 설치기준 및 유지관리 기준",
         ("배수시설", "설치기준", "유지관리", "기준")),
        ("기준어: 배수시설, 설치기준", "배수시설 설치기준", ("배수시설", "설치기준")),
        ("배수시설 설치기준", "배수시설 설치기준", ("배수시설", "설치기준")),
    ],
)
def test_parse_tolerant(raw: str, text: str, criteria: tuple[str, ...]) -> None:
    assert parse_criterion_output(raw) == (text, criteria)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   \n ",
        "```\n```",
        "...!!!",
        "가설: ???\n기준어: ",
        "이 질문은 도로의 배수에 관한 것으로 보입니다. 비가 오면 물이 고이지 않도록 여러 시설을 "
        "두는데, 그 방법은 지역마다 다르고 설계자가 판단해야 합니다.\n추가로 고려할 점이 많습니다.",
        '{"foo": 1}',
    ],
)
def test_parse_garbage_raises(raw: str) -> None:
    with pytest.raises(HypothesisError):
        parse_criterion_output(raw)


def test_parse_caps_terms() -> None:
    raw = "가설: x 기준\n기준어: " + ", ".join(f"용어{i}" for i in range(20))
    assert len(parse_criterion_output(raw)[1]) == 8


# ----------------------------------------------------------------------------- behaviour
def test_is_a_hypothesizer_and_prompt_mixin() -> None:
    hyp, _ = make([GOOD])
    assert isinstance(hyp, BaseCriterionHypothesizer)
    prompts = hyp.get_prompts()
    assert list(prompts) == ["hypothesis_prompt"]
    assert prompts["hypothesis_prompt"].get_template() == CRITERION_HYPOTHESIS_TMPL


def test_prompt_carries_query_and_few_shot_is_unrelated() -> None:
    hyp, llm = make([GOOD])
    result = hyp.hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert result.criteria == ("신축이음장치", "설치기준")
    assert result.source == "llm" and result.cached is False
    assert result.expansion_terms() == "신축이음장치 설치기준"
    (prompt,) = llm.prompts
    assert prompt.rstrip().endswith(f"질문: {QUERY}")
    # the few-shot examples come from other domains: no road-design vocabulary
    for word in ("도로", "교량", "포장", "터널", "신축이음", "배수"):
        assert word not in CRITERION_HYPOTHESIS_TMPL


def test_chat_model_uses_chat() -> None:
    llm = ScriptedLLM([GOOD], chat_model=True)
    LLMCriterionHypothesizer(llm=llm).hypothesize(QUERY)
    assert llm.paths == ["chat"]


def test_memory_cache_hit_and_key() -> None:
    hyp, llm = make([GOOD])
    first = hyp.hypothesize(QUERY)
    again = hyp.hypothesize(QUERY)
    assert again.cached and not first.cached
    assert (again.text, again.criteria) == (first.text, first.criteria)
    assert len(llm.prompts) == 1  # served from memory, the LLM saw one prompt
    assert hyp.cache_info() == {"hits": 1, "misses": 1, "size": 1, "llm_calls": 1}
    # the key changes with the query, the model and the prompt
    other_model, _ = make([GOOD])
    other_model.llm.model = "scripted-2"  # type: ignore[attr-defined]
    assert hyp.cache_key(QUERY) != hyp.cache_key(QUERY + "?")
    assert hyp.cache_key(QUERY) != other_model.cache_key(QUERY)


def test_update_prompts_is_used_and_invalidates_cache() -> None:
    hyp, llm = make([GOOD])
    hyp.hypothesize(QUERY)
    key = hyp.cache_key(QUERY)
    hyp.update_prompts({"hypothesis_prompt": PromptTemplate("Q={query}\n가설:")})
    assert hyp.cache_key(QUERY) != key
    assert not hyp.hypothesize(QUERY).cached
    assert llm.prompts[-1] == f"Q={QUERY}\n가설:"


def test_lru_eviction() -> None:
    hyp, llm = make([GOOD], cache_size=2)
    for q in ("a 질문", "b 질문", "c 질문"):
        hyp.hypothesize(q)
    assert hyp.cache_info()["size"] == 2
    assert not hyp.hypothesize("a 질문").cached  # evicted (least recently used)
    assert hyp.hypothesize("c 질문").cached
    assert len(llm.prompts) == 4


def test_disk_cache_shared_across_instances(tmp_path: Path) -> None:
    hyp, llm = make([GOOD], cache_dir=tmp_path)
    hyp.hypothesize(QUERY)
    files = list(tmp_path.glob("*.json"))
    assert [f.stem for f in files] == [hyp.cache_key(QUERY)]
    data = json.loads(files[0].read_text(encoding="utf-8"))
    assert data["format_version"] == 1 and data["query"] == QUERY
    assert data["criteria"] == ["신축이음장치", "설치기준"]

    fresh, fresh_llm = make([RuntimeError("must not be called")], cache_dir=tmp_path)
    got = fresh.hypothesize(QUERY)
    assert got.cached and got.text == "신축이음장치 설치기준"
    assert fresh_llm.prompts == []


def test_corrupt_disk_cache_is_ignored(tmp_path: Path) -> None:
    hyp, llm = make([GOOD], cache_dir=tmp_path)
    (tmp_path / f"{hyp.cache_key(QUERY)}.json").write_text("{not json", encoding="utf-8")
    assert not hyp.hypothesize(QUERY).cached
    assert len(llm.prompts) == 1
    assert json.loads((tmp_path / f"{hyp.cache_key(QUERY)}.json").read_text())["text"]


def _plant(path: Path, kind: str) -> None:
    """A hostile cache file of ``kind`` at ``path``."""
    import os

    good = {"format_version": 1, "text": "심어진 가설", "criteria": ["심어진"], "query": QUERY}
    if kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "oversize":
        path.write_text(json.dumps({**good, "pad": "x" * (llm_mod.MAX_CACHE_FILE_BYTES + 1)}))
    elif kind == "group-writable":
        path.write_text(json.dumps(good))
        path.chmod(0o664)
    elif kind == "symlink to a good file":
        target = path.with_name("elsewhere.txt")
        target.write_text(json.dumps(good))
        path.symlink_to(target)
    elif kind == "text not a string":
        path.write_text(json.dumps({**good, "text": ["a", "b"]}))
    elif kind == "criteria a string":
        path.write_text(json.dumps({**good, "criteria": "배수시설"}))
    elif kind == "criteria not strings":
        path.write_text(json.dumps({**good, "criteria": [{"a": 1}]}))
    elif kind == "deeply nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "not utf-8":
        path.write_bytes(b'{"text": "' + bytes([0xFF, 0xFE]) + b'"}')
    else:  # pragma: no cover
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", [
    "symlink to /dev/zero", "fifo", "oversize", "group-writable", "symlink to a good file",
    "text not a string", "criteria a string", "criteria not strings", "deeply nested",
    "not utf-8",
])
def test_hostile_disk_cache_file_is_a_miss_with_one_warning(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The hypothesis cache is untrusted input: a planted file is never used (the LLM is
    asked, its answer replaces the file), never hangs or exhausts memory, and is named in
    one warning."""
    import threading

    hyp, llm = make([GOOD], cache_dir=tmp_path)
    path = tmp_path / f"{hyp.cache_key(QUERY)}.json"
    _plant(path, kind)
    result: list[Any] = []
    done = threading.Event()

    def ask() -> None:
        try:
            result.append(hyp.hypothesize(QUERY))
        except BaseException as exc:  # noqa: BLE001 - reported below
            result.append(exc)
        done.set()

    with caplog.at_level("WARNING", logger=llm_mod.logger.name):
        threading.Thread(target=ask, daemon=True).start()
        assert done.wait(60), f"hypothesize hung on a {kind} cache file"
    got = result[0]
    assert not isinstance(got, BaseException), got
    assert not got.cached and got.text == "신축이음장치 설치기준"  # the LLM's, not the planted one
    assert len(llm.prompts) == 1
    assert any(str(path) in r.getMessage() for r in caplog.records), caplog.text


def test_the_hypothesizer_never_retries_a_failing_llm() -> None:
    """Retries belong to the LLM client (its max_retries): one failing call, one error."""
    hyp, llm = make([StatusError(503), GOOD])
    with pytest.raises(HypothesisError, match=r"StatusError \(HTTP 503\)") as info:
        hyp.hypothesize(QUERY)
    assert len(llm.prompts) == 1
    assert isinstance(info.value.__cause__, StatusError)
    assert hyp.hypothesize(QUERY).text == "신축이음장치 설치기준"  # the failure was not cached


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_name_the_status(status: int) -> None:
    hyp, llm = make([StatusError(status), GOOD])
    with pytest.raises(HypothesisError, match=f"HTTP {status}") as info:
        hyp.hypothesize(QUERY)
    assert len(llm.prompts) == 1
    assert ("API key" in str(info.value)) == (status in (401, 403))


def test_garbage_is_not_retried_and_not_cached() -> None:
    hyp, llm = make(["I cannot help with that request, sorry. " * 5, GOOD])
    with pytest.raises(HypothesisError, match="unusable"):
        hyp.hypothesize(QUERY)
    assert hyp.cache_info()["size"] == 0
    assert hyp.hypothesize(QUERY).text == "신축이음장치 설치기준"  # next call tries again


async def test_async_native_path() -> None:
    hyp, llm = make([GOOD])
    result = await hyp.ahypothesize(QUERY)
    assert result.criteria == ("신축이음장치", "설치기준")
    assert llm.paths == ["acomplete"]
    assert (await hyp.ahypothesize(QUERY)).cached


async def test_async_calls_run_concurrently() -> None:
    """Five calls in flight at once: each waits until all five have started (a barrier that
    only concurrent calls can pass; sequential calls would wait for ever)."""
    started = asyncio.Event()
    count = 0

    class Gate(ScriptedLLM):
        async def acomplete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
            nonlocal count
            count += 1
            if count == 5:
                started.set()
            await asyncio.wait_for(started.wait(), timeout=30)
            return CompletionResponse(text=GOOD)

    hyp = LLMCriterionHypothesizer(llm=Gate([GOOD]))
    results = await asyncio.gather(*(hyp.ahypothesize(f"질문 {i}") for i in range(5)))
    assert len(results) == 5 and all(not r.cached for r in results)


def test_async_failure_is_typed() -> None:
    hyp, llm = make([StatusError(429), GOOD])
    with pytest.raises(HypothesisError, match="HTTP 429"):
        asyncio.run(hyp.ahypothesize(QUERY))
    assert asyncio.run(hyp.ahypothesize(QUERY)).text == "신축이음장치 설치기준"
    assert llm.paths == ["acomplete", "acomplete"]


def test_empty_query_and_bad_options() -> None:
    hyp, _ = make([GOOD])
    with pytest.raises(HypothesisError, match="empty query"):
        hyp.hypothesize("  ")
    from llama_index_car._errors import ConfigurationError

    for kw in ({"max_output_chars": 0}, {"cache_size": -1}):
        with pytest.raises(ConfigurationError):
            LLMCriterionHypothesizer(llm=ScriptedLLM([GOOD]), **kw)  # type: ignore[arg-type]
    for removed in ("timeout", "max_retries", "backoff", "deadline"):
        with pytest.raises(TypeError):  # the LLM client owns these now
            LLMCriterionHypothesizer(llm=ScriptedLLM([GOOD]), **{removed: 1})


def test_default_llm_is_the_bounded_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingCredentialsError, match="ANTHROPIC_API_KEY"):
        LLMCriterionHypothesizer()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    from llama_index_car.llms import BoundedAnthropic

    hyp = LLMCriterionHypothesizer()
    assert isinstance(hyp.llm, BoundedAnthropic)
    assert hyp.llm.model == "claude-sonnet-4-6"
    assert (hyp.llm.max_retries, hyp.llm.timeout) == (2, 60.0)  # the SDK's retries apply


# ----------------------------------------------------------------------------- HyDE
PASSAGE = "단락: 신축이음장치는 교량 상부구조의 온도 변화에 따른 신축을 흡수하도록 설치한다."


def test_hyde_passage_and_terms() -> None:
    llm = ScriptedLLM([PASSAGE])
    hyde = HyDEHypothesizer(llm=llm, term_extractor=lambda t: t.split()[:2] + ["교량"])
    result = hyde.hypothesize(QUERY)
    assert result.source == "hyde"
    assert result.text.startswith("신축이음장치는 교량")
    assert result.criteria == ("신축이음장치는", "교량")  # unique, in order
    assert "질문: " + QUERY in llm.prompts[0]
    assert list(hyde.get_prompts()) == ["hypothesis_prompt"]
    assert hyde.hypothesize(QUERY).cached
    # one engine: HyDE and the criterion hypothesizer share cache/retry code, not copies
    assert HyDEHypothesizer.hypothesize is LLMCriterionHypothesizer.hypothesize


def test_hyde_default_terms_use_kiwi_nouns() -> None:
    hyde = HyDEHypothesizer(llm=ScriptedLLM([PASSAGE]))
    criteria = hyde.hypothesize(QUERY).criteria
    assert "신축이음장치" in criteria
    assert all(" " not in c for c in criteria)


def test_hyde_garbage_and_retry() -> None:
    hyde = HyDEHypothesizer(llm=ScriptedLLM(["  ```\n```  "]), term_extractor=str.split)
    with pytest.raises(HypothesisError, match="HyDE"):
        hyde.hypothesize(QUERY)
    ok = HyDEHypothesizer(llm=ScriptedLLM([StatusError(529), PASSAGE]), term_extractor=str.split)
    with pytest.raises(HypothesisError, match="HTTP 529"):
        ok.hypothesize(QUERY)
    assert ok.hypothesize(QUERY).text.startswith("신축이음장치")
