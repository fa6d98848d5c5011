"""The query guard: one check at the entry of every retriever of the package.

``KiwiBM25Retriever``, the dense view ``IndexDense``, ``WeightedRRFRetriever`` and
``CriterionAwareRetriever`` (with or without routing) decorate their ``_retrieve``/
``_aretrieve`` with :func:`guarded_retrieve`, so every query of every view goes through
:func:`clean_query` (its text and any ``custom_embedding_strs``) before any tokenization or
embedding:

* a query longer than ``max_chars`` raises :class:`~llama_index_car._errors.QueryError`
  (checked first, before any other work: a 1 MB query used to cost 37–56 s);
* terminal escape sequences, control characters, bidi/zero-width format characters and lone
  surrogates (undecodable bytes, e.g. ``"\\udcff"`` from ``$'\\xff'`` on a command line) are
  removed (:func:`~llama_index_car.hypothesizers.base.sanitize_text`); ordinary text passes
  unchanged;
* a query that is empty or whitespace afterwards (and carries no embedding) returns ``[]``
  (an empty retrieval, not an error);
* a query that is not a ``str`` raises :class:`QueryError`.

The limit. ``max_chars`` defaults to :data:`DEFAULT_MAX_QUERY_CHARS` (2000 characters — a
question, not a document), or to the environment variable ``LLAMA_CAR_MAX_QUERY_CHARS`` when set.
Raise it per retriever with ``retriever.query_limits = QueryLimits(max_chars=10_000)``.
Nested retrievals (the channels a fusion retriever calls with the query plus its expansion)
are not checked again.

>>> clean_query("  배수시설\\u202e 설치기준\\x1b[0m ")
'  배수시설 설치기준 '
>>> clean_query("\\udcff \\t")
''
>>> clean_query("x" * 3001, QueryLimits(max_chars=3000))
Traceback (most recent call last):
...
llama_index_car._errors.QueryError: the query has 3001 characters; the limit is 3000 (QueryLimits.max_chars; raise it with retriever.query_limits = QueryLimits(max_chars=...) or $LLAMA_CAR_MAX_QUERY_CHARS)
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError, QueryError
from llama_index_car.hypothesizers.base import sanitize_text

__all__ = [
    "QueryLimits",
    "clean_query",
    "guarded_retrieve",
]

#: default longest query, in characters
DEFAULT_MAX_QUERY_CHARS = 2000
#: environment variable overriding :data:`DEFAULT_MAX_QUERY_CHARS`
MAX_QUERY_CHARS_ENV = "LLAMA_CAR_MAX_QUERY_CHARS"

_GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("car_query_guarded", default=False)


def default_max_query_chars() -> int:
    """``$LLAMA_CAR_MAX_QUERY_CHARS`` if set (an integer >= 1), else
    :data:`DEFAULT_MAX_QUERY_CHARS`."""
    from llama_index_car._env import env

    raw = (env("MAX_QUERY_CHARS") or "").strip()
    if not raw:
        return DEFAULT_MAX_QUERY_CHARS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(
            f"{MAX_QUERY_CHARS_ENV}={raw!r} is invalid; use an integer >= 1 "
            f"(default {DEFAULT_MAX_QUERY_CHARS})"
        )
    return value


class QueryLimits(BaseModel):
    """Limits every retriever of the package applies to a query (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    max_chars: int = Field(
        default_factory=default_max_query_chars,
        ge=1,
        description=(
            "Longest query accepted, in characters; longer queries raise QueryError before "
            f"any tokenization or embedding. Default {DEFAULT_MAX_QUERY_CHARS}, or "
            f"${MAX_QUERY_CHARS_ENV}."
        ),
    )


def clean_query(query: Any, limits: QueryLimits | None = None) -> str:
    """The query made safe to search, ``""`` when nothing is left to search.

    Raises:
        QueryError: ``query`` is not a ``str``, or is longer than ``limits.max_chars``.
    """
    if not isinstance(query, str):
        raise QueryError(f"the query must be a str, not {type(query).__name__}")
    limit = (limits or QueryLimits()).max_chars
    if len(query) > limit:
        raise QueryError(
            f"the query has {len(query)} characters; the limit is {limit} "
            "(QueryLimits.max_chars; raise it with retriever.query_limits = "
            f"QueryLimits(max_chars=...) or ${MAX_QUERY_CHARS_ENV})"
        )
    cleaned = sanitize_text(query, keep_newlines=True)
    return cleaned if cleaned.strip() else ""


def guard_query_bundle(
    query_bundle: QueryBundle, limits: QueryLimits | None = None
) -> QueryBundle | None:
    """``query_bundle`` with a cleaned ``query_str`` and cleaned ``custom_embedding_strs``
    (each checked as a query; empty ones dropped), the same object when nothing changed, or
    ``None`` when there is nothing to search (no text left and no embedding)."""
    cleaned = clean_query(query_bundle.query_str, limits)
    given = query_bundle.custom_embedding_strs
    custom = None if given is None else [c for c in (clean_query(s, limits) for s in given) if c]
    if not cleaned and query_bundle.embedding is None and not custom:
        return None
    if cleaned == query_bundle.query_str and custom == given:
        return query_bundle
    return QueryBundle(
        query_str=cleaned,
        custom_embedding_strs=custom or None,
        embedding=query_bundle.embedding,
    )


_Retrieve = TypeVar("_Retrieve", bound=Callable[..., Any])


def guarded_retrieve(method: _Retrieve) -> _Retrieve:
    """Decorate a retriever's ``_retrieve`` or ``_aretrieve`` with :func:`guard_query_bundle`.

    The limits are the instance's ``query_limits`` attribute when set, else the defaults. An
    empty query returns ``[]`` without calling ``method``. Calls made while a guarded call is
    running (the channels of a fusion retriever, in threads or tasks that copy the context)
    skip the guard: the outer call already checked the user's query.
    """
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def aguarded(self: Any, query_bundle: QueryBundle) -> list[NodeWithScore]:
            if _GUARDED.get():
                return cast(list[NodeWithScore], await method(self, query_bundle))
            bundle = guard_query_bundle(query_bundle, getattr(self, "query_limits", None))
            if bundle is None:
                return []
            token = _GUARDED.set(True)
            try:
                result = method(self, bundle)
                return cast(list[NodeWithScore], await cast(Awaitable[Any], result))
            finally:
                _GUARDED.reset(token)

        return cast(_Retrieve, aguarded)

    @functools.wraps(method)
    def guarded(self: Any, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if _GUARDED.get():
            return cast(list[NodeWithScore], method(self, query_bundle))
        bundle = guard_query_bundle(query_bundle, getattr(self, "query_limits", None))
        if bundle is None:
            return []
        token = _GUARDED.set(True)
        try:
            return cast(list[NodeWithScore], method(self, bundle))
        finally:
            _GUARDED.reset(token)

    return cast(_Retrieve, guarded)
