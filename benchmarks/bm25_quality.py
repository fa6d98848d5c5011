"""Retrieval quality of Korean BM25 variants on the ``../shared/eval`` sets (prints tables).

Systems, all over ``title + "\\n" + text`` of each passage:

* ``car default``: :class:`KiwiTokenizer` defaults + :class:`BM25Okapi` (k1=1.5, b=0.75,
  epsilon=0.25), zero scores dropped (what :class:`KiwiBM25Retriever` returns);
* ``car compounds=none|criterion|all``: the compound options (the default is one of them);
* ``car no-domain-regex``: compounds as default, Kiwi without the domain regexes;
* ``rank_bm25 all-morphemes``: ``rank_bm25.BM25Okapi`` (defaults) over every Kiwi morpheme
  form, ``[t.form for t in kiwi.tokenize(text)]`` (what Korean LangChain / AutoRAG users do),
  top-100 by ``np.argsort`` as ``get_top_n`` does;
* ``llamaindex BM25Retriever``: ``llama_index.retrievers.bm25.BM25Retriever.from_defaults``
  (bm25s, English stemmer, ``\\w\\w+`` tokens), top 100.

Metrics (ranx, runs cut at depth 100): nDCG@10, MRR@10, Recall@10, Recall@50.

Usage::

    PYTHONPATH=. python benchmarks/bm25_quality.py                 # all sets, all queries
    PYTHONPATH=. python benchmarks/bm25_quality.py --sets lhcs_construction --max-queries 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from llama_index_car.bm25 import BM25Okapi
from llama_index_car.tokenizers.kiwi import KiwiTokenizer, domain_spans

DEFAULT_EVAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "eval"
METRICS = ["ndcg@10", "mrr@10", "recall@10", "recall@50"]
DEPTH = 100


class Morph(NamedTuple):
    """The Kiwi token fields the tokenizer reads (kept instead of heavy Token objects)."""

    form: str
    tag: str
    lemma: str
    start: int
    end: int


def load_set(folder: Path, max_queries: int | None) -> tuple[list, list, dict]:
    docs = [json.loads(x) for x in (folder / "corpus.jsonl").read_text("utf-8").splitlines()]
    queries = [json.loads(x) for x in (folder / "queries.jsonl").read_text("utf-8").splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.tsv").read_text("utf-8").splitlines()[1:]:
        qid, did, rel = line.split("\t")
        if int(rel) > 0:
            qrels.setdefault(qid, {})[did] = int(rel)
    queries = [q for q in queries if q["_id"] in qrels]
    if max_queries:
        queries = queries[:max_queries]
    qrels = {q["_id"]: qrels[q["_id"]] for q in queries}
    return docs, queries, qrels


def analyse(texts: Sequence[str], regex: bool) -> list[list[Morph]]:
    """Kiwi analysis of all texts (all cores), with or without the domain regex spans."""
    kiwi = KiwiTokenizer().kiwi()
    stream = kiwi.tokenize(iter(texts), pretokenized=domain_spans if regex else None)
    return [[Morph(t.form, t.tag, t.lemma, t.start, t.end) for t in res] for res in stream]


def run_ours(
    doc_tokens: list[list[str]], query_tokens: list[list[str]], doc_ids: list[str], qids: list[str]
) -> dict[str, dict[str, float]]:
    bm = BM25Okapi(doc_tokens)
    run: dict[str, dict[str, float]] = {}
    for qid, (idx, sc) in zip(qids, bm.top_k_batch(query_tokens, DEPTH), strict=True):
        run[qid] = {doc_ids[i]: float(s) for i, s in zip(idx, sc, strict=True) if s != 0}
    return run


def run_variant(
    tok: KiwiTokenizer,
    docs: list[list[Morph]],
    queries: list[list[Morph]],
    doc_ids: list[str],
    qids: list[str],
) -> dict[str, dict[str, float]]:
    """Our BM25 over ``tok``'s tokens derived from stored Kiwi analyses (duck-typed Morph)."""
    d = [tok._tokens_from(m) for m in docs]  # type: ignore[arg-type]
    q = [tok._tokens_from(m) for m in queries]  # type: ignore[arg-type]
    return run_ours(d, q, doc_ids, qids)


def run_rank_bm25(
    doc_tokens: list[list[str]],
    query_tokens: list[list[str]],
    doc_ids: list[str],
    qids: list[str],
    max_real: int | None,
) -> tuple[dict[str, dict[str, float]], str]:
    """rank_bm25 BM25Okapi (defaults) + ``np.argsort(scores)[::-1][:100]`` (``get_top_n``).

    rank_bm25 costs ~1 ms per query token per 6k documents, so on large sets only the first
    ``max_real`` queries run through rank_bm25 itself; the rest are scored by our
    ``BM25Okapi`` (equal scores to 1e-9, checked on those first queries and reported) with the
    same argsort ranking. ``max_real=None`` runs every query through rank_bm25.
    """
    import rank_bm25

    n_real = len(query_tokens) if max_real is None else min(max_real, len(query_tokens))
    rb = rank_bm25.BM25Okapi(doc_tokens)
    ours = BM25Okapi(doc_tokens) if n_real < len(query_tokens) else None
    run: dict[str, dict[str, float]] = {}
    worst = 0.0
    for n, (qid, q) in enumerate(zip(qids, query_tokens, strict=True)):
        if n < n_real:
            scores = np.asarray(rb.get_scores(q))
            if ours is not None:
                mine = ours.get_scores(q)
                worst = max(
                    worst, float(np.max(np.abs(mine - scores) / np.maximum(1, np.abs(scores))))
                )
        else:
            assert ours is not None
            scores = ours.get_scores(q)
        top = np.argsort(scores)[::-1][:DEPTH]
        run[qid] = {doc_ids[i]: float(scores[i]) for i in top if scores[i] != 0}
    note = (
        "all queries through rank_bm25"
        if ours is None
        else f"first {n_real} queries through rank_bm25, the rest through our BM25Okapi "
        f"(max rel. score diff on the first {n_real}: {worst:.1e})"
    )
    return run, note


