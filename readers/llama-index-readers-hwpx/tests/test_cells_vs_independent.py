"""Differential test: every cell of ``HWPXReader.load_tables`` against two independent extractions.

Issue 2's acceptance: on real HWPX files nobody here has seen, every cell's
``(row, col, row_span, col_span, text)`` matches an independent extraction. For each
``*.hwpx`` in ``../shared/corpus/hwpx`` (plus ``bad/backslash_entry_names.hwpx``, which must read)
the reader's tables are compared with

1. **a reference extractor written here** (``zipfile`` + ``lxml`` only, none of the reader's
   code). Section parts in ``content.hpf`` spine order (numeric order when the spine names none),
   every ``hp:tbl`` in document pre-order, and for each table its *direct* cells
   (``hp:tr/hp:tc``). Coordinates and spans come from ``hp:cellAddr`` / ``hp:cellSpan`` and must
   be equal exactly, table by table, cell by cell (in ``hp:tc`` order). The cell text follows the
   documented semantics (``HWPXCell``: "the cell's own paragraphs (and text boxes) joined by
   ``\\n``, each stripped, empty ones skipped; text of a table nested in the cell belongs to that
   table"; README: tabs, line breaks, non-breaking and fixed-width spaces are text, check boxes
   read as ``☐``/``☑`` + caption, text boxes and picture captions follow their anchoring
   paragraph, page headers/footers are not text):

   - a paragraph's line is its ``hp:t`` text with ``hp:tab`` -> ``\\t``, ``hp:lineBreak`` ->
     ``\\n``, ``hp:nbSpace``/``hp:fwSpace`` -> ``" "``, check/radio buttons -> mark + caption;
     ``hp:switch`` reads its first ``hp:case`` (else ``hp:default``);
   - text boxes (``hp:drawText``) and captions (``hp:caption``) anchored in the paragraph add
     their own lines (same rules, recursively) right after the paragraph's line;
   - nested tables, footnotes/endnotes (their text is a note, not a paragraph of the cell) and
     page headers/footers add nothing.

   The text is compared **exactly** unless the cell holds a construct whose cell rendering the
   documentation leaves open; those cells are compared **whitespace-collapsed** and the reader
   may render the construct or leave it out: ``hp:hyphen`` (soft hyphen), ``hp:autoNum``,
   ``hp:equation``/``hp:script``, footnote/endnote markers.

2. **python-hwpx** (``HwpxDocument.open``; ``doc.sections[i].paragraphs`` -> ``paragraph.tables``
   -> ``table.rows[r].cells`` -> ``cell.tables``, recursively). It only reaches tables anchored in
   runs of body paragraphs and of cells (not text boxes, notes or page headers/footers); each of
   its tables is matched to the reader's by the element's XPath within its section part (the
   reference extractor gives every reader table's XPath). ``cell.address`` / ``cell.span`` must
   equal the reader's exactly. python-hwpx's ``cell.text`` is only its runs' ``hp:t`` text (no
   check boxes, text boxes or captions), so texts are compared whitespace-collapsed: exactly for
   cells without those objects, and for cells with them (or with an ``hp:switch``, which it does
   not read) python-hwpx's characters must appear in the reader's text in order; its soft hyphen
   ``\u00ad`` for ``hp:hyphen`` counts as ``-``. python-hwpx does not read backslash entry names, so that file is
   handed to it repacked with ``/`` names (same bytes per part).

``test_constructs_outside_the_corpus`` runs the same two comparisons on constructs the corpus
lacks (special characters, footnotes, text boxes, ``hp:switch``, a page-header table and a
footnote table inside a cell), spliced into the first cell of ``forge_nested_small.hwpx``.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from llama_index.readers.hwpx import HWPXReader, HWPXTable
from lxml import etree

pytestmark = pytest.mark.corpus

CORPUS = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus" / "hwpx"
FILES = (
    [*sorted(CORPUS.glob("*.hwpx")), CORPUS / "bad" / "backslash_entry_names.hwpx"]
    if CORPUS.is_dir()
    else []
)

HP = "{http://www.hancom.co.kr/hwpml/2011/paragraph}"
OPF = "{http://www.idpf.org/2007/opf/}"
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)

# inline atoms inside hp:t (documented: tab, line break, special spaces)
_ATOMS = {"tab": "\t", "lineBreak": "\n", "nbSpace": " ", "fwSpace": " "}
# constructs whose rendering inside a cell the documentation leaves open
_OPEN = frozenset({"hyphen", "autoNum", "equation", "script", "footNote", "endNote"})
# objects python-hwpx's cell.text does not read
_NOT_IN_PYHWPX = frozenset(
    {"checkBtn", "radioBtn", "drawText", "caption", "autoNum", "equation", "script", "switch"}
)


def _local(el: etree._Element) -> str:
    tag = el.tag
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


# --------------------------------------------------------------------------- reference extractor
@dataclass
class RefCell:
    row: int
    col: int
    row_span: int
    col_span: int
    text: str
    open_text: str  # the same with the "open" constructs' text left out
    kinds: frozenset[str]  # local names of every element in the cell's own content


@dataclass
class RefTable:
    section: int
    xpath: str
    cells: list[RefCell] = field(default_factory=list)


def _section_parts(zf: zipfile.ZipFile) -> list[str]:
    """Zip entry names of the section parts: spine order, else by section number."""
    by_norm = {n.replace("\\", "/"): n for n in zf.namelist()}
    sections = {
        norm: real
        for norm, real in by_norm.items()
        if re.fullmatch(r"Contents/section\d+\.xml", norm)
    }
    ordered: list[str] = []
    hpf = by_norm.get("Contents/content.hpf")
    if hpf is not None:
        root = etree.fromstring(zf.read(hpf), _PARSER)
        hrefs = {item.get("id"): item.get("href", "") for item in root.iter(f"{OPF}item")}
        for ref in root.iter(f"{OPF}itemref"):
            href = hrefs.get(ref.get("idref"), "").lstrip("/")
            for candidate in (href, f"Contents/{href}"):
                if candidate in sections and sections[candidate] not in ordered:
                    ordered.append(sections[candidate])
                    break
    if not ordered:

        def number(norm: str) -> int:
            return int(re.sub(r"\D", "", norm.rpartition("/")[2]))

        ordered = [sections[n] for n in sorted(sections, key=number)]
    return ordered


def _branch(switch: etree._Element) -> list[etree._Element]:
    cases = [c for c in switch if _local(c) == "case"]
    if cases:
        return [cases[0]]
    return [c for c in switch if _local(c) == "default"][:1]


class _Lines:
    """Own lines of a cell; ``open_`` drops the documentation-open constructs' text."""

    def __init__(self, open_: bool) -> None:
        self.open_ = open_
        self.kinds: set[str] = set()

    def container(self, el: etree._Element) -> list[str]:
        lines: list[str] = []
        for child in el:
            name = _local(child)
            if name == "p":
                lines.extend(self.paragraph(child))
            elif name == "subList":
                lines.extend(self.container(child))
        return lines

    def paragraph(self, p: etree._Element) -> list[str]:
        own: list[str] = []
        extra: list[str] = []
        self.inline(p, own, extra)
        line = "".join(own).strip()
        return ([line] if line else []) + extra

    def inline(self, el: etree._Element, own: list[str], extra: list[str]) -> None:
        for child in el:
            name = _local(child)
            self.kinds.add(name)
            if name == "t":
                own.append(child.text or "")
                for atom in child:
                    atom_name = _local(atom)
                    self.kinds.add(atom_name)
                    if atom_name in _ATOMS:
                        own.append(_ATOMS[atom_name])
                    elif atom_name == "hyphen" and not self.open_:
                        own.append("-")
                    own.append(atom.tail or "")
            elif name in ("tbl", "footNote", "endNote", "header", "footer", "masterPage"):
                continue  # a nested table's / a note's / a page header's own text
            elif name in ("drawText", "caption"):
                extra.extend(self.container(child))
            elif name == "switch":
                for branch in _branch(child):
                    self.inline(branch, own, extra)
            elif name in ("checkBtn", "radioBtn"):
                mark = "☑" if child.get("value") == "CHECKED" else "☐"
                own.append(mark + child.get("caption", ""))
            elif name == "autoNum":
                if not self.open_:
                    own.append(child.get("num", ""))
            elif name == "script":
                if not self.open_:
                    own.append(child.text or "")
            else:
                self.inline(child, own, extra)


