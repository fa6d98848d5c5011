"""docs/ARCHITECTURE.md states CAR's formulas and defaults; these tests fail when the page and
the code disagree (issue 18 item 6: the offline weights were documented as
``[α, (1−α)(1−p), (1−α)p]`` while the code used ``[α(1−p), (1−α)(1−p), p]``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.criterion_aware import FeedbackPlan, fusion_weights

ARCHITECTURE = (Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md").read_text(
    encoding="utf-8"
)


class _Empty(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return []


class _Fixed(BaseCriterionHypothesizer):
    def hypothesize(self, query: str) -> CriterionHypothesis:
        return CriterionHypothesis(text="설치기준", criteria=("설치기준",))


def _python(expr: str) -> str:
    """A documented formula as Python: ``α``→``a``, ``−``→``-``, ``·`` and juxtaposed
    factors (``α(1−p)``, ``)(``) → ``*``."""
    expr = expr.replace("α", "a").replace("−", "-").replace("·", "*")
    expr = re.sub(r"([ap)])\(", r"\1*(", expr)
    return expr


def _documented(pattern: str) -> str:
    m = re.search(pattern, ARCHITECTURE, re.S)
    assert m, f"docs/ARCHITECTURE.md no longer states {pattern!r}"
    return m.group(1)


@pytest.mark.parametrize(("a", "p"), [(0.3, 0.2), (0.5, 0.0), (0.0, 0.7), (1.0, 0.35)])
def test_documented_feedback_weights_are_the_codes(a: float, p: float) -> None:
    formula = _documented(r"feedback channel of share `p`\s*`(\[[^`]+\])`")
    documented = eval(_python(formula), {}, {"a": a, "p": p})  # noqa: S307 - our own doc
    plan = FeedbackPlan(share=p, signal=0.0, agreement=0.0, terms=("x",),
                        bundle=QueryBundle("x"))
    _, weights = fusion_weights(a, a, plan)
    assert weights == pytest.approx(documented)


@pytest.mark.parametrize(("alpha", "overlap", "s"), [(0.3, 0.0, 0.4), (0.5, 0.2, 1.0), (0.3, 0.3, 0.7)])
def test_documented_alpha_of_s_is_the_codes(alpha: float, overlap: float, s: float) -> None:
    formula = _documented(r"`α\(s\) = ([^`]+)`")
    documented = eval(  # noqa: S307 - our own doc
        formula.replace("−", "-").replace("·", "*"), {},
        {"alpha": alpha, "alpha_overlap": overlap, "s": s},
    )
    plan = FeedbackPlan(share=0.0, signal=s, agreement=0.0, terms=(), bundle=None)
    _, weights = fusion_weights(alpha, overlap, plan)
    assert weights == pytest.approx([documented, 1.0 - documented])


def test_documented_offline_defaults_are_the_codes() -> None:
    car = OfflineCriterionRetriever(_Empty(), _Empty())
    bullet = _documented(r"`OfflineCriterionRetriever\((.*?)\)`:")
    assert float(_documented(r"OfflineCriterionRetriever\(dense, lexical, alpha=None → ([0-9.]+)")) == car.alpha
    from llama_index_car.postprocessors.span_rerank import DEFAULT_SPAN_WEIGHT
    from llama_index_car.retrievers.criterion_aware import DEFAULT_SPAN_Z_WEIGHT

    assert _documented(r'fusion=None → "(\w+)"') == car.fusion
    assert float(_documented(r"pool_top_k=None → (\d+)")) == car.pool_top_k
    assert float(_documented(r"span_weight=None → ([0-9.]+)")) == DEFAULT_SPAN_Z_WEIGHT
    assert float(_documented(r"`span_fusion`, `span_weight` default ([0-9.]+)")) == (
        DEFAULT_SPAN_WEIGHT)
    assert f"span_pool={car.span_pool}" in bullet
    assert _documented(r"alpha_overlap=None → (\w+)") == "alpha" and car.alpha_overlap == car.alpha
    assert float(_documented(r"bm25_lead=None → ([0-9.]+)")) == car.bm25_lead
    shared = _documented(r"Shared \(base\): (.*?)the weights")
    hypothesis = HypothesisCriterionRetriever(_Empty(), _Empty(), _Fixed())
    for name, value in re.findall(r"`(rrf_k|pool_top_k|similarity_top_k)=(\d+)`", shared):
        assert getattr(hypothesis, name) == int(value), name
        if name != "pool_top_k":  # the offline CAR's own default (100) is stated above
            assert getattr(car, name) == int(value), name
    assert "`feedback_scale=None` (off)" in shared and car.feedback_scale == 0


def test_documented_hypothesis_defaults_are_the_codes() -> None:
    car = HypothesisCriterionRetriever(_Empty(), _Empty(), _Fixed())
    assert float(_documented(r"hypothesizer, alpha=None → ([0-9.]+)")) == car.alpha
    assert float(_documented(r"hypothesis_timeout=([0-9.]+)")) == car.hypothesis_timeout
    assert _documented(r'HypothesisCriterionRetriever\([^`]*route="(\w+)"') == car.route
