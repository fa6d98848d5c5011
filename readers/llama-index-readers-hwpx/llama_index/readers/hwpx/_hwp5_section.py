"""One HWP 5 section's records -> the OWPML-shaped element tree the HWPX walker reads.

Format facts (Hancom, 한글 문서 파일 형식 5.0, revision 1.3):

- BodyText: ``PARA_HEADER`` (66: UINT32 nchars, UINT32 control mask, UINT16 para shape id, ...)
  with children ``PARA_TEXT`` (67: WCHAR[nchars]) and one ``CTRL_HEADER`` (71: UINT32 ctrl id)
  per extended control character of the text, in text order. Character codes 0-31 are
  controls: *char* controls take 1 WCHAR (0 unusable, 10 line break, 13 paragraph end, 24
  hyphen, 25-29 reserved, 30 non-breaking space, 31 fixed-width space); *inline* controls
  take 8 WCHARs (4 field end, 5-7 reserved, 8 title mark, 9 tab, 19-20 reserved); *extended*
  controls take 8 WCHARs and own the next CTRL_HEADER (1 reserved, 2 section/column
  definition, 3 field start, 11 drawing object/table, 12 reserved, 14 reserved, 15 hidden
  comment, 16 header/footer, 17 footnote/endnote, 18 auto number, 21 page control, 22
  bookmark/index mark, 23 overlapping letters/ruby text).
- ``tbl `` ctrl: a ``LIST_HEADER`` (72) before the ``TABLE`` record (77: UINT32 props, UINT16
  rows, UINT16 cols, ...) is the caption; each ``LIST_HEADER`` after it is a cell: INT16
  paragraph count, UINT32 properties, UINT16 (unused), then the cell properties UINT16 column,
  UINT16 row, UINT16 column span, UINT16 row span, .... A list's paragraphs are the
  ``PARA_HEADER`` records that follow its LIST_HEADER at the same level.
- ``gso `` ctrl (drawing objects, pictures): a LIST_HEADER directly under the ctrl is the
  caption; LIST_HEADERs inside its ``SHAPE_COMPONENT`` (76) tree are text boxes (글상자).
  ``fn  ``/``en  `` (notes), ``head``/``foot`` (page header/footer): one LIST_HEADER and its
  paragraphs. ``eqed`` (equation): ``EQEDIT`` (88: UINT32 props, WORD len, WCHAR[len] script).
  ``atno`` (auto number): UINT32 props, UINT16 number.

Each section becomes the element tree :class:`~._parse.SectionWalker` walks for HWPX (``sec >
p > t | tbl | footNote | endNote | drawText | caption | header | footer | equation >
script | autoNum``; ``tbl > caption, tr > tc > subList, cellAddr, cellSpan``), so HWP 5 shares
the HWPX table model, renderer, heading classifier and limits.
"""

from __future__ import annotations

import re
import struct
from array import array
from codecs import utf_16_le_decode as _utf16
from collections.abc import Callable, Iterable

from llama_index.readers.hwpx._errors import hwp_format_error as _format
from llama_index.readers.hwpx._errors import hwp_limit_error as _limit
from llama_index.readers.hwpx._hwp5_records import (
    TAG_CTRL_HEADER,
    TAG_EQEDIT,
    TAG_FORM_OBJECT,
    TAG_LIST_HEADER,
    TAG_PARA_HEADER,
    TAG_PARA_TEXT,
    TAG_SHAPE_COMPONENT,
    TAG_TABLE,
    Records,
)
from llama_index.readers.hwpx._hwp5_xml import SURROGATE as _SURROGATE
from llama_index.readers.hwpx._hwp5_xml import XML_SPECIAL as _XML_SPECIAL
from llama_index.readers.hwpx._hwp5_xml import xml_attr as _xml_attr
from llama_index.readers.hwpx._hwp5_xml import xml_safe as _xml_safe
from llama_index.readers.hwpx._hwp5_xml import xml_text as _xml_text
from llama_index.readers.hwpx._package import Limits
from lxml import etree

_EXTENDED = frozenset({1, 2, 3, 11, 12, 14, 15, 16, 17, 18, 21, 22, 23})
_INLINE = frozenset({4, 5, 6, 7, 8, 9, 19, 20})
_CHAR_TEXT = {9: "\t", 10: "\n", 24: "-", 30: " ", 31: " "}
_CONTROL = re.compile(r"[\x00-\x1f]")
_U16 = struct.Struct("<H")  # a paragraph's shape id
_CELL = struct.Struct("<HHHH")  # a cell's column, row, column span, row span
# a list (cell, text box, note) nested in another deeper than this is refused (each level is
# a few Python frames in the builder and the walker; HWPX gets the same cap from libxml2)
MAX_LIST_DEPTH = 200


