"""The index that owns the state retrievers read: :class:`CriterionAwareIndex`."""

from llama_index_car.indices.criterion_aware import CriterionAwareIndex, IndexSnapshot

__all__ = ["CriterionAwareIndex", "IndexSnapshot"]
