"""The README's measured blocks equal what their sources say (``scripts/build_readme.py``).

The retrieval and span tables are rebuilt from the JSON the benchmarks wrote (cheap, default
tier); the demo excerpt is rebuilt by running ``llama-car demo`` (slow tier).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("build_readme", ROOT / "scripts" / "build_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_readme"] = module
    spec.loader.exec_module(module)
    return module


build_readme = _script()


def _block(name: str) -> str:
    m = build_readme._block_re(name).search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert m is not None, f"README.md lost its {name} block"
    return m.group(2)


def test_results_table_is_the_cross_validated_one_in_span_cv_json() -> None:
    span_cv = json.loads(build_readme.SPAN_CV.read_text(encoding="utf-8"))
    assert _block("results") == build_readme.results_block(span_cv)
    # an independent reading of one cell: lhcs, low overlap, car (CV), from the JSON itself
    cell = span_cv["summary"]["car (CV)"]["lhcs_construction"]["strata"]["low"]["mrr"]
    row = next(r for r in _block("results").splitlines() if r.startswith("| lhcs_construction low"))
    assert f"{cell:.3f}" in row.split("|")[5]
    # no in-sample column
    assert "| car |" not in _block("results")


def test_span_table_is_span_eval_json() -> None:
    span_eval = json.loads(build_readme.SPAN_EVAL.read_text(encoding="utf-8"))
    assert _block("span-hits") == build_readme.span_hits_block(span_eval)


def test_a_stale_block_is_caught(tmp_path: Path) -> None:
    """The check is not vacuous: a README whose table differs is reported stale."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    span_cv = json.loads(build_readme.SPAN_CV.read_text(encoding="utf-8"))
    span_cv["summary"]["bm25"]["autorag_ko"]["strata"]["all"]["mrr"] = 0.1234
    rebuilt = build_readme.render(text, {"results": build_readme.results_block(span_cv)})
    assert rebuilt != text and "0.123" in rebuilt


def _report_rows(path: Path) -> list[str]:
    import subprocess

    report = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--report", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout
    return [line for line in report.splitlines() if line.startswith("| ")]


def test_scale_bullet_and_tables_6_and_7_are_the_saved_scale_runs() -> None:
    """The README's ceilings and docs/SCALE.md tables 6 and 7 come from the two saved runs."""
    run = json.loads(build_readme.SCALE_RUN.read_text(encoding="utf-8"))
    run_1e6 = json.loads(build_readme.SCALE_RUN_1E6.read_text(encoding="utf-8"))
    requery = json.loads(build_readme.SCALE_REQUERY.read_text(encoding="utf-8"))
    assert _block("scale") == build_readme.scale_block(run, run_1e6, requery)
    this = {n: q for code, n, _b, q in run["results"] if code == "this"}
    assert f"{this[max(this)]['load_s']:.2f} s" in _block("scale")
    this7 = {n: q for code, n, _b, q in run_1e6["results"] if code == "this"}
    assert max(this7) == 1_000_000
    assert f"{this7[max(this7)]['car']['p50']:.1f} ms p50" in _block("scale")
    doc = (ROOT / "docs" / "SCALE.md").read_text(encoding="utf-8")
    table6 = doc[doc.index("### Table 6"):doc.index("### Table 7")]
    table7 = doc[doc.index("### Table 7"):]
    for section, path in ((table6, build_readme.SCALE_RUN), (table7, build_readme.SCALE_RUN_1E6)):
        rows = _report_rows(path)
        assert rows and all(line in section for line in rows)
    # the repeats of the 10^6 query process: their figures are the ones table 7's text cites
    for r in requery["runs"]:
        assert f"{r['car']['p50']:.1f} / {r['car']['p95']:.1f} ms" in table7
        assert f"{r['load_s']:.2f} s" in table7


def test_p_value_format() -> None:
    assert build_readme._p(3.516704811451925e-23) == "4e-23"
    assert build_readme._p(7.62939453125e-06) == "8e-6"


DEMO_OUTPUT = """\
indexing demo …
10 files → 10 documents → 35 nodes (8 table); 0 failed; persisted to /tmp/x in 1.0 s

rank of the gold section among 35 nodes (1 = top, — = not retrieved):
qid  style      dense   bm25 hybrid    car   question → gold section
d01  everyday       1      —      1      3   q1 → s1
                                            CAR span: [sentence @19-94] a  (0.946)
d02  formal         1      1      1      1   q2 → s2
                                            CAR span: [sentence @1-2] b  (1.282)
d03  formal         2      1      1      1   q3 → s3
d04  formal         1      1      1      1   q4 → s4
                                            CAR span: [row] c  (1.0)
d14  everyday       1      9      4      2   q14 → s14
                                            CAR span: [sentence @19-83] d  (1.122)
------------------------------------------------------------
MRR            1.000  0.817  0.946  0.917
Hit@5          1.000  0.857  1.000  1.000
summary: MRR dense 1.000, bm25 0.817, hybrid 0.946, car 0.917 over 14 questions
elapsed: 3.9 s (index 2.6 s, 56 queries 1.3 s)
"""


def test_demo_excerpt_keeps_the_shown_questions_and_summary_not_the_clock() -> None:
    out = build_readme.demo_excerpt(DEMO_OUTPUT).splitlines()
    assert out[0] == "```" and out[1] == "$ llama-car demo" and out[-1] == "```"
    assert [line.split()[0] for line in out if line.startswith("d")] == ["d01", "d02", "d14"]
    assert out.count("…") == 1  # d03 and d04 (with its span line) are one elision
    assert not any("elapsed" in line for line in out)
    assert "CAR span: [sentence @19-83] d  (1.122)" in out[out.index("…") + 2]
    assert out[-2].startswith("summary: MRR")


@pytest.mark.slow
def test_demo_excerpt_is_what_llama_car_demo_prints_today() -> None:
    assert _block("demo") == build_readme.demo_excerpt(build_readme.run_demo())
