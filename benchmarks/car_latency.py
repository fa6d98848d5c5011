"""CAR latency: overhead over the hybrid, the slow-LLM profile, and cached repeats.

Components are the real ones: ``VectorStoreIndex`` (SimpleVectorStore) + USE query embedding
for the dense channel, ``KiwiBM25Retriever`` for the lexical one, ``WeightedRRFRetriever`` for
the hybrid, ``CriterionAwareRetriever`` for CAR. Document embeddings come from the on-disk
cache (``--cache-dir``); query embeddings are computed live (not cached), as in production.

Measured per query (median and p95 over ``--queries`` queries, after a warm-up):

1. bm25, dense, hybrid (channels 50 deep) and the offline CAR as shipped (channels 100
   deep, z-score fusion, span re-ranking of 50 over the span vectors, loaded in memory;
   ``hypothesizer=None``) → CAR overhead;
2. a stub LLM hypothesizer answering after ``--llm-delay`` s (default 2) with an LRU cache:
   first call (total ≈ max(LLM, hybrid) + expanded channels + fusion, since the hybrid runs
   concurrently), a failing stub (total ≈ max(LLM, hybrid): the speculative hybrid is returned)
   and the cached repeat;
3. if ``llama_index_car.hypothesizers.llm`` is importable: the real ``LLMCriterionHypothesizer``
   over a ``MockLLM`` that sleeps ``--llm-delay`` s, first call and cached repeat.

Run::

    PYTHONPATH=.:readers/llama-index-readers-hwpx python benchmarks/car_latency.py \\
        --dataset lhcs_construction --queries 40
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import TextNode

from llama_index_car._errors import HypothesisError
from llama_index_car.embeddings.cache import EmbeddingCache
from llama_index_car.evaluation.io import load_beir
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis
from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever
from llama_index_car.retrievers.car_offline import OfflineCriterionRetriever
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever
from llama_index_car.tokenizers.kiwi import KiwiTokenizer


class SlowLRUHypothesizer(BaseCriterionHypothesizer):
    """Stub LLM: answers after ``delay`` seconds (or fails), with an in-memory LRU."""

    name = "stub-llm"

    def __init__(self, delay: float, fail: bool = False, maxsize: int = 1024) -> None:
        self.delay = delay
        self.fail = fail
        self.maxsize = maxsize
        self._lru: OrderedDict[str, CriterionHypothesis] = OrderedDict()
        self._lock = threading.Lock()

    def _cached(self, query: str) -> CriterionHypothesis | None:
        with self._lock:
            hit = self._lru.get(query)
            if hit is not None:
                self._lru.move_to_end(query)
                return CriterionHypothesis(hit.text, hit.criteria, hit.source, cached=True)
        return None

    def _answer(self, query: str) -> CriterionHypothesis:
        if self.fail:
            raise HypothesisError("stub LLM failed")
        h = CriterionHypothesis("시공 기준 허용 범위", ("시공기준", "허용범위"), self.name)
        with self._lock:
            self._lru[query] = h
            while len(self._lru) > self.maxsize:
                self._lru.popitem(last=False)
        return h

    def hypothesize(self, query: str) -> CriterionHypothesis:
        hit = self._cached(query)
        if hit is not None:
            return hit
        time.sleep(self.delay)
        return self._answer(query)

    async def ahypothesize(self, query: str) -> CriterionHypothesis:
        hit = self._cached(query)
        if hit is not None:
            return hit
        await asyncio.sleep(self.delay)
        return self._answer(query)


def timed(fn: Callable[[str], Any], queries: Sequence[str]) -> list[float]:
    out = []
    for q in queries:
        start = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - start) * 1000)
    return out


def interleaved(
    systems: dict[str, Callable[[str], Any]], queries: Sequence[str], rounds: int
) -> dict[str, list[float]]:
    """Time every system on every query, round-robin, ``rounds`` times (drift hits all alike)."""
    out: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for q in queries:
            for name, fn in systems.items():
                start = time.perf_counter()
                fn(q)
                out[name].append((time.perf_counter() - start) * 1000)
    return out


def stats(ms: Sequence[float]) -> str:
    p95 = float(np.percentile(ms, 95)) if len(ms) > 1 else ms[0]
    return f"{statistics.median(ms):.1f} | {p95:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--eval-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "eval"
    )
    parser.add_argument("--dataset", default="lhcs_construction")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--llm-queries", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llm-delay", type=float, default=2.0)
    parser.add_argument("--cache-dir", type=Path, default=Path(".car_cache"))
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    from llama_index.core import VectorStoreIndex

    from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding

    ds = load_beir(args.eval_dir / args.dataset)
    nodes = [
        TextNode(id_=d, text=f"{doc.get('title', '')}\n{doc.get('text', '')}")
        for d, doc in ds.corpus.items()
    ]
    use = UniversalSentenceEncoderEmbedding()
    matrix = EmbeddingCache(args.cache_dir / "embeddings", use).embed([n.text for n in nodes])
    embedded = [
        n.model_copy(update={"embedding": [float(x) for x in v]})
        for n, v in zip(nodes, matrix, strict=True)
    ]
    index = VectorStoreIndex(nodes=embedded, embed_model=use)
    tokenizer = KiwiTokenizer()
    dense = index.as_retriever(similarity_top_k=50)
    lexical = KiwiBM25Retriever.from_defaults(nodes=nodes, tokenizer=tokenizer, similarity_top_k=50)
    hybrid = WeightedRRFRetriever.from_alpha(dense, lexical)
    # the offline CAR as shipped: channels DEFAULT_OFFLINE_POOL deep, span vectors loaded
    # (embedded once through the cache), z-score fusion and span re-ranking of 50
    from llama_index_car.embeddings.cache import CachedEmbedding
    from llama_index_car.retrievers.criterion_aware import DEFAULT_OFFLINE_POOL
    from llama_index_car.span_index import SpanIndex

    log("span vectors (cached after the first run) …")
    spans = SpanIndex.from_nodes(
        nodes, CachedEmbedding(EmbeddingCache(args.cache_dir / "embeddings", use))
    )
    dense_p = index.as_retriever(similarity_top_k=DEFAULT_OFFLINE_POOL)
    lexical_p = KiwiBM25Retriever.from_defaults(
        nodes=nodes, tokenizer=tokenizer, similarity_top_k=DEFAULT_OFFLINE_POOL
    )
    car = OfflineCriterionRetriever(dense_p, lexical_p, span_index=spans, embed_model=use)

    queries = list(ds.queries.values())
    warm, qs = queries[:5], queries[5 : 5 + args.queries]
    loop = asyncio.new_event_loop()
    systems: dict[str, Callable[[str], Any]] = {
        "bm25 (KiwiBM25Retriever)": lexical.retrieve,
        "dense (VectorIndexRetriever, USE)": dense.retrieve,
        "hybrid (WeightedRRFRetriever)": hybrid.retrieve,
        "hybrid (async)": lambda q: loop.run_until_complete(hybrid.aretrieve(q)),
        "CAR offline (sync)": car.retrieve,
        "CAR offline (async)": lambda q: loop.run_until_complete(car.aretrieve(q)),
    }
    interleaved(systems, warm, 1)
    rows = interleaved(systems, qs, args.rounds)
    hybrid_med = statistics.median(rows["hybrid (WeightedRRFRetriever)"])

    # the same systems with every embedding served from the on-disk cache: isolates CAR's own
    # compute (Kiwi, matrix ops, fusion, threads) from the USE forward pass, which is the part
    # most disturbed by a shared, loaded CPU
    cache = EmbeddingCache(args.cache_dir / "embeddings", use)
    cached = CachedEmbedding(cache)
    cache.embed([*warm, *qs], "query")
    dense_c = index.as_retriever(similarity_top_k=50, embed_model=cached)
    hybrid_c = WeightedRRFRetriever.from_alpha(dense_c, lexical)
    dense_pc = index.as_retriever(similarity_top_k=DEFAULT_OFFLINE_POOL, embed_model=cached)
    car_c = OfflineCriterionRetriever(dense_pc, lexical_p, span_index=spans, embed_model=cached)
    systems_c: dict[str, Callable[[str], Any]] = {
        "dense, cached embeddings": dense_c.retrieve,
        "hybrid, cached embeddings": hybrid_c.retrieve,
        "CAR offline, cached embeddings": car_c.retrieve,
    }
    interleaved(systems_c, warm, 1)
    rows_c = interleaved(systems_c, qs, args.rounds)
    hybrid_c_med = statistics.median(rows_c["hybrid, cached embeddings"])

    print(
        f"### Latency on {args.dataset} ({len(nodes)} docs), {len(qs)} queries × "
        f"{args.rounds} rounds (interleaved), ms\n"
    )
    print("| system | median | p95 | median − hybrid |")
    print("|---|---|---|---|")
    for name, ms in rows.items():
        print(f"| {name} | {stats(ms)} | {statistics.median(ms) - hybrid_med:+.1f} |")
    print("\n| system (embeddings from the cache) | median | p95 | median − hybrid |")
    print("|---|---|---|---|")
    for name, ms in rows_c.items():
        print(f"| {name} | {stats(ms)} | {statistics.median(ms) - hybrid_c_med:+.1f} |")

    llm_qs = qs[: args.llm_queries]
    slow = SlowLRUHypothesizer(args.llm_delay)
    failing = SlowLRUHypothesizer(args.llm_delay, fail=True)
    car_llm = HypothesisCriterionRetriever(dense, lexical, slow)
    car_fail = HypothesisCriterionRetriever(dense, lexical, failing)
    llm_rows: dict[str, list[float]] = {
        "CAR + stub LLM, first call (sync)": timed(car_llm.retrieve, llm_qs),
        "CAR + stub LLM, cached repeat (sync)": timed(car_llm.retrieve, llm_qs),
        "stub LLM hypothesizer, cached repeat": timed(slow.hypothesize, llm_qs),
        "CAR + failing stub LLM → hybrid fallback": timed(car_fail.retrieve, llm_qs),
    }
    slow2 = SlowLRUHypothesizer(args.llm_delay)
    car_llm2 = HypothesisCriterionRetriever(dense, lexical, slow2)
    llm_rows["CAR + stub LLM, first call (async)"] = timed(
        lambda q: loop.run_until_complete(car_llm2.aretrieve(q)), llm_qs
    )
    llm_rows["CAR + stub LLM, cached repeat (async)"] = timed(
        lambda q: loop.run_until_complete(car_llm2.aretrieve(q)), llm_qs
    )
    try:
        from llama_index.core.llms import CompletionResponse, MockLLM

        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer
    except ImportError:  # pragma: no cover - the other helper's module may be absent
        LLMCriterionHypothesizer = None  # type: ignore[assignment,misc]
    if LLMCriterionHypothesizer is not None:
        delay = args.llm_delay

        class SleepyLLM(MockLLM):
            def complete(
                self, prompt: str, formatted: bool = False, **kw: Any
            ) -> CompletionResponse:
                time.sleep(delay)
                return CompletionResponse(
                    text="가설: 시공 기준 허용 범위\n기준어: 시공기준, 허용범위"
                )

            async def acomplete(
                self, prompt: str, formatted: bool = False, **kw: Any
            ) -> CompletionResponse:
                await asyncio.sleep(delay)
                return CompletionResponse(
                    text="가설: 시공 기준 허용 범위\n기준어: 시공기준, 허용범위"
                )

        real = LLMCriterionHypothesizer(llm=SleepyLLM(max_tokens=None))
        car_real = HypothesisCriterionRetriever(dense, lexical, real)
        llm_rows["CAR + LLMCriterionHypothesizer(MockLLM sleeping), first call"] = timed(
            car_real.retrieve, llm_qs
        )
        llm_rows["CAR + LLMCriterionHypothesizer, cached repeat"] = timed(car_real.retrieve, llm_qs)
        llm_rows["LLMCriterionHypothesizer alone, cached repeat"] = timed(real.hypothesize, llm_qs)
    print(f"\n### Slow hypothesizer ({args.llm_delay:g} s), {len(llm_qs)} queries, ms\n")
    print("| system | median | p95 | median − hybrid |")
    print("|---|---|---|---|")
    for name, ms in llm_rows.items():
        print(f"| {name} | {stats(ms)} | {statistics.median(ms) - hybrid_med:+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
