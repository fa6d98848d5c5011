"""Ablation of the offline CAR: each candidate idea alone, and the final configuration.

Every row fuses ranked lists (depth 100) by weighted RRF (k = 60) over the same embedding
(the default e5, vectors from the shared embedding cache) and the same Kiwi BM25 index, and is
compared with the α = 0.5 hybrid on all queries and on each overlap stratum (MRR). ``s`` is the
router signal (:class:`~llama_index_car.retrievers.routing.LexicalOverlapRouter`: share of the
query's content morphemes in its top-3 BM25 hits), ``a`` the top-5 agreement of the dense and
BM25 rankings (:func:`~llama_index_car.retrievers.routing.top_agreement`).

Rows:

* ``hybrid``            dense ⊕ bm25, α = 0.5 (the baseline of every Δ)
* ``adaptive-α``        dense ⊕ bm25 with α = 0.7 − 0.4·s (0.7 when nothing overlaps, 0.3 at s = 1)
* ``feedback``          + the feedback channel (BM25 over the query and the top-10 idf×tf terms of
                        the top-5 dense hits) at a fixed share p = 0.35 of the lexical weight
* ``feedback·(1−s)``    the same channel, p = 0.7·(1 − s)
* ``feedback·(1−a)``    the same channel, p = 0.7·(1 − a)
* ``criterion-sents``   instead of feedback terms, the two sentences of the top-3 dense hits that
                        state a criterion (a digit, a unit, 기준/이상/이하/이내/미만/초과) and share
                        most content morphemes with the query; p = 0.7·(1 − s)(1 − a)
* ``rocchio-dense``     instead of a lexical channel, dense over q + 0.5·mean(top-3 dense vectors);
                        p = 0.7·(1 − s)(1 − a)
* ``car``               the final offline CAR, run through ``CriterionAwareRetriever`` itself:
                        feedback channel with p = 0.7·(1 − s)(1 − a)

With ``--body`` (embeds every passage body without its title once more, through the cache:
≈ 10 min for lhcs on 2 loaded cores), two title-debiased rows: a dense channel over the body
vectors (same query vector) taking half of the dense weight (``body``: weights
[0.25, 0.5, 0.25]) or the share p = 0.7·(1 − s)(1 − a) of it (``body·(1−s)(1−a)``).

At low overlap the Δ on two halves of the queries (split by sha256 of the query id) is shown
in brackets: how stable a gain is.

Tests (one-sided Wilcoxon, :mod:`llama_index_car.evaluation.stats`), Holm-corrected per set:
family ``gain`` — every row > hybrid at low overlap; family ``loss`` — hybrid > ``car`` on
each stratum (the issue's "never worse" condition: no significant loss).

Run (embeddings come from the cache that ``llama-car eval`` fills; nothing is re-embedded when
it is warm)::

    python benchmarks/car_ablation.py ../shared/eval/lhcs_construction ../shared/eval/autorag_ko \\
        --json out/car_ablation.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_car.evaluation.cache import CachedEmbedding, EmbeddingCache, default_cache_dir
from llama_index_car.evaluation.metrics import mrr
from llama_index_car.evaluation.overlap import compute_overlaps, stratify
from llama_index_car.evaluation.runner import load_eval_data
from llama_index_car.evaluation.stats import holm, paired_test
from llama_index_car.evaluation.systems import SystemFactory
from llama_index_car.fusion import weighted_rrf
from llama_index_car.providers import resolve_embed_model
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.routing import feedback_share

DEPTH = 100
STRATA = ("all", "low", "mid", "high")
SCALE = 0.7
CRITERION = re.compile(r"[0-9]|기준|이상|이하|이내|미만|초과|mm|cm|MPa|kN|%|℃")
SENTENCE = re.compile(r"(?<=[.!?다])\s+|\n+")


def _ids(hits: Sequence[NodeWithScore]) -> list[str]:
    return [h.node.node_id for h in hits]


def _fuse(lists: Sequence[Sequence[str]], weights: Sequence[float]) -> list[str]:
    keep = [(lst, w) for lst, w in zip(lists, weights, strict=True) if w > 0]
    fused = weighted_rrf([lst for lst, _ in keep], [w for _, w in keep], rrf_k=60)
    return [d for d, _ in fused[:DEPTH]]


def channels(
    folder: str, body: bool = False
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]], Any]:
    """Per query: dense, bm25, feedback, criterion-sentence and Rocchio lists, s, a, car."""
    data = load_eval_data(folder)
    cache = EmbeddingCache(default_cache_dir(), resolve_embed_model())
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in data.nodes]
    cache.embed(texts, "text", show_progress=True, desc="embed corpus")
    cache.embed(list(data.queries.values()), "query", show_progress=True, desc="embed queries")
    factory = SystemFactory(data.nodes, CachedEmbedding(cache), depth=DEPTH)
    v = factory.variant(None)
    car = OfflineCriterionRetriever(
        v.dense, v.bm25, pool_top_k=DEPTH, similarity_top_k=DEPTH, feedback_scale=SCALE
    )
    tok = v.bm25.tokenizer  # type: ignore[attr-defined]
    matrix = v.dense.matrix
    row = {n.node_id: i for i, n in enumerate(v.dense.nodes)}
    node_ids = [n.node_id for n in v.dense.nodes]
    body_matrix = None
    if body:
        bodies = [str(data.passages[i]["text"]) for i in node_ids]
        raw = cache.embed(bodies, "text", show_progress=True, desc="embed bodies")
        body_matrix = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    out: dict[str, dict[str, Any]] = {}
    for qid, query in data.queries.items():
        bundle = QueryBundle(query_str=query)
        dense = list(v.dense.retrieve(bundle))
        bm25 = list(v.bm25.retrieve(query))
        plan = car._plan_feedback(query, dense, bm25)
        fb = (
            _ids(v.bm25.retrieve(query + " " + " ".join(plan.terms))) if plan.terms else _ids(bm25)
        )
        # criterion sentences of the top-3 dense hits
        q_morphs = set(tok.content_morphemes(query))
        sentences = [
            s.strip()
            for h in dense[:3]
            for s in SENTENCE.split(h.node.get_content())
            if CRITERION.search(s) and 8 <= len(s) <= 300
        ]
        best = sorted(sentences, key=lambda s: -len(q_morphs & set(tok.content_morphemes(s))))[:2]
        crit = _ids(v.bm25.retrieve(query + " " + " ".join(best))) if best else _ids(bm25)
        # Rocchio on the dense vectors
        qv = v.dense.query_vector(bundle)
        vec = qv + 0.5 * matrix[[row[h.node.node_id] for h in dense[:3]]].mean(axis=0)
        scores = matrix @ (vec / np.linalg.norm(vec))
        rocchio = [node_ids[i] for i in np.argsort(-scores, kind="stable")[:DEPTH]]
        extra: dict[str, Any] = {}
        if body_matrix is not None:
            body_scores = body_matrix @ qv
            extra["body"] = [node_ids[i] for i in np.argsort(-body_scores, kind="stable")[:DEPTH]]
        out[qid] = {
            **extra,
            "dense": _ids(dense), "bm25": _ids(bm25), "feedback": fb, "crit": crit,
            "rocchio": rocchio, "s": plan.signal, "a": plan.agreement,
            "car": _ids(car.retrieve(query)),
        }
    strata = stratify(compute_overlaps(data.queries, data.passages, data.qrels))
    strata["all"] = sorted(q for q in data.qrels if any(r > 0 for r in data.qrels[q].values()))
    return out, strata, data.qrels


def _p(share: float) -> tuple[float, float]:
    return 0.5 * (1.0 - share), 0.5 * share


ROWS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "hybrid": lambda r: _fuse([r["dense"], r["bm25"]], [0.5, 0.5]),
    "adaptive-α": lambda r: _fuse(
        [r["dense"], r["bm25"]], [0.7 - 0.4 * r["s"], 0.3 + 0.4 * r["s"]]
    ),
    "feedback": lambda r: _fuse([r["dense"], r["bm25"], r["feedback"]], [0.5, *_p(0.35)]),
    "feedback·(1−s)": lambda r: _fuse(
        [r["dense"], r["bm25"], r["feedback"]], [0.5, *_p(SCALE * (1 - r["s"]))]
    ),
    "feedback·(1−a)": lambda r: _fuse(
        [r["dense"], r["bm25"], r["feedback"]], [0.5, *_p(SCALE * (1 - r["a"]))]
    ),
    "criterion-sents": lambda r: _fuse(
        [r["dense"], r["bm25"], r["crit"]], [0.5, *_p(feedback_share(r["s"], r["a"], SCALE))]
    ),
    "rocchio-dense": lambda r: _fuse(
        [r["dense"], r["bm25"], r["rocchio"]], [0.5, *_p(feedback_share(r["s"], r["a"], SCALE))]
    ),
    "car": lambda r: r["car"],
}
BODY_ROWS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "body": lambda r: _fuse([r["dense"], r["bm25"], r["body"]], [0.25, 0.5, 0.25]),
    "body·(1−s)(1−a)": lambda r: _fuse(
        [r["dense"], r["bm25"], r["body"]],
        [0.5 * (1 - (p := feedback_share(r["s"], r["a"], SCALE))), 0.5, 0.5 * p],
    ),
}


def evaluate(folder: str, body: bool = False) -> dict[str, Any]:
    per_query, strata, qrels = channels(folder, body)
    rows = dict(ROWS)
    if body:  # the body rows go before the final row
        rows = {**{k: f for k, f in ROWS.items() if k != "car"}, **BODY_ROWS, "car": ROWS["car"]}
    scores = {
        name: {q: mrr(fn(per_query[q]), qrels[q]) for q in strata["all"]}
        for name, fn in rows.items()
    }
    table: dict[str, dict[str, Any]] = {}
    for name, sc in scores.items():
        table[name] = {
            s: {"n": len(strata[s]), "mrr": float(np.mean([sc[q] for q in strata[s]]))}
            for s in STRATA if strata[s]
        }
    base = scores["hybrid"]
    # stability: the low-overlap Δ on two halves of the queries (sha256 of the query id, parity)
    halves = [
        [q for q in strata["low"] if hashlib.sha256(q.encode()).digest()[0] % 2 == h]
        for h in (0, 1)
    ]
    for name, sc in scores.items():
        if name != "hybrid" and strata["low"]:
            table[name]["low"]["delta_halves"] = [
                float(np.mean([sc[q] - base[q] for q in half])) if half else None
                for half in halves
            ]

    def test(a: dict[str, float], b: dict[str, float], stratum: str) -> float:
        qs = strata[stratum]
        return paired_test([a[q] for q in qs], [b[q] for q in qs]).p

    gain_rows = [n for n in rows if n != "hybrid"]
    if strata["low"]:
        gain = holm([test(scores[n], base, "low") for n in gain_rows])
        for n, ph in zip(gain_rows, gain, strict=True):
            table[n]["low"]["p_holm_gain"] = ph
    loss_strata = [s for s in STRATA if strata[s]]
    loss = holm([test(base, scores["car"], s) for s in loss_strata])
    for s, ph in zip(loss_strata, loss, strict=True):
        table["car"][s]["p_holm_loss"] = ph
    return {"set": Path(folder).name, "rows": table}


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    strata = [s for s in STRATA if s in rows["hybrid"]]
    head = " | ".join(f"{s} (n={rows['hybrid'][s]['n']})" for s in strata)
    lines = [f"**{result['set']}**", "", f"| system | {head} |", "|---" * (len(strata) + 1) + "|"]
    for name, cells in rows.items():
        out = []
        for s in strata:
            m = cells[s]["mrr"]
            text = f"{m:.3f}"
            if name != "hybrid":
                text += f" ({m - rows['hybrid'][s]['mrr']:+.3f})"
            if cells[s].get("delta_halves"):
                text += " [" + "/".join(f"{d:+.3f}" for d in cells[s]["delta_halves"]) + "]"
            if "p_holm_gain" in cells[s]:
                text += f" p↑={cells[s]['p_holm_gain']:.3f}"
            if "p_holm_loss" in cells[s]:
                text += f" p↓={cells[s]['p_holm_loss']:.3f}"
            out.append(text)
        lines.append(f"| {name} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+", help="BEIR folders (../shared/eval/<set>)")
    ap.add_argument("--json", help="write the tables here")
    ap.add_argument("--body", action="store_true",
                    help="add the title-debiased body rows (embeds every body once more)")
    args = ap.parse_args(argv)
    results = []
    for folder in args.sets:
        res = evaluate(folder, body=args.body)
        results.append(res)
        print(markdown(res) + "\n", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
