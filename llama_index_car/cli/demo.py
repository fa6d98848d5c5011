"""``llama-car demo``: index the bundled sample corpus and compare four retrievers.

Offline and key-free by default: the ten bundled HWPX guideline documents are indexed into a
temporary folder with the default embedding (offline multilingual-e5-small, through the shared
embedding cache, so only the first run embeds) and Kiwi BM25, then each bundled
criterion question is run through dense, BM25, hybrid (weighted RRF, alpha 0.5, k 60) and
CAR (offline: z-score fusion of dense + BM25, re-ranked by criterion spans). The
table shows the rank of the question's gold section under each retriever (1 = top; the rank
of the section's best node among all nodes; ``—`` = not returned, e.g. BM25 with no shared
term), like the paper's Table 12, then MRR and Hit@k per retriever and the elapsed time.
Under each question, one line shows the best criterion span of CAR's top hit (sentence,
table row or cell with its coordinates; ``CriterionSpanPostprocessor``), cut to
:data:`SPAN_CHARS` characters.

The corpus was written to look like real guidelines, not to make any retriever win; the
numbers are whatever this run measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index_car.cli._args import (
    add_cache_and_progress_options,
    add_embed_option,
    existing_dir,
    existing_file,
    output_dir,
    positive_int,
    show_progress,
    subcommand,
)
from llama_index_car.providers import CLI_LLMS

EPILOG = """examples:
  llama-car demo
  llama-car demo --explain              # also show CAR's criterion hypothesis per question
  llama-car demo --keep ./demo-index    # keep the index folder, then:
  llama-car query ./demo-index "졸음쉼터는 몇 km마다 만들어야 돼?" --explain
"""

SYSTEMS: tuple[str, ...] = ("dense", "bm25", "hybrid", "car")
#: longest printed span line
SPAN_CHARS = 100


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``demo`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "demo",
        help="index the bundled sample corpus and compare dense, BM25, hybrid and CAR",
        doc=__doc__,
        epilog=EPILOG,
    )
    p.add_argument(
        "--corpus",
        metavar="DIR",
        type=existing_dir,
        default=None,
        help="HWPX folder (default: the bundled demo corpus)",
    )
    p.add_argument(
        "--questions",
        metavar="JSONL",
        type=existing_file,
        default=None,
        help="question file (default: the bundled demo questions)",
    )
    p.add_argument(
        "--keep",
        metavar="DIR",
        type=output_dir,
        default=None,
        help="build the index in DIR and keep it (default: a temporary folder)",
    )
    p.add_argument("--hit-k", type=positive_int, default=5, help="k for the Hit@k summary (default 5)")
    add_embed_option(p)
    p.add_argument(
        "--llm",
        choices=CLI_LLMS,
        default=None,
        help="CAR hypothesis writer: none = offline CAR, no hypothesis (default; or $LLAMA_CAR_LLM), "
        "anthropic = claude-sonnet-4-6 (needs ANTHROPIC_API_KEY)",
    )
    p.add_argument("--explain", action="store_true", help="print CAR's hypothesis per question")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    add_cache_and_progress_options(p)
    return p


# ----------------------------------------------------------------------------- ranking
def gold_rank(hits: Sequence[Any], gold_file: str, gold_section: str) -> int | None:
    """1-based rank of the first hit from the gold section (``None`` if absent).

    A hit matches when its ``file_name`` equals ``gold_file`` and its ``section_title``
    equals ``gold_section`` (both NFC-normalised, surrounding whitespace ignored).
    """
    want = (_norm(gold_file), _norm(gold_section))
    for i, hit in enumerate(hits, start=1):
        meta = hit.node.metadata
        got = (_norm(Path(str(meta.get("file_name", ""))).name), _norm(meta.get("section_title")))
        if got == want:
            return i
    return None


def check_golds(questions: Sequence[Any], nodes: Sequence[Any]) -> None:
    """Every question's gold section must exist among the indexed nodes.

    Raises:
        EvaluationDataError: naming the question and the missing ``file / section``.
    """
    from llama_index_car._errors import EvaluationDataError

    present = {
        (
            _norm(Path(str(n.metadata.get("file_name", ""))).name),
            _norm(n.metadata.get("section_title")),
        )
        for n in nodes
    }
    for q in questions:
        if (_norm(q.gold_file), _norm(q.gold_section)) not in present:
            raise EvaluationDataError(
                f"question {q.qid}: gold section {q.gold_file} / {q.gold_section!r} is not in "
                "the index; fix the question file or the corpus"
            )


def _norm(value: Any) -> str:
    return unicodedata.normalize("NFC", str(value or "")).strip()


def reciprocal_rank(rank: int | None) -> float:
    """``1 / rank``, 0 when the gold was not retrieved (untruncated MRR term)."""
    return 0.0 if rank is None else 1.0 / rank


def summarise(ranks: dict[str, dict[str, int | None]], hit_k: int) -> dict[str, dict[str, float]]:
    """Per system: ``MRR = mean(1/rank)`` and ``Hit@k = mean(rank <= k)`` over questions."""
    out: dict[str, dict[str, float]] = {}
    for system in SYSTEMS:
        values = [per_q[system] for per_q in ranks.values()]
        n = max(len(values), 1)
        out[system] = {
            "mrr": sum(reciprocal_rank(r) for r in values) / n,
            f"hit@{hit_k}": sum(1 for r in values if r is not None and r <= hit_k) / n,
        }
    return out


# ----------------------------------------------------------------------------- output
def _width(text: str) -> int:
    """Display width: East Asian wide characters count 2."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(width - _width(text), 0)


