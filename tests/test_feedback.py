"""Offline CAR pieces: feedback terms, top agreement, feedback share (hand-computed values)
and the offline retriever's fusion checked against independent oracles (rank_bm25 idf,
Kiwi morphemes, the fusion formula written out)."""

from __future__ import annotations

import asyncio
import math
from collections import Counter

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import ConfigurationError
from llama_index_car.hypothesizers.feedback import feedback_terms
from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.criterion_aware import (
    DEFAULT_BM25_LEAD,
    DEFAULT_FEEDBACK_SCALE,
    DEFAULT_OFFLINE_ALPHA,
)
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.routing import feedback_share, top_agreement
from llama_index_car.retrievers.weighted_rrf import EXPLAIN_KEY
from tests.fakes.corpus import CRITERION_TEXTS


# ----------------------------------------------------------------------------- pure functions
def test_feedback_terms_hand_computed() -> None:
    docs = [{"우천": 2, "작업": 1, "비": 5}, {"우천": 1, "압접": 2}, {"작업": 4}]
    idf = {"우천": 1.5, "작업": 0.5, "압접": 2.0, "비": 3.0}
    # 우천 1.5*3 = 4.5; 압접 2.0*2 = 4.0; 작업 0.5*5 = 2.5; 비 is a query token
    assert feedback_terms(["비"], docs, idf, 3) == ["우천", "압접", "작업"]
    assert feedback_terms(["비"], docs, idf, 1) == ["우천"]


def test_feedback_terms_skips_nonpositive_idf_and_breaks_ties_by_term() -> None:
    docs = [{"나": 1, "가": 1, "다": 3, "라": 2}]
    idf = {"나": 1.0, "가": 1.0, "다": 0.0, "라": -1.0}
    assert feedback_terms([], docs, idf, 10) == ["가", "나"]
    assert feedback_terms([], [], idf, 10) == []
    with pytest.raises(ConfigurationError, match="n_terms"):
        feedback_terms([], docs, idf, 0)


def test_feedback_terms_leave_out_table_markup() -> None:
    docs = [{"td": 9, "tr": 9, "colspan": 3, "측구": 1}]
    idf = {"td": 2.0, "tr": 2.0, "colspan": 2.0, "측구": 1.0}
    assert feedback_terms([], docs, idf, 10) == ["측구"]


def test_top_agreement_hand_computed() -> None:
    a, b = ["a", "b", "c", "d", "e", "f"], ["e", "x", "a", "y", "z", "b"]
    assert top_agreement(a, b) == pytest.approx(2 / 5)  # top 5: {a, e}
    assert top_agreement(a, b, depth=6) == pytest.approx(3 / 6)
    assert top_agreement(a, b, depth=1) == 0.0
    assert top_agreement([], b) == 0.0
    with pytest.raises(ConfigurationError, match="depth"):
        top_agreement(a, b, depth=0)


@pytest.mark.parametrize(
    ("signal", "agreement", "scale", "expected"),
    [(0.25, 0.2, 1.0, 0.6), (0.0, 0.0, 0.7, 0.7), (1.0, 0.0, 0.7, 0.0), (0.5, 1.0, 0.7, 0.0),
     (0.4, 0.6, 0.7, 0.7 * 0.6 * 0.4), (-1.0, 0.0, 1.0, 1.0)],
)
def test_feedback_share(signal: float, agreement: float, scale: float, expected: float) -> None:
    assert feedback_share(signal, agreement, scale) == pytest.approx(expected)


def test_feedback_share_rejects_non_numbers() -> None:
    with pytest.raises(ConfigurationError, match="signal"):
        feedback_share(float("nan"), 0.0, 0.7)
    with pytest.raises(ConfigurationError, match="scale"):
        feedback_share(0.0, 0.0, True)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the retriever
NODES = [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(CRITERION_TEXTS)]
BY_ID = {n.node_id: n for n in NODES}


