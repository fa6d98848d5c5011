"""What every view of an index shares: the filter check, and one pinned snapshot for all the
channels of a query (:func:`bound_channels`).

A view holds its options (``similarity_top_k``, ``filters``) and its index, never state: each
query pins the index's current snapshot at its start and reads only it. A fused retriever
(CAR, the hybrid) pins **one** snapshot for all its channels and passes the channels bound to
it (``view.at(snapshot)``) down the query. Neither helper imports the index: a view is
recognised by what it has (``index.pinned``, ``at``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_car._errors import ConfigurationError
from llama_index_car._filters import check_filters


def check_view_filters(filters: Any, store: Any = None) -> MetadataFilters | None:
    """``filters`` if ``None`` or valid ``MetadataFilters`` (for ``store`` too: a vector
    store that would read them with another meaning is refused, see
    :func:`~llama_index_car._filters.check_filters`), else
    :class:`ConfigurationError`."""
    if filters is not None and not isinstance(filters, MetadataFilters):
        raise ConfigurationError(
            f"filters must be llama_index MetadataFilters, got {type(filters).__name__}"
        )
    check_filters(filters, store=store)
    return filters


@contextlib.contextmanager
def bound_channels(retrievers: Sequence[BaseRetriever]) -> Iterator[list[BaseRetriever]]:
    """``retrievers`` with every index view bound to one pinned snapshot of its index (one
    pin per index, held for the block); other retrievers as they are."""
    with contextlib.ExitStack() as stack:
        pins: dict[int, Any] = {}
        out: list[BaseRetriever] = []
        for r in retrievers:
            index = getattr(r, "index", None)
            at = getattr(r, "at", None)
            if index is None or at is None or not hasattr(index, "pinned"):
                out.append(r)
                continue
            if id(index) not in pins:
                pins[id(index)] = stack.enter_context(index.pinned())
            out.append(at(pins[id(index)]))
        yield out
