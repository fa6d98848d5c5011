"""Tests of the pure framing rules (paper §4.1, §4.4)."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_car import framing
from llama_index_car._errors import ConfigurationError
from llama_index_car.framing import (
    EXTRA_NEUTRAL_SUBSTITUTIONS,
    NEUTRAL_SUBSTITUTIONS,
    PAPER_PLAN_TOKENS,
    PLAN_LEXICON,
    STANDARD_LEXICON,
    classify_title,
    criterion_frequencies,
    extract_criteria,
    make_probe_variants,
    neutralize_plan_tokens,
    plan_tokens,
    probe_query,
    reframe_title,
    strip_plan_tokens,
)

MOTIVATING_TITLE = "교량 고정식 점검시설 확충방안"


def test_doctests() -> None:
    result = doctest.testmod(framing)
    assert result.attempted >= 15
    assert result.failed == 0


def test_lexicons_shape() -> None:
    assert len(PLAN_LEXICON) == 17
    assert len(set(PLAN_LEXICON)) == 17
    assert PLAN_LEXICON[:9] == ("방안", "개선", "확충", "검토", "계획", "조정", "추진", "제고", "강화")
    assert set(PAPER_PLAN_TOKENS) <= set(PLAN_LEXICON)
    assert not set(PLAN_LEXICON) & set(STANDARD_LEXICON)
    assert {"기준", "지침", "규정", "요령", "편람", "기준서"} <= set(STANDARD_LEXICON)


def test_neutral_substitutions_are_the_papers() -> None:
    assert NEUTRAL_SUBSTITUTIONS == {
        "방안": "부문", "개선": "영역", "검토": "항목", "계획": "측면",
        "조정": "범위", "추진": "부분", "제고": "대상", "강화": "요소",
    }


def test_every_plan_token_has_a_neutral_of_equal_length() -> None:
    table = {**EXTRA_NEUTRAL_SUBSTITUTIONS, **NEUTRAL_SUBSTITUTIONS}
    assert set(table) == set(PLAN_LEXICON)
    assert not set(EXTRA_NEUTRAL_SUBSTITUTIONS) & set(NEUTRAL_SUBSTITUTIONS)
    replacements = list(table.values())
    assert len(set(replacements)) == len(replacements)  # one-to-one
    for token, neutral in table.items():
        assert len(neutral) == len(token)
        # a neutral noun belongs to neither lexicon, not even as a substring
        assert plan_tokens(neutral) == []
        assert classify_title(neutral) == "neither"


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        (MOTIVATING_TITLE, "plan"),
        ("배수시설 개선방안 검토", "plan"),
        ("포장 설계기준", "standard"),
        ("터널 환기설비 설치지침", "standard"),
        ("설치기준 개선방안", "mixed"),
        ("개요", "neither"),
        ("", "neither"),
    ],
)
def test_classify_title(title: str, expected: str) -> None:
    assert classify_title(title) == expected


def test_plan_tokens_order_and_repeats() -> None:
    assert plan_tokens("배수시설 개선방안 검토 및 개선") == ["개선", "방안", "검토", "개선"]
    assert plan_tokens("포장 설계기준") == []


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        (MOTIVATING_TITLE, "교량 고정식 점검시설"),
        ("점검시설확충방안", "점검시설"),
        ("포장 유지관리 개선 및 강화 방안", "포장 유지관리"),
        ("배수시설 개선을 위한 검토", "배수시설"),
        ("교통안전시설 개선·보완방안", "교통안전시설"),
        ("터널 환기 설계기준 개선 (안)", "터널 환기 설계기준"),
        ("개선방안", ""),
        ("  배수시설   개요 ", "배수시설 개요"),
    ],
)
def test_strip_plan_tokens(title: str, expected: str) -> None:
    assert strip_plan_tokens(title) == expected


def test_neutralize_keeps_length() -> None:
    title = "배수시설 개선방안 검토 및 추진계획"
    out = neutralize_plan_tokens(title)
    assert out == "배수시설 영역부문 항목 및 부분측면"
    assert len(out) == len(title)


def test_extract_criteria_particles_and_order() -> None:
    body = (
        "점검시설의 설치기준은 다음과 같다. 구조기준에서는 하중을 정한다. "
        "설치기준에 따라 설치하고 안전기준으로는 난간을 둔다. 설치기준들은 개정된다."
    )
    assert extract_criteria(body) == ["설치기준", "구조기준", "안전기준"]
    assert extract_criteria("과세기준인 배기량, 성취기준별 목표, 설계기준상의 값") == [
        "과세기준", "성취기준", "설계기준",
    ]
    assert criterion_frequencies(body) == {"설치기준": 3, "구조기준": 1, "안전기준": 1}


@pytest.mark.parametrize(
    "body",
    [
        "기준에 따라 설치한다.",      # standalone head
        "설치 기준에 따른다.",        # spaced: the head stands alone
        "이기준 각기준 해당기준",      # determiners
        "기준점 측량 설계기준서 참조",  # not ~기준 compounds
        "검사 김기준(공판), 박기준은",  # one-syllable prefix: a person's name
        "",
    ],
)
def test_extract_criteria_rejects_non_compounds(body: str) -> None:
    assert extract_criteria(body) == []


def test_extract_criteria_skips_title_compounds_ignoring_spaces() -> None:
    body = "설치기준과 구조기준을 따른다."
    assert extract_criteria(body, title="교량 설치 기준") == ["구조기준"]
    assert extract_criteria(body, title="교량 설치기준 개선") == ["구조기준"]


def test_extract_criteria_other_heads() -> None:
    body = "설계지침과 설치기준, 운영규정에 따른다."
    assert extract_criteria(body, heads=("기준", "지침")) == ["설계지침", "설치기준"]
    with pytest.raises(ConfigurationError, match="heads"):
        extract_criteria(body, heads=())
    with pytest.raises(ConfigurationError, match="heads"):
        extract_criteria(body, heads="기준")  # type: ignore[arg-type]


def test_reframe_title_forms() -> None:
    assert reframe_title(MOTIVATING_TITLE, "설치기준", "cf") == "교량 고정식 점검시설 설치기준"
    assert reframe_title(MOTIVATING_TITLE, "설치기준", "cfp") == MOTIVATING_TITLE + " 설치기준"
    assert reframe_title(MOTIVATING_TITLE, "설치기준", "cfn") == "교량 고정식 점검시설 분야부문 설치기준"
    assert reframe_title("개선방안", "설치기준", "cf") == "설치기준"
    # no doubled word when the title already ends in (part of) the criterion
    assert reframe_title("터널 비상주차대 설치 계획", "설치기준", "cf") == "터널 비상주차대 설치기준"
    assert reframe_title("점검시설 설치기준 개선방안", "설치기준", "cf") == "점검시설 설치기준"
    with pytest.raises(ConfigurationError, match="form"):
        reframe_title(MOTIVATING_TITLE, "설치기준", "xx")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="criterion"):
        reframe_title(MOTIVATING_TITLE, "  ", "cf")


def test_cfn_matches_cfp_length() -> None:
    for title in (MOTIVATING_TITLE, "배수시설 개선방안 검토", "추진계획 조정"):
        assert len(reframe_title(title, "설치기준", "cfn")) == len(
            reframe_title(title, "설치기준", "cfp")
        )


def test_make_probe_variants_table2() -> None:
    body = "점검시설의 설치기준은 다음과 같다.\n폭은 0.6 m 이상."
    v = make_probe_variants(MOTIVATING_TITLE, body, "설치기준")
    assert set(v) == {"orig", "cf", "cfp", "cfn", "cfb", "cfs"}
    assert v["orig"] == f"## {MOTIVATING_TITLE}\n\n{body}"
    assert v["cf"] == f"## 교량 고정식 점검시설 설치기준\n\n{body}"
    assert v["cfp"] == f"## {MOTIVATING_TITLE} 설치기준\n\n{body}"
    assert v["cfn"] == f"## 교량 고정식 점검시설 분야부문 설치기준\n\n{body}"
    assert v["cfb"] == f"## {MOTIVATING_TITLE}\n\n{body}\n설치기준"
    assert v["cfs"] == f"## {MOTIVATING_TITLE}\n\n설치기준\n{body}"
    # frequency matched: each of cf/cfp/cfn/cfb/cfs holds exactly one more mention than orig
    base = v["orig"].count("설치기준")
    for key in ("cf", "cfp", "cfn", "cfb", "cfs"):
        assert v[key].count("설치기준") == base + 1, key


def test_make_probe_variants_truncation_keeps_cfb_mention() -> None:
    body = "가" * 9000
    v = make_probe_variants(MOTIVATING_TITLE, body, "설치기준")
    for doc in v.values():
        assert len(doc) <= 8000
    assert v["cfb"].endswith("\n설치기준")
    assert v["cfs"].count("설치기준") == 1
    assert v["orig"] == (f"## {MOTIVATING_TITLE}\n\n" + body)[:8000]


def test_probe_query() -> None:
    assert probe_query(MOTIVATING_TITLE, "설치기준") == "교량 고정식 점검시설 설치기준"
    assert probe_query("개선방안", "설치기준") == "설치기준"


_titles = st.lists(
    st.sampled_from(list(PLAN_LEXICON) + ["교량", "배수시설", "및", "·", "설치기준", "터널", "(안)"]),
    max_size=8,
).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(_titles)
def test_strip_properties(title: str) -> None:
    stripped = strip_plan_tokens(title)
    assert plan_tokens(stripped) == []
    assert strip_plan_tokens(stripped) == stripped  # idempotent
    cf = reframe_title(title, "설치기준", "cf")
    assert classify_title(cf) in {"standard", "neither"} or "설치기준" in cf
    assert classify_title(cf) != "plan"
    assert cf.endswith("설치기준")


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="가나다설치구조기준은는에서의 .점서", max_size=60))
def test_extract_properties(body: str) -> None:
    found = extract_criteria(body)
    assert len(found) == len(set(found))
    for compound in found:
        assert compound.endswith("기준") and len(compound) >= 4
        assert compound in body


@pytest.mark.corpus
def test_regex_extractor_agrees_with_kiwi_nouns(shared_dir: Path) -> None:
    """Differential check against an independent oracle: Kiwi noun compounds ending in 기준
    (>= 4 characters) on the LHCS construction-spec corpus. Measured: P 0.94 / R 0.97."""
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    tok = KiwiTokenizer()
    rows = [
        json.loads(line)
        for line in (shared_dir / "eval" / "lhcs_construction" / "corpus.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()[:300]
    ]
    both = regex_only = kiwi_only = 0
    for row in rows:
        text = row["text"][:4000]
        ours = set(extract_criteria(text))
        kiwi = {c for c in tok.noun_compounds(text) if c.endswith("기준") and len(c) >= 4}
        both += len(ours & kiwi)
        regex_only += len(ours - kiwi)
        kiwi_only += len(kiwi - ours)
    assert both >= 30
    assert both / (both + regex_only) >= 0.9
    assert both / (both + kiwi_only) >= 0.9
