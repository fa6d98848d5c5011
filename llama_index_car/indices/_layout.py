"""The names of one index generation's files (no imports: what a caller that only reads the
manifest, e.g. a no-op ``--update``, needs without loading LlamaIndex)."""

from __future__ import annotations

#: 5: one generation of flat files bound by one manifest (BM25 arrays included); index.json
#: records the embedding (its spec) along with the tokenizer
FORMAT_VERSION = 5
KIND = "CriterionAwareIndex"
INDEX_NAME = "index.json"
NODES_NAME = "nodes.json"
BM25_PREFIX = "bm25."
VECTORS_NAME = "embeddings.npy"
SPAN_NAMES = ("spans.json", "span_vectors.npy")
