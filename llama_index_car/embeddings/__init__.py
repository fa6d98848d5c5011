"""Dense embeddings: the offline defaults (multilingual e5, USE) and the embedding cache every
index build and evaluation embeds through.

Names are resolved lazily (PEP 562): importing one module of this package loads no model code
of the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MultilingualE5Embedding": "llama_index_car.embeddings.e5",
    "UniversalSentenceEncoderEmbedding": "llama_index_car.embeddings.use",
    "EmbeddingCache": "llama_index_car.embeddings.cache",
    "CachedEmbedding": "llama_index_car.embeddings.cache",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
