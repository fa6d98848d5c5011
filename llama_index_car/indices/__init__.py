"""The index that owns the state retrievers read: :class:`CriterionAwareIndex`.

Names are resolved lazily (PEP 562), so importing a private module of this package (e.g. the
file names of :mod:`llama_index_car.indices._layout`) does not load LlamaIndex.
"""

from __future__ import annotations

from llama_index_car._lazy import lazy_exports

_EXPORTS = {
    "CriterionAwareIndex": "llama_index_car.indices.criterion_aware",
    "IndexSnapshot": "llama_index_car.indices._snapshot",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
