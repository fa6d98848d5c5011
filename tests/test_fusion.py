"""weighted_rrf: expected values written as the formula, plus a ranx cross-check."""

from __future__ import annotations

import math

import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.fusion import (
    span_zscore_fusion,
    standardize,
    validate_weights,
    weighted_rrf,
    zscore_fusion,
)


def as_dict(fused: list[tuple[str, float]]) -> dict[str, float]:
    return dict(fused)


def test_two_lists_equal_weights_formula() -> None:
    fused = weighted_rrf([["a", "b", "c"], ["c", "a", "d"]])
    scores = as_dict(fused)
    assert scores["a"] == pytest.approx(1 / (60 + 1) + 1 / (60 + 2))
    assert scores["c"] == pytest.approx(1 / (60 + 3) + 1 / (60 + 1))
    assert scores["b"] == pytest.approx(1 / (60 + 2))
    assert scores["d"] == pytest.approx(1 / (60 + 3))
    assert [d for d, _ in fused] == ["a", "c", "b", "d"]


def test_weights_multiply_each_term() -> None:
    fused = as_dict(weighted_rrf([["a", "b"], ["b", "a"]], weights=[0.7, 0.3], rrf_k=10))
    assert fused["a"] == pytest.approx(0.7 / (10 + 1) + 0.3 / (10 + 2))
    assert fused["b"] == pytest.approx(0.7 / (10 + 2) + 0.3 / (10 + 1))


def test_absent_documents_contribute_zero() -> None:
    fused = as_dict(weighted_rrf([["x"], ["y", "z"]], weights=[2.0, 1.0]))
    assert fused["x"] == pytest.approx(2.0 / 61)
    assert fused["z"] == pytest.approx(1.0 / 62)


def test_ranks_are_one_based() -> None:
    ((doc, score),) = weighted_rrf([["only"]], rrf_k=0)
    assert doc == "only" and score == pytest.approx(1.0)  # 1 / (0 + 1), not 1 / 0


def test_duplicate_counts_once_at_first_rank() -> None:
    fused = as_dict(weighted_rrf([["a", "b", "a", "c"]]))
    assert fused["a"] == pytest.approx(1 / (60 + 1))
    assert fused["b"] == pytest.approx(1 / (60 + 2))
    assert fused["c"] == pytest.approx(1 / (60 + 4))  # rank = position in the returned list


def test_ties_broken_by_id_ascending() -> None:
    fused = weighted_rrf([["b", "a"], ["a", "b"]])
    assert fused[0][1] == fused[1][1]
    assert [d for d, _ in fused] == ["a", "b"]


def test_equal_weights_order_equivalent_to_any_common_scale() -> None:
    lists = [["a", "b", "c", "e"], ["c", "d", "a", "f"]]
    plain = [d for d, _ in weighted_rrf(lists)]
    half = [d for d, _ in weighted_rrf(lists, weights=[0.5, 0.5])]
    assert plain == half
    assert as_dict(weighted_rrf(lists, [0.5, 0.5]))["a"] == pytest.approx(
        0.5 * as_dict(weighted_rrf(lists))["a"]
    )


def test_zero_weight_list_ignored_for_scores() -> None:
    fused = as_dict(weighted_rrf([["a"], ["b"]], weights=[1.0, 0.0]))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == 0.0


def test_empty_inputs() -> None:
    assert weighted_rrf([]) == []
    assert weighted_rrf([[], []]) == []


@pytest.mark.parametrize(
    "weights",
    [[-0.1, 1.0], [0.0, 0.0], [1.0], [1.0, 1.0, 1.0], [math.nan, 1.0], [math.inf, 1.0], ["x", 1]],
)
def test_invalid_weights_raise(weights: list[object]) -> None:
    with pytest.raises(ConfigurationError, match="weight"):
        weighted_rrf([["a"], ["b"]], weights=weights)  # type: ignore[arg-type]


