"""The instrumentation event of CAR's hypothesis step (LlamaIndex ``instrumentation``).

``HypothesisCriterionRetriever`` dispatches one :class:`CriterionHypothesisEvent` per query that
reaches the hypothesis step (not for queries the router sends straight to the hybrid; the
offline CAR forms no hypothesis and dispatches none), on the
dispatcher named ``llama_index_car.hypothesizers.events``, which propagates to the root
dispatcher — so any handler registered the LlamaIndex way receives it::

    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    class Log(BaseEventHandler):
        def handle(self, event, **kwargs):
            if isinstance(event, CriterionHypothesisEvent):
                print(event.source, event.latency, event.hypothesis)

    get_dispatcher().add_event_handler(Log())

Fields: ``query``; ``hypothesis`` (text, ``None`` on fallback) and ``criteria``; ``source`` —
``"llm"`` (an LLM hypothesizer), ``"offline"`` (any non-LLM hypothesizer) or ``"fallback"``
(failed or timed out: CAR used the plain hybrid); ``hypothesizer`` (its ``name``); ``cached``; ``latency`` (seconds from the start of the step to its outcome);
``error`` (why it fell back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.base import BaseEvent

from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

HypothesisSource = Literal["llm", "offline", "fallback"]


class CriterionHypothesisEvent(BaseEvent):
    """CAR's hypothesis step for one query: what was hypothesised, by whom, how fast."""

    query: str
    hypothesis: str | None = None
    criteria: list[str] = []
    source: HypothesisSource
    hypothesizer: str = ""
    cached: bool = False
    latency: float
    error: str | None = None

    @classmethod
    def class_name(cls) -> str:
        """``"CriterionHypothesisEvent"``."""
        return "CriterionHypothesisEvent"


def emit_hypothesis_event(
    query: str,
    hypothesizer: BaseCriterionHypothesizer | str,
    hypothesis: CriterionHypothesis | None,
    latency: float,
    error: str | None = None,
) -> None:
    """Dispatch a :class:`CriterionHypothesisEvent` (``hypothesis=None`` → ``"fallback"``).

    ``hypothesizer`` is the hypothesizer object or a name.
    """
    source: HypothesisSource
    if hypothesis is None:
        source = "fallback"
    else:
        source = "llm" if getattr(hypothesizer, "uses_llm", False) else "offline"
    criteria: Sequence[str] = hypothesis.criteria if hypothesis is not None else ()
    event = CriterionHypothesisEvent(
        query=query,
        hypothesis=hypothesis.text if hypothesis is not None else None,
        criteria=list(criteria),
        source=source,
        hypothesizer=hypothesizer if isinstance(hypothesizer, str)
        else str(getattr(hypothesizer, "name", type(hypothesizer).__name__)),
        cached=bool(hypothesis.cached) if hypothesis is not None else False,
        latency=float(latency),
        error=error,
    )
    get_dispatcher(__name__).event(event)
