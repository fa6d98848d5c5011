"""Real HWPX files from ../shared/corpus/hwpx, checked against an independent lxml scan."""

from __future__ import annotations

import re
import warnings
import zipfile
from pathlib import Path

import pytest
from llama_index.readers.hwpx import (
    HWPXEncryptedError,
    HWPXFormatError,
    HWPXNodeParser,
    HWPXReader,
    HWPXReadWarning,
    HWPXTable,
)
from lxml import etree

pytestmark = pytest.mark.corpus

HP = "{http://www.hancom.co.kr/hwpml/2011/paragraph}"
SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
GOOD = sorted((SHARED / "corpus" / "hwpx").glob("*.hwpx"))


def _sections(path: Path) -> list[etree._Element]:
    """Independent scan: section parts ordered by their number (corpus spines agree)."""
    zf = zipfile.ZipFile(path)
    found = []
    for name in zf.namelist():
        m = re.fullmatch(r"Contents[/\\]section(\d+)\.xml", name)
        if m:
            found.append((int(m.group(1)), etree.fromstring(zf.read(name))))
    return [root for _, root in sorted(found, key=lambda x: x[0])]


def _oracle_tables(path: Path) -> list[list[tuple[int, int, int, int]]]:
    """Per hp:tbl in document order: its direct cells' (row, col, row_span, col_span)."""
    out = []
    for root in _sections(path):
        for tbl in root.iter(f"{HP}tbl"):
            cells = []
            for tc in tbl.findall(f"{HP}tr/{HP}tc"):
                addr = tc.find(f"{HP}cellAddr")
                span = tc.find(f"{HP}cellSpan")
                cells.append(
                    (
                        int(addr.get("rowAddr")),
                        int(addr.get("colAddr")),
                        int(span.get("rowSpan")),
                        int(span.get("colSpan")),
                    )
                )
            out.append(cells)
    return out


_SPECIAL_CHARS = {
    f"{HP}tab": " ",
    f"{HP}lineBreak": " ",
    f"{HP}nbSpace": " ",
    f"{HP}fwSpace": " ",
    f"{HP}hyphen": "-",
}


def _oracle_plain_cell_texts(path: Path) -> list[dict[tuple[int, int], str]]:
    """Text of cells holding only plain runs (no nested objects): all hp:t text of the cell,
    special-character elements as spaces, whitespace-normalised."""
    out = []
    for root in _sections(path):
        for tbl in root.iter(f"{HP}tbl"):
            texts: dict[tuple[int, int], str] = {}
            for tc in tbl.findall(f"{HP}tr/{HP}tc"):
                objects = tc.xpath(
                    ".//*[local-name()='tbl' or local-name()='drawText' or local-name()='footNote'"
                    " or local-name()='endNote' or local-name()='autoNum' or local-name()='caption'"
                    " or local-name()='checkBtn' or local-name()='radioBtn' or local-name()='equation'"
                    " or local-name()='switch' or local-name()='header' or local-name()='footer']"
                )
                if objects:
                    continue
                pieces = []
                for p in tc.findall(f"{HP}subList/{HP}p"):
                    for t in p.iter(f"{HP}t"):
                        pieces.append(t.text or "")
                        for child in t:
                            # tab, lineBreak, nbSpace, fwSpace are visible space; hyphen is "-";
                            # markers (markpenBegin/End, titleMark, insert/delete marks) are
                            # invisible and add nothing
                            pieces.append(_SPECIAL_CHARS.get(child.tag, ""))
                            pieces.append(child.tail or "")
                    pieces.append(" ")  # paragraph boundary
                addr = tc.find(f"{HP}cellAddr")
                texts[(int(addr.get("rowAddr")), int(addr.get("colAddr")))] = " ".join(
                    "".join(pieces).split()
                )
            out.append(texts)
    return out


@pytest.fixture(scope="module")
def tables_by_file() -> dict[str, list[HWPXTable]]:
    if not GOOD:
        pytest.skip("../shared/corpus/hwpx is not present (CI provides it)")
    reader = HWPXReader()
    return {p.name: reader.load_tables(p) for p in GOOD}


def test_corpus_is_present(corpus_dir: Path) -> None:
    assert len(GOOD) >= 20


@pytest.mark.parametrize("path", GOOD, ids=[p.name for p in GOOD])
def test_cells_tile_the_grid_exactly_once(
    path: Path, tables_by_file: dict[str, list[HWPXTable]]
) -> None:
    for t in tables_by_file[path.name]:
        count = [[0] * t.n_cols for _ in range(t.n_rows)]
        for c in t.cells:
            for r in range(c.row, c.row + c.row_span):
                for k in range(c.col, c.col + c.col_span):
                    count[r][k] += 1
        assert all(v == 1 for row in count for v in row), (path.name, t.index)


@pytest.mark.parametrize("path", GOOD, ids=[p.name for p in GOOD])
def test_cells_match_independent_scan(
    path: Path, tables_by_file: dict[str, list[HWPXTable]]
) -> None:
    ours = tables_by_file[path.name]
    oracle = _oracle_tables(path)
    # same number of cells as hp:tc elements, same tables in the same (pre-)order
    assert sum(len(t.cells) for t in ours) == sum(len(c) for c in oracle)
    assert len(ours) == len(oracle)
    for t, cells in zip(ours, oracle, strict=True):
        assert sorted((c.row, c.col, c.row_span, c.col_span) for c in t.cells) == sorted(cells)
    # plain cells' text equals the oracle's (both whitespace-normalised)
    checked = 0
    for t, texts in zip(ours, _oracle_plain_cell_texts(path), strict=True):
        for c in t.cells:
            if (c.row, c.col) in texts:
                checked += 1
                mine = " ".join(c.text.split())
                assert mine == texts[(c.row, c.col)], (path.name, t.index, c.row, c.col)
    assert checked >= 0.5 * sum(len(c) for c in oracle)  # most cells are plain


