"""Node postprocessors: :class:`SpanReranker` (re-rank a pool by its criterion spans) and
:class:`CriterionSpanPostprocessor` (attach each hit's best criterion spans)."""

from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor
from llama_index_car.postprocessors.span_rerank import SpanReranker

__all__ = ["CriterionSpanPostprocessor", "SpanReranker"]
