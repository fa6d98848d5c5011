"""Issue 13, reader defects, end to end: ``llama-car index`` over good HWPX files plus hostile
ones (built here in code) exits 0, indexes the good files, names each bad one on stderr and
in the manifest, within 60 s and 2 GB (wall time and the child's peak RSS are measured)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llama_index_car._persist import live_dir
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from tests.fakes.hostile_hwpx import attack_files

GOOD = ("dg2012_tunnel.hwpx", "dg2019_drainage.hwpx", "dg2022_safety.hwpx")
#: name -> (bytes, the error type llama-car must report for it)
HOSTILE: dict[str, tuple[bytes, str]] = {
    name: (data, "HWPXLimitError") for name, data in attack_files().items()
}


#: A small launcher that runs the command and writes the command's own peak RSS (KiB).
#: Linux carries a process's RSS high-water mark across fork/vfork + exec, so a command
#: started straight from pytest (gigabytes by the end of the suite) would report pytest's
#: size; started from this launcher it inherits only the launcher's few MB.
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def _run_measured(argv: list[str], logs: Path) -> tuple[int, str, str, float, int]:
    """Run ``argv``; return code, stdout, stderr, wall seconds and the peak RSS in bytes of
    that command alone (measured by :data:`_LAUNCHER`)."""
    start = time.perf_counter()
    peak_file = logs / "peak_kib"
    with open(logs / "stdout", "w") as fo, open(logs / "stderr", "w") as fe:
        rc = subprocess.call(
            [sys.executable, "-c", _LAUNCHER, str(peak_file), *argv],
            stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
        )
    seconds = time.perf_counter() - start
    out = (logs / "stdout").read_text(encoding="utf-8")
    err = (logs / "stderr").read_text(encoding="utf-8")
    return rc, out, err, seconds, int(peak_file.read_text()) * 1024  # Linux: KiB


@pytest.mark.slow
def test_index_lists_each_hostile_file_and_indexes_the_good_ones(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in GOOD:
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    for name, (data, _) in HOSTILE.items():
        (src / name).write_bytes(data)
    (src / "folder.hwpx").mkdir()  # a directory named like a file: a listed failure
    out = tmp_path / "index"
    rc, stdout, stderr, seconds, peak = _run_measured(
        [sys.executable, "-m", "llama_index_car", "index", str(src), "--persist", str(out),
         "--embed", "use", "--no-progress", "--cache-dir", str(tmp_path / "cache")],
        tmp_path,
    )
    print(f"llama-car index: {seconds:.1f} s, peak RSS {peak / 2**20:.0f} MiB")
    assert rc == 0, stderr
    n_bad = len(HOSTILE) + 1
    assert f"{len(GOOD) + n_bad} files → {len(GOOD)} documents" in stdout
    assert f"{n_bad} failed" in stdout
    for name, (_, error_type) in HOSTILE.items():
        assert f"skipped {src / name}: {error_type}: " in stderr
    assert f"skipped {src / 'folder.hwpx'}: HWPXFormatError: " in stderr
    manifest = json.loads((live_dir(out) / "car_index.json").read_text(encoding="utf-8"))
    failed = {Path(f["path"]).name for f in manifest["failures"]}
    assert failed == set(HOSTILE) | {"folder.hwpx"}
    assert seconds < 60, f"{seconds:.1f} s"
    assert peak < 2 << 30, f"peak RSS {peak / 2**20:.0f} MiB"