def _read_branch(el: etree._Element) -> bool:
    """False when ``el`` lies in an ``hp:switch`` branch other than the one that is read."""
    for anc in el.iterancestors():
        if _local(anc) in ("case", "default"):
            parent = anc.getparent()
            if parent is not None and _local(parent) == "switch" and anc not in _branch(parent):
                return False
    return True


def _reference_cell(tc: etree._Element) -> RefCell:
    addr = tc.find(f"{HP}cellAddr")
    span = tc.find(f"{HP}cellSpan")
    assert addr is not None and span is not None
    sub = tc.find(f"{HP}subList")
    full, open_ = _Lines(False), _Lines(True)
    text = "\n".join(full.container(sub)) if sub is not None else ""
    open_text = "\n".join(open_.container(sub)) if sub is not None else ""
    return RefCell(
        int(addr.get("rowAddr", "")),
        int(addr.get("colAddr", "")),
        max(int(span.get("rowSpan", "1")), 1),
        max(int(span.get("colSpan", "1")), 1),
        text,
        open_text,
        frozenset(full.kinds),
    )


def _reference(path: Path) -> tuple[list[RefTable], list[etree._Element]]:
    with zipfile.ZipFile(path) as zf:
        roots = [etree.fromstring(zf.read(part), _PARSER) for part in _section_parts(zf)]
    tables: list[RefTable] = []
    for section, root in enumerate(roots):
        tree = root.getroottree()
        for tbl in root.iter(f"{HP}tbl"):  # document pre-order: a parent before its nested
            if not _read_branch(tbl):
                continue
            ref = RefTable(section, tree.getpath(tbl))
            ref.cells = [
                _reference_cell(tc)
                for tc in tbl.iterchildren(f"{HP}tr")
                for tc in tc.iterchildren(f"{HP}tc")
            ]
            tables.append(ref)
    return tables, roots


