"""Every HWP 5 file of ../shared/corpus/hwp reads, and its tables equal its twin's (the same
document saved by Hangul as HWPX or exported as HWPML, read by the HWPX/HML readers) on
(row, col, row span, col span, whitespace-normalised text) for >= 99 % of the twin cells."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.readers.hwpx import HMLReader, HWPReader, HWPXCell, HWPXReader

from .conftest import SHARED

HWP = SHARED / "corpus" / "hwp"
FILES = sorted(HWP.glob("*.hwp")) if HWP.is_dir() else []
pytestmark = pytest.mark.corpus


def _key(c: HWPXCell) -> tuple[int, int, int, int, str]:
    return (c.row, c.col, c.row_span, c.col_span, " ".join(c.text.split()))


def _twin(path: Path) -> Path | None:
    for suffix in (".hwpx", ".hml"):
        p = path.parent / "twins" / (path.stem + suffix)
        if p.exists():
            return p
    return None


@pytest.mark.filterwarnings("ignore")
def test_hwp_tables_equal_their_twins() -> None:
    if not FILES:
        pytest.skip("../shared/corpus/hwp is not present")
    total = equal = 0
    for path in FILES:
        ours = HWPReader().load_tables(path)  # every file reads
        twin = _twin(path)
        if twin is None:
            continue
        theirs = (HWPXReader() if twin.suffix == ".hwpx" else HMLReader()).load_tables(twin)
        diffs = []
        for i, t in enumerate(theirs):
            mine = {(c.row, c.col): c for c in ours[i].cells} if i < len(ours) else {}
            for c in t.cells:
                total += 1
                o = mine.get((c.row, c.col))
                if o is not None and _key(o) == _key(c):
                    equal += 1
                else:
                    diffs.append((i, _key(c), None if o is None else _key(o)))
        for d in diffs:
            print(f"{path.name}: table {d[0]} twin {d[1]} hwp {d[2]}")
    print(f"cells equal: {equal}/{total}")
    assert total > 0 and equal >= 0.99 * total


def test_hwp_summary_title_equals_the_hwpx_twins_title() -> None:
    """The title of ``\\x05HwpSummaryInformation`` (our property-set parse) equals the
    ``opf:title`` Hangul wrote into the HWPX twin (an independent writer of the same value)."""
    pairs = [(p, p.parent / "twins" / (p.stem + ".hwpx")) for p in FILES]
    pairs = [(p, t) for p, t in pairs if t.exists()]
    if not pairs:
        pytest.skip("../shared/corpus/hwp is not present")
    for path, twin in pairs:
        ours = HWPReader().parse_bytes(path.read_bytes(), str(path)).package_title
        theirs = HWPXReader().parse_bytes(twin.read_bytes(), str(twin)).package_title
        assert ours == theirs, path.name
    assert any(HWPReader().parse_bytes(p.read_bytes(), "x").package_title for p, _ in pairs)
