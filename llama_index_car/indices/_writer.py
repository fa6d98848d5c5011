"""What one update of a :class:`~llama_index_car.indices.CriterionAwareIndex` publishes.

:func:`plan_update` does everything that can fail before the store is touched (id checks,
embedding, tokenization, span cutting and embedding) and returns the snapshots to publish:
``mid`` (deleted and replaced ids gone, new ids in) and ``final`` (replaced ids back with their
new content). Without a vector store, or with nothing removed, the two are one snapshot and
the nodes keep the order given (a replaced node moves to the end, as a fresh build would have
it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_car._errors import ConfigurationError
from llama_index_car.indices._lexical import Lexical, check_unique
from llama_index_car.indices._snapshot import IndexSnapshot

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_car.flat_store import FlatState
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex
    from llama_index_car.span_index import SpanIndex


@dataclass(frozen=True)
class UpdatePlan:
    """The nodes of one update and the snapshots it publishes."""

    fresh: list[BaseNode]
    again: list[BaseNode]
    removed: list[str]
    vectors: dict[str, list[float]]
    mid: IndexSnapshot
    final: IndexSnapshot

    @property
    def again_ids(self) -> set[str]:
        return {n.node_id for n in self.again}

    def embedded(self, nodes: Sequence[BaseNode]) -> list[BaseNode]:
        """Copies of ``nodes`` carrying their vectors (for the store)."""
        return [n.model_copy(update={"embedding": self.vectors[n.node_id]}) for n in nodes]


def plan_update(
    index: CriterionAwareIndex,
    old: IndexSnapshot,
    delete_ids: list[str],
    nodes: list[BaseNode],
    spans: SpanIndex | None,
) -> UpdatePlan:
    """The plan of deleting ``delete_ids`` and inserting ``nodes`` on ``old``."""
    missing = [i for i in delete_ids if i not in old.ids]
    if missing:
        raise ConfigurationError(f"cannot delete unknown node ids: {missing[:5]}")
    check_unique(nodes)
    again = [n for n in nodes if n.node_id in old.ids]
    fresh = [n for n in nodes if n.node_id not in old.ids]
    again_ids = {n.node_id for n in again}
    removed = sorted(set(delete_ids) | again_ids)
    store = index.vector_index is not None
    vectors = embed(index, nodes) if store and nodes else {}
    added = _added_spans(index, old, nodes, spans)
    plain = [n.model_copy(update={"embedding": None}) for n in nodes]
    toks, hashes = index.tokens.of(plain)
    parts = {n.node_id: (n, t, h) for n, t, h in zip(plain, toks, hashes, strict=True)}
    base = old.lexical.without(removed)
    base_spans = old.spans.without(removed) if old.spans is not None else None

    def plus(lex: Lexical, chosen: Sequence[BaseNode]) -> Lexical:
        picked = [parts[n.node_id] for n in chosen]
        return lex.plus([p[0] for p in picked], [p[1] for p in picked], [p[2] for p in picked])

    def with_spans(chosen: Sequence[BaseNode]) -> SpanIndex | None:
        if base_spans is None:
            return None
        from llama_index_car.span_index import SpanIndex

        ids = {n.node_id for n in chosen}
        part = added.without([d for d in added.node_ids if d not in ids]) if added else None
        return SpanIndex.concat([base_spans, *([part] if part is not None else [])])

    from llama_index_car.indices import _dense

    base_dense = _dense.without(old.dense, removed) if old.dense is not None else None

    def with_dense(dense: FlatState | None, chosen: Sequence[BaseNode]) -> FlatState | None:
        return None if dense is None else _dense.plus(dense, vectors, chosen)

    if not store or not removed or not again:
        final = IndexSnapshot.of(plus(base, nodes), with_spans(nodes),
                                 with_dense(base_dense, nodes))
        mid = final
    else:
        mid_lex = plus(base, fresh)
        mid_dense = with_dense(base_dense, fresh)
        mid = IndexSnapshot.of(mid_lex, with_spans(fresh), mid_dense)
        final = IndexSnapshot.of(plus(mid_lex, again), with_spans(fresh + again),
                                 with_dense(mid_dense, again))
    return UpdatePlan(fresh, again, removed, vectors, mid, final)


def embed(index: CriterionAwareIndex, nodes: Sequence[BaseNode]) -> dict[str, list[float]]:
    """``{node_id: vector}``: a node's own ``embedding`` if set, else the index's model's."""
    return embed_with(index.embed_model, nodes)


def embed_with(
    embed_model: Any, nodes: Sequence[BaseNode], show_progress: bool = False
) -> dict[str, list[float]]:
    """``{node_id: vector}``: a node's own ``embedding`` if set, else ``embed_model``'s of its
    embedding text (what ``VectorStoreIndex`` embeds)."""
    out = {n.node_id: list(n.embedding) for n in nodes if n.embedding is not None}
    todo = [n for n in nodes if n.node_id not in out]
    if todo:
        if embed_model is None:
            raise ConfigurationError("this index has no embed_model to embed new nodes")
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]
        vecs = embed_model.get_text_embedding_batch(texts, show_progress=show_progress)
        for node, vec in zip(todo, vecs, strict=True):
            out[node.node_id] = list(vec)
    return out


def _added_spans(
    index: CriterionAwareIndex, old: IndexSnapshot, nodes: list[BaseNode],
    spans: SpanIndex | None,
) -> Any:
    """The span index of ``nodes`` (given, or cut and embedded here), ``None`` without spans."""
    if old.spans is None or not nodes:
        return None
    if spans is None:
        from llama_index_car.span_index import SpanIndex

        spans = SpanIndex.from_nodes(nodes, index.embed_model)
    if spans.dim and old.spans.dim and spans.n_spans and old.spans.n_spans and (
        spans.dim != old.spans.dim
    ):
        raise ConfigurationError(
            f"span vectors are {old.spans.dim}-d but the embedding gives {spans.dim}-d ones; "
            "rebuild the index"
        )
    return spans
