"""HWPXReader on packages built in code with HWPXBuilder."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pytest
from llama_index.readers.hwpx import (
    STRUCTURE_KEY,
    HWPXCell,
    HWPXReader,
    HWPXTable,
)
from llama_index.readers.hwpx.writer import HWPXBuilder, TableSpec
from lxml import etree

Write = Callable[..., Path]
HP = "{http://www.hancom.co.kr/hwpml/2011/paragraph}"


def test_package_layout_is_hangul_style() -> None:
    b = HWPXBuilder(title="t")
    b.add_section().paragraph("본문")
    zf = zipfile.ZipFile(BytesIO(b.to_bytes()))
    first = zf.infolist()[0]
    assert first.filename == "mimetype"
    assert first.compress_type == zipfile.ZIP_STORED
    assert zf.read("mimetype") == b"application/hwp+zip"
    names = set(zf.namelist())
    for part in (
        "version.xml",
        "META-INF/container.xml",
        "META-INF/manifest.xml",
        "Contents/content.hpf",
        "Contents/header.xml",
        "Contents/section0.xml",
    ):
        assert part in names
        if part.endswith(".xml"):
            etree.fromstring(zf.read(part))  # well-formed


def test_body_text_runs_tabs_linebreaks_and_special_spaces(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    b.add_section().paragraph("가\t나\n다\u00a0라")
    doc = reader.load_data(write(b))[0]
    assert doc.text == "가\t나\n다 라"


def test_outline_headings_become_markdown_levels(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    s = b.add_section()
    s.heading("총칙", level=1).paragraph("본문 하나")
    s.heading("적용범위", level=2).paragraph("본문 둘")
    s.heading("설치기준", level=1)
    doc = reader.load_data(write(b))[0]
    assert doc.text == "# 총칙\n\n본문 하나\n\n## 적용범위\n\n본문 둘\n\n# 설치기준"
    assert doc.metadata["title"] == "총칙"


def test_glyph_headings_rank_by_first_appearance(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    s = b.add_section()
    for text in ("Ⅰ. 총칙", "1. 목적", "가. 적용범위", "□ 추진 방향", "○ 주요 내용"):
        s.paragraph(text)
    s.paragraph("1.5 m 이하로 설치하여야 한다.")  # a decimal and a sentence: body text
    s.paragraph("□ 이 문장은 서술문이므로 제목이 아니다.")
    doc = reader.load_data(write(b))[0]
    lines = doc.text.split("\n\n")
    assert lines[:5] == ["# Ⅰ. 총칙", "## 1. 목적", "### 가. 적용범위", "#### □ 추진 방향",
                         "##### ○ 주요 내용"]
    assert lines[5:] == ["1.5 m 이하로 설치하여야 한다.", "□ 이 문장은 서술문이므로 제목이 아니다."]


def test_glyph_headings_can_be_switched_off(write: Write) -> None:
    b = HWPXBuilder()
    b.add_section().paragraph("1. 목적")
    doc = HWPXReader(glyph_headings=False).load_data(write(b))[0]
    assert doc.text == "1. 목적"


def test_boxed_title_is_a_heading_and_still_a_table(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    s = b.add_section()
    s.boxed_title("소방시설 설치기준")
    s.paragraph("1. 목적")
    s.paragraph("본문")
    path = write(b)
    doc = reader.load_data(path)[0]
    assert doc.text.split("\n\n") == ["# 소방시설 설치기준", "## 1. 목적", "본문"]
    assert doc.metadata["title"] == "소방시설 설치기준"
    tables = reader.load_tables(path)
    assert [(t.n_rows, t.n_cols, t.cells[0].text) for t in tables] == [(1, 1, "소방시설 설치기준")]
    assert doc.metadata["table_count"] == 1


def test_merged_cells_are_placed_by_address_and_rendered_as_html(
    reader: HWPXReader, write: Write
) -> None:
    rows = [["구분", "기준", ""], ["옥내", "2.5 m", "비고"], ["", "3 m", "x"]]
    b = HWPXBuilder()
    b.add_section().table(rows, spans={(0, 1): (1, 2), (1, 0): (2, 1)}, cell_order="reverse")
    path = write(b)
    (t,) = reader.load_tables(path)
    assert (t.n_rows, t.n_cols) == (3, 3)
    got = sorted((c.row, c.col, c.row_span, c.col_span, c.text) for c in t.cells)
    assert got == [
        (0, 0, 1, 1, "구분"),
        (0, 1, 1, 2, "기준"),
        (1, 0, 2, 1, "옥내"),
        (1, 1, 1, 1, "2.5 m"),
        (1, 2, 1, 1, "비고"),
        (2, 1, 1, 1, "3 m"),
        (2, 2, 1, 1, "x"),
    ]
    assert t.to_grid() == [["구분", "기준", "기준"], ["옥내", "2.5 m", "비고"], ["옥내", "3 m", "x"]]
    html = t.to_markdown()
    assert html.startswith("<table>") and '<td colspan="2">기준</td>' in html
    assert '<td rowspan="2">옥내</td>' in html
    assert html in reader.load_data(path)[0].text


def test_plain_table_renders_as_markdown_with_escapes(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    b.add_section().table([["a|b", "c"], ["d\ne", ""]], caption="표 1 기준")
    path = write(b)
    (t,) = reader.load_tables(path)
    assert t.caption == "표 1 기준"
    assert t.cells[2].text == "d\ne"
    assert t.to_markdown() == "| a\\|b | c |\n|---|---|\n| d<br>e |  |"
    assert reader.load_data(path)[0].text == "표 1 기준\n\n" + t.to_markdown()


def test_nested_tables_any_depth_with_parent_links(reader: HWPXReader, write: Write) -> None:
    deep = TableSpec([["깊은 표"]])
    mid = TableSpec([["중간1", "중간2"]], nested={(0, 1): deep})
    b = HWPXBuilder()
    s = b.add_section()
    s.table([["바깥", "칸"], ["아래", "끝"]], nested={(0, 1): mid, (1, 1): [["둘째"]]})
    s.table([["다음 표", "x"]])
    tables = reader.load_tables(write(b))
    # pre-order: outer, mid (in cell 0,1), deep (in mid's 0,1), second nested (in 1,1), next
    assert [t.depth for t in tables] == [0, 1, 2, 1, 0]
    assert [t.index for t in tables] == [0, 1, 2, 3, 4]
    assert tables[0].parent is None and tables[4].parent is None
    p1, p2, p3 = tables[1].parent, tables[2].parent, tables[3].parent
    assert p1 is not None and (p1.table_index, p1.cell.row, p1.cell.col) == (0, 0, 1)
    assert p2 is not None and (p2.table_index, p2.cell.row, p2.cell.col) == (1, 0, 1)
    assert p3 is not None and (p3.table_index, p3.cell.row, p3.cell.col) == (0, 1, 1)
    # a nested table's text is not in its parent cell
    assert tables[0].cells[1].text == "칸"
    assert tables[1].cells[1].text == "중간2"
    assert tables[2].cells[0].text == "깊은 표"


def test_table_nesting_depth_is_bounded(write: Write) -> None:
    from llama_index.readers.hwpx import HWPXFormatError

    spec = TableSpec([["바닥"]])
    for _ in range(5):
        spec = TableSpec([["층"]], nested={(0, 0): spec})
    b = HWPXBuilder()
    b.add_section().table(spec.rows, nested=spec.nested)
    path = write(b)
    assert [t.depth for t in HWPXReader().load_tables(path)] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(HWPXFormatError, match="max_table_depth=3") as exc:
        HWPXReader(max_table_depth=3).load_tables(path)
    assert str(path) in str(exc.value)


def test_cell_paragraphs_are_not_emitted_as_body(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    b.add_section().paragraph("앞 문단").table([["셀 문장 하나", "둘"]]).paragraph("뒤 문단")
    doc = reader.load_data(write(b))[0]
    assert doc.text.count("셀 문장 하나") == 1
    assert doc.text.split("\n\n") == ["앞 문단", "| 셀 문장 하나 | 둘 |\n|---|---|", "뒤 문단"]


def test_footnotes_and_endnotes_follow_their_paragraph(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    s = b.add_section()
    s.paragraph("배관은 2.5 m 이하로 한다", footnotes=["KS 기준 준용"], endnotes=["부록 참조"])
    s.paragraph("다음 문단")
    doc = reader.load_data(write(b))[0]
    assert doc.text.split("\n\n") == [
        "배관은 2.5 m 이하로 한다[^1][^e1]",
        "[^1]: KS 기준 준용",
        "[^e1]: 부록 참조",
        "다음 문단",
    ]


def test_text_boxes_and_captions_are_kept(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    s = b.add_section()
    s.text_box(["상자 첫 줄", "상자 둘째 줄"], anchor_text="기준 안내")
    s.table([["a"], ["b"]], caption="표 2 상자 밖")
    doc = reader.load_data(write(b))[0]
    assert doc.text.split("\n\n")[:3] == ["기준 안내", "상자 첫 줄", "상자 둘째 줄"]
    assert "표 2 상자 밖" in doc.text


def test_sections_follow_the_spine_not_the_file_number(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    for text in ("영", "일", "이"):
        b.add_section().paragraph(text)
    path = write(b, spine_order=[2, 0, 1])
    assert reader.load_data(path)[0].text == "이\n\n영\n\n일"
    docs = HWPXReader(split_sections=True).load_data(path)
    assert [d.text for d in docs] == ["이", "영", "일"]
    assert [d.metadata["section"] for d in docs] == [0, 1, 2]
    assert len({d.id_ for d in docs}) == 3


def test_split_sections_metadata(write: Write) -> None:
    b = HWPXBuilder()
    s0 = b.add_section()
    s0.heading("제1장 총칙", 1).paragraph("본문").table([["a", "b"]])
    s1 = b.add_section()
    s1.paragraph("이어지는 본문").table([["c"], ["d"]]).table([["e", "f"]])
    path = write(b, name="규정.hwpx")
    docs = HWPXReader(split_sections=True).load_data(path, extra_info={"source": "test"})
    assert [d.metadata["table_count"] for d in docs] == [1, 2]
    assert docs[1].metadata["heading_path"] == "제1장 총칙"
    assert docs[0].metadata["heading_path"] == ""
    for d in docs:
        assert d.metadata["file_name"] == "규정.hwpx"
        assert d.metadata["file_path"] == str(path)
        assert d.metadata["title"] == "제1장 총칙"
        assert d.metadata["source"] == "test"


def test_structure_is_hidden_from_embedding_and_llm(reader: HWPXReader, write: Write) -> None:
    from llama_index.core.schema import MetadataMode

    b = HWPXBuilder()
    b.add_section().paragraph("본문").table([["셀"]])
    doc = reader.load_data(write(b))[0]
    assert STRUCTURE_KEY in doc.metadata
    struct = json.loads(doc.metadata[STRUCTURE_KEY])
    assert struct["version"] == 1
    assert [blk["type"] for blk in struct["blocks"]] == ["paragraph", "table"]
    assert struct["blocks"][1]["table"]["cells"] == [[0, 0, 1, 1, "셀"]]
    for mode in (MetadataMode.EMBED, MetadataMode.LLM):
        rendered = doc.get_content(metadata_mode=mode)
        assert STRUCTURE_KEY not in rendered and '"blocks"' not in rendered


def test_missing_manifest_and_backslash_names_read_the_same(
    reader: HWPXReader, write: Write
) -> None:
    b = HWPXBuilder()
    b.add_section().paragraph("본문").table([["a", "b"]], spans=None)
    normal = reader.load_data(write(b, name="a.hwpx"))[0].text
    old = reader.load_data(write(b, name="b.hwpx", include_manifest=False))[0].text
    slash = reader.load_data(write(b, name="c.hwpx", backslash_names=True))[0].text
    assert normal == old == slash == "본문\n\n| a | b |\n|---|---|"


def test_load_bytes_matches_load_data(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    b.add_section().paragraph("1. 목적").paragraph("본문")
    assert reader.load_bytes(b.to_bytes(), "x.hwpx")[0].text == reader.load_data(write(b))[0].text


def test_lazy_load_is_a_generator(reader: HWPXReader, write: Write) -> None:
    b = HWPXBuilder()
    b.add_section().paragraph("본문")
    gen = reader.lazy_load_data(write(b))
    assert iter(gen) is gen
    assert [d.text for d in gen] == ["본문"]


def test_to_grid_expands_merged_cells() -> None:
    t = HWPXTable(
        2, 3, [HWPXCell(0, 0, 2, 1, "A"), HWPXCell(0, 1, 1, 2, "B"), HWPXCell(1, 1, 1, 1, "c"),
               HWPXCell(1, 2, 1, 1, "d")]
    )
    assert t.to_grid() == [["A", "B", "B"], ["A", "c", "d"]]


def test_fsspec_filesystem_is_used(reader: HWPXReader, tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    b = HWPXBuilder()
    b.add_section().paragraph("메모리 파일")
    fs = fsspec.filesystem("memory")
    with fs.open("/docs/m.hwpx", "wb") as fh:
        fh.write(b.to_bytes())
    docs = reader.load_data("/docs/m.hwpx", fs=fs)
    assert [d.text for d in docs] == ["메모리 파일"]
    assert [d.text for d in reader.load_data("/docs", fs=fs)] == ["메모리 파일"]


def test_builder_output_is_accepted_by_python_hwpx(tmp_path: Path) -> None:
    """An independent HWPX library validates and opens what HWPXBuilder writes."""
    hwpx = pytest.importorskip("hwpx")
    from hwpx.tools.exporter import export_text

    b = HWPXBuilder(title="검증")
    s = b.add_section()
    s.heading("총칙", level=1).paragraph("본문 문장", footnotes=["각주 내용"])
    s.table([["구분", "기준"], ["옥내", "2.5 m"]], spans={(0, 0): (1, 2)}, caption="표 1",
            nested={(1, 1): [["안쪽"]]})
    s.text_box(["상자 글"])
    b.add_section().paragraph("둘째 구역")
    path = tmp_path / "built.hwpx"
    b.save(path)
    report = hwpx.validate_package(str(path))
    assert not [i for i in report.issues if i.level == "error"]
    safety = hwpx.validate_editor_open_safety(str(path))
    assert safety.reopen_ok and not safety.blocking_package_errors
    assert not safety.validate_document.issues
    text = export_text(hwpx.HwpxDocument.open(str(path)))
    for needle in ("총칙", "본문 문장", "구분", "2.5 m", "안쪽", "상자 글", "둘째 구역"):
        assert needle in text
    (outer, inner) = HWPXReader().load_tables(path)
    assert [(c.row, c.col, c.row_span, c.col_span) for c in outer.cells] == [
        (0, 0, 1, 2), (1, 0, 1, 1), (1, 1, 1, 1)]
    assert inner.parent is not None and inner.parent.cell.text == "2.5 m"
