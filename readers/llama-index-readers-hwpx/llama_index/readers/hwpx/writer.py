"""A small HWPX writer for fixtures and demo corpora.

Produces OWPML packages laid out the way Hancom Hangul saves them: ``mimetype`` stored first,
``version.xml``, ``META-INF/{container.xml,manifest.xml}``, ``Contents/content.hpf`` (manifest +
spine), ``Contents/header.xml`` (fonts, border fills, character/paragraph properties, outline
numbering and the 개요 1..7 styles) and one ``Contents/section<N>.xml`` per section.

Example::

    b = HWPXBuilder(title="소방시설 설치기준")
    s = b.add_section()
    s.heading("Ⅰ. 총칙", level=1)
    s.paragraph("이 기준은 소화설비의 설치기준을 정한다.", footnotes=["시행일 참조"])
    s.table([["구분", "기준"], ["옥내소화전", "2.5 m 이하"]], caption="표 1 설치기준")
    s.table([["A", "B"], ["C", ""]], spans={(0, 0): (2, 1)}, nested={(1, 1): [["x"], ["y"]]})
    data = b.to_bytes()          # or b.save("out.hwpx")

Only what the reader and the demo need is modelled; every part is well-formed and every table's
``cellAddr``/``cellSpan`` tile ``rowCnt`` x ``colCnt`` exactly once.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass, field
from typing import Literal
from xml.sax.saxutils import escape

from llama_index.readers.hwpx._writer_markup import BODY_PARA_PR as _BODY_PARA_PR
from llama_index.readers.hwpx._writer_markup import MAX_OUTLINE_LEVEL, NS_DECL, XML_DECL
from llama_index.readers.hwpx._writer_markup import NOTE_PARA_PR as _NOTE_PARA_PR
from llama_index.readers.hwpx._writer_markup import SEC_PR as _SEC_PR
from llama_index.readers.hwpx._writer_markup import TEXT_WIDTH as _TEXT_WIDTH
from llama_index.readers.hwpx._writer_markup import Ctx as _Ctx
from llama_index.readers.hwpx._writer_markup import lineseg as _lineseg
from llama_index.readers.hwpx._writer_markup import note as _note
from llama_index.readers.hwpx._writer_markup import p_open as _p_open
from llama_index.readers.hwpx._writer_markup import plain_paragraphs as _plain_paragraphs
from llama_index.readers.hwpx._writer_markup import run_text as _run_text
from llama_index.readers.hwpx._writer_markup import sublist as _sublist
from llama_index.readers.hwpx._writer_markup import text_box_xml as _text_box_xml

__all__ = ["HWPXBuilder", "SectionBuilder", "TableSpec"]


@dataclass
class TableSpec:
    """A table to write: ``rows[r][c]`` is the text at grid position (r, c).

    ``spans`` maps an anchor ``(row, col)`` to ``(row_span, col_span)``; grid positions covered by
    a span (other than the anchor) are skipped. ``nested`` maps an anchor to a table placed in
    that cell after the cell's own text (a ``TableSpec`` nests further).
    """

    rows: list[list[str]]
    spans: dict[tuple[int, int], tuple[int, int]] | None = None
    caption: str | None = None
    nested: dict[tuple[int, int], list[list[str]] | TableSpec] | None = None
    cell_order: Literal["row", "reverse"] = "row"


def _as_spec(value: list[list[str]] | TableSpec) -> TableSpec:
    return value if isinstance(value, TableSpec) else TableSpec(rows=value)


def _table_xml(spec: TableSpec, ctx: _Ctx, width: int) -> str:
    rows = spec.rows
    n_rows = len(rows)
    n_cols = max((len(r) for r in rows), default=0)
    if n_rows == 0 or n_cols == 0:
        raise ValueError("HWPXBuilder.table: rows must be a non-empty list of non-empty lists")
    spans = dict(spec.spans or {})
    nested = dict(spec.nested or {})
    covered: set[tuple[int, int]] = set()
    for (r, c), (rs, cs) in spans.items():
        if rs < 1 or cs < 1 or r < 0 or c < 0 or r + rs > n_rows or c + cs > n_cols:
            raise ValueError(
                f"HWPXBuilder.table: span {(rs, cs)} at {(r, c)} leaves the "
                f"{n_rows}x{n_cols} grid"
            )
        for rr in range(r, r + rs):
            for cc in range(c, c + cs):
                if (rr, cc) != (r, c):
                    if (rr, cc) in covered or (rr, cc) in spans:
                        raise ValueError(f"HWPXBuilder.table: spans overlap at {(rr, cc)}")
                    covered.add((rr, cc))
    col_w = max(width // n_cols, 600)
    row_h = 1600
    tr_parts: list[str] = []
    for r in range(n_rows):
        tcs: list[str] = []
        for c in range(n_cols):
            if (r, c) in covered:
                continue
            rs, cs = spans.get((r, c), (1, 1))
            text = rows[r][c] if c < len(rows[r]) else ""
            inner = _plain_paragraphs(text, col_w * cs - 1020)
            if (r, c) in nested:
                inner += (
                    _p_open()
                    + '<hp:run charPrIDRef="0">'
                    + _table_xml(_as_spec(nested[(r, c)]), ctx, col_w * cs - 1200)
                    + "<hp:t/></hp:run>"
                    + _lineseg(0)
                    + "</hp:p>"
                )
            tcs.append(
                '<hp:tc name="" header="0" hasMargin="0" protect="0" editable="0" dirty="0" '
                'borderFillIDRef="3">'
                + _sublist(inner, "CENTER")
                + f'<hp:cellAddr colAddr="{c}" rowAddr="{r}"/>'
                + f'<hp:cellSpan colSpan="{cs}" rowSpan="{rs}"/>'
                + f'<hp:cellSz width="{col_w * cs}" height="{row_h * rs}"/>'
                + '<hp:cellMargin left="510" right="510" top="141" bottom="141"/></hp:tc>'
            )
        if spec.cell_order == "reverse":
            tcs.reverse()
        tr_parts.append("<hp:tr>" + "".join(tcs) + "</hp:tr>")
    if spec.cell_order == "reverse":
        tr_parts.reverse()
    caption = ""
    if spec.caption is not None:
        caption = (
            f'<hp:caption side="TOP" fullSz="0" width="{width}" gap="850" lastWidth="{width}">'
            + _sublist(_plain_paragraphs(spec.caption, width))
            + "</hp:caption>"
        )
    return (
        f'<hp:tbl id="{ctx.new_id()}" zOrder="0" numberingType="TABLE" textWrap="TOP_AND_BOTTOM" '
        'textFlow="BOTH_SIDES" lock="0" dropcapstyle="None" pageBreak="CELL" repeatHeader="1" '
        f'rowCnt="{n_rows}" colCnt="{n_cols}" cellSpacing="0" borderFillIDRef="3" noAdjust="0">'
        f'<hp:sz width="{col_w * n_cols}" widthRelTo="ABSOLUTE" height="{row_h * n_rows}" '
        'heightRelTo="ABSOLUTE" protect="0"/>'
        '<hp:pos treatAsChar="0" affectLSpacing="0" flowWithText="1" allowOverlap="0" '
        'holdAnchorAndSO="0" vertRelTo="PARA" horzRelTo="COLUMN" vertAlign="TOP" '
        'horzAlign="LEFT" vertOffset="0" horzOffset="0"/>'
        '<hp:outMargin left="283" right="283" top="283" bottom="283"/>'
        + caption
        + '<hp:inMargin left="510" right="510" top="141" bottom="141"/>'
        + "".join(tr_parts)
        + "</hp:tbl>"
    )



@dataclass
class SectionBuilder:
    """One ``Contents/section<N>.xml``; create with :meth:`HWPXBuilder.add_section`."""

    _builder: HWPXBuilder
    _paras: list[str] = field(default_factory=list)

    # ----------------------------------------------------------------- content
    def heading(self, text: str, level: int = 1) -> SectionBuilder:
        """An outline (개요) heading: paraPr with ``<hh:heading type="OUTLINE" level=level-1>``."""
        if not 1 <= level <= MAX_OUTLINE_LEVEL:
            raise ValueError(f"heading level must be 1..{MAX_OUTLINE_LEVEL}, got {level}")
        self._add(
            _p_open(level, level) + '<hp:run charPrIDRef="0">' + _run_text(text) + "</hp:run>"
        )
        return self

    def paragraph(
        self,
        text: str,
        *,
        footnotes: list[str] | None = None,
        endnotes: list[str] | None = None,
    ) -> SectionBuilder:
        """A body paragraph. ``\\t``/``\\n``/NBSP become ``hp:tab``/``hp:lineBreak``/``hp:nbSpace``.

        Footnotes/endnotes are anchored at the end of the paragraph text (as Hangul does when the
        note is inserted after the last character).
        """
        notes = "".join(
            _note("footNote", self._builder._next_note("foot"), t) for t in footnotes or []
        ) + "".join(_note("endNote", self._builder._next_note("end"), t) for t in endnotes or [])
        run = _run_text(text) + (notes + "<hp:t/>" if notes else "")
        self._add(_p_open() + '<hp:run charPrIDRef="0">' + run + "</hp:run>")
        return self

    def footnote(self, text: str, note: str) -> SectionBuilder:
        """Shorthand for ``paragraph(text, footnotes=[note])``."""
        return self.paragraph(text, footnotes=[note])

    def endnote(self, text: str, note: str) -> SectionBuilder:
        """Shorthand for ``paragraph(text, endnotes=[note])``."""
        return self.paragraph(text, endnotes=[note])

    def table(
        self,
        rows: list[list[str]],
        spans: dict[tuple[int, int], tuple[int, int]] | None = None,
        caption: str | None = None,
        nested: dict[tuple[int, int], list[list[str]] | TableSpec] | None = None,
        *,
        cell_order: Literal["row", "reverse"] = "row",
    ) -> SectionBuilder:
        """A table anchored in its own paragraph.

        ``spans[(r, c)] = (row_span, col_span)`` merges cells; ``nested[(r, c)]`` places a table
        inside cell (r, c) (a :class:`TableSpec` value can nest further). ``cell_order="reverse"``
        writes ``hp:tc`` elements in reverse order (the addresses stay right) to test readers
        that must place cells by ``cellAddr``.
        """
        spec = TableSpec(rows, spans, caption, nested, cell_order)
        xml = _table_xml(spec, self._builder._ctx, _TEXT_WIDTH)
        self._add(_p_open() + '<hp:run charPrIDRef="0">' + xml + "<hp:t/></hp:run>")
        return self

    def boxed_title(self, text: str) -> SectionBuilder:
        """A title boxed in a 1x1 table, a common substitute for outline headings."""
        return self.table([[text]])

    def text_box(self, paragraphs: list[str], anchor_text: str = "") -> SectionBuilder:
        """A rectangle with ``hp:drawText`` holding ``paragraphs``, anchored in a paragraph."""
        xml = _text_box_xml(paragraphs, self._builder._ctx)
        run = _run_text(anchor_text) if anchor_text else ""
        self._add(_p_open() + '<hp:run charPrIDRef="0">' + run + xml + "<hp:t/></hp:run>")
        return self

    # ----------------------------------------------------------------- output
    def _add(self, p_without_close: str) -> None:
        self._paras.append(p_without_close + _lineseg() + "</hp:p>")

    def to_xml(self) -> str:
        """The section XML (``hs:sec``); the first paragraph carries ``hp:secPr``."""
        first = _p_open() + '<hp:run charPrIDRef="0">' + _SEC_PR + "</hp:run>" + _lineseg()
        first += "</hp:p>"
        return XML_DECL + f"<hs:sec {NS_DECL}>" + first + "".join(self._paras) + "</hs:sec>"


class HWPXBuilder:
    """Build an HWPX package in memory.

    Args:
        title: ``opf:title`` in ``content.hpf`` (default "").

    Example::

        b = HWPXBuilder(); s = b.add_section(); s.heading("개요", level=1); s.paragraph("본문")
        b.save("demo.hwpx")
    """

    def __init__(self, title: str = "") -> None:
        self.title = title
        self.sections: list[SectionBuilder] = []
        self._ctx = _Ctx()
        self._notes = {"foot": 0, "end": 0}

    def _next_note(self, kind: str) -> int:
        self._notes[kind] += 1
        return self._notes[kind]

    def add_section(self) -> SectionBuilder:
        """Append a new section and return its builder."""
        s = SectionBuilder(self)
        self.sections.append(s)
        return s

    # ----------------------------------------------------------------- parts
    def header_xml(self) -> str:
        """``Contents/header.xml`` with body, outline 1..7 and note paragraph properties."""
        langs = ("HANGUL", "LATIN", "HANJA", "JAPANESE", "OTHER", "SYMBOL", "USER")
        fonts = "".join(
            f'<hh:fontface lang="{lang}" fontCnt="1"><hh:font id="0" face="함초롬바탕" '
            'type="TTF" isEmbedded="0"/></hh:fontface>'
            for lang in langs
        )
        border = (
            '<hh:slash type="NONE" Crooked="0" isCounter="0"/>'
            '<hh:backSlash type="NONE" Crooked="0" isCounter="0"/>'
        )

        def bf(bid: int, line: str, width: str) -> str:
            sides = "".join(
                f'<hh:{s}Border type="{line}" width="{width}" color="#000000"/>'
                for s in ("left", "right", "top", "bottom")
            )
            return (
                f'<hh:borderFill id="{bid}" threeD="0" shadow="0" centerLine="NONE" '
                f'breakCellSeparateLine="0">{border}{sides}'
                '<hh:diagonal type="SOLID" width="0.1 mm" color="#000000"/></hh:borderFill>'
            )

        allf = 'hangul="{0}" latin="{0}" hanja="{0}" japanese="{0}" other="{0}" symbol="{0}" user="{0}"'
        char_pr = (
            '<hh:charPr id="0" height="1000" textColor="#000000" shadeColor="none" '
            'useFontSpace="0" useKerning="0" symMark="NONE" borderFillIDRef="2">'
            f"<hh:fontRef {allf.format(0)}/><hh:ratio {allf.format(100)}/>"
            f"<hh:spacing {allf.format(0)}/><hh:relSz {allf.format(100)}/>"
            f"<hh:offset {allf.format(0)}/>"
            '<hh:underline type="NONE" shape="SOLID" color="#000000"/>'
            '<hh:strikeout shape="NONE" color="#000000"/><hh:outline type="NONE"/>'
            '<hh:shadow type="NONE" color="#C0C0C0" offsetX="10" offsetY="10"/></hh:charPr>'
        )
        forms = ("DIGIT", "HANGUL_SYLLABLE", "DIGIT", "HANGUL_SYLLABLE", "DIGIT",
                 "HANGUL_SYLLABLE", "CIRCLED_DIGIT")
        pats = ("^1.", "^2.", "^3)", "^4)", "(^5)", "(^6)", "^7")
        heads = "".join(
            f'<hh:paraHead start="1" level="{i + 1}" align="LEFT" useInstWidth="1" '
            'autoIndent="1" widthAdjust="0" textOffsetType="PERCENT" textOffset="50" '
            f'numFormat="{forms[i]}" charPrIDRef="4294967295" checkable="0">{pats[i]}'
            "</hh:paraHead>"
            for i in range(MAX_OUTLINE_LEVEL)
        )

        def para_pr(pid: int, heading: str, left: int) -> str:
            margin = (
                '<hh:margin><hc:intent value="0" unit="HWPUNIT"/>'
                f'<hc:left value="{left}" unit="HWPUNIT"/><hc:right value="0" unit="HWPUNIT"/>'
                '<hc:prev value="0" unit="HWPUNIT"/><hc:next value="0" unit="HWPUNIT"/>'
                '</hh:margin><hh:lineSpacing type="PERCENT" value="160" unit="HWPUNIT"/>'
            )
            return (
                f'<hh:paraPr id="{pid}" tabPrIDRef="0" condense="0" fontLineHeight="0" '
                'snapToGrid="1" suppressLineNumbers="0" checked="0">'
                '<hh:align horizontal="JUSTIFY" vertical="BASELINE"/>'
                f"{heading}"
                '<hh:breakSetting breakLatinWord="KEEP_WORD" breakNonLatinWord="KEEP_WORD" '
                'widowOrphan="0" keepWithNext="0" keepLines="0" pageBreakBefore="0" '
                'lineWrap="BREAK"/><hh:autoSpacing eAsianEng="0" eAsianNum="0"/>'
                '<hp:switch><hp:case hp:required-namespace='
                '"http://www.hancom.co.kr/hwpml/2016/HwpUnitChar">'
                f"{margin}</hp:case><hp:default>{margin}</hp:default></hp:switch>"
                '<hh:border borderFillIDRef="2" offsetLeft="0" offsetRight="0" offsetTop="0" '
                'offsetBottom="0" connect="0" ignoreMargin="0"/></hh:paraPr>'
            )

        none_h = '<hh:heading type="NONE" idRef="0" level="0"/>'
        para_prs = [para_pr(_BODY_PARA_PR, none_h, 0)]
        for lvl in range(1, MAX_OUTLINE_LEVEL + 1):
            para_prs.append(
                para_pr(lvl, f'<hh:heading type="OUTLINE" idRef="1" level="{lvl - 1}"/>',
                        1000 * lvl)
            )
        para_prs.append(para_pr(_NOTE_PARA_PR, none_h, 0))
        styles = [
            '<hh:style id="0" type="PARA" name="바탕글" engName="Normal" paraPrIDRef="0" '
            'charPrIDRef="0" nextStyleIDRef="0" langID="1042" lockForm="0"/>'
        ]
        for lvl in range(1, MAX_OUTLINE_LEVEL + 1):
            styles.append(
                f'<hh:style id="{lvl}" type="PARA" name="개요 {lvl}" engName="Outline {lvl}" '
                f'paraPrIDRef="{lvl}" charPrIDRef="0" nextStyleIDRef="{lvl}" langID="1042" '
                'lockForm="0"/>'
            )
        return (
            XML_DECL
            + f'<hh:head {NS_DECL} version="1.4" secCnt="{max(len(self.sections), 1)}">'
            '<hh:beginNum page="1" footnote="1" endnote="1" pic="1" tbl="1" equation="1"/>'
            f'<hh:refList><hh:fontfaces itemCnt="{len(langs)}">{fonts}</hh:fontfaces>'
            f'<hh:borderFills itemCnt="3">{bf(1, "NONE", "0.1 mm")}{bf(2, "NONE", "0.1 mm")}'
            f'{bf(3, "SOLID", "0.12 mm")}</hh:borderFills>'
            f'<hh:charProperties itemCnt="1">{char_pr}</hh:charProperties>'
            '<hh:tabProperties itemCnt="1"><hh:tabPr id="0" autoTabLeft="0" autoTabRight="0"/>'
            "</hh:tabProperties>"
            f'<hh:numberings itemCnt="1"><hh:numbering id="1" start="0">{heads}</hh:numbering>'
            "</hh:numberings>"
            f'<hh:paraProperties itemCnt="{len(para_prs)}">{"".join(para_prs)}'
            "</hh:paraProperties>"
            f'<hh:styles itemCnt="{len(styles)}">{"".join(styles)}</hh:styles>'
            "</hh:refList>"
            '<hh:compatibleDocument targetProgram="HWP201X"><hh:layoutCompatibility/>'
            "</hh:compatibleDocument>"
            '<hh:docOption><hh:linkinfo path="" pageInherit="0" footnoteInherit="0"/>'
            '</hh:docOption><hh:trackchageConfig flags="56"/></hh:head>'
        )

    def content_hpf(self, spine_order: list[int] | None = None) -> str:
        """``Contents/content.hpf``: metadata, manifest items and the spine."""
        n = len(self.sections)
        order = list(range(n)) if spine_order is None else list(spine_order)
        items = '<opf:item id="header" href="Contents/header.xml" media-type="application/xml"/>'
        items += "".join(
            f'<opf:item id="section{i}" href="Contents/section{i}.xml" '
            'media-type="application/xml"/>'
            for i in range(n)
        )
        items += '<opf:item id="settings" href="settings.xml" media-type="application/xml"/>'
        spine = '<opf:itemref idref="header" linear="yes"/>' + "".join(
            f'<opf:itemref idref="section{i}" linear="yes"/>' for i in order
        )
        return (
            XML_DECL
            + f'<opf:package {NS_DECL} version="" unique-identifier="" id="">'
            f"<opf:metadata><opf:title>{escape(self.title)}</opf:title>"
            "<opf:language>ko</opf:language>"
            '<opf:meta name="creator" content="text">llama-index-readers-hwpx</opf:meta>'
            f"</opf:metadata><opf:manifest>{items}</opf:manifest>"
            f"<opf:spine>{spine}</opf:spine></opf:package>"
        )

    def to_bytes(
        self,
        *,
        include_manifest: bool = True,
        encrypted: bool = False,
        backslash_names: bool = False,
        spine_order: list[int] | None = None,
    ) -> bytes:
        """The HWPX zip. ``mimetype`` is stored uncompressed as the first entry.

        The keyword options produce the unusual packages a reader must cope with:
        ``include_manifest=False`` (Hangul 9.1 style), ``encrypted=True`` (manifest declares
        ``encryption-data``; parts are left readable), ``backslash_names=True`` (``Contents\\x``
        entry names) and ``spine_order`` (section indices in reading order).
        """
        if not self.sections:
            self.add_section()
        manifest = (
            XML_DECL
            + '<odf:manifest xmlns:odf="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
        )
        if encrypted:
            manifest += (
                '<odf:file-entry odf:full-path="Contents/section0.xml" '
                'odf:media-type="application/xml"><odf:encryption-data '
                'odf:checksum-type="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0#sha256-1k" '
                'odf:checksum="AAAA"><odf:algorithm odf:algorithm-name='
                '"http://www.w3.org/2001/04/xmlenc#aes256-cbc" odf:initialisation-vector="AAAA"/>'
                "</odf:encryption-data></odf:file-entry>"
            )
        manifest += "</odf:manifest>"
        container = (
            XML_DECL
            + '<ocf:container xmlns:ocf="urn:oasis:names:tc:opendocument:xmlns:container" '
            'xmlns:hpf="http://www.hancom.co.kr/schema/2011/hpf"><ocf:rootfiles>'
            '<ocf:rootfile full-path="Contents/content.hpf" '
            'media-type="application/hwpml-package+xml"/><ocf:rootfile '
            'full-path="Preview/PrvText.txt" media-type="text/plain"/></ocf:rootfiles>'
            "</ocf:container>"
        )
        version = (
            XML_DECL
            + '<hv:HCFVersion xmlns:hv="http://www.hancom.co.kr/hwpml/2011/version" '
            'tagetApplication="WORDPROCESSOR" major="5" minor="1" micro="1" buildNumber="0" '
            'os="1" xmlVersion="1.4" application="Hancom Office Hangul" appVersion="11.0.0.0"/>'
        )
        settings = (
            XML_DECL
            + '<ha:HWPApplicationSetting xmlns:ha="http://www.hancom.co.kr/hwpml/2011/app" '
            'xmlns:config="urn:oasis:names:tc:opendocument:xmlns:config:1.0">'
            '<ha:CaretPosition listIDRef="0" paraIDRef="0" pos="0"/></ha:HWPApplicationSetting>'
        )
        parts: list[tuple[str, str]] = [
            ("version.xml", version),
            ("Contents/header.xml", self.header_xml()),
        ]
        parts += [(f"Contents/section{i}.xml", s.to_xml()) for i, s in enumerate(self.sections)]
        parts += [
            ("settings.xml", settings),
            ("META-INF/container.xml", container),
            ("Contents/content.hpf", self.content_hpf(spine_order)),
            ("Preview/PrvText.txt", self.title),
        ]
        if include_manifest:
            parts.append(("META-INF/manifest.xml", manifest))
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr(
                zipfile.ZipInfo("mimetype", date_time=(2024, 1, 1, 0, 0, 0)),
                "application/hwp+zip",
                compress_type=zipfile.ZIP_STORED,
            )
            for name, text in parts:
                if backslash_names:
                    name = name.replace("/", "\\")
                info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
                zf.writestr(info, text.encode("utf-8"), compress_type=zipfile.ZIP_DEFLATED)
        return buf.getvalue()

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        include_manifest: bool = True,
        encrypted: bool = False,
        backslash_names: bool = False,
        spine_order: list[int] | None = None,
    ) -> None:
        """Write :meth:`to_bytes` to ``path`` (same keyword options)."""
        data = self.to_bytes(
            include_manifest=include_manifest,
            encrypted=encrypted,
            backslash_names=backslash_names,
            spine_order=spine_order,
        )
        with open(path, "wb") as fh:
            fh.write(data)
