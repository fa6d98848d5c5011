"""Provider resolution: a flag or environment value → a configured LlamaIndex object.

Offline defaults need nothing; real providers need an API key and an extra, and a missing one
gives **one line** saying what to set or install:

=================  =========================================  =====================  ==========
function           name → object                              key                    extra
=================  =========================================  =====================  ==========
resolve_embed_     ``e5`` (default) → multilingual-e5-small   —                      —
model              (offline, 4-bit, 384d)
                   ``use`` → USE v3 (offline, 512d)            —                      —
                   ``openai`` → ``text-embedding-3-large``,    ``OPENAI_API_KEY``     ``openai``
                   1536 dimensions
resolve_llm        ``none`` (default) → ``None``               —                      —
                   ``anthropic`` → ``claude-sonnet-4-6``       ``ANTHROPIC_API_KEY``  ``anthropic``
                   (``BoundedAnthropic``)
                   ``mock`` → ``MockLLM`` (tests, demos)       —                      —
resolve_reranker   ``none`` (default) → ``None``               —                      —
                   ``cohere`` → ``rerank-multilingual-v3.0``   ``COHERE_API_KEY``     ``cohere``
=================  =========================================  =====================  ==========

``name=None`` reads ``LLAMA_CAR_EMBED_MODEL`` / ``LLAMA_CAR_LLM`` / ``LLAMA_CAR_RERANKER`` (for the embedding,
LlamaIndex's ``Settings.embed_model`` comes first when the application set it); every ``llama-car``
subcommand and every library default (``CriterionAwareRetriever.from_defaults``, the corpus
hypothesizer, ``build_index``) resolves the embedding through :func:`resolve_embed_model`, so
one variable switches them all. Base URLs come from the variables the SDKs read —
``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL`` (or ``OPENAI_API_BASE``), ``CO_API_URL`` — and are
passed explicitly where a llama-index integration would otherwise override them (OpenAI
embeddings, Cohere rerank).

>>> embed_provider("USE")
'use'
>>> resolve_llm("none") is None
True
>>> type(resolve_embed_model("use")).__name__
'UniversalSentenceEncoderEmbedding'
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from llama_index_car._env import env, env_name
from llama_index_car._errors import ConfigurationError, MissingCredentialsError, require

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

__all__ = [
    "EMBED_MODELS",
    "LLMS",
    "RERANKERS",
    "embed_provider",
    "embed_spec",
    "query_embedding",
    "resolve_embed_model",
    "resolve_llm",
    "resolve_reranker",
]

#: ``--embed`` choices; the first is the default
EMBED_MODELS: tuple[str, ...] = ("e5", "use", "openai")
DEFAULT_EMBED_MODEL = "e5"
LLMS: tuple[str, ...] = ("none", "anthropic", "mock")
#: the LLM choices offered by the ``llama-car`` subcommands (``mock`` is for tests)
CLI_LLMS: tuple[str, ...] = tuple(name for name in LLMS if name != "mock")
RERANKERS: tuple[str, ...] = ("none", "cohere")

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
DEFAULT_OPENAI_EMBED_MODEL = "text-embedding-3-large"
DEFAULT_OPENAI_DIMENSIONS = 1536
DEFAULT_COHERE_RERANK_MODEL = "rerank-multilingual-v3.0"


def _choose(name: str | None, var: str, default: str, allowed: tuple[str, ...]) -> str:
    """``name``, else ``$LLAMA_CAR_<var>`` (:func:`~llama_index_car._env.env`), else
    ``default``, normalised and checked against ``allowed``."""
    value = name if name is not None else env(var) or default
    choice = value.strip().lower()
    if choice not in allowed:
        raise ConfigurationError(
            f"unknown provider {value!r} (from {'argument' if name is not None else env_name(var)}); "
            f"choose one of {', '.join(allowed)}"
        )
    return choice


def _key(*names: str, provider: str, offline: str) -> str:
    for var in names:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    raise MissingCredentialsError(
        f"{provider} needs an API key: export {names[0]}=... ({offline})"
    )


def embed_provider(name: str | None = None) -> str:
    """The embedding provider name ``name`` stands for: ``name`` itself (normalised), else
    ``$LLAMA_CAR_EMBED_MODEL``, else ``e5``.

    Raises:
        ConfigurationError: unknown name (the message lists :data:`EMBED_MODELS`).
    """
    return _choose(name, "EMBED_MODEL", DEFAULT_EMBED_MODEL, EMBED_MODELS)


def resolve_embed_model(name: str | None = None, *, timeout: float = 60.0,
                        max_retries: int = 3) -> BaseEmbedding:
    """The dense embedding for ``name``.

    ``name=None``: LlamaIndex's ``Settings.embed_model`` when the application has set one,
    else :func:`embed_provider` (``$LLAMA_CAR_EMBED_MODEL``, else ``e5``).

    ``e5`` (default) → :class:`~llama_index_car.embeddings.e5.MultilingualE5Embedding`
    (multilingual-e5-small, 4-bit, offline, 384 dims; ``query:``/``passage:`` roles);
    ``use`` → :class:`~llama_index_car.embeddings.use.UniversalSentenceEncoderEmbedding`
    (multilingual USE v3, offline, 512 dims);
    ``openai`` → ``OpenAIEmbedding(model="text-embedding-3-large", dimensions=1536)`` with
    ``timeout``/``max_retries`` and the base URL from ``OPENAI_BASE_URL``/``OPENAI_API_BASE``.

    Raises:
        ConfigurationError: unknown name. MissingCredentialsError: no ``OPENAI_API_KEY``.
        MissingDependencyError: ``pip install 'llama-index-car[openai]'`` needed.
    """
    if name is None:
        configured = _settings_embed_model()
        if configured is not None:
            return configured
    choice = embed_provider(name)
    if choice == "e5":
        from llama_index_car.embeddings.e5 import MultilingualE5Embedding

        return MultilingualE5Embedding()
    if choice == "use":
        from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding

        return UniversalSentenceEncoderEmbedding()
    require("llama_index.embeddings.openai", extra="openai", package="llama-index-embeddings-openai")
    api_key = _key("OPENAI_API_KEY", provider="OpenAI embeddings",
                   offline="or use --embed e5, the offline default")
    from llama_index.embeddings.openai import OpenAIEmbedding

    base = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or None
    return OpenAIEmbedding(
        model=DEFAULT_OPENAI_EMBED_MODEL,
        dimensions=DEFAULT_OPENAI_DIMENSIONS,
        api_key=api_key,
        api_base=base,
        timeout=timeout,
        max_retries=max_retries,
    )


def _settings_embed_model() -> BaseEmbedding | None:
    """``Settings.embed_model`` if the application set it (never LlamaIndex's OpenAI default)."""
    from llama_index.core import Settings

    configured = getattr(Settings, "_embed_model", None)
    return configured if configured is not None else None


def resolve_llm(name: str | None = None, *, model: str | None = None,
                timeout: float | None = 60.0, max_retries: int = 2) -> LLM | None:
    """The LLM for ``name``: ``none`` → ``None``, ``anthropic`` → Claude, ``mock`` → MockLLM.

    ``anthropic`` → :class:`~llama_index_car.llms.BoundedAnthropic` (LlamaIndex's ``Anthropic``
    with bounded HTTP attempts): ``model or "claude-sonnet-4-6"``, ``timeout`` seconds per HTTP
    attempt in all (default 60), the SDK's ``max_retries`` (default 2) with its backoff and the
    server's ``Retry-After``, response bodies capped at 1 MiB, base URL from
    ``ANTHROPIC_BASE_URL``. Inside :func:`~llama_index_car.llms.deadline.llm_deadline` (which
    ``CriterionAwareRetriever`` opens with its ``hypothesis_timeout``) every call, retries
    included, ends by the deadline.

    Raises:
        ConfigurationError: unknown name. MissingCredentialsError: no ``ANTHROPIC_API_KEY``.
        MissingDependencyError: ``pip install 'llama-index-car[anthropic]'`` needed.
    """
    choice = _choose(name, "LLM", "none", LLMS)
    if choice == "none":
        return None
    if choice == "mock":
        from llama_index.core.llms import MockLLM

        return MockLLM()
    require("llama_index.llms.anthropic", extra="anthropic", package="llama-index-llms-anthropic")
    api_key = _key("ANTHROPIC_API_KEY", provider="Anthropic (claude-sonnet-4-6)",
                   offline="or run without an LLM: the offline CAR is the default")
    from llama_index_car.llms.anthropic import BoundedAnthropic

    return BoundedAnthropic(
        model=model or DEFAULT_ANTHROPIC_MODEL,
        api_key=api_key,
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
        timeout=timeout,
        max_retries=max_retries,
    )


def resolve_reranker(name: str | None = None, top_n: int = 10, *,
                     max_retries: int = 3) -> BaseNodePostprocessor | None:
    """The reranking postprocessor for ``name``: ``none`` → ``None``, ``cohere`` →
    ``CohereRerank(model="rerank-multilingual-v3.0", top_n=top_n)`` (base URL from
    ``CO_API_URL``; key from ``COHERE_API_KEY`` or ``CO_API_KEY``).

    Raises:
        ConfigurationError: unknown name or ``top_n < 1``. MissingCredentialsError: no key.
        MissingDependencyError: ``pip install 'llama-index-car[cohere]'`` needed.
    """
    choice = _choose(name, "RERANKER", "none", RERANKERS)
    if choice == "none":
        return None
    if top_n < 1:
        raise ConfigurationError(f"top_n={top_n!r} must be >= 1")
    require("llama_index.postprocessor.cohere_rerank", extra="cohere",
            package="llama-index-postprocessor-cohere-rerank")
    api_key = _key("COHERE_API_KEY", "CO_API_KEY", provider="Cohere rerank",
                   offline="or drop --rerank cohere")
    from llama_index.postprocessor.cohere_rerank import CohereRerank

    return CohereRerank(
        model=DEFAULT_COHERE_RERANK_MODEL,
        top_n=top_n,
        api_key=api_key,
        base_url=os.environ.get("CO_API_URL") or None,
        max_retries=max_retries,
    )


# ----------------------------------------------------------------------------- embedding spec
#: embedding class name -> the provider name that recreates it (others: ``custom``)
PROVIDER_OF_CLASS = {
    "MultilingualE5Embedding": "e5",
    "UniversalSentenceEncoderEmbedding": "use",
    "OpenAIEmbedding": "openai",
}


def embed_spec(embed_model: Any, dimensions: int | None = None) -> dict[str, Any]:
    """What an index records of its embedding so a later load can recreate and check it:
    ``provider`` (:data:`PROVIDER_OF_CLASS`, else ``custom``), ``class_name``,
    ``model_name``, ``dimensions`` (given, else the model's own) and ``engine`` (its
    ``engine_id``, e.g. the e5 ONNX engine).

    >>> from llama_index.core.embeddings import MockEmbedding
    >>> embed_spec(MockEmbedding(embed_dim=3), 3)["provider"]
    'custom'
    """
    name = embed_model.class_name()
    return {
        "provider": PROVIDER_OF_CLASS.get(name, "custom"),
        "class_name": name,
        "model_name": getattr(embed_model, "model_name", ""),
        "dimensions": dimensions if dimensions is not None else getattr(
            embed_model, "dimensions", None),
        "engine": getattr(embed_model, "engine_id", None),
    }


def query_embedding(recorded: dict[str, Any], given: Any, where: object) -> Any:
    """The query embedding of an index whose embedding spec is ``recorded``
    (:func:`embed_spec`): ``given`` when one is passed, checked against the recorded model
    name; else the recorded provider's (``$LLAMA_CAR_EMBED_MODEL`` and LlamaIndex's
    ``Settings`` do not apply: an index is queried with the embedding it was built with).
    Every load path (``CriterionAwareIndex.load``, the folder's ``load_index``, the CLI)
    resolves through here. ``where`` names the index in messages.

    Raises:
        ConfigurationError: the index was built with a custom embedding and none is given, or
            ``given`` is another model than the recorded one (one line each).
    """
    if given is None:
        provider = str(recorded.get("provider", "use"))
        if provider == "custom":
            raise ConfigurationError(
                f"{where} was built with a custom embedding "
                f"({recorded.get('class_name')}, {recorded.get('model_name')!r}); "
                "pass the same embed_model to load it"
            )
        given = resolve_embed_model(provider)
    name = getattr(given, "model_name", "")
    if recorded.get("model_name") and name != recorded["model_name"]:
        raise ConfigurationError(
            f"{where} was indexed with embedding {recorded['model_name']!r} but the query "
            f"embedding is {name!r}; use the same model (--embed {recorded.get('provider')})"
        )
    return given
