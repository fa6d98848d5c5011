"""Write a folder of good + hostile HWPX files for timing ``llama-car index`` (issue 13).

    python benchmarks/hostile_batch.py /tmp/batch                  # 3 demo files + hostile
    python benchmarks/hostile_batch.py /tmp/batch --good ../shared/corpus/hwpx
    /usr/bin/time -v llama-car index /tmp/batch --persist /tmp/idx --embed use --no-progress

Hostile files (each must be listed as skipped, none may end the run): an empty table declaring
10^9 rows; 20 tables of ``rowCnt=1 colCnt=10^6`` with two cells (140 MB of markdown before
the limits); 20 tables of 1 x 99,999 (each under ``max_table_cells``, together over
``max_text_chars``); a section under 1 MiB compressing > 200x; 400 sections of 63 KiB,
each under the per-part ratio floor (package ratio); a directory named ``folder.hwpx``.
Within the limits but costly: ``header_200k.hwpx``, a 200,000-character header cell over
2,000 rows (indexed; its oversize node is the slowest thing BM25 tokenizes).
"""

from __future__ import annotations

import argparse
import io
import shutil
import zipfile
from pathlib import Path

SEC = (
    '<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
    'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph">{}</hs:sec>'
)


def _package(sections: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("mimetype", "application/hwp+zip", compress_type=zipfile.ZIP_STORED)
        for i, sec in enumerate(sections):
            zf.writestr(f"Contents/section{i}.xml", SEC.format(sec))
    return buf.getvalue()


def _p(text: str) -> str:
    return f"<hp:p><hp:run><hp:t>{text}</hp:t></hp:run></hp:p>"


def _tc(row: int, col: int, text: str) -> str:
    return (
        f'<hp:tc><hp:subList>{_p(text)}</hp:subList><hp:cellAddr rowAddr="{row}" '
        f'colAddr="{col}"/></hp:tc>'
    )


def _tbl(rows: int, cols: int, cells: str = "") -> str:
    tr = f"<hp:tr>{cells}</hp:tr>" if cells else ""
    return f'<hp:p><hp:run><hp:tbl rowCnt="{rows}" colCnt="{cols}">{tr}</hp:tbl></hp:run></hp:p>'


def _wide(n: int, cols: int) -> bytes:
    return _package([_p("표") + _tbl(1, cols, _tc(0, 0, "a") + _tc(0, cols - 1, "b")) * n])


def hostile_files() -> dict[str, bytes]:
    """File name -> bytes of every hostile file (the directory is made by :func:`write`)."""
    from llama_index.readers.hwpx import HWPXBuilder

    header = HWPXBuilder()
    header.add_section().table([["가 " * 100_000]] + [[f"행{i}"] for i in range(2000)])
    return {
        "rows_1e9.hwpx": _package([_p("본문") + _tbl(1_000_000_000, 1)]),
        "wide_1x1e6_x20.hwpx": _wide(20, 1_000_000),
        "wide_1x99999_x20.hwpx": _wide(20, 99_999),
        "part_ratio.hwpx": _package([_p("x") + "<hp:p/>" * 140_000]),
        "package_ratio.hwpx": _package([_p("x") + " " * 63_000] * 400),
        "header_200k.hwpx": header.to_bytes(),
    }


def write(out: Path, good: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if good is None:
        from llama_index_car.demo.loader import DEMO_CORPUS_DIR

        sources = [DEMO_CORPUS_DIR / n for n in ("dg2012_tunnel.hwpx", "dg2019_drainage.hwpx",
                                                 "dg2022_safety.hwpx")]
    else:
        sources = sorted(good.glob("*.hwpx"))
    for src in sources:
        shutil.copy(src, out / src.name)
    for name, data in hostile_files().items():
        (out / name).write_bytes(data)
    (out / "folder.hwpx").mkdir(exist_ok=True)
    print(f"{len(sources)} good + {len(hostile_files()) + 1} hostile entries in {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--good", type=Path, default=None, help="folder of good .hwpx (demo)")
    args = ap.parse_args()
    write(args.out, args.good)


if __name__ == "__main__":
    main()
