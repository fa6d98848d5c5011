"""Benchmark: what an HWP 5 file refused for its text costs (issue 37, item 8).

The attack: a valid HWP 5 file of many one-character paragraphs (random syllables, so it
compresses like text), whose rendered text is far above ``max_text_chars`` (5,000,000 by
default; each paragraph is charged 1 + 8 characters). The reader builds each section as its
records are read and charges the text as it goes, so the refusal should cost about what
reading a file *at* the limit costs (its roofline: the same paragraphs up to the limit,
read and accepted), not what the whole file would.

Each case runs in a fresh subprocess (the files are built in code and written to a temporary
folder first): wall time of ``HWPReader().load_bytes`` and the process's peak RSS
(``ru_maxrss``, after reading the file into memory). The table gives both and the ratio of the
refusal to the at-limit read measured in the same run.

    python benchmarks/hwp_refusal_cost.py                  # 2,400,000 paragraphs (~7 MB)
    python benchmarks/hwp_refusal_cost.py --paragraphs 1000000
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "readers" / "llama-index-readers-hwpx" / "tests"

CHILD = r"""
import json, resource, sys, time
from llama_index.readers.hwpx import HWPReader, HWPXLimitError
data = open(sys.argv[1], "rb").read()
start = time.perf_counter()
try:
    docs = HWPReader().load_bytes(data, "attack.hwp")
    outcome = f"read ({sum(len(d.text) for d in docs):,} characters)"
except HWPXLimitError as exc:
    outcome = f"refused ({exc.limit})"
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"outcome": outcome, "seconds": seconds, "peak_mb": peak}))
"""


def build(n: int, path: Path) -> int:
    """Write an HWP 5 file of ``n`` one-character paragraphs to ``path``; its size."""
    sys.path.insert(0, str(FAKES))
    from hwp5_fakes import hwp5, paragraph  # the reader tests' CFB / record writer

    rng = random.Random(0)
    section = b"".join(paragraph(chr(0xAC00 + rng.randrange(11172))) for _ in range(n))
    data = hwp5([section])
    path.write_bytes(data)
    return len(data)


def measure(path: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paragraphs", type=int, default=2_400_000,
                        help="paragraphs of the refused file (default 2,400,000)")
    args = parser.parse_args()
    at_limit = 5_000_000 // 9  # the most one-character paragraphs the default limit accepts
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, n in (("at the limit (accepted)", at_limit), ("attack (refused)", args.paragraphs)):
            path = Path(tmp) / f"{n}.hwp"
            size = build(n, path)
            rows.append((name, n, size, measure(path)))
    base = rows[0][3]
    print(f"{'file':26} {'paragraphs':>11} {'MB':>6} {'outcome':>30} {'s':>7} {'peak MB':>8}"
          f" {'s ratio':>8} {'MB ratio':>8}")
    for name, n, size, m in rows:
        print(f"{name:26} {n:>11,} {size / 1e6:>6.2f} {m['outcome']:>30} {m['seconds']:>7.2f}"
              f" {m['peak_mb']:>8.0f} {m['seconds'] / base['seconds']:>8.2f}"  # type: ignore[operator]
              f" {m['peak_mb'] / base['peak_mb']:>8.2f}")  # type: ignore[operator]


if __name__ == "__main__":
    main()
