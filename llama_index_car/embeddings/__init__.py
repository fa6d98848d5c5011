"""Dense embeddings: the offline defaults (multilingual e5, USE) and the embedding cache every
index build and evaluation embeds through.

Names are resolved lazily (PEP 562): importing one module of this package loads no model code
of the others.
"""

from __future__ import annotations

from llama_index_car._lazy import lazy_exports

_EXPORTS = {
    "MultilingualE5Embedding": "llama_index_car.embeddings.e5",
    "UniversalSentenceEncoderEmbedding": "llama_index_car.embeddings.use",
    "EmbeddingCache": "llama_index_car.embeddings.cache",
    "CachedEmbedding": "llama_index_car.embeddings.cache",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