def run_llamaindex(
    texts: list[str], queries: list[str], doc_ids: list[str], qids: list[str]
) -> dict[str, dict[str, float]]:
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = [TextNode(text=t, id_=d) for t, d in zip(texts, doc_ids, strict=True)]
    r = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=DEPTH)
    run: dict[str, dict[str, float]] = {}
    for qid, q in zip(qids, queries, strict=True):
        run[qid] = {n.node.node_id: float(n.score or 0.0) for n in r.retrieve(q) if n.score}
    return run


def evaluate(qrels: dict, run: dict) -> dict[str, float]:
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    run = {q: (d if d else {"__none__": 0.0}) for q, d in run.items()}  # ranx needs entries
    res: dict[str, Any] = ranx_evaluate(Qrels(qrels), Run(run), METRICS, make_comparable=True)
    return {m: float(res[m]) for m in METRICS}


def table(rows: list[tuple[str, dict[str, float], float]], title: str) -> str:
    head = f"\n### {title}\n\n| system | nDCG@10 | MRR@10 | R@10 | R@50 | time s |\n|---|---|---|---|---|---|"
    lines = [head]
    for name, m, secs in rows:
        vals = " | ".join(f"{m[k]:.4f}" for k in METRICS)
        lines.append(f"| {name} | {vals} | {secs:.1f} |")
    return "\n".join(lines)


def bench_set(
    folder: Path,
    max_queries: int | None,
    variants: Sequence[str],
    max_rank_work: int = 1_000_000,
    rank_queries: int = 100,
) -> str:
    docs, queries, qrels = load_set(folder, max_queries)
    doc_ids = [d["_id"] for d in docs]
    texts = [(d.get("title") or "") + "\n" + d["text"] for d in docs]
    qids = [q["_id"] for q in queries]
    qtexts = [q["text"] for q in queries]
    print(f"[{folder.name}] {len(docs)} docs, {len(queries)} queries", file=sys.stderr)
    t0 = time.perf_counter()
    d_re, q_re = analyse(texts, True), analyse(qtexts, True)
    d_plain, q_plain = analyse(texts, False), analyse(qtexts, False)
    kiwi_secs = time.perf_counter() - t0
    print(f"  kiwi analysis (2 passes) {kiwi_secs:.1f}s", file=sys.stderr)
    rows: list[tuple[str, dict[str, float], float]] = []

    def add(name: str, fn: Callable[[], dict]) -> None:
        t = time.perf_counter()
        run = fn()
        secs = time.perf_counter() - t
        rows.append((name, evaluate(qrels, run), secs))
        print(f"  {name}: {rows[-1][1]} ({secs:.1f}s)", file=sys.stderr)

    default = KiwiTokenizer()
    for mode in variants:
        tok = KiwiTokenizer(compounds=mode)  # type: ignore[arg-type]
        label = f"car compounds={mode}" + (" (default)" if tok == default else "")
        add(label, partial(run_variant, tok, d_re, q_re, doc_ids, qids))
    add(
        "car default, no domain regexes",
        lambda: run_ours(
            [default._tokens_from(m) for m in d_plain],  # type: ignore[arg-type]
            [default._tokens_from(m) for m in q_plain],  # type: ignore[arg-type]
            doc_ids,
            qids,
        ),
    )
    notes: list[str] = []

    def rank_run() -> dict[str, dict[str, float]]:
        run, note = run_rank_bm25(
            [[m.form for m in d] for d in d_plain],
            [[m.form for m in q] for q in q_plain],
            doc_ids,
            qids,
            None if len(docs) * len(queries) <= max_rank_work else max(1, rank_queries),
        )
        notes.append(f"rank_bm25 baseline: {note}")
        return run

    add("rank_bm25 all Kiwi morphemes", rank_run)
    add("LlamaIndex BM25Retriever default", lambda: run_llamaindex(texts, qtexts, doc_ids, qids))
    title = f"{folder.name} (n={len(queries)} queries, {len(docs)} docs)"
    return table(rows, title) + "".join(f"\n\n{n}" for n in notes)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--eval-dir", type=Path, default=DEFAULT_EVAL)
    p.add_argument("--sets", nargs="*", default=None, help="set folder names (default: all)")
    p.add_argument("--max-queries", type=int, default=None, help="first N queries per set")
    p.add_argument(
        "--rank-queries",
        type=int,
        default=100,
        help="on sets with docs x queries > 1e6, queries run through rank_bm25 itself",
    )
    p.add_argument(
        "--compounds", nargs="*", default=["none", "criterion", "all"], help="variants to run"
    )
    args = p.parse_args(argv)
    folders = sorted(d for d in args.eval_dir.iterdir() if (d / "corpus.jsonl").is_file())
    if args.sets:
        folders = [f for f in folders if f.name in set(args.sets)]
    out = [
        table_text
        for table_text in (
            bench_set(f, args.max_queries, args.compounds, rank_queries=args.rank_queries)
            for f in folders
        )
    ]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