# --------------------------------------------------------------------------- python-hwpx
@dataclass
class HwpxLibCell:
    row: int
    col: int
    row_span: int
    col_span: int
    text: str


def _open_bytes(path: Path) -> bytes:
    """The package with ``/`` entry names (python-hwpx does not read ``Contents\\...``)."""
    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            compress = zipfile.ZIP_STORED if info.filename == "mimetype" else zipfile.ZIP_DEFLATED
            dst.writestr(info.filename.replace("\\", "/"), src.read(info), compress)
    return out.getvalue()


def _pyhwpx_tables(path: Path) -> dict[tuple[int, str], list[HwpxLibCell]]:
    hwpx = pytest.importorskip("hwpx")
    doc = hwpx.HwpxDocument.open(_open_bytes(path))
    found: dict[tuple[int, str], list[HwpxLibCell]] = {}

    def visit(section: int, table: Any) -> None:
        element = table.element
        cells: list[HwpxLibCell] = []
        nested: list[Any] = []
        for row in table.rows:
            for cell in row.cells:
                (r, c), (rs, cs) = cell.address, cell.span
                cells.append(HwpxLibCell(r, c, rs, cs, cell.text))
                nested.extend(cell.tables)
        found[(section, element.getroottree().getpath(element))] = cells
        for inner in nested:
            visit(section, inner)

    for section, sec in enumerate(doc.sections):
        for paragraph in sec.paragraphs:
            for table in paragraph.tables:
                visit(section, table)
    return found


# --------------------------------------------------------------------------- comparison
def _norm(text: str) -> str:
    """Whitespace collapsed; python-hwpx's soft hyphen (``hp:hyphen``) read as ``-``."""
    return " ".join(text.replace("\u00ad", "-").split())


def _in_order(needle: str, hay: str) -> bool:
    it = iter(_norm(hay).replace(" ", ""))
    return all(ch in it for ch in _norm(needle).replace(" ", ""))


def _where(path: Path, t: HWPXTable, i: int) -> str:
    c = t.cells[i]
    return f"{path.name} table {t.index} cell #{i} (row {c.row}, col {c.col})"


