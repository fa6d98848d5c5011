"""Heading detection: outline levels AND the typed-glyph conventions real documents use.

Each body paragraph (and each boxed title table) gets a *kind*:

=============  =========================================  ===========================
kind           pattern (after leading spaces)              example
=============  =========================================  ===========================
``outlineN``   paraPr ``<hh:heading type="OUTLINE">``      (개요 N style)
``chapter``    ``제 N 장``                                  제1장 총칙
``clause``     ``제 N 절``                                  제2절 설치기준
``roman``      ``Ⅰ.`` ``Ⅱ`` ``IV.``                        Ⅰ. 추진 배경
``box``        short text alone in a top-level table        ┌ 소방시설 설치기준 ┐
``circled``    ①..⑳, ❶..❿ or a private-use symbol glyph    ① 기구 및 조직
``arabic``     ``1.`` (not ``1.5``)                        1. 목적
``hangul``     ``가.``                                     가. 적용범위
``square``     ``□ ■ ◻ ▢``                                 □ 추진 방향
``circle``     ``○ ● ◦ ㅇ``                                 ○ 주요 내용
``dash``       ``- – ―``                                   - 세부 항목
=============  =========================================  ===========================

A boxed title is a top-level table with exactly one non-empty cell (at most 4 cells, no
nested table), e.g. a 1x1 box; when its text starts with a glyph, the glyph's kind wins
(a boxed "Ⅰ. 총칙" is a ``roman`` heading).

Glyph kinds only count when the text is at most ``max_chars`` long and does not read as a
sentence (ends with ``.``, ``다`` or ``。``). Levels are assigned per file: outline kinds first
(by their outline number), then the numbered and boxed kinds (chapter, clause, roman, box,
circled, arabic, hangul) in order of first appearance, then the bullet kinds (square, circle,
dash) in order of first appearance; they get levels 1, 2, 3, ... (markdown ``#`` depth,
capped at 6). So a notice using "1." then "①" gets ``#`` for "1." and ``##`` for "①", and a
stray "- 부제 -" line before "Ⅰ." never outranks it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from llama_index.readers.hwpx._model import HWPXTable
from llama_index.readers.hwpx._parse import Block

KIND_ORDER: tuple[str, ...] = tuple(f"outline{i}" for i in range(1, 11)) + (
    "chapter",
    "clause",
    "roman",
    "box",
    "circled",
    "arabic",
    "hangul",
    "square",
    "circle",
    "dash",
)
_RANK = {k: i for i, k in enumerate(KIND_ORDER)}
_BULLETS = frozenset({"square", "circle", "dash"})

_GLYPHS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("chapter", re.compile(r"^제\s*\d{1,3}\s*장(?:\s|$)")),
    ("clause", re.compile(r"^제\s*\d{1,3}\s*절(?:\s|$)")),
    (
        "roman",
        re.compile(
            r"^(?:[ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫ]\s*[.．]?|(?:I|II|III|IV|V|VI|VII|VIII|IX|X)[.．])\s*[^\s.．\d]"
        ),
    ),
    (
        "circled",
        re.compile(r"^[①-⑳❶-❿\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]\s*\S"),
    ),
    ("arabic", re.compile(r"^\d{1,2}\s*[.．]\s*[^\s\d.．]")),
    ("hangul", re.compile(r"^[가나다라마바사아자차카타파하]\s*[.．]\s*\S")),
    ("square", re.compile(r"^[□■◻◼▢❑]\s*\S")),
    ("circle", re.compile(r"^(?:[○●◦◯]\s*|ㅇ\s+)\S")),
    ("dash", re.compile(r"^[-–―]\s*[^\s\d-]")),
)
_SENTENCE_END = (".", "다", "。", "!", "?")


def _group(kind: str) -> int:
    """Outline kinds (by number) rank first, then numbered/boxed kinds, then bullet glyphs."""
    if kind.startswith("outline"):
        return _RANK[kind]
    return 100 if kind in _BULLETS else 50


def glyph_kind(text: str, max_chars: int) -> str | None:
    """The glyph heading kind of ``text`` or None.

    >>> glyph_kind("Ⅰ. 추진 배경", 60), glyph_kind("1.5 m 이하로 한다.", 60)
    ('roman', None)
    """
    s = text.strip()
    if not s or len(s) > max_chars or "\n" in s or s.endswith(_SENTENCE_END):
        return None
    for kind, pattern in _GLYPHS:
        if pattern.match(s):
            return kind
    return None


def classify(
    blocks: Sequence[Block],
    tables: Sequence[HWPXTable],
    *,
    glyph_headings: bool,
    boxed_titles: bool,
    max_chars: int,
) -> list[Block]:
    """New blocks with headings marked: ``{"type": "heading", "kind", "level", "text", "path"}``.

    Boxed titles are kept as table blocks with ``"heading"`` info added so the table still
    exists in the structure; they render as a heading. Heading blocks get ``"path"``: the
    heading texts from the outermost down to this one.
    """
    has_child = {t.parent.table_index for t in tables if t.parent is not None}
    kinds: list[str | None] = []
    for b in blocks:
        kind: str | None = None
        if b["type"] == "paragraph" and b["location"] == "body":
            if b.get("outline"):
                kind = f"outline{min(int(b['outline']), 10)}"
            elif glyph_headings:
                kind = glyph_kind(b["text"], max_chars)
        elif b["type"] == "table" and boxed_titles:
            t = tables[b["index"]]
            filled = (
                [c for c in t.cells if c.text.strip()]
                if t.depth == 0 and t.location == "body" and len(t.cells) <= 4
                else []
            )
            if len(filled) == 1 and t.index not in has_child:
                text = " ".join(filled[0].text.split())
                if len(text) <= max_chars and not text.endswith(_SENTENCE_END):
                    kind = (glyph_kind(text, max_chars) if glyph_headings else None) or "box"
        kinds.append(kind)
    first_seen: dict[str, int] = {}
    for i, k in enumerate(kinds):
        if k is not None and k not in first_seen:
            first_seen[k] = i
    present = sorted(first_seen, key=lambda k: (_group(k), first_seen[k]))
    level_of = {k: min(i + 1, 6) for i, k in enumerate(present)}
    out: list[Block] = []
    stack: list[tuple[int, str]] = []
    for b, kind in zip(blocks, kinds, strict=True):
        if kind is None:
            out.append(b)  # unchanged blocks are shared, not copied (never mutated here)
            continue
        level = level_of[kind]
        if b["type"] == "table":
            nb = dict(b)
            cell = next(c for c in tables[b["index"]].cells if c.text.strip())
            text = " ".join(cell.text.split())
            nb["heading"] = {"kind": kind, "level": level, "text": text}
        else:
            text = " ".join(b["text"].split())
            nb = {
                "type": "heading",
                "kind": kind,
                "level": level,
                "text": text,
                "section": b["section"],
            }
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
        nb["path"] = [t for _, t in stack]
        out.append(nb)
    return out
