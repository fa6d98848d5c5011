"""System names, systems as views of one index, memoized hypotheses, rerank tail, test families."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import ConfigurationError, HypothesisError
from llama_index_car.evaluation.runner import declare_tests
from llama_index_car.evaluation.systems import (
    HypothesisChannelRetriever,
    MemoHypothesizer,
    RerankRetriever,
    SystemFactory,
    SystemSpec,
    parse_system,
)
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from tests.fakes.embeddings import VecEmbedding


class AxisEmbedding(VecEmbedding):
    """Maps a text to fixed 3-d vectors by keyword (deterministic, no model)."""

    model_name: str = "axis"

    def _vec(self, text: str) -> list[float]:
        return [float(text.count("a")), float(text.count("b")), float(text.count("c")) + 0.01]


def test_parse_system_grammar() -> None:
    assert parse_system("bm25") == SystemSpec("bm25", "bm25")
    s = parse_system("reframe:most_frequent:hybrid@0.3+rerank")
    assert (s.base, s.reframe, s.alpha, s.rerank) == ("hybrid", "most_frequent", 0.3, True)
    assert parse_system("car-auto").is_car and parse_system("dense+hyp").needs_hypothesizer
    assert not parse_system("dense+hyp").is_car
    for bad in ("bm26", "reframe:oracle:dense", "dense@0.5", "hybrid@1.5", "car+rerank+x"):
        with pytest.raises(ConfigurationError):
            parse_system(bad)


def _nodes() -> list[TextNode]:
    return [
        TextNode(id_="d3", text="aa"),
        TextNode(id_="d1", text="aa"),  # identical to d3: tie broken by id
        TextNode(id_="d2", text="bb"),
        TextNode(id_="d4", text="c"),
    ]


def _dense(top_k: int) -> BaseRetriever:
    return SystemFactory(_nodes(), AxisEmbedding(), depth=top_k).build("dense")


def test_dense_system_is_the_index_channel_with_exact_cosine() -> None:
    from llama_index_car.retrievers.dense import IndexDense

    r = _dense(4)
    assert isinstance(r, IndexDense)  # the shipped channel, not an evaluation copy
    hits = r.retrieve("a")
    q = np.array([1.0, 0.0, 0.01])
    vecs = {"d1": [2.0, 0.0, 0.01], "d3": [2.0, 0.0, 0.01], "d2": [0.0, 2.0, 0.01],
            "d4": [0.0, 0.0, 1.01]}
    cos = {k: float(q @ v / np.linalg.norm(q) / np.linalg.norm(v)) for k, v in vecs.items()}
    assert {h.node.node_id for h in hits[:2]} == {"d1", "d3"}  # the tied pair first
    assert [h.node.node_id for h in hits[2:]] == ["d4", "d2"]
    for h in hits:
        assert h.score == pytest.approx(cos[h.node.node_id], rel=1e-5)
    # custom_embedding_strs replace the query text for the embedding
    hits = r.retrieve(QueryBundle(query_str="a", custom_embedding_strs=["b"]))
    assert hits[0].node.node_id == "d2"


def test_every_system_is_a_view_of_the_variants_index() -> None:
    """A node deleted from the variant's index leaves every system at once: none of them
    holds a private copy of the corpus."""
    factory = SystemFactory(_nodes(), AxisEmbedding(), depth=4)
    systems = {name: factory.build(name) for name in ("bm25", "dense", "hybrid", "car")}
    assert all("d2" in {h.node.node_id for h in r.retrieve("bb")} for r in systems.values())
    factory.variant(None).index.delete_nodes(["d2"])
    for name, r in systems.items():
        assert "d2" not in {h.node.node_id for h in r.retrieve("bb")}, name


class Counting(BaseCriterionHypothesizer):
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def hypothesize(self, query: str) -> CriterionHypothesis:
        self.calls += 1
        if self.fail:
            raise HypothesisError("no")
        return CriterionHypothesis(text="bbbb", criteria=("설치기준",), source="t")


def test_memo_hypothesizer_calls_once_and_remembers_failures() -> None:
    inner = Counting()
    memo = MemoHypothesizer(inner)
    assert not memo.hypothesize("q").cached
    assert memo.hypothesize("q").cached and inner.calls == 1
    bad = MemoHypothesizer(Counting(fail=True))
    for _ in range(2):
        with pytest.raises(HypothesisError):
            bad.hypothesize("q")
    assert bad.inner.calls == 1  # type: ignore[attr-defined]


class Recorder(BaseRetriever):
    def __init__(self, inner: BaseRetriever) -> None:
        self.inner = inner
        self.seen: list[QueryBundle] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.seen.append(query_bundle)
        return self.inner.retrieve(query_bundle)


def test_hypothesis_channels_use_car_strings_and_fall_back() -> None:
    r = Recorder(_dense(2))
    dense = HypothesisChannelRetriever(r, Counting(), "dense")
    assert dense.retrieve("a")[0].node.node_id == "d2"  # "a\nbbbb" points at b
    assert r.seen[-1].custom_embedding_strs == ["a\nbbbb"]
    lexical = HypothesisChannelRetriever(r, Counting(), "lexical")
    lexical.retrieve("a")
    assert r.seen[-1].query_str == "a 설치기준"
    failing = HypothesisChannelRetriever(r, Counting(fail=True), "dense")
    failing.retrieve("a")
    assert r.seen[-1].custom_embedding_strs is None and failing.failures == 1


class Reverse:
    def postprocess_nodes(self, nodes, query_bundle=None):  # noqa: ANN001, ANN201
        return [NodeWithScore(node=n.node, score=float(i)) for i, n in enumerate(nodes)]


def test_rerank_reorders_pool_and_keeps_tail() -> None:
    base = _dense(4)
    before = [h.node.node_id for h in base.retrieve("a")]
    out = RerankRetriever(base, Reverse(), pool=2).retrieve("a")
    ids = [h.node.node_id for h in out]
    assert ids == [before[1], before[0], before[2], before[3]]
    scores = [h.score for h in out]
    assert scores[2] < min(scores[:2]) and scores[3] < scores[2]


def test_declared_families() -> None:
    tests = declare_tests(["bm25", "dense", "hybrid", "car"], {"all": 10, "low": 3})
    vs_h = [(t["a"], t["b"]) for t in tests if t["family"] == "vs-hybrid"]
    assert vs_h == [("hybrid", "bm25"), ("hybrid", "dense"), ("car", "hybrid")]
    car = [(t["a"], t["b"], t["stratum"]) for t in tests if t["family"] == "car-vs-baselines"]
    assert len(car) == 6 and ("car", "hybrid", "low") in car
    no_low = declare_tests(["bm25", "car"], {"all": 10, "low": 0})
    assert no_low == [{"family": "car-vs-baselines", "a": "car", "b": "bm25", "stratum": "all"}]
