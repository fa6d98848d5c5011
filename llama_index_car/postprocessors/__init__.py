"""Node postprocessors: :class:`SpanReranker` (re-rank a pool by its criterion spans)."""

from llama_index_car.postprocessors.span_rerank import SpanReranker

__all__ = ["SpanReranker"]
