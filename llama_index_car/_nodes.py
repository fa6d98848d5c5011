"""Annotating a hit without touching the index's node: :func:`with_metadata`.

Retrievers and postprocessors add what they computed (``car_explain``, ``criterion_spans``) to
**copies** of the nodes they return, under a key excluded from the embedding and LLM text
(an annotation is for the reader and the caller, never part of what is embedded or shown to
an LLM as the node's content).

>>> from llama_index.core.schema import TextNode
>>> node = TextNode(text="배수", id_="n1")
>>> copy = with_metadata(node, "car_explain", {"rank": 1})
>>> copy.metadata, copy.excluded_llm_metadata_keys, node.metadata
({'car_explain': {'rank': 1}}, ['car_explain'], {})
"""

from __future__ import annotations

from typing import Any


def with_metadata(node: Any, key: str, value: Any) -> Any:
    """A copy of ``node`` whose metadata holds ``value`` at ``key``, with ``key`` added (once)
    to ``excluded_embed_metadata_keys`` and ``excluded_llm_metadata_keys``; ``node`` itself
    is not changed."""
    metadata = dict(node.metadata)
    metadata[key] = value
    update: dict[str, Any] = {"metadata": metadata}
    for attr in ("excluded_embed_metadata_keys", "excluded_llm_metadata_keys"):
        keys = list(getattr(node, attr))
        if key not in keys:
            keys.append(key)
        update[attr] = keys
    return node.model_copy(update=update)
