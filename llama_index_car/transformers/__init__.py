"""Node transformers (LlamaIndex ``TransformComponent``s)."""

from llama_index_car.transformers.reframing import CriterialReframer

__all__ = ["CriterialReframer"]
