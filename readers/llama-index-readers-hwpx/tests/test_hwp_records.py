"""``read_records(skip_layout=True)`` (a paragraph's layout records left out) gives the
section builder exactly the tree the full record stream gives: on every HWP 5 file of
../shared/corpus/hwp and on hand-built streams where layout records have children, skip
levels or sit beside controls. The oracle is the full stream (``skip_layout=False``)."""

from __future__ import annotations

import struct

import pytest
from llama_index.readers.hwpx import HWPReader
from llama_index.readers.hwpx._hwp5_container import open_hwp
from llama_index.readers.hwpx._hwp5_records import read_records
from llama_index.readers.hwpx._hwp5_section import SectionBuilder
from lxml import etree

from .conftest import SHARED
from .hwp5_fakes import (
    TAG_CTRL_HEADER,
    TAG_PARA_HEADER,
    TAG_PARA_TEXT,
    paragraph,
    record,
    table_paragraph,
)

HWP = SHARED / "corpus" / "hwp"
CHAR_SHAPE, LINE_SEG, RANGE_TAG = 68, 69, 70


def _tree(stream: bytes, skip: bool) -> str:
    limits = HWPReader().limits()
    rec = read_records(stream, "x.hwp", "BodyText/Section0", 5_000_000, skip_layout=skip)
    root = SectionBuilder(rec, "x.hwp", "BodyText/Section0", limits, lambda _: None).build()
    return etree.tostring(root, encoding="unicode")


def _both(stream: bytes) -> str:
    full = _tree(stream, False)
    assert _tree(stream, True) == full
    return full


def _header(nchars: int) -> bytes:
    return struct.pack("<IIHBB", nchars, 0, 0, 0, 0)


def test_layout_records_with_children_and_skipped_levels() -> None:
    text = "본문".encode("utf-16-le") + b"\r\x00"
    table = table_paragraph([["가", "나"]], level=2)
    stream = (
        paragraph("앞")
        # layout records before the text, one holding a table paragraph two levels down
        + record(TAG_PARA_HEADER, 0, _header(len(text) // 2))
        + record(CHAR_SHAPE, 1, b"\x00" * 8)
        + table
        + record(LINE_SEG, 3, b"\x00" * 36)  # a level skipped
        + record(TAG_PARA_TEXT, 1, text)
        + record(RANGE_TAG, 1, b"\x00" * 12)
        + record(TAG_CTRL_HEADER, 2, b"klc%" + b"\x00" * 7)  # under the range tag
        + record(LINE_SEG, 1, b"\x00" * 36)
        + table_paragraph([["다"]], level=0)
        + record(CHAR_SHAPE, 0, b"\x00" * 8)  # at the top level: kept, never a child of a p
        + paragraph("뒤")
    )
    full = _both(stream)
    assert "본문" in full and "가" not in full  # the table under the char shape is no child
    assert full.count("<tbl") == 1


def _cells_of(stream: bytes) -> bytes:
    """The records of ``stream`` from its first cell's LIST_HEADER on (one table)."""
    rec = read_records(stream, "x.hwp", "p", 5_000_000)
    first = list(rec.tags).index(72, list(rec.tags).index(77))
    return stream[rec.starts[first] - 4 :]


def test_a_cell_under_a_line_seg_after_a_table_is_not_the_tables() -> None:
    """A layout record after a table control, holding a cell list: the list belongs to the
    layout record (so to no one), not to the table before it."""
    stream = (
        table_paragraph([["가"]])
        + record(LINE_SEG, 1, b"\x00" * 36)
        + _cells_of(table_paragraph([["숨"]]))
    )
    full = _both(stream)
    assert "가" in full and "숨" not in full


def test_layout_records_of_a_truncated_subtree_at_the_end() -> None:
    text = "끝".encode("utf-16-le")
    _both(
        record(TAG_PARA_HEADER, 0, _header(1))
        + record(TAG_PARA_TEXT, 1, text)
        + record(CHAR_SHAPE, 1, b"")
        + record(LINE_SEG, 2, b"")
    )


def test_a_layout_tag_outside_a_paragraph_is_kept() -> None:
    """Tag 68 in a cell list (its parent a control, not a PARA_HEADER) is kept: the list's
    paragraphs end there, so the paragraph after it is nobody's."""
    cell = table_paragraph([["가"]])
    stream = cell + record(CHAR_SHAPE, 2, b"\x00" * 8) + paragraph("숨", level=2)
    full = _both(stream)
    assert "가" in full and "숨" not in full


@pytest.mark.corpus
def test_corpus_sections_build_the_same_tree() -> None:
    files = sorted(HWP.glob("*.hwp"))
    if not files:
        pytest.skip("../shared/corpus/hwp is not present")
    limits = HWPReader().limits()
    n = 0
    for f in files:
        for _, stream in open_hwp(f.read_bytes(), f.name, limits).sections:
            assert _tree(stream, True) == _tree(stream, False), f.name
            n += 1
    assert n >= len(files)
