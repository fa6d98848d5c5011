"""The OWPML markup pieces the HWPX writer (:mod:`.writer`) assembles: namespaces, the
paragraph and run scaffolding, notes, plain paragraphs of cells and captions, text boxes and
the section properties (``hp:secPr``). Each returns a well-formed XML fragment; text is
escaped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from xml.sax.saxutils import escape

NS_DECL = (
    'xmlns:ha="http://www.hancom.co.kr/hwpml/2011/app" '
    'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph" '
    'xmlns:hp10="http://www.hancom.co.kr/hwpml/2016/paragraph" '
    'xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
    'xmlns:hc="http://www.hancom.co.kr/hwpml/2011/core" '
    'xmlns:hh="http://www.hancom.co.kr/hwpml/2011/head" '
    'xmlns:hhs="http://www.hancom.co.kr/hwpml/2011/history" '
    'xmlns:hm="http://www.hancom.co.kr/hwpml/2011/master-page" '
    'xmlns:hpf="http://www.hancom.co.kr/schema/2011/hpf" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:opf="http://www.idpf.org/2007/opf/" '
    'xmlns:ooxmlchart="http://www.hancom.co.kr/hwpml/2016/ooxmlchart" '
    'xmlns:hwpunitchar="http://www.hancom.co.kr/hwpml/2016/HwpUnitChar" '
    'xmlns:epub="http://www.idpf.org/2007/ops" '
    'xmlns:config="urn:oasis:names:tc:opendocument:xmlns:config:1.0"'
)
XML_DECL = '<?xml version="1.0" encoding="UTF-8" standalone="yes" ?>'

MAX_OUTLINE_LEVEL = 7
# paraPr ids: 0 = body, 1..7 = outline levels 1..7 (hh:heading type OUTLINE level 0..6),
# 8 = note body. style ids: 0 = 바탕글, 1..7 = 개요 1..7.
BODY_PARA_PR = 0
NOTE_PARA_PR = MAX_OUTLINE_LEVEL + 1
TEXT_WIDTH = 42520  # A4 width minus margins, HWPUNIT


@dataclass
class Ctx:
    """The ids one package hands out to its tables and shapes, in order."""

    next_id: int = 1000

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id


def run_text(text: str) -> str:
    """``hp:t`` content: ``\\t`` -> ``hp:tab``, ``\\n`` -> ``hp:lineBreak``, NBSP -> nbSpace."""
    out: list[str] = []
    buf: list[str] = []
    for ch in text:
        if ch in "\t\n\u00a0":
            out.append(escape("".join(buf)))
            buf.clear()
            if ch == "\t":
                out.append('<hp:tab width="4000" leader="0" type="1"/>')
            elif ch == "\n":
                out.append("<hp:lineBreak/>")
            else:
                out.append("<hp:nbSpace/>")
        else:
            buf.append(ch)
    out.append(escape("".join(buf)))
    return "<hp:t>" + "".join(out) + "</hp:t>"


def p_open(para_pr: int = BODY_PARA_PR, style: int = 0) -> str:
    return (
        f'<hp:p id="0" paraPrIDRef="{para_pr}" styleIDRef="{style}" pageBreak="0" '
        'columnBreak="0" merged="0">'
    )


def lineseg(width: int = TEXT_WIDTH) -> str:
    return (
        '<hp:linesegarray><hp:lineseg textpos="0" vertpos="0" vertsize="1000" textheight="1000" '
        f'baseline="850" spacing="600" horzpos="0" horzsize="{width}" flags="393216"/>'
        "</hp:linesegarray>"
    )


def sublist(inner: str, valign: str = "TOP") -> str:
    return (
        f'<hp:subList id="" textDirection="HORIZONTAL" lineWrap="BREAK" vertAlign="{valign}" '
        'linkListIDRef="0" linkListNextIDRef="0" textWidth="0" textHeight="0" hasTextRef="0" '
        f'hasNumRef="0">{inner}</hp:subList>'
    )


def note(kind: Literal["footNote", "endNote"], num: int, text: str) -> str:
    num_type = "FOOTNOTE" if kind == "footNote" else "ENDNOTE"
    body = (
        p_open(NOTE_PARA_PR)
        + '<hp:run charPrIDRef="0"><hp:ctrl>'
        + f'<hp:autoNum num="{num}" numType="{num_type}"><hp:autoNumFormat type="DIGIT" '
        'userChar="" prefixChar="" suffixChar=")" supscript="0"/></hp:autoNum></hp:ctrl>'
        + run_text(" " + text)
        + "</hp:run>"
        + lineseg()
        + "</hp:p>"
    )
    return f'<hp:ctrl><hp:{kind} number="{num}" instId="{num}">{sublist(body)}</hp:{kind}></hp:ctrl>'


def plain_paragraphs(text: str, width: int) -> str:
    """Paragraphs for a cell / caption / text box: one ``hp:p`` per ``\\n``-separated line."""
    lines = text.split("\n") if text else [""]
    return "".join(
        p_open()
        + '<hp:run charPrIDRef="0">'
        + (run_text(line) if line else "")
        + "</hp:run>"
        + lineseg(width)
        + "</hp:p>"
        for line in lines
    )


def text_box_xml(paragraphs: list[str], ctx: Ctx) -> str:
    w, h = 30000, 1600 * max(len(paragraphs), 1) + 1000
    inner = "".join(plain_paragraphs(p, w - 566) for p in paragraphs) or plain_paragraphs(
        "", w - 566
    )
    return (
        f'<hp:rect id="{ctx.new_id()}" zOrder="1" numberingType="PICTURE" textWrap="TOP_AND_BOTTOM" '
        'textFlow="BOTH_SIDES" lock="0" dropcapstyle="None" href="" groupLevel="0" '
        f'instid="{ctx.new_id()}" ratio="0">'
        '<hp:offset x="0" y="0"/>'
        f'<hp:orgSz width="{w}" height="{h}"/><hp:curSz width="{w}" height="{h}"/>'
        '<hp:flip horizontal="0" vertical="0"/>'
        f'<hp:rotationInfo angle="0" centerX="{w // 2}" centerY="{h // 2}" rotateimage="1"/>'
        "<hp:renderingInfo>"
        '<hc:transMatrix e1="1" e2="0" e3="0" e4="0" e5="1" e6="0"/>'
        '<hc:scaMatrix e1="1" e2="0" e3="0" e4="0" e5="1" e6="0"/>'
        '<hc:rotMatrix e1="1" e2="0" e3="0" e4="0" e5="1" e6="0"/>'
        "</hp:renderingInfo>"
        '<hp:lineShape color="#000000" width="33" style="SOLID" endCap="FLAT" headStyle="NORMAL" '
        'tailStyle="NORMAL" headfill="1" tailfill="1" headSz="MEDIUM_MEDIUM" '
        'tailSz="MEDIUM_MEDIUM" outlineStyle="NORMAL" alpha="0"/>'
        '<hp:shadow type="NONE" color="#000000" offsetX="0" offsetY="0" alpha="0"/>'
        f'<hp:drawText lastWidth="{w}" name="" editable="0">'
        + sublist(inner, "CENTER")
        + '<hp:textMargin left="283" right="283" top="283" bottom="283"/></hp:drawText>'
        f'<hc:pt0 x="0" y="0"/><hc:pt1 x="{w}" y="0"/><hc:pt2 x="{w}" y="{h}"/>'
        f'<hc:pt3 x="0" y="{h}"/>'
        f'<hp:sz width="{w}" widthRelTo="ABSOLUTE" height="{h}" heightRelTo="ABSOLUTE" '
        'protect="0"/>'
        '<hp:pos treatAsChar="1" affectLSpacing="0" flowWithText="0" allowOverlap="1" '
        'holdAnchorAndSO="0" vertRelTo="PARA" horzRelTo="PARA" vertAlign="TOP" horzAlign="LEFT" '
        'vertOffset="0" horzOffset="0"/>'
        '<hp:outMargin left="0" right="0" top="0" bottom="0"/>'
        "<hp:shapeComment/></hp:rect>"
    )


SEC_PR = (
    '<hp:secPr id="" textDirection="HORIZONTAL" spaceColumns="1134" tabStop="8000" '
    'tabStopVal="4000" tabStopUnit="HWPUNIT" outlineShapeIDRef="1" memoShapeIDRef="0" '
    'textVerticalWidthHead="0" masterPageCnt="0">'
    '<hp:grid lineGrid="0" charGrid="0" wonggojiFormat="0"/>'
    '<hp:startNum pageStartsOn="BOTH" page="0" pic="0" tbl="0" equation="0"/>'
    '<hp:visibility hideFirstHeader="0" hideFirstFooter="0" hideFirstMasterPage="0" '
    'border="SHOW_ALL" fill="SHOW_ALL" hideFirstPageNum="0" hideFirstEmptyLine="0" '
    'showLineNumber="0"/>'
    '<hp:lineNumberShape restartType="0" countBy="0" distance="0" startNumber="0"/>'
    '<hp:pagePr landscape="WIDELY" width="59528" height="84186" gutterType="LEFT_ONLY">'
    '<hp:margin header="4252" footer="4252" gutter="0" left="8504" right="8504" top="5668" '
    'bottom="4252"/></hp:pagePr>'
    '<hp:footNotePr><hp:autoNumFormat type="DIGIT" userChar="" prefixChar="" suffixChar=")" '
    'supscript="0"/><hp:noteLine length="-1" type="SOLID" width="0.12 mm" color="#000000"/>'
    '<hp:noteSpacing betweenNotes="283" belowLine="567" aboveLine="850"/>'
    '<hp:numbering type="CONTINUOUS" newNum="1"/>'
    '<hp:placement place="EACH_COLUMN" beneathText="0"/></hp:footNotePr>'
    '<hp:endNotePr><hp:autoNumFormat type="DIGIT" userChar="" prefixChar="" suffixChar=")" '
    'supscript="0"/><hp:noteLine length="14692344" type="SOLID" width="0.12 mm" '
    'color="#000000"/><hp:noteSpacing betweenNotes="0" belowLine="567" aboveLine="850"/>'
    '<hp:numbering type="CONTINUOUS" newNum="1"/>'
    '<hp:placement place="END_OF_DOCUMENT" beneathText="0"/></hp:endNotePr>'
    '<hp:pageBorderFill type="BOTH" borderFillIDRef="1" textBorder="PAPER" headerInside="0" '
    'footerInside="0" fillArea="PAPER"><hp:offset left="1417" right="1417" top="1417" '
    'bottom="1417"/></hp:pageBorderFill>'
    "</hp:secPr>"
    '<hp:ctrl><hp:colPr id="" type="NEWSPAPER" layout="LEFT" colCount="1" sameSz="1" '
    'sameGap="0"/></hp:ctrl>'
)