def _compare_reference(path: Path, ours: list[HWPXTable], ref: list[RefTable]) -> list[str]:
    problems: list[str] = []
    if len(ours) != len(ref):
        return [f"{path.name}: reader has {len(ours)} tables, reference {len(ref)}"]
    for t, r in zip(ours, ref, strict=True):
        if t.section != r.section:
            problems.append(f"{path.name} table {t.index}: section {t.section} vs {r.section}")
        if len(t.cells) != len(r.cells):
            problems.append(
                f"{path.name} table {t.index}: {len(t.cells)} cells vs reference {len(r.cells)}"
            )
            continue
        for i, (c, rc) in enumerate(zip(t.cells, r.cells, strict=True)):
            mine = (c.row, c.col, c.row_span, c.col_span)
            theirs = (rc.row, rc.col, rc.row_span, rc.col_span)
            if mine != theirs:
                problems.append(f"{_where(path, t, i)}: geometry {mine} vs reference {theirs}")
            if rc.kinds & _OPEN:
                ok = _norm(c.text) in (_norm(rc.text), _norm(rc.open_text))
            else:
                ok = c.text == rc.text
            if not ok:
                problems.append(f"{_where(path, t, i)}: text {c.text!r} vs reference {rc.text!r}")
    return problems


def _compare_pyhwpx(
    path: Path,
    ours: list[HWPXTable],
    ref: list[RefTable],
    lib: dict[tuple[int, str], list[HwpxLibCell]],
) -> list[str]:
    if len(ours) != len(ref):
        return []  # already reported; tables cannot be matched by position
    problems: list[str] = []
    index = {(r.section, r.xpath): k for k, r in enumerate(ref)}
    for key, lib_cells in lib.items():
        k = index.get(key)
        if k is None:
            problems.append(f"{path.name}: python-hwpx table {key} not among the reader's tables")
            continue
        t, r = ours[k], ref[k]
        if len(t.cells) != len(lib_cells):
            problems.append(
                f"{path.name} table {t.index}: {len(t.cells)} cells vs python-hwpx {len(lib_cells)}"
            )
            continue
        for i, (c, lc) in enumerate(zip(t.cells, lib_cells, strict=True)):
            mine = (c.row, c.col, c.row_span, c.col_span)
            theirs = (lc.row, lc.col, lc.row_span, lc.col_span)
            if mine != theirs:
                problems.append(f"{_where(path, t, i)}: geometry {mine} vs python-hwpx {theirs}")
            if r.cells[i].kinds & _NOT_IN_PYHWPX:
                ok = _in_order(lc.text, c.text)
            else:
                ok = _norm(c.text) == _norm(lc.text)
            if not ok:
                problems.append(f"{_where(path, t, i)}: text {c.text!r} vs python-hwpx {lc.text!r}")
    return problems


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_cells_match_independent_extractions(path: Path) -> None:
    ours = HWPXReader().load_tables(path)
    ref, _ = _reference(path)
    lib = _pyhwpx_tables(path)
    problems = _compare_reference(path, ours, ref) + _compare_pyhwpx(path, ours, ref, lib)
    n_cells = sum(len(t.cells) for t in ours)
    n_lib = sum(len(c) for c in lib.values())
    assert not problems, (
        f"{len(problems)} discrepancies ({n_cells} cells vs reference, {n_lib} vs python-hwpx):\n"
        + "\n".join(problems[:50])
    )


def test_corpus_folder_is_present() -> None:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus/hwpx is not present (CI provides it)")
    assert [p for p in FILES if p.parent == CORPUS], "no *.hwpx in the corpus folder"


# --------------------------------------------------------------------------- constructs
# Constructs the corpus does not contain, spliced into the first cell of a corpus file (the
# cell's runs are replaced). The same two comparisons must hold; a table anchored in a page
# header inside a cell is still a table (README: header/footer tables are always in
# load_tables), and a table in a footnote of a cell comes after a table nested earlier in it.
def _tbl(text: str) -> str:
    return (
        '<hp:tbl rowCnt="1" colCnt="1"><hp:tr><hp:tc><hp:subList><hp:p><hp:run>'
        f"<hp:t>{text}</hp:t></hp:run></hp:p></hp:subList>"
        '<hp:cellAddr colAddr="0" rowAddr="0"/><hp:cellSpan colSpan="1" rowSpan="1"/>'
        "</hp:tc></hp:tr></hp:tbl>"
    )


