"""llama-index-car: criterion-aware retrieval for Korean technical standards, for LlamaIndex.

The public API is re-exported here and resolved lazily (PEP 562), so ``import llama_index_car``
loads neither LlamaIndex nor Kiwi until a name is used.

>>> import llama_index_car
>>> "CriterionAwareRetriever" in llama_index_car.__all__
True
"""

from __future__ import annotations

from llama_index_car._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # tokenization and pure scoring
    "KiwiTokenizer": "llama_index_car.tokenizers.kiwi",
    "BM25Okapi": "llama_index_car.bm25",
    "weighted_rrf": "llama_index_car.fusion",
    # the folder product: a folder of documents -> an index folder
    "BuildOptions": "llama_index_car.folder.options",
    "build_index": "llama_index_car.folder.build",
    "update_index": "llama_index_car.folder.update",
    "load_index": "llama_index_car.folder.load",
    # the index and its retrievers
    "CriterionAwareIndex": "llama_index_car.indices.criterion_aware",
    "KiwiBM25Retriever": "llama_index_car.retrievers.kiwi_bm25",
    "WeightedRRFRetriever": "llama_index_car.retrievers.weighted_rrf",
    "CriterionAwareRetriever": "llama_index_car.retrievers.criterion_aware",
    "OfflineCriterionRetriever": "llama_index_car.retrievers.car_offline",
    "HypothesisCriterionRetriever": "llama_index_car.retrievers.car_hypothesis",
    "LexicalOverlapRouter": "llama_index_car.retrievers.routing",
    # span vectors and span re-ranking
    "SpanIndex": "llama_index_car.span_index",
    "SpanReranker": "llama_index_car.postprocessors.span_rerank",
    "CriterionSpanPostprocessor": "llama_index_car.postprocessors.criterion_spans",
    # answers that cite criterion spans (sentences, table rows, table cells)
    "SpanCitationQueryEngine": "llama_index_car.query_engines.span_citation",
    "Citation": "llama_index_car.query_engines.span_citation",
    # hypothesizers
    "CriterionHypothesis": "llama_index_car.hypothesizers.base",
    "BaseCriterionHypothesizer": "llama_index_car.hypothesizers.base",
    "LLMCriterionHypothesizer": "llama_index_car.hypothesizers.llm",
    "HyDEHypothesizer": "llama_index_car.hypothesizers.llm",
    # bounded LLM client and the per-query deadline
    "BoundedAnthropic": "llama_index_car.llms.anthropic",
    "llm_deadline": "llama_index_car.llms.deadline",
    # transformers and embeddings
    "CriterialReframer": "llama_index_car.transformers.reframing",
    "UniversalSentenceEncoderEmbedding": "llama_index_car.embeddings.use",
    "MultilingualE5Embedding": "llama_index_car.embeddings.e5",
    # errors
    "CarError": "llama_index_car._errors",
    "ConfigurationError": "llama_index_car._errors",
    "MissingDependencyError": "llama_index_car._errors",
    "EmptyIndexError": "llama_index_car._errors",
    "MissingCredentialsError": "llama_index_car._errors",
    "IndexPersistError": "llama_index_car._errors",
    "HypothesisError": "llama_index_car._errors",
    "LLMResponseError": "llama_index_car._errors",
    "ResponseTooLargeError": "llama_index_car._errors",
    "LLMDeadlineError": "llama_index_car._errors",
    "EvaluationDataError": "llama_index_car._errors",
    "QueryError": "llama_index_car._errors",
    "QueryLimits": "llama_index_car.query_guard",
    "TokenizerMismatchWarning": "llama_index_car._errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
