"""Retrieval systems by name, built from the package's LlamaIndex components.

Grammar of a system name::

    [reframe:<mode>:]<base>[@<alpha>][+rerank]

* ``base`` — one of :data:`BASES`:

  ==============  ============================================================================
  ``bm25``        ``KiwiBM25Retriever`` (k1=1.5, b=0.75, ε=0.25), the index's BM25 view
  ``dense``       the shipped dense channel: ``CriterionAwareIndex.as_retriever("dense")``
                  over an in-memory ``VectorStoreIndex`` (embeddings from the on-disk cache)
  ``hybrid``      ``WeightedRRFRetriever.from_alpha(dense, bm25, alpha)`` (rrf_k=60)
  ``dense+hyp``   dense over ``query + "\\n" + hypothesis`` (CAR's dense channel alone; LLM)
  ``bm25+exp``    BM25 over ``query + " " + criterion terms`` (CAR's lexical channel alone; LLM)
  ``car``         ``OfflineCriterionRetriever``: its recommended configuration (z-score
                  fusion of dense + BM25, span ranking); with an LLM, ``HypothesisCriterionRetriever``
                  (the paper's CAR) over ``LLMCriterionHypothesizer`` (route="always")
  ``car-hyde``    the LLM fusion with ``HyDEHypothesizer`` (generic hypothesis; needs an LLM)
  ``car-auto``    ``HypothesisCriterionRetriever(route="auto")`` with the LLM hypothesizer: CAR only
                  when the router predicts low lexical overlap, the plain hybrid otherwise
  ==============  ============================================================================

* ``@<alpha>`` — the dense weight of a fusion system (default: the run's ``--alpha``; the
  offline ``car`` keeps its own cross-validated β unless ``car@<alpha>`` names one).
* ``reframe:<mode>:`` — index variant: the nodes go through
  ``CriterialReframer(mode=<mode>)`` (``first``, ``all``, ``most_frequent``) before indexing.
* ``+rerank`` — the reranker (``resolve_reranker("cohere")``) reorders the top
  ``rerank_pool`` (50) candidates; the rest of the ranking follows unchanged, so Recall@50 is
  that of the channel it reorders (paper, Table 9).

The hypothesizer of ``dense+hyp``, ``bm25+exp``, ``car-auto`` and (with ``hypothesizer="llm"``)
``car`` is ``LLMCriterionHypothesizer``; each query is hypothesized once per run
(:class:`MemoHypothesizer`). Offline (``hypothesizer="offline"``) only ``car`` of the CAR family
runs. When the hypothesizer fails
for a query, ``dense+hyp`` and ``bm25+exp`` use the plain query and CAR falls back to the
hybrid (its own contract).

>>> parse_system("reframe:first:car@0.7+rerank")
SystemSpec(name='reframe:first:car@0.7+rerank', base='car', reframe='first', alpha=0.7, rerank=True)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError, HypothesisError
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

BASES: tuple[str, ...] = (
    "bm25", "dense", "hybrid", "dense+hyp", "bm25+exp", "car", "car-hyde", "car-auto",
)
REFRAME_MODES: tuple[str, ...] = ("first", "all", "most_frequent")
_NAME_RE = re.compile(
    r"^(?:reframe:(?P<mode>[a-z_]+):)?(?P<base>[a-z0-9+\-]+?)(?:@(?P<alpha>[0-9.]+))?"
    r"(?P<rerank>\+rerank)?$"
)


@dataclass(frozen=True)
class SystemSpec:
    """A parsed system name (see the module docstring for the grammar)."""

    name: str
    base: str
    reframe: str | None = None
    alpha: float | None = None
    rerank: bool = False

    @property
    def needs_hypothesizer(self) -> bool:
        """True for systems that call a criterion hypothesizer."""
        return self.base in ("dense+hyp", "bm25+exp", "car", "car-hyde", "car-auto")

    @property
    def needs_vectors(self) -> bool:
        """True for systems with a dense channel (all but ``bm25`` and ``bm25+exp``): only
        they need the corpus embedded."""
        return self.base not in ("bm25", "bm25+exp")

    @property
    def is_car(self) -> bool:
        """True for the CAR family (``car``, ``car-hyde``, ``car-auto`` and their variants)."""
        return self.base.startswith("car")


def parse_system(name: str) -> SystemSpec:
    """Parse ``[reframe:<mode>:]<base>[@<alpha>][+rerank]``; raises ``ConfigurationError``."""
    raw = name.strip()
    m = _NAME_RE.match(raw)
    allowed = ", ".join(BASES)
    if not m or m.group("base") not in BASES:
        raise ConfigurationError(
            f"unknown system {name!r}; use [reframe:<mode>:]<base>[@<alpha>][+rerank] with "
            f"base one of: {allowed}"
        )
    mode = m.group("mode")
    if mode is not None and mode not in REFRAME_MODES:
        raise ConfigurationError(
            f"system {name!r}: reframe mode {mode!r} is not one of {', '.join(REFRAME_MODES)}"
        )
    alpha: float | None = None
    if m.group("alpha") is not None:
        try:
            alpha = float(m.group("alpha"))
        except ValueError as exc:
            raise ConfigurationError(f"system {name!r}: alpha is not a number") from exc
        if not 0.0 <= alpha <= 1.0:
            raise ConfigurationError(f"system {name!r}: alpha must be in [0, 1]")
        if m.group("base") not in ("hybrid", "car", "car-hyde", "car-auto"):
            raise ConfigurationError(
                f"system {name!r}: '@alpha' applies to fusion systems only "
                f"(hybrid, car, car-hyde, car-auto)"
            )
    return SystemSpec(
        name=raw, base=m.group("base"), reframe=mode, alpha=alpha, rerank=bool(m.group("rerank"))
    )


# ----------------------------------------------------------------------------- retrievers
class MemoHypothesizer(BaseCriterionHypothesizer):
    """Call the wrapped hypothesizer once per distinct query (failures are remembered too).

    Thread-safe. Repeated answers carry ``cached=True``. Any exception of the wrapped
    hypothesizer is re-raised as ``HypothesisError`` (what CAR and the channels catch).
    """

    def __init__(self, inner: BaseCriterionHypothesizer) -> None:
        self.inner = inner
        self.name = f"memo({getattr(inner, 'name', type(inner).__name__)})"
        self._memo: dict[str, CriterionHypothesis | HypothesisError] = {}
        self._lock = threading.Lock()
        self.calls = 0

    def hypothesize(self, query: str) -> CriterionHypothesis:
        with self._lock:
            hit = self._memo.get(query)
        if hit is None:
            try:
                value: CriterionHypothesis | HypothesisError = self.inner.hypothesize(query)
            except HypothesisError as exc:
                value = exc
            except Exception as exc:  # noqa: BLE001 - any failure is a failed hypothesis
                value = HypothesisError(f"{type(exc).__name__}: {exc}")
            with self._lock:
                self.calls += 1
                self._memo.setdefault(query, value)
                hit = self._memo[query]
            if isinstance(hit, HypothesisError):
                raise hit
            return hit
        if isinstance(hit, HypothesisError):
            raise hit
        return CriterionHypothesis(
            text=hit.text, criteria=hit.criteria, source=hit.source, cached=True, extra=hit.extra
        )

    def peek(self, query: str) -> CriterionHypothesis | None:
        """The remembered hypothesis of ``query`` (``None`` if absent or failed)."""
        with self._lock:
            hit = self._memo.get(query)
        return hit if isinstance(hit, CriterionHypothesis) else None


def hypothesis_dense_text(query: str, h: CriterionHypothesis) -> str:
    """CAR's dense string: ``query + "\\n" + (h.text or the criterion terms)``."""
    text = h.text.strip() or h.expansion_terms()
    return query + "\n" + text


