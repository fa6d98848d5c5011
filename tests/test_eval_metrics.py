"""Metrics vs hand-computed formulas and vs ranx (independent oracle)."""

from __future__ import annotations

import math
import random

import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.evaluation.metrics import (
    evaluate,
    hit_at_k,
    mrr,
    ndcg_at_k,
    parse_metric,
    per_query,
    recall_at_k,
)

QRELS = {"q1": {"d3": 1}, "q2": {"d1": 1, "d4": 1}, "q3": {"d9": 1}}
RUN = {
    "q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7},  # gold at rank 3
    "q2": {"d4": 0.5, "d2": 0.4, "d1": 0.3},  # golds at ranks 1 and 3
    "q3": {"d1": 1.0},  # gold never retrieved
}


def test_hand_computed_values() -> None:
    ev = evaluate(RUN, QRELS, ["mrr", "mrr@2", "recall@2", "recall@3", "ndcg@3", "hit@1"])
    pq = ev.per_query
    assert pq["mrr"] == {"q1": 1 / 3, "q2": 1.0, "q3": 0.0}
    assert pq["mrr@2"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0}
    assert pq["recall@2"] == {"q1": 0.0, "q2": 0.5, "q3": 0.0}
    assert pq["recall@3"]["q2"] == 1.0
    assert pq["ndcg@3"]["q1"] == pytest.approx((1 / math.log2(4)) / 1.0)
    ideal = 1 / math.log2(2) + 1 / math.log2(3)
    assert pq["ndcg@3"]["q2"] == pytest.approx((1 / math.log2(2) + 1 / math.log2(4)) / ideal)
    assert pq["hit@1"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0}
    assert ev.mean["mrr"] == pytest.approx((1 / 3 + 1.0 + 0.0) / 3)


def test_missing_query_scores_zero_and_extra_query_ignored() -> None:
    run = {"q1": {"d3": 1.0}, "qX": {"d3": 1.0}}
    pq = per_query(run, QRELS, ["mrr", "recall@10"])
    assert set(pq["mrr"]) == {"q1", "q2", "q3"}
    assert pq["mrr"]["q2"] == 0.0 and pq["recall@10"]["q3"] == 0.0


def test_ties_break_by_doc_id_ascending() -> None:
    # d2 and d1 tie: d1 ranks first, so gold d2 is at rank 2
    assert per_query({"q": {"d2": 1.0, "d1": 1.0}}, {"q": {"d2": 1}}, ["mrr"])["mrr"]["q"] == 0.5
    assert per_query({"q": {"d2": 1.0, "d1": 1.0}}, {"q": {"d1": 1}}, ["mrr"])["mrr"]["q"] == 1.0


def test_graded_ndcg_uses_linear_gain() -> None:
    qrels = {"q": {"a": 2, "b": 1}}
    run = {"q": {"b": 2.0, "a": 1.0}}
    dcg = 1 / math.log2(2) + 2 / math.log2(3)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert per_query(run, qrels, ["ndcg@10"])["ndcg@10"]["q"] == pytest.approx(dcg / idcg)


def test_zero_relevance_is_not_relevant_and_query_without_gold_ignored() -> None:
    qrels = {"q": {"a": 0, "b": 1}, "empty": {"a": 0}}
    pq = per_query({"q": {"a": 2.0, "b": 1.0}}, qrels, ["mrr"])
    assert pq["mrr"] == {"q": 0.5}


def test_primitive_functions() -> None:
    assert mrr(["a", "b"], {"b": 1}) == 0.5
    assert mrr(["a", "b"], {"b": 1}, k=1) == 0.0
    assert recall_at_k(["a", "b", "c"], {"c": 1, "z": 1}, 3) == 0.5
    assert hit_at_k(["a"], {"b": 1}, 5) == 0.0
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0


@pytest.mark.parametrize("bad", ["map", "recall", "ndcg@0", "mrr@x"])
def test_parse_metric_rejects(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_metric(bad)


def _random_case(seed: int) -> tuple[dict, dict]:
    rng = random.Random(seed)
    docs = [f"d{i:03d}" for i in range(60)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(40):
        qid = f"q{q:02d}"
        gold = rng.sample(docs, rng.randint(1, 4))
        qrels[qid] = {d: rng.choice([1, 1, 2, 3]) for d in gold}
        if q % 13 == 5:
            continue  # query missing from the run
        retrieved = rng.sample(docs, rng.randint(5, 60))
        # distinct scores, so ranx's (unspecified) tie handling cannot matter
        scores = rng.sample(range(10_000), len(retrieved))
        run[qid] = {d: s / 100.0 for d, s in zip(retrieved, scores, strict=True)}
    return run, qrels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_ranx(seed: int) -> None:
    ranx = pytest.importorskip("ranx")
    run, qrels = _random_case(seed)
    ours = evaluate(run, qrels, ["mrr", "mrr@10", "recall@10", "recall@50", "ndcg@10", "hit@5"])
    names = {
        "mrr": "mrr",
        "mrr@10": "mrr@10",
        "recall@10": "recall@10",
        "recall@50": "recall@50",
        "ndcg@10": "ndcg@10",
        "hit@5": "hit_rate@5",
    }
    theirs = ranx.evaluate(
        ranx.Qrels(qrels), ranx.Run(run), list(names.values()), make_comparable=True
    )
    for ours_name, ranx_name in names.items():
        assert ours.mean[ours_name] == pytest.approx(theirs[ranx_name], abs=1e-12), ours_name
