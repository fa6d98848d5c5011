"""HMLReader: Hancom HWPML 2.x XML (``.hml``) -> the same Documents and tables as HWPX.

HWPML 2.x is the single-file XML export of Hangul (``파일 > 다른 이름으로 저장 > HWPML``)::

    HWPML > HEAD (DOCSUMMARY, MAPPINGTABLE > PARASHAPELIST > PARASHAPE ...)
          > BODY > SECTION > P > TEXT > CHAR | TABLE | RECTANGLE > DRAWTEXT | FOOTNOTE ...
          TABLE > SHAPEOBJECT > CAPTION > PARALIST; TABLE > ROW > CELL(RowAddr, ColAddr,
          RowSpan, ColSpan) > PARALIST > P ...

The reader does not have a parser of its own. It parses the file with the HWPX reader's
hardened parser (entities never expanded, no DTD, no network, DOCTYPE refused, libxml2's depth
cap, ``max_file_bytes``), renames each HWPML element to its OWPML counterpart in place (``P`` ->
``p``, ``CELL`` with its address attributes -> ``tc`` with ``cellAddr``/``cellSpan``, ...) and
walks each ``SECTION`` with the HWPX :class:`SectionWalker`. So both formats share one table
model (:class:`HWPXTable`/:class:`HWPXCell`), one renderer, one heading classifier, one node
parser and the same limits (``max_table_depth``, ``max_table_cells``, ...).

Example::

    from llama_index.core import SimpleDirectoryReader
    from llama_index.readers.hwpx import HMLReader, HWPXNodeParser

    docs = SimpleDirectoryReader("in/", file_extractor={".hml": HMLReader()}).load_data()
    tables = HMLReader().load_tables("form.hml")
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
"""

from __future__ import annotations

from typing import ClassVar

from llama_index.readers.hwpx._errors import (
    HMLFormatError,
    HMLLimitError,
    HWPXError,
    HWPXFormatError,
    HWPXLimitError,
)
from llama_index.readers.hwpx._package import local, parse_xml
from llama_index.readers.hwpx._parse import Block, FileState, SectionWalker
from llama_index.readers.hwpx.base import HWPXReader, ParsedHWPX
from lxml import etree

__all__ = ["HMLReader", "HMLFormatError", "HMLLimitError"]

_PART = "HWPML"


def _as_hml(exc: HWPXFormatError, file: str, part: str) -> HMLFormatError:
    """``exc`` as the HML error of the same kind (limit errors keep their limit fields)."""
    if isinstance(exc, HWPXLimitError):
        return HMLLimitError(
            file, exc.detail, limit=exc.limit, value=exc.value, maximum=exc.maximum, part=part
        )
    return HMLFormatError(file, _message(exc), part=part)


# HWPML element -> OWPML local name read by SectionWalker. Elements not listed keep their
# (upper-case) name: the walker descends into unknown elements, so text inside wrappers such as
# SHAPEOBJECT/DRAWINGOBJECT is still found, and names it skips (secPr...) must be mapped here.
_RENAME: dict[str, str] = {
    "SECTION": "sec",
    "P": "p",
    "TEXT": "run",
    "CHAR": "t",
    "TAB": "tab",
    "LINEBREAK": "lineBreak",
    "NBSPACE": "nbSpace",
    "FWSPACE": "fwSpace",
    "HYPHEN": "hyphen",
    "HYPEN": "hyphen",  # sic: Hangul 2010 writes <HYPEN/>
    "TABLE": "tbl",
    "ROW": "tr",
    "CELL": "tc",
    "PARALIST": "subList",
    "DRAWTEXT": "drawText",
    "CAPTION": "caption",
    "FOOTNOTE": "footNote",
    "ENDNOTE": "endNote",
    "HEADER": "header",
    "FOOTER": "footer",
    "AUTONUM": "autoNum",
    "SCRIPT": "script",
    "SECDEF": "secPr",
    "COLDEF": "colPr",
    "SHAPECOMMENT": "shapeComment",
    "HIDDENCOMMENT": "hiddenComment",
    "RENDERINGINFO": "renderingInfo",
    "LINESHAPE": "lineShape",
    "FILLBRUSH": "fillBrush",
    "IMAGERECT": "imgRect",
    "IMAGECLIP": "imgClip",
    "IMAGE": "img",
    "EFFECTS": "effects",
    "PAGENUM": "pageNum",
    "PAGEHIDING": "pageHiding",
    "NEWNUM": "newNum",
    "PAGENUMCTRL": "pageNumCtrl",
    "INDEXMARK": "indexmark",
    "BOOKMARK": "bookmark",
    "FIELDEND": "fieldEnd",
    "PARAMETERSET": "parameters",
}


