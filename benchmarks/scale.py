"""Benchmark: the index at 10^4 / 10^5 / 10^6 synthetic sections, two code versions in one run
(issue 39, Deliver 4).

**The corpus.** Sections are recombined from real ones: the pool is every passage of the
three eval sets (lhcs, autorag, legal; ``"## title\\n\\ntext"``) and every node the HWPX reader
and node parser make of ``../shared/corpus/hwpx`` (tables with their ``cells``). A synthetic
section copies a pool table node whole (so table-row spans keep their real share), or joins
the title and first half of the sentences of one text section to the second half of another's
(so Kiwi and BM25 see real Korean, and sentence spans keep their real length). The mix of
table and text sections follows the pool's. Metadata: ``file_name`` (50 sections per
synthetic file) and ``section_title``, excluded from the embedded text like ``llama-car eval``.

**Vectors.** Each section's vector is a real e5 passage vector (the eval sets, embedded once
by ``_eval_vectors.py``) drawn at random, plus Gaussian noise (σ = ``--noise`` per component),
renormalised; span vectors likewise. Both are generated as numpy arrays a chunk at a time (the
span vectors into a mapped float16 file handed to ``SpanIndex``'s constructor, the node vectors
into the flat store's state), never as Python lists of floats: at 10^6 sections the 6.3 x 10^6
span vectors would be ~30 GB of floats. Embedding 10^6 real texts with
the offline e5 here (~5-9 kchar/s on two cores, ~5 x 10^8 characters) would take one to three
days, so no synthetic text is embedded. Query vectors are the real e5 vectors of the eval
queries, looked up (so "query embedding" is excluded from every latency and reported apart).

**Tokens.** Kiwi runs once over the pool's pieces (titles, sentences, table sections; cached
in ``--cache``) and a synthetic section's tokens are its pieces' tokens concatenated, handed to
the index through its token cache (``token_cache=``): BM25 is built from real Kiwi tokens
without re-running Kiwi on 10^6 recombined texts (throughput reported apart).

**What is measured**, for each code version given with ``--code LABEL=ROOT`` (a checkout of
this repository; default: the one this script is in, labelled ``this``), every child process
running with ``PYTHONPATH=ROOT`` (``CriterionAwareIndex`` over the nodes with their vectors in
the index's default in-memory vector store — ``SimpleVectorStore`` before issue 39 phase 2,
the flat store after — then ``persist``/``load``: the generation ``llama-car index`` writes,
without ``car_index.json``): build s (cutting the spans, the flat state or vector store over
the vectors, BM25 and the index; generating the synthetic vectors is not in it), persist s,
folder bytes per node (per file), then in a fresh process ``load`` s, resident memory after
load and after the queries, and p50/p95 per retriever kind (``bm25``, ``dense``, ``hybrid``,
``car``; top 10) over the eval queries. ``--slow LABEL`` marks a version whose dense channel
is too slow to query every query above ``--fast-max`` sections (``--slow-queries`` then).
Sizes where a version cannot run within this machine are reported from the memory model
(bytes per node measured at the smaller sizes), not run.

Usage::

    nice -n 10 python benchmarks/_eval_vectors.py --cache /tmp/car-scale/cache lhcs autorag legal
    git archive 344d17f | tar -x -C /tmp/car-main     # "today's code" (before phase 2), frozen
    nice -n 10 python benchmarks/scale.py --cache /tmp/car-scale/cache \
        --sizes 10000 100000 1000000 --code today=/tmp/car-main this=. --slow today \
        --max-n today=100000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _proc import rss_mb  # noqa: E402 - after the path insert

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
KINDS = ("bm25", "dense", "hybrid", "car")
_SENT = re.compile(r"(?<=[.!?다])\s+")


# ----------------------------------------------------------------------------- the pool
def _pool_nodes() -> list[dict[str, Any]]:
    from _eval_vectors import SETS, load_set

    out: list[dict[str, Any]] = []
    for name in SETS:
        _, texts, _, _, _ = load_set(name)
        out.extend({"text": t, "cells": None} for t in texts)
    from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

    reader, parser = HWPXReader(split_sections=True), HWPXNodeParser()
    for path in sorted((SHARED / "corpus" / "hwpx").glob("*.hwpx")):
        try:
            nodes = parser.get_nodes_from_documents(reader.load_data(path))
        except Exception:  # noqa: BLE001 - unreadable sample files are skipped
            continue
        for n in nodes:
            out.append({"text": n.get_content(), "cells": n.metadata.get("cells")})
    return out


def pool(cache: Path) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The pool sections split into pieces, and the Kiwi tokens of every piece (cached)."""
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    tok = KiwiTokenizer()
    path = cache / f"scale-pool-{tok.spec_hash[:16]}.json"
    if path.exists():
        got = json.loads(path.read_text())
        return got["sections"], got["tokens"]
    sections = []
    for node in _pool_nodes():
        text = node["text"]
        if node["cells"]:
            sections.append({"title": "", "pieces": [text], "cells": node["cells"]})
            continue
        title, body = (text.split("\n\n", 1) + [""])[:2] if text.startswith("## ") else ("", text)
        pieces = [p for p in _SENT.split(body) if p]
        sections.append({"title": title, "pieces": pieces, "cells": None})
    uniq = sorted({p for s in sections for p in [s["title"], *s["pieces"]] if p})
    t0 = time.perf_counter()
    toks = tok.tokenize_batch(uniq)
    print(f"[pool] Kiwi: {sum(map(len, uniq)):,} characters in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr, flush=True)
    tokens = dict(zip(uniq, toks, strict=True))
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sections": sections, "tokens": tokens}, ensure_ascii=False))
    return sections, tokens


def _passages(cache: Path, sets: list[str]) -> np.ndarray:
    from _eval_vectors import vectors

    return np.concatenate([vectors(s, cache)[0] for s in sets])


def _unit_rows(e5: np.ndarray, noise: float, rng: np.random.Generator, m: int) -> np.ndarray:
    """``m`` float32 unit rows: a real e5 passage vector drawn at random plus Gaussian noise."""
    v = e5[rng.integers(0, len(e5), m)] + noise * rng.standard_normal((m, e5.shape[1]), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32, copy=False)


def generate(n: int, cache: Path, noise: float, vector_sets: list[str], seed: int = 0,
             chunk: int = 50_000) -> tuple[list[Any], dict[str, list[str]], np.ndarray, np.ndarray]:
    """``(nodes, {EMBED text: tokens}, e5 passage vectors, the nodes' vectors)`` of ``n``
    sections; the vectors are one float32 array filled ``chunk`` rows at a time (no lists of
    floats)."""
    from llama_index.core.schema import TextNode

    sections, piece_tokens = pool(cache)
    e5 = _passages(cache, vector_sets).astype(np.float32)
    rng = np.random.default_rng(seed)
    tables = [s for s in sections if s["cells"]]
    texts = [s for s in sections if not s["cells"] and s["pieces"]]
    p_table = len(tables) / (len(tables) + len(texts))
    vecs = np.empty((n, e5.shape[1]), dtype=np.float32)
    for lo in range(0, n, chunk):
        vecs[lo : lo + chunk] = _unit_rows(e5, noise, rng, min(chunk, n - lo))
    nodes, token_map = [], {}
    for i in range(n):
        if tables and rng.random() < p_table:
            s = tables[rng.integers(len(tables))]
            text, parts, meta = s["pieces"][0], [s["pieces"][0]], {"cells": s["cells"]}
            title = ""
        else:
            a, b = texts[rng.integers(len(texts))], texts[rng.integers(len(texts))]
            parts = a["pieces"][: max(1, len(a["pieces"]) // 2)] + b["pieces"][len(b["pieces"]) // 2 :]
            title = a["title"]
            text = (title + "\n\n" if title else "") + " ".join(parts)
            parts = ([title] if title else []) + parts
            meta = {}
        meta = {"file_name": f"syn{i // 50:06d}.hwpx", "section_title": title[3:], **meta}
        node = TextNode(id_=f"s{i:08d}", text=text, metadata=meta,
                        excluded_embed_metadata_keys=list(meta), excluded_llm_metadata_keys=list(meta))
        nodes.append(node)
        token_map[text] = [t for p in parts for t in piece_tokens.get(p, [])]
    return nodes, token_map, e5, vecs


def span_matrix(count: int, e5: np.ndarray, noise: float, path: Path, seed: int = 1,
                chunk: int = 100_000) -> np.ndarray:
    """``count`` span vectors (e5 sample + noise, unit, float16 as the span index stores them)
    in a float16 file mapped at ``path``, filled ``chunk`` rows at a time: at 10^6 sections
    the 6.3 x 10^6 vectors are 4.8 GB of page cache the kernel can write back, not Python
    floats (~30 GB) or an anonymous float32 matrix (9.7 GB)."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16,
                                    shape=(count, e5.shape[1]))
    rng = np.random.default_rng(seed)
    for lo in range(0, count, chunk):
        out[lo : lo + chunk] = _unit_rows(e5, noise, rng, min(chunk, count - lo))
    out.flush()
    return out


class SyntheticE5:
    """An embedding for the benchmark: queries get their real e5 vector (looked up); a passage
    the index embeds itself (none in this benchmark: sections and spans come with their vectors)
    gets a real e5 vector chosen by the text's sha256 plus noise."""

    @staticmethod
    def make(e5: np.ndarray, queries: dict[str, list[float]], noise: float) -> Any:
        from llama_index.core.base.embeddings.base import BaseEmbedding
        from pydantic import PrivateAttr

        class _Model(BaseEmbedding):
            _e5: Any = PrivateAttr()
            _q: Any = PrivateAttr()
            _noise: float = PrivateAttr()

            def _vec(self, text: str) -> list[float]:
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                r = np.random.default_rng(seed)
                v = self._e5[r.integers(len(self._e5))] + self._noise * r.standard_normal(self._e5.shape[1])
                return (v / np.linalg.norm(v)).tolist()

            def _get_query_embedding(self, query: str) -> list[float]:
                return list(self._q[query])

            def _get_text_embedding(self, text: str) -> list[float]:
                return self._vec(text)

            async def _aget_query_embedding(self, query: str) -> list[float]:
                return self._get_query_embedding(query)

        model = _Model(model_name="synthetic-e5", embed_batch_size=2048)
        model._e5, model._q, model._noise = e5, queries, noise
        return model


def _queries(cache: Path, count: int) -> dict[str, list[float]]:
    from _eval_vectors import load_set, vectors

    out: dict[str, list[float]] = {}
    for name in ("lhcs", "autorag"):
        _, _, _, texts, _ = load_set(name)
        _, qv = vectors(name, cache)
        for t, v in zip(texts, qv, strict=True):
            out.setdefault(t, v.tolist())
    return dict(list(out.items())[:count])


# ----------------------------------------------------------------------------- children
def _vector_index(nodes: list[Any], vecs: np.ndarray, model: Any) -> Any:
    """The index's default in-memory vector index over ``nodes`` and their vectors: the flat
    store where the code has it (``indices._dense.flat_index``), else ``SimpleVectorStore``."""
    from llama_index_car.indices import _dense

    if hasattr(_dense, "flat_index"):
        from llama_index_car.flat_store import FlatState, resolve_scan

        state = FlatState.empty(vecs.shape[1], resolve_scan("auto", vecs.shape[1])).plus(
            vecs, [n.node_id for n in nodes], [_dense.node_meta(n) for n in nodes])
        return _dense.flat_index({}, [], model, state=state)
    from llama_index.core import VectorStoreIndex

    embedded = [n.model_copy(update={"embedding": v.tolist()}) for n, v in zip(nodes, vecs, strict=True)]
    return VectorStoreIndex(embedded, embed_model=model)


def child_build(args: argparse.Namespace) -> dict[str, Any]:
    from llama_index.core.schema import MetadataMode

    from llama_index_car.indices._lexical import text_hash
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex
    from llama_index_car.span_index import SpanIndex, cut_nodes
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    cache = Path(args.cache)
    t0 = time.perf_counter()
    nodes, token_map, e5, vecs = generate(args.n, cache, args.noise, args.vector_sets)
    tok = KiwiTokenizer()
    prefix = tok.spec_hash[:16] + ":"
    token_cache = {prefix + text_hash(n.get_content(metadata_mode=MetadataMode.EMBED)): token_map[n.text]
                   for n in nodes}
    del token_map
    gen_s = time.perf_counter() - t0
    model = SyntheticE5.make(e5, {}, args.noise)
    # the span index: cut as the index cuts (cut_nodes), vectors generated as arrays into a
    # mapped float16 file and given to SpanIndex's constructor (it keeps float16 unchanged)
    t0 = time.perf_counter()
    cut = cut_nodes(nodes)
    cut_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    span_file = Path(args.dir).parent / (Path(args.dir).name + ".span-vectors.npy")
    span_file.parent.mkdir(parents=True, exist_ok=True)
    span_vecs = span_matrix(len(cut.spans), e5, args.noise, span_file)
    gen_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    spans = SpanIndex(cut.node_ids, cut.offsets, cut.spans, span_vecs)
    del cut, span_vecs
    vectors = _vector_index(nodes, vecs, model)
    del vecs
    index = CriterionAwareIndex.from_defaults(nodes, vector_index=vectors, embed_model=model,
                                              spans=spans, tokenizer=tok, token_cache=token_cache)
    build_s = time.perf_counter() - t0 + cut_s
    print(f"[{args.n}] built in {build_s:.0f} s (generate {gen_s:.0f} s), RSS {rss_mb():.0f} MB",
          file=sys.stderr, flush=True)
    n_spans = index.spans.n_spans if index.spans is not None else 0
    t0 = time.perf_counter()
    index.persist(args.dir)
    persist_s = time.perf_counter() - t0
    span_file.unlink()
    files: dict[str, int] = {}
    for f in Path(args.dir).rglob("*"):
        if f.is_file():
            name = f"{f.parent.name}/{f.name}" if f.parent.name == "flat" else f.name
            files[name] = files.get(name, 0) + f.stat().st_size
    return {"generate_s": gen_s, "build_s": build_s, "persist_s": persist_s, "files": files,
            "spans": n_spans, "build_rss_mb": rss_mb(),
            "chars": sum(len(n.text) for n in nodes)}


def child_query(args: argparse.Namespace) -> dict[str, Any]:
    import llama_index_car.indices.criterion_aware as ca

    cache = Path(args.cache)
    queries = _queries(cache, args.queries)
    model = SyntheticE5.make(_passages(cache, args.vector_sets), queries, args.noise)
    rss0 = rss_mb()
    t0 = time.perf_counter()
    index = ca.CriterionAwareIndex.load(args.dir, embed_model=model)
    load_s = time.perf_counter() - t0
    rss_load = rss_mb()
    out: dict[str, Any] = {"load_s": load_s, "rss_before_mb": rss0, "rss_load_mb": rss_load,
                           "loadavg": os.getloadavg()[0]}
    texts = list(queries)
    for kind in KINDS:
        r = index.as_retriever(kind, similarity_top_k=10)
        r.retrieve(texts[0])  # warm-up (Kiwi model, first touch)
        slow = args.slow and kind != "bm25" and args.n > args.fast_max
        limit = args.slow_queries if slow else len(texts)
        times = []
        for q in texts[:limit]:
            t1 = time.perf_counter()
            r.retrieve(q)
            times.append(time.perf_counter() - t1)
        out[kind] = {"p50": float(np.percentile(times, 50)) * 1000,
                     "p95": float(np.percentile(times, 95)) * 1000, "queries": len(times)}
        print(f"[{args.n}] {kind}: {out[kind]}", file=sys.stderr, flush=True)
    out["rss_end_mb"] = rss_mb()
    out["anon_end_mb"], out["file_end_mb"] = rss_mb("RssAnon"), rss_mb("RssFile")
    return out


def _e5_query_ms(cache: Path) -> float:
    from _eval_vectors import load_set

    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    _, _, _, texts, _ = load_set("lhcs")
    model = MultilingualE5Embedding()
    model.get_query_embedding(texts[0])
    times = []
    for t in texts[1:21]:
        t0 = time.perf_counter()
        model.get_query_embedding(t)
        times.append(time.perf_counter() - t0)
    return float(np.percentile(times, 50)) * 1000


# ----------------------------------------------------------------------------- driver
def _child(phase: str, n: int, where: Path, args: argparse.Namespace, label: str,
           root: Path) -> dict[str, Any] | str:
    cmd = [sys.executable, __file__, "--child", phase, "--n", str(n), "--dir", str(where),
           "--cache", args.cache, "--noise", str(args.noise), "--queries", str(args.queries),
           "--slow-queries", str(args.slow_queries), "--fast-max", str(args.fast_max),
           "--vector-sets", *args.vector_sets, *(["--slow", label] if label in args.slow else [])]
    env = dict(os.environ, PYTHONPATH=f"{root}:{root / 'readers' / 'llama-index-readers-hwpx'}")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    with open(args.log, "a") as fh:
        fh.write(f"--- {label} {n} {phase} ({time.perf_counter() - t0:.0f} s)\n{p.stderr[-4000:]}\n")
    if p.returncode != 0:
        return "failed: " + ((p.stderr.strip().splitlines() or ["?"])[-1])[:160]
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="/tmp/car-scale/cache")
    ap.add_argument("--sizes", nargs="*", type=int, default=[10_000, 100_000])
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--vector-sets", nargs="+", default=["lhcs", "autorag", "legal"],
                    help="eval sets whose real e5 passage vectors seed the synthetic ones")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--slow-queries", type=int, default=10,
                    help="queries for the dense-using kinds above --fast-max sections")
    ap.add_argument("--fast-max", type=int, default=10_000)
    ap.add_argument("--code", nargs="+", default=[f"this={Path(__file__).resolve().parents[1]}"],
                    help="LABEL=ROOT code versions to measure (checkouts of this repository)")
    ap.add_argument("--slow", nargs="*", default=[],
                    help="labels whose dense-using kinds run --slow-queries above --fast-max")
    ap.add_argument("--max-n", nargs="*", default=[],
                    help="LABEL=N: sizes above N are not run for LABEL (its memory model "
                         "covers them)")
    ap.add_argument("--workdir", default="/tmp/car-scale/work")
    ap.add_argument("--keep", action="store_true", help="keep the index folders")
    ap.add_argument("--model", nargs="*", type=int, default=[1_000_000, 10_000_000],
                    help="sizes predicted by the memory model from the measured ones")
    ap.add_argument("--log", default="/tmp/car-scale/scale.log")
    ap.add_argument("--save", help="write the measurements as JSON (for --report)")
    ap.add_argument("--report", help="print the tables of a --save file (nothing measured)")
    ap.add_argument("--child")
    ap.add_argument("--n", type=int)
    ap.add_argument("--dir")
    args = ap.parse_args()
    if args.child:
        fn = child_build if args.child == "build" else child_query
        print(json.dumps(fn(args)))
        return
    if args.report:
        got = json.loads(Path(args.report).read_text())
        saved = {(label, n): (b, q) for label, n, b, q in got["results"]}
        args.sizes = sorted({n for _, n in saved})
        _report(saved, got["codes"], args, got["e5_ms"])
        return
    codes = dict(c.split("=", 1) for c in args.code)
    print(f"# scale: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; "
          f"code versions: {', '.join(codes)}\n")
    e5_ms = _e5_query_ms(Path(args.cache))
    max_n = {label: int(n) for label, n in (m.split("=", 1) for m in args.max_n)}
    results: dict[tuple[str, int], tuple[Any, Any]] = {}
    for n in args.sizes:
        for label, root in codes.items():
            if n > max_n.get(label, n):
                continue
            where = Path(args.workdir) / f"scale-{label}-{n}"
            shutil.rmtree(where, ignore_errors=True)
            built = _child("build", n, where, args, label, Path(root))
            got = (_child("query", n, where, args, label, Path(root)) if isinstance(built, dict)
                   else "not run")
            results[(label, n)] = (built, got)
            print(f"[{label} {n}] build {built}\n[{label} {n}] query {got}", file=sys.stderr,
                  flush=True)
            if not args.keep:
                shutil.rmtree(where, ignore_errors=True)
            if args.save:  # after every row: a long run keeps what it measured
                Path(args.save).write_text(json.dumps({"e5_ms": e5_ms, "codes": codes, "results": [
                    [label, n, b, q] for (label, n), (b, q) in results.items()]}))
    _report(results, codes, args, e5_ms)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end (1-minute; each row: the "
          "machine's at the start of its query process)")


