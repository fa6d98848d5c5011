"""docs/ARCHITECTURE.md states CAR's formulas and defaults; these tests fail when the page and
the code disagree (issue 18 item 6: the offline weights were once documented otherwise than
the code computed them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever

ARCHITECTURE = (Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md").read_text(
    encoding="utf-8"
)


class _Empty(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return []


class _Fixed(BaseCriterionHypothesizer):
    def hypothesize(self, query: str) -> CriterionHypothesis:
        return CriterionHypothesis(text="설치기준", criteria=("설치기준",))


def _documented(pattern: str) -> str:
    m = re.search(pattern, ARCHITECTURE, re.S)
    assert m, f"docs/ARCHITECTURE.md no longer states {pattern!r}"
    return m.group(1)


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0])
def test_documented_offline_fusion_is_the_codes(beta: float) -> None:
    """`score(d) = β·z_dense(d) + (1 − β)·z_lexical(d)` as documented, against the code's
    ``criterion_ranking`` without a span step."""
    from llama_index_car.fusion import criterion_ranking, standardize

    formula = _documented(r"`score\(d\) = (β·z_dense\(d\) \+ \(1 − β\)·z_lexical\(d\))`")
    dense = [("a", 0.9), ("b", 0.7), ("c", 0.2)]
    lexical = [("c", 12.0), ("a", 3.0)]
    z_dense = dict(zip("abc", standardize([0.9, 0.7, 0.2]), strict=True))
    z_lex = dict(zip("ca", standardize([12.0, 3.0]), strict=True))
    expr = formula.replace("β", "beta").replace("−", "-").replace("·", "*")
    expr = expr.replace("z_dense(d)", "zd").replace("z_lexical(d)", "zl")
    want = {d: eval(expr, {}, {"beta": beta, "zd": z_dense[d],  # noqa: S307 - our own doc
                               "zl": z_lex.get(d, min(z_lex.values()))})
            for d in "abc"}
    got = dict(criterion_ranking(dense, lexical, beta))
    assert got == pytest.approx(want)


def test_documented_offline_defaults_are_the_codes() -> None:
    from llama_index_car.retrievers.criterion_aware import DEFAULT_SPAN_Z_WEIGHT

    car = OfflineCriterionRetriever(_Empty(), _Empty())
    bullet = _documented(r"`OfflineCriterionRetriever\((.*?)\)`:")
    assert float(_documented(r"OfflineCriterionRetriever\(dense, lexical, alpha=None → ([0-9.]+)")) == car.alpha
    assert float(_documented(r"pool_top_k=None → (\d+)")) == car.pool_top_k
    assert float(_documented(r"span_weight=None → ([0-9.]+)")) == DEFAULT_SPAN_Z_WEIGHT
    assert f"span_pool={car.span_pool}" in bullet
    shared = _documented(r"Shared \(base\): (.*?)the `car_explain`")
    assert f"`similarity_top_k={car.similarity_top_k}`" in shared
    for gone in ("rrf_k", "feedback_scale", "router", "alpha_overlap", "bm25_lead", "fusion"):
        assert not hasattr(car, gone), gone


def test_documented_hypothesis_defaults_are_the_codes() -> None:
    car = HypothesisCriterionRetriever(_Empty(), _Empty(), _Fixed())
    bullet = _documented(r"- `HypothesisCriterionRetriever\((.*?)\)`:")
    found = re.findall(r"\b(rrf_k|pool_top_k)=(\d+)", bullet)
    assert len(found) == 2
    for name, value in found:
        assert getattr(car, name) == int(value), name
    assert float(_documented(r"hypothesizer, alpha=None → ([0-9.]+)")) == car.alpha
    assert float(_documented(r"hypothesis_timeout=([0-9.]+)")) == car.hypothesis_timeout
    assert _documented(r'HypothesisCriterionRetriever\([^`]*route="(\w+)"') == car.route
