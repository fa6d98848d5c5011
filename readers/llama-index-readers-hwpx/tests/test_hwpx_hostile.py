"""Hostile HWPX/HML input (issue 13, reader defects): each attack is built in code, shown to
reach the reader's model when its limit is lifted, then refused by default with a typed
:class:`HWPXLimitError` that names the file, the limit, the value and how to raise it."""

from __future__ import annotations

import io
import os
import random
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import pytest
from llama_index.readers.hwpx import (
    HMLFormatError,
    HMLLimitError,
    HMLReader,
    HWPXCell,
    HWPXFormatError,
    HWPXLimitError,
    HWPXNodeParser,
    HWPXReader,
    HWPXReadWarning,
)
from llama_index.readers.hwpx._model import render_table
from llama_index.readers.hwpx._package import RATIO_FLOOR_BYTES
from llama_index.readers.hwpx._parse import table_text_bound
from llama_index.readers.hwpx.writer import HWPXBuilder

SEC = (
    '<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
    'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph">{}</hs:sec>'
)


def _package(sections: list[bytes], level: int = 9) -> bytes:
    """``mimetype`` + ``Contents/section<i>.xml`` (no spine: ordered by number)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
        zf.writestr("mimetype", "application/hwp+zip", compress_type=zipfile.ZIP_STORED)
        for i, data in enumerate(sections):
            zf.writestr(f"Contents/section{i}.xml", data)
    return buf.getvalue()


def _para(text: str) -> str:
    return f"<hp:p><hp:run><hp:t>{text}</hp:t></hp:run></hp:p>"


def _cell(row: int, col: int, text: str, rs: int = 1, cs: int = 1) -> str:
    return (
        f"<hp:tc><hp:subList>{_para(text)}</hp:subList>"
        f'<hp:cellAddr rowAddr="{row}" colAddr="{col}"/>'
        f'<hp:cellSpan rowSpan="{rs}" colSpan="{cs}"/></hp:tc>'
    )


def _table(rows: int, cols: int, cells: str = "") -> str:
    body = f"<hp:tr>{cells}</hp:tr>" if cells else ""
    return f'<hp:p><hp:run><hp:tbl rowCnt="{rows}" colCnt="{cols}">{body}</hp:tbl></hp:run></hp:p>'


def _doc(*body: str) -> bytes:
    return _package([SEC.format(_para("본문") + "".join(body)).encode()])


def empty_table_rowcnt_1e9() -> bytes:
    """Issue 13 #1: an empty table declaring 10^9 rows (the node parser did
    ``list(range(n_rows))``)."""
    return _doc(_table(1_000_000_000, 1))


def wide_tables(n_tables: int, cols: int) -> bytes:
    """Issue 13 #3: ``rowCnt=1 colCnt=cols`` with two cells, ``n_tables`` times."""
    t = _table(1, cols, _cell(0, 0, "a") + _cell(0, cols - 1, "b"))
    return _doc(*[t] * n_tables)


def _assert_limit(exc: pytest.ExceptionInfo[HWPXLimitError], file: str, limit: str) -> None:
    err = exc.value
    assert err.limit == limit and err.file == file
    assert err.value > err.maximum
    msg = str(err)
    assert msg.startswith(file) and f"{limit}=" in msg and f"{err.reader_name}({limit}=" in msg


# ----------------------------------------------------------------------------- #1 grid
def test_empty_table_declaring_1e9_rows_is_refused_before_allocation() -> None:
    data = empty_table_rowcnt_1e9()
    assert len(data) < 4096  # a 4 KB file
    # the attack: with the limit lifted, a 10^9-row table reaches the model (and any
    # consumer that allocates per row)
    lifted = HWPXReader(max_table_cells=10**10).parse_bytes(data, "rows.hwpx")
    assert lifted.tables[0].n_rows == 1_000_000_000 and lifted.tables[0].cells == []
    with pytest.raises(HWPXLimitError) as exc:
        HWPXReader().load_bytes(data, "rows.hwpx")
    _assert_limit(exc, "rows.hwpx", "max_table_cells")
    assert exc.value.value == 1_000_000_000 and exc.value.maximum == 100_000
    assert isinstance(exc.value, HWPXFormatError)  # old handlers still catch it


