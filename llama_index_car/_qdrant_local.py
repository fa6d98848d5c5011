"""Qdrant local mode, safe under threads: every call of one local client holds one lock.

``QdrantClient(path=DIR)`` (Qdrant's embedded local mode) is not thread-safe: queries racing an
insert or a delete on the same client raised ``ValueError`` inside ``qdrant_client``, and a
path can have only one client per process (it is locked on disk). So every
:class:`QdrantVectorStore` call that reaches the shared client runs under that client's
re-entrant lock — the public methods the LlamaIndex store API defines, through this subclass;
no attribute of the client or the store is replaced.
"""

from __future__ import annotations

import threading
from typing import Any

_CLASS: type | None = None


def _locked_class() -> type:
    """The subclass, made once on first use (``qdrant_client`` is imported only then)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from pydantic import PrivateAttr

    class LockedQdrantVectorStore(QdrantVectorStore):
        """``QdrantVectorStore`` whose sync calls are serialised by ``_car_lock``."""

        _car_lock: Any = PrivateAttr(default=None)

        @classmethod
        def class_name(cls) -> str:
            return "QdrantVectorStore"

        def _guard(self) -> Any:
            return self._car_lock

        def add(self, *args: Any, **kwargs: Any) -> Any:
            with self._guard():
                return super().add(*args, **kwargs)

        def delete(self, *args: Any, **kwargs: Any) -> Any:
            with self._guard():
                return super().delete(*args, **kwargs)

        def delete_nodes(self, *args: Any, **kwargs: Any) -> Any:
            with self._guard():
                return super().delete_nodes(*args, **kwargs)

        def get_nodes(self, *args: Any, **kwargs: Any) -> Any:
            with self._guard():
                return super().get_nodes(*args, **kwargs)

        def clear(self) -> None:
            with self._guard():
                super().clear()

        def query(self, *args: Any, **kwargs: Any) -> Any:
            with self._guard():
                return super().query(*args, **kwargs)

    _CLASS = LockedQdrantVectorStore
    return _CLASS


def locked_qdrant_store(client: Any, collection: str, lock: threading.RLock) -> Any:
    """A ``QdrantVectorStore`` over the local ``client`` whose calls hold ``lock``."""
    cls = _locked_class()
    with lock:  # the constructor itself reads the collection through the client
        store = cls(client=client, collection_name=collection)
    store._car_lock = lock
    return store
