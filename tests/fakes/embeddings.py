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
