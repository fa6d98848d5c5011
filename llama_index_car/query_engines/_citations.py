"""The sources and citations of :mod:`~llama_index_car.query_engines.span_citation`, as pure
functions: hits → numbered sources (:func:`sources_from_hits`), a source as the LLM reads it
(:func:`render_source`), the numbers an answer cites (:func:`cited_numbers`; the answer is
untrusted LLM output), the answer cleaned and cut (:func:`clean_answer`), the retrieval-only
answer (:func:`retrieval_only_answer`), and a source as a ``NodeWithScore``.

>>> cited_numbers("[1-2] [7]", n_sources=3)
([1, 2], [7])
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)

from llama_index_car._errors import LLMResponseError
from llama_index_car.hypothesizers.base import sanitize_text

CITATIONS_KEY = "citations"
#: sources (spans) shown to the LLM per query by default
DEFAULT_MAX_SOURCES = 15
#: sources cited by the retrieval-only answer by default
DEFAULT_FALLBACK_SOURCES = 3
#: characters of a hit without spans shown as its one ``section`` source
SECTION_SOURCE_CHARS = 800
#: characters of the LLM's answer kept by default (the rest is cut, the cut marked ``…``)
DEFAULT_MAX_ANSWER_CHARS = 20_000
#: invalid citation numbers kept in ``metadata["invalid_citations"]`` (the first ones)
MAX_INVALID_CITATIONS = 100
#: longest list or range read inside one ``[...]`` (untrusted LLM output)
_MAX_RANGE = 50
_SPANS_KEY = "criterion_spans"  # CriterionSpanPostprocessor's key
# a bracket of at most 64 digits, commas, blanks and dashes; its parts are numbers (a minus
# sign allowed) and ranges, each number at most 64 digits, so int() stays cheap
_BRACKET = re.compile(r"\[([0-9,\s\-–]{1,64})\]")
_NUMBER = re.compile(r"[-–]?\d+")
_RANGE = re.compile(r"(\d+)\s*[-–]\s*(\d+)")
#: a stream's held-back escape sequence is let go (sanitised as it is) past this length
MAX_PENDING = 256
CUT = "…"

NO_SOURCE_ANSWER = "검색된 기준 조항이 없습니다 (no source was retrieved for this query)."
_FALLBACK_HEAD = "LLM 답변을 만들지 못해 검색된 기준 조항을 그대로 보입니다 ({error}):"

SPAN_CITATION_QA_TEMPLATE = PromptTemplate(
    "Answer the query based solely on the numbered sources below. Each source is one "
    "sentence, table row or table cell of a Korean technical standard, labelled with its "
    "file, section and (for tables) its table, row and column. When you use a source, cite "
    "its number in square brackets, e.g. [2]; cite the table cell or sentence that states "
    "the criterion itself. Every answer should cite at least one source. If none of the "
    "sources answers the query, say so. Answer in the language of the query.\n"
    "For example:\n"
    "Source 1 (guide.hwpx · 비상주차대 · table 0, row 1, col 1):\n"
    "설치 간격 — 기준: 750m 이내\n"
    "Source 2 (guide.hwpx · 비상주차대):\n"
    "연장 1,000m 이상 터널에는 비상주차대를 둔다.\n"
    "Query: 터널 비상주차대는 얼마 간격으로 두나요?\n"
    "Answer: 연장 1,000m 이상 터널에는 비상주차대를 두며 [2], 설치 간격은 750m 이내입니다 [1].\n"
    "Now it's your turn. Below are the numbered sources:\n"
    "------\n"
    "{context_str}\n"
    "------\n"
    "Query: {query_str}\n"
    "Answer: "
)


class UncitedAnswerError(LLMResponseError):
    """The LLM's answer cited no valid source (named in ``metadata["error"]``; not raised)."""