@pytest.mark.parametrize(("rows", "cols"), [(1_000_000_000, 0), (0, 1_000_000_000), (400, 400)])
def test_declared_grid_counts_each_side_as_at_least_one(rows: int, cols: int) -> None:
    with pytest.raises(HWPXLimitError, match="max_table_cells"):
        HWPXReader().load_bytes(_doc(_table(rows, cols)), "g.hwpx")


def test_every_reader_table_is_bounded_so_the_node_parser_is_safe() -> None:
    """The invariant the node parser relies on: n_rows * n_cols <= max_table_cells."""
    reader = HWPXReader(max_table_cells=50)
    docs = reader.load_bytes(_doc(_table(5, 10, _cell(4, 9, "끝"))), "ok.hwpx")
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    assert any("끝" in n.get_content() for n in nodes)
    with pytest.raises(HWPXLimitError, match="grid 6x10"):
        reader.load_bytes(_doc(_table(5, 10, _cell(5, 9, "끝"))), "grow.hwpx")


def test_cell_count_is_bounded_even_when_cells_pile_on_one_position() -> None:
    cells = "".join(_cell(0, 0, f"c{i}") for i in range(11))
    data = _doc(_table(1, 1, cells))
    with pytest.warns(HWPXReadWarning, match="overlaps"):
        assert len(HWPXReader().parse_bytes(data, "pile.hwpx").tables[0].cells) == 11
    with pytest.raises(HWPXLimitError, match="cell count 11 exceeds max_table_cells=10"):
        HWPXReader(max_table_cells=10).parse_bytes(data, "pile.hwpx")


def test_a_bad_file_never_ends_a_batch(tmp_path: Path) -> None:
    good = HWPXBuilder()
    good.add_section().paragraph("좋은 문서")
    (tmp_path / "a_good.hwpx").write_bytes(good.to_bytes())
    (tmp_path / "b_rows.hwpx").write_bytes(empty_table_rowcnt_1e9())
    (tmp_path / "c_wide.hwpx").write_bytes(wide_tables(20, 1_000_000))
    (tmp_path / "d_dir.hwpx").mkdir()
    reader = HWPXReader()
    with pytest.warns(HWPXReadWarning):
        docs = reader.load_data(tmp_path)
    assert [d.metadata["file_name"] for d in docs] == ["a_good.hwpx"]
    got = {Path(f.file).name: f.error_type for f in reader.failures}
    assert got == {
        "b_rows.hwpx": "HWPXLimitError",
        "c_wide.hwpx": "HWPXLimitError",
        "d_dir.hwpx": "HWPXFormatError",
    }


# ----------------------------------------------------------------------------- #2 ratios
def test_part_under_1_mib_with_a_bomb_ratio_is_refused() -> None:
    pad = "<hp:p/>" * 140_000  # ~960 KiB of markup, no text
    data = _package([SEC.format(_para("x") + pad).encode()])
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("Contents/section0.xml")
    assert RATIO_FLOOR_BYTES < info.file_size < 1 << 20  # the size the old check skipped
    assert info.file_size / info.compress_size > 200
    assert HWPXReader(max_compression_ratio=1e6).load_bytes(data, "r.hwpx")  # lifted: reads
    with pytest.raises(HWPXLimitError, match="part compression ratio") as exc:
        HWPXReader().load_bytes(data, "r.hwpx")
    _assert_limit(exc, "r.hwpx", "max_compression_ratio")
    assert exc.value.part == "Contents/section0.xml"


def test_many_small_parts_are_bounded_by_the_package_ratio() -> None:
    """Parts under the per-part floor, each compressing > 200x: only the package total (all
    parts read vs the file's size) can stop them adding up."""
    part = SEC.format(_para("x") + " " * 63_000).encode()  # ~63 KiB each
    assert len(part) < RATIO_FLOOR_BYTES
    data = _package([part] * 400)
    total = 400 * len(part)
    assert total / len(data) > 200  # ~25 MB of XML from a ~100 KB file
    with pytest.raises(HWPXLimitError, match="package compression ratio") as exc:
        HWPXReader().load_bytes(data, "many.hwpx")
    _assert_limit(exc, "many.hwpx", "max_compression_ratio")
    # refused after reading at most max_compression_ratio x the file size (+ one part)
    assert exc.value.value * len(data) <= 200 * len(data) + 2 * len(part)


