"""04 — CAR with Claude writing the criterion hypothesis (needs ANTHROPIC_API_KEY).

The paper's configuration: ``claude-sonnet-4-6`` guesses the criterion a standard would use
("비 올 때 도랑 깊이" → "측구 설치기준"), the dense channel embeds query + hypothesis and the
BM25 channel adds the criterion terms. Without the key (or the ``anthropic`` extra) this
example prints one line saying what to set and exits with code 2.

Run: ANTHROPIC_API_KEY=... python examples/04_car_with_claude.py
"""

from __future__ import annotations

import sys

from llama_index_car import CarError, CriterionAwareRetriever, LLMCriterionHypothesizer
from llama_index_car.providers import resolve_llm

try:
    llm = resolve_llm("anthropic")  # BoundedAnthropic(claude-sonnet-4-6); one line if key missing
except CarError as exc:
    print(f"04_car_with_claude: {exc}", file=sys.stderr)
    raise SystemExit(2) from None

from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader  # noqa: E402

from llama_index_car.demo import demo_corpus_files, load_demo_questions  # noqa: E402

reader = HWPXReader()
nodes = HWPXNodeParser().get_nodes_from_documents(
    [doc for path in demo_corpus_files() for doc in reader.load_data(path)]
)
hypothesizer = LLMCriterionHypothesizer(llm=llm)  # cached; BoundedAnthropic ends calls on time
car = CriterionAwareRetriever.from_defaults(
    nodes=nodes, hypothesizer=hypothesizer, similarity_top_k=3
)

for q in load_demo_questions():
    if q.style != "everyday":
        continue
    hits = car.retrieve(q.question)
    explain = hits[0].node.metadata["car_explain"]
    found = [h.node.metadata["section_title"] for h in hits]
    mark = "✓" if q.gold_section in found else "✗"
    print(f"{mark} {q.question}\n    hypothesis: {explain['hypothesis']}\n    top-3: {found}")