def _fmt_rank(rank: int | None) -> str:
    return "—" if rank is None else str(rank)


def print_table(
    questions: Sequence[Any],
    ranks: dict[str, dict[str, int | None]],
    summary: dict[str, dict[str, float]],
    hit_k: int,
    hypotheses: dict[str, str],
    spans: dict[str, dict[str, Any]] | None = None,
) -> None:
    """The Table-12-style listing plus the summary rows; ``spans``: the top criterion span of
    CAR's first hit per question, one line each."""
    from llama_index_car.cli.query import span_line

    head = f"{'qid':<4} {'style':<8} " + "".join(f"{s:>7}" for s in SYSTEMS)
    print(head + "   question → gold section")
    for q in questions:
        row = ranks[q.qid]
        cells = "".join(f"{_fmt_rank(row[s]):>7}" for s in SYSTEMS)
        print(f"{q.qid:<4} {q.style:<8} {cells}   {q.question} → {q.gold_section}")
        if q.qid in hypotheses:
            print(f"{'':<13}{'':>28}   CAR hypothesis: {hypotheses[q.qid]}")
        if spans and q.qid in spans:
            print(f"{'':<13}{'':>28}   CAR span: {span_line(spans[q.qid], SPAN_CHARS)}")
    print("-" * 60)
    for label, key in (("MRR", "mrr"), (f"Hit@{hit_k}", f"hit@{hit_k}")):
        cells = "".join(f"{summary[s][key]:>7.3f}" for s in SYSTEMS)
        print(f"{_pad(label, 13)}{cells}")


