"""07 — Evaluate retrievers and run the counterfactual title probe on the demo corpus.

Both are the ``llama-car eval`` / ``llama-car probe`` commands, called here through
``llama_index_car.cli.main`` (the same as the shell). ``eval`` takes an HWPX folder plus a QA
file whose gold is a section; ``probe`` rewrites plan-framed titles (cf, cfp, cfn, cfb, cfs)
and measures the cosine shift. Both write markdown reports; we print their heads.

Run: python examples/07_evaluate_and_probe.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from llama_index_car.cli import main as llama_car
from llama_index_car.demo import demo_corpus_dir, load_demo_questions

questions = load_demo_questions()
gold = [{"file": q.gold_file, "section_title": q.gold_section} for q in questions]
qa_lines = [
    json.dumps({"id": q.qid, "question": q.question, "gold": [g]}, ensure_ascii=False)
    for q, g in zip(questions, gold, strict=True)
]

with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp)
    (out / "qa.jsonl").write_text("\n".join(qa_lines) + "\n", encoding="utf-8")
    common = ["--cache-dir", str(out / "cache"), "--no-progress"]
    corpus = str(demo_corpus_dir())
    systems = "bm25,dense,hybrid,car"
    eval_args = ["eval", corpus, "--qa", str(out / "qa.jsonl"), "--systems", systems]
    rc = llama_car([*eval_args, "--out", str(out / "eval"), *common])
    print(f"eval exit code {rc}")
    print("\n".join((out / "eval" / "report.md").read_text(encoding="utf-8").splitlines()[:20]))

    rc = llama_car(["probe", corpus, "--out", str(out / "probe"), *common])
    print(f"probe exit code {rc}")
    for report in sorted((out / "probe").glob("*.md"))[:1]:
        print("\n".join(report.read_text(encoding="utf-8").splitlines()[:12]))
