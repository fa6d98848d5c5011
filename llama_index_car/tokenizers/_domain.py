"""Domain spans Kiwi must not split: numbers with units, slopes and ratios, clause references
(:data:`DOMAIN_PATTERNS`, passed to Kiwi as ``pretokenized`` spans), and the canonical form of
a token (:func:`canonical`: thousands separators and spaces dropped, Roman numerals spelled
out). Pure regular expressions.
"""

from __future__ import annotations

import re

_UNITS = (
    "km/h",
    "m/sec",
    "m/s",
    "mg/L",
    "m²",
    "m³",
    "m2",
    "m3",
    "mm",
    "cm",
    "km",
    "kg",
    "kN",
    "MPa",
    "kPa",
    "Pa",
    "ton",
    "kW",
    "kV",
    "dB",
    "Hz",
    "lx",
    "ppm",
    "ha",
    "℃",
    "°C",
    "°",
    "%",
    "t",
    "m",
    "L",
    "W",
    "V",
    "N",
)

#: ``(name, regex, Kiwi tag)`` in priority order; the first matching alternative wins at a
#: position, matches never overlap. Part of the tokenizer spec. Every span is tagged
#: ``W_SERIAL``: with ``SN`` Kiwi 0.24 mis-analyses a following 를 as ``르/NNG ᆯ/JKO``
#: (``1:1.5를``, ``제3조를``, even a bare ``1.5를``), with ``W_SERIAL`` it does not.
DOMAIN_PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("article", r"제\d+(?:조|항|호|장|절|편|관)(?:의\d+)?", "W_SERIAL"),
    ("dotted_clause", r"(?<![\d.])\d+(?:\.\d+){2,}(?![\d]|\.\d)", "W_SERIAL"),
    ("dashed_clause", r"(?<![\d-])\d+(?:-\d+)+(?![\d]|-\d)", "W_SERIAL"),
    ("ratio", r"(?<![\d.:])\d+(?:\.\d+)?\s?:\s?\d+(?:\.\d+)?(?![\d]|:\d)", "W_SERIAL"),
    (
        "number_unit",
        r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?\s?(?:UNITS)(?![A-Za-z²³])"
        r"|(?<![\d.,])\d+(?:\.\d+)?\s?(?:UNITS)(?![A-Za-z²³])".replace(
            "UNITS", "|".join(re.escape(u) for u in _UNITS)
        ),
        "W_SERIAL",
    ),
    ("roman_unicode", r"[\u2160-\u216B\u2170-\u217B]", "W_SERIAL"),
    ("roman_ascii", r"(?<![A-Za-z])(?=[IVX])X{0,3}(?:IX|IV|V?I{0,3})(?![A-Za-z])", "W_SERIAL"),
    (
        "number",
        r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|(?<![\d.,])\d+(?:\.\d+)?(?!\d)",
        "W_SERIAL",
    ),
)

_DOMAIN_RE = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx, _ in DOMAIN_PATTERNS))
_DOMAIN_TAG = {name: tag for name, _, tag in DOMAIN_PATTERNS}
_ROMAN = {
    chr(0x2160 + i): r
    for i, r in enumerate(
        ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"]
    )
}
_ROMAN.update({chr(0x2170 + i): r for i, r in enumerate(_ROMAN.values())})
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3})")


def domain_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, tag)`` of every :data:`DOMAIN_PATTERNS` match (Kiwi ``pretokenized``).

    >>> domain_spans("경사 1:1.5, 제3조")
    [(3, 8, 'W_SERIAL'), (10, 13, 'W_SERIAL')]
    """
    out: list[tuple[int, int, str]] = []
    for m in _DOMAIN_RE.finditer(text):
        if m.end() > m.start() and m.lastgroup is not None:
            out.append((m.start(), m.end(), _DOMAIN_TAG[m.lastgroup]))
    return out


def canonical(form: str, lowercase: bool) -> str:
    form = form.replace(" ", "")
    if "," in form:
        form = _THOUSANDS.sub("", form)
    if _ROMAN.keys() & set(form):
        form = "".join(_ROMAN.get(c, c) for c in form)
    return form.lower() if lowercase else form