def _wstring(props: str, name: str) -> str | None:
    """Whitespace-normalised value of ``name:wstring:<n>:<n chars>`` in a property string."""
    m = re.search(rf"(?:^|[\s:]){name}:wstring:(\d+):", props)
    if m is None:
        return None
    return " ".join(props[m.end() : m.end() + int(m.group(1))].split())


def _ctrl_id(raw: bytes) -> str:
    """A CTRL_HEADER's UINT32 ctrl id as its 4 characters (stored little-endian, reversed)."""
    return raw[3::-1].decode("latin-1")


class SectionBuilder:
    """Build one section's OWPML-shaped tree from its records (see the module docstring).

    The tree is written as XML text in document order and parsed once by libxml2, which is
    several times faster than creating each element from Python; every text and attribute
    value is XML-escaped, and nothing else reaches the text.

    ``records`` is the section's :class:`Records`, or its batches from
    :func:`~._hwp5_records.iter_records`, built as they are read. The text written is charged
    against ``max_text_chars`` as it goes, on top of ``text_before`` (what the walker charged
    for the file's earlier sections), with a lower bound of what the walker will charge for
    it (:meth:`_charge_paragraph`): a file the walker would refuse for its text is refused
    here once the bound crosses the limit, before the rest of the stream is read or any
    tree is built, and a file the walker accepts is never refused here."""

    def __init__(
        self, records: Records | Iterable[Records], file: str, part: str, limits: Limits,
        warn: Callable[[str], None], text_before: int = 0,
    ) -> None:
        self.batches: Iterable[Records] = (
            (records,) if isinstance(records, Records) else records
        )
        self.rec = Records(b"", array("H"), array("H"), array("q"), array("q"), array("q"))
        self.file = file
        self.part = part
        self.limits = limits
        self.warn = warn
        self.depth = 0
        self.table_depth = 0
        self.out: list[str] = []
        self.text_before = text_before
        self.text_bound = 0  # the lower bound charged for this section so far
        # what a paragraph's text is charged on top of its characters: per open list, -1
        # outside table cells (the walker's 8 for a paragraph block), else the lines the
        # cell holds so far (its lines are joined by one character each, see _charge_paragraph)
        self.lists = [-1]

    def build(self) -> etree._Element:
        """The section's tree. Top-level paragraphs are the PARA_HEADERs on the stream's
        top chain (each record at most as deep as every record before it) at the chain's
        last (lowest) level; when a batch brings a lower level, what was built from the
        higher one is dropped, with its charge."""
        self.out = ["<sec>"]
        top = 1 << 30
        for rec in self.batches:
            self.rec = rec
            tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
            i, end = 0, len(tags)
            while i < end:
                lvl = levels[i]
                if lvl < top:
                    if top != 1 << 30:  # a lower top level: nothing built so far was top
                        del self.out[1:]
                        self.text_bound = 0
                    top = lvl
                if tags[i] == TAG_PARA_HEADER and lvl == top:
                    self._paragraph(i)
                i = sub_end[i]
        self.out.append("</sec>")
        text = "".join(self.out)
        self.out = []
        # our own markup: no DTD, no entities; huge_tree lifts libxml2's depth cap (256) to
        # what MAX_LIST_DEPTH allows (each list level is at most 5 elements deep)
        parser = etree.XMLParser(huge_tree=True, resolve_entities=False, no_network=True)
        try:
            return etree.fromstring(text, parser)
        except etree.XMLSyntaxError as exc:  # pragma: no cover - the markup is ours
            raise _format(
                self.file, f"section could not be assembled ({exc})", self.part
            ) from exc

    def _charge_paragraph(self, n: int) -> None:
        """Charge a paragraph whose text pieces strip to ``n`` characters in all (n > 0).

        The walker charges each paragraph block its stripped text + 8 (a block's pieces
        strip to at least the sum of the pieces stripped one by one); a table its cells'
        texts, each the cell's lines (one per paragraph with text, text boxes' included)
        joined by ``\n``, at least one character more per line after a cell's first, plus
        its frame (:func:`~._parse.table_text_bound`). So: n + 8 outside cells, n + 1 for a
        cell's second and later lines, n for its first. Notes, headers/footers and table
        captions inside a cell are paragraph blocks (charged 8 by the walker, at most 1 here)."""
        lists = self.lists
        cell = lists[-1]
        if cell < 0:
            n += 8
        else:
            n += cell > 0
            lists[-1] = cell + 1
        self.text_bound += n
        total = self.text_before + self.text_bound
        cap = self.limits.max_text_chars
        if total > cap:
            raise _limit(
                self.file,
                f"rendered text would exceed max_text_chars={cap} (at least {total} "
                "characters by the paragraphs read so far)",
                "max_text_chars", total, cap, self.part,
            )

    # ------------------------------------------------------------------ lists
    def _list_after(self, head: int, end: int) -> int:
        """The paragraphs following LIST_HEADER ``head`` at its level, as ``p`` elements;
        returns the index after them."""
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        level = levels[head]
        self.depth += 1
        if self.depth > MAX_LIST_DEPTH:
            raise _format(
                self.file,
                f"lists (cells, text boxes, notes) nested deeper than {MAX_LIST_DEPTH}",
                self.part,
            )
        i = sub_end[head]
        while i < end and tags[i] == TAG_PARA_HEADER and levels[i] == level:
            self._paragraph(i)
            i = sub_end[i]
        self.depth -= 1
        return i

    # ------------------------------------------------------------------ paragraphs
    def _paragraph(self, i: int) -> None:
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        j = i + 1
        end = sub_end[i]
        if j == end:
            return  # no text, no control: nothing the walker would read
        data = rec.data
        text_at = -1
        ctrls: list[int] = []
        child_level = levels[i] + 1
        while j < end:
            if levels[j] == child_level:
                tag = tags[j]
                if tag == TAG_PARA_TEXT and text_at < 0:
                    text_at = j
                elif tag == TAG_CTRL_HEADER:
                    ctrls.append(j)
            j = sub_end[j]
        if text_at < 0 and not ctrls:
            return  # an empty paragraph: nothing the walker would read
        out = self.out
        mark = len(out)
        start = rec.starts[i]
        if rec.ends[i] - start >= 10:
            (shape,) = _U16.unpack_from(data, start + 8)
            out.append(f'<p paraPrIDRef="{shape}">')
        else:
            out.append("<p>")
        # text and objects go straight into ``p``: the walker reads a ``run`` only as a
        # container, and HWP 5 has no run-level properties it would use
        if text_at < 0:
            # no text record: a paragraph holding nothing but its controls
            for c in ctrls:
                self._control(c)
        else:
            n = self._text(data[rec.starts[text_at] : rec.ends[text_at]], ctrls)
            if n:
                self._charge_paragraph(n)
            elif not ctrls:
                del out[mark:]  # white space only: nothing the walker would read
                return
        out.append("</p>")

    def _text(self, raw: bytes, ctrls: list[int]) -> int:
        """Decode PARA_TEXT: text pieces into ``t`` elements, extended controls in order;
        returns the characters of the pieces, each stripped.

        A field's text (between its start, code 3, and its end, code 4) is read as any
        text: the text of an unfilled click-here field (누름틀) is its guide text, which
        Hangul keeps in the field in both formats (an HWPX saved by some older versions
        leaves it out)."""
        if len(raw) & 1:
            raw = raw[:-1]
        s = _utf16(raw, "surrogatepass", True)[0]  # bytes.decode, without the lookup
        if len(s) * 2 != len(raw):  # a surrogate pair: work in code units
            s = "".join(chr(u) for u in struct.unpack(f"<{len(raw) // 2}H", raw))
        n = len(s)
        search = _CONTROL.search
        m = search(s)
        if m is None or (m.start() == n - 1 and s[-1] == "\r"):
            # the common case (nine texts in ten): no control but the paragraph end, so
            # no field and no object in the text; the loop below would do the same
            text = s if m is None else s[:-1]
            counted = self._t([text]) if text else 0
            for c in ctrls:
                self._control(c)
            return counted
        counted = 0
        n_ctrl = 0
        pieces: list[str] = []
        pos = 0
        while pos < n:
            m = search(s, pos)
            if m is None:
                pieces.append(s[pos:])
                break
            k = m.start()
            if k > pos:
                pieces.append(s[pos:k])
            code = ord(s[k])
            if code in _EXTENDED:
                pos = k + 8
                if n_ctrl < len(ctrls) and code != 3:  # a field start holds no text
                    if pieces:
                        counted += self._t(pieces)
                    self._control(ctrls[n_ctrl])
                n_ctrl += 1
                continue
            if code in _INLINE:
                pos = k + 8
                if code == 9:
                    pieces.append("\t")
                continue
            if code == 13:
                pos = k + 1
                continue
            piece = _CHAR_TEXT.get(code)
            if piece is not None:
                pieces.append(piece)
            pos = k + 1
        if pieces:
            counted += self._t(pieces)
        # controls the text did not reference (a damaged text): read them anyway, in order
        for c in ctrls[n_ctrl:]:
            self._control(c)
        return counted

    def _t(self, pieces: list[str]) -> int:
        """Write ``pieces`` as one ``t`` element; returns its length stripped (as the
        walker will read it: characters XML cannot hold dropped, surrogates paired)."""
        text = "".join(pieces)
        pieces.clear()
        if not text:
            return 0
        if _XML_SPECIAL.search(text) is None:  # the common case: nothing to escape or pair
            self.out.append(f"<t>{text}</t>")
            return len(text.strip())
        if _SURROGATE.search(text):  # code units from the slow path: pair them again
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        text = _xml_safe(text)
        self.out.append(f"<t>{_xml_text(text)}</t>")
        return len(text.strip())

    # ------------------------------------------------------------------ controls
    def _control(self, c: int) -> None:
        rec = self.rec
        start, stop = rec.starts[c], rec.ends[c]
        if stop - start < 4:
            return
        cid = _ctrl_id(rec.data[start : start + 4])
        if cid == "tbl ":
            self._table(c)
        elif cid == "gso ":
            self._shape(c)
        elif cid in ("fn  ", "en  ", "head", "foot"):
            name = {"fn  ": "footNote", "en  ": "endNote", "head": "header", "foot": "footer"}
            self.out.append(f"<{name[cid]}><subList>")
            self.lists.append(-1)  # paragraph blocks, in a cell too
            self._first_list(c)
            self.lists.pop()
            self.out.append(f"</subList></{name[cid]}>")
        elif cid == "eqed":
            self._equation(c)
        elif cid == "atno":
            if stop - start >= 10:
                (num,) = struct.unpack_from("<H", rec.data, start + 8)
                self.out.append(f'<autoNum num="{num}"/>')
        elif cid == "form":
            self._form(c)
        elif cid == "tcmt":
            return  # hidden comment (숨은 설명): never text, as hp:hiddenComment in HWPX

    def _form(self, c: int) -> None:
        """A form object (양식 개체): check boxes and radio buttons as HWPX ``checkBtn`` /
        ``radioBtn`` (caption and checked state). FORM_OBJECT: UINT32 type id twice (``+cbt``
        check box, ``+rbt`` radio button...), UINT32 length, then the property string as a
        WORD-length-prefixed WCHAR string (``... Caption:wstring:<n>:<text> Value:int:<v>``)."""
        rec = self.rec
        j, end = c + 1, rec.sub_end[c]
        while j < end:
            if rec.tags[j] == TAG_FORM_OBJECT:
                start, stop = rec.starts[j], rec.ends[j]
                data = rec.data
                if stop - start < 14:
                    return
                kind = data[start : start + 4][::-1]
                name = {b"+cbt": "checkBtn", b"+rbt": "radioBtn"}.get(kind)
                if name is None:
                    return
                raw = data[start + 14 : stop]
                props = raw[: len(raw) & ~1].decode("utf-16-le", "replace")
                caption = _xml_attr(_wstring(props, "Caption") or "")
                value = re.search(r"(?:^|\s)Value:int:(\d+)", props)
                checked = "CHECKED" if value and value.group(1) == "1" else "UNCHECKED"
                self.out.append(f'<{name} caption="{caption}" value="{checked}"/>')
                return
            j = rec.sub_end[j]

    def _first_list(self, c: int) -> None:
        """The paragraphs of the first LIST_HEADER directly under ctrl ``c``."""
        rec = self.rec
        j, end = c + 1, rec.sub_end[c]
        lvl = rec.levels[c] + 1
        while j < end:
            if rec.tags[j] == TAG_LIST_HEADER and rec.levels[j] == lvl:
                self._list_after(j, end)
                return
            j = rec.sub_end[j]

    def _equation(self, c: int) -> None:
        rec = self.rec
        j, end = c + 1, rec.sub_end[c]
        while j < end:
            if rec.tags[j] == TAG_EQEDIT:
                start, stop = rec.starts[j], rec.ends[j]
                if stop - start >= 6:
                    (n,) = struct.unpack_from("<H", rec.data, start + 4)
                    raw = rec.data[start + 6 : min(start + 6 + 2 * n, stop)]
                    script = raw[: len(raw) & ~1].decode("utf-16-le", "replace")
                    self.out.append(f"<equation><script>{_xml_text(script)}</script></equation>")
                return
            j = rec.sub_end[j]

    def _shape(self, c: int) -> None:
        """``gso ``: caption (LIST_HEADER under the ctrl) and text boxes (LIST_HEADERs in the
        SHAPE_COMPONENT tree, groups included)."""
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        out = self.out
        out.append("<gso>")
        j, end = c + 1, sub_end[c]
        lvl = levels[c] + 1
        while j < end:
            if levels[j] == lvl:
                if tags[j] == TAG_LIST_HEADER:
                    out.append("<caption><subList>")
                    j = self._list_after(j, end)
                    out.append("</subList></caption>")
                    continue
                if tags[j] == TAG_SHAPE_COMPONENT:
                    self._text_boxes(j)
            j = sub_end[j]
        out.append("</gso>")

    def _text_boxes(self, k: int) -> None:
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        out = self.out
        j, end = k + 1, sub_end[k]
        lvl = levels[k] + 1
        while j < end:
            if levels[j] == lvl:
                if tags[j] == TAG_LIST_HEADER:
                    out.append("<drawText><subList>")
                    j = self._list_after(j, end)
                    out.append("</subList></drawText>")
                    continue
                if tags[j] == TAG_SHAPE_COMPONENT:  # a member of a group (묶음 개체)
                    self.depth += 1
                    if self.depth > MAX_LIST_DEPTH:
                        raise _format(self.file, "drawing objects grouped too deeply", self.part)
                    self._text_boxes(j)
                    self.depth -= 1
            j = sub_end[j]

    def _table(self, c: int) -> None:
        # the walker's max_table_depth, checked here before the nested tree is built
        cap = self.limits.max_table_depth
        if self.table_depth >= cap:
            raise _limit(
                self.file,
                f"tables nested deeper than max_table_depth={cap}",
                "max_table_depth", self.table_depth + 1, cap, self.part,
            )
        self.table_depth += 1
        try:
            self._table_body(c)
        finally:
            self.table_depth -= 1

    def _table_body(self, c: int) -> None:
        rec = self.rec
        data = rec.data
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        out = self.out
        head = len(out)
        out.append("<tbl>")  # given its grid attributes when the TABLE record is read
        j, end = c + 1, sub_end[c]
        lvl = levels[c] + 1
        seen_table = False
        in_row = False
        last_row = -1
        n_cells = 0
        cap_cells = self.limits.max_table_cells
        while j < end:
            if levels[j] != lvl:
                j = sub_end[j]
                continue
            tag = tags[j]
            if tag == TAG_TABLE and not seen_table:
                seen_table = True
                start, stop = rec.starts[j], rec.ends[j]
                if stop - start >= 8:
                    rows, cols = struct.unpack_from("<HH", data, start + 4)
                    grid = max(rows, 1) * max(cols, 1)
                    if grid > cap_cells:
                        raise _limit(
                            self.file,
                            f"table declares a {rows}x{cols} grid: {grid} exceeds "
                            f"max_table_cells={cap_cells}",
                            "max_table_cells", grid, cap_cells, self.part,
                        )
                    out[head] = f'<tbl rowCnt="{rows}" colCnt="{cols}">'
            elif tag == TAG_LIST_HEADER:
                if not seen_table:
                    # the caption comes before the TABLE record; each one goes first in
                    # ``tbl`` (a later caption before an earlier one)
                    mark = len(out)
                    out.append("<caption><subList>")
                    self.lists.append(-1)  # paragraph blocks, in a cell too
                    j = self._list_after(j, end)
                    self.lists.pop()
                    out.append("</subList></caption>")
                    chunk = out[mark:]
                    del out[mark:]
                    out[head + 1 : head + 1] = chunk
                    continue
                n_cells += 1
                if n_cells > cap_cells:
                    raise _limit(
                        self.file, f"table cell count {n_cells} exceeds "
                        f"max_table_cells={cap_cells}",
                        "max_table_cells", n_cells, cap_cells, self.part,
                    )
                start, stop = rec.starts[j], rec.ends[j]
                if stop - start >= 16:
                    col, row, cs, rs = _CELL.unpack_from(data, start + 8)
                else:
                    col, row, cs, rs = 0, max(last_row, 0), 1, 1
                if not in_row or row != last_row:
                    out.append("</tr><tr>" if in_row else "<tr>")
                    in_row = True
                    last_row = row
                out.append("<tc><subList>")
                self.lists.append(0)  # a cell: no line yet
                j = self._list_after(j, end)
                self.lists.pop()
                out.append(
                    f'</subList><cellAddr rowAddr="{row}" colAddr="{col}"/>'
                    f'<cellSpan rowSpan="{rs}" colSpan="{cs}"/></tc>'
                )
                continue
            j = sub_end[j]
        out.append("</tr></tbl>" if in_row else "</tbl>")