def test_tiny_parts_compressing_well_are_not_false_positives() -> None:
    part = SEC.format(_para("짧은 본문") + " " * 60_000).encode()  # ~60 KiB
    data = _package([part])
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("Contents/section0.xml")
    assert info.file_size / info.compress_size > 200 and info.file_size < RATIO_FLOOR_BYTES
    assert "짧은 본문" in HWPXReader().load_bytes(data, "tiny.hwpx")[0].text


# ----------------------------------------------------------------------------- #3 output
def test_wide_row_is_refused_instead_of_rendering_megabytes() -> None:
    data = wide_tables(1, 1_000_000)
    lifted = HWPXReader(max_table_cells=10**7, max_text_chars=10**9)
    assert len(lifted.load_bytes(data, "wide.hwpx")[0].text) > 3_000_000  # the attack
    with pytest.raises(HWPXLimitError) as exc:
        HWPXReader().load_bytes(data, "wide.hwpx")
    _assert_limit(exc, "wide.hwpx", "max_table_cells")


def test_many_tables_under_the_cell_limit_hit_max_text_chars_before_rendering() -> None:
    data = wide_tables(20, 99_999)  # each table is within max_table_cells
    assert len(data) < 8192
    tracemalloc.start()
    try:
        with pytest.raises(HWPXLimitError) as exc:
            HWPXReader().load_bytes(data, "wide20.hwpx")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _assert_limit(exc, "wide20.hwpx", "max_text_chars")
    assert exc.value.maximum == 5_000_000
    assert peak < 4_000_000  # the 6 MB of markdown was never built


def _random_cells(rng: random.Random) -> tuple[list[HWPXCell], int, int]:
    n_rows, n_cols = rng.randint(1, 6), rng.randint(1, 6)
    alphabet = "가나 a|\\&<>\"'\n"
    cells = []
    for r in range(n_rows):
        for c in range(n_cols):
            if rng.random() < 0.7:
                text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
                span = (rng.randint(1, 2), 1) if rng.random() < 0.2 else (1, 1)
                cells.append(HWPXCell(r, c, span[0], span[1], text))
    return cells, n_rows, n_cols


def test_table_text_bound_is_an_upper_bound_of_the_rendering() -> None:
    rng = random.Random(13)
    for _ in range(2000):
        cells, n_rows, n_cols = _random_cells(rng)
        assert table_text_bound(n_rows, n_cols, cells) >= len(render_table(cells, n_rows, n_cols))


@pytest.mark.corpus
def test_text_charge_bounds_every_real_file_and_is_not_loose(corpus_dir: Path) -> None:
    """Every shared-corpus file reads with the defaults; reading with ``max_text_chars`` just
    under its real text length fails (the charge is an upper bound) and 3x its length passes."""
    for path in sorted(corpus_dir.glob("*.hwpx")):
        n = len(HWPXReader().load_data(path)[0].text)
        with pytest.raises(HWPXLimitError, match="max_text_chars"):
            HWPXReader(max_text_chars=max(n - 1, 1)).load_data(path)
        assert HWPXReader(max_text_chars=3 * n + 1000).load_data(path)
        tables = HWPXReader().load_tables(path)
        assert all(t.n_rows * t.n_cols <= 10_000 for t in tables)  # 10x under the default


def test_node_parser_output_stays_linear_with_a_huge_header_row() -> None:
    """A 1-row header of 40k characters over 300 short rows: repeating it in every piece
    would write 300 copies; over half a chunk it is not repeated."""
    b = HWPXBuilder()
    b.add_section().table([["가 " * 20_000]] + [[f"행{i}"] for i in range(300)])
    docs = HWPXReader().load_bytes(b.to_bytes(), "hdr.hwpx")
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)
    total = sum(len(n.get_content()) for n in nodes)
    assert total < 2 * len(docs[0].text)
    assert sum("행299" in n.get_content() for n in nodes) == 1


# ----------------------------------------------------------------------------- minor
def test_overlapping_cells_keep_both_texts_and_warn() -> None:
    data = _doc(_table(1, 2, _cell(0, 0, "첫째") + _cell(0, 0, "둘째") + _cell(0, 1, "셋")))
    with pytest.warns(HWPXReadWarning, match=r"o\.hwpx: table 0: cell at \(0, 0\).*overlaps"):
        parsed = HWPXReader().parse_bytes(data, "o.hwpx")
    assert parsed.warnings and "both texts are kept" in parsed.warnings[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HWPXReadWarning)
        text = HWPXReader().load_bytes(data, "o.hwpx")[0].text
    assert "첫째" in text and "둘째" in text and "셋" in text
    assert parsed.tables[0].to_grid() == [["첫째\n둘째", "셋"]]


