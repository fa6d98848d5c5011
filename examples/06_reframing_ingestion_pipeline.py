"""06 — Criterial reframing inside an ``IngestionPipeline`` (index-time remedy).

``CriterialReframer`` rewrites a plan-framed section title ("…확충방안") to surface the
criterion its body states ("… 설치기준") before embedding; the original title is kept in
``original_section_title``. The paper found the query-independent form does not transfer to
end-to-end QA, so compare before trusting it: this prints the gold section's dense rank for
each demo question with and without reframing.

Run: python examples/06_reframing_ingestion_pipeline.py
"""

from __future__ import annotations

from llama_index.core import VectorStoreIndex
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import TransformComponent
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

from llama_index_car import CriterialReframer, MultilingualE5Embedding
from llama_index_car.demo import demo_corpus_files, load_demo_questions

reader = HWPXReader()
documents = [doc for path in demo_corpus_files() for doc in reader.load_data(path)]
embed = MultilingualE5Embedding()


def dense_ranks(transformations: list[TransformComponent]) -> list[int | None]:
    nodes = IngestionPipeline(transformations=transformations).run(documents=documents)
    retriever = VectorStoreIndex(nodes, embed_model=embed).as_retriever(similarity_top_k=len(nodes))
    ranks = []
    for q in load_demo_questions():
        titles = [
            h.node.metadata.get("original_section_title") or h.node.metadata["section_title"]
            for h in retriever.retrieve(q.question)
        ]
        ranks.append(titles.index(q.gold_section) + 1 if q.gold_section in titles else None)
    return ranks


plain = dense_ranks([HWPXNodeParser()])
reframed_nodes = IngestionPipeline(
    transformations=[HWPXNodeParser(), CriterialReframer(mode="first")]
).run(documents=documents)
changed = [n for n in reframed_nodes if "original_section_title" in n.metadata]
for n in changed[:3]:
    print(f"{n.metadata['original_section_title']}  →  {n.metadata['section_title']}")
reframed = dense_ranks([HWPXNodeParser(), CriterialReframer(mode="first")])
print(f"{len(changed)} of {len(reframed_nodes)} sections reframed")
print("dense rank of the gold section, plain → reframed:", list(zip(plain, reframed, strict=True)))
