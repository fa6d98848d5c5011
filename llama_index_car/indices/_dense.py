"""The vectors of an index kept in the folder: one immutable
:class:`~llama_index_car.flat_store.FlatState` per snapshot.

An index whose vectors are not in an outside store keeps them in a
:class:`~llama_index_car.flat_store.FlatVectorStore` (the default: exact cosine top-k, int8
first pass with certified float64 rescoring, memory-mapped once persisted). Its state is
immutable, so the snapshot holds it like the BM25 arrays: an update builds a new state
(:func:`without`, :func:`plus`) and publishes it with the snapshot; a query searches the state
it pinned, whatever the writer does meanwhile. A ``VectorStoreIndex`` over a LlamaIndex
``SimpleVectorStore`` given by the caller is copied once into a state
(:func:`local_state`), since its dicts change in place under a running query.

Scores are ``SimpleVectorStore``'s cosine ``q·v / (‖q‖ ‖v‖)`` (0 when a norm is 0), exact in
float64, ranked by score descending, then node id ascending.

>>> from llama_index.core.schema import TextNode
>>> a, b = TextNode(id_="a", text="x"), TextNode(id_="b", text="y")
>>> st = state_of({"a": [1.0, 0.0], "b": [1.0, 1.0]}, [a, b])
>>> [(i, round(s, 4)) for i, s in st.search([1.0, 0.0], 2)]
[('a', 1.0), ('b', 0.7071)]
>>> without(st, ["a"]).count, st.count
(1, 2)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_car._errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

    from llama_index_car.flat_store import FlatState


def node_meta(node: BaseNode) -> tuple[str | None, dict[str, Any]]:
    """``(ref_doc_id, metadata)`` of ``node`` as the flat store keeps them (JSON values)."""
    return node.ref_doc_id, json.loads(json.dumps(dict(node.metadata), ensure_ascii=False))


def flat_store_of(vector_index: Any) -> Any:
    """The :class:`~llama_index_car.flat_store.FlatVectorStore` of ``vector_index`` (None for
    other stores)."""
    from llama_index_car.flat_store import FlatVectorStore

    store = getattr(vector_index, "vector_store", None)
    return store if isinstance(store, FlatVectorStore) else None


def local_state(vector_index: Any, nodes: Sequence[BaseNode]) -> FlatState | None:
    """The state of an in-memory vector index over ``nodes``: a ``FlatVectorStore``'s own
    snapshot, a ``SimpleVectorStore``'s vectors copied once; None for other stores."""
    flat = flat_store_of(vector_index)
    if flat is not None:
        return flat.snapshot()  # type: ignore[no-any-return]
    from llama_index.core.vector_stores.simple import SimpleVectorStore

    store = getattr(vector_index, "vector_store", None)
    if not isinstance(store, SimpleVectorStore):
        return None
    held = store.data.embedding_dict
    return state_of(held, [n for n in nodes if n.node_id in held])


def state_of(
    vectors: Mapping[str, Sequence[float]], nodes: Sequence[BaseNode], dim: int | None = None,
) -> FlatState:
    """A state with the rows of ``nodes`` (their vectors from ``vectors``)."""
    from llama_index_car.flat_store import FlatState, resolve_scan

    if dim is None:
        dim = next((len(vectors[n.node_id]) for n in nodes), 0)
    if dim <= 0:
        raise ConfigurationError("the index has no vectors to keep (no node, or 0-d vectors)")
    return plus(FlatState.empty(dim, resolve_scan("auto", dim)), vectors, nodes)


def without(state: FlatState, node_ids: Iterable[str]) -> FlatState:
    """A new state without the rows of ``node_ids`` (unknown ids are ignored)."""
    rows = [p for p in map(state._locate, node_ids) if p is not None]
    return state.without(rows) if rows else state


def plus(
    state: FlatState, vectors: Mapping[str, Sequence[float]], nodes: Sequence[BaseNode]
) -> FlatState:
    """A new state with the rows of ``nodes`` appended (a present id is replaced)."""
    if not nodes:
        return state
    try:
        matrix = np.asarray([vectors[n.node_id] for n in nodes], dtype=np.float32)
    except KeyError as exc:
        raise ConfigurationError(f"node {exc.args[0]!r} has no vector") from None
    except ValueError as exc:  # ragged rows
        raise ConfigurationError(f"the vectors differ in dimensions ({exc})") from None
    if matrix.shape[1] != state.dim:
        raise ConfigurationError(
            f"the new vectors are {matrix.shape[1]}-d; the index's are {state.dim}-d")
    if not np.isfinite(matrix).all():
        raise ConfigurationError("an embedding holds NaN or infinity")
    return state.plus(matrix, [n.node_id for n in nodes], [node_meta(n) for n in nodes])


def flat_index(
    vectors: Mapping[str, Sequence[float]], nodes: Sequence[BaseNode], embed_model: Any,
    state: FlatState | None = None,
) -> Any:
    """A ``VectorStoreIndex`` over a :class:`~llama_index_car.flat_store.FlatVectorStore`
    holding ``state`` (default: the rows of ``nodes`` with ``vectors``); its docstore stays
    empty (the index keeps the nodes)."""
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_car.flat_store import FlatVectorStore

    if state is None:
        state = state_of(vectors, nodes)
    store = FlatVectorStore(dim=state.dim, scan=state.scan)
    store.publish(state)
    return VectorStoreIndex(nodes=[], storage_context=StorageContext.from_defaults(
        vector_store=store), embed_model=embed_model)