@dataclass(frozen=True, slots=True)
class Citation:
    """One numbered source: a criterion span (``sentence``/``row``/``cell``) or a hit without
    spans (``section``), with where it is — ``file``, ``section_title``, the hit's
    ``node_id``, ``start``/``end`` offsets into that node's text and, for table spans, the
    0-based ``table_index``, ``row``, ``col``, ``row_span``, ``col_span`` and the ``header``
    / ``row_header`` cells that label it."""

    number: int
    kind: str
    text: str
    node_id: str
    file: str | None = None
    section_title: str | None = None
    score: float | None = None
    start: int | None = None
    end: int | None = None
    table_index: int | None = None
    row: int | None = None
    col: int | None = None
    row_span: int | None = None
    col_span: int | None = None
    header: str | None = None
    row_header: str | None = None

    @property
    def location(self) -> str:
        """``file · section · table t, row r, col c`` (the parts that are known)."""
        parts = [p for p in (self.file, self.section_title) if p]
        if self.table_index is not None and self.row is not None:
            where = f"table {self.table_index}, row {self.row}"
            if self.kind == "cell" and self.col is not None:
                where += f", col {self.col}"
            parts.append(where)
        return " · ".join(parts)

    @property
    def label(self) -> str:
        """The text as the LLM reads it: a cell as ``row header — header: value``."""
        if self.kind != "cell":
            return self.text
        text = f"{self.header}: {self.text}" if self.header else self.text
        return f"{self.row_header} — {text}" if self.row_header else text

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- pure parts
def _one_line(value: Any) -> str | None:
    text = " ".join(str(value).split()) if value is not None else ""
    return text or None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _file_of(metadata: dict[str, Any]) -> str | None:
    name = metadata.get("file_name")
    if not name and metadata.get("file_path"):
        name = os.path.basename(str(metadata["file_path"]))
    return _one_line(name)


def sources_from_hits(
    hits: Sequence[NodeWithScore],
    max_sources: int = DEFAULT_MAX_SOURCES,
    section_chars: int = SECTION_SOURCE_CHARS,
) -> list[Citation]:
    """The numbered sources of ``hits``: each hit's ``criterion_spans`` in order (best first),
    hits in rank order, at most ``max_sources``; a hit without spans gives one ``section``
    source (its text cut at ``section_chars``). Numbers start at 1."""
    out: list[Citation] = []
    for hit in hits:
        node = hit.node
        meta = dict(node.metadata or {})
        node_id, file, section = (
            node.node_id, _file_of(meta), _one_line(meta.get("section_title"))
        )
        spans = meta.get(_SPANS_KEY)
        spans = [s for s in spans if isinstance(s, dict) and s.get("text")] if isinstance(
            spans, list) else []
        if not spans:
            text = " ".join(node.get_content().split())
            if not text:
                continue
            if len(out) >= max_sources:
                break
            out.append(Citation(
                number=len(out) + 1, kind="section", text=text[:section_chars],
                score=hit.score, start=0, end=len(node.get_content()), node_id=node_id,
                file=file, section_title=section,
            ))
            continue
        for s in spans:
            if len(out) >= max_sources:
                break
            score = s.get("score")
            out.append(Citation(
                number=len(out) + 1,
                kind=str(s.get("kind", "sentence")),
                text=_one_line(s["text"]) or "",
                score=float(score) if isinstance(score, (int, float)) else None,
                start=_int(s.get("start")), end=_int(s.get("end")),
                table_index=_int(s.get("table_index")), row=_int(s.get("row")),
                col=_int(s.get("col")), row_span=_int(s.get("row_span")),
                col_span=_int(s.get("col_span")),
                header=_one_line(s.get("header")), row_header=_one_line(s.get("row_header")),
                node_id=node_id, file=file, section_title=section,
            ))
        if len(out) >= max_sources:
            break
    return out


