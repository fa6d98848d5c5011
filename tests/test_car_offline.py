"""The offline CAR is one algorithm: z-score fusion of dense ⊕ BM25, then span re-ranking
(:func:`~llama_index_car.fusion.criterion_ranking`), checked against independent oracles
(scipy ``zscore``, rank_bm25's scores of the same tokens, the formula written out)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import ConfigurationError
from llama_index_car.fusion import criterion_ranking
from llama_index_car.retrievers.car import car_from_channels
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.criterion_aware import (
    DEFAULT_OFFLINE_ALPHA,
    DEFAULT_OFFLINE_POOL,
)
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.weighted_rrf import EXPLAIN_KEY
from tests.fakes.corpus import CRITERION_TEXTS

NODES = [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(CRITERION_TEXTS)]
BY_ID = {n.node_id: n for n in NODES}
DENSE_ORDER = ["n1", "n0", "n4", "n6", "n2", "n3", "n5"]


class FixedDense(BaseRetriever):
    """A dense stand-in returning a fixed ranking with scores ``1 − rank/10``."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.similarity_top_k = 100
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=BY_ID[i], score=1.0 - r / 10) for r, i in enumerate(self.order)]


@pytest.fixture(scope="module")
def bm25() -> KiwiBM25Retriever:
    return KiwiBM25Retriever.from_defaults(nodes=NODES, similarity_top_k=7)


def _z(values: list[float]) -> list[float]:
    from scipy.stats import zscore

    return [float(x) for x in zscore(values)]


def _z_oracle(lists: list[dict[str, float]], weights: list[float]) -> list[tuple[str, float]]:
    """Σ w_i · scipy ``zscore`` of each list's scores (absent: the list's lowest z)."""
    zs = [dict(zip(lst, _z(list(lst.values())), strict=True)) for lst in lists]
    every = {d for z in zs for d in z}
    total = {d: sum(w * z.get(d, min(z.values())) for w, z in zip(weights, zs, strict=True))
             for d in every}
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))


def _bm25_oracle(bm25: KiwiBM25Retriever, query: str) -> dict[str, float]:
    """rank_bm25's scores of the same tokens for every node with a positive score."""
    from rank_bm25 import BM25Okapi

    tok = bm25.tokenizer
    scores = BM25Okapi([tok.tokenize(n.text) for n in NODES]).get_scores(tok.tokenize(query))
    return {f"n{i}": float(x) for i, x in enumerate(scores) if x > 0}


@pytest.mark.parametrize("query", ["비탈 옆 물 빠지는 배수 길 만드는 법", "배수시설 설치기준"])
def test_default_is_the_z_score_fusion(bm25: KiwiBM25Retriever, query: str) -> None:
    """``β·z(dense) + (1 − β)·z(bm25)``, β = 0.3, each channel standardised over its list."""
    car = OfflineCriterionRetriever(FixedDense(DENSE_ORDER), bm25, similarity_top_k=7)
    assert car.alpha == DEFAULT_OFFLINE_ALPHA == 0.3 and car.pool_top_k == DEFAULT_OFFLINE_POOL
    assert car.span_weight == 0.0  # no span index: no span step
    dense = {d: 1.0 - r / 10 for r, d in enumerate(DENSE_ORDER)}
    lexical = _bm25_oracle(bm25, query)
    assert {h.node.node_id: h.score for h in bm25.retrieve(query)} == pytest.approx(lexical)
    want = _z_oracle([dense, lexical], [0.3, 0.7])[:7]
    out = car.retrieve(query)
    assert [h.node.node_id for h in out] == [d for d, _ in want]
    assert [h.score for h in out] == pytest.approx([x for _, x in want], rel=1e-9, abs=1e-12)
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["fusion"] == "z" and info["weights"] == pytest.approx({"dense": 0.3,
                                                                      "lexical": 0.7})
    assert info["routed"] == "car" and info["router_signal"] is None and "feedback" not in info
    assert [h.node.node_id for h in asyncio.run(car.aretrieve(query))] == [d for d, _ in want]


def test_criterion_ranking_is_the_formula() -> None:
    """Fused z-scores, then the first ``span_pool`` re-ranked by ``s + γ·z(span)`` (a node
    without spans at the pool's lowest z), the rest in fused order."""
    dense = [("a", 0.90), ("b", 0.85), ("c", 0.80), ("d", 0.50)]
    lexical = [("c", 9.0), ("e", 4.0), ("a", 3.5)]
    span = {"a": 0.70, "b": 0.95, "c": None, "d": 0.60, "e": 0.80}
    fused = _z_oracle([dict(dense), dict(lexical)], [0.4, 0.6])
    pool = fused[:3]
    scored = [float(x) for d, _ in pool if (x := span[d]) is not None]
    z = dict(zip([d for d, _ in pool if span[d] is not None], _z(scored), strict=True))
    floor = min(z.values())
    head = {d: s + 1.5 * z.get(d, floor) for d, s in pool}
    want = sorted(head, key=lambda d: (-head[d], [p for p, _ in pool].index(d)))
    want += [d for d, _ in fused[3:]]
    calls: list[list[str]] = []

    def spans_of(ids: Sequence[str]) -> list[float | None]:
        calls.append(list(ids))
        return [span[d] for d in ids]

    got = criterion_ranking(dense, lexical, 0.4, span_scores=spans_of, span_weight=1.5,
                            span_pool=3)
    assert [d for d, _ in got] == want
    assert dict(got)[want[0]] == pytest.approx(head[want[0]])
    assert calls == [[d for d, _ in pool]]  # span scores are read for the pool only
    plain = criterion_ranking(dense, lexical, 0.4, span_scores=spans_of, span_weight=0.0)
    assert [d for d, _ in plain] == [d for d, _ in fused] and len(calls) == 1
    with pytest.raises(ConfigurationError, match="span_pool"):
        criterion_ranking(dense, lexical, 0.4, span_pool=0)


def test_switched_off_mechanisms_are_gone(bm25: KiwiBM25Retriever) -> None:
    """The rank-fusion variant, α(s), the BM25 lead and the feedback channel are not options of
    the shipped class (the benchmark measured them; docs/results/span_cv.md)."""
    dense = FixedDense(["n0"])
    for option in ("fusion", "alpha_overlap", "bm25_lead", "feedback_scale", "rrf_k", "router"):
        with pytest.raises(TypeError, match=option):
            OfflineCriterionRetriever(dense, bm25, **{option: 0})  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match=f"{option}: not an option"):
            car_from_channels(dense, bm25, None, **{option: 0})
    for bad in (-0.1, float("inf"), True, "x"):
        with pytest.raises(ConfigurationError, match="span_weight"):
            OfflineCriterionRetriever(dense, bm25, span_weight=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="span_index"):
        OfflineCriterionRetriever(dense, bm25, span_weight=0.8)
