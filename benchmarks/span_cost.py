"""What span ranking costs: latency per query, bytes per node, float16 loss, embedding time.

All in one run over a BEIR set (default ``lhcs_construction``), with the default embedding
(vectors of nodes and spans from the shared cache that ``llama-car eval`` fills):

1. **latency** — per query, median and p95 over the set's queries, of (a) the hybrid's
   fusion step (weighted RRF of the dense and BM25 lists, depth 100), (b) the offline CAR's
   fusion step (z-score fusion of the same lists' scores, β = 0.3), (c) span ranking of a
   20-, 50- and 100-candidate pool as the offline CAR ships it (the span step of
   :func:`~llama_index_car.fusion.criterion_ranking` at the default span weight: the pool's
   best-span cosines from the span index, standardised and added) and, for comparison, with
   rank fusion (:func:`~llama_index_car.postprocessors.span_rerank.rerank_by_spans`, the
   ``SpanReranker`` postprocessor's, explained copies included), with the span vectors
   loaded; each as a ratio to (a). The target is ≤ 10 ms per 50-candidate pool on 2 cores.
2. **storage** — spans per node, bytes per node of ``vectors.npy`` and ``spans.json`` as
   persisted, and the memory model at 10⁵ and 10⁶ nodes (same spans/node and dimension).
3. **float16 loss** — over every query × the spans of its 100 candidates: max and mean
   |cos(float16) − cos(float32)|, and how often the best span of a node changes.
4. **embedding time** — the real model (no cache) on the first ``--sample`` nodes: their
   section texts vs their spans, seconds and the ratio (the extra index-time cost).

Run::

    python benchmarks/span_cost.py ../shared/eval/lhcs_construction > docs/results/span_cost.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_car.embeddings.cache import CachedEmbedding, EmbeddingCache, default_cache_dir
from llama_index_car.evaluation.runner import load_eval_data
from llama_index_car.evaluation.systems import SystemFactory
from llama_index_car.fusion import span_zscore_fusion, weighted_rrf, zscore_fusion
from llama_index_car.postprocessors.span_rerank import rerank_by_spans
from llama_index_car.providers import resolve_embed_model
from llama_index_car.retrievers.criterion_aware import DEFAULT_OFFLINE_ALPHA, DEFAULT_SPAN_Z_WEIGHT
from llama_index_car.span_index import SpanIndex
from llama_index_car.spans import node_spans


def unit(vec: list[float]) -> np.ndarray:
    """``vec`` as a unit float32 vector (the dense channel's cosine)."""
    v = np.asarray(vec, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def _ms(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return 1e3 * statistics.median(xs), 1e3 * xs[min(len(xs) - 1, int(0.95 * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", nargs="?", default="../shared/eval/lhcs_construction")
    ap.add_argument("--sample", type=int, default=60, help="nodes embedded live (section 4)")
    args = ap.parse_args()
    data = load_eval_data(args.dataset)
    model = resolve_embed_model()
    cache = EmbeddingCache(default_cache_dir(), model)
    embed = CachedEmbedding(cache)
    factory = SystemFactory(data.nodes, embed, depth=100)
    v = factory.variant(None)
    spans = SpanIndex.from_nodes(v.nodes, embed, show_progress=True)

    # 1. latency
    fuse_t: list[float] = []
    zfuse_t: list[float] = []
    span_t: dict[int, list[float]] = {20: [], 50: [], 100: []}
    rrf_t: list[float] = []
    loss: list[float] = []
    changed = total = 0
    for query in data.queries.values():
        qv = unit(factory.embed_model.get_query_embedding(query))
        dense = list(v.dense.retrieve(QueryBundle(query_str=query, embedding=list(qv))))
        bm25 = list(v.bm25.retrieve(query))
        t0 = time.perf_counter()
        fused = weighted_rrf(
            [[h.node.node_id for h in dense], [h.node.node_id for h in bm25]], [0.5, 0.5]
        )
        fuse_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        zfused = zscore_fusion(
            [
                [(h.node.node_id, float(h.score or 0.0)) for h in dense],
                [(h.node.node_id, float(h.score or 0.0)) for h in bm25],
            ],
            [DEFAULT_OFFLINE_ALPHA, 1.0 - DEFAULT_OFFLINE_ALPHA],
        )
        zfuse_t.append(time.perf_counter() - t0)
        by_id = {h.node.node_id: h.node for h in dense + bm25}
        pool = [NodeWithScore(node=by_id[d], score=s) for d, s in fused[:100]]
        for n in span_t:
            head = zfused[:n]
            t0 = time.perf_counter()  # criterion_ranking's span step over an n-node pool
            ids = [d for d, _ in head]
            best = [h.score if h is not None else None for h in spans.best_spans(qv, ids)]
            span_zscore_fusion(ids, [x for _, x in head], best, DEFAULT_SPAN_Z_WEIGHT)
            span_t[n].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rerank_by_spans(pool[:50], spans, qv, pool=50)
        rrf_t.append(time.perf_counter() - t0)
        # 3. float16 loss against the float32 cache vectors
        for nws in pool:
            texts = [s.text for s in spans.spans_of(nws.node.node_id)]
            if not texts:
                continue
            v32 = cache.embed(texts, "text")
            v32 /= np.linalg.norm(v32, axis=1, keepdims=True)
            c32 = v32 @ qv
            c16 = v32.astype(np.float16).astype(np.float32) @ qv
            loss.extend(np.abs(c32 - c16).tolist())
            changed += int(np.argmax(c32) != np.argmax(c16))
            total += 1
    f_med, f_p95 = _ms(fuse_t)
    print(f"## span ranking cost on {Path(args.dataset).name} ({len(data.queries)} queries)\n")
    print("| step | median ms | p95 ms | × hybrid fusion |")
    print("|---|---|---|---|")
    print(f"| hybrid fusion (weighted RRF, depth 100) | {f_med:.2f} | {f_p95:.2f} | 1.0 |")
    med, p95 = _ms(zfuse_t)
    print(f"| car fusion (z-score, depth 100) | {med:.2f} | {p95:.2f} | {med / f_med:.1f} |")
    for n, ts in span_t.items():
        med, p95 = _ms(ts)
        print(
            f"| span ranking (z, as shipped), {n}-candidate pool | {med:.2f} | {p95:.2f} "
            f"| {med / f_med:.1f} |"
        )
    med, p95 = _ms(rrf_t)
    print(
        f"| span ranking (rank fusion), 50-candidate pool | {med:.2f} | {p95:.2f} "
        f"| {med / f_med:.1f} |"
    )

    # 2. storage
    with tempfile.TemporaryDirectory() as tmp:
        spans.persist(tmp)
        vec_b = (Path(tmp) / "vectors.npy").stat().st_size
        rec_b = (Path(tmp) / "spans.json").stat().st_size
    n_nodes = len(spans)
    per_node = spans.n_spans / n_nodes
    print(
        f"\n{spans.n_spans:,} spans over {n_nodes:,} nodes ({per_node:.2f} per node), "
        f"dim {spans.dim}, float16"
    )
    print("\n| nodes | vectors.npy | spans.json | total |")
    print("|---|---|---|---|")
    print(
        f"| {n_nodes:,} (measured) | {vec_b / 1e6:.2f} MB | {rec_b / 1e6:.2f} MB | "
        f"{(vec_b + rec_b) / 1e6:.2f} MB |"
    )
    for n in (10**5, 10**6):
        vb, rb = vec_b / n_nodes * n, rec_b / n_nodes * n
        print(
            f"| {n:,} (model) | {vb / 1e9:.2f} GB | {rb / 1e9:.2f} GB | {(vb + rb) / 1e9:.2f} GB |"
        )
    print(
        f"\nbytes per node: vectors {vec_b / n_nodes:,.0f}, records {rec_b / n_nodes:,.0f} "
        "(the records hold the span texts; loaded in memory with the index)"
    )
    print(
        f"\nfloat16 loss over {len(loss):,} query×span cosines: max {max(loss):.5f}, "
        f"mean {statistics.fmean(loss):.6f}; best span changed for {changed} of {total:,} "
        "query×node pairs"
    )

    # 4. embedding time (live model, no cache)
    sample = v.nodes[: args.sample]
    node_texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in sample]
    span_texts = [s.text for n in sample for s in node_spans(n)]
    model.get_text_embedding_batch(node_texts[:4])  # warm-up (engine start, graph v3 calibration)
    t0 = time.perf_counter()
    model.get_text_embedding_batch(node_texts)
    t_nodes = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.get_text_embedding_batch(span_texts)
    t_spans = time.perf_counter() - t0
    print(
        f"\nembedding {len(sample)} nodes live: sections {t_nodes:.1f} s "
        f"({sum(map(len, node_texts)):,} chars), their {len(span_texts)} spans {t_spans:.1f} s "
        f"({sum(map(len, span_texts)):,} chars): spans cost {t_spans / t_nodes:.2f}× the "
        "section embedding"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