def hypothesis_lexical_text(query: str, h: CriterionHypothesis) -> str:
    """CAR's lexical string: ``query + " " + (criterion terms or h.text)``."""
    terms = h.expansion_terms().strip() or h.text.strip()
    return query + " " + terms


class HypothesisChannelRetriever(BaseRetriever):
    """One CAR channel alone: ``dense+hyp`` (``channel="dense"``) or ``bm25+exp`` (``"lexical"``).

    On ``HypothesisError`` the plain query is used.
    """

    def __init__(
        self, inner: BaseRetriever, hypothesizer: BaseCriterionHypothesizer, channel: str
    ) -> None:
        if channel not in ("dense", "lexical"):
            raise ConfigurationError(f"channel={channel!r}; use 'dense' or 'lexical'")
        self.inner = inner
        self.hypothesizer = hypothesizer
        self.channel = channel
        self.failures = 0
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        try:
            h = self.hypothesizer.hypothesize(query)
        except HypothesisError:
            self.failures += 1
            return list(self.inner.retrieve(QueryBundle(query_str=query)))
        if self.channel == "dense":
            bundle = QueryBundle(
                query_str=query, custom_embedding_strs=[hypothesis_dense_text(query, h)]
            )
        else:
            bundle = QueryBundle(query_str=hypothesis_lexical_text(query, h))
        return list(self.inner.retrieve(bundle))


