"""weighted_rrf: expected values written as the formula, plus a ranx cross-check."""

from __future__ import annotations

import math

import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.fusion import validate_weights, weighted_rrf


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
