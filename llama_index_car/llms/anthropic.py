"""``BoundedAnthropic``: LlamaIndex's Claude client with calls that end on time and bounded reads.

The ``anthropic`` SDK keeps its own reliability layer — ``max_retries`` with backoff, the
server's ``Retry-After`` obeyed, ``x-should-retry`` — and this class keeps it; what it adds is in
the HTTP transport the SDK is given through its public ``http_client=`` argument
(:mod:`llama_index_car.llms.transport`):

* ``timeout`` bounds one HTTP attempt *in all* (connect to the last body byte), not each socket
  read, so a server dripping a byte a second cannot hold a call;
* :func:`~llama_index_car.llms.deadline.llm_deadline` bounds the whole call (attempts and retry
  waits): at the deadline the socket is closed and the calling thread returns with
  :class:`AnthropicDeadlineError`, and a retry the SDK would sleep past it is not made;
* a response body above ``max_response_bytes`` (1 MiB) is refused as it arrives, with
  :class:`AnthropicResponseTooLargeError`, instead of being buffered whole;
* the async client works across event loops (a pool per loop, no keep-alive), so
  ``asyncio.run(...)`` in a loop never reuses a socket of a closed loop;
* redirects are not followed (an API key never goes to another host); proxy variables are
  not used.

Both errors mix in ``anthropic.AnthropicError``, which the SDK raises as they are (no retry),
and :class:`~llama_index_car._errors.CarError`.

``llama_index.llms.anthropic.Anthropic`` (0.12.3, the newest) takes no ``http_client``: this
subclass swaps the two SDK clients its parent built (``_client``/``_aclient``, the one place
this package touches a private attribute of a third-party object) for copies made with the
SDK's public ``with_options(http_client=...)``, so every option the parent gave them (API key,
base URL, headers, timeout, retries) is kept. Vertex and Bedrock are not covered (use
``Anthropic``).

>>> llm = BoundedAnthropic(api_key="sk-ant-doc", timeout=20.0)
>>> llm.max_retries, llm.timeout, llm.max_response_bytes
(2, 20.0, 1048576)
"""

from __future__ import annotations

from typing import Any

from llama_index_car._errors import (
    ConfigurationError,
    LLMDeadlineError,
    ResponseTooLargeError,
    require,
)

require("llama_index.llms.anthropic", extra="anthropic", package="llama-index-llms-anthropic")

import anthropic  # noqa: E402 - after the install hint
import httpx  # noqa: E402
from llama_index.core.bridge.pydantic import Field  # noqa: E402
from llama_index.llms.anthropic import Anthropic  # noqa: E402

from llama_index_car.llms.transport import (  # noqa: E402
    DEFAULT_MAX_RESPONSE_BYTES,
    AsyncBoundedTransport,
    BoundedTransport,
    Bounds,
)

DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
_NOT_HERE = ("region", "project_id", "aws_region", "aws_access_key_id", "aws_secret_access_key")


class AnthropicResponseTooLargeError(ResponseTooLargeError, anthropic.AnthropicError):
    """A Claude response body passed ``max_response_bytes``; not retried by the SDK."""


class AnthropicDeadlineError(LLMDeadlineError, anthropic.AnthropicError):
    """A Claude call passed its :func:`~llama_index_car.llms.deadline.llm_deadline`; not
    retried by the SDK."""


class BoundedAnthropic(Anthropic):
    """``Anthropic`` whose HTTP attempts end on time and whose response bodies are capped.

    Args:
        model: Claude model (default ``claude-sonnet-4-6``).
        api_key / base_url / default_headers: as for ``Anthropic`` (the SDK reads
            ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL`` when ``None``).
        timeout: seconds one HTTP attempt may take in all (default 60; ``None``: bounded by the
            deadline only).
        max_retries: the SDK's retries (default 2: at most 3 requests), with its backoff and
            the server's ``Retry-After``; a wait past the deadline ends the call instead.
        max_response_bytes: cap on one response body (default 1 MiB).
        **kwargs: any other ``Anthropic`` argument (``temperature``, ``max_tokens`` …).

    Raises:
        ConfigurationError: a bound is not a finite positive number, or a Vertex / Bedrock
            argument was given.
    """

    max_response_bytes: int = Field(
        default=DEFAULT_MAX_RESPONSE_BYTES,
        description="Cap on one response body in bytes; a larger body is refused unread.",
        gt=0,
    )

    def __init__(
        self,
        model: str = DEFAULT_ANTHROPIC_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = 60.0,
        max_retries: int = 2,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        default_headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        given = [name for name in _NOT_HERE if kwargs.get(name)]
        if given:
            raise ConfigurationError(
                f"BoundedAnthropic talks to the Anthropic API only; {', '.join(given)} "
                "select Vertex/Bedrock: use llama_index.llms.anthropic.Anthropic for those"
            )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"max_retries={max_retries!r} must be an integer >= 0")
        bounds = Bounds(timeout, max_response_bytes, AnthropicResponseTooLargeError,
                        AnthropicDeadlineError)  # validates timeout and max_response_bytes
        timeout = None if timeout is None else float(timeout)
        super().__init__(
            model=model, api_key=api_key, base_url=base_url, timeout=timeout,
            max_retries=max_retries, default_headers=default_headers, **kwargs,
        )
        self.max_response_bytes = max_response_bytes
        # no redirects (the API key stays with its host), no proxy from the environment
        self._client = self._client.with_options(http_client=httpx.Client(
            transport=BoundedTransport(bounds), follow_redirects=False, trust_env=False
        ))
        self._aclient = self._aclient.with_options(http_client=httpx.AsyncClient(
            transport=AsyncBoundedTransport(bounds), follow_redirects=False, trust_env=False
        ))

    @classmethod
    def class_name(cls) -> str:
        return "BoundedAnthropic_LLM"
