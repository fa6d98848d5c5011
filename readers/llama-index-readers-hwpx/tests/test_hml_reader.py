"""HMLReader: corpus files read, cells match an independent scan and the HWPX twins, fixtures
written in both formats give identical tables/Documents/nodes, hostile HML gives typed errors."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from llama_index.core import SimpleDirectoryReader
from llama_index.readers.hwpx import (
    HMLFormatError,
    HMLReader,
    HWPXError,
    HWPXFormatError,
    HWPXNodeParser,
    HWPXReader,
    HWPXTable,
)
from llama_index.readers.hwpx.hml_writer import HMLBuilder
from llama_index.readers.hwpx.writer import HWPXBuilder, TableSpec

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
HML_DIR = SHARED / "corpus" / "hml"
HWPX_DIR = SHARED / "corpus" / "hwpx"


def _hml_files() -> list[Path]:
    return sorted(HML_DIR.glob("*.hml")) if HML_DIR.is_dir() else []


def _norm(text: str) -> str:
    return " ".join(text.split())


def _cells(t: HWPXTable) -> list[tuple[int, int, int, int, str]]:
    return sorted((c.row, c.col, c.row_span, c.col_span, _norm(c.text)) for c in t.cells)


# ----------------------------------------------------------------------------- corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", _hml_files(), ids=lambda p: p.name)
def test_every_corpus_hml_reads(path: Path) -> None:
    reader = HMLReader()
    docs = reader.load_data(path)
    tables = reader.load_tables(path)
    assert len(docs) == 1 and docs[0].text.strip()
    assert docs[0].metadata["table_count"] == len(tables)
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    assert nodes and all(n.text.strip() for n in nodes)


def _independent_scan(path: Path) -> list[list[tuple[int, int, int, int]]]:
    """Per TABLE in document pre-order, its direct CELLs' (RowAddr, ColAddr, RowSpan, ColSpan):
    the stdlib parser, independent of lxml and the walker."""
    root = ET.parse(path).getroot()
    out: list[list[tuple[int, int, int, int]]] = []
    for tbl in root.iter("TABLE"):
        cells = [
            (
                int(c.get("RowAddr", "0")),
                int(c.get("ColAddr", "0")),
                max(int(c.get("RowSpan", "1")), 1),
                max(int(c.get("ColSpan", "1")), 1),
            )
            for row in tbl.findall("ROW")
            for c in row.findall("CELL")
        ]
        out.append(sorted(cells))
    return out


@pytest.mark.corpus
@pytest.mark.parametrize("path", _hml_files(), ids=lambda p: p.name)
def test_corpus_cells_match_independent_scan(path: Path) -> None:
    tables = HMLReader().load_tables(path)
    expected = _independent_scan(path)
    got = [sorted((c.row, c.col, c.row_span, c.col_span) for c in t.cells) for t in tables]
    assert got == expected
    for t in tables:  # each grid is tiled exactly once (the corpus README's measured fact)
        seen = [
            (r, k)
            for c in t.cells
            for r in range(c.row, c.row + c.row_span)
            for k in range(c.col, c.col + c.col_span)
        ]
        assert len(seen) == len(set(seen)) == t.n_rows * t.n_cols


def _twins() -> list[Path]:
    return [p for p in _hml_files() if (HWPX_DIR / f"{p.stem}.hwpx").is_file()]


@pytest.mark.corpus
def test_corpus_has_twins() -> None:
    if not HML_DIR.is_dir():
        pytest.skip("../shared/corpus/hml is not present")
    assert _twins(), "expected at least one HML file with an HWPX twin"


@pytest.mark.corpus
@pytest.mark.parametrize("path", _twins(), ids=lambda p: p.name)
def test_twin_tables_equal_hwpx(path: Path) -> None:
    hml = HMLReader().load_tables(path)
    hwpx = HWPXReader().load_tables(HWPX_DIR / f"{path.stem}.hwpx")
    assert len(hml) == len(hwpx)
    for a, b in zip(hml, hwpx, strict=True):
        assert (a.n_rows, a.n_cols, a.depth) == (b.n_rows, b.n_cols, b.depth)
        assert _cells(a) == _cells(b)
    a_docs = HMLReader().load_data(path)
    b_docs = HWPXReader().load_data(HWPX_DIR / f"{path.stem}.hwpx")
    assert _norm(a_docs[0].text) == _norm(b_docs[0].text)


@pytest.mark.corpus
def test_simple_directory_reader_extractor() -> None:
    if not _hml_files():
        pytest.skip("../shared/corpus/hml is not present")
    docs = SimpleDirectoryReader(
        str(HML_DIR), required_exts=[".hml"], file_extractor={".hml": HMLReader()}
    ).load_data()
    assert {d.metadata["file_name"] for d in docs} == {p.name for p in _hml_files()}
    assert all("hwpx_structure" in d.metadata for d in docs)


# ----------------------------------------------------------------------------- fixtures
def _both(build: object) -> tuple[bytes, bytes]:
    """Write the same content with HWPXBuilder and HMLBuilder."""
    hb, mb = HWPXBuilder(title="제목"), HMLBuilder(title="제목")
    for b in (hb, mb):
        build(b)  # type: ignore[operator]
    return hb.to_bytes(), mb.to_bytes()


def _content(b: HWPXBuilder | HMLBuilder) -> None:
    s = b.add_section()
    s.heading("Ⅰ. 총칙", level=1)
    s.paragraph("이 기준은 설치기준을\t정한다.\n둘째 줄", footnotes=["시행일 참조"])
    s.table([["구분", "기준"], ["옥내소화전", "2.5 m 이하"]], caption="표 1 설치기준")
    s.table(
        [["A", "B", "C"], ["d", "e", "f"], ["g", "h", "i"]],
        spans={(0, 0): (1, 2), (1, 2): (2, 1)},
        nested={(1, 1): TableSpec([["x", "y"], ["z", ""]], nested={(0, 0): [["deep"]]})},
        cell_order="reverse",
    )
    s.text_box(["상자 글"], anchor_text="앵커")
    s.boxed_title("붙임 1")
    t = b.add_section()
    t.heading("Ⅱ. 세부", level=2)
    t.paragraph("끝", endnotes=["미주"])


def test_fixture_same_as_hwpx_twin() -> None:
    hwpx, hml = _both(_content)
    a = HMLReader().parse_bytes(hml, "f.hml")
    b = HWPXReader().parse_bytes(hwpx, "f.hwpx")
    assert len(a.tables) == len(b.tables) == 5
    for x, y in zip(a.tables, b.tables, strict=True):
        assert _cells(x) == _cells(y)
        assert (x.n_rows, x.n_cols, x.depth, x.caption, x.index, x.section) == (
            y.n_rows,
            y.n_cols,
            y.depth,
            y.caption,
            y.index,
            y.section,
        )
        px = None if x.parent is None else (x.parent.table_index, x.parent.cell)
        py = None if y.parent is None else (y.parent.table_index, y.parent.cell)
        assert px == py
    assert a.tables[0].caption == "표 1 설치기준"
    assert [t.depth for t in a.tables] == [0, 0, 1, 2, 0]
    assert a.sections == b.sections
    assert a.title == b.title
    ra, rb = HMLReader(split_sections=True), HWPXReader(split_sections=True)
    da, db = ra.load_bytes(hml, "f"), rb.load_bytes(hwpx, "f")
    assert [d.text for d in da] == [d.text for d in db]
    assert "# Ⅰ. 총칙" in da[0].text and "[^1]: 시행일 참조" in da[0].text
    na = HWPXNodeParser().get_nodes_from_documents(da)
    nb = HWPXNodeParser().get_nodes_from_documents(db)
    assert [n.text for n in na] == [n.text for n in nb]
    assert [n.metadata.get("heading_path") for n in na] == [
        n.metadata.get("heading_path") for n in nb
    ]


def test_batch_skips_bad_files(tmp_path: Path) -> None:
    _, good = _both(_content)
    (tmp_path / "good.hml").write_bytes(good)
    (tmp_path / "bad.hml").write_bytes(b"<HWPML><BODY><SECTION><P>")
    (tmp_path / "other.hwpx").write_bytes(b"ignored: not .hml")
    reader = HMLReader()
    with pytest.warns(UserWarning, match="bad.hml"):
        docs = reader.load_data(tmp_path)
    assert [d.metadata["file_name"] for d in docs] == ["good.hml"]
    assert [f.error_type for f in reader.failures] == ["HMLFormatError"]


# ----------------------------------------------------------------------------- hostile input
_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
    b"<HWPML><BODY><SECTION><P><TEXT><CHAR>&lol2;</CHAR></TEXT></P></SECTION></BODY></HWPML>"
)
_XXE = (
    b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
    b"<HWPML><BODY><SECTION><P><TEXT><CHAR>&e;</CHAR></TEXT></P></SECTION></BODY></HWPML>"
)


def _nested_tables(depth: int) -> bytes:
    inner = "<CHAR>x</CHAR>"
    for _ in range(depth):
        inner = (
            '<TABLE RowCount="1" ColCount="1"><ROW><CELL RowAddr="0" ColAddr="0"><PARALIST>'
            f"<P><TEXT>{inner}</TEXT></P></PARALIST></CELL></ROW></TABLE>"
        )
    return f"<HWPML><BODY><SECTION><P><TEXT>{inner}</TEXT></P></SECTION></BODY></HWPML>".encode()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_LAUGHS, "DOCTYPE"),
        (_XXE, "DOCTYPE"),
        (b"", "malformed XML|empty"),
        (b"<HWPML><BODY>", "malformed XML"),
        (b"<html><body/></html>", "not <HWPML>"),
        (b"<HWPML><HEAD/></HWPML>", "no BODY/SECTION"),
        (
            b'<HWPML><BODY><SECTION><P><TEXT><TABLE RowCount="x"/></TEXT></P></SECTION>'
            b"</BODY></HWPML>",
            "rowCnt='x'",
        ),
        (b"<a>" * 5000 + b"</a>" * 5000, "malformed XML"),  # libxml2's depth cap
        (_nested_tables(40), "max_table_depth"),
    ],
)
def test_hostile_hml_typed_errors(data: bytes, match: str) -> None:
    with pytest.raises(HMLFormatError, match=match) as info:
        HMLReader().parse_bytes(data, "evil.hml")
    assert isinstance(info.value, HWPXFormatError)
    assert str(info.value).startswith("evil.hml")


def test_file_size_cap(tmp_path: Path) -> None:
    _, data = _both(_content)
    p = tmp_path / "big.hml"
    p.write_bytes(data)
    with pytest.raises(HWPXFormatError, match="max_file_bytes"):
        HMLReader(max_file_bytes=len(data) - 1).load_tables(p)
    assert HMLReader(max_file_bytes=len(data)).load_tables(p)


def test_grid_cap() -> None:
    data = (
        b'<HWPML><BODY><SECTION><P><TEXT><TABLE RowCount="1" ColCount="1"><ROW>'
        b'<CELL RowAddr="5000" ColAddr="5000"><PARALIST/></CELL></ROW></TABLE></TEXT></P>'
        b"</SECTION></BODY></HWPML>"
    )
    with pytest.raises(HMLFormatError, match="max_table_cells"):
        HMLReader().parse_bytes(data, "grid.hml")


def _mutate(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return data[: rng.randrange(len(data))]
    b = bytearray(data)
    if kind == 1:
        for _ in range(rng.randint(1, 24)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 2:  # XML-significant junk
        junk = b'<>/"=&;x0 -9'
        for _ in range(rng.randint(1, 12)):
            b[rng.randrange(len(b))] = junk[rng.randrange(len(junk))]
        return bytes(b)
    # attribute values -> junk numbers (addresses, spans, counts)
    text = data.decode("utf-8", "replace")
    for attr in ("RowAddr", "ColAddr", "RowSpan", "ColSpan", "RowCount", "ColCount"):
        if rng.random() < 0.5:
            val = rng.choice(["-1", "0", "99999999999", "abc", "", "3"])
            text = text.replace(f'{attr}="0"', f'{attr}="{val}"', rng.randint(1, 3))
    return text.encode("utf-8")


def test_fuzz_hostile_hml_only_typed_errors() -> None:
    seeds = [_both(_content)[1]] + [p.read_bytes() for p in _hml_files()]
    rng = random.Random(20261201)
    outcomes = {"ok": 0, "error": 0}
    for i in range(600):
        data = _mutate(seeds[i % len(seeds)], rng)
        try:
            HMLReader().load_bytes(data, f"m{i}.hml")
            outcomes["ok"] += 1
        except HWPXError as exc:
            assert str(exc).startswith(f"m{i}.hml")
            outcomes["error"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0