def render_source(citation: Citation) -> str:
    """``Source n (location):`` then the source's label, as the LLM reads it."""
    location = citation.location
    head = f"Source {citation.number} ({location}):" if location else (
        f"Source {citation.number}:")
    return f"{head}\n{citation.label}"


def cited_numbers(text: str, n_sources: int) -> tuple[list[int], list[int]]:
    """The source numbers ``text`` cites, distinct, in order of first citation, and the
    numbers outside ``1..n_sources`` it also cites (ignored; the first
    :data:`MAX_INVALID_CITATIONS`, as given: ``[-1]`` is -1, ``[1234567]`` 1234567).
    ``[n]``, ``[n, m]`` and ``[n-m]`` (a range of at most 50; a longer one counts as its two
    ends) are read inside brackets of at most 64 characters; anything else in brackets is
    not a citation."""
    valid: dict[int, None] = {}
    invalid: dict[int, None] = {}

    def add(n: int) -> None:
        if 1 <= n <= n_sources:
            valid[n] = None
        elif len(invalid) < MAX_INVALID_CITATIONS:
            invalid[n] = None

    for match in _BRACKET.finditer(text):
        for part in match.group(1).split(","):
            part = part.strip()
            if not part:
                continue
            if _NUMBER.fullmatch(part):
                add(int(part.replace("–", "-")))
            elif (r := _RANGE.fullmatch(part)) is not None:
                a, b = int(r.group(1)), int(r.group(2))
                if a <= b and b - a < _MAX_RANGE:
                    for n in range(a, b + 1):
                        add(n)
                else:
                    add(a)
                    add(b)
    return list(valid), list(invalid)


def clean_answer(text: str, max_chars: int = DEFAULT_MAX_ANSWER_CHARS) -> str:
    """``text`` (LLM output) sanitised (:func:`sanitize_text`, newlines kept) and cut after
    ``max_chars`` characters, the cut marked ``…``. At most ``4 * max_chars + 256``
    characters of ``text`` are read.

    >>> clean_answer("\x1b[31m기준\x1b[0m [1]\u202e")
    '기준 [1]'
    >>> clean_answer("가나다라마", 3)
    '가나다…'
    """
    head = text[: 4 * max_chars + MAX_PENDING]
    clean = sanitize_text(head, keep_newlines=True)
    if len(clean) > max_chars or len(head) < len(text):
        return clean[:max_chars] + CUT
    return clean


def retrieval_only_answer(sources: Sequence[Citation], k: int, error: str) -> str:
    """The answer without an LLM: a line naming ``error``, then the first ``k`` sources, each
    ``[n] location — label``."""
    lines = [_FALLBACK_HEAD.format(error=error)]
    for c in sources[:k]:
        where = f" {c.location} —" if c.location else ""
        lines.append(f"[{c.number}]{where} {c.label}")
    return "\n".join(lines)


_SOURCE_KEYS = (
    "source_number", "kind", "file_name", "section_title", "parent_node_id", "span_start",
    "span_end", "table_index", "row", "col", "row_span", "col_span", "header", "row_header",
)


def source_node(c: Citation) -> NodeWithScore:
    meta = dict(zip(_SOURCE_KEYS, (
        c.number, c.kind, c.file, c.section_title, c.node_id, c.start, c.end, c.table_index,
        c.row, c.col, c.row_span, c.col_span, c.header, c.row_header,
    ), strict=True))
    coords = "" if c.table_index is None else f":{c.table_index}.{c.row}.{c.col}"
    node = TextNode(
        id_=f"{c.node_id}#{c.kind}:{c.start}-{c.end}{coords}",
        text=render_source(c),
        metadata=meta,
        excluded_embed_metadata_keys=list(_SOURCE_KEYS),
        excluded_llm_metadata_keys=list(_SOURCE_KEYS),
        relationships={NodeRelationship.PARENT: RelatedNodeInfo(node_id=c.node_id)},
    )
    return NodeWithScore(node=node, score=c.score)
