"""Hostile HWPX packages built in code (issue 13's reader attacks), shared by
``tests/test_hostile_reader.py`` and ``benchmarks/hostile_batch.py``.

Each is a minimal package (``mimetype`` + section XML) that the reader must refuse with
``HWPXLimitError`` before allocating what the file declares.
"""

from __future__ import annotations

import io
import zipfile

SEC = (
    '<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
    'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph">{}</hs:sec>'
)


def package(sections: list[str]) -> bytes:
    """A zip with ``mimetype`` and one ``Contents/sectionN.xml`` per item of ``sections``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("mimetype", "application/hwp+zip", compress_type=zipfile.ZIP_STORED)
        for i, sec in enumerate(sections):
            zf.writestr(f"Contents/section{i}.xml", SEC.format(sec))
    return buf.getvalue()


def para(text: str) -> str:
    return f"<hp:p><hp:run><hp:t>{text}</hp:t></hp:run></hp:p>"


def cell(row: int, col: int, text: str) -> str:
    return (
        f'<hp:tc><hp:subList>{para(text)}</hp:subList><hp:cellAddr rowAddr="{row}" '
        f'colAddr="{col}"/></hp:tc>'
    )


def table(rows: int, cols: int, cells: str = "") -> str:
    tr = f"<hp:tr>{cells}</hp:tr>" if cells else ""
    return f'<hp:p><hp:run><hp:tbl rowCnt="{rows}" colCnt="{cols}">{tr}</hp:tbl></hp:run></hp:p>'


def wide(n: int, cols: int) -> bytes:
    """``n`` tables of 1 x ``cols`` holding only their first and last cell."""
    return package([para("표") + table(1, cols, cell(0, 0, "a") + cell(0, cols - 1, "b")) * n])


def attack_files() -> dict[str, bytes]:
    """File name -> bytes of every attack the reader refuses with ``HWPXLimitError``."""
    return {
        "rows_1e9.hwpx": package([para("본문") + table(1_000_000_000, 1)]),
        "wide_1x1e6_x20.hwpx": wide(20, 1_000_000),
        "wide_1x99999_x20.hwpx": wide(20, 99_999),  # each under max_table_cells: max_text_chars
        "part_ratio.hwpx": package([para("x") + "<hp:p/>" * 140_000]),
        "package_ratio.hwpx": package([para("x") + " " * 63_000] * 400),
    }