def test_cell_inside_another_cells_span_keeps_its_text() -> None:
    data = _doc(_table(2, 2, _cell(0, 0, "넓은", cs=2) + _cell(0, 1, "숨은") + _cell(1, 0, "아래")))
    with pytest.warns(HWPXReadWarning, match=r"overlaps another cell at \(0, 1\)"):
        parsed = HWPXReader().parse_bytes(data, "span.hwpx")
    assert parsed.tables[0].to_grid()[0] == ["넓은", "넓은\n숨은"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HWPXReadWarning)
        assert "숨은" in HWPXReader().load_bytes(data, "span.hwpx")[0].text


def test_directory_named_like_a_file_is_a_recorded_failure(tmp_path: Path) -> None:
    (tmp_path / "x.hwpx").mkdir()
    with pytest.raises(HWPXFormatError, match="is a directory"):
        HWPXReader().load_data(tmp_path / "x.hwpx")
    reader = HWPXReader()
    with pytest.warns(HWPXReadWarning, match="x.hwpx"):
        assert reader.load_data(tmp_path) == []
    assert [(Path(f.file).name, f.error_type) for f in reader.failures] == [
        ("x.hwpx", "HWPXFormatError")
    ]
    if hasattr(os, "mkfifo"):  # a FIFO is refused before it is opened (reading would block)
        os.mkfifo(tmp_path / "pipe.hwpx")
        with pytest.raises(HWPXFormatError, match="not a regular file"):
            HWPXReader().load_data(tmp_path / "pipe.hwpx")
        os.unlink(tmp_path / "pipe.hwpx")
    (tmp_path / "y.hml").mkdir()
    hml = HMLReader()
    with pytest.warns(HWPXReadWarning):
        assert hml.load_data(tmp_path) == []
    assert [Path(f.file).name for f in hml.failures] == ["y.hml"]


# ----------------------------------------------------------------------------- HML
def _hml_table(rows: int, cols: int, cells: str = "") -> bytes:
    return (
        f'<HWPML><BODY><SECTION><P><TEXT><TABLE RowCount="{rows}" ColCount="{cols}">'
        f"{'<ROW>' + cells + '</ROW>' if cells else ''}</TABLE></TEXT></P></SECTION>"
        "</BODY></HWPML>"
    ).encode()


def _hml_cell(row: int, col: int, text: str) -> str:
    return (
        f'<CELL RowAddr="{row}" ColAddr="{col}"><PARALIST><P><TEXT><CHAR>{text}</CHAR>'
        "</TEXT></P></PARALIST></CELL>"
    )


def test_hml_reader_shares_the_limits() -> None:
    with pytest.raises(HMLLimitError) as exc:
        HMLReader().parse_bytes(_hml_table(1_000_000_000, 1), "rows.hml")
    assert isinstance(exc.value, HMLFormatError) and isinstance(exc.value, HWPXLimitError)
    _assert_limit(exc, "rows.hml", "max_table_cells")  # type: ignore[arg-type]
    assert exc.value.part == "SECTION[0]"
    wide = _hml_table(1, 99_999, _hml_cell(0, 0, "a") + _hml_cell(0, 99_998, "b"))
    assert HMLReader().parse_bytes(wide, "w.hml").tables[0].n_cols == 99_999
    with pytest.raises(HMLLimitError, match="max_text_chars=100000"):
        HMLReader(max_text_chars=100_000).parse_bytes(wide, "w.hml")
    with pytest.raises(HMLLimitError, match="max_file_bytes"):
        HMLReader(max_file_bytes=10).parse_bytes(wide, "w.hml")
    piled = _hml_table(1, 1, "".join(_hml_cell(0, 0, f"c{i}") for i in range(3)))
    with pytest.warns(HWPXReadWarning, match="overlaps"):
        assert HMLReader().parse_bytes(piled, "p.hml").tables[0].to_grid() == [["c0\nc1\nc2"]]