class RerankRetriever(BaseRetriever):
    """Rerank the top ``pool`` results of ``inner`` with a node postprocessor; keep the tail.

    Scores: the reranker's scores for the pool; below it, the inner order continues with
    scores ``min(pool score) - rank`` so the run keeps this order.
    """

    def __init__(self, inner: BaseRetriever, reranker: Any, pool: int = 50) -> None:
        self.inner = inner
        self.reranker = reranker
        self.pool = pool
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = list(self.inner.retrieve(query_bundle))
        head, tail = hits[: self.pool], hits[self.pool :]
        reranked = list(self.reranker.postprocess_nodes(head, query_bundle=query_bundle))
        reranked.sort(key=lambda n: -float(n.score or 0.0))  # stable: keeps ties in order
        seen = {n.node.node_id for n in reranked}
        reranked += [n for n in head if n.node.node_id not in seen]  # top_n < pool
        floor = min((float(n.score or 0.0) for n in reranked), default=0.0)
        out = [NodeWithScore(node=n.node, score=float(n.score or 0.0)) for n in reranked]
        out += [NodeWithScore(node=n.node, score=floor - i) for i, n in enumerate(tail, 1)]
        return out


# ----------------------------------------------------------------------------- factory
@dataclass
class _IndexVariant:
    nodes: list[BaseNode]
    index: Any  # the CriterionAwareIndex every system of the variant is a view of
    dense: BaseRetriever | None  # None: a BM25-only index (no system needs vectors)
    bm25: BaseRetriever
    spans: Any = None  # the SpanIndex, built on first use by the offline car


