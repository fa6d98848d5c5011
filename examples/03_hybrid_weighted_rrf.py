"""03 — Hybrid retrieval: dense + Kiwi BM25 fused by weighted reciprocal rank fusion.

score(d) = alpha / (60 + rank_dense(d)) + (1 - alpha) / (60 + rank_bm25(d)), ranks 1-based.
Every hit carries ``car_explain`` with each channel's rank, so you can see why it surfaced.

Run: python examples/03_hybrid_weighted_rrf.py
"""

from __future__ import annotations

from llama_index.core import VectorStoreIndex
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

from llama_index_car import KiwiBM25Retriever, MultilingualE5Embedding, WeightedRRFRetriever
from llama_index_car.demo import demo_corpus_files

reader = HWPXReader()
nodes = HWPXNodeParser().get_nodes_from_documents(
    [doc for path in demo_corpus_files() for doc in reader.load_data(path)]
)
index = VectorStoreIndex(nodes, embed_model=MultilingualE5Embedding())
dense = index.as_retriever(similarity_top_k=20)
bm25 = KiwiBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=20)

question = "고속도로에 잘못 들어와 거꾸로 달리는 차를 막는 장치는 어디에 둬야 해?"
for alpha in (0.5, 0.8):  # 0.5 = plain RRF order; 0.8 leans on the dense channel
    hybrid = WeightedRRFRetriever.from_alpha(dense, bm25, alpha=alpha, similarity_top_k=3)
    print(f"alpha={alpha}")
    for hit in hybrid.retrieve(question):
        ch = hit.node.metadata["car_explain"]["channels"]
        print(
            f"  {hit.score:.5f}  dense #{ch['dense']['rank']}  bm25 #{ch['lexical']['rank']}"
            f"  {hit.node.metadata['section_title']}"
        )
