from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding

__all__ = ["UniversalSentenceEncoderEmbedding"]
