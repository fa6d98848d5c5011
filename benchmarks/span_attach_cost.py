"""What attaching criterion spans costs per query (5 hits), next to the retrieval itself.

One run over an index folder built here with ``--embed`` (default ``use``, fast) from a HWPX
folder (default: the bundled demo corpus), with the bundled demo questions (any text works:
the cost does not depend on relevance). Per query, median and p95 over ``--repeat`` passes of
the questions:

1. **retrieval** — offline CAR (``criterion_spans=0``, top 5: dense + BM25 + feedback, span
   re-ranking; its query embedding included) and the hybrid (top 5);
2. **attach, cold** — :meth:`CriterionSpanPostprocessor.attach` on CAR's 5 hits with CAR's
   query vector, from a fresh postprocessor (every span text tokenized by Kiwi: the first
   query that meets these nodes);
3. **attach, warm** — the same with the postprocessor's token cache filled (every later
   query meeting the same nodes);
4. **attach, cold, no Kiwi** — a fresh postprocessor with ``lexical_weight=0``: candidates
   built (cells decoded), vectors and cues only;
5. **CAR end to end** — ``criterion_spans=3`` minus ``criterion_spans=0`` (same queries,
   timed in ABBA order; the first pass meets nodes CAR's postprocessor has not cached yet).

Run (not a test; prints a table)::

    python benchmarks/span_attach_cost.py [--corpus DIR ...] [--embed use] [--repeat 3] [--out MD]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from llama_index.core.schema import QueryBundle

from llama_index_car.demo.loader import demo_corpus_dir, load_demo_questions
from llama_index_car.folder import BuildOptions, build_index, load_index
from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor

TOP_K = 5


def _stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return 1e3 * statistics.median(xs), 1e3 * xs[min(len(xs) - 1, int(0.95 * len(xs)))]


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def measure(corpus: Path, embed_name: str, repeat: int) -> tuple[str, dict[str, list[float]]]:
    """One corpus: its summary line and the per-query seconds of every step."""
    questions = [q.question for q in load_demo_questions(None)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "index"
        with contextlib.redirect_stdout(io.StringIO()):
            built = build_index(corpus, out, BuildOptions(embed=embed_name, show_progress=False))
        local = load_index(out)
        if local.spans is None:
            raise SystemExit("the index has no span index")
        car0 = local.as_retriever("car", similarity_top_k=TOP_K, criterion_spans=0)
        car3 = local.as_retriever("car", similarity_top_k=TOP_K, criterion_spans=3)
        hybrid = local.as_retriever("hybrid", similarity_top_k=TOP_K)
        embed = local.embed_model
        tokenizer = local.tokenizer
        for q in questions[:2]:  # warm-up: model load, Kiwi load
            car0.retrieve(q)
            car3.retrieve(q)
            hybrid.retrieve(q)
        rows: dict[str, list[float]] = {k: [] for k in (
            "retrieval: CAR top 5", "retrieval: hybrid top 5", "attach 5 hits, cold",
            "attach 5 hits, warm", "attach 5 hits, cold, no Kiwi", "CAR end to end: spans 3 − 0",
        )}
        spans_per_hit: list[int] = []
        for _ in range(repeat):
            for q in questions:
                vector = embed.get_agg_embedding_from_queries([q])
                bundle = QueryBundle(q, embedding=vector)
                t_car, hits = _timed(partial(car0.retrieve, bundle))
                t_hyb, _ = _timed(partial(hybrid.retrieve, bundle))
                cold = CriterionSpanPostprocessor(local.spans, embed, tokenizer=tokenizer)
                t_cold, attached = _timed(partial(cold.attach, hits, vector, q))
                t_warm, _ = _timed(partial(cold.attach, hits, vector, q))
                nolex = CriterionSpanPostprocessor(local.spans, embed, tokenizer=tokenizer,
                                                   lexical_weight=0.0)
                t_nolex, _ = _timed(partial(nolex.attach, hits, vector, q))
                # ABBA order: drift of the shared machine cancels out of the difference
                t0a, _ = _timed(partial(car0.retrieve, bundle))
                t3a, _ = _timed(partial(car3.retrieve, bundle))
                t3b, _ = _timed(partial(car3.retrieve, bundle))
                t0b, _ = _timed(partial(car0.retrieve, bundle))
                diff = (t3a + t3b - t0a - t0b) / 2
                for key, value in zip(rows, (t_car, t_hyb, t_cold, t_warm, t_nolex, diff),
                                      strict=True):
                    rows[key].append(value)
                spans_per_hit.extend(
                    len(h.node.metadata["criterion_spans"]) for h in attached  # type: ignore[attr-defined]
                )
        n_spans = local.spans.n_spans
    summary = (
        f"`{corpus.name}`: {built.nodes} nodes, {n_spans} spans "
        f"({n_spans / max(built.nodes, 1):.1f}/node), embedding {embed_name}, "
        f"{len(questions)} questions × {repeat}, {TOP_K} hits, "
        f"{statistics.mean(spans_per_hit):.1f} spans attached per hit"
    )
    return summary, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, action="append", default=None,
                    help="HWPX folder (repeatable; default: the demo corpus)")
    ap.add_argument("--embed", default="use", help="embedding provider (default use)")
    ap.add_argument("--repeat", type=int, default=3, help="passes over the questions")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables as markdown")
    args = ap.parse_args()
    lines = [
        "# Cost of attaching criterion spans (5 hits per query)", "",
        f"Measured by `python benchmarks/span_attach_cost.py {' '.join(sys.argv[1:])}` "
        "(written by the script) on a 2-core machine shared with other work; per query, "
        "median and p95 ms.", "",
    ]
    for corpus in args.corpus or [demo_corpus_dir()]:
        summary, rows = measure(corpus, args.embed, args.repeat)
        lines += [summary, "", "| step (per query) | median ms | p95 ms |", "|---|---:|---:|"]
        for key, values in rows.items():
            med, p95 = _stats(values)
            lines.append(f"| {key} | {med:.2f} | {p95:.2f} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
