"""Real e5 vectors and Kiwi tokens of the three eval sets, cached in a folder (benchmark helper).

The scale benchmarks (``dense_scale.py``, ``sparse_store_bench.py``, ``scale.py``) need real
vectors and real Korean tokens, and embedding costs minutes (e5 at ~4-9 kchar/s on two cores;
the three corpora are 3.6 M characters). This module embeds each set once with the offline
default (``MultilingualE5Embedding``: passages as ``"## {title}\\n\\n{text}"``, the nodes
``llama-car eval`` builds; queries with the query prefix) and keeps them as plain ``.npy`` +
``ids.json`` under ``--cache`` keyed by set name and engine id; Kiwi tokens likewise as JSON.

Run it alone to fill the cache::

    nice -n 10 python benchmarks/_eval_vectors.py --cache /tmp/car-scale-cache lhcs autorag legal
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SETS = {
    "lhcs": "lhcs_construction",
    "autorag": "autorag_ko",
    "legal": "legal_prec2statute",
}
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "eval"


def load_set(name: str) -> tuple[list[str], list[str], list[str], list[str], dict[str, dict[str, int]]]:
    """``(doc_ids, doc_texts, qids, query_texts, qrels)`` of one eval set (file order)."""
    from llama_index_car.evaluation.io import load_beir

    ds = load_beir(SHARED / SETS[name])
    ids = list(ds.corpus)
    texts = []
    for d in ids:
        title, text = ds.corpus[d]["title"], ds.corpus[d]["text"]
        texts.append(f"## {title}\n\n{text}" if title else text)
    qids = list(ds.queries)
    return ids, texts, qids, [ds.queries[q] for q in qids], ds.qrels


def _model():  # type: ignore[no-untyped-def]
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    return MultilingualE5Embedding()


def vectors(name: str, cache: Path, *, log: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(doc_vectors, query_vectors)`` float32, unit norm, rows in :func:`load_set` order."""
    ids, texts, qids, queries, _ = load_set(name)
    model = _model()
    folder = cache / f"e5-{name}-{model.engine_id}"
    docs_f, qs_f, ids_f = folder / "docs.npy", folder / "queries.npy", folder / "ids.json"
    if docs_f.exists() and qs_f.exists() and ids_f.exists():
        meta = json.loads(ids_f.read_text())
        if meta == {"docs": ids, "queries": qids}:
            return np.load(docs_f), np.load(qs_f)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    doc_vecs = np.asarray(model.get_text_embedding_batch(texts), dtype=np.float32)
    if log:
        print(f"[{name}] {len(texts)} passages embedded in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    q_vecs = np.asarray([model.get_query_embedding(q) for q in queries], dtype=np.float32)
    np.save(docs_f, doc_vecs)
    np.save(qs_f, q_vecs)
    ids_f.write_text(json.dumps({"docs": ids, "queries": qids}))
    return doc_vecs, q_vecs


def tokens(name: str, cache: Path) -> tuple[list[list[str]], list[list[str]]]:
    """``(doc_tokens, query_tokens)``: the default ``KiwiTokenizer`` on the same texts."""
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    ids, texts, qids, queries, _ = load_set(name)
    tok = KiwiTokenizer()
    path = cache / f"kiwi-{name}-{tok.spec_hash[:16]}.json"
    if path.exists():
        got = json.loads(path.read_text())
        if got["docs_ids"] == ids and got["query_ids"] == qids:
            return got["docs"], got["queries"]
    docs = tok.tokenize_batch(texts)
    qs = tok.tokenize_batch(queries)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(
        {"docs_ids": ids, "query_ids": qids, "docs": docs, "queries": qs}, ensure_ascii=False
    ))
    return docs, qs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="*", default=list(SETS), choices=list(SETS))
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--no-vectors", action="store_true", help="tokens only")
    args = ap.parse_args()
    for name in args.sets:
        t0 = time.perf_counter()
        d, q = tokens(name, args.cache)
        print(f"[{name}] tokens: {len(d)} docs, {len(q)} queries, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        if not args.no_vectors:
            dv, qv = vectors(name, args.cache)
            print(f"[{name}] vectors: {dv.shape} {qv.shape}", flush=True)


if __name__ == "__main__":
    main()
