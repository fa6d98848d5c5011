"""Query–gold lexical overlap and strata (exact boundaries; reproduces ../shared READMEs)."""

from __future__ import annotations

import pytest

from llama_index_car.evaluation.overlap import (
    compute_overlaps,
    overlap,
    stratify,
    stratum,
    stratum_of,
    surface_content_morphemes,
)


@pytest.mark.parametrize(
    ("hits", "total", "expected"),
    [(0, 5, "low"), (7, 20, "low"), (36, 100, "mid"), (1, 2, "mid"), (51, 100, "high"),
     (1, 1, "high"), (0, 0, "low")],
)
def test_strata_boundaries_exact(hits: int, total: int, expected: str) -> None:
    assert stratum_of(hits, total) == expected
    if total:
        assert stratum(hits / total) == expected


def test_overlap_is_share_of_distinct_query_morphemes() -> None:
    assert overlap("a a b c", "a x", morphemes=str.split) == pytest.approx(1 / 3)
    assert overlap("", "a", morphemes=str.split) == 0.0


def test_best_gold_counts_and_title_is_part_of_passage() -> None:
    corpus = {
        "d1": {"title": "", "text": "a"},
        "d2": {"title": "b", "text": "a c"},
        "d3": {"title": "", "text": "a b c d"},
    }
    queries = {"q1": "a b c d", "q2": "a b"}
    qrels = {"q1": {"d1": 1, "d2": 1, "d3": 0}, "q2": {"d2": 1}}
    ov = compute_overlaps(queries, corpus, qrels, morphemes=str.split)
    assert (ov["q1"].hits, ov["q1"].total, ov["q1"].gold) == (3, 4, "d2")  # d3 is rel 0
    assert ov["q2"].value == 1.0
    assert stratify(ov) == {"all": ["q1", "q2"], "high": ["q1", "q2"], "mid": [], "low": []}


def test_surface_morphemes_keep_stems_and_content_tags() -> None:
    out = surface_content_morphemes("배수시설의 설치기준을 따른다 2024년 KS")
    assert "따르" in out and "설치" in out and "기준" in out and "KS" in out
    assert "의" not in out and "을" not in out


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("name", "counts"),
    [
        pytest.param("lhcs_construction", (74, 139, 129), marks=pytest.mark.slow),
        ("autorag_ko", (0, 3, 56)),
    ],
)
def test_reproduces_shared_readme_strata(eval_dir, name: str, counts: tuple[int, int, int]) -> None:
    from llama_index_car.evaluation.io import load_beir

    ds = load_beir(eval_dir / name)
    st = stratify(compute_overlaps(ds.queries, ds.corpus, ds.qrels))
    assert (len(st["low"]), len(st["mid"]), len(st["high"])) == counts