class FixedDense(BaseRetriever):
    """A dense stand-in returning a fixed ranking (what the feedback reads)."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.similarity_top_k = 100
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=BY_ID[i], score=1.0 - r / 10) for r, i in enumerate(self.order)]


def _rrf(lists: list[list[str]], weights: list[float], k: int = 60) -> list[str]:
    scores: dict[str, float] = {}
    for lst, w in zip(lists, weights, strict=True):
        for rank, d in enumerate(lst, start=1):
            scores[d] = scores.get(d, 0.0) + w / (k + rank)
    return [d for d, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


@pytest.fixture(scope="module")
def bm25() -> KiwiBM25Retriever:
    return KiwiBM25Retriever.from_defaults(nodes=NODES, similarity_top_k=7)


def test_offline_car_fuses_three_channels_as_specified(bm25: KiwiBM25Retriever) -> None:
    from rank_bm25 import BM25Okapi

    query = "비탈 옆 물 빠지는 배수 길 만드는 법"
    dense_order = ["n1", "n0", "n4", "n6", "n2", "n3", "n5"]
    car = OfflineCriterionRetriever(FixedDense(dense_order), bm25, similarity_top_k=7, bm25_lead=0,
                                  feedback_scale=DEFAULT_FEEDBACK_SCALE, fusion="rrf",
                                  alpha_overlap=0.0)
    assert car.hypothesizer is None and car.feedback_scale == DEFAULT_FEEDBACK_SCALE == 0.7
    out = car.retrieve(query)
    info = out[0].node.metadata[EXPLAIN_KEY]

    tok = bm25.tokenizer
    lexical = [h.node.node_id for h in bm25.retrieve(query)]
    # router signal: share of the query's content morphemes in its best top-3 BM25 hit
    q = set(tok.content_morphemes(query))
    signal = max(len(q & set(tok.content_morphemes(BY_ID[i].text))) / len(q) for i in lexical[:3])
    agreement = len(set(dense_order[:5]) & set(lexical[:5])) / 5
    share = 0.7 * (1 - signal) * (1 - agreement)
    assert info["router_signal"] == pytest.approx(signal)
    assert info["feedback"]["agreement"] == pytest.approx(agreement)
    assert info["feedback"]["share"] == pytest.approx(share)
    assert 0 < share < 1

    # feedback terms: idf (rank_bm25, the same corpus tokens) × tf summed over the top-5 hits
    corpus = [tok.tokenize(n.text) for n in NODES]
    oracle = BM25Okapi(corpus)
    tf: Counter[str] = Counter()
    for i in dense_order[:5]:
        tf.update(corpus[int(i[1:])])
    q_tokens = set(tok.tokenize(query))
    markup = {"table", "thead", "tbody", "tr", "td", "th", "colspan", "rowspan", "br", "caption"}
    weights = {
        t: oracle.idf[t] * c
        for t, c in tf.items()
        if t not in q_tokens and t not in markup and oracle.idf[t] > 0
    }
    expected_terms = [t for t, _ in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
    assert info["feedback"]["terms"] == expected_terms
    assert info["hypothesis"] == " ".join(expected_terms)
    assert info["hypothesis_source"] == "feedback"

    fed = [h.node.node_id for h in bm25.retrieve(query + " " + " ".join(expected_terms))]
    # the dense weight follows the router signal: α = alpha − (alpha − alpha_overlap)·s
    assert car.alpha == DEFAULT_OFFLINE_ALPHA
    alpha = car.alpha - (car.alpha - car.alpha_overlap) * signal
    w = [alpha * (1 - share), (1 - alpha) * (1 - share), share]
    assert info["weights"] == pytest.approx({"dense": w[0], "lexical": w[1], "feedback": w[2]})
    assert [h.node.node_id for h in out] == _rrf([dense_order, lexical, fed], w)[:7]
    top = _rrf([dense_order, lexical, fed], w)[0]
    channels = [dense_order, lexical, fed]
    expected_score = sum(
        wi / (60 + lst.index(top) + 1) for lst, wi in zip(channels, w, strict=True) if top in lst
    )
    assert math.isclose(float(out[0].score or 0), expected_score, rel_tol=1e-9)

    async_out = asyncio.run(car.aretrieve(query))
    assert [h.node.node_id for h in async_out] == [h.node.node_id for h in out]


def _z_oracle(lists: list[dict[str, float]], weights: list[float]) -> list[tuple[str, float]]:
    """Σ w_i · scipy ``zscore`` of each list's scores (absent: the list's lowest z)."""
    from scipy.stats import zscore

    zs = [dict(zip(lst, zscore(list(lst.values())), strict=True)) for lst in lists]
    every = {d for z in zs for d in z}
    total = {d: sum(w * z.get(d, min(z.values())) for w, z in zip(weights, zs, strict=True))
             for d in every}
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))


def _bm25_oracle(bm25: KiwiBM25Retriever, query: str) -> dict[str, float]:
    """rank_bm25's scores of the same tokens for the nodes the retriever returns (it returns
    every node with a positive score)."""
    from rank_bm25 import BM25Okapi

    tok = bm25.tokenizer
    scores = BM25Okapi([tok.tokenize(n.text) for n in NODES]).get_scores(tok.tokenize(query))
    return {f"n{i}": float(x) for i, x in enumerate(scores) if x > 0}


@pytest.mark.parametrize("query", ["비탈 옆 물 빠지는 배수 길 만드는 법", "배수시설 설치기준"])
def test_offline_car_default_is_the_z_score_fusion(bm25: KiwiBM25Retriever, query: str) -> None:
    """The default offline fusion: ``β·z(dense) + (1 − β)·z(bm25)``, β = 0.3, each channel's
    scores standardised over its list (oracle: scipy ``zscore``, rank_bm25 scores)."""
    dense_order = ["n1", "n0", "n4", "n6", "n2", "n3", "n5"]
    car = OfflineCriterionRetriever(FixedDense(dense_order), bm25, similarity_top_k=7)
    assert car.fusion == "z" and car.alpha == DEFAULT_OFFLINE_ALPHA == 0.3
    assert car.alpha_overlap == car.alpha and car.pool_top_k == 100
    dense = {d: 1.0 - r / 10 for r, d in enumerate(dense_order)}  # FixedDense's scores
    lexical = _bm25_oracle(bm25, query)
    assert {h.node.node_id: h.score for h in bm25.retrieve(query)} == pytest.approx(lexical)
    want = _z_oracle([dense, lexical], [0.3, 0.7])[:7]
    out = car.retrieve(query)
    assert [h.node.node_id for h in out] == [d for d, _ in want]
    assert [h.score for h in out] == pytest.approx([x for _, x in want], rel=1e-9, abs=1e-12)
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["fusion"] == "z" and info["weights"] == pytest.approx({"dense": 0.3,
                                                                      "lexical": 0.7})
    assert [h.node.node_id for h in asyncio.run(car.aretrieve(query))] == [d for d, _ in want]


def test_offline_car_z_fusion_with_the_feedback_channel(bm25: KiwiBM25Retriever) -> None:
    """Feedback on under ``"z"``: a third standardised list, weights ``[α(1−p), (1−α)(1−p), p]``."""
    query = "비탈 옆 물 빠지는 배수 길 만드는 법"
    dense_order = ["n1", "n0", "n4", "n6", "n2", "n3", "n5"]
    car = OfflineCriterionRetriever(FixedDense(dense_order), bm25, similarity_top_k=7,
                                    feedback_scale=DEFAULT_FEEDBACK_SCALE)
    out = car.retrieve(query)
    info = out[0].node.metadata[EXPLAIN_KEY]
    share, terms = info["feedback"]["share"], info["feedback"]["terms"]
    assert 0 < share < 1 and terms
    dense = {d: 1.0 - r / 10 for r, d in enumerate(dense_order)}
    lists = [dense, _bm25_oracle(bm25, query), _bm25_oracle(bm25, query + " " + " ".join(terms))]
    w = [0.3 * (1 - share), 0.7 * (1 - share), share]
    assert [h.node.node_id for h in out] == [d for d, _ in _z_oracle(lists, w)[:7]]


def test_offline_car_without_feedback_is_the_hybrid(bm25: KiwiBM25Retriever) -> None:
    query = "배수시설 설치기준"  # every content morpheme is in its best BM25 hit: signal 1
    dense_order = ["n1", "n0", "n4", "n6", "n2"]
    car = OfflineCriterionRetriever(
        FixedDense(dense_order), bm25, alpha=0.3, alpha_overlap=0.3, bm25_lead=0, fusion="rrf"
    )
    out = car.retrieve(query)
    info = out[0].node.metadata[EXPLAIN_KEY]
    assert info["router_signal"] == 1.0 and info["feedback"]["share"] == 0.0
    assert info["hypothesis"] is None and set(info["weights"]) == {"dense", "lexical"}
    lexical = [h.node.node_id for h in bm25.retrieve(query)]
    assert [h.node.node_id for h in out] == _rrf([dense_order, lexical], [0.3, 0.7])[:10]
    off = OfflineCriterionRetriever(FixedDense(dense_order), bm25, feedback_scale=0)
    assert off.feedback_scale == 0.0


def test_offline_configuration_errors(bm25: KiwiBM25Retriever) -> None:
    dense = FixedDense(["n0"])
    with pytest.raises(TypeError, match="route"):  # routing is the hypothesis CAR's
        OfflineCriterionRetriever(dense, bm25, route="auto")  # type: ignore[call-arg]
    for bad in (1.5, -0.1, float("nan"), True, "x"):
        with pytest.raises(ConfigurationError, match="feedback_scale"):
            OfflineCriterionRetriever(dense, bm25, feedback_scale=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="token_counts"):
        OfflineCriterionRetriever(dense, FixedDense(["n0"]), feedback_scale=DEFAULT_FEEDBACK_SCALE)
    OfflineCriterionRetriever(dense, FixedDense(["n0"]))  # no feedback (the default): fine


def test_feedback_knob_on_the_hypothesis_path(bm25: KiwiBM25Retriever) -> None:
    """With a hypothesizer the channel is off by default; switched on, it reads the
    hypothesis channels (dense(q + hypothesis) hits, lexical(q + criteria) hits)."""
    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

    class Fixed(BaseCriterionHypothesizer):
        name = "fixed"

        def hypothesize(self, query: str) -> CriterionHypothesis:
            return CriterionHypothesis(text="조명 조도기준", criteria=("조도기준",), source="stub")

    query = "비탈 옆 물 빠지는 배수 길 만드는 법"
    dense_order = ["n1", "n0", "n4", "n6", "n2", "n3", "n5"]
    off = HypothesisCriterionRetriever(FixedDense(dense_order), bm25, Fixed())
    assert off.feedback_scale == 0.0
    assert "feedback" not in off.retrieve(query)[0].node.metadata[EXPLAIN_KEY]

    on = HypothesisCriterionRetriever(
        FixedDense(dense_order), bm25, Fixed(), feedback_scale=0.7
    )
    info = on.retrieve(query)[0].node.metadata[EXPLAIN_KEY]
    expanded = [h.node.node_id for h in bm25.retrieve(query + " 조도기준")]
    assert info["hypothesis"] == "조명 조도기준" and info["routed"] == "car"
    assert info["feedback"]["agreement"] == pytest.approx(
        len(set(dense_order[:5]) & set(expanded[:5])) / 5
    )
    share = info["feedback"]["share"]
    assert 0 < share < 0.7 and info["feedback"]["terms"]
    assert info["weights"] == pytest.approx(
        {"dense": 0.5 * (1 - share), "lexical": 0.5 * (1 - share), "feedback": share}
    )


FIXED = {"alpha": 0.5, "alpha_overlap": 0.5, "fusion": "rrf"}


def test_bm25_lead_puts_a_clear_lexical_winner_first(bm25: KiwiBM25Retriever) -> None:
    """A fixed α = 0.5 (the fusion mixes both channels). Oracle: the lead rule written out over the fused order (with lead off), and the BM25
    score gap from rank_bm25's scores of the same tokens."""
    from rank_bm25 import BM25Okapi

    query = "배수시설 설치기준"
    tok = bm25.tokenizer
    oracle = BM25Okapi([tok.tokenize(n.text) for n in NODES]).get_scores(tok.tokenize(query))
    top2 = sorted(oracle, reverse=True)[:2]
    gap = (top2[0] - top2[1]) / top2[0]
    assert 0.05 < gap < 0.95
    winner = f"n{int(oracle.argmax())}"
    dense_order = [i for i in ("n6", "n5", "n4", "n3", "n2", "n1", "n0") if i != winner]
    plain = OfflineCriterionRetriever(FixedDense(dense_order), bm25, bm25_lead=0, similarity_top_k=3,
                                    **FIXED)
    base = [h.node.node_id for h in plain.retrieve(query)]
    assert base[0] != winner  # the fusion alone does not put it first here
    led = OfflineCriterionRetriever(
        FixedDense(dense_order), bm25, bm25_lead=gap - 1e-6, similarity_top_k=3, **FIXED
    )
    out = led.retrieve(query)
    full = [h.node.node_id for h in OfflineCriterionRetriever(
        FixedDense(dense_order), bm25, bm25_lead=0, similarity_top_k=20, **FIXED).retrieve(query)]
    assert [h.node.node_id for h in out] == ([winner] + [i for i in full if i != winner])[:3]
    info = out[0].node.metadata[EXPLAIN_KEY]["bm25_lead"]
    assert info["gap"] == pytest.approx(gap) and info["moved_from"] == full.index(winner) + 1
    scores = [h.score for h in out]
    assert scores == sorted(scores, reverse=True)  # still non-increasing
    above = OfflineCriterionRetriever(
        FixedDense(dense_order), bm25, bm25_lead=gap + 1e-6, similarity_top_k=3, **FIXED
    )
    assert [h.node.node_id for h in above.retrieve(query)] == base
    assert OfflineCriterionRetriever(FixedDense(dense_order), bm25).bm25_lead == DEFAULT_BM25_LEAD == 0


def test_bm25_lead_is_a_share() -> None:
    for bad in (-0.1, 1.5, True, float("nan")):
        with pytest.raises(ConfigurationError, match="bm25_lead"):
            OfflineCriterionRetriever(FixedDense(["n0"]), FixedDense(["n0"]), feedback_scale=0,
                                    bm25_lead=bad)  # type: ignore[arg-type]
