"""Level-1 scorer: the §4.2/§5.6 definitions written as formulas on hand-made tables, the
alignment checked against brute force, and the HWPX self-test = exactly 100 %."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest

from llama_index_car.evaluation.preservation import (
    GTTable,
    align,
    ground_truth,
    normalize,
    score_document,
    summarize,
    table_text,
)

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"


def _t(n_rows: int, n_cols: int, cells: list[str], depth: int = 0) -> dict:
    return {"n_rows": n_rows, "n_cols": n_cols, "cells": cells, "depth": depth}


def test_no_llama_index_import() -> None:
    """The module loads standalone (not via its package) without importing LlamaIndex."""
    import subprocess

    path = Path(__file__).resolve().parents[1] / "llama_index_car/evaluation/preservation.py"
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('preservation', {str(path)!r}); "
        "m = importlib.util.module_from_spec(spec); sys.modules['preservation'] = m; "
        "spec.loader.exec_module(m); "
        "print(sorted(k for k in sys.modules if k.split('.')[0] in "
        "('llama_index', 'llama_index_car')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_normalize_and_containment() -> None:
    assert normalize(" 2.5\u00a0m\n이하 ") == "2.5m이하"
    assert normalize("ｍ３") == "m3"  # NFKC
    assert normalize(None) == ""
    # a value split over two PDF cells (or wrapped over lines) is still contained
    assert table_text([["옥내소", "화전"], [None, "2.5 m"]]) == "옥내소화전2.5m"


def test_ground_truth_scope() -> None:
    tables = [
        _t(2, 2, ["a", "", "b", "  "]),  # 2 values
        _t(1, 1, ["", ""]),  # no text: not ground truth
        _t(1, 1, ["inner"], depth=1),  # nested: not ground truth
        _t(1, 3, ["x", "x", "y"]),  # duplicates count per cell
    ]
    gt = ground_truth(tables)
    assert [(g.index, g.values) for g in gt] == [(0, ("a", "b")), (3, ("x", "x", "y"))]
    assert [g.is_2x2 for g in gt] == [True, False]


def test_preservation_and_detection_formulas() -> None:
    gt = ground_truth(
        [
            _t(2, 2, ["구분", "기준", "옥내소화전", "2.5 m 이하"]),  # 4 values
            _t(2, 3, ["A1", "B2", "C3", "D4", "E5", "F6"]),  # 6 values
            _t(1, 2, ["가나", "다라"]),  # 2 values, 1x2
        ]
    )
    recovered = [
        [["구분", "기준"], ["옥내소화전", "2.5m"]],  # 3 of 4 ("2.5 m 이하" lost)
        [["A1 B2", "C3"]],  # 3 of 6 -> share 0.5: detected (>= 50 %)
        [["다라"]],  # 1 of 2 -> share 0.5
    ]
    scores = score_document("doc", gt, recovered)
    assert [(s.n_cells, s.n_recovered, s.matched) for s in scores] == [
        (4, 3, 0),
        (6, 3, 1),
        (2, 1, 2),
    ]
    all_ = summarize(scores, "all")
    assert all_.cells == 12 and all_.recovered == 7
    assert all_.preservation == pytest.approx(7 / 12)
    assert all_.detection == pytest.approx(3 / 3)
    big = summarize(scores, "2x2")  # the 1x2 table leaves the scope
    assert (big.tables, big.cells, big.recovered) == (2, 10, 6)
    assert big.preservation == pytest.approx(6 / 10)


def test_fifty_percent_rule_boundary() -> None:
    gt = ground_truth([_t(2, 2, ["aa", "bb", "cc", "dd"]), _t(3, 3, list("abcdefghi"))])
    scores = score_document("d", gt, [[["aa", "bb"]], [["a b c d"]]])
    # 2/4 = 0.5 is detected; 4/9 < 0.5 is not
    assert [s.share for s in scores] == [0.5, pytest.approx(4 / 9)]
    assert summarize(scores).detection == pytest.approx(1 / 2)


def test_alignment_is_one_to_one() -> None:
    # both GT tables overlap recovered table 0 best; one-to-one forces the second elsewhere
    gt = [GTTable(0, 2, 2, ("x", "y", "z")), GTTable(1, 2, 2, ("x", "y"))]
    texts = ["xyz", "x"]
    assert align(gt, texts) == [(0, 3), (1, 1)]
    # without a second recovered table the other one is unmatched (0 recovered)
    assert align(gt, ["xyz"]) == [(0, 3), (None, 0)]
    assert align(gt, []) == [(None, 0), (None, 0)]


def test_alignment_matches_brute_force() -> None:
    rng = random.Random(7)
    alphabet = "abcdef"
    for _ in range(200):
        gt = [
            GTTable(i, 2, 2, tuple(rng.choice(alphabet) for _ in range(rng.randint(1, 4))))
            for i in range(rng.randint(1, 4))
        ]
        texts = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
            for _ in range(rng.randint(0, 4))
        ]
        got = sum(n for _, n in align(gt, texts))
        best = 0
        k = len(texts)
        slots = list(range(k)) + [None] * len(gt)
        for perm in itertools.permutations(slots, len(gt)):
            total = sum(
                sum(1 for v in g.values if v in texts[j]) if j is not None else 0
                for g, j in zip(gt, perm, strict=True)
            )
            best = max(best, total)
        assert got == best
        used = [j for j, _ in align(gt, texts) if j is not None]
        assert len(used) == len(set(used))


def test_robustness_variants_drop_short_values() -> None:
    gt = ground_truth([_t(2, 2, ["1", "ab", "abc", "긴 셀 값"])])
    rec = [[["1", "abc"]]]
    s1 = summarize(score_document("d", gt, rec, min_chars=1))
    s2 = summarize(score_document("d", gt, rec, min_chars=2))
    s3 = summarize(score_document("d", gt, rec, min_chars=3))
    # "ab" is contained in "abc": min 1 -> 3/4, min 2 -> 2/3, min 3 -> 1/2
    assert (s1.cells, s1.recovered) == (4, 3)
    assert (s2.cells, s2.recovered) == (3, 2)
    assert (s3.cells, s3.recovered) == (2, 1)
    # a table left with no values leaves the scope
    assert score_document("d", ground_truth([_t(2, 2, ["1", "2"])]), rec, min_chars=2) == []


def test_bimodality_counts() -> None:
    gt = ground_truth(
        [
            _t(2, 2, ["p1", "p2", "p3", "p4"]),
            _t(2, 2, ["q1", "q2", "q3", "q4"]),
            _t(2, 2, ["r1", "r2", "r3", "r4"]),
        ]
    )
    s = summarize(score_document("d", gt, [[["p1p2p3p4"]], [["q1"]]]), "2x2")
    assert (s.perfect, s.lost) == (1, 1)


def test_empty_scope_is_zero_not_error() -> None:
    s = summarize([], "2x2")
    assert (s.tables, s.preservation, s.detection) == (0, 0.0, 0.0)
    with pytest.raises(ValueError, match="scope"):
        summarize([], "3x3")


@pytest.mark.corpus
def test_self_test_hwpx_against_itself_is_exactly_100() -> None:
    from llama_index.readers.hwpx import HWPXReader

    files = sorted((SHARED / "corpus" / "hwpx").glob("*.hwpx"))
    if not files:
        pytest.skip("../shared/corpus/hwpx is not present")
    scores = []
    for p in files:
        tables = HWPXReader().load_tables(p)
        recovered = [[[c.text for c in t.cells]] for t in tables]
        scores += score_document(p.stem, ground_truth(tables), recovered)
    for scope in ("all", "2x2"):
        s = summarize(scores, scope)
        assert s.tables > 0
        assert s.recovered == s.cells and s.preservation == 1.0 and s.detection == 1.0
        assert s.perfect == s.tables and s.lost == 0


def test_stitch_pages_joins_only_page_break_continuations() -> None:
    from llama_index_car.evaluation.pdf_tables import PDFTable, stitch_pages

    a = PDFTable("e", 0, [["h1", "h2"], ["a", "b"]])  # last on page 0
    b = PDFTable("e", 1, [["c", "d"]])  # first on page 1, same width: joined
    c = PDFTable("e", 1, [["x", "y"]])  # second on page 1: not joined
    d = PDFTable("e", 2, [["p", "q", "r"]])  # first on page 2, other width: not joined
    e = PDFTable("f", 1, [["c", "d"]])  # another engine: never joined with "e"
    out = stitch_pages([a, b, c, d, e])
    assert [(t.engine, t.page, t.rows) for t in out] == [
        ("e", 0, [["h1", "h2"], ["a", "b"], ["c", "d"]]),
        ("e", 1, [["x", "y"]]),
        ("e", 2, [["p", "q", "r"]]),
        ("f", 1, [["c", "d"]]),
    ]
    assert a.rows == [["h1", "h2"], ["a", "b"]]  # inputs untouched
    # a chain over three pages becomes one table
    chain = [PDFTable("e", i, [[str(i), "v"]]) for i in range(3)]
    assert [t.rows for t in stitch_pages(chain)] == [[["0", "v"], ["1", "v"], ["2", "v"]]]
    # a gap page breaks the chain
    gap = [PDFTable("e", 0, [["a"]]), PDFTable("e", 2, [["b"]])]
    assert len(stitch_pages(gap)) == 2


def test_stitching_lets_a_split_table_align_whole() -> None:
    from llama_index_car.evaluation.pdf_tables import PDFTable, stitch_pages

    gt = ground_truth([_t(4, 2, ["k1", "v1", "k2", "v2", "k3", "v3", "k4", "v4"])])
    split = [PDFTable("e", 0, [["k1", "v1"], ["k2", "v2"]]),
             PDFTable("e", 1, [["k3", "v3"], ["k4", "v4"]])]
    plain = score_document("d", gt, [t.rows for t in split])
    joined = score_document("d", gt, [t.rows for t in stitch_pages(split)])
    assert (plain[0].n_recovered, joined[0].n_recovered) == (4, 8)
