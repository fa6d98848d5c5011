"""Title framing: plan / standard lexicons, criterion extraction and title rewriting.

Pure functions over strings (no Kiwi, no LlamaIndex), shared by
:class:`~llama_index_car.transformers.reframing.CriterialReframer`, the counterfactual probe
(``llama-car probe``) and the offline hypothesizer. They implement the paper's §4.4 rules:

* a title is **plan-framed** when it contains a token of :data:`PLAN_LEXICON` and
  **standard-framed** when it contains one of :data:`STANDARD_LEXICON` (both → ``"mixed"``,
  neither → ``"neither"``); tokens are matched as substrings because Korean compounds carry
  no spaces (``확충방안``);
* the **criterion** of a section is the first ``~기준`` compound of its body that does not
  occur in its title (:func:`extract_criteria`);
* the counterfactual titles are ``cf`` (plan tokens removed + criterion), ``cfp`` (plan title +
  criterion) and ``cfn`` (each plan token replaced by a neutral noun of the same length +
  criterion), see :func:`reframe_title` and :func:`make_probe_variants`.

>>> classify_title("교량 고정식 점검시설 확충방안")
'plan'
>>> extract_criteria("점검시설의 설치기준은 다음과 같다. 설치기준에 따라 설치한다.")
['설치기준']
>>> reframe_title("교량 고정식 점검시설 확충방안", "설치기준", "cf")
'교량 고정식 점검시설 설치기준'
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import Literal

from llama_index_car._errors import ConfigurationError

__all__ = [
    "PLAN_LEXICON",
    "STANDARD_LEXICON",
    "TitleFrame",
    "classify_title",
    "extract_criteria",
    "make_probe_variants",
    "reframe_title",
    "strip_plan_tokens",
]

TitleFrame = Literal["plan", "standard", "mixed", "neither"]
ReframeForm = Literal["cf", "cfp", "cfn"]

#: The nine plan-framing tokens the paper names (§4.1, §4.4).
PAPER_PLAN_TOKENS: tuple[str, ...] = (
    "방안", "개선", "확충", "검토", "계획", "조정", "추진", "제고", "강화",
)

#: The 17-token plan lexicon. The first nine are the paper's; the paper does not list the
#: remaining eight, so these are **ours**: two-syllable nouns that frame a section as an
#: intention rather than a rule in Korean administrative titles (대책 countermeasure, 대안
#: alternative, 보완 supplement, 확대 expansion, 향상 enhancement, 개편 reorganisation, 정립
#: establishment, 마련 preparation). We avoided candidates that occur inside common
#: highway-design terms (방향 in 진행방향, 도입 in 터널 도입부, 정비 in 정비기준).
PLAN_LEXICON: tuple[str, ...] = PAPER_PLAN_TOKENS + (
    "대책", "대안", "보완", "확대", "향상", "개편", "정립", "마련",
)

#: Standard-framing tokens: a title containing one reads as a rule (기준, 지침 …).
STANDARD_LEXICON: tuple[str, ...] = (
    "기준", "기준서", "지침", "규정", "요령", "편람", "표준", "규격", "시방서", "세칙",
)

#: The paper's fixed neutral-token dictionary for the ``cfn`` control (§4.4), verbatim.
NEUTRAL_SUBSTITUTIONS: dict[str, str] = {
    "방안": "부문",
    "개선": "영역",
    "검토": "항목",
    "계획": "측면",
    "조정": "범위",
    "추진": "부분",
    "제고": "대상",
    "강화": "요소",
}

#: Ours: same-length neutral nouns for the plan tokens the paper's dictionary does not cover
#: (the paper reports that only its eight tokens occurred in its probe titles).
EXTRA_NEUTRAL_SUBSTITUTIONS: dict[str, str] = {
    "확충": "분야",
    "대책": "유형",
    "대안": "구분",
    "보완": "사항",
    "확대": "단위",
    "향상": "구역",
    "개편": "내용",
    "정립": "구성",
    "마련": "형태",
}

#: Heads of criterion compounds extracted by default (the paper's ``~기준``).
DEFAULT_CRITERION_HEADS: tuple[str, ...] = ("기준",)

#: Probe documents are truncated to this many characters (paper §4.4).
PROBE_MAX_CHARS = 8000

_HANGUL_RUN = re.compile(r"[가-힣]+")
# A compound needs at least two syllables before the head: one-syllable prefixes are mostly
# surnames (김기준, 박기준 are people) or line-broken words (회\n계기준) in real corpora.
_MIN_PREFIX = 2
# Particles / copula endings that may follow a criterion compound inside one Hangul run.
_PARTICLES = (
    "이다", "이며", "이고", "이나", "이라", "이란", "에서는", "에서의", "에서도", "에서",
    "에는", "에도", "에의", "에게", "으로는", "으로서", "으로써", "으로도", "으로", "로는",
    "로서", "로써", "로도", "로", "과의", "와의", "과는", "와는", "까지", "부터", "보다",
    "처럼", "만큼", "마다", "은", "는", "이", "가", "을", "를", "의", "에", "과", "와", "도",
    "만", "등", "인", "이면", "이라는", "이지만", "이라도", "만을", "만으로", "별", "상", "별로",
    "상의",
)
_PARTICLE_RE = "(?:" + "|".join(sorted(_PARTICLES, key=len, reverse=True)) + ")"
# Prefixes that are determiners, not compound parts: "이기준", "각기준", "해당기준".
_DETERMINER_PREFIXES = frozenset(
    {"이", "그", "저", "각", "본", "동", "새", "현", "전", "해당", "상기", "하기", "위", "다음",
     "기존", "관련", "모든", "같은", "다른", "이런", "그런", "위의", "아래"}
)
# Words left dangling once the plan tokens are removed ("개선 및 강화 방안" → "및").
_CONNECTORS = frozenset(
    {"및", "등", "또는", "와", "과", "의", "을", "를", "에", "위한", "대한", "관한", "따른",
     "통한", "위해", "에대한", "을위한", "를위한", "에관한", "에따른", "안", "(안)"}
)
_ORPHAN_PUNCT = re.compile(r"^[\s·ㆍ,/\-–—:;()\[\]「」『』<>〈〉]+$")
_FORMS: tuple[str, ...] = ("cf", "cfp", "cfn")


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text or "")


def _find_tokens(text: str, lexicon: Sequence[str]) -> list[tuple[int, int, str]]:
    """Non-overlapping occurrences of lexicon tokens, left to right, longest match first."""
    ordered = sorted(set(lexicon), key=len, reverse=True)
    hits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(text):
        for tok in ordered:
            if text.startswith(tok, i):
                hits.append((i, i + len(tok), tok))
                i += len(tok)
                break
        else:
            i += 1
    return hits


def plan_tokens(title: str) -> list[str]:
    """The plan-lexicon tokens in ``title``, in order of occurrence (repeats kept).

    >>> plan_tokens("배수시설 개선방안 검토")
    ['개선', '방안', '검토']
    """
    return [tok for _, _, tok in _find_tokens(_nfc(title), PLAN_LEXICON)]


def classify_title(title: str) -> TitleFrame:
    """Classify a section title by lexicon: ``plan``, ``standard``, ``mixed`` or ``neither``.

    ``plan`` = a :data:`PLAN_LEXICON` token and no :data:`STANDARD_LEXICON` token;
    ``standard`` = the reverse; ``mixed`` = both; ``neither`` = none (paper §4.1).

    >>> classify_title("포장 설계기준"), classify_title("설치기준 개선방안"), classify_title("개요")
    ('standard', 'mixed', 'neither')
    """
    text = _nfc(title)
    has_plan = bool(_find_tokens(text, PLAN_LEXICON))
    has_standard = bool(_find_tokens(text, STANDARD_LEXICON))
    if has_plan and has_standard:
        return "mixed"
    if has_plan:
        return "plan"
    if has_standard:
        return "standard"
    return "neither"


def _tidy(words: list[str]) -> str:
    """Drop orphaned punctuation and connectors left at the edges or doubled up."""
    kept = [w for w in words if w and not _ORPHAN_PUNCT.match(w)]
    while kept and kept[-1] in _CONNECTORS:
        kept.pop()
    while kept and kept[0] in _CONNECTORS:
        kept.pop(0)
    out: list[str] = []
    for w in kept:
        if w in _CONNECTORS and out and out[-1] in _CONNECTORS:
            continue
        out.append(w)
    return " ".join(out)


def strip_plan_tokens(title: str) -> str:
    """Remove every plan-lexicon token from ``title`` and tidy what is left.

    Tokens are removed even inside compounds (``점검시설확충방안`` → ``점검시설``); words left
    dangling (``및``, ``등``, ``위한``, a lone ``·``) are dropped and spaces collapsed. A title
    made only of plan tokens strips to ``""``.

    >>> strip_plan_tokens("교량 고정식 점검시설 확충방안")
    '교량 고정식 점검시설'
    >>> strip_plan_tokens("포장 유지관리 개선 및 강화 방안")
    '포장 유지관리'
    """
    text = _nfc(title)
    pieces: list[str] = []
    last = 0
    for start, end, _ in _find_tokens(text, PLAN_LEXICON):
        pieces.append(text[last:start])
        pieces.append(" ")
        last = end
    pieces.append(text[last:])
    return _tidy("".join(pieces).split())


def neutralize_plan_tokens(title: str) -> str:
    """Replace each plan token by its same-length neutral noun (the ``cfn`` title body).

    Uses :data:`NEUTRAL_SUBSTITUTIONS` (the paper's) then :data:`EXTRA_NEUTRAL_SUBSTITUTIONS`
    (ours), so the title keeps its length and token count.

    >>> neutralize_plan_tokens("배수시설 개선방안 검토")
    '배수시설 영역부문 항목'
    """
    text = _nfc(title)
    table = {**EXTRA_NEUTRAL_SUBSTITUTIONS, **NEUTRAL_SUBSTITUTIONS}
    pieces: list[str] = []
    last = 0
    for start, end, tok in _find_tokens(text, PLAN_LEXICON):
        pieces.append(text[last:start])
        pieces.append(table[tok])
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _criterion_regex(heads: Sequence[str]) -> re.Pattern[str]:
    if isinstance(heads, str) or not heads or not all(isinstance(h, str) and h for h in heads):
        raise ConfigurationError(
            f"heads={heads!r} must be a non-empty sequence of non-empty strings, e.g. ('기준',)"
        )
    alts = "|".join(re.escape(h) for h in sorted(set(heads), key=len, reverse=True))
    return re.compile(rf"^(?P<c>[가-힣]+?(?:{alts}))(?:들)?{_PARTICLE_RE}?$")


def _iter_criteria(body: str, heads: Sequence[str]) -> Iterator[str]:
    pattern = _criterion_regex(heads)
    head_set = set(heads)
    for run in _HANGUL_RUN.findall(_nfc(body)):
        match = pattern.match(run)
        if match is None:
            continue
        compound = match.group("c")
        head = next(h for h in sorted(head_set, key=len, reverse=True) if compound.endswith(h))
        prefix = compound[: -len(head)]
        if len(prefix) < _MIN_PREFIX or prefix in _DETERMINER_PREFIXES:
            continue
        yield compound


def criterion_frequencies(
    body: str, title: str = "", heads: Sequence[str] = DEFAULT_CRITERION_HEADS
) -> dict[str, int]:
    """Occurrence counts of the body's criterion compounds absent from ``title``.

    Keys are in order of first occurrence (so ``max(d, key=d.get)`` breaks ties by body order).

    >>> criterion_frequencies("설치기준과 구조기준. 구조기준은 …")
    {'설치기준': 1, '구조기준': 2}
    """
    title_compact = re.sub(r"\s+", "", _nfc(title))
    counts: dict[str, int] = {}
    for compound in _iter_criteria(body, heads):
        if compound in title_compact:
            continue
        counts[compound] = counts.get(compound, 0) + 1
    return counts


def extract_criteria(
    body: str, title: str = "", heads: Sequence[str] = DEFAULT_CRITERION_HEADS
) -> list[str]:
    """Criterion compounds of ``body`` (``~기준`` by default) absent from ``title``.

    Rules (regex over Hangul runs, no morphological analyser needed):

    * a compound is a Hangul run ending in a head, optionally followed by ``들`` and one
      particle or copula ending (``설치기준은`` → ``설치기준``, ``설치기준에서는`` → ``설치기준``);
    * a head standing alone (``기준에 따라``), after a determiner (``이기준``, ``해당기준``) or
      after a single syllable (``김기준`` is a name) is **not** a compound; ``기준점``,
      ``기준서`` are not ``~기준`` compounds;
    * compounds already in the title (spaces ignored) are skipped;
    * unique, in body order (the paper's criterion is the first one).

    >>> extract_criteria("설치기준은 다음과 같다. 구조기준에 따른다. 기준에 맞게.", title="구조기준 해설")
    ['설치기준']
    """
    return list(criterion_frequencies(body, title=title, heads=heads))


def _check_form(form: str) -> None:
    if form not in _FORMS:
        raise ConfigurationError(f"form={form!r} is not one of {_FORMS}")


def reframe_title(title: str, criterion: str, form: ReframeForm = "cf") -> str:
    """Rewrite ``title`` in the paper's counterfactual forms (§4.4, Table 2).

    * ``cf``: plan tokens removed (:func:`strip_plan_tokens`) + ``" " + criterion``;
    * ``cfp``: the plan title intact + ``" " + criterion``;
    * ``cfn``: each plan token replaced by a neutral noun of equal length
      (:func:`neutralize_plan_tokens`) + ``" " + criterion``.

    >>> reframe_title("배수시설 개선방안", "설치기준", "cfp")
    '배수시설 개선방안 설치기준'
    >>> reframe_title("배수시설 개선방안", "설치기준", "cfn")
    '배수시설 영역부문 설치기준'
    """
    _check_form(form)
    criterion = _nfc(criterion).strip()
    if not criterion:
        raise ConfigurationError("criterion is empty; pass a criterion term such as '설치기준'")
    if form == "cf":
        base = strip_plan_tokens(title)
    elif form == "cfp":
        base = " ".join(_nfc(title).split())
    else:
        base = " ".join(neutralize_plan_tokens(title).split())
    return join_criterion(base, criterion)


def join_criterion(base: str, criterion: str) -> str:
    """``base + " " + criterion`` without doubling a word: a last word that the criterion
    starts with is absorbed (``설치`` + ``설치기준`` → ``설치기준``), and a last word that
    already ends in the criterion keeps the title as it is.

    >>> join_criterion("터널 비상주차대 설치", "설치기준")
    '터널 비상주차대 설치기준'
    >>> join_criterion("점검시설 설치기준", "설치기준"), join_criterion("교량 구조", "설치기준")
    ('점검시설 설치기준', '교량 구조 설치기준')
    """
    words = base.split()
    if not words:
        return criterion
    last = words[-1]
    if last.endswith(criterion):
        return " ".join(words)
    if criterion.startswith(last):
        words[-1] = criterion
        return " ".join(words)
    return " ".join([*words, criterion])


def format_section(title: str, body: str, max_chars: int = PROBE_MAX_CHARS) -> str:
    """The markdown document the probe embeds: ``"## {title}\\n\\n{body}"`` cut at ``max_chars``.

    >>> format_section("배수시설", "본문")
    '## 배수시설\\n\\n본문'
    """
    return f"## {title}\n\n{body}"[:max_chars]


def make_probe_variants(
    title: str, body: str, criterion: str, max_chars: int = PROBE_MAX_CHARS
) -> dict[str, str]:
    """The six counterfactual documents of the probe (paper §4.4, Table 2).

    Keys ``orig``, ``cf``, ``cfp``, ``cfn`` (title rewritten, body intact), ``cfb`` (plan title,
    body + ``"\\n" + criterion``) and ``cfs`` (plan title, ``criterion + "\\n"`` + body). Each is
    :func:`format_section` truncated at ``max_chars`` (8000). For ``cfb`` the body is cut
    *before* the mention is appended, so the added mention survives truncation and the
    frequency match with ``cf`` holds for long bodies too.

    >>> v = make_probe_variants("배수시설 개선방안", "본문", "설치기준")
    >>> v["cf"], v["cfs"]
    ('## 배수시설 설치기준\\n\\n본문', '## 배수시설 개선방안\\n\\n설치기준\\n본문')
    """
    criterion = _nfc(criterion).strip()
    if not criterion:
        raise ConfigurationError("criterion is empty; pass the section's body criterion")
    title = " ".join(_nfc(title).split())
    body = _nfc(body)
    mention_end = "\n" + criterion
    budget = max(0, max_chars - len(f"## {title}\n\n") - len(mention_end))
    return {
        "orig": format_section(title, body, max_chars),
        "cf": format_section(reframe_title(title, criterion, "cf"), body, max_chars),
        "cfp": format_section(reframe_title(title, criterion, "cfp"), body, max_chars),
        "cfn": format_section(reframe_title(title, criterion, "cfn"), body, max_chars),
        "cfb": format_section(title, body[:budget] + mention_end, max_chars),
        "cfs": format_section(title, criterion + "\n" + body, max_chars),
    }


def probe_query(title: str, criterion: str) -> str:
    """The probe's criterion query: topic (title without plan tokens) + ``" " + criterion``.

    >>> probe_query("교량 고정식 점검시설 확충방안", "설치기준")
    '교량 고정식 점검시설 설치기준'
    """
    topic = strip_plan_tokens(title)
    criterion = _nfc(criterion).strip()
    return f"{topic} {criterion}".strip()

