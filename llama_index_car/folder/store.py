"""The vector store of a store-backed folder: what the folder records of it, and where it is
opened.

A folder is data: it never chooses where to connect or what to write. It records a store as
kind, collection, whether it is inside the folder, and a fingerprint (:func:`store_record`;
never a host, a password, a token or a path). A store outside the folder is opened only at the URI the
user names (``--store``, ``$LLAMA_CAR_STORE``), checked against that record; a store inside it
at ``DIR/store`` (:func:`store_uri_for`). Standard library only at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError
from llama_index_car._persist import STORE_DIR_NAME

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

#: a local store kept inside the index folder (``--store qdrant``, no path)
STORE_DIR = STORE_DIR_NAME
#: the environment variable naming the store of a store-backed folder (like ``--store``)
STORE_ENV = "LLAMA_CAR_STORE"


def given_store(store: str | None) -> str | None:
    """``store``, else ``$LLAMA_CAR_STORE`` (``None`` when neither is set)."""
    from llama_index_car._env import env

    return store or env("STORE")


def local_store_uri(kind: str, folder: Path) -> str:
    """The URI of a ``kind`` store kept in ``folder/store`` (Milvus Lite: a file in it)."""
    where = folder / STORE_DIR
    return f"milvus://{where / 'milvus.db'}" if kind == "milvus" else f"{kind}://{where}"


def store_record(store: str | None) -> dict[str, Any] | None:
    """What an index folder records of ``store`` (``None``: vectors in the folder).

    ``store`` is a URI (a local path, a PostgreSQL database or a Milvus or Qdrant server), or a bare local kind (``qdrant``, ``chroma``, ``milvus``,
    ``pgserver``) for a store kept inside the index folder. The record holds the kind, the
    collection, whether the store is inside the folder, and a fingerprint
    (:func:`~llama_index_car.stores.store_fingerprint`): never a host, a password or a path.
    """
    if not store:
        return None
    from llama_index_car.stores import (
        DEFAULT_COLLECTION,
        LOCAL_KINDS,
        store_fingerprint,
        store_kind,
    )

    if "://" not in store:
        if store not in LOCAL_KINDS:
            raise ConfigurationError(
                f"--store {store!r}: a store inside the index folder is one of "
                f"{', '.join(LOCAL_KINDS)}; other stores need a URI"
            )
        return {"kind": store, "collection": DEFAULT_COLLECTION, "inside": True,
                "fingerprint": ""}
    return {"kind": store_kind(store), "collection": DEFAULT_COLLECTION, "inside": False,
            "fingerprint": store_fingerprint(store)}


def store_uri_for(
    record: dict[str, Any], folder: Path, given: str | None, *, what: str = "this index"
) -> str:
    """The store URI to open for a folder's store ``record``: the one the user ``given``
    (argument, ``--store`` or ``$LLAMA_CAR_STORE``), checked against the record; else, for a
    store inside the folder, ``folder/store``, which must be a plain folder holding nothing but
    folders and files (:func:`~llama_index_car.stores.check_confined`: no symlink, hard link
    or device), and which is opened only if its client made it
    (:func:`~llama_index_car.stores.check_local_store`). The folder itself never names a host
    or a path.

    Raises:
        ConfigurationError: no URI given for a store outside the folder, the given one is of
            another kind or another database than the recorded one (its fingerprint differs:
            another host, port, database or schema, or a local store for a server's or the
            reverse), or ``folder/store`` is not a plain folder.
    """
    from llama_index_car.stores import store_fingerprint, store_kind

    kind = str(record.get("kind", ""))
    given = given or None
    if given is None or "://" not in given:
        if given is not None and given != kind:
            raise ConfigurationError(f"--store {given!r} is not the {kind} store of {what}")
        if record.get("inside"):
            from llama_index_car.stores import check_confined

            check_confined(folder / STORE_DIR)  # a plain folder, not a symlink planted there
            return local_store_uri(kind, folder)
        raise ConfigurationError(
            f"{what} keeps its vectors in a {kind} store outside the folder; pass its URI "
            f"with --store (or ${STORE_ENV}): the folder does not say where to connect"
        )
    if store_kind(given) != kind:
        raise ConfigurationError(
            f"--store is a {store_kind(given)} store but {what} was built with {kind}"
        )
    if store_fingerprint(given) != str(record.get("fingerprint", "")):
        where = "a local" if not record.get("fingerprint") else "a server"
        raise ConfigurationError(
            f"--store names another {kind} store than the one {what} was built with "
            f"({where} store; host, port, database or schema differ)"
        )
    return given


def open_store_index(
    store: str, model: Any, dims: int | None, *, create: bool, collection: str | None = None,
) -> VectorStoreIndex:
    """The ``VectorStoreIndex`` over ``store``; ``create=True`` (a new build) replaces its
    collection, ``create=False`` (load, update) opens only what exists."""
    from llama_index.core import VectorStoreIndex

    from llama_index_car.stores import DEFAULT_COLLECTION, open_vector_store

    vs = open_vector_store(store, dim=dims, overwrite=create, create=create,
                           collection=collection or DEFAULT_COLLECTION)
    return VectorStoreIndex.from_vector_store(vs, embed_model=model)


def check_store_holds(index: VectorStoreIndex, ids: Sequence[str], uri: str) -> None:
    """A reopened store must serve (some of) the folder's nodes: a wrong path or an empty
    collection is a one-line error, not an empty dense channel."""
    if not ids:
        return
    from llama_index_car.stores import _safe, fetch_embeddings

    sample = sorted(ids)[:3]
    if not fetch_embeddings(index.vector_store, sample):
        raise ConfigurationError(
            f"{_safe(uri)} holds none of this index's nodes (looked up {len(sample)}); "
            "give the store the index was built with"
        )