@pytest.mark.parametrize("path", GOOD, ids=[p.name for p in GOOD])
def test_parents_and_depths_are_consistent(
    path: Path, tables_by_file: dict[str, list[HWPXTable]]
) -> None:
    tables = tables_by_file[path.name]
    for t in tables:
        if t.parent is None:
            assert t.depth == 0
        else:
            parent = tables[t.parent.table_index]
            assert parent.index < t.index and t.depth == parent.depth + 1
            assert t.parent.cell in parent.cells
    assert [t.index for t in tables] == list(range(len(tables)))


@pytest.mark.parametrize("path", GOOD, ids=[p.name for p in GOOD])
def test_documents_and_nodes(path: Path) -> None:
    docs = HWPXReader().load_data(path)
    assert len(docs) == 1
    tables = HWPXReader().load_tables(path)
    # page header/footer tables are in load_tables always, in the text unless left out
    assert docs[0].metadata["table_count"] == len(tables)
    body_tables = [t for t in tables if t.location != "header_footer"]
    plain = HWPXReader(include_headers_footers=False).load_data(path)
    assert plain[0].metadata["table_count"] == len(body_tables)
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    n_sections = len(_sections(path))
    assert len(HWPXReader(split_sections=True).load_data(path)) == n_sections
    for n in nodes:
        assert n.get_content().startswith("## ")
        assert "hwpx_structure" not in n.metadata


BAD = SHARED / "corpus" / "hwpx" / "bad"


@pytest.mark.parametrize(
    ("name", "error", "needle"),
    [
        ("encrypted_password_12345.hwpx", HWPXEncryptedError, "encryption-data"),
        ("truncated_zip_derived.hwpx", HWPXFormatError, "truncated"),
    ],
)
def test_bad_files_raise_typed_errors(
    corpus_dir: Path, name: str, error: type[Exception], needle: str
) -> None:
    path = corpus_dir / "bad" / name
    with pytest.raises(error, match=needle) as exc:
        HWPXReader().load_data(path)
    assert type(exc.value) is error and name in str(exc.value)


def test_hwp5_bytes_named_hwpx_are_read_by_content(corpus_dir: Path) -> None:
    from llama_index.readers.hwpx import HWPReader

    path = corpus_dir / "bad" / "hwp5_binary_named_hwpx.hwpx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = HWPXReader().load_data(path)
    lines = [str(w.message) for w in caught if issubclass(w.category, HWPXReadWarning)]
    assert len(lines) == 1 and "HWP 5" in lines[0] and str(path) in lines[0]
    # the same document as the HWP 5 reader reads it under its own name
    twin = HWPReader().load_bytes(path.read_bytes(), file_name=str(path))
    assert docs[0].text == twin[0].text and len(docs[0].text) > 100


def test_backslash_entry_names_read_fine(corpus_dir: Path) -> None:
    path = corpus_dir / "bad" / "backslash_entry_names.hwpx"
    docs = HWPXReader().load_data(path)
    tables = HWPXReader().load_tables(path)
    assert len(tables) == 19 and sum(len(t.cells) for t in tables) == 68
    assert sum(len(c) for c in _oracle_tables(path)) == 68
    assert len(docs[0].text) > 1000


def test_bad_folder_batch_keeps_going(corpus_dir: Path) -> None:
    reader = HWPXReader()
    with pytest.warns(UserWarning):
        docs = reader.load_data(corpus_dir / "bad")
    assert [d.metadata["file_name"] for d in docs] == [
        "backslash_entry_names.hwpx",
        "hwp5_binary_named_hwpx.hwpx",  # HWP 5 bytes: read by content, with a warning
    ]
    assert sorted(Path(f.file).name for f in reader.failures) == [
        "encrypted_password_12345.hwpx",
        "truncated_zip_derived.hwpx",
    ]


def test_known_content(corpus_dir: Path) -> None:
    reader = HWPXReader()
    notes = reader.load_data(corpus_dir / "hwpjs_footnote_endnote.hwpx")[0].text
    assert notes.split("\n\n")[:3] == ["각주참조[^1][^2]", "[^1]: 각주입니다.", "[^2]: 각주 두 번째입니다."]
    nested = reader.load_tables(corpus_dir / "forge_nested_small.hwpx")
    assert [(t.depth, t.n_rows, t.n_cols) for t in nested] == [(0, 2, 2), (1, 2, 1)]
    assert nested[1].parent is not None and nested[1].parent.cell.text == "작은표"
    assert [c.text for c in nested[1].cells] == ["1", "2"]
    outline = reader.load_data(corpus_dir / "hwpjs_outline.hwpx")[0].text
    assert outline.startswith("# 개요 1\n\n## 개요2\n\n### 개요3")
    captions = reader.load_tables(corpus_dir / "hwpjs_table_caption.hwpx")
    assert captions[0].caption == "표 1 위 캡션"


@pytest.mark.parametrize("path", GOOD, ids=[p.name for p in GOOD])
def test_outline_fast_path_agrees_with_xml_parse(path: Path) -> None:
    from llama_index.readers.hwpx._package import _outline_from_tokens

    data = zipfile.ZipFile(path).read("Contents/header.xml")
    expected: dict[str, int] = {}
    for para in etree.fromstring(data).iter("{*}paraPr"):
        for heading in para.iter("{*}heading"):  # first heading: switch/case before default
            if heading.get("type") == "OUTLINE":
                expected[para.get("id")] = int(heading.get("level")) + 1
            break
    assert _outline_from_tokens(data) == expected