def _note(text: str, inner: str = "") -> str:
    return (
        '<hp:ctrl><hp:footNote number="1"><hp:subList><hp:p><hp:run>'
        f"<hp:t>{text}</hp:t>{inner}</hp:run></hp:p></hp:subList></hp:footNote></hp:ctrl>"
    )


CONSTRUCTS = {
    "special_characters": (
        "<hp:run><hp:t> A<hp:tab/>b<hp:lineBreak/>c<hp:nbSpace/>d<hp:fwSpace/>e"
        "<hp:hyphen/>f </hp:t></hp:run>"
    ),
    "footnote_in_cell": f"<hp:run><hp:t>A</hp:t>{_note('note')}<hp:t>B</hp:t></hp:run>",
    "text_box_in_cell": (
        "<hp:run><hp:t>A</hp:t><hp:rect><hp:drawText><hp:subList><hp:p><hp:run><hp:t>box</hp:t>"
        f"{_tbl('T')}</hp:run></hp:p></hp:subList></hp:drawText></hp:rect><hp:t>B</hp:t></hp:run>"
    ),
    "switch_in_cell": (
        f"<hp:run><hp:t>A</hp:t><hp:switch><hp:case><hp:t>c</hp:t>{_tbl('C')}</hp:case>"
        f"<hp:default><hp:t>d</hp:t>{_tbl('D')}</hp:default></hp:switch></hp:run>"
    ),
    "header_table_in_cell": (
        '<hp:run><hp:t>A</hp:t><hp:ctrl><hp:header id="1" applyPageType="BOTH"><hp:subList>'
        f"<hp:p><hp:run>{_tbl('H')}</hp:run></hp:p></hp:subList></hp:header></hp:ctrl></hp:run>"
    ),
    "note_table_after_nested_table": (
        f"<hp:run><hp:t>A</hp:t>{_tbl('X')}{_note('note', _tbl('Y'))}</hp:run>"
    ),
}


def _with_construct(base: Path, runs: str, out: Path) -> Path:
    with zipfile.ZipFile(base) as src, zipfile.ZipFile(out, "w") as dst:
        first = _section_parts(src)[0]
        for info in src.infolist():
            data = src.read(info)
            if info.filename == first:
                root = etree.fromstring(data, _PARSER)
                p = root.find(f".//{HP}tc/{HP}subList/{HP}p")
                assert p is not None
                for run in p.findall(f"{HP}run"):
                    p.remove(run)
                holder = etree.fromstring(f'<hp:p xmlns:hp="{HP[1:-1]}">{runs}</hp:p>', _PARSER)
                for k, run in enumerate(holder):
                    p.insert(k, run)
                data = etree.tostring(root, xml_declaration=True, encoding="UTF-8")
            kind = zipfile.ZIP_STORED if info.filename == "mimetype" else zipfile.ZIP_DEFLATED
            dst.writestr(info, data, kind)
    return out


@pytest.mark.parametrize("construct", sorted(CONSTRUCTS))
def test_constructs_outside_the_corpus(construct: str, tmp_path: Path) -> None:
    base = CORPUS / "forge_nested_small.hwpx"
    if not base.is_file():
        pytest.skip("../shared/corpus/hwpx/forge_nested_small.hwpx is not present")
    path = _with_construct(base, CONSTRUCTS[construct], tmp_path / f"{construct}.hwpx")
    ours = HWPXReader().load_tables(path)
    ref, _ = _reference(path)
    lib = _pyhwpx_tables(path)
    problems = _compare_reference(path, ours, ref) + _compare_pyhwpx(path, ours, ref, lib)
    # a table is either top level (no parent, depth 0) or nested (parent, parent's depth + 1)
    for t in ours:
        expected = 0 if t.parent is None else ours[t.parent.table_index].depth + 1
        if t.depth != expected:
            problems.append(f"{path.name} table {t.index}: depth {t.depth}, parent {t.parent}")
    assert not problems, "\n".join(problems)
