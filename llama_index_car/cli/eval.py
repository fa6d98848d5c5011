"""``llama-car eval``: run named retrieval systems on a benchmark and write the paper's tables."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from llama_index_car.cli._args import (
    add_cache_and_progress_options,
    add_embed_option,
    existing_dir,
    existing_file,
    int_at_least,
    nonneg_int,
    output_dir,
    positive_int,
    show_progress,
    subcommand,
    unit_float,
)
from llama_index_car.providers import CLI_LLMS, RERANKERS

EXAMPLE = """\
examples:
  llama-car eval ../shared/eval/lhcs_construction --systems bm25,dense,hybrid,car --out out/lhcs
  llama-car eval ../shared/eval/legal_prec2statute --systems bm25,dense,hybrid,car \\
      --max-queries 300 --out out/legal
  llama-car eval docs/ --qa questions.jsonl --systems bm25,dense,reframe:first:dense --out out/x
  llama-car eval ../shared/eval/lhcs_construction --systems hybrid,car --spans --out out/lhcs

systems: bm25 dense hybrid car (offline: z-score fusion of dense + BM25, span re-ranking), and with --llm:
  dense+hyp bm25+exp car car-hyde car-auto; each optionally prefixed 'reframe:<first|all|most_frequent>:', suffixed '@<alpha>' (fusion) or '+rerank'.
