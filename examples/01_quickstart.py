"""01 — Quickstart: HWPX reader → nodes → vector index → CAR query engine (offline, no key).

The bundled demo corpus is read with ``HWPXReader``, split by ``HWPXNodeParser`` into section
nodes, embedded with the offline multilingual-e5-small model and queried through a
``CriterionAwareRetriever`` inside a standard LlamaIndex ``RetrieverQueryEngine``. With
``LLAMA_CAR_LLM=anthropic`` and ``ANTHROPIC_API_KEY`` set, the same code writes an answer with Claude;
without a key it returns the retrieved sections only (``response_mode="no_text"``).

Run: python examples/01_quickstart.py
"""

from __future__ import annotations

from llama_index.core import VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers import get_response_synthesizer
from llama_index.core.response_synthesizers.no_text import NoText
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

from llama_index_car import CriterionAwareRetriever, MultilingualE5Embedding
from llama_index_car.demo import demo_corpus_files
from llama_index_car.providers import resolve_llm

reader = HWPXReader()
documents = [doc for path in demo_corpus_files() for doc in reader.load_data(path)]
nodes = HWPXNodeParser(chunk_size=1000, chunk_overlap=150).get_nodes_from_documents(documents)
index = VectorStoreIndex(nodes, embed_model=MultilingualE5Embedding())

retriever = CriterionAwareRetriever.from_defaults(index=index, similarity_top_k=3)
llm = resolve_llm()  # None offline; Claude when LLAMA_CAR_LLM=anthropic and the key is set
# offline: NoText returns the sources only (built directly: the factory would fall back to
# Settings.llm, i.e. OpenAI, even for "no_text")
synth = get_response_synthesizer(llm=llm) if llm else NoText(llm=MockLLM())
engine = RetrieverQueryEngine(retriever, response_synthesizer=synth)

response = engine.query("산을 깎아 만든 길옆 경사면은 얼마나 완만해야 해?")
explain = response.source_nodes[0].node.metadata["car_explain"]
# offline: the feedback terms read from the top dense hits (source "feedback"); with Claude:
# the criterion hypothesis (source "llm"); None when CAR answered with the plain hybrid
print(f"hypothesis ({explain['hypothesis_source']}): {explain['hypothesis']}")
for hit in response.source_nodes:
    meta = hit.node.metadata
    print(f"{hit.score:.4f}  {meta['section_title']}  ({meta['file_name']})")
if llm is not None:
    print(response.response)
