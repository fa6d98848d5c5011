"""Benchmark: the offline embeddings, multilingual-e5-small (default) vs USE v3, and indexing.

Two tables, every figure measured in this run on the same texts for both models:

1. **Embedding throughput.** The node texts exactly as indexing embeds them
   (``MetadataMode.EMBED``) of (a) the shared HWPX corpus (``HWPXReader`` +
   ``HWPXNodeParser``, chunk 1000/150) and (b) the first ``--lhcs-docs`` documents of
   ``../shared/eval/lhcs_construction/corpus.jsonl`` (as ``llama-car eval`` builds them) are
   embedded with ``get_text_embedding_batch`` (no cache) by each model; docs/s and kchar/s
   are texts and characters over the wall time, and ``e5/USE`` is the ratio of the kchar/s.
   The HWPX figures are the embedding step timed inside the indexing run of table 2; the
   lhcs figures are a standalone call.
2. **Share of ``llama-car index`` time spent embedding.** ``build_index`` (what ``llama-car
   index`` runs) over the HWPX corpus into a temporary folder with an empty embedding cache:
   total seconds, seconds inside the embedding model, their ratio; then the same build again
   over the now warm cache (a rebuild, or an index over texts ``llama-car eval`` already
   embedded).

Each model is loaded and warmed up (one short text) before timing. The machine is shared:
run it with ``nice`` and read the ratio column, which both models share the same load for.

Usage::

    nice -n 10 python benchmarks/embed_bench.py [--corpus ../shared/corpus/hwpx]
        [--lhcs ../shared/eval/lhcs_construction] [--lhcs-docs 60] [--max-files N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus" / "hwpx"
DEFAULT_LHCS = ROOT / ".." / "shared" / "eval" / "lhcs_construction"
MODELS = ("use", "e5")


class TimedEmbedding(BaseEmbedding):
    """Delegates to ``inner`` and adds the wall time of every text-embedding call to
    ``seconds`` (so the embedding share of an indexing run is measured inside that run)."""

    seconds: float = 0.0
    texts: int = 0
    _inner: BaseEmbedding = PrivateAttr()

    def __init__(self, inner: BaseEmbedding, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", inner.model_name)
        kwargs.setdefault("embed_batch_size", inner.embed_batch_size)
        super().__init__(**kwargs)
        self._inner = inner

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        start = time.perf_counter()
        out = self._inner.get_text_embedding_batch(texts)
        self.seconds += time.perf_counter() - start
        self.texts += len(texts)
        return out


def load_model(name: str) -> BaseEmbedding:
    """The model for ``name`` (``use`` or ``e5``), loaded and warmed up on one short text."""
    from llama_index_car.providers import resolve_embed_model

    model = resolve_embed_model(name)
    model.get_text_embedding_batch(["워밍업 문장"])
    model.get_query_embedding("워밍업")
    return model


def hwpx_files(corpus: Path, max_files: int | None) -> list[Path]:
    """The corpus files, in path order, at most ``max_files``."""
    from llama_index_car.folder.sources import find_source_files

    files = find_source_files(corpus)
    return files[:max_files] if max_files else files


def lhcs_texts(folder: Path, n_docs: int) -> list[str]:
    """The embed texts of the first ``n_docs`` documents of a BEIR folder."""
    from llama_index.core.schema import MetadataMode

    from llama_index_car.evaluation.runner import load_eval_data

    data = load_eval_data(folder, None)
    return [n.get_content(metadata_mode=MetadataMode.EMBED) for n in data.nodes[:n_docs]]


def time_embedding(model: BaseEmbedding, texts: Sequence[str]) -> float:
    """Wall seconds of one uncached ``get_text_embedding_batch`` over ``texts``."""
    start = time.perf_counter()
    model.get_text_embedding_batch(list(texts))
    return time.perf_counter() - start


def time_index(model: BaseEmbedding, files: Sequence[Path]) -> dict[str, float]:
    """``build_index`` over ``files`` with an empty cache, then again over the warm cache."""
    from llama_index_car.folder import BuildOptions, build_index

    timed = TimedEmbedding(model)
    with tempfile.TemporaryDirectory(prefix="embed-bench-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        options = BuildOptions(embed_model=timed, cache_dir=root / "cache")
        summary = build_index(files, root / "cold", options)
        cold = time.perf_counter() - start
        embed_seconds, embed_texts = timed.seconds, timed.texts
        start = time.perf_counter()
        build_index(files, root / "warm", options)
        warm = time.perf_counter() - start
    return {
        "nodes": summary.nodes,
        "cold": cold,
        "embed": embed_seconds,
        "embed_texts": embed_texts,
        "warm": warm,
        "warm_embed": timed.seconds - embed_seconds,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements and print the two tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--lhcs", type=Path, default=DEFAULT_LHCS)
    parser.add_argument("--lhcs-docs", type=int, default=60)
    parser.add_argument(
        "--max-files",
        type=int,
        default=None,
        help="index only the first N HWPX files (default: all)",
    )
    args = parser.parse_args(argv)

    from llama_index.core.schema import MetadataMode

    from llama_index_car.folder.sources import parse_nodes, read_documents

    files = hwpx_files(args.corpus, args.max_files)
    docs, failures = read_documents(files)
    hwpx_texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in parse_nodes(docs)]
    lhcs = lhcs_texts(args.lhcs, args.lhcs_docs)
    print(
        f"HWPX corpus: {len(files)} files ({len(failures)} unreadable), {len(hwpx_texts)} "
        f"nodes, {sum(map(len, hwpx_texts)) / 1000:.1f} kchar; lhcs slice: {len(lhcs)} docs, "
        f"{sum(map(len, lhcs)) / 1000:.1f} kchar",
        flush=True,
    )

    throughput: dict[tuple[str, str], tuple[int, int, float]] = {}
    indexing: dict[str, dict[str, float]] = {}
    for name in MODELS:
        model = load_model(name)
        seconds = time_embedding(model, lhcs)
        throughput[("lhcs", name)] = (len(lhcs), sum(map(len, lhcs)), seconds)
        print(f"  {name}: lhcs slice embedded in {seconds:.1f} s", flush=True)
        indexing[name] = run = time_index(model, files)
        throughput[("hwpx", name)] = (len(hwpx_texts), sum(map(len, hwpx_texts)), run["embed"])
        print(
            f"  {name}: HWPX index {run['cold']:.1f} s (embedding {run['embed']:.1f} s), "
            f"warm rebuild {run['warm']:.1f} s",
            flush=True,
        )

    print()
    print(
        f"{'texts':<12} {'n':>5} {'kchar':>7} {'USE docs/s':>11} {'USE kchar/s':>12} "
        f"{'e5 docs/s':>10} {'e5 kchar/s':>11} {'e5/USE':>7}"
    )
    for corpus in ("hwpx", "lhcs"):
        n, chars, _ = throughput[(corpus, "use")]
        rate = {m: (throughput[(corpus, m)][0] / throughput[(corpus, m)][2],
                    throughput[(corpus, m)][1] / 1000 / throughput[(corpus, m)][2])
                for m in MODELS}  # fmt: skip
        label = "HWPX nodes" if corpus == "hwpx" else "lhcs slice"
        print(
            f"{label:<12} {n:>5} {chars / 1000:>7.1f} {rate['use'][0]:>11.2f} "
            f"{rate['use'][1]:>12.2f} {rate['e5'][0]:>10.2f} {rate['e5'][1]:>11.2f} "
            f"{rate['e5'][1] / rate['use'][1]:>7.2f}"
        )
    print()
    print(
        f"{'llama-car index':<16} {'nodes':>6} {'cold s':>8} {'embed s':>8} {'embed %':>8} "
        f"{'warm s':>8} {'cold/warm':>10}"
    )
    for name in MODELS:
        r = indexing[name]
        print(
            f"{name:<16} {int(r['nodes']):>6} {r['cold']:>8.1f} {r['embed']:>8.1f} "
            f"{100 * r['embed'] / r['cold']:>7.0f}% {r['warm']:>8.1f} "
            f"{r['cold'] / r['warm']:>10.1f}"
        )
    ratio = indexing["e5"]["cold"] / indexing["use"]["cold"]
    print(
        f"\ne5 cold index time / USE cold index time: {ratio:.2f}; model time in the warm "
        f"rebuilds: e5 {indexing['e5']['warm_embed']:.2f} s, "
        f"USE {indexing['use']['warm_embed']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