def _report(results: dict[tuple[str, int], tuple[Any, Any]], codes: dict[str, str],
            args: argparse.Namespace, e5_ms: float) -> None:
    print(f"e5 query embedding (offline default, excluded below): p50 {e5_ms:.0f} ms\n")
    print("| code | sections | load avg | spans | build s | persist s | folder MB | bytes/node | load s | RSS after load MB | RSS after queries MB (private + mapped files) |"
          + "".join(f" {k} p50 / p95 ms |" for k in KINDS))
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(KINDS))
    for (label, n), (b, q) in results.items():
        if isinstance(b, str) or isinstance(q, str):
            print(f"| {label} | {n:,} | {b if isinstance(b, str) else ''} {q if isinstance(q, str) else ''} |")
            continue
        total = sum(b["files"].values())
        cells = "".join(f" {q[k]['p50']:.1f} / {q[k]['p95']:.1f} ({q[k]['queries']} q) |" for k in KINDS)
        print(f"| {label} | {n:,} | {q['loadavg']:.1f} | {b['spans']:,} | {b['build_s']:.0f} | {b['persist_s']:.0f} | {total / 2**20:.0f} | "
              f"{total / n:,.0f} | {q['load_s']:.2f} | {q['rss_load_mb']:.0f} | {q['rss_end_mb']:.0f} "
              f"({q['anon_end_mb']:.0f} + {q['file_end_mb']:.0f}) |{cells}")
    labels = list(codes)
    if len(labels) == 2:
        old, new = labels
        print(f"\nRatios {old} ÷ {new}, measured in this run (p50; > 1: {new} is faster or smaller):\n")
        print("| sections | load s | RSS after queries | folder bytes |" + "".join(f" {k} p50 |" for k in KINDS))
        print("|---:|---:|---:|---:|" + "---:|" * len(KINDS))
        for n in args.sizes:
            bo, qo = results.get((old, n), ("", ""))
            bn, qn = results.get((new, n), ("", ""))
            if not all(isinstance(x, dict) for x in (bo, qo, bn, qn)):
                continue
            cells = "".join(f" {qo[k]['p50'] / qn[k]['p50']:.1f}× |" for k in KINDS)
            print(f"| {n:,} | {qo['load_s'] / qn['load_s']:.1f}× | {qo['rss_end_mb'] / qn['rss_end_mb']:.1f}× | "
                  f"{sum(bo['files'].values()) / sum(bn['files'].values()):.2f}× |{cells}")
    print("\nBytes per node by file:\n")
    for (label, n), (b, _) in results.items():
        if isinstance(b, dict):
            per = ", ".join(f"{k} {v / n:,.0f}" for k, v in sorted(b["files"].items(), key=lambda t: -t[1]) if v / n >= 1)
            print(f"- {label} {n:,}: {per}")
    for label in labels:
        ok = [(n, b, q) for (lab, n), (b, q) in results.items()
              if lab == label and isinstance(b, dict) and isinstance(q, dict)]
        if len(ok) < 2 or not args.model:
            continue
        print(f"\nMemory model of {label} (a straight line a + b·n through its measured sizes, "
              "never below the largest measured value: a quantity that did not grow is taken as "
              "constant):\n")
        print("| sections | folder GB | load s | RSS after load GB | RSS after queries GB | fits in 24 GiB? |")
        print("|---:|---:|---:|---:|---:|---|")
        ns = np.array([n for n, _, _ in ok], dtype=np.float64)

        def fit(values: list[float], n: int, ns: np.ndarray = ns) -> float:
            b, a = np.polyfit(ns, np.array(values, dtype=np.float64), 1)
            return max(float(a + b * n), float(values[int(np.argmax(ns))]))

        for n in args.model:
            folder = fit([sum(b["files"].values()) for _, b, _ in ok], n) / 2**30
            load = fit([q["load_s"] for _, _, q in ok], n)
            rss = fit([q["rss_load_mb"] for _, _, q in ok], n) / 1024
            rss_end = fit([q["rss_end_mb"] for _, _, q in ok], n) / 1024
            print(f"| {n:,} | {folder:.1f} | {load:.1f} | {rss:.1f} | {rss_end:.1f} | "
                  f"{'yes' if rss_end < 24 else 'no'} |")


if __name__ == "__main__":
    main()
