"""Query-time router: predict low query–passage lexical overlap from the top lexical hits.

The paper (§5.8) suggests calling the (expensive) criterion hypothesizer only when low lexical
overlap is *predicted* from query-time signals. The true overlap needs the gold passage, so the
router uses the passages the lexical channel retrieves for the plain query instead:

.. math::

    \\mathrm{signal}(q) = \\operatorname{agg}_{h \\in \\mathrm{top}_n(q)}
        \\frac{|M(q) \\cap M(h)|}{|M(q)|}

with ``M(·)`` the set of Kiwi content morphemes (NNG NNP NR VV VA XR SL SN SH — the
definition of the shared evaluation sets), ``top_n`` the first ``top_n`` lexical hits
(default 3) and ``agg`` = ``max`` (default) or ``mean``. A query whose content morphemes are
largely absent even from its best BM25 hits is unlikely to share them with its gold passage, so
``signal <= threshold`` routes the query to CAR and anything above to the plain hybrid.

The default ``threshold = 0.5`` was chosen on ``../shared/eval/lhcs_construction`` (the set
with all three strata) and checked on the other two sets. Only the hypothesis CAR's
``route="auto"`` reads it (the offline CAR computes no router signal). A query without
content morphemes gets signal 1.0 (nothing for a hypothesis to bridge).

>>> router = LexicalOverlapRouter(threshold=0.5)  # doctest: +SKIP
>>> router.decide("비 오는 날 작업", hits).use_car  # doctest: +SKIP
True
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from llama_index.core.schema import MetadataMode, NodeWithScore

from llama_index_car._errors import ConfigurationError

__all__ = [
    "DEFAULT_ROUTER_THRESHOLD",
    "LexicalOverlapRouter",
    "RouteDecision",
]

DEFAULT_ROUTER_THRESHOLD = 0.5


@runtime_checkable
class ContentMorphemes(Protocol):
    def content_morphemes(self, text: str) -> list[str]: ...


@dataclass(frozen=True)
class RouteDecision:
    """``use_car``: call the hypothesizer; ``signal``: the predicted overlap in [0, 1]."""

    use_car: bool
    signal: float
    threshold: float


class LexicalOverlapRouter:
    """Route to CAR when the query's content morphemes are rare in its top lexical hits.

    Args:
        tokenizer: anything with ``content_morphemes(text)`` (default ``KiwiTokenizer()``).
        threshold: route to CAR when ``signal <= threshold`` (default 0.5; in [0, 1]).
        top_n: number of top lexical hits inspected (default 3).
        aggregate: ``"max"`` (best single hit, default) or ``"mean"`` over the hits.
        cache_size: analysed hit texts kept in an LRU (keyed by node id and text hash).
    """

    def __init__(
        self,
        tokenizer: ContentMorphemes | None = None,
        threshold: float = DEFAULT_ROUTER_THRESHOLD,
        top_n: int = 3,
        aggregate: Literal["max", "mean"] = "max",
        cache_size: int = 20000,
    ) -> None:
        try:
            thr = float(threshold)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"threshold={threshold!r} is not a number in [0, 1]") from exc
        if not 0.0 <= thr <= 1.0:
            raise ConfigurationError(f"threshold={threshold!r} must be in [0, 1] (default 0.5)")
        if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
            raise ConfigurationError(f"top_n={top_n!r} is invalid; use an integer >= 1")
        if aggregate not in ("max", "mean"):
            raise ConfigurationError(f"aggregate={aggregate!r} is invalid; use 'max' or 'mean'")
        if tokenizer is not None and not isinstance(tokenizer, ContentMorphemes):
            raise ConfigurationError(
                f"tokenizer {type(tokenizer).__name__} has no content_morphemes(); "
                "pass a KiwiTokenizer"
            )
        self.threshold = thr
        self.top_n = top_n
        self.aggregate = aggregate
        self.cache_size = cache_size
        self._tokenizer = tokenizer
        self._cache: OrderedDict[tuple[str, int], frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> ContentMorphemes:
        if self._tokenizer is None:
            from llama_index_car.tokenizers.kiwi import KiwiTokenizer

            self._tokenizer = KiwiTokenizer()
        return self._tokenizer

    def _hit_morphemes(self, hit: NodeWithScore) -> frozenset[str]:
        text = hit.node.get_content(metadata_mode=MetadataMode.EMBED)
        key = (hit.node.node_id, hash(text))
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        morphs = frozenset(self.tokenizer.content_morphemes(text))
        with self._lock:
            self._cache[key] = morphs
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return morphs

    def signal(self, query: str, hits: Sequence[NodeWithScore]) -> float:
        """Predicted overlap: share of the query's content morphemes found in the top hits."""
        q = set(self.tokenizer.content_morphemes(query))
        if not q:
            return 1.0
        shares = [len(q & self._hit_morphemes(h)) / len(q) for h in list(hits)[: self.top_n]]
        if not shares:
            return 0.0  # nothing lexical matched at all: the lowest possible overlap
        return max(shares) if self.aggregate == "max" else sum(shares) / len(shares)

    def decide(self, query: str, hits: Sequence[NodeWithScore]) -> RouteDecision:
        """``RouteDecision(use_car=signal <= threshold, signal, threshold)``."""
        s = self.signal(query, hits)
        return RouteDecision(use_car=s <= self.threshold, signal=s, threshold=self.threshold)