# ----------------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> int:
    """Build the demo index, rank every question under every system, print the table."""
    import tempfile

    from llama_index_car._errors import ConfigurationError
    from llama_index_car.demo.loader import demo_corpus_dir, load_demo_questions
    from llama_index_car.folder import BuildOptions, build_index, load_index
    from llama_index_car.folder.record import RECORD_NAME

    start = time.perf_counter()
    if args.hit_k < 1:
        raise ConfigurationError(f"--hit-k {args.hit_k} is invalid; use an integer >= 1")
    questions = load_demo_questions(args.questions)
    corpus = Path(args.corpus) if args.corpus else demo_corpus_dir()
    from llama_index_car.providers import resolve_llm

    llm = resolve_llm(args.llm)  # None unless --llm anthropic (or $LLAMA_CAR_LLM)
    hypothesizer = None
    if llm is not None:
        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

        hypothesizer = LLMCriterionHypothesizer(llm=llm)
    log = sys.stderr if args.json else sys.stdout

    keep = Path(args.keep) if args.keep else None
    if keep is not None and keep.is_dir() and any(keep.iterdir()):
        if not (keep / RECORD_NAME).is_file():
            raise ConfigurationError(
                f"--keep {keep} is a non-empty folder that is not an index; choose a new folder"
            )
    with tempfile.TemporaryDirectory(prefix="llama-car-demo-") as tmp:
        persist = keep if keep is not None else Path(tmp)
        print(f"indexing {corpus} …", file=log, flush=True)
        built = build_index(corpus, persist, BuildOptions(
            embed=args.embed,
            overwrite=keep is not None,
            show_progress=show_progress(args),
            cache_dir=args.cache_dir,
            on_error=lambda f: print(f"skipped {f.path}: {f.error}", file=sys.stderr),
        ))
        index_seconds = time.perf_counter() - start
        print(built.line(), file=log, flush=True)
        local = load_index(persist)
        n = len(local.nodes)
        check_golds(questions, local.nodes)
        retrievers = {  # every node ranked: the spans of CAR's top hit only, below
            s: local.as_retriever(s, similarity_top_k=n,
                                  **({"pool_top_k": n} if s in ("hybrid", "car") else {}),
                                  **({"hypothesizer": hypothesizer, "criterion_spans": 0}
                                     if s == "car" else {}))
            for s in SYSTEMS
        }
        span_post = local.span_postprocessor(top_n=1)
        top_spans: dict[str, dict[str, Any]] = {}
        query_start = time.perf_counter()
        ranks: dict[str, dict[str, int | None]] = {}
        hypotheses: dict[str, str] = {}
        criteria: dict[str, list[str]] = {}
        for q in questions:
            ranks[q.qid] = {}
            for system, retriever in retrievers.items():
                hits = retriever.retrieve(q.question)
                ranks[q.qid][system] = gold_rank(hits, q.gold_file, q.gold_section)
                if system == "car" and hits:
                    explain = hits[0].node.metadata.get("car_explain") or {}
                    hypotheses[q.qid] = str(explain.get("hypothesis") or "(none)")
                    criteria[q.qid] = [str(c) for c in explain.get("criteria") or []]
                    if span_post is not None:
                        spanned = span_post.postprocess_nodes(hits[:1], query_str=q.question)
                        found = spanned[0].node.metadata.get("criterion_spans") or []
                        if found:
                            top_spans[q.qid] = dict(found[0])
        query_seconds = time.perf_counter() - query_start

    summary = summarise(ranks, args.hit_k)
    elapsed = time.perf_counter() - start
    if args.json:
        payload = {
            "corpus": str(corpus),
            "files": built.files,
            "nodes": built.nodes,
            "failures": [f.path for f in built.failures],
            "questions": [
                {
                    "qid": q.qid,
                    "question": q.question,
                    "style": q.style,
                    "gold_file": q.gold_file,
                    "gold_section": q.gold_section,
                    "ranks": ranks[q.qid],
                    "car_hypothesis": hypotheses.get(q.qid),
                    "car_criteria": criteria.get(q.qid, []),
                    "car_top_span": top_spans.get(q.qid),
                }
                for q in questions
            ],
            "summary": summary,
            "seconds": {"index": index_seconds, "queries": query_seconds, "total": elapsed},
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2))
        return 0
    print()
    print(f"rank of the gold section among {n} nodes (1 = top, — = not retrieved):")
    print_table(
        questions, ranks, summary, args.hit_k, hypotheses if args.explain else {}, top_spans
    )
    mrr = ", ".join(f"{s} {summary[s]['mrr']:.3f}" for s in SYSTEMS)
    print(f"summary: MRR {mrr} over {len(questions)} questions")
    print(
        f"elapsed: {elapsed:.1f} s (index {index_seconds:.1f} s, "
        f"{len(questions) * len(SYSTEMS)} queries {query_seconds:.1f} s)"
    )
    if args.keep:
        print(f'index kept in {args.keep}; try: llama-car query {args.keep} "질문" --explain')
    return 0
