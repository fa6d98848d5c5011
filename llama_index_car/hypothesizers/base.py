"""The criterion-hypothesizer protocol shared by every hypothesizer.

A hypothesizer guesses, from the query alone, the criterion a Korean standard would use to
answer it (the paper's §5.8): ``hypothesize("온도에 따라 늘었다 줄었다 하는 이음부")`` →
``CriterionHypothesis(text="신축이음장치 설치기준", criteria=("신축이음장치", "설치기준"))``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CriterionHypothesis:
    """A hypothesis about the criterion a query seeks.

    Attributes:
        text: short hypothesis in the formal vocabulary of a standard; appended to the query
            for the dense channel (``query + "\\n" + text``).
        criteria: the criterion terms; appended to the query for the lexical channel.
        source: which hypothesizer produced it (for ``--explain``).
        cached: whether it came from a cache.

    >>> h = CriterionHypothesis(text="배수시설 설치기준", criteria=("설치기준",))
    >>> h.expansion_terms()
    '설치기준'
    """

    text: str
    criteria: tuple[str, ...] = ()
    source: str = ""
    cached: bool = False
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def expansion_terms(self) -> str:
        """The criterion terms joined by spaces (what the lexical channel appends)."""
        return " ".join(self.criteria)

    @property
    def is_empty(self) -> bool:
        """True when there is neither hypothesis text nor a criterion term."""
        return not self.text.strip() and not self.criteria


class BaseCriterionHypothesizer(ABC):
    """Protocol: ``hypothesize(query) -> CriterionHypothesis`` and its async twin.

    Subclasses implement :meth:`hypothesize`; :meth:`ahypothesize` defaults to running it in a
    worker thread so the event loop is never blocked. Subclasses with a native async path
    (an LLM client) override :meth:`ahypothesize`.

    >>> class Fixed(BaseCriterionHypothesizer):
    ...     def hypothesize(self, query: str) -> CriterionHypothesis:
    ...         return CriterionHypothesis(text=query + " 설치기준", criteria=("설치기준",))
    >>> Fixed().hypothesize("측구").text
    '측구 설치기준'
    >>> import asyncio
    >>> asyncio.run(Fixed().ahypothesize("측구")).criteria
    ('설치기준',)
    """

    name: str = "base"

    @abstractmethod
    def hypothesize(self, query: str) -> CriterionHypothesis:
        """Return the criterion hypothesis for ``query``."""

    async def ahypothesize(self, query: str) -> CriterionHypothesis:
        """Async form of :meth:`hypothesize` (a worker thread by default)."""
        return await asyncio.to_thread(self.hypothesize, query)
