"""The options of a folder build, update and Ray build: one frozen dataclass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llama_index_car.folder.sources import FileFailure

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding


@dataclass(frozen=True)
class BuildOptions:
    """How :func:`~llama_index_car.folder.build_index`,
    :func:`~llama_index_car.folder.update_index` and
    :func:`~llama_index_car.folder.build_index_ray` read, embed and write a folder.

    Attributes:
        embed_model: any LlamaIndex embedding; default: ``embed`` resolved by
            :func:`~llama_index_car.providers.resolve_embed_model` (``"e5"`` = offline
            multilingual-e5-small, ``"use"`` = offline USE, ``"openai"``; ``None`` reads
            ``$LLAMA_CAR_EMBED_MODEL``, else ``"e5"``). An update takes the folder's.
        embed: the provider name (see ``embed_model``); an update refuses another one.
        chunk_size, chunk_overlap: node parser token sizes (``None``: 1000 / 150 for a build,
            the folder's for an update, which refuses other values).
        spans: build the span index the offline ``car`` re-ranks with; ``False`` saves its
            embedding time (about as many characters again as the nodes). An update keeps the
            folder's choice.
        store: a vector-store URI (:func:`~llama_index_car.stores.open_vector_store`) or a
            local kind kept inside the folder; the vectors go there (collection replaced on a
            build). An update needs the URI of a store outside the folder again.
        cache_dir: embedding-cache root (default
            :func:`~llama_index_car.embeddings.cache.default_cache_dir`, shared with
            ``llama-car eval``/``probe``); texts already in it are not embedded again.
        use_cache: ``False`` embeds every node afresh and writes no cache.
        overwrite: a build may write into a non-empty folder (its files are replaced).
        show_progress: tqdm bars (stderr) for reading, parsing, embedding and tokenisation.
        on_error: called with each :class:`~llama_index_car.folder.FileFailure` as it happens.

    >>> BuildOptions(embed="use", spans=False)
    BuildOptions(embed_model=None, embed='use', chunk_size=None, chunk_overlap=None, spans=False, store=None, cache_dir=None, use_cache=True, overwrite=False, show_progress=False, on_error=None)
    """

    embed_model: BaseEmbedding | None = None
    embed: str | None = None
    chunk_size: int | None = None
    chunk_overlap: int | None = None
    spans: bool = True
    store: str | None = None
    cache_dir: str | Path | None = None
    use_cache: bool = True
    overwrite: bool = False
    show_progress: bool = False
    on_error: Callable[[FileFailure], None] | None = None
