"""Criterion spans, measured: is the span ranker's first span the one that answers? (issue 19)

For the sets whose queries carry a reference answer (``metadata.answer``), the figures of
``llama-car eval --spans`` (:mod:`llama_index_car.evaluation.span_eval`) for the ``hybrid`` and
``car`` systems with the span ranker's default weights (vector 1.0, lexical 0.3, cue 0.1), and
a cross-validation of those weights:

* **grid** — ``(1.0, lexical, cue)`` for lexical ∈ {0, 0.15, 0.3, 0.6, 1, 2} and
  cue ∈ {0, 0.1, 0.2, 0.4} (the default first, so ties keep it);
* **5-fold CV over queries**, the folds of ``benchmarks/span_cv.py`` (``sha256(query id)[0]
  mod 5``): for each held-out fold, the point with the best mean (over the sets) top-1 hit
  rate on the other four folds is scored on the held-out fold; queries are those ``car``
  scores (gold passage in its top 10, ≥ 2 spans, some answer overlap).
* the default changes only if the CV estimate beats it on every set with a one-sided exact
  McNemar p < 0.05 on the pooled queries; otherwise the untuned defaults stand.

The retrieval runs are those of ``llama-car eval`` (:func:`run_evaluation`), embeddings from the
shared cache (no re-embedding when the cache is warm).

Run::

    python benchmarks/span_eval.py ../shared/eval/lhcs_construction ../shared/eval/autorag_ko \\
        --json docs/results/span_eval.json --markdown docs/results/span_eval.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from span_cv import FOLDS, fold_of  # noqa: E402  (the CV folds of the span-ranking issue)

from llama_index_car.embeddings.cache import (  # noqa: E402
    CachedEmbedding,
    EmbeddingCache,
    default_cache_dir,
)
from llama_index_car.evaluation.runner import EvalConfig, load_eval_data, run_evaluation  # noqa: E402
from llama_index_car.evaluation.span_eval import (  # noqa: E402
    SpanRanker,
    answers_of,
    evaluate_spans,
    markdown_table,
)
from llama_index_car.evaluation.span_hits import first_span_test, hit_at  # noqa: E402
from llama_index_car.providers import resolve_embed_model  # noqa: E402
from llama_index_car.span_index import SpanIndex  # noqa: E402

SYSTEMS = ("hybrid", "car")
DEFAULT = (1.0, 0.3, 0.1)
LEXICAL = (0.0, 0.15, 0.3, 0.6, 1.0, 2.0)
CUE = (0.0, 0.1, 0.2, 0.4)
CV_SYSTEM = "car"


def grid() -> list[tuple[float, float, float]]:
    points = [DEFAULT]
    points += [(1.0, lex, cue) for lex, cue in itertools.product(LEXICAL, CUE)
               if (1.0, lex, cue) != DEFAULT]
    return points


def collect(folder: str) -> dict[str, Any]:
    """The default-weight span figures of one set and the per-point hits for the CV."""
    data = load_eval_data(folder)
    answers = answers_of(data.query_metadata)
    embed = resolve_embed_model()
    config = EvalConfig(systems=SYSTEMS, show_progress=False, n_resamples=200)
    outcome = run_evaluation(data, config, embed)
    cached = CachedEmbedding(EmbeddingCache(default_cache_dir(), embed))
    result = evaluate_spans(data.nodes, data.queries, data.qrels, answers, outcome.runs, cached)
    # the CV queries: those car scores; their gold passage and best set do not depend on the
    # weights, only the ranking does
    records = result["queries"]
    kept = list(result["systems"][CV_SYSTEM]["qids"])
    by_id = {n.node_id: n for n in data.nodes}
    golds = sorted({records[q]["gold"] for q in kept})
    ranker = SpanRanker(SpanIndex.from_nodes([by_id[d] for d in golds], cached), cached)
    shape = (len(grid()), len(kept))
    hits = {1: np.zeros(shape, bool), 3: np.zeros(shape, bool)}
    for i, point in enumerate(grid()):
        ranker.set_weights(point)
        for j, q in enumerate(kept):
            order = ranker.rank(by_id[records[q]["gold"]], data.queries[q])
            if point == DEFAULT and list(order) != records[q]["ranking"]:
                raise RuntimeError(f"{q}: the CV's default ranking differs from evaluate_spans'")
            for k in hits:
                hits[k][i, j] = hit_at(order, records[q]["best"], k)
    return {"name": data.name, "result": result, "kept": kept, "hits": hits}


def cross_validate(sets: Sequence[dict[str, Any]]) -> dict[str, Any]:
    points = grid()
    folds = [np.asarray([fold_of(q) for q in s["kept"]]) for s in sets]
    held = [{k: np.zeros(len(s["kept"]), bool) for k in (1, 3)} for s in sets]
    chosen = []
    for f in range(FOLDS):
        train = np.mean(
            [s["hits"][1][:, fo != f].mean(axis=1) for s, fo in zip(sets, folds, strict=True)],
            axis=0,
        )
        best = int(np.argmax(train))
        chosen.append(points[best])
        for s, fo, h in zip(sets, folds, held, strict=True):
            for k in (1, 3):
                h[k][fo == f] = s["hits"][k][best, fo == f]
    all_best = int(np.argmax(np.mean([s["hits"][1].mean(axis=1) for s in sets], axis=0)))
    rows = []
    pooled_cv: list[bool] = []
    pooled_default: list[bool] = []
    for s, h in zip(sets, held, strict=True):
        default = s["hits"][1][0]
        test = first_span_test(h[1].tolist(), default.tolist())
        rows.append({
            "set": s["name"], "n": len(s["kept"]),
            "default_top1": float(default.mean()), "default_top3": float(s["hits"][3][0].mean()),
            "cv_top1": float(h[1].mean()), "cv_top3": float(h[3].mean()),
            "cv_vs_default": test,
        })
        pooled_cv += h[1].tolist()
        pooled_default += default.tolist()
    pooled = first_span_test(pooled_cv, pooled_default)
    change = all(r["cv_top1"] > r["default_top1"] for r in rows) and pooled["p"] < 0.05
    return {"grid": [list(p) for p in points], "fold_choices": [list(c) for c in chosen],
            "chosen_on_all": list(points[all_best]), "rows": rows, "pooled_cv_vs_default": pooled,
            "change_default": change}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    sets = []
    for folder in args.sets:
        s = collect(folder)
        print(f"  {s['name']}: {len(s['kept'])} queries scored by car", file=sys.stderr)
        sets.append(s)
    cv = cross_validate(sets)
    rows = [(s["name"], n, s["result"]["systems"][n]) for s in sets for n in SYSTEMS]
    command = "python benchmarks/span_eval.py " + " ".join(args.sets)
    if args.json:
        command += f" --json {args.json}"
    if args.markdown:
        command += f" --markdown {args.markdown}"
    w = "/".join(f"{x:g}" for x in DEFAULT)
    md = [
        "# Span hit rates (generated by `benchmarks/span_eval.py`)",
        "",
        f"Queries with a reference answer whose gold passage the system retrieved in its top 10. "
        f"Span ranker: `CriterionSpanPostprocessor`, default weights vector/lexical/cue = {w} "
        "(untuned). Best span(s): maximal share of the answer's Kiwi content morphemes "
        "(ties: a set). Baselines: the passage's first span; a random span (expected value: "
        "|best|/|spans| for top-1, the hypergeometric 1 − C(n−b,3)/C(n,3) for top-3). "
        "p (vs first): exact McNemar (one-sided binomial test on the discordant queries); "
        "p (vs random): exact Poisson-binomial test of the hit count under a random span order. "
        "MRR: 1/rank of the first best span (random-order expectation in brackets).",
        "",
        markdown_table(rows),
        "",
        "## Cross-validated weights (5-fold CV over queries, span_cv.py's folds)",
        "",
        "| set | n | top-1 default | top-1 CV | top-3 default | top-3 CV | p (CV > default) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in cv["rows"]:
        md.append(f"| {r['set']} | {r['n']} | {r['default_top1']:.3f} | {r['cv_top1']:.3f} "
                  f"| {r['default_top3']:.3f} | {r['cv_top3']:.3f} | {r['cv_vs_default']['p']:.3f} |")
    fmt = ", ".join("/".join(f"{x:g}" for x in c) for c in cv["fold_choices"])
    md += [
        "",
        f"Grid: vector 1, lexical ∈ {{{', '.join(f'{x:g}' for x in LEXICAL)}}}, cue ∈ "
        f"{{{', '.join(f'{x:g}' for x in CUE)}}}; per-fold choices: {fmt}; pooled CV vs "
        f"default p = {cv['pooled_cv_vs_default']['p']:.3f}; chosen on all queries: "
        f"{'/'.join(f'{x:g}' for x in cv['chosen_on_all'])}. Decision rule (change the default "
        "only if the CV estimate beats it on every set and pooled p < 0.05): "
        + ("**change** the default." if cv["change_default"] else "keep the untuned default."),
        "",
        f"Command: `{command}`",
        "",
    ]
    text = "\n".join(md)
    print(text)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text, encoding="utf-8")
    if args.json:
        out = {
            "command": command, "seconds": time.perf_counter() - started,
            "sets": {s["name"]: {k: v for k, v in s["result"].items() if k != "queries"}
                     for s in sets},
            "cv": cv,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n",
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
