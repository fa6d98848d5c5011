"""CAR quality on the shared evaluation sets: MRR and Recall@50, overall and by overlap stratum.

Systems (all offline; dense = multilingual USE v3, lexical = KiwiBM25Retriever k1=1.5 b=0.75):

* ``bm25``            lexical(query)
* ``dense``           dense(query)
* ``hybrid``          WeightedRRFRetriever.from_alpha(dense, lexical, alpha=0.5), pool 50
* ``dense+hyp``       dense(query + "\\n" + hypothesis.text)
* ``bm25+exp``        lexical(query + " " + hypothesis.expansion_terms())
* ``car``             CriterionAwareRetriever(route="always"), offline CorpusCriterionHypothesizer
* ``car_auto``        CriterionAwareRetriever(route="auto"), LexicalOverlapRouter defaults

Metrics per query over the returned list (depth 100): MRR (untruncated within the list) and
Recall@50; averaged over all queries and over each overlap stratum (≤0.35 low, 0.35–0.50 mid,
>0.50 high; overlap = share of the query's Kiwi content morphemes in its best gold passage,
title + text, as in the eval READMEs). Plus the router's agreement with the true strata and the
hypothesizer calls it saves, and a paired low-stratum comparison CAR vs hybrid.

Queries: all of a set, or a seeded random sample of ``--max-queries`` (default 300, seed 13).
Embeddings are cached on disk under ``--cache-dir`` (default ``.car_cache``) keyed by model spec
and sha256 of the text; the hypothesizer is persisted there too (JSON + npy).

Run::

    PYTHONPATH=.:readers/llama-index-readers-hwpx python benchmarks/car_quality.py \\
        --eval-dir ../shared/eval --max-queries 300 --json out/car_quality.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car.evaluation.cache import EmbeddingCache
from llama_index_car.evaluation.io import BeirDataset, load_beir
from llama_index_car.evaluation.metrics import mrr, recall_at_k
from llama_index_car.evaluation.overlap import compute_overlaps, stratum
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from llama_index_car.hypothesizers.corpus import CorpusCriterionHypothesizer
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.routing import DEFAULT_ROUTER_THRESHOLD, LexicalOverlapRouter
from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever
from llama_index_car.tokenizers.kiwi import KiwiTokenizer

DEPTH = 100
STRATA = ("low", "mid", "high")
SYSTEMS = ("bm25", "dense", "hybrid", "dense+hyp", "bm25+exp", "car", "car_auto")


class MatrixDenseRetriever(BaseRetriever):
    """Exact cosine retrieval over a unit-norm matrix; honours ``QueryBundle.embedding_strs``.

    Query strings are embedded through ``embed`` (an on-disk cache); several embedding strings
    are averaged, as LlamaIndex's vector retrievers do. Ties: score desc, then id asc.
    """

    def __init__(
        self,
        nodes: Sequence[TextNode],
        matrix: np.ndarray,
        embed: Callable[[str], np.ndarray],
        similarity_top_k: int = 10,
    ) -> None:
        self.nodes = list(nodes)
        self.ids = np.array([n.node_id for n in nodes])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        self.matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
        self.embed = embed
        self.similarity_top_k = similarity_top_k
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        vecs = [self.embed(s) for s in query_bundle.embedding_strs]
        q = np.mean(vecs, axis=0)
        q = q / (np.linalg.norm(q) or 1.0)
        scores = self.matrix @ q
        k = min(self.similarity_top_k, len(self.nodes))
        part = np.argpartition(-scores, k - 1)[:k]
        order = sorted(part.tolist(), key=lambda i: (-float(scores[i]), self.ids[i]))
        return [NodeWithScore(node=self.nodes[i], score=float(scores[i])) for i in order]


class MemoHypothesizer(BaseCriterionHypothesizer):
    """Serves precomputed hypotheses and counts how often CAR asks for one."""

    name = "memo"

    def __init__(self, table: dict[str, CriterionHypothesis]) -> None:
        self.table = table
        self.calls = 0

    def hypothesize(self, query: str) -> CriterionHypothesis:
        self.calls += 1
        return self.table[query]


def sample_queries(ds: BeirDataset, max_queries: int | None, seed: int) -> list[str]:
    qids = list(ds.queries)
    if max_queries is not None and len(qids) > max_queries:
        qids = sorted(random.Random(seed).sample(qids, max_queries), key=qids.index)
    return qids


def ids_of(nodes: Sequence[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in nodes]


def mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


def run_dataset(
    folder: Path, cache_dir: Path, max_queries: int | None, seed: int, log: Callable[[str], None]
) -> dict[str, Any]:
    t0 = time.perf_counter()
    ds = load_beir(folder)
    qids = sample_queries(ds, max_queries, seed)
    queries = {q: ds.queries[q] for q in qids}
    nodes = [
        TextNode(id_=doc_id, text=f"{doc.get('title', '')}\n{doc.get('text', '')}")
        for doc_id, doc in ds.corpus.items()
    ]
    log(f"[{ds.name}] {len(nodes)} docs, {len(qids)} of {len(ds.queries)} queries")

    overlaps = compute_overlaps(queries, ds.corpus, ds.qrels)
    strata = {q: overlaps[q].stratum for q in qids}

    from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding

    use = UniversalSentenceEncoderEmbedding()
    cache = EmbeddingCache(cache_dir / "embeddings", use)
    doc_matrix = cache.embed([n.text for n in nodes], "text", show_progress=False)
    log(f"[{ds.name}] doc embeddings ready ({time.perf_counter() - t0:.0f} s)")

    tokenizer = KiwiTokenizer()
    lexical = KiwiBM25Retriever.from_defaults(
        nodes=nodes, tokenizer=tokenizer, similarity_top_k=DEPTH
    )
    log(f"[{ds.name}] BM25 ready ({time.perf_counter() - t0:.0f} s)")

    corpus_hash = hashlib.sha256("\x00".join(n.text for n in nodes).encode()).hexdigest()[:16]
    hyp_dir = cache_dir / "hypothesizer" / f"{ds.name}-{corpus_hash}"
    if (hyp_dir / "corpus_hypothesizer.json").is_file():
        hyp = CorpusCriterionHypothesizer.from_persist_dir(hyp_dir, embed_model=use)
    else:
        hyp = CorpusCriterionHypothesizer.from_nodes(
            nodes, tokenizer=tokenizer, embed_model=use, embeddings=doc_matrix
        )
        hyp.persist(hyp_dir)
    log(
        f"[{ds.name}] hypothesizer ready: {len(hyp.terms)} terms ({time.perf_counter() - t0:.0f} s)"
    )

    hyp_ms: list[float] = []
    table: dict[str, CriterionHypothesis] = {}
    for q in qids:
        text = queries[q]
        start = time.perf_counter()
        table[text] = hyp.hypothesize(text)
        hyp_ms.append((time.perf_counter() - start) * 1000)

    # pre-embed every dense query string in batches (query, query + "\n" + hypothesis)
    strings = [queries[q] for q in qids] + [
        queries[q] + "\n" + table[queries[q]].text for q in qids
    ]
    vecs = cache.embed(strings, "query")
    memo = {s: v for s, v in zip(strings, vecs, strict=True)}

    def embed(s: str) -> np.ndarray:
        found = memo.get(s)
        return found if found is not None else cache.embed_one(s, "query")

    dense = MatrixDenseRetriever(nodes, doc_matrix, embed, similarity_top_k=DEPTH)
    hybrid = WeightedRRFRetriever.from_alpha(dense, lexical, alpha=0.5, similarity_top_k=DEPTH)
    memo_hyp = MemoHypothesizer(table)
    car = CriterionAwareRetriever(
        dense, lexical, hypothesizer=memo_hyp, similarity_top_k=DEPTH, speculative_hybrid=False
    )
    router = LexicalOverlapRouter(tokenizer=tokenizer)
    memo_auto = MemoHypothesizer(table)
    car_auto = CriterionAwareRetriever(
        dense,
        lexical,
        hypothesizer=memo_auto,
        similarity_top_k=DEPTH,
        route="auto",
        router=router,
        speculative_hybrid=False,
    )

    runs: dict[str, dict[str, list[str]]] = {s: {} for s in SYSTEMS}
    signals: dict[str, float] = {}
    for q in qids:
        text = queries[q]
        h = table[text]
        bm25_hits = lexical.retrieve(text)
        runs["bm25"][q] = ids_of(bm25_hits)
        signals[q] = router.signal(text, bm25_hits)
        runs["dense"][q] = ids_of(dense.retrieve(text))
        runs["hybrid"][q] = ids_of(hybrid.retrieve(text))
        runs["dense+hyp"][q] = ids_of(
            dense.retrieve(QueryBundle(text, custom_embedding_strs=[text + "\n" + h.text]))
        )
        runs["bm25+exp"][q] = ids_of(lexical.retrieve(text + " " + h.expansion_terms()))
        runs["car"][q] = ids_of(car.retrieve(text))
        runs["car_auto"][q] = ids_of(car_auto.retrieve(text))
    log(f"[{ds.name}] runs done ({time.perf_counter() - t0:.0f} s)")

    per_query: dict[str, dict[str, dict[str, float]]] = {}
    for s in SYSTEMS:
        per_query[s] = {
            q: {
                "mrr": mrr(runs[s][q], ds.qrels[q]),
                "r50": recall_at_k(runs[s][q], ds.qrels[q], 50),
            }
            for q in qids
        }
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for s in SYSTEMS:
        summary[s] = {}
        for group in ("all", *STRATA):
            members = [q for q in qids if group == "all" or strata[q] == group]
            summary[s][group] = {
                "n": len(members),
                "mrr": mean([per_query[s][q]["mrr"] for q in members]),
                "r50": mean([per_query[s][q]["r50"] for q in members]),
            }

    # router: decision (signal <= threshold) vs true strata; threshold sweep
    routed = {q: signals[q] <= DEFAULT_ROUTER_THRESHOLD for q in qids}
    router_by_stratum = {
        g: {
            "n": sum(strata[q] == g for q in qids),
            "to_car": sum(routed[q] for q in qids if strata[q] == g),
            "mean_signal": mean([signals[q] for q in qids if strata[q] == g]),
        }
        for g in STRATA
    }
    sweep = []
    for thr in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        pred = {q: signals[q] <= thr for q in qids}
        sweep.append(
            {
                "threshold": thr,
                "acc_low": mean([float(pred[q] == (strata[q] == "low")) for q in qids]),
                "acc_low_mid": mean([float(pred[q] == (strata[q] != "high")) for q in qids]),
                "share_to_car": mean([float(pred[q]) for q in qids]),
            }
        )
    # 3-class agreement when the signal is binned with the same cut points
    agree3 = mean([float(stratum(signals[q]) == strata[q]) for q in qids])

    low = [q for q in qids if strata[q] == "low"]
    paired: dict[str, float] = {
        "n": len(low),
        "car_better_mrr": sum(
            per_query["car"][q]["mrr"] > per_query["hybrid"][q]["mrr"] for q in low
        ),
        "car_worse_mrr": sum(
            per_query["car"][q]["mrr"] < per_query["hybrid"][q]["mrr"] for q in low
        ),
    }
    if len(low) >= 10:
        from scipy.stats import wilcoxon

        diffs = [per_query["car"][q]["mrr"] - per_query["hybrid"][q]["mrr"] for q in low]
        if any(diffs):
            paired["wilcoxon_p_two_sided"] = float(wilcoxon(diffs).pvalue)

    examples = [
        {"query": queries[q], "hypothesis": table[queries[q]].text, "stratum": strata[q]}
        for q in qids[:5]
    ]
    return {
        "dataset": ds.name,
        "n_docs": len(nodes),
        "n_queries": len(qids),
        "n_queries_total": len(ds.queries),
        "n_terms": len(hyp.terms),
        "summary": summary,
        "router": {
            "threshold": DEFAULT_ROUTER_THRESHOLD,
            "by_stratum": router_by_stratum,
            "calls": memo_auto.calls,
            "calls_saved": len(qids) - memo_auto.calls,
            "agreement_3class_binned": agree3,
            "sweep": sweep,
        },
        "hypothesizer_ms": {
            "median": float(np.median(hyp_ms)),
            "p95": float(np.percentile(hyp_ms, 95)),
            "max": float(np.max(hyp_ms)),
        },
        "paired_low_car_vs_hybrid": paired,
        "examples": examples,
        "seconds": time.perf_counter() - t0,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = []
    s = result["summary"]
    n = {g: s["bm25"][g]["n"] for g in ("all", *STRATA)}
    lines.append(
        f"### {result['dataset']} — {result['n_queries']} of {result['n_queries_total']} queries, "
        f"{result['n_docs']} docs, {result['n_terms']} criterion terms"
    )
    lines.append("")
    lines.append(
        f"| system | MRR all (n={n['all']}) | R@50 all | MRR low (n={n['low']}) | R@50 low "
        f"| MRR mid (n={n['mid']}) | R@50 mid | MRR high (n={n['high']}) | R@50 high |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for sys_name in SYSTEMS:
        row = [sys_name]
        for g in ("all", *STRATA):
            row += [f"{s[sys_name][g]['mrr']:.3f}", f"{s[sys_name][g]['r50']:.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    r = result["router"]
    lines.append("")
    lines.append(
        f"Router (threshold {r['threshold']}): hypothesizer called for {r['calls']} of "
        f"{result['n_queries']} queries ({r['calls_saved']} calls saved); "
        f"3-class agreement of the binned signal with the true strata "
        f"{r['agreement_3class_binned']:.3f}."
    )
    lines.append("")
    lines.append("| true stratum | n | routed to CAR | mean signal |")
    lines.append("|---|---|---|---|")
    for g in STRATA:
        b = r["by_stratum"][g]
        share = b["to_car"] / b["n"] if b["n"] else float("nan")
        lines.append(f"| {g} | {b['n']} | {b['to_car']} ({share:.0%}) | {b['mean_signal']:.3f} |")
    lines.append("")
    lines.append("| threshold | acc (target low) | acc (target low+mid) | share to CAR |")
    lines.append("|---|---|---|---|")
    for row in r["sweep"]:
        lines.append(
            f"| {row['threshold']} | {row['acc_low']:.3f} | {row['acc_low_mid']:.3f} "
            f"| {row['share_to_car']:.3f} |"
        )
    p = result["paired_low_car_vs_hybrid"]
    hm = result["hypothesizer_ms"]
    lines.append("")
    lines.append(
        f"Low stratum, CAR vs hybrid per query (MRR): better {p['car_better_mrr']}, worse "
        f"{p['car_worse_mrr']} of {p['n']}"
        + (
            f"; Wilcoxon two-sided p={p['wilcoxon_p_two_sided']:.3g}"
            if "wilcoxon_p_two_sided" in p
            else ""
        )
        + f". Offline hypothesizer: median {hm['median']:.1f} ms, p95 {hm['p95']:.1f} ms per query."
    )
    lines.append("")
    for ex in result["examples"][:3]:
        lines.append(f"- ({ex['stratum']}) {ex['query'][:80]} → `{ex['hypothesis']}`")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--eval-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "eval"
    )
    parser.add_argument("--datasets", nargs="*", default=None, help="folder names (default: all)")
    parser.add_argument("--max-queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--cache-dir", type=Path, default=Path(".car_cache"))
    parser.add_argument("--json", type=Path, default=None, help="write all results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    names = args.datasets or sorted(p.name for p in args.eval_dir.iterdir() if p.is_dir())
    results = []
    for name in names:
        res = run_dataset(args.eval_dir / name, args.cache_dir, args.max_queries, args.seed, log)
        results.append(res)
        print(markdown(res), flush=True)
        print(flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