@pytest.mark.parametrize("rrf_k", [-1, "60", True])
def test_invalid_rrf_k_raises(rrf_k: object) -> None:
    with pytest.raises(ConfigurationError, match="rrf_k"):
        weighted_rrf([["a"]], rrf_k=rrf_k)  # type: ignore[arg-type]


def test_string_list_rejected() -> None:
    with pytest.raises(ConfigurationError, match="string"):
        weighted_rrf(["abc"])  # type: ignore[list-item]


def test_validate_weights_default() -> None:
    assert validate_weights(None, 3) == [1.0, 1.0, 1.0]


def test_inputs_untouched() -> None:
    lists = [["a", "b"], ("b", "c")]
    weights = [0.2, 0.8]
    weighted_rrf(lists, weights)
    assert lists == [["a", "b"], ("b", "c")] and weights == [0.2, 0.8]


def test_matches_llama_index_rrf_with_shifted_k() -> None:
    """LlamaIndex's QueryFusionRetriever RRF: 1 / (60 + rank0) with 0-based ranks, i.e. our
    1-based formula with rrf_k = 59 (and equal weights)."""
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    lists = [["d3", "d1", "d7", "d2"], ["d1", "d4", "d3"], ["d5", "d3", "d6", "d1", "d2"]]
    results = {
        (f"q{j}", j): [
            NodeWithScore(node=TextNode(id_=d, text=f"text of {d}"), score=float(10 - i))
            for i, d in enumerate(lst)
        ]
        for j, lst in enumerate(lists)
    }
    fused = QueryFusionRetriever._reciprocal_rerank_fusion(None, results)  # type: ignore[arg-type]
    theirs = {n.node.node_id: n.score for n in fused}
    ours = dict(weighted_rrf(lists, rrf_k=59))
    assert set(theirs) == set(ours)
    for doc, score in ours.items():
        assert score == pytest.approx(theirs[doc], rel=1e-12)


