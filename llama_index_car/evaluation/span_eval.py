"""``llama-car eval --spans``: is the criterion span ranker's first span the one that answers?

For each query with a reference answer (``metadata.answer`` of the BEIR query line, or
``"answer"`` of an HWPX QA line) whose gold passage a system retrieved in its top ``k`` (10;
the best-ranked gold when several are), the gold passage's spans
(:func:`~llama_index_car.spans.node_spans`) are

* ordered by the span ranker — :class:`~llama_index_car.postprocessors.criterion_spans.
  CriterionSpanPostprocessor` with its default weights (or the ones given), one place per span:
  a table row's score is the best of the row and its cells, as in ``criterion_spans``;
* compared with the answer: the *best set* is the spans of maximal content-morpheme overlap
  with the answer (:mod:`.span_hits`, the overlap definition of :mod:`.overlap`).

Queries are skipped and counted: no answer, gold not in the top ``k``, one span only, zero
overlap in every span. The span ranking does not depend on the system; only which queries
count does. Span vectors go through the embedding cache (the e5 vectors of every span, as
``benchmarks/span_cv.py`` embeds them: the span texts, passage role).

>>> per_query_skips([])
{'no_answer': 0, 'not_retrieved': 0, 'one_span': 0, 'no_overlap': 0}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_car.evaluation.io import Qrels, Run, rank_items
from llama_index_car.evaluation.span_hits import (
    SpanQuery,
    best_set,
    overlap_shares,
    record,
    summarize,
)

#: the query-metadata key holding the reference answer
ANSWER_KEY = "answer"
#: the gold passage counts when it is in a system's top ``k``
DEFAULT_SPAN_K = 10
#: skip reasons, in the order they are checked
SKIPS: tuple[str, ...] = ("no_answer", "not_retrieved", "one_span", "no_overlap")


def answers_of(query_metadata: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``{qid: answer}`` of the queries whose metadata has a non-blank ``answer`` string.

    >>> answers_of({"q1": {"answer": "1.5m 이상"}, "q2": {"answer": " "}, "q3": {}})
    {'q1': '1.5m 이상'}
    """
    return {
        q: str(m[ANSWER_KEY]) for q, m in query_metadata.items()
        if isinstance(m.get(ANSWER_KEY), str) and str(m[ANSWER_KEY]).strip()
    }


def gold_in_top(scores: Mapping[str, float], relevant: Mapping[str, int], k: int) -> str | None:
    """The best-ranked relevant document among the top ``k`` of one query's run (package
    tie-break: score desc, then id), or ``None``.

    >>> gold_in_top({"a": 3.0, "b": 2.0, "c": 1.0}, {"c": 1, "b": 1}, 2)
    'b'
    """
    for doc_id, _ in rank_items(scores)[:k]:
        if relevant.get(doc_id, 0) > 0:
            return doc_id
    return None


def per_query_skips(reasons: Iterable[str]) -> dict[str, int]:
    """Counts of each skip reason (:data:`SKIPS`), zeros included."""
    out = dict.fromkeys(SKIPS, 0)
    for r in reasons:
        out[r] += 1
    return out


def _candidate_key(kind: str, start: int, end: int, text: str, table: Mapping[str, Any] | None
                   ) -> tuple[Any, ...]:
    t = table or {}
    return (kind, start, end, text, t.get("table_index"), t.get("row"), t.get("col"))


class SpanRanker:
    """The criterion span ranker over one node: span indices (places), best first.

    Args:
        span_index: a :class:`~llama_index_car.span_index.SpanIndex` holding the nodes ranked.
        embed_model: the embedding of the span index (queries are embedded with it).
        tokenizer: the Kiwi tokenizer of the lexical part (default ``KiwiTokenizer()``).
        weights: ``(vector, lexical, cue)`` weights (default the postprocessor's).
    """

    def __init__(
        self,
        span_index: Any,
        embed_model: Any,
        tokenizer: Any | None = None,
        weights: tuple[float, float, float] | None = None,
    ) -> None:
        from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor
        from llama_index_car.spans import MAX_SPANS

        kwargs: dict[str, Any] = {}
        if weights is not None:
            kwargs = dict(zip(("vector_weight", "lexical_weight", "cue_weight"), weights,
                              strict=True))
        self.span_index = span_index
        self._post = CriterionSpanPostprocessor(
            span_index, embed_model, tokenizer=tokenizer, top_n=MAX_SPANS, **kwargs
        )

    @property
    def weights(self) -> tuple[float, float, float]:
        return self._post.weights

    def set_weights(self, weights: tuple[float, float, float]) -> None:
        """Change the weights in place (the tokenized nodes stay cached)."""
        self._post.vector_weight, self._post.lexical_weight, self._post.cue_weight = weights

    def rank(self, node: BaseNode, query: str) -> tuple[int, ...]:
        """The span indices of ``node`` (:meth:`SpanIndex.spans_of` order) best first."""
        from llama_index_car.postprocessors.criterion_spans import (
            CRITERION_SPANS_KEY,
            span_candidates,
        )

        spans = self.span_index.spans_of(node.node_id)
        place = {
            _candidate_key(c.kind, c.start, c.end, c.text, c.table): c.place
            for c in span_candidates(node, spans)
        }
        hits = self._post.postprocess_nodes(
            [NodeWithScore(node=node, score=1.0)], query_bundle=QueryBundle(query_str=query)
        )
        items = hits[0].node.metadata[CRITERION_SPANS_KEY]
        order = [place[_candidate_key(i["kind"], i["start"], i["end"], i["text"], i)]
                 for i in items]
        return tuple(order)


