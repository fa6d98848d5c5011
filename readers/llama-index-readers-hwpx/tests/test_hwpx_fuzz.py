"""Fuzz: >= 1000 seeded mutations of real HWPX files only ever yield Documents or HWPXError."""

from __future__ import annotations

import io
import random
import re
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.readers.hwpx import HWPXError, HWPXReader
from llama_index.readers.hwpx.writer import HWPXBuilder, TableSpec

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
N_MUTATIONS = 1200
MAX_SECONDS_PER_FILE = 5.0


def _seeds() -> list[bytes]:
    """Real corpus files under 300 kB (keeps the run short), plus a built fixture."""
    files = sorted((SHARED / "corpus" / "hwpx").glob("*.hwpx"))
    seeds = [p.read_bytes() for p in files if p.stat().st_size < 300_000]
    b = HWPXBuilder()
    s = b.add_section()
    s.heading("총칙", 1).paragraph("본문", footnotes=["각주"]).text_box(["상자"])
    s.table([["a", "b"], ["c", "d"]], spans={(0, 0): (1, 2)}, nested={(1, 1): TableSpec([["x"]])})
    seeds.append(b.to_bytes())
    return seeds


def _rezip(data: bytes, edit: Callable[[str, bytes], bytes | None]) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            new = edit(info.filename, src.read(info))
            if new is not None:
                dst.writestr(info.filename, new)
    return out.getvalue()


def _mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "flip", "xml", "delete", "attr"])
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data))]
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 24)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return kind, bytes(b)
    if kind == "xml":
        junk = b'<>/"=&;x0 -9\x00'

        def corrupt(name: str, raw: bytes) -> bytes:
            if not name.endswith((".xml", ".hpf")) or not raw or rng.random() < 0.4:
                return raw
            b = bytearray(raw)
            for _ in range(rng.randint(1, 10)):
                i = rng.randrange(len(b))
                b[i : i + rng.randint(0, 5)] = bytes(rng.choice(junk) for _ in range(rng.randint(0, 4)))
            return bytes(b)

        return kind, _rezip(data, corrupt)
    if kind == "delete":
        return kind, _rezip(data, lambda name, raw: None if rng.random() < 0.3 else raw)
    pattern = re.compile(rb'(rowAddr|colAddr|rowSpan|colSpan|rowCnt|colCnt)="(\d+)"')
    values = [b"-1", b"999999", b"x", b"0", b"2", b"", b"99999999999999999999"]

    def attrs(name: str, raw: bytes) -> bytes:
        if "section" not in name:
            return raw
        return pattern.sub(
            lambda m: m.group(1) + b'="' + rng.choice(values) + b'"'
            if rng.random() < 0.1
            else m.group(0),
            raw,
        )

    return kind, _rezip(data, attrs)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.timeout(600)
def test_mutations_only_raise_hwpx_errors() -> None:
    if not (SHARED / "corpus" / "hwpx").is_dir():
        pytest.skip("../shared/corpus/hwpx is not present (CI provides it)")
    seeds = _seeds()
    assert len(seeds) >= 10
    rng = random.Random(20241130)
    reader = HWPXReader()
    outcomes: Counter[tuple[str, str]] = Counter()
    for i in range(N_MUTATIONS):
        kind, data = _mutate(rng.choice(seeds), rng)
        name = f"mutant{i}.hwpx"
        start = time.perf_counter()
        try:
            docs = reader.load_bytes(data, name)
            assert all(isinstance(d.text, str) for d in docs)
            outcomes[(kind, "ok")] += 1
        except HWPXError as exc:
            assert name in str(exc)
            outcomes[(kind, type(exc).__name__)] += 1
        elapsed = time.perf_counter() - start
        assert elapsed < MAX_SECONDS_PER_FILE, (kind, i, elapsed)
    assert sum(outcomes.values()) == N_MUTATIONS
    # the mutations exercised both paths for every kind of damage
    for kind in ("truncate", "flip", "xml", "delete", "attr"):
        assert sum(v for (k, _), v in outcomes.items() if k == kind) > 100
    assert sum(v for (_, r), v in outcomes.items() if r == "ok") > 50
    assert sum(v for (_, r), v in outcomes.items() if r != "ok") > 500