@pytest.mark.slow
def test_matches_ranx_rrf_for_equal_weights() -> None:
    """ranx.fusion.rrf: k=60, 1-based ranks over each run sorted by score; comb_sum of the
    per-run reciprocal ranks. Mapping: our list order == ranx run order by descending score."""
    from ranx import Run, fuse

    lists = [
        ["d3", "d1", "d7", "d2", "d9"],
        ["d1", "d4", "d3", "d8"],
        ["d5", "d3", "d6", "d1", "d2", "d4"],
    ]
    runs = [
        Run({"q1": {doc: float(len(lst) - i) for i, doc in enumerate(lst)}}, name=f"r{j}")
        for j, lst in enumerate(lists)
    ]
    ranx_scores = dict(fuse(runs=runs, method="rrf", norm=None, params={"k": 60}).to_dict()["q1"])
    ours = weighted_rrf(lists)
    assert set(ranx_scores) == {d for d, _ in ours}
    for doc, score in ours:
        assert score == pytest.approx(ranx_scores[doc], rel=1e-9)
    ranx_order = sorted(ranx_scores.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [d for d, _ in ours] == [d for d, _ in ranx_order]


# --------------------------------------------------------------------- z-score fusion
def _scipy_z(values: list[float]) -> list[float]:
    from scipy.stats import zscore

    return [float(x) for x in zscore(values)]


def test_standardize_is_scipys_zscore() -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    for n in (2, 3, 10, 100):
        x = list(rng.gamma(2.0, 3.0, size=n))
        assert standardize(x) == pytest.approx(_scipy_z(x), rel=1e-12, abs=1e-12)
    assert standardize([]) == [] and standardize([4.0]) == [0.0]
    assert standardize([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]  # scipy: nan; here: no signal


def test_zscore_fusion_matches_a_hand_computed_oracle() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    ids = [f"d{i:02d}" for i in range(40)]
    a = {d: float(s) for d, s in zip(rng.choice(ids, 25, replace=False), rng.gamma(2, 4, 25),
                                       strict=True)}
    b = {d: float(s) for d, s in zip(rng.choice(ids, 30, replace=False),
                                       rng.uniform(0.7, 0.9, 30), strict=True)}
    lists = [sorted(a.items(), key=lambda kv: -kv[1]), sorted(b.items(), key=lambda kv: -kv[1])]
    za = dict(zip(a, _scipy_z(list(a.values())), strict=True))
    zb = dict(zip(b, _scipy_z(list(b.values())), strict=True))
    want = {d: 0.3 * za.get(d, min(za.values())) + 0.7 * zb.get(d, min(zb.values()))
            for d in set(a) | set(b)}
    got = zscore_fusion(lists, [0.3, 0.7])
    assert [d for d, _ in got] == sorted(want, key=lambda d: (-want[d], d))
    assert dict(got) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_zscore_fusion_is_invariant_to_affine_rescaling() -> None:
    a = [("x", 12.0), ("y", 3.0), ("z", 1.0)]
    b = [("y", 0.81), ("z", 0.80), ("w", 0.79)]
    scaled = [(d, 100 * s + 7) for d, s in b]  # e.g. a store returning 50·(1 + cos)
    plain, rescaled = zscore_fusion([a, b], [0.4, 0.6]), zscore_fusion([a, scaled], [0.4, 0.6])
    assert [d for d, _ in plain] == [d for d, _ in rescaled]
    assert dict(plain) == pytest.approx(dict(rescaled), rel=1e-9, abs=1e-12)


def test_zscore_fusion_lead_follows_score_shape_not_rank() -> None:
    """The same two rankings, two score shapes: RRF cannot tell them apart, z-fusion can."""
    dense = [("b", 0.83), ("a", 0.82), ("c", 0.81), ("d", 0.80)]
    peaked = [("a", 30.0), ("b", 2.0), ("c", 1.9), ("d", 1.8)]  # one clear lexical match
    even = [("a", 4.0), ("b", 3.0), ("c", 2.0), ("d", 1.0)]
    assert zscore_fusion([dense, peaked], [0.5, 0.5])[0][0] == "a"
    assert zscore_fusion([dense, even], [0.5, 0.5])[0][0] in ("a", "b")
    rrf_peaked = weighted_rrf([[d for d, _ in dense], [d for d, _ in peaked]], [0.5, 0.5])
    rrf_even = weighted_rrf([[d for d, _ in dense], [d for d, _ in even]], [0.5, 0.5])
    assert rrf_peaked == rrf_even


def test_zscore_fusion_duplicates_and_bad_scores() -> None:
    got = dict(zscore_fusion([[("a", 3.0), ("a", 1.0), ("b", 1.0)]], [1.0]))
    assert got == pytest.approx({"a": 1.0, "b": -1.0})  # "a" counts once, at its first entry
    with pytest.raises(ConfigurationError, match="finite"):
        zscore_fusion([[("a", float("nan"))]], [1.0])
    with pytest.raises(ConfigurationError):
        zscore_fusion([[("a", 1.0)]], [1.0, 1.0])
    assert zscore_fusion([[], []], [0.5, 0.5]) == []


def test_span_zscore_fusion_oracle() -> None:
    pool = ["a", "b", "c", "d"]
    base = [1.2, 1.0, 0.9, 0.1]
    spans = [0.80, 0.88, None, 0.86]
    z = dict(zip(["a", "b", "d"], _scipy_z([0.80, 0.88, 0.86]), strict=True))
    floor = min(z.values())
    want = {d: s + 0.8 * z.get(d, floor) for d, s in zip(pool, base, strict=True)}
    got = span_zscore_fusion(pool, base, spans, 0.8)
    assert [d for d, _ in got] == sorted(pool, key=lambda d: (-want[d], pool.index(d)))
    assert dict(got) == pytest.approx(want)
    assert [d for d, _ in span_zscore_fusion(pool, base, spans, 0.0)] == pool
    for bad in (-0.1, float("inf"), True):
        with pytest.raises(ConfigurationError):
            span_zscore_fusion(pool, base, spans, bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        span_zscore_fusion(["a", "a"], [1.0, 1.0], [0.1, 0.2], 0.5)
