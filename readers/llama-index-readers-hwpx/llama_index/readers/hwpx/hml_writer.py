"""A small HWPML 2.x (``.hml``) writer for fixtures: the sibling of :mod:`.writer`.

Writes the element layout Hangul uses when it exports HWPML (``HWPML > HEAD > DOCSUMMARY,
MAPPINGTABLE > PARASHAPELIST``; ``BODY > SECTION > P > TEXT > CHAR | TABLE ...``; a table's
caption inside its ``SHAPEOBJECT``; cells addressed by ``RowAddr``/``ColAddr`` and spanned by
``RowSpan``/``ColSpan``). The API mirrors :class:`HWPXBuilder` so one fixture can be written in
both formats and the two readers compared.

Example::

    >>> b = HMLBuilder(title="설치기준")
    >>> s = b.add_section().heading("Ⅰ. 총칙", level=1)
    >>> _ = s.table([["구분", "기준"], ["옥내소화전", "2.5 m 이하"]], caption="표 1")
    >>> b.to_bytes()[:3] == b"\\xef\\xbb\\xbf"
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from xml.sax.saxutils import escape, quoteattr

from llama_index.readers.hwpx.writer import MAX_OUTLINE_LEVEL, TableSpec

__all__ = ["HMLBuilder", "HMLSectionBuilder"]

_BODY = 0
_NOTE = MAX_OUTLINE_LEVEL + 1


def _char(text: str) -> str:
    """``CHAR`` content: ``\\t`` -> ``TAB``, ``\\n`` -> ``LINEBREAK``, NBSP -> ``NBSPACE``."""
    out: list[str] = []
    for ch in text:
        if ch == "\t":
            out.append("<TAB/>")
        elif ch == "\n":
            out.append("<LINEBREAK/>")
        elif ch == "\u00a0":
            out.append("<NBSPACE/>")
        else:
            out.append(escape(ch))
    return "<CHAR>" + "".join(out) + "</CHAR>"


def _p(inner: str, shape: int = _BODY) -> str:
    return f'<P ParaShape="{shape}" Style="0"><TEXT CharShape="0">{inner}</TEXT></P>'


def _paralist(text: str) -> str:
    lines = text.split("\n") if text else [""]
    return (
        '<PARALIST LineWrap="Break" LinkListID="0" LinkListIDNext="0" TextDirection="0" '
        'VertAlign="Center">' + "".join(_p(_char(x) if x else "") for x in lines) + "</PARALIST>"
    )


def _as_spec(value: list[list[str]] | TableSpec) -> TableSpec:
    return value if isinstance(value, TableSpec) else TableSpec(rows=value)


def _table(spec: TableSpec) -> str:
    rows = spec.rows
    n_rows = len(rows)
    n_cols = max((len(r) for r in rows), default=0)
    if n_rows == 0 or n_cols == 0:
        raise ValueError("HMLBuilder.table: rows must be a non-empty list of non-empty lists")
    spans = dict(spec.spans or {})
    nested = dict(spec.nested or {})
    covered: set[tuple[int, int]] = set()
    for (r, c), (rs, cs) in spans.items():
        if rs < 1 or cs < 1 or r < 0 or c < 0 or r + rs > n_rows or c + cs > n_cols:
            raise ValueError(f"HMLBuilder.table: span {(rs, cs)} at {(r, c)} leaves the grid")
        for rr in range(r, r + rs):
            for cc in range(c, c + cs):
                if (rr, cc) != (r, c):
                    if (rr, cc) in covered or (rr, cc) in spans:
                        raise ValueError(f"HMLBuilder.table: spans overlap at {(rr, cc)}")
                    covered.add((rr, cc))
    row_xml: list[str] = []
    for r in range(n_rows):
        cells: list[str] = []
        for c in range(n_cols):
            if (r, c) in covered:
                continue
            rs, cs = spans.get((r, c), (1, 1))
            text = rows[r][c] if c < len(rows[r]) else ""
            body = _paralist(text)
            if (r, c) in nested:
                body = body[: -len("</PARALIST>")] + _p(_table(_as_spec(nested[(r, c)])))
                body += "</PARALIST>"
            cells.append(
                f'<CELL BorderFill="3" ColAddr="{c}" ColSpan="{cs}" Dirty="false" '
                f'Editable="false" HasMargin="false" Header="false" Height="{1600 * rs}" '
                f'Protect="false" RowAddr="{r}" RowSpan="{rs}" Width="{4000 * cs}">{body}</CELL>'
            )
        if spec.cell_order == "reverse":
            cells.reverse()
        row_xml.append("<ROW>" + "".join(cells) + "</ROW>")
    if spec.cell_order == "reverse":
        row_xml.reverse()
    caption = ""
    if spec.caption is not None:
        caption = f'<CAPTION Side="Top" Gap="850">{_paralist(spec.caption)}</CAPTION>'
    return (
        f'<TABLE BorderFill="3" CellSpacing="0" ColCount="{n_cols}" PageBreak="Cell" '
        f'RepeatHeader="true" RowCount="{n_rows}"><SHAPEOBJECT InstId="1" Lock="false" '
        'NumberingType="Table" TextWrap="TopAndBottom" ZOrder="0"><SIZE Height="1600" '
        'Width="42520"/><POSITION TreatAsChar="false" VertRelTo="Para"/>'
        f'<OUTSIDEMARGIN Bottom="283" Left="283" Right="283" Top="283"/>{caption}</SHAPEOBJECT>'
        '<INSIDEMARGIN Bottom="141" Left="510" Right="510" Top="141"/>'
        + "".join(row_xml)
        + "</TABLE>"
    )


@dataclass
class HMLSectionBuilder:
    """One ``SECTION``; create with :meth:`HMLBuilder.add_section`."""

    _builder: HMLBuilder
    _paras: list[str] = field(default_factory=list)

    def heading(self, text: str, level: int = 1) -> HMLSectionBuilder:
        """An outline (개요) heading: a ``PARASHAPE`` with ``HeadingType="Outline"``."""
        if not 1 <= level <= MAX_OUTLINE_LEVEL:
            raise ValueError(f"heading level must be 1..{MAX_OUTLINE_LEVEL}, got {level}")
        self._paras.append(_p(_char(text), level))
        return self

    def paragraph(
        self,
        text: str,
        *,
        footnotes: list[str] | None = None,
        endnotes: list[str] | None = None,
    ) -> HMLSectionBuilder:
        """A body paragraph; notes are anchored after its text (``FOOTNOTE``/``ENDNOTE``)."""
        notes = "".join(
            f"<FOOTNOTE>{_paralist_note(self._builder._next_note('foot'), t)}</FOOTNOTE>"
            for t in footnotes or []
        ) + "".join(
            f"<ENDNOTE>{_paralist_note(self._builder._next_note('end'), t)}</ENDNOTE>"
            for t in endnotes or []
        )
        self._paras.append(_p(_char(text) + notes + ("<CHAR/>" if notes else "")))
        return self

    def table(
        self,
        rows: list[list[str]],
        spans: dict[tuple[int, int], tuple[int, int]] | None = None,
        caption: str | None = None,
        nested: dict[tuple[int, int], list[list[str]] | TableSpec] | None = None,
        *,
        cell_order: Literal["row", "reverse"] = "row",
    ) -> HMLSectionBuilder:
        """A table in its own paragraph (same arguments as :meth:`SectionBuilder.table`)."""
        self._paras.append(_p(_table(TableSpec(rows, spans, caption, nested, cell_order))))
        return self

    def boxed_title(self, text: str) -> HMLSectionBuilder:
        """A title boxed in a 1x1 table."""
        return self.table([[text]])

    def text_box(self, paragraphs: list[str], anchor_text: str = "") -> HMLSectionBuilder:
        """A ``RECTANGLE`` whose ``DRAWTEXT`` holds ``paragraphs``, anchored in a paragraph."""
        inner = "".join(_p(_char(x)) for x in paragraphs)
        box = (
            '<RECTANGLE Ratio="0"><SHAPEOBJECT InstId="2" ZOrder="1"><SIZE Height="1600" '
            'Width="30000"/></SHAPEOBJECT><SHAPECOMPONENT><RENDERINGINFO/></SHAPECOMPONENT>'
            '<DRAWINGOBJECT><LINESHAPE Color="0"/><DRAWTEXT><PARALIST LineWrap="Break" '
            f'VertAlign="Center">{inner}</PARALIST></DRAWTEXT></DRAWINGOBJECT></RECTANGLE>'
        )
        self._paras.append(_p((_char(anchor_text) if anchor_text else "") + box + "<CHAR/>"))
        return self

    def to_xml(self, index: int) -> str:
        """The ``SECTION`` element; the first paragraph carries ``SECDEF``."""
        first = _p('<SECDEF TabStop="8000"><STARTNUMBER Page="0"/></SECDEF><COLDEF Count="1"/>')
        return f'<SECTION Id="{index}">' + first + "".join(self._paras) + "</SECTION>"


def _paralist_note(num: int, text: str) -> str:
    auto = f'<AUTONUM Number="{num}" NumberType="Footnote"><AUTONUMFORMAT Type="Digit"/></AUTONUM>'
    return f'<PARALIST LineWrap="Break">{_p(auto + _char(" " + text), _NOTE)}</PARALIST>'


class HMLBuilder:
    """Build an HWPML 2.x document in memory.

    Args:
        title: ``HEAD/DOCSUMMARY/TITLE`` (default "").
    """

    def __init__(self, title: str = "") -> None:
        self.title = title
        self.sections: list[HMLSectionBuilder] = []
        self._notes = {"foot": 0, "end": 0}

    def _next_note(self, kind: str) -> int:
        self._notes[kind] += 1
        return self._notes[kind]

    def add_section(self) -> HMLSectionBuilder:
        """Append a new section and return its builder."""
        s = HMLSectionBuilder(self)
        self.sections.append(s)
        return s

    def head_xml(self) -> str:
        """``HEAD``: summary and the paragraph shapes (0 body, 1..7 outline, 8 note)."""
        shapes = ['<PARASHAPE HeadingType="None" Id="0" Level="0"/>']
        shapes += [
            f'<PARASHAPE HeadingType="Outline" Id="{lv}" Level="{lv - 1}"/>'
            for lv in range(1, MAX_OUTLINE_LEVEL + 1)
        ]
        shapes.append(f'<PARASHAPE HeadingType="None" Id="{_NOTE}" Level="0"/>')
        return (
            f'<HEAD SecCnt="{len(self.sections)}"><DOCSUMMARY><TITLE>{escape(self.title)}'
            "</TITLE></DOCSUMMARY><MAPPINGTABLE>"
            f'<PARASHAPELIST Count={quoteattr(str(len(shapes)))}>{"".join(shapes)}'
            "</PARASHAPELIST></MAPPINGTABLE></HEAD>"
        )

    def to_bytes(self, *, bom: bool = True) -> bytes:
        """The document as UTF-8 (with the BOM Hangul writes, unless ``bom=False``)."""
        body = "".join(s.to_xml(i) for i, s in enumerate(self.sections))
        xml = (
            '<?xml version="1.0" encoding="UTF-8" standalone="no" ?>'
            '<HWPML Style="embed" SubVersion="8.0.0.0" Version="2.8">'
            + self.head_xml()
            + f"<BODY>{body}</BODY><TAIL/></HWPML>"
        )
        return (b"\xef\xbb\xbf" if bom else b"") + xml.encode("utf-8")

    def save(self, path: str) -> None:
        """Write :meth:`to_bytes` to ``path``."""
        with open(path, "wb") as fh:
            fh.write(self.to_bytes())
