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

from dataclasses import dataclass, field
from typing import Literal

SectionKind = Literal["plan", "standard", "distractor"]
QuestionStyle = Literal["formal", "everyday"]


@dataclass(frozen=True)
class TableSpec:
    """A table: ``rows`` of cell texts, merges as ``(row, col, row_span, col_span)``."""

    rows: tuple[tuple[str, ...], ...]
    spans: tuple[tuple[int, int, int, int], ...] = ()
    caption: str = ""


@dataclass(frozen=True)
class SectionSpec:
    """One titled section: paragraphs first, then tables, then closing paragraphs."""

    title: str
    kind: SectionKind
    paragraphs: tuple[str, ...]
    tables: tuple[TableSpec, ...] = ()
    closing: tuple[str, ...] = ()


@dataclass(frozen=True)
class DocumentSpec:
    """One HWPX file: ``file_name`` (ASCII), a document heading and its sections."""

    file_name: str
    title: str
    sections: tuple[SectionSpec, ...]


@dataclass(frozen=True)
class QuestionSpec:
    """A criterion question and the section that answers it (``gold_file``/``gold_section``)."""

    qid: str
    question: str
    gold_file: str
    gold_section: str
    criterion: str
    style: QuestionStyle
    note: str = field(default="", compare=False)


DOCUMENTS: tuple[DocumentSpec, ...] = (
    DocumentSpec(
        file_name="dg2019_drainage.hwpx",
        title="도로설계실무지침 2019 제3편 배수",
        sections=(
            SectionSpec(
                title="노측 배수시설 확충방안",
                kind="plan",
                paragraphs=(
                    "최근 국지성 집중호우가 잦아지면서 깎기부 노측에서 우수가 넘쳐 포장면으로 "
                    "유입되는 사례가 늘고 있다. 이에 기존 L형 측구 위주의 노측 배수체계를 "
                    "구간 특성에 따라 U형 측구와 V형 측구로 보강한다.",
                    "측구 설치기준은 다음과 같다. 측구의 설계강우 재현기간은 10년으로 하되 "
                    "깎기 높이 10m 이상 구간은 20년을 적용한다. 측구의 깊이는 L형 0.3m 이상, "
                    "U형 0.6m 이상으로 하며 통수단면의 여유고는 설계수심의 20% 이상 확보한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 3.1 측구 형식별 설치기준",
                        rows=(
                            ("구분", "형식", "깊이(m)", "폭(m)", "적용 구간"),
                            ("노측 측구", "L형", "0.3 이상", "0.6", "흙쌓기부, 완경사 깎기부"),
                            ("", "U형", "0.6 이상", "0.6~1.0", "깎기부, 집수면적 1ha 이상"),
                            ("중앙 측구", "V형", "0.2 이상", "1.0", "중앙분리대 내측"),
                        ),
                        spans=((1, 0, 2, 1),),
                    ),
                ),
                closing=(
                    "측구 종단경사가 0.3% 미만인 구간은 퇴적을 막기 위하여 20m 이내 간격으로 "
                    "집수정을 둔다.",
                ),
            ),
            SectionSpec(
                title="비탈면 배수 개선방안 검토",
                kind="plan",
                paragraphs=(
                    "깎기 비탈면의 소단 배수가 원활하지 않으면 침투수가 비탈면 표층을 "
                    "유실시킨다. 소단 배수구와 종배수구의 배치를 다음과 같이 개선한다.",
                    "배치기준: 소단 배수구는 모든 소단에 설치하고 종배수구는 50m 이내 "
                    "간격으로 두며, 종배수구 하단에는 감세공을 설치한다. 소단 배수구의 "
                    "종단경사는 1% 이상으로 한다.",
                ),
            ),
            SectionSpec(
                title="집수정 및 맨홀 설치기준",
                kind="standard",
                paragraphs=(
                    "집수정은 측구와 배수관의 접속부, 배수관의 방향 또는 관경이 바뀌는 곳에 "
                    "설치한다. 집수정의 내부 치수는 0.6m×0.6m 이상으로 하고 바닥에는 "
                    "0.15m 이상의 침사 깊이를 둔다.",
                    "맨홀은 관경 600mm 이하 배수관에서 75m, 그 이상에서는 100m 이내 간격으로 "
                    "설치한다.",
                ),
            ),
            SectionSpec(
                title="배수 관련 민원 처리 현황",
                kind="distractor",
                paragraphs=(
                    "최근 3년간 접수된 배수 관련 민원은 모두 412건으로, 인접 농경지 침수가 "
                    "58%, 도로 결빙이 21%, 악취 및 해충이 9%를 차지하였다.",
                    "민원의 대부분은 현장 점검 후 30일 이내에 처리되었으며, 처리 결과는 "
                    "지사별 민원관리대장에 기록한다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2018_bridge.hwpx",
        title="도로설계실무지침 2018 제4편 교량",
        sections=(
            SectionSpec(
                title="교량 점검시설 개선방안 검토",
                kind="plan",
                paragraphs=(
                    "장대교량의 하부 점검은 고소작업차에 의존하여 차로 통제가 잦고 "
                    "점검 사각지대가 생긴다. 교량 하부에 고정식 점검통로를 설치하여 "
                    "상시 점검과 계측센서 유지관리가 가능하도록 한다.",
                    "점검시설의 구조기준은 다음 표에 따른다. 점검통로의 설계 활하중은 "
                    "3.5kN/m²로 하고 부식 환경을 고려하여 용융아연도금 강재를 사용한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 4.4 점검시설 구조기준",
                        rows=(
                            ("부재", "항목", "기준"),
                            ("점검통로", "유효폭", "0.6m 이상"),
                            ("", "설계 활하중", "3.5kN/m²"),
                            ("난간", "높이", "1.1m 이상"),
                            ("", "수평하중", "1.0kN/m"),
                            ("점검계단", "경사", "60° 이하"),
                        ),
                        spans=((1, 0, 2, 1), (3, 0, 2, 1)),
                    ),
                ),
            ),
            SectionSpec(
                title="신축이음장치 개선 적용방안",
                kind="plan",
                paragraphs=(
                    "신축이음장치는 온도 변화와 크리프에 따른 상부구조의 신축을 흡수하는 "
                    "장치로서 파손 시 차량 충격과 누수가 발생한다.",
                    "형식기준: 설계 신축량 50mm 이하는 줄눈형 또는 맹글형, 50mm 초과 "
                    "160mm 이하는 레일형, 160mm를 넘으면 모듈러형을 적용한다. 모든 형식은 "
                    "비배수형으로 하고 방수층과 일체로 시공한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 4.5 신축이음장치 형식기준",
                        rows=(
                            ("설계 신축량", "형식", "비고"),
                            ("50mm 이하", "줄눈형, 맹글형", "비배수형"),
                            ("50mm 초과 160mm 이하", "레일형", "비배수형"),
                            ("160mm 초과", "모듈러형", "비배수형"),
                        ),
                        spans=(),
                    ),
                ),
            ),
            SectionSpec(
                title="교량 받침 교체 설계기준",
                kind="standard",
                paragraphs=(
                    "교량 받침 교체 시 상부구조 인상량은 10mm 이내로 하고 인상 중에는 "
                    "차로를 통제한다. 교체 받침의 설계 수평력은 사하중 반력의 10% 이상으로 한다.",
                ),
            ),
            SectionSpec(
                title="교량 경관 디자인 추진 계획",
                kind="distractor",
                paragraphs=(
                    "지역 상징성이 높은 교량은 주민 의견 수렴과 경관위원회 자문을 거쳐 "
                    "경관 디자인을 추진한다. 색채는 주변 자연환경과 조화되는 저채도 색상을 "
                    "우선 검토하고 야간 경관조명은 에너지 절감형 LED를 사용한다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2012_tunnel.hwpx",
        title="도로설계실무지침 2012 제7편 터널",
        sections=(
            SectionSpec(
                title="터널 출구부 직광 저감시설 설치방안",
                kind="plan",
                paragraphs=(
                    "동서 방향으로 놓인 터널은 일출과 일몰 시간대에 출구부로 직사광선이 "
                    "들어와 운전자의 시력 회복이 늦어진다. 출구부 갱구 전면에 차광 루버를 "
                    "두어 직광을 저감한다.",
                    "방위기준: 터널 출구의 진행 방위가 정동 또는 정서를 중심으로 ±30° "
                    "이내인 경우에 설치한다. 설치 길이는 설계속도 100km/h에서 80m, "
                    "80km/h에서 60m를 표준으로 한다.",
                ),
            ),
            SectionSpec(
                title="터널 비상주차대 설치 계획",
                kind="plan",
                paragraphs=(
                    "연장 1,000m 이상 터널에는 고장 차량의 대피를 위한 비상주차대를 둔다.",
                    "설치기준은 아래와 같다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 7.8 비상주차대 설치기준",
                        rows=(
                            ("항목", "기준", ""),
                            ("설치 간격", "750m 이내", ""),
                            ("규격", "길이", "40m (테이퍼 포함)"),
                            ("", "폭", "3.0m 이상"),
                        ),
                        spans=((0, 1, 1, 2), (1, 1, 1, 2), (2, 0, 2, 1)),
                    ),
                ),
            ),
            SectionSpec(
                title="터널 조명 설계기준",
                kind="standard",
                paragraphs=(
                    "터널 조명은 입구부, 기본부, 출구부로 구분한다. 기본부 노면휘도는 "
                    "설계속도 100km/h에서 9cd/m², 80km/h에서 4.5cd/m²를 기준으로 한다.",
                    "입구부 조명의 색온도는 4,000K에서 5,000K 사이로 한다.",
                ),
            ),
            SectionSpec(
                title="터널 명칭 부여 요령",
                kind="distractor",
                paragraphs=(
                    "터널 명칭은 해당 지역의 행정구역명이나 산 이름을 따르며, 상하행선은 "
                    "같은 명칭을 사용한다. 명칭판은 갱문 상단 중앙에 설치한다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2021_survey.hwpx",
        title="도로설계실무지침 2021 제1편 조사 및 측량",
        sections=(
            SectionSpec(
                title="드론 통합측량 추진방안",
                kind="plan",
                paragraphs=(
                    "노선 선정 단계의 지형 조사에 드론 사진측량과 라이다 측량을 함께 쓰는 "
                    "통합측량을 도입하여 조사 기간을 줄인다.",
                    "측량 대가기준은 엔지니어링사업 대가 산정 방식을 따르되 드론 비행과 "
                    "점군 처리 공정을 별도 항목으로 계상한다. 통합측량 성과의 정확도는 "
                    "수평 ±0.05m, 수직 ±0.10m 이내로 한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 1.2 드론 통합측량 대가기준(1km² 당)",
                        rows=(
                            ("공정", "세부 항목", "인·일"),
                            ("외업", "지상기준점 측량", "2.0"),
                            ("", "드론 비행", "1.5"),
                            ("내업", "점군 처리", "3.0"),
                            ("", "성과 검수", "1.0"),
                        ),
                        spans=((1, 0, 2, 1), (3, 0, 2, 1)),
                    ),
                ),
            ),
            SectionSpec(
                title="지형측량 성과 검수 강화방안",
                kind="plan",
                paragraphs=(
                    "용역 성과의 품질 편차를 줄이기 위하여 검수 절차를 강화한다. "
                    "검수기준: 검사점은 1km²당 20점 이상을 무작위로 선정하고, 검사점 "
                    "오차의 평균제곱근이 허용오차의 1/2을 넘으면 재측량한다.",
                ),
            ),
            SectionSpec(
                title="측량 용역 발주 절차",
                kind="distractor",
                paragraphs=(
                    "측량 용역은 설계 착수 전에 발주하고 과업지시서에는 측량 범위, 성과품 "
                    "목록, 납품 형식을 명시한다. 계약 후 14일 이내에 착수계를 제출받는다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2016_slope.hwpx",
        title="도로설계실무지침 2016 제2편 토공",
        sections=(
            SectionSpec(
                title="깎기 비탈면 경사 조정방안",
                kind="plan",
                paragraphs=(
                    "깎기 비탈면의 붕괴 사례를 분석한 결과 지층 구분 없이 단일 경사를 "
                    "적용한 구간에서 피해가 집중되었다. 지층별 표준경사를 다음과 같이 조정한다.",
                    "비탈면 경사기준은 표에 따르며, 깎기 높이 5m마다 폭 1.0m의 소단을 둔다. "
                    "깎기 높이가 20m를 넘는 경우에는 안정해석으로 경사를 결정한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 2.3 깎기 비탈면 표준경사",
                        rows=(
                            ("지층", "", "표준경사", "소단"),
                            ("토사", "", "1:1.5", "5m마다 폭 1.0m"),
                            ("암반", "리핑암", "1:1.0", ""),
                            ("", "발파암", "1:0.5", ""),
                        ),
                        spans=((0, 0, 1, 2), (1, 0, 1, 2), (2, 0, 2, 1), (1, 3, 3, 1)),
                    ),
                ),
            ),
            SectionSpec(
                title="낙석방지시설 설치 계획",
                kind="plan",
                paragraphs=(
                    "암반 깎기부 중 절리가 발달한 구간에는 낙석방지시설을 설치한다.",
                    "설치기준: 낙석방지울타리의 높이는 2.0m 이상으로 하고 비탈 끝에서 "
                    "1.5m 이상 떨어뜨려 설치한다. 낙석 에너지가 100kJ를 넘는 구간은 "
                    "낙석방지망과 링네트를 병용한다.",
                ),
            ),
            SectionSpec(
                title="흙쌓기 다짐기준",
                kind="standard",
                paragraphs=(
                    "노체는 최대건조밀도의 90% 이상, 노상은 95% 이상으로 다진다. "
                    "1층 다짐 두께는 노체 0.3m, 노상 0.2m 이하로 한다.",
                ),
            ),
            SectionSpec(
                title="토공 장비 운용 현황",
                kind="distractor",
                paragraphs=(
                    "최근 5년간 토공 현장의 장비 투입은 굴착기 46%, 덤프트럭 38%, 다짐장비 "
                    "16% 순이었으며 전동화 장비의 비중은 아직 2% 미만이다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2017_pavement.hwpx",
        title="도로설계실무지침 2017 제5편 포장",
        sections=(
            SectionSpec(
                title="콘크리트 포장 줄눈 개선방안",
                kind="plan",
                paragraphs=(
                    "줄눈부 단차와 스폴링이 콘크리트 포장 파손의 주원인으로 조사되었다. "
                    "줄눈 배치와 절단 깊이를 개선한다.",
                    "줄눈 설치기준: 가로수축줄눈 간격은 6m로 하고 절단 깊이는 포장 두께의 "
                    "1/4 이상으로 한다. 다웰바는 직경 32mm, 길이 500mm를 300mm 간격으로 둔다.",
                ),
            ),
            SectionSpec(
                title="길어깨 포장 확충방안",
                kind="plan",
                paragraphs=(
                    "길어깨를 비상 주정차와 유지보수 차량 통행에 쓸 수 있도록 포장 폭과 "
                    "구조를 보강한다.",
                    "폭 기준: 설계속도 80km/h 이상 본선의 바깥쪽 길어깨 폭은 3.0m 이상, "
                    "터널 및 장대교량 구간은 2.0m 이상으로 한다. 길어깨 포장 두께는 "
                    "본선 표층과 같게 한다.",
                ),
            ),
            SectionSpec(
                title="아스팔트 포장 다짐기준",
                kind="standard",
                paragraphs=(
                    "아스팔트 혼합물의 현장 다짐도는 기준밀도의 96% 이상으로 한다. "
                    "포설 온도는 145℃ 이상, 1차 다짐 온도는 130℃ 이상을 유지한다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2022_safety.hwpx",
        title="도로설계실무지침 2022 제6편 안전시설",
        sections=(
            SectionSpec(
                title="중앙분리대 방호울타리 개선방안",
                kind="plan",
                paragraphs=(
                    "대형차의 중앙분리대 돌파 사고를 줄이기 위하여 방호울타리 등급을 상향한다.",
                    "설치기준은 다음과 같다. 설계속도 80km/h 이상 구간의 중앙분리대에는 "
                    "SB5 등급 이상을 설치하고, 곡선반경 400m 이하 구간과 교량부는 SB6 "
                    "등급을 적용한다. 방호울타리 높이는 0.81m 이상으로 한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 6.2 중앙분리대 방호울타리 등급",
                        rows=(
                            ("설계속도", "구간", "등급"),
                            ("80km/h 이상", "일반 구간", "SB5"),
                            ("", "곡선반경 400m 이하, 교량", "SB6"),
                            ("80km/h 미만", "전 구간", "SB4"),
                        ),
                        spans=((1, 0, 2, 1),),
                    ),
                ),
            ),
            SectionSpec(
                title="역주행 방지시설 설치 확충방안",
                kind="plan",
                paragraphs=(
                    "나들목 진출로로 잘못 진입하는 역주행 사고가 반복되고 있다.",
                    "설치기준: 모든 진출 연결로 종점부에 진입금지 노면표시와 역주행 경고 "
                    "표지를 두고, 역주행 검지기는 연결로 종점에서 50m 이내에 설치한다. "
                    "검지 시 경고등은 3초 이내에 점등되어야 한다.",
                ),
            ),
            SectionSpec(
                title="긴급제동시설 설치기준",
                kind="standard",
                paragraphs=(
                    "종단경사 5% 이상이 1km 넘게 이어지는 내리막 구간에는 긴급제동시설을 "
                    "설치한다. 제동 차로의 길이는 진입속도 100km/h 기준 120m 이상으로 하고 "
                    "골재 포설 두께는 0.45m 이상으로 한다.",
                ),
            ),
            SectionSpec(
                title="안전시설 유지관리 교육 운영",
                kind="distractor",
                paragraphs=(
                    "안전시설 담당자는 연 1회 이상 유지관리 교육을 이수한다. 교육은 "
                    "이론 4시간과 현장 실습 4시간으로 구성한다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2015_rest.hwpx",
        title="도로설계실무지침 2015 제8편 휴게시설",
        sections=(
            SectionSpec(
                title="졸음쉼터 설치 확충방안",
                kind="plan",
                paragraphs=(
                    "휴게소 간 거리가 먼 구간에서 졸음운전 사고가 집중됨에 따라 졸음쉼터를 "
                    "확충한다.",
                    "배치기준: 휴게소 또는 다른 졸음쉼터와의 간격이 25km를 넘는 구간에 "
                    "설치하며, 주차면은 소형 10면 이상과 대형 3면 이상을 확보한다. "
                    "감속차로 길이는 설계속도 100km/h에서 160m 이상으로 한다.",
                ),
            ),
            SectionSpec(
                title="휴게소 화장실 개선방안",
                kind="plan",
                paragraphs=(
                    "이용객 대기 시간을 줄이도록 화장실을 개선한다. 여성 변기 수는 남성 "
                    "대소변기 합계의 1.5배 이상으로 하고, 장애인 화장실은 성별로 1개소 "
                    "이상 둔다.",
                ),
            ),
            SectionSpec(
                title="휴게소 운영사 평가 결과",
                kind="distractor",
                paragraphs=(
                    "2014년 운영 평가에서 전체 휴게소의 평균 점수는 83.4점이었으며 "
                    "고객 만족도 항목이 가장 크게 개선되었다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2023_toll.hwpx",
        title="도로설계실무지침 2023 제9편 영업시설",
        sections=(
            SectionSpec(
                title="하이패스 차로 확충방안",
                kind="plan",
                paragraphs=(
                    "하이패스 이용률이 85%를 넘어서면서 요금소 정체를 줄이기 위해 "
                    "다차로 하이패스를 확대한다.",
                    "설치기준: 다차로 하이패스의 차로 폭은 3.5m로 하고 통과 제한속도는 "
                    "80km/h로 한다. 단차로 하이패스의 차로 폭은 3.0m 이상, 제한속도는 "
                    "30km/h로 한다.",
                ),
                tables=(
                    TableSpec(
                        caption="표 9.1 하이패스 차로 설치기준",
                        rows=(
                            ("형식", "차로 폭", "제한속도", "분리시설"),
                            ("다차로", "3.5m", "80km/h", "노면표시"),
                            ("단차로", "3.0m 이상", "30km/h", "아일랜드"),
                        ),
                    ),
                ),
            ),
            SectionSpec(
                title="요금소 광장 조명 개선방안 검토",
                kind="plan",
                paragraphs=(
                    "요금소 광장의 야간 사고를 줄이기 위하여 조명을 개선한다. 조도기준: "
                    "요금소 전후 광장의 평균 노면조도는 50lx 이상, 균제도는 0.4 이상으로 한다.",
                ),
            ),
            SectionSpec(
                title="통행료 수납 인력 운영 현황",
                kind="distractor",
                paragraphs=(
                    "무인 수납 확대로 수납 인력은 최근 5년간 31% 감소하였으며 "
                    "전환 인력은 고객 안내와 현장 순찰 업무에 재배치되었다.",
                ),
            ),
        ),
    ),
    DocumentSpec(
        file_name="dg2020_its.hwpx",
        title="도로설계실무지침 2020 제10편 교통관리시설",
        sections=(
            SectionSpec(
                title="CCTV 설치 확충방안",
                kind="plan",
                paragraphs=(
                    "돌발상황 검지 공백을 줄이기 위하여 교통관리용 CCTV를 확충한다.",
                    "설치기준: 본선 CCTV는 2km 간격으로, 터널 내부는 200m 간격으로 "
                    "설치하며 분기점과 나들목 연결로 합류부에는 추가로 1대를 둔다. "
                    "카메라 설치 높이는 12m를 표준으로 한다.",
                ),
            ),
            SectionSpec(
                title="도로전광표지 설치 계획",
                kind="plan",
                paragraphs=(
                    "교통 정보를 운전자에게 미리 알리기 위하여 도로전광표지를 설치한다.",
                    "배치기준: 분기점 및 나들목 전방 2km 지점에 설치하고, 표지 간 간격은 "
                    "10km 이상으로 한다. 문자 높이는 설계속도 100km/h에서 0.45m 이상으로 한다.",
                ),
            ),
            SectionSpec(
                title="교통관리시스템 운영 예산 현황",
                kind="distractor",
                paragraphs=(
                    "2020년 교통관리시스템 운영 예산은 전년 대비 7% 증가하였으며 통신망 "
                    "임차료가 전체의 34%를 차지한다.",
                ),
            ),
        ),
    ),
)


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
