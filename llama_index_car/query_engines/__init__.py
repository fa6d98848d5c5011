"""Query engines: :class:`SpanCitationQueryEngine`, answers whose ``[n]`` cite criterion
spans (sentences, table rows, table cells) by file, section and table coordinates."""

from llama_index_car.query_engines.span_citation import Citation, SpanCitationQueryEngine

__all__ = ["Citation", "SpanCitationQueryEngine"]
