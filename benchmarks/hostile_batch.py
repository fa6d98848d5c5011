"""Write a folder of good + hostile HWPX files for timing ``llama-car index`` (issue 13).

    python benchmarks/hostile_batch.py /tmp/batch                  # 3 demo files + hostile
    python benchmarks/hostile_batch.py /tmp/batch --good ../shared/corpus/hwpx
    python benchmarks/hostile_batch.py /tmp/near --near-limit --good \
        llama_index_car/data/demo_corpus       # good files + one file at 89 % of max_text_chars
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
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fakes.hostile_hwpx import attack_files, package, para  # noqa: E402


def hostile_files() -> dict[str, bytes]:
    """File name -> bytes of every hostile file (the directory is made by :func:`write`)."""
    from llama_index.readers.hwpx.writer import HWPXBuilder

    header = HWPXBuilder()
    header.add_section().table([["가 " * 100_000]] + [[f"행{i}"] for i in range(2000)])
    return attack_files() | {"header_200k.hwpx": header.to_bytes()}


def near_limit_text() -> bytes:
    """6 sections of ~1 MiB (each compressing under the 200x limit) with ~4.5 M characters
    of paragraph text: ~90 % of ``max_text_chars``, read in full."""
    pad = "".join(para("A" * 100 + str(i % 10)) for i in range(7400))
    return package([para("x") + pad] * 6)


def write(out: Path, good: Path | None, near_limit: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if good is None:
        from llama_index_car.demo.loader import DEMO_CORPUS_DIR

        sources = [DEMO_CORPUS_DIR / n for n in ("dg2012_tunnel.hwpx", "dg2019_drainage.hwpx",
                                                 "dg2022_safety.hwpx")]
    else:
        sources = sorted(good.glob("*.hwpx"))
    for src in sources:
        shutil.copy(src, out / src.name)
    if near_limit:
        (out / "near_limit_text.hwpx").write_bytes(near_limit_text())
        print(f"{len(sources)} good + near_limit_text.hwpx in {out}")
        return
    for name, data in hostile_files().items():
        (out / name).write_bytes(data)
    (out / "folder.hwpx").mkdir(exist_ok=True)
    print(f"{len(sources)} good + {len(hostile_files()) + 1} hostile entries in {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--good", type=Path, default=None, help="folder of good .hwpx (demo)")
    ap.add_argument("--near-limit", action="store_true", help="only the near-limit text file")
    args = ap.parse_args()
    write(args.out, args.good, args.near_limit)


if __name__ == "__main__":
    main()
