"""The embeddings of a folder's nodes and spans, through the shared embedding cache
(:class:`~llama_index_car.embeddings.cache.EmbeddingCache`): rebuilding a folder, or indexing
texts an evaluation already embedded, re-embeds nothing. Used by the build and the update."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index_car.folder.options import BuildOptions

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode

    from llama_index_car.span_index import SpanIndex

#: texts per embedding-cache batch while indexing (one progress-bar step, one cache save)
INDEX_CACHE_BATCH = 32


def resolve_embed(embed_model: BaseEmbedding | None, embed: str | None) -> Any:
    """``embed_model``, else the embedding of the provider ``embed``
    (:func:`~llama_index_car.providers.resolve_embed_model`)."""
    if embed_model is not None:
        return embed_model
    from llama_index_car.providers import resolve_embed_model

    return resolve_embed_model(embed)


def _cache(model: Any, options: BuildOptions) -> Any:
    from llama_index_car.embeddings.cache import EmbeddingCache, default_cache_dir

    return EmbeddingCache(options.cache_dir or default_cache_dir(), model,
                          batch_size=INDEX_CACHE_BATCH)


def embed_nodes(model: Any, nodes: Sequence[BaseNode], options: BuildOptions) -> dict[str, list[float]]:
    """``{node_id: vector}`` of the nodes' EMBED text (what ``VectorStoreIndex`` embeds).

    Through the shared cache unless ``options.use_cache`` is off: the texts are embedded
    ``INDEX_CACHE_BATCH`` at a time, with one progress bar ("embedding", in characters, so
    its rate and ETA are honest for long sections).
    """
    from llama_index.core.schema import MetadataMode

    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    emb = model
    if options.use_cache:
        from llama_index_car.embeddings.cache import CachedEmbedding

        cache = _cache(model, options)
        cache.embed(texts, "text", show_progress=options.show_progress, desc="embedding")
        emb = CachedEmbedding(cache)
    vecs = emb.get_text_embedding_batch(
        texts, show_progress=options.show_progress and not options.use_cache)
    return {n.node_id: list(v) for n, v in zip(nodes, vecs, strict=True)}


def span_index(model: Any, nodes: Sequence[BaseNode], options: BuildOptions) -> SpanIndex:
    """The span index of ``nodes`` (:meth:`SpanIndex.from_nodes`), its span texts embedded
    through the shared cache when enabled (one progress bar, "embedding spans")."""
    from llama_index_car.span_index import SpanIndex

    if not options.use_cache:
        return SpanIndex.from_nodes(nodes, model, show_progress=options.show_progress)
    from llama_index_car.span_index import cut_nodes

    cut = cut_nodes(nodes)  # once: cutting every node is a visible share of a warm build
    texts = [s.text for s in cut.spans]
    vectors = _cache(model, options).embed(texts, "text", show_progress=options.show_progress,
                                           desc="embedding spans")
    return SpanIndex.from_cut(cut, vectors)
