"""The bundled demo corpus, as data: ten short guideline documents and fourteen questions.

The documents imitate the Korean expressway design-practice guidelines the paper studies
(도로설계실무지침): most section titles are *plan-framed* (…확충방안, …개선방안 검토,
…설치 계획) while their bodies and tables state the criteria (설치기준, 구조기준, 배치기준 …);
a few sections are *standard-framed* (…설치기준) and some are unrelated distractors. Every
text was written for this project. ``scripts/make_demo_corpus.py`` turns this module into the
committed ``llama_index_car/data/demo_corpus/*.hwpx`` files and ``demo_questions.jsonl``.

Tables are given as rows of cell texts plus merges ``(row, col, row_span, col_span)``; a cell
covered by a merge holds ``""`` in ``rows``.

>>> len(DOCUMENTS), len(QUESTIONS)
(10, 14)
>>> DOCUMENTS[0].sections[0].title
'노측 배수시설 확충방안'
"""

from __future__ import annotations

from llama_index_car.demo._documents import DOCUMENTS
from llama_index_car.demo._types import (
    DocumentSpec,
    QuestionSpec,
    QuestionStyle,
    SectionKind,
    SectionSpec,
    TableSpec,
)

__all__ = [
    "DOCUMENTS",
    "QUESTIONS",
    "DocumentSpec",
    "QuestionSpec",
    "QuestionStyle",
    "SectionKind",
    "SectionSpec",
    "TableSpec",
]

QUESTIONS: tuple[QuestionSpec, ...] = (
    QuestionSpec(
        "d01",
        "비 올 때 고속도로 옆 도랑은 얼마나 깊어야 해?",
        "dg2019_drainage.hwpx",
        "노측 배수시설 확충방안",
        "설치기준",
        "everyday",
    ),
    QuestionSpec(
        "d02",
        "교량 점검통로의 구조기준은?",
        "dg2018_bridge.hwpx",
        "교량 점검시설 개선방안 검토",
        "구조기준",
        "formal",
    ),
    QuestionSpec(
        "d03",
        "날씨가 더우면 늘어나는 다리 이음 부분은 어떤 종류를 써야 하나요?",
        "dg2018_bridge.hwpx",
        "신축이음장치 개선 적용방안",
        "형식기준",
        "everyday",
    ),
    QuestionSpec(
        "d04",
        "터널 나갈 때 해 때문에 눈부신 걸 막는 시설은 어느 방향 터널에 설치해?",
        "dg2012_tunnel.hwpx",
        "터널 출구부 직광 저감시설 설치방안",
        "방위기준",
        "everyday",
    ),
    QuestionSpec(
        "d05",
        "터널 비상주차대 설치간격 기준",
        "dg2012_tunnel.hwpx",
        "터널 비상주차대 설치 계획",
        "설치기준",
        "formal",
    ),
    QuestionSpec(
        "d06",
        "드론 통합측량 대가기준",
        "dg2021_survey.hwpx",
        "드론 통합측량 추진방안",
        "대가기준",
        "formal",
    ),
    QuestionSpec(
        "d07",
        "산을 깎아 만든 길옆 경사면은 얼마나 완만해야 해?",
        "dg2016_slope.hwpx",
        "깎기 비탈면 경사 조정방안",
        "경사기준",
        "everyday",
    ),
    QuestionSpec(
        "d08",
        "콘크리트 포장 가로수축줄눈 간격과 절단 깊이 기준",
        "dg2017_pavement.hwpx",
        "콘크리트 포장 줄눈 개선방안",
        "설치기준",
        "formal",
    ),
    QuestionSpec(
        "d09",
        "설계속도 80km/h 이상 중앙분리대 방호울타리 설치기준",
        "dg2022_safety.hwpx",
        "중앙분리대 방호울타리 개선방안",
        "설치기준",
        "formal",
    ),
    QuestionSpec(
        "d10",
        "졸음쉼터는 몇 km마다 만들어야 돼?",
        "dg2015_rest.hwpx",
        "졸음쉼터 설치 확충방안",
        "배치기준",
        "everyday",
    ),
    QuestionSpec(
        "d11",
        "하이패스 차로는 폭을 얼마로 하고 몇 km로 달려도 돼?",
        "dg2023_toll.hwpx",
        "하이패스 차로 확충방안",
        "설치기준",
        "everyday",
    ),
    QuestionSpec(
        "d12",
        "교통관리용 CCTV 설치간격 기준",
        "dg2020_its.hwpx",
        "CCTV 설치 확충방안",
        "설치기준",
        "formal",
    ),
    QuestionSpec(
        "d13",
        "낙석방지울타리 높이 설치기준",
        "dg2016_slope.hwpx",
        "낙석방지시설 설치 계획",
        "설치기준",
        "formal",
    ),
    QuestionSpec(
        "d14",
        "고속도로에 잘못 들어와 거꾸로 달리는 차를 막는 장치는 어디에 둬야 해?",
        "dg2022_safety.hwpx",
        "역주행 방지시설 설치 확충방안",
        "설치기준",
        "everyday",
    ),
)
