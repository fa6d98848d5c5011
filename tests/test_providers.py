"""providers: flag/env → configured object, one-line errors for missing keys and extras."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from llama_index_car import providers
from llama_index_car._errors import (
    ConfigurationError,
    MissingCredentialsError,
    MissingDependencyError,
)
from llama_index_car.providers import resolve_embed_model, resolve_llm, resolve_reranker

ENV_VARS = (
    "LLAMA_CAR_EMBED_MODEL", "LLAMA_CAR_LLM", "LLAMA_CAR_RERANKER", "CAR_EMBED_MODEL", "CAR_LLM",
    "CAR_RERANKER", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "COHERE_API_KEY",
    "CO_API_KEY", "CO_API_URL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


def test_one_prefix_and_the_old_one_as_a_deprecated_alias(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``LLAMA_CAR_*`` is read; the older ``CAR_*`` name still works when the new one is
    unset, with one DeprecationWarning line naming the new variable; the new one wins."""
    monkeypatch.setenv("CAR_EMBED_MODEL", "use")
    with pytest.warns(DeprecationWarning, match=r"^CAR_EMBED_MODEL is deprecated; set "
                      r"LLAMA_CAR_EMBED_MODEL instead$"):
        assert providers.embed_provider() == "use"
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "openai")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert providers.embed_provider() == "openai"
    monkeypatch.setenv("CAR_LLM", "bogus")
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError,
                                                          match="LLAMA_CAR_LLM"):
        resolve_llm()


def test_doctests() -> None:
    import doctest

    assert doctest.testmod(providers).failed == 0


def test_embed_default_is_offline_e5(monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(resolve_embed_model()).__name__ == "MultilingualE5Embedding"
    assert type(resolve_embed_model(" E5 ")).__name__ == "MultilingualE5Embedding"
    assert type(resolve_embed_model(" USE ")).__name__ == "UniversalSentenceEncoderEmbedding"
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "use")
    assert type(resolve_embed_model()).__name__ == "UniversalSentenceEncoderEmbedding"
    assert type(resolve_embed_model("e5")).__name__ == "MultilingualE5Embedding"  # flag wins


def test_embed_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingCredentialsError) as info:
        resolve_embed_model("openai")
    assert "OPENAI_API_KEY" in one_line(info.value)
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "openai")
    with pytest.raises(MissingCredentialsError, match="OPENAI_API_KEY"):
        resolve_embed_model()  # from the environment
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    emb = resolve_embed_model(timeout=5.0, max_retries=1)
    assert type(emb).__name__ == "OpenAIEmbedding"
    assert emb.model_name == "text-embedding-3-large"
    assert emb.dimensions == 1536  # type: ignore[attr-defined]
    assert emb.api_base == "http://127.0.0.1:9/v1"  # type: ignore[attr-defined]
    assert (emb.timeout, emb.max_retries) == (5.0, 1)  # type: ignore[attr-defined]


def test_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_llm() is None
    assert resolve_llm("none") is None
    assert type(resolve_llm("mock")).__name__ == "MockLLM"
    with pytest.raises(MissingCredentialsError) as info:
        resolve_llm("anthropic")
    assert "export ANTHROPIC_API_KEY=" in one_line(info.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LLAMA_CAR_LLM", "anthropic")
    llm: Any = resolve_llm(timeout=7.0, max_retries=0)
    from llama_index.llms.anthropic import Anthropic

    from llama_index_car.llms import BoundedAnthropic

    assert isinstance(llm, BoundedAnthropic) and isinstance(llm, Anthropic)
    assert llm.max_response_bytes == 1 << 20
    assert llm.model == "claude-sonnet-4-6"
    assert str(llm._client.base_url).rstrip("/") == "http://127.0.0.1:9"
    assert (llm.timeout, llm.max_retries) == (7.0, 0)
    assert resolve_llm("anthropic", model="claude-haiku-4-5").model == "claude-haiku-4-5"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "kw",
    [{"timeout": 0}, {"timeout": float("inf")}, {"max_retries": -1}, {"max_response_bytes": 0},
     {"aws_region": "us-east-1"}, {"region": "us-east5", "project_id": "p"}],
)
def test_bounded_anthropic_refuses_unbounded_or_other_backends(kw: dict[str, Any]) -> None:
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.llms import BoundedAnthropic

    with pytest.raises(ConfigurationError):
        BoundedAnthropic(api_key="sk-ant-test", **kw)


def test_reranker(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_reranker() is None
    with pytest.raises(MissingCredentialsError) as info:
        resolve_reranker("cohere")
    assert "COHERE_API_KEY" in one_line(info.value)
    monkeypatch.setenv("CO_API_KEY", "co-test")  # the cohere SDK's own variable works too
    monkeypatch.setenv("CO_API_URL", "http://127.0.0.1:9")
    rerank: Any = resolve_reranker("cohere", top_n=7, max_retries=1)
    assert type(rerank).__name__ == "CohereRerank"
    assert (rerank.model, rerank.top_n, rerank.max_retries) == ("rerank-multilingual-v3.0", 7, 1)
    assert rerank._client._client_wrapper.get_base_url() == "http://127.0.0.1:9"
    with pytest.raises(ConfigurationError, match="top_n"):
        resolve_reranker("cohere", top_n=0)


@pytest.mark.parametrize(
    ("call", "env"),
    [
        (lambda: resolve_embed_model("bert"), None),
        (lambda: resolve_llm("gpt"), None),
        (lambda: resolve_reranker("jina"), None),
        (lambda: resolve_llm(), "LLAMA_CAR_LLM"),
    ],
)
def test_unknown_names(call: Any, env: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if env:
        monkeypatch.setenv(env, "bogus")
    with pytest.raises(ConfigurationError) as info:
        call()
    message = one_line(info.value)
    assert "choose one of" in message
    if env:
        assert env in message


@pytest.mark.parametrize(
    ("call", "module", "extra"),
    [
        (lambda: resolve_llm("anthropic"), "llama_index.llms.anthropic", "anthropic"),
        (lambda: resolve_embed_model("openai"), "llama_index.embeddings.openai", "openai"),
        (lambda: resolve_reranker("cohere"), "llama_index.postprocessor.cohere_rerank", "cohere"),
    ],
)
def test_missing_extra(call: Any, module: str, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def fake_find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == module else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(MissingDependencyError) as info:
        call()
    assert f"pip install 'llama-index-car[{extra}]'" in one_line(info.value)
