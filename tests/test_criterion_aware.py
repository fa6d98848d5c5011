"""CriterionAwareRetriever over tiny in-test retrievers and stub hypothesizers."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import ConfigurationError, HypothesisError
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from llama_index_car.retrievers.car import car_from_channels
from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from llama_index_car.retrievers.routing import LexicalOverlapRouter
from llama_index_car.retrievers.weighted_rrf import EXPLAIN_KEY
from tests.fakes.corpus import CRITERION_TEXTS

NODES = {i: TextNode(id_=i, text=f"본문 {i}") for i in "abcdefgh"}
HYP = CriterionHypothesis(text="배수시설 설치기준", criteria=("설치기준", "배수시설"), source="stub")


class Recorder(BaseRetriever):
    """Returns ``plain`` for plain queries and ``expanded`` when the query was expanded."""

    def __init__(self, plain: list[str], expanded: list[str], delay: float = 0.0) -> None:
        self.plain, self.expanded, self.delay = plain, expanded, delay
        self.bundles: list[QueryBundle] = []
        self.lock = threading.Lock()
        self.similarity_top_k = 100
        self.barrier: threading.Barrier | None = None  # plain queries wait here
        self.log: list[str] | None = None  # shared event log ("plain"/"expanded")
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        time.sleep(self.delay)
        expanded = query_bundle.custom_embedding_strs is not None or "설치기준" in (
            query_bundle.query_str
        )
        if self.barrier is not None and not expanded:
            self.barrier.wait(timeout=60)  # BrokenBarrierError unless all arrive together
        with self.lock:
            self.bundles.append(query_bundle)
            if self.log is not None:
                self.log.append("expanded" if expanded else "plain")
        ids = self.expanded if expanded else self.plain
        return [NodeWithScore(node=NODES[i], score=1.0 / (r + 1)) for r, i in enumerate(ids)]


class StubHypothesizer(BaseCriterionHypothesizer):
    name = "stub"

    def __init__(
        self, result: object = HYP, delay: float = 0.0, *, gate: threading.Event | None = None,
        barrier: threading.Barrier | None = None, log: list[str] | None = None,
    ) -> None:
        self.result, self.delay, self.calls = result, delay, 0
        self.gate, self.barrier, self.log = gate, barrier, log

    def hypothesize(self, query: str) -> CriterionHypothesis:
        self.calls += 1
        time.sleep(self.delay)
        if self.barrier is not None:
            self.barrier.wait(timeout=60)
        if self.gate is not None:
            self.gate.wait(timeout=60)
        if self.log is not None:
            self.log.append("hypothesis")
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result  # type: ignore[return-value]


def make(
    hyp: BaseCriterionHypothesizer | None = None, delay: float = 0.0, **kw: object
) -> tuple[HypothesisCriterionRetriever, Recorder, Recorder]:
    dense = Recorder(["a", "b", "c"], ["d", "a", "e"], delay=delay)
    lexical = Recorder(["b", "c", "f"], ["a", "g", "b"], delay=delay)
    car = HypothesisCriterionRetriever(
        dense, lexical, hyp or StubHypothesizer(), **kw  # type: ignore[arg-type]
    )
    assert isinstance(car, CriterionAwareRetriever)
    return car, dense, lexical


def ids(results: list[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in results]


def test_channels_get_hypothesis_expanded_queries() -> None:
    car, dense, lexical = make(speculative_hybrid=False)
    car.retrieve("비 오는 날 물빠짐")
    (d,) = dense.bundles
    (lx,) = lexical.bundles
    assert d.query_str == "비 오는 날 물빠짐"
    assert d.custom_embedding_strs == ["비 오는 날 물빠짐\n배수시설 설치기준"]
    assert d.embedding_strs == ["비 오는 날 물빠짐\n배수시설 설치기준"]
    assert lx.query_str == "비 오는 날 물빠짐 설치기준 배수시설"


def test_speculative_hybrid_runs_plain_channels_too() -> None:
    car, dense, lexical = make(StubHypothesizer(delay=0.2), speculative_hybrid=True)
    car.retrieve("q")
    assert sorted(str(b.custom_embedding_strs) for b in dense.bundles) == [
        "None",
        "['q\\n배수시설 설치기준']",
    ]
    assert sorted(b.query_str for b in lexical.bundles) == ["q", "q 설치기준 배수시설"]


@pytest.mark.parametrize("use_async", [False, True])
async def test_fast_hypothesis_skips_speculative_hybrid(use_async: bool) -> None:
    # a cached hypothesis arrives within speculation_delay: no plain channel call is wasted
    car, dense, lexical = make(StubHypothesizer(), speculative_hybrid=True, speculation_delay=0.5)
    await car.aretrieve("q") if use_async else car.retrieve("q")
    assert [b.custom_embedding_strs for b in dense.bundles] == [["q\n배수시설 설치기준"]]
    assert [b.query_str for b in lexical.bundles] == ["q 설치기준 배수시설"]


def test_fused_by_weighted_rrf_with_alpha() -> None:
    car, _, _ = make(alpha=0.7)
    out = car.retrieve("q")
    scores = {n.node.node_id: n.score for n in out}
    # dense(expanded) = d a e ; lexical(expanded) = a g b
    assert scores["a"] == pytest.approx(0.7 / (60 + 2) + 0.3 / (60 + 1))
    assert scores["d"] == pytest.approx(0.7 / (60 + 1))
    assert scores["g"] == pytest.approx(0.3 / (60 + 2))
    assert ids(out)[:2] == ["a", "d"]


def test_explanation_attached() -> None:
    car, _, _ = make()
    out = car.retrieve("q")
    info = {n.node.node_id: n.node.metadata[EXPLAIN_KEY] for n in out}["a"]
    assert info["hypothesis"] == "배수시설 설치기준"
    assert info["criteria"] == ["설치기준", "배수시설"]
    assert info["routed"] == "car" and info["fallback"] is False
    assert info["channels"] == {"dense": {"rank": 2, "score": 0.5}, "lexical": {"rank": 1, "score": 1.0}}
    assert EXPLAIN_KEY in out[0].node.excluded_llm_metadata_keys


@pytest.mark.parametrize(
    "bad",
    [
        HypothesisError("LLM said no"),
        RuntimeError("HTTP 500"),
        CriterionHypothesis(text="  ", criteria=()),
        "not a hypothesis",
    ],
)
def test_failure_falls_back_to_hybrid(bad: object, caplog: pytest.LogCaptureFixture) -> None:
    car, dense, lexical = make(StubHypothesizer(bad))
    with caplog.at_level(logging.WARNING):
        out = car.retrieve("q")
    # plain hybrid: dense = a b c, lexical = b c f
    assert ids(out) == ["b", "c", "a", "f"]  # c: .5/63 + .5/62 > a: .5/61
    assert out[0].score == pytest.approx(0.5 / 62 + 0.5 / 61)
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["fallback"] is True and info["routed"] == "hybrid" and info["hypothesis"] is None
    assert info["error"]
    assert "returning the hybrid" in caplog.text
    assert all(b.custom_embedding_strs is None for b in dense.bundles)
    assert [b.query_str for b in lexical.bundles] == ["q"]


async def test_failure_falls_back_async(caplog: pytest.LogCaptureFixture) -> None:
    car, _, _ = make(StubHypothesizer(RuntimeError("boom")))
    with caplog.at_level(logging.WARNING):
        out = await car.aretrieve("q")
    assert ids(out) == ["b", "c", "a", "f"]  # c: .5/63 + .5/62 > a: .5/61
    assert out[0].node.metadata[EXPLAIN_KEY]["fallback"] is True
    assert "boom" in caplog.text


@pytest.mark.parametrize("use_async", [False, True])
async def test_strict_raises(use_async: bool) -> None:
    car, _, _ = make(StubHypothesizer(RuntimeError("boom")), strict=True)
    with pytest.raises(HypothesisError, match="boom"):
        if use_async:
            await car.aretrieve("q")
        else:
            car.retrieve("q")


@pytest.mark.parametrize("use_async", [False, True])
async def test_timeout_returns_hybrid_without_waiting_for_the_hypothesis(
    use_async: bool,
) -> None:
    gate = threading.Event()  # the hypothesis cannot finish before the test lets it
    hyp = StubHypothesizer(gate=gate)
    car, _, _ = make(hyp, hypothesis_timeout=0.2)
    try:
        out = await car.aretrieve("q") if use_async else car.retrieve("q")
        assert hyp.calls == 1 and not gate.is_set()  # returned with the hypothesis pending
    finally:
        gate.set()
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["fallback"] is True and "timed out" in info["error"]


async def test_timeout_strict_raises() -> None:
    car, _, _ = make(StubHypothesizer(delay=1.0), hypothesis_timeout=0.1, strict=True)
    with pytest.raises(HypothesisError, match="timed out"):
        await car.aretrieve("q")


@pytest.mark.parametrize("use_async", [False, True])
async def test_hypothesis_runs_concurrently_with_hybrid(use_async: bool) -> None:
    """The speculative hybrid's two plain channels and the hypothesis are in flight at once:
    a barrier of three that a sequential CAR could never pass."""
    barrier = threading.Barrier(3)
    car, dense, lexical = make(StubHypothesizer(HypothesisError("x"), barrier=barrier),
                               speculative_hybrid=True)
    dense.barrier = lexical.barrier = barrier
    out = await car.aretrieve("q") if use_async else car.retrieve("q")
    assert out[0].node.metadata[EXPLAIN_KEY]["fallback"] is True
    assert not barrier.broken and len(dense.bundles) == len(lexical.bundles) == 1


def test_success_path_runs_plain_channels_during_and_expanded_after_the_hypothesis() -> None:
    barrier, log = threading.Barrier(3), []
    car, dense, lexical = make(StubHypothesizer(barrier=barrier, log=log),
                               speculative_hybrid=True)
    dense.barrier = lexical.barrier = barrier
    dense.log = lexical.log = log
    car.retrieve("q")
    assert not barrier.broken
    assert sorted(log) == ["expanded", "expanded", "hypothesis", "plain", "plain"]
    first_expanded = log.index("expanded")
    assert log.index("hypothesis") < first_expanded  # expanded queries need the hypothesis


class SpaceMorphemes:
    def content_morphemes(self, text: str) -> list[str]:
        return text.split()


@pytest.mark.parametrize("use_async", [False, True])
async def test_route_auto_skips_hypothesizer_for_high_overlap(use_async: bool) -> None:
    hyp = StubHypothesizer()
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), threshold=0.5, top_n=1)
    car, dense, lexical = make(hyp, route="auto", router=router)
    # top lexical hit for the plain query is node "b" with text "본문 b": query shares both
    out = await car.aretrieve("본문 b") if use_async else car.retrieve("본문 b")
    assert hyp.calls == 0
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["routed"] == "hybrid" and info["fallback"] is False
    assert info["router_signal"] == pytest.approx(1.0)
    assert len(lexical.bundles) == 1  # the router reuses the lexical hits for the hybrid


@pytest.mark.parametrize("use_async", [False, True])
async def test_route_auto_calls_hypothesizer_for_low_overlap(use_async: bool) -> None:
    hyp = StubHypothesizer()
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), threshold=0.5, top_n=1)
    car, _, _ = make(hyp, route="auto", router=router)
    out = await car.aretrieve("물빠짐 기울기 x") if use_async else car.retrieve("물빠짐 기울기 x")
    assert hyp.calls == 1
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["routed"] == "car" and info["router_signal"] == pytest.approx(0.0)
    assert info["hypothesis"] == "배수시설 설치기준"


def test_route_auto_fallback_uses_router_hits() -> None:
    router = LexicalOverlapRouter(tokenizer=SpaceMorphemes(), threshold=0.5, top_n=1)
    car, _, lexical = make(StubHypothesizer(RuntimeError("x")), route="auto", router=router)
    out = car.retrieve("물빠짐 x")
    assert ids(out) == ["b", "c", "a", "f"]  # c: .5/63 + .5/62 > a: .5/61
    assert [b.query_str for b in lexical.bundles] == ["물빠짐 x"]


def test_inputs_untouched() -> None:
    before = {k: n.model_dump() for k, n in NODES.items()}
    car, dense, _ = make(pool_top_k=2, similarity_top_k=3)
    out = car.retrieve("q")
    assert len(out) == 3
    assert {k: n.model_dump() for k, n in NODES.items()} == before
    assert dense.similarity_top_k == 100


def test_pool_top_k_per_channel() -> None:
    car, _, _ = make(pool_top_k=1, similarity_top_k=10)
    assert sorted(ids(car.retrieve("q"))) == ["a", "d"]  # dense top-1 d, lexical top-1 a


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 1.2}, "alpha"),
        ({"alpha": "x"}, "alpha"),
        ({"rrf_k": -1}, "rrf_k"),
        ({"pool_top_k": 0}, "pool_top_k"),
        ({"similarity_top_k": 0}, "similarity_top_k"),
        ({"route": "sometimes"}, "route"),
        ({"strict": "yes"}, "strict"),
        ({"hypothesis_timeout": 0}, "hypothesis_timeout"),
        ({"hypothesis_timeout": "soon"}, "hypothesis_timeout"),
        ({"router": object()}, "router"),
        ({"speculative_hybrid": "maybe"}, "speculative_hybrid"),
        ({"speculation_delay": -1}, "speculation_delay"),
    ],
)
def test_configuration_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make(**kwargs)  # type: ignore[arg-type]


def test_rejects_bad_components() -> None:
    r = Recorder(["a"], ["a"])
    with pytest.raises(ConfigurationError, match="BaseRetriever"):
        HypothesisCriterionRetriever("dense", r, StubHypothesizer())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="BaseCriterionHypothesizer"):
        HypothesisCriterionRetriever(r, r, object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="OfflineCriterionRetriever"):
        HypothesisCriterionRetriever(r, r, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="span_index"):  # span ranking needs spans
        OfflineCriterionRetriever(r, r, span_weight=0.5)
    with pytest.raises(ConfigurationError, match="nodes"):
        CriterionAwareRetriever.from_defaults()
    with pytest.raises(ConfigurationError, match="from_defaults"):  # the base: pick one
        CriterionAwareRetriever(r, r)  # type: ignore[call-arg]


def test_options_of_one_mode_do_not_exist_in_the_other() -> None:
    """Invalid couplings are impossible: each retriever has only its own options, and the
    factory names the retriever an option belongs to."""
    r = Recorder(["a"], ["a"])
    for option in ("route", "strict", "hypothesis_timeout", "speculative_hybrid", "rrf_k",
                   "router"):
        with pytest.raises(TypeError):
            OfflineCriterionRetriever(r, r, **{option: None})  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="only with a hypothesizer"):
            car_from_channels(r, r, **{option: None})
    for option in ("span_weight", "span_pool"):
        with pytest.raises(TypeError):
            HypothesisCriterionRetriever(r, r, StubHypothesizer(), **{option: 0})  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="only offline"):
            car_from_channels(r, r, StubHypothesizer(), **{option: 0})
    car = car_from_channels(r, r, StubHypothesizer())
    assert type(car) is HypothesisCriterionRetriever
    assert type(car_from_channels(r, r)) is OfflineCriterionRetriever
    # the declared options are exactly each constructor's keyword parameters
    import inspect

    for cls in (OfflineCriterionRetriever, HypothesisCriterionRetriever):
        params = set(inspect.signature(cls).parameters)
        assert cls.OPTIONS == params - {"dense_retriever", "lexical_retriever", "hypothesizer"}


def test_async_does_not_block_event_loop() -> None:
    async def main() -> float:
        car, _, _ = make(StubHypothesizer(delay=0.3), delay=0.2)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        await car.aretrieve("q")
        t.cancel()
        return ticks

    assert asyncio.run(main()) >= 10


# ----------------------------------------------------------------------------- from_defaults
CORPUS = CRITERION_TEXTS[:6]


def corpus_nodes() -> list[TextNode]:
    return [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(CORPUS)]


def test_from_defaults_offline_builds_everything() -> None:
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever

    from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever

    nodes = corpus_nodes()
    before = [n.model_dump() for n in nodes]
    car = CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=MockEmbedding(embed_dim=8), similarity_top_k=3, pool_top_k=5
    )
    assert isinstance(car.dense_retriever, VectorIndexRetriever)
    assert isinstance(car.lexical_retriever, KiwiBM25Retriever)
    assert car.hypothesizer is None
    assert isinstance(car, OfflineCriterionRetriever)  # no hypothesis, no speculative hybrid
    out = car.retrieve("포장 균열 보수")
    assert 0 < len(out) <= 3
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["routed"] == "car" and info["fallback"] is False
    assert info["fusion"] == "z" and "feedback" not in info and info["router_signal"] is None
    assert sum(info["weights"].values()) == pytest.approx(1.0)
    assert [n.model_dump() for n in nodes] == before


def test_from_defaults_with_index_and_llm() -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import CompletionResponse, MockLLM

    from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

    class Canned(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kw: object) -> CompletionResponse:
            return CompletionResponse(text="가설: 포장 설계기준\n기준어: 설계기준, 포장")

    index = VectorStoreIndex(nodes=corpus_nodes(), embed_model=MockEmbedding(embed_dim=8))
    car = CriterionAwareRetriever.from_defaults(index=index, llm=Canned(max_tokens=None), alpha=0.3)
    assert isinstance(car.hypothesizer, LLMCriterionHypothesizer)
    assert isinstance(car, HypothesisCriterionRetriever)
    assert car.speculative_hybrid is True and car.weights == [0.3, 0.7]
    out = car.retrieve("길이 갈라진 곳 손보기")
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["hypothesis"] == "포장 설계기준" and info["criteria"] == ["설계기준", "포장"]
    assert out[0].node.node_id in {"n2", "n3"}  # the lexical channel finds 설계기준/포장
