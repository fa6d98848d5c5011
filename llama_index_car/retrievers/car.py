"""The CAR factory: the offline or the hypothesis criterion-aware retriever over two channels,
by whether a hypothesizer is given. Not the base class: the common base
(:mod:`~llama_index_car.retrievers.criterion_aware`) knows neither of its subclasses.

>>> car_from_channels(dense, lexical)  # doctest: +SKIP
OfflineCriterionRetriever(...)
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever

from llama_index_car._errors import ConfigurationError
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer
from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

__all__ = ["car_from_channels"]


def car_from_channels(
    dense_retriever: BaseRetriever,
    lexical_retriever: BaseRetriever,
    hypothesizer: BaseCriterionHypothesizer | None = None,
    **options: Any,
) -> CriterionAwareRetriever:
    """``OfflineCriterionRetriever(dense, lexical, **options)`` without a hypothesizer,
    ``HypothesisCriterionRetriever(dense, lexical, hypothesizer, **options)`` with one.

    Raises:
        ConfigurationError: an option of the other retriever (e.g. ``route`` offline), named
            with the retriever it belongs to.
    """
    off, hyp = OfflineCriterionRetriever, HypothesisCriterionRetriever
    if hypothesizer is None:
        _check_options(off, hyp, options)
        return off(dense_retriever, lexical_retriever, **options)
    _check_options(hyp, off, options)
    return hyp(dense_retriever, lexical_retriever, hypothesizer, **options)


def _check_options(target: Any, other: Any, kwargs: dict[str, Any]) -> None:
    """Refuse options ``target`` does not take (its ``OPTIONS``), naming the retriever they
    belong to."""
    wrong = sorted(set(kwargs) - target.OPTIONS)
    if not wrong:
        return
    hint = "check the spelling"
    if set(wrong) <= other.OPTIONS:
        hint = f"{'it applies' if len(wrong) == 1 else 'they apply'} only " + (
            "with a hypothesizer (pass llm= or hypothesizer=)"
            if target.__name__ == "OfflineCriterionRetriever"
            else "offline (without a hypothesizer)")
    raise ConfigurationError(f"{', '.join(wrong)}: not an option of {target.__name__}; {hint}")
