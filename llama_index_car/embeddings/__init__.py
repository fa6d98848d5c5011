from llama_index_car.embeddings.e5 import MultilingualE5Embedding
from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding

__all__ = ["MultilingualE5Embedding", "UniversalSentenceEncoderEmbedding"]
