"""05 — A chat engine grounded by CAR (offline: the retrieved context is shown, no LLM).

``ContextChatEngine`` retrieves with any retriever on every turn; plugging in
``CriterionAwareRetriever`` makes each turn criterion-aware. Offline the engine runs on
LlamaIndex's ``MockLLM`` (it echoes, it does not answer), so we print the grounding sections;
with ``LLAMA_CAR_LLM=anthropic`` and ``ANTHROPIC_API_KEY`` set, Claude answers from them.

Run: python examples/05_chat_engine.py
"""

from __future__ import annotations

from llama_index.core import VectorStoreIndex
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

from llama_index_car import CriterionAwareRetriever, MultilingualE5Embedding
from llama_index_car.demo import demo_corpus_files
from llama_index_car.providers import resolve_llm

reader = HWPXReader()
nodes = HWPXNodeParser().get_nodes_from_documents(
    [doc for path in demo_corpus_files() for doc in reader.load_data(path)]
)
index = VectorStoreIndex(nodes, embed_model=MultilingualE5Embedding())
car = CriterionAwareRetriever.from_defaults(index=index, similarity_top_k=2)

llm = resolve_llm() or MockLLM(max_tokens=1)  # offline: a stand-in that generates nothing
chat = ContextChatEngine.from_defaults(
    retriever=car, llm=llm, memory=ChatMemoryBuffer.from_defaults(token_limit=3000)
)

for turn in ("졸음쉼터는 몇 km마다 만들어야 돼?", "터널 안 비상주차대는 얼마나 길어?"):
    reply = chat.chat(turn)
    print(f"user: {turn}")
    for hit in reply.source_nodes:
        hyp = hit.node.metadata["car_explain"]["hypothesis"]
        print(f"  context: {hit.node.metadata['section_title']}  (hypothesis: {hyp})")
    if not isinstance(llm, MockLLM):
        print(f"assistant: {reply.response}")
print(f"memory holds {len(chat.chat_history)} messages")
