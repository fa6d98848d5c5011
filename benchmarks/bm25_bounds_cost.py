"""Cost of the per-posting bounds checks in the numba BM25 kernels (issue 20, item 4).

The kernels of ``llama_index_car._bm25_numba`` compare every document id they read from
``indices`` with N before using it, so a memory-mapped ``indices.npy`` overwritten in place
after verification gives an ``IndexPersistError`` instead of an out-of-bounds write. This
script measures what that costs against the kernels as they were before the checks (the file
at ``--before``, a git revision, compiled from a temporary copy), on ONE index loaded twice
(memory-mapped), queried interleaved query by query in one process, so machine load hits
both alike. The ratio (after / before) is what to read; absolute times are noise on a loaded
machine.

Corpus: synthetic, ``--docs`` documents of ``--doc-len`` tokens drawn from a Zipf(1.1)
vocabulary of ``--vocab`` terms (seeded); queries of 5 and 30 terms drawn from random
documents, top-10 (``BM25Okapi.top_k``). p50 after a warm-up pass (compilation, page faults,
the once-per-column preparation).

Usage::

    nice -n 10 python benchmarks/bm25_bounds_cost.py --docs 100000
    nice -n 10 python benchmarks/bm25_bounds_cost.py --docs 1000000 --queries 200

Writes ``docs/results/bm25_bounds_cost.md`` (``--out``) with the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]


def old_kernels(rev: str, tmp: Path) -> dict[str, Any]:
    """The kernels of ``_bm25_numba.py`` at git revision ``rev``, as a separate module."""
    src = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:llama_index_car/_bm25_numba.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = tmp / "_bm25_numba_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("_bm25_numba_before", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"prepare": mod.prepare, "top_k": mod.top_k, "scores": mod.scores}


def zipf_counts(n_docs: int, doc_len: int, vocab: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    p /= p.sum()
    rows = []
    block = 1 << 14
    for start in range(0, n_docs, block):
        m = min(block, n_docs - start)
        ids = rng.choice(vocab, size=(m, doc_len), p=p)
        r = np.repeat(np.arange(m), doc_len)
        rows.append(sp.csr_matrix((np.ones(r.size, np.int64), (r, ids.ravel())), shape=(m, vocab)))
    out = sp.vstack(rows).tocsr()
    out.sum_duplicates()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--doc-len", type=int, default=150)
    ap.add_argument("--vocab", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved passes over the queries")
    ap.add_argument("--before", default="7f1f2ef", help="git revision of the unchecked kernels")
    ap.add_argument("--out", default=str(REPO / "docs" / "results" / "bm25_bounds_cost.md"))
    args = ap.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from llama_index_car import _bm25_kernels
    from llama_index_car.bm25 import BM25Okapi

    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        t0 = time.perf_counter()
        counts = zipf_counts(args.docs, args.doc_len, args.vocab, seed=0)
        terms = [f"t{i}" for i in range(args.vocab)]
        BM25Okapi.from_counts(counts, terms).save(tmp / "idx")
        print(f"built {args.docs} docs in {time.perf_counter() - t0:.0f} s", flush=True)
        new = BM25Okapi.load(tmp / "idx", mmap=True, verify="lazy", backend="numba")
        old = BM25Okapi.load(tmp / "idx", mmap=True, verify="lazy", backend="numba")
        new_k = _bm25_kernels.load()
        assert new_k is not None, "needs numba: pip install 'llama-index-car[fast]'"
        old._scorer.kernels = old_kernels(args.before, tmp)  # the benchmark's one private reach
        old._scorer.kernels_loaded = True
        rng = np.random.default_rng(1)
        rows: list[tuple[str, float, float, float]] = []
        for length in (5, 30):
            qs = []
            for _ in range(args.queries):
                d = int(rng.integers(args.docs))
                cols = counts.indices[counts.indptr[d] : counts.indptr[d + 1]]
                pick = rng.choice(cols, size=min(length, cols.size), replace=False)
                qs.append([terms[int(j)] for j in pick])
            for q in qs:  # warm-up: compile, fault pages in, prepare the columns
                a = new.top_k(q, 10)
                b = old.top_k(q, 10)
                assert a[0].tolist() == b[0].tolist() and np.array_equal(a[1], b[1])
            t_new: list[float] = []
            t_old: list[float] = []
            for r in range(args.rounds):
                for i, q in enumerate(qs):
                    pair = [(new, t_new), (old, t_old)]
                    if (i + r) % 2:
                        pair.reverse()
                    for bm, ts in pair:
                        t = time.perf_counter()
                        bm.top_k(q, 10)
                        ts.append((time.perf_counter() - t) * 1000)
            ratios = [a / b for a, b in zip(t_new, t_old, strict=True) if b > 0]
            rows.append(
                (
                    f"Q{length}",
                    statistics.median(t_old),
                    statistics.median(t_new),
                    statistics.median(ratios),
                )
            )
            print(rows[-1], flush=True)
    cmd = "python benchmarks/bm25_bounds_cost.py " + " ".join(argv or sys.argv[1:])
    lines = [
        "# Cost of the bounds checks in the numba BM25 kernels",
        "",
        f"Measured by `{cmd}` (written by the script): {args.docs} synthetic Zipf documents "
        f"of {args.doc_len} tokens, vocabulary {args.vocab}, top-10, {args.queries} queries x "
        f"{args.rounds} interleaved rounds, before = kernels at `{args.before}` (unchecked), "
        "after = this tree's; one memory-mapped index, one process.",
        "",
        "| queries | p50 before ms | p50 after ms | median per-query ratio after/before |",
        "|---|---:|---:|---:|",
        *(f"| {n} | {b:.3f} | {a:.3f} | {r:.3f} |" for n, b, a, r in rows),
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
