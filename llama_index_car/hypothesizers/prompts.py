"""Prompt templates of the LLM hypothesizers (exposed through ``get_prompts``/``update_prompts``).

* :data:`CRITERION_HYPOTHESIS_PROMPT` — the paper's §5.8 criterion hypothesis: rewrite a
  (often paraphrased) question into the formal criterion vocabulary a Korean technical
  standard would use, **without answering it**. Few-shot examples come from domains unrelated
  to road design (food hygiene, electrical installations, hospital air quality, fire safety),
  so the prompt leaks nothing of a highway benchmark. Output: two labelled lines,
  ``가설: …`` and ``기준어: a, b``, parsed by
  :func:`llama_index_car.hypothesizers.llm.parse_criterion_output`.
* :data:`HYDE_PROMPT` — the generic HyDE baseline (Gao et al., 2023): a hypothetical passage
  that answers the question.

Both take one variable, ``{query}``.

>>> "{query}" in CRITERION_HYPOTHESIS_TMPL and "{query}" in HYDE_TMPL
True
"""

from __future__ import annotations

from llama_index.core.prompts import PromptTemplate

CRITERION_HYPOTHESIS_TMPL = """\
당신은 한국 기술기준·설계지침·규정 문서의 용어에 정통한 검색 보조자입니다.
아래 질문에 답하지 마세요. 대신 이 질문에 답하는 조항이 기준 문서 안에서 어떤 공식 용어로
쓰여 있을지 짧은 가설을 세우세요.

규칙:
- 일상어·풀어 쓴 표현을 기준서가 쓰는 정식 명칭(시설·부재의 명칭)과 기준 용어
  (…기준, …지침, …규정, …요건, …한계, …간격, …높이 등)로 바꿉니다.
- 답(수치, 결론)을 추측하지 마세요. 질문에 없는 사실을 만들지 마세요.
- 정확히 두 줄만 출력합니다. 설명, 인사말, 따옴표, 코드블록 없이:
  가설: <기준서의 조항 제목처럼 쓴 한 줄, 40자 이내>
  기준어: <가설의 핵심 용어 1~4개, 쉼표로 구분>

예시 1
질문: 식당 주방에서 기름 연기가 빠지도록 천장에 다는 장치는 어떻게 달아야 하나요?
가설: 조리장 배기후드 설치기준 및 환기기준
기준어: 배기후드, 설치기준, 환기기준

예시 2
질문: 욕실처럼 물기가 많은 곳의 콘센트에는 어떤 차단 장치가 있어야 하죠?
가설: 습기 장소 누전차단기 시설기준
기준어: 누전차단기, 시설기준, 습기 장소

예시 3
질문: 수술하는 방의 공기는 얼마나 깨끗하게 유지해야 하나요?
가설: 수술실 공기청정도 기준 및 환기횟수 기준
기준어: 공기청정도 기준, 환기횟수, 수술실

예시 4
질문: 불이 났을 때 사람들이 빠져나가는 길의 너비는 어떻게 정해져 있나요?
가설: 피난통로 유효폭 기준
기준어: 피난통로, 유효폭, 피난기준

질문: {query}
"""

CRITERION_HYPOTHESIS_PROMPT = PromptTemplate(CRITERION_HYPOTHESIS_TMPL)

HYDE_TMPL = """\
다음 질문에 답하는 기술 문서의 한 단락을 3~5문장으로 작성하세요.
사실 여부가 확실하지 않아도 그럴듯하게 쓰고, 단락만 출력하세요.

질문: {query}
단락:"""

HYDE_PROMPT = PromptTemplate(HYDE_TMPL)
