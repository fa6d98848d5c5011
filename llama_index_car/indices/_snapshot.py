"""One immutable state of a :class:`~llama_index_car.indices.CriterionAwareIndex`: what a
query pins at its start and reads to its end (the index's writer publishes a new one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llama_index_car.indices._lexical import Lexical

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

    from llama_index_car.flat_store import FlatState
    from llama_index_car.span_index import SpanIndex


@dataclass(frozen=True, eq=False)
class IndexSnapshot:
    """One immutable state of a :class:`CriterionAwareIndex`: the BM25 state (arrays and
    nodes), the span index and the node ids the dense channel may return. ``readers`` counts
    the queries pinned to it (changed only under the index's condition)."""

    lexical: Lexical
    spans: SpanIndex | None
    #: the node ids (a membership test: the BM25 state's positions, no copy)
    ids: Mapping[str, int]
    #: the vectors of an index that keeps them itself (None: an outside store's)
    dense: FlatState | None = None
    readers: list[int] = field(default_factory=lambda: [0], repr=False)

    @classmethod
    def of(
        cls, lexical: Lexical, spans: SpanIndex | None, dense: FlatState | None = None
    ) -> IndexSnapshot:
        return cls(lexical, spans, lexical.positions, dense)

    @property
    def nodes(self) -> list[BaseNode]:
        """The indexed nodes in index order (a new list)."""
        return list(self.lexical.nodes)