def _message(exc: HWPXError) -> str:
    """The message of ``exc`` without its ``file [part]: `` prefix."""
    prefix = exc.file + (f" [{exc.part}]" if exc.part else "") + ": "
    text = str(exc)
    return text[len(prefix) :] if text.startswith(prefix) else text


def _outline_levels(root: etree._Element) -> dict[str, int]:
    """``PARASHAPE`` id -> 1-based outline level for ``HeadingType="Outline"`` (as HWPX)."""
    levels: dict[str, int] = {}
    for el in root.iter("PARASHAPE"):
        pid = el.get("Id")
        if pid is None or el.get("HeadingType", "").lower() != "outline":
            continue
        try:
            lvl = int(el.get("Level", "0"))
        except ValueError:
            lvl = 0
        levels[pid] = min(max(lvl, 0), 9) + 1
    return levels


def _to_owpml(section: etree._Element) -> None:
    """Rename one ``SECTION`` subtree to the OWPML vocabulary, in place (iteratively)."""
    for el in list(section.iter()):
        tag = el.tag
        if not isinstance(tag, str):
            continue
        new = _RENAME.get(tag)
        if new is None:
            continue
        el.tag = new
        if new == "p":
            shape = el.get("ParaShape")
            if shape is not None:
                el.set("paraPrIDRef", shape)
        elif new == "tbl":
            for src, dst in (("RowCount", "rowCnt"), ("ColCount", "colCnt")):
                v = el.get(src)
                if v is not None:
                    el.set(dst, v)
            # HWPML keeps the caption in SHAPEOBJECT; OWPML has it as a child of the table
            for so in el.findall("SHAPEOBJECT"):
                for cap in so.findall("CAPTION"):
                    el.insert(0, cap)
        elif new == "tc":
            addr = etree.SubElement(el, "cellAddr")
            span = etree.SubElement(el, "cellSpan")
            for src, dst, node in (
                ("RowAddr", "rowAddr", addr),
                ("ColAddr", "colAddr", addr),
                ("RowSpan", "rowSpan", span),
                ("ColSpan", "colSpan", span),
            ):
                v = el.get(src)
                if v is not None:
                    node.set(dst, v)
        elif new == "autoNum":
            num = el.get("Number")
            if num is not None:
                el.set("num", num)


class HMLReader(HWPXReader):
    """Read HWPML 2.x (``.hml``) files into the same Documents, metadata, structure and
    :class:`HWPXTable` list as :class:`HWPXReader` (every field and limit applies alike;
    the zip-only limits ``max_part_bytes``/``max_total_bytes``/``max_compression_ratio`` have
    nothing to act on).

    Errors are :class:`HMLFormatError` (a :class:`HWPXFormatError`); batch loads of a directory
    (``**/*.hml``) or a list skip bad files into :attr:`failures` like the HWPX reader.
    """

    file_suffix: ClassVar[str] = ".hml"
    native_format: ClassVar[str] = "hml"

    @classmethod
    def class_name(cls) -> str:
        return "HMLReader"

    def _parse_native(self, data: bytes, file: str) -> ParsedHWPX:
        """Parse an HWPML document held in memory; ``file`` names it in errors."""
        if len(data) > self.max_file_bytes:
            raise HMLLimitError(
                file, f"file is {len(data)} bytes, above max_file_bytes={self.max_file_bytes}",
                limit="max_file_bytes", value=len(data), maximum=self.max_file_bytes,
            )
        try:
            root = parse_xml(data, file, _PART)
        except HMLFormatError:
            raise
        except HWPXFormatError as exc:
            raise _as_hml(exc, file, _PART) from exc
        if local(root.tag) != "HWPML":
            raise HMLFormatError(
                file, f"root element is <{local(root.tag)}>, not <HWPML> (not an HML file)"
            )
        body = root.find("BODY")
        sections = [] if body is None else body.findall("SECTION")
        if not sections:
            raise HMLFormatError(file, "no BODY/SECTION element (not an HWPML document)")
        title_el = root.find("HEAD/DOCSUMMARY/TITLE")
        package_title = (title_el.text or "").strip() if title_el is not None else ""
        limits = self.limits()
        state = FileState(
            file=file,
            limits=limits,
            outline=_outline_levels(root),
            include_headers_footers=self.include_headers_footers,
        )
        raw_sections: list[list[Block]] = []
        for i, sec in enumerate(sections):
            part = f"SECTION[{i}]"
            try:
                _to_owpml(sec)
                raw_sections.append(SectionWalker(state, i, part).walk(sec))
            except HMLFormatError:
                raise
            except HWPXFormatError as exc:
                raise _as_hml(exc, file, part) from exc
            except RecursionError as exc:
                raise HMLFormatError(file, "XML nested too deeply", part=part) from exc
        return self._assemble(file, package_title, raw_sections, state)
