"""The shapes of the demo corpus spec (:mod:`llama_index_car.demo.spec`)."""

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