class SystemFactory:
    """Build retrievers from system names over one set of nodes, sharing indexes per variant.

    Args:
        nodes: the corpus nodes (text is what BM25 and the embedding see).
        embed_model: a ``BaseEmbedding``, normally ``CachedEmbedding``.
        depth: results per query of every system (and of each fusion channel's pool).
        alpha: default dense weight of fusion systems.
        rrf_k: RRF constant.
        hypothesizer: ``"offline"`` (``car`` is the offline CAR) or ``"llm"``.
        llm: the LLM for ``"llm"`` and ``car-hyde``.
        reranker: a node postprocessor for ``+rerank`` systems.
        rerank_pool: candidates the reranker reorders (default 50).
        show_progress: progress bars while indexing.
        reranker_factory: called once to create ``reranker`` lazily for ``+rerank`` systems.
        hypothesis_cache_dir: on-disk cache folder of the LLM hypothesizers.
        vectors: ``False`` builds BM25-only indexes (nothing is embedded) for an evaluation
            whose systems have no dense channel (:attr:`SystemSpec.needs_vectors`).
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        embed_model: BaseEmbedding,
        *,
        depth: int = 100,
        alpha: float = 0.5,
        rrf_k: int = 60,
        hypothesizer: str = "offline",
        llm: Any = None,
        reranker: Any = None,
        rerank_pool: int = 50,
        show_progress: bool = False,
        reranker_factory: Callable[[], Any] | None = None,
        hypothesis_cache_dir: str | None = None,
        vectors: bool = True,
    ) -> None:
        if hypothesizer not in ("offline", "llm"):
            raise ConfigurationError(f"hypothesizer={hypothesizer!r}; use 'offline' or 'llm'")
        if hypothesizer == "llm" and llm is None:
            raise ConfigurationError("hypothesizer='llm' needs an LLM; pass --llm anthropic")
        self.nodes = list(nodes)
        self.embed_model = embed_model
        self.depth = depth
        self.alpha = alpha
        self.rrf_k = rrf_k
        self.hypothesizer_kind = hypothesizer
        self.llm = llm
        self.reranker = reranker
        self.reranker_factory = reranker_factory
        self.rerank_pool = rerank_pool
        self.show_progress = show_progress
        self.hypothesis_cache_dir = hypothesis_cache_dir
        self.vectors = vectors
        self._variants: dict[str | None, _IndexVariant] = {}
        self._hypothesizers: dict[tuple[str | None, str], MemoHypothesizer] = {}

    # -- indexes -------------------------------------------------------------------------
    def variant(self, reframe: str | None) -> _IndexVariant:
        """The :class:`~llama_index_car.indices.CriterionAwareIndex` over the nodes (reframed
        with ``CriterialReframer`` if asked) and its dense and BM25 views: the evaluation
        scores the channels a user queries."""
        if reframe not in self._variants:
            from llama_index_car.indices import CriterionAwareIndex
            from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

            nodes = self.nodes
            if reframe is not None:
                from llama_index_car.transformers.reframing import CriterialReframer

                nodes = list(CriterialReframer(mode=reframe)(self.nodes))  # type: ignore[arg-type]
            if self.vectors:
                index = CriterionAwareIndex.from_defaults(
                    nodes=nodes, embed_model=self.embed_model, show_progress=self.show_progress
                )
            else:  # BM25 only: nothing embedded
                index = CriterionAwareIndex(nodes, show_progress=self.show_progress)
            self._variants[reframe] = _IndexVariant(
                index.nodes, index,
                index.as_retriever("dense", similarity_top_k=self.depth) if self.vectors
                else None,
                # depth (100) above a small corpus's size is the evaluation's normal case
                KiwiBM25Retriever(index=index, similarity_top_k=self.depth, warn_small=False),
            )
        return self._variants[reframe]

    def hypothesizer(self, reframe: str | None, kind: str) -> MemoHypothesizer:
        """The memoized hypothesizer ``kind`` (``llm``, ``hyde``); hypotheses do not depend on
        the index variant (``reframe`` is accepted for symmetry)."""
        key = (None, kind)
        if key not in self._hypothesizers:
            inner: BaseCriterionHypothesizer
            if kind == "offline":
                raise ConfigurationError(
                    "dense+hyp, bm25+exp and car-auto need an LLM hypothesis; pass --llm "
                    "anthropic (offline, 'car' is the recommended offline CAR)"
                )
            if kind == "llm":
                from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

                inner = LLMCriterionHypothesizer(
                    llm=self.llm, cache_dir=self.hypothesis_cache_dir
                )
            else:
                from llama_index_car.hypothesizers.llm import HyDEHypothesizer

                if self.llm is None:
                    raise ConfigurationError(
                        "car-hyde needs an LLM for the generic HyDE hypothesis; pass "
                        "--llm anthropic (or drop car-hyde)"
                    )
                inner = HyDEHypothesizer(llm=self.llm, cache_dir=self.hypothesis_cache_dir)
            self._hypothesizers[key] = MemoHypothesizer(inner)
        return self._hypothesizers[key]

    def hypothesizers(self) -> list[MemoHypothesizer]:
        """Every hypothesizer built so far."""
        return list(self._hypothesizers.values())

    # -- systems -------------------------------------------------------------------------
    def build(self, spec: SystemSpec | str) -> BaseRetriever:
        """The retriever for ``spec`` (returns ``depth`` results per query)."""
        if isinstance(spec, str):
            spec = parse_system(spec)
        v = self.variant(spec.reframe)
        if spec.needs_vectors and v.dense is None:
            raise ConfigurationError(
                f"system {spec.name!r} has a dense channel; this factory was made without "
                "vectors (vectors=False)"
            )
        dense: Any = v.dense
        alpha = self.alpha if spec.alpha is None else spec.alpha
        base = spec.base
        retriever: BaseRetriever
        if base == "bm25":
            retriever = v.bm25
        elif base == "dense":
            retriever = dense
        elif base == "hybrid":
            retriever = v.index.as_retriever(
                "hybrid", alpha=alpha, rrf_k=self.rrf_k, pool_top_k=self.depth,
                similarity_top_k=self.depth,
            )
        elif base in ("dense+hyp", "bm25+exp"):
            h = self.hypothesizer(spec.reframe, self.hypothesizer_kind)
            inner = dense if base == "dense+hyp" else v.bm25
            retriever = HypothesisChannelRetriever(
                inner, h, "dense" if base == "dense+hyp" else "lexical"
            )
        else:
            kind = "hyde" if base == "car-hyde" else self.hypothesizer_kind
            offline = base == "car" and kind == "offline"  # the recommended offline CAR
            if offline and v.spans is None:
                from llama_index_car.span_index import SpanIndex

                v.spans = SpanIndex.from_nodes(
                    v.nodes, self.embed_model, show_progress=self.show_progress
                )
            common: dict[str, Any] = {
                "pool_top_k": self.depth, "similarity_top_k": self.depth,
                "criterion_spans": 0,  # ranking metrics do not read them (100 hits per query)
            }
            if offline:  # keeps its own β unless the system names one (car@0.4)
                retriever = v.index.as_retriever(
                    "car", alpha=spec.alpha, span_index=v.spans, **common
                )
            else:
                retriever = v.index.as_retriever(
                    "car", hypothesizer=self.hypothesizer(spec.reframe, kind), alpha=alpha,
                    rrf_k=self.rrf_k, route="auto" if base == "car-auto" else "always",
                    speculative_hybrid=False, **common,
                )
        if spec.rerank:
            if self.reranker is None and self.reranker_factory is not None:
                self.reranker = self.reranker_factory()
            if self.reranker is None:
                raise ConfigurationError(
                    f"system {spec.name!r} needs a reranker; pass --rerank cohere "
                    "(COHERE_API_KEY) or drop '+rerank'"
                )
            retriever = RerankRetriever(retriever, self.reranker, pool=self.rerank_pool)
        return retriever
