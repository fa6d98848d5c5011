"""Typed errors and warnings raised by llama-index-car.

Every error subclasses :class:`CarError`, so callers can catch the package's failures
without catching unrelated bugs. Messages name the offending value and the fix.
"""

from __future__ import annotations


class CarError(Exception):
    """Base class of every error raised by llama-index-car."""


class ConfigurationError(CarError, ValueError):
    """An option has an invalid value; the message names the allowed values."""


class EmptyIndexError(ConfigurationError):
    """An index or docstore holds no nodes where some are needed (e.g. BM25 over a
    store-backed ``VectorStoreIndex``, whose docstore is empty): pass ``nodes=``."""


class NothingToIndexError(ConfigurationError):
    """Every source file failed to parse or held no text: there is nothing to index."""


class MissingDependencyError(CarError, ImportError):
    """An optional dependency is not installed; the message says what to ``pip install``."""


class MissingCredentialsError(CarError, RuntimeError):
    """A provider was chosen but its API key is not set; the message names the variable."""


class IndexPersistError(CarError, OSError):
    """A persisted index directory is missing a file or holds a damaged one (named)."""


class UntrustedFileError(CarError, OSError):
    """A file of a cache (which, like ``~/.ssh``, is trusted only when it is the user's own) is
    refused: a symlink, FIFO, device or directory, not owned by the user, writable by group or
    others, or larger than its declared size. The message names the file; the cache then
    recomputes what the file held."""


class StoreError(CarError, ConnectionError):
    """A vector store could not be opened or reached (server down, wrong path, refused);
    the message names the store (never its password) and the client's cause."""


class HypothesisError(CarError, RuntimeError):
    """A criterion hypothesizer failed, timed out or returned unusable output."""


class LLMResponseError(CarError, RuntimeError):
    """An LLM provider's HTTP exchange broke a bound of the bounded client
    (:mod:`llama_index_car.llms`); the message names the bound and the URL."""


class ResponseTooLargeError(LLMResponseError):
    """An LLM response body exceeded ``max_response_bytes`` (or came compressed): reading
    stopped there and the connection was closed."""


class LLMDeadlineError(LLMResponseError, TimeoutError):
    """An LLM call passed the deadline of :func:`~llama_index_car.llms.deadline.llm_deadline`:
    the socket was closed and the SDK does not retry."""


class QueryError(CarError, ValueError):
    """A query cannot be searched: not a string, or longer than the configured limit."""


class EvaluationDataError(CarError, ValueError):
    """An evaluation input (BEIR folder, TREC file, QA file) is missing or malformed."""


class CacheWarning(UserWarning):
    """A cache could not be used: a file of it was refused or damaged (what it held is computed
    again), or it could not be written (this run's results stay in memory). The message names
    the file and the cause; the job itself goes on."""


class TokenizerMismatchWarning(UserWarning):
    """A persisted index was built with a different tokenizer spec or kiwipiepy version."""


def require(module: str, extra: str, package: str) -> None:
    """Raise :class:`MissingDependencyError` with an install hint if ``module`` is missing.

    >>> require("json", extra="none", package="json")
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise MissingDependencyError(
            f"{package} is not installed; run: pip install 'llama-index-car[{extra}]'"
        )