outputs: DIR/results.json DIR/runs/<system>.trec DIR/report.md DIR/*.png DIR/per_query.json
  (--spans: DIR/spans.json DIR/spans.md, on sets whose queries carry a reference answer)
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "eval",
        help="evaluate retrieval systems (MRR, Recall, nDCG by overlap stratum, paired tests)",
        description="Run named retrieval systems over a BEIR folder (or an HWPX folder plus a "
        "QA file) and write results.json, TREC runs, a markdown report and figures.",
        epilog=EXAMPLE,
    )
    p.add_argument("data", metavar="DATA", type=existing_dir, help="BEIR folder, or HWPX folder with --qa")
    p.add_argument("--qa", metavar="FILE", type=existing_file, default=None,
                   help="QA JSONL for an HWPX folder (question + gold section or cell)")
    p.add_argument("--systems", default="bm25,dense,hybrid,car",
                   help="comma-separated system names (default: %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", type=output_dir,
                   help="output folder")
    add_embed_option(p)
    p.add_argument("--llm", default="none", choices=CLI_LLMS,
                   help="LLM for the criterion hypothesis and car-hyde (default: %(default)s)")
    p.add_argument("--hypothesizer", default="auto", choices=("auto", "offline", "llm"),
                   help="CAR hypothesizer; auto = llm when --llm is set, else offline "
                        "(car = the offline CAR: z-score fusion of dense + BM25, span re-ranking)")
    p.add_argument("--rerank", default="none", choices=RERANKERS,
                   help="reranker for '+rerank' systems (default: %(default)s)")
    p.add_argument("--alpha", type=unit_float, default=0.5,
                   help="dense weight of fusion systems (default: %(default)s; the offline car keeps "
                        "its own cross-validated alpha unless named as car@ALPHA)")
    p.add_argument("--rrf-k", type=nonneg_int, default=60, help="RRF constant (default: %(default)s)")
    p.add_argument("--depth", type=int_at_least(100), default=100,
                   help="documents per query in every run (default: %(default)s, min 100)")
    p.add_argument("--max-queries", type=positive_int, default=None, metavar="N",
                   help="evaluate the first N queries (file order)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    p.add_argument("--spans", action="store_true",
                   help="also measure the criterion span ranker: for queries with a reference "
                        "answer (metadata.answer) whose gold passage a system retrieved, is its "
                        "top span the one that best covers the answer (vs the first span and a "
                        "random span)")
    p.add_argument("--span-k", type=positive_int, default=10, metavar="K",
                   help="--spans: the gold passage counts when in a system's top K "
                        "(default: %(default)s)")
    add_cache_and_progress_options(p)
    return p


def _command(args: argparse.Namespace) -> str:
    """The ``llama-car eval`` command line that reproduces ``args`` (for the report)."""
    parts = ["llama-car", "eval", str(args.data)]
    if args.qa:
        parts += ["--qa", str(args.qa)]
    from llama_index_car.providers import embed_provider

    parts += ["--systems", str(args.systems), "--out", str(args.out),
              "--embed", embed_provider(args.embed), "--llm", args.llm]
    defaults = {"hypothesizer": "auto", "rerank": "none", "alpha": 0.5, "rrf_k": 60,
                "depth": 100, "max_queries": None, "seed": 0, "span_k": 10}
    for key, default in defaults.items():
        value = getattr(args, key, default)
        if value != default:
            parts += [f"--{key.replace('_', '-')}", str(value)]
    if getattr(args, "spans", False):
        parts.append("--spans")
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    """Execute ``llama-car eval``; returns the exit code."""
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.evaluation.report import write_outputs
    from llama_index_car.evaluation.runner import EvalConfig, load_eval_data, run_evaluation
    from llama_index_car.evaluation.systems import parse_system
    from llama_index_car.providers import resolve_embed_model, resolve_llm, resolve_reranker

    systems = [s.strip() for s in str(args.systems).split(",") if s.strip()]
    specs = [parse_system(s) for s in systems]  # fail fast on a typo
    if args.depth < 100:
        raise ConfigurationError(f"--depth {args.depth}: TREC runs are written at depth >= 100")
    if not 0.0 <= args.alpha <= 1.0:
        raise ConfigurationError(f"--alpha {args.alpha} must be in [0, 1]")
    if args.max_queries is not None and args.max_queries < 1:
        raise ConfigurationError(f"--max-queries {args.max_queries} must be >= 1")
    show = show_progress(args)
    llm = resolve_llm(args.llm)
    if args.hypothesizer == "llm" and llm is None:
        raise ConfigurationError("--hypothesizer llm needs --llm anthropic")
    if any(s.base == "car-hyde" for s in specs) and llm is None:
        raise ConfigurationError("car-hyde needs an LLM; pass --llm anthropic or drop car-hyde")
    reranker = None
    if any(s.rerank for s in specs):
        if args.rerank == "none":
            raise ConfigurationError("'+rerank' systems need --rerank cohere")
        reranker = resolve_reranker(args.rerank, top_n=50)
    embed_model = resolve_embed_model(args.embed)
    data = load_eval_data(args.data, args.qa, show_progress=show).head(args.max_queries)
    config = EvalConfig(
        systems=tuple(systems), alpha=args.alpha, rrf_k=args.rrf_k, depth=args.depth,
        hypothesizer=args.hypothesizer, seed=args.seed, show_progress=show,
    )
    outcome = run_evaluation(
        data, config, embed_model, llm=llm, reranker=reranker, cache_dir=args.cache_dir
    )
    command = _command(args)
    written = write_outputs(outcome, args.out, command=command)
    res = outcome.results["systems"]
    print(f"{'system':<24} {'n':>5} {'MRR':>7} {'MRR@10':>7} {'R@10':>7} {'R@50':>7} {'nDCG@10':>8}")
    for name, strata in res.items():
        a = strata["all"]
        print(f"{name:<24} {a['n']:>5} {a['mrr']:>7.3f} {a['mrr@10']:>7.3f} "
              f"{a['recall@10']:>7.3f} {a['recall@50']:>7.3f} {a['ndcg@10']:>8.3f}")
    if args.spans:
        written += _span_outputs(args, data, outcome, embed_model, command)
    print(f"wrote {len(written)} files to {args.out}", file=sys.stderr)
    return 0


def _span_outputs(
    args: argparse.Namespace, data: Any, outcome: Any, embed_model: Any, command: str
) -> list[Any]:
    """``--spans``: the span hit figures (:mod:`llama_index_car.evaluation.span_eval`) printed
    and written to DIR/spans.json and DIR/spans.md; one line and nothing written when the set
    has no reference answers."""
    import json
    from pathlib import Path

    from llama_index_car.embeddings.cache import (
        CachedEmbedding,
        EmbeddingCache,
        default_cache_dir,
    )
    from llama_index_car.evaluation.span_eval import answers_of, evaluate_spans, markdown_table

    answers = answers_of(data.query_metadata)
    if not answers:
        print(f"spans: {data.name} has no reference answers (queries' metadata.answer); "
              "span evaluation skipped")
        return []
    cache = EmbeddingCache(args.cache_dir or default_cache_dir(), embed_model)
    result = evaluate_spans(
        data.nodes, data.queries, data.qrels, answers, outcome.runs, CachedEmbedding(cache),
        k=args.span_k,
    )
    table = markdown_table([(data.name, n, e) for n, e in result["systems"].items()])
    out = Path(args.out)
    json_path, md_path = out / "spans.json", out / "spans.md"
    json_path.write_text(
        json.dumps({"command": command, "dataset": data.name, **result}, ensure_ascii=False,
                   indent=2) + "\n", encoding="utf-8")
    md_path.write_text(f"{table}\n\nCommand: `{command}`\n", encoding="utf-8")
    print(f"\nspans (gold passage in the top {args.span_k}; weights "
          f"{'/'.join(f'{w:g}' for w in result['weights'])}):")
    print(table)
    return [json_path, md_path]