def evaluate_spans(
    nodes: Sequence[BaseNode],
    queries: Mapping[str, str],
    qrels: Qrels,
    answers: Mapping[str, str],
    runs: Mapping[str, Run],
    embed_model: Any,
    *,
    k: int = DEFAULT_SPAN_K,
    weights: tuple[float, float, float] | None = None,
    morphemes: Callable[[str], Iterable[str]] | None = None,
    tokenizer: Any | None = None,
    ranker: SpanRanker | None = None,
) -> dict[str, Any]:
    """Span hit figures of every system of ``runs`` (module docstring) as a JSON-ready dict:
    ``{"k", "weights", "n_answers", "systems": {name: {"summary", "skipped", "qids"}},
    "queries": {qid: record}}`` (``qids``: the queries the system's figures are over; records of
    every query scored by some system, with its ``gold`` passage)."""
    from llama_index_car.evaluation.overlap import surface_content_morphemes
    from llama_index_car.span_index import SpanIndex

    morph = morphemes or surface_content_morphemes
    by_id = {n.node_id: n for n in nodes}
    golds: dict[str, dict[str, str | None]] = {
        name: {q: gold_in_top(run.get(q, {}), qrels.get(q, {}), k) for q in queries}
        for name, run in runs.items()
    }
    needed = sorted({d for g in golds.values() for q, d in g.items() if d and q in answers})
    if ranker is None:
        index = SpanIndex.from_nodes([by_id[d] for d in needed], embed_model)
        ranker = SpanRanker(index, embed_model, tokenizer=tokenizer, weights=weights)
    answer_morphemes = {q: list(morph(a)) for q, a in answers.items() if q in queries}
    span_morphemes: dict[str, list[list[str]]] = {}
    scored: dict[tuple[str, str], SpanQuery | str] = {}

    def score(qid: str, doc: str) -> SpanQuery | str:
        if (qid, doc) in scored:
            return scored[(qid, doc)]
        if doc not in span_morphemes:
            span_morphemes[doc] = [list(morph(s.text)) for s in ranker.span_index.spans_of(doc)]
        spans = span_morphemes[doc]
        result: SpanQuery | str
        if len(spans) < 2:
            result = "one_span"
        else:
            best = best_set(overlap_shares(answer_morphemes[qid], spans))
            if not best:
                result = "no_overlap"
            else:
                result = SpanQuery(qid, len(spans), best, ranker.rank(by_id[doc], queries[qid]))
        scored[(qid, doc)] = result
        return result

    systems: dict[str, Any] = {}
    records: dict[str, dict[str, Any]] = {}
    for name in runs:
        reasons: list[str] = []
        kept: list[SpanQuery] = []
        for qid in queries:
            if not any(r > 0 for r in qrels.get(qid, {}).values()):
                continue
            doc = golds[name][qid]
            if qid not in answer_morphemes:
                reasons.append("no_answer")
            elif doc is None:
                reasons.append("not_retrieved")
            else:
                result = score(qid, doc)
                if isinstance(result, str):
                    reasons.append(result)
                else:
                    kept.append(result)
                    records[qid] = record(result) | {"gold": doc}
        systems[name] = {"summary": summarize(kept), "skipped": per_query_skips(reasons),
                         "qids": [q.qid for q in kept]}
    return {
        "k": k, "weights": list(ranker.weights), "n_answers": len(answer_morphemes),
        "systems": systems, "queries": records,
    }


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _p(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.1e}" if x < 1e-3 else f"{x:.3f}"


#: the columns of :func:`markdown_table`
HEADER = (
    "| set | system | n | top-1 | first span | random top-1 | p (vs first) | p (vs random) "
    "| top-3 | random top-3 | p (top-3 vs random) | MRR (random) | median rank "
    "| skipped: not in top k / 1 span / no overlap |"
)


def markdown_table(rows: Sequence[tuple[str, str, Mapping[str, Any]]]) -> str:
    """A markdown table of ``(set, system, systems[name])`` rows of :func:`evaluate_spans`."""
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for set_name, system, entry in rows:
        s, sk = entry["summary"], entry["skipped"]
        lines.append(
            f"| {set_name} | {system} | {s['n']} | {_f(s['top1'])} | {_f(s['first'])} "
            f"| {_f(s['random_top1'])} | {_p(s['p_top1_vs_first'])} "
            f"| {_p(s['p_top1_vs_random'])} | {_f(s['top3'])} | {_f(s['random_top3'])} "
            f"| {_p(s['p_top3_vs_random'])} | {_f(s['mrr'])} ({_f(s['random_mrr'])}) "
            f"| {_f(s['median_rank'], 1)} "
            f"| {sk['not_retrieved']} / {sk['one_span']} / {sk['no_overlap']} |"
        )
    return "\n".join(lines)
