"""A base for deterministic, model-free test embeddings."""

from __future__ import annotations

from llama_index.core.base.embeddings.base import BaseEmbedding


class VecEmbedding(BaseEmbedding):
    """Queries and texts both embed as ``self._vec(text)``; subclasses define ``_vec``.

    >>> class Length(VecEmbedding):
    ...     def _vec(self, text: str) -> list[float]:
    ...         return [float(len(text)), 1.0]
    >>> Length().get_query_embedding("abc")
    [3.0, 1.0]
    """

    def _vec(self, text: str) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must define _vec(text)")

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)


class HashedBigramEmbedding(VecEmbedding):
    """Unit-norm hashed character-bigram counts (64-d): a fast, deterministic stand-in for a
    real model (same vector in every process)."""

    model_name: str = "hashed-bigram-64"

    def _vec(self, text: str) -> list[float]:
        import hashlib
        import math

        v = [0.0] * 64
        for a, b in zip(text, text[1:], strict=False):
            v[hashlib.md5((a + b).encode()).digest()[0] % 64] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]
