"""Small standard-like Korean texts shared by the hypothesizer and CAR tests.

Each sentence carries ``~기준``/``~방법``/``~간격``/``~높이`` compounds and a topic keyword
(배수, 포장, 교량, 조명) so criterion mining has something to find.
"""

from __future__ import annotations

CRITERION_TEXTS: tuple[str, ...] = (
    "배수시설의 설치기준은 배수 구배를 따른다. 배수관의 설치간격은 20m 이하로 한다.",
    "배수 측구의 설치기준과 배수 유량 산정방법을 정한다.",
    "포장 두께의 설계기준은 포장층 구성에 따른다. 포장 다짐방법을 규정한다.",
    "포장 보수의 설계기준과 포장 균열 허용치를 정한다.",
    "교량 난간의 설치높이는 1.1m 이상으로 하며 교량 점검방법을 따른다.",
    "교량 받침의 설치높이와 교량 신축이음 설치간격을 정한다.",
    "조명 시설의 조도기준을 따른다. 터널 조명의 조도기준은 별표와 같다.",
)
