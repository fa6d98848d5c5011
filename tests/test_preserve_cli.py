"""``llama-car preserve``: pairing, outputs, self-test 100 %, files not scored, missing extra."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_car.cli import main

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / ".." / "shared"
HWPX = SHARED / "corpus" / "hwpx"
PDF = HWPX / "pdf"
HML = SHARED / "corpus" / "hml"


def _need_corpus() -> None:
    if not (HWPX.is_dir() and PDF.is_dir() and HML.is_dir()):
        pytest.skip("../shared/corpus is not present")


def _link(src: Path, dst_dir: Path, name: str | None = None) -> None:
    dst_dir.mkdir(parents=True, exist_ok=True)
    (dst_dir / (name or src.name)).symlink_to(src.resolve())


def test_readme_and_ci_install_the_same() -> None:
    ci = re.search(r"^pip install .*$", (REPO / ".ci/run").read_text(), re.M)
    readme = re.search(r"^pip install .*$", (REPO / "README.md").read_text(), re.M)
    assert ci and readme and ci.group(0) == readme.group(0)
    assert "pdf" in ci.group(0)


@pytest.mark.corpus
def test_preserve_small_corpus(tmp_path: Path) -> None:
    _need_corpus()
    pytest.importorskip("pymupdf")
    pytest.importorskip("pdfplumber")
    h, p, m, out = tmp_path / "hwpx", tmp_path / "pdf", tmp_path / "hml", tmp_path / "out"
    small = ["edu_completion_cert", "gwanak_fire_alert_notice"]
    for stem in small + ["osk_textbox_table", "hwpjs_aligns"]:
        _link(HWPX / f"{stem}.hwpx", h)
    _link(HWPX / "bad" / "truncated_zip_derived.hwpx", h, "broken.hwpx")
    for stem in small:
        _link(PDF / f"{stem}.pdf", p)
    _link(PDF / "edu_completion_cert.pdf", p, "orphan.pdf")
    (p / "broken.pdf").write_bytes(b"%PDF-1.4 not really")  # its HWPX twin is unreadable
    (p / "osk_textbox_table.pdf").write_bytes(b"garbage, not a PDF")
    for stem in ("osk_textbox_table", "hwpjs_aligns", "kaist_double_major_form"):
        _link(HML / f"{stem}.hml", m)
    rc = main(["preserve", str(h), "--pdf", str(p), "--hml", str(m), "--out", str(out),
               "--no-progress"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    by = {row["pathway"]: row for row in res["pathways"]}
    assert set(by) == {"HWPX (self-test)", "HML", "PDF (union)", "PDF (pymupdf)",
                       "PDF (pdfplumber)"}
    for scope in ("all", "2x2"):
        s = by["HWPX (self-test)"]["summary"][scope]
        assert s["recovered"] == s["cells"] > 0 and s["preservation"] == 1.0
        assert s["detection"] == 1.0
    # the HML twin of osk_textbox_table reproduces its 1x1 table exactly
    assert by["HML"]["summary"]["all"]["preservation"] == 1.0
    assert by["HML"]["documents"] == ["hwpjs_aligns", "osk_textbox_table"]
    assert by["PDF (union)"]["documents"] == small
    # the union is a superset of each engine's tables: optimal alignment can only gain
    u = by["PDF (union)"]["summary"]["all"]["recovered"]
    assert u >= by["PDF (pymupdf)"]["summary"]["all"]["recovered"]
    assert u >= by["PDF (pdfplumber)"]["summary"]["all"]["recovered"]
    # per-table records add up to the summary
    tabs = by["PDF (union)"]["tables"]
    s = by["PDF (union)"]["summary"]["all"]
    assert (sum(t["cells"] for t in tabs), sum(t["recovered"] for t in tabs)) == (
        s["cells"], s["recovered"])
    assert s["detection"] == pytest.approx(
        sum(t["recovered"] >= 0.5 * t["cells"] for t in tabs) / len(tabs))
    unpaired = {(u["pathway"], Path(u["file"]).name) for u in res["unpaired"]}
    assert unpaired == {("pdf", "orphan.pdf"), ("pdf", "broken.pdf"),
                        ("hml", "kaist_double_major_form.hml")}
    unreadable = {(u["pathway"], Path(u["file"]).name) for u in res["unreadable"]}
    assert unreadable == {("hwpx", "broken.hwpx"), ("pdf", "osk_textbox_table.pdf")}
    report = (out / "report.md").read_text()
    assert "| Pathway | Scope | Docs | GT tables | GT cells | Cell preservation | Table detection |" \
        in report
    assert "| HWPX (self-test) | ≥2×2 |" in report and "per document" in report
    assert "orphan.pdf" in report and "broken.hwpx" in report
    png = out / "preservation.png"
    if png.exists():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_pdf_extra_gives_one_line(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pymupdf':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from llama_index_car.cli import main\n"
        f"sys.exit(main(['preserve', {str(tmp_path)!r}, '--pdf', {str(tmp_path)!r}, "
        f"'--out', {str(tmp_path / 'o')!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1
    assert "pip install 'llama-index-car[pdf]'" in lines[0] and "PyMuPDF" in lines[0]


def test_unknown_engine_is_a_configuration_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["preserve", str(tmp_path), "--pdf", str(tmp_path), "--engines", "tabula",
               "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "unknown PDF engine 'tabula'" in capsys.readouterr().err


@pytest.mark.corpus
@pytest.mark.slow
def test_preserve_shared_corpus(tmp_path: Path) -> None:
    """The README's command on the whole shared corpus (minutes: every PDF page, 2 engines)."""
    _need_corpus()
    rc = main(["preserve", str(HWPX), "--pdf", str(PDF), "--hml", str(HML), "--out",
               str(tmp_path), "--no-progress"])
    assert rc == 0
    res = json.loads((tmp_path / "results.json").read_text())
    by = {row["pathway"]: row for row in res["pathways"]}
    assert by["HWPX (self-test)"]["summary"]["all"]["preservation"] == 1.0
    pdf_stems = {f.stem for f in PDF.glob("*.pdf")}
    hml_stems = {f.stem for f in HML.glob("*.hml")}
    twins_pdf = {s for s in pdf_stems if (HWPX / f"{s}.hwpx").is_file()}
    twins_hml = {s for s in hml_stems if (HWPX / f"{s}.hwpx").is_file()}
    not_scored = {Path(u["file"]).stem for u in res["unpaired"] + res["unreadable"]}
    assert set(by["PDF (union)"]["documents"]) | not_scored >= pdf_stems
    assert set(by["PDF (union)"]["documents"]) <= twins_pdf
    assert set(by["HML"]["documents"]) == twins_hml
    assert 0.0 < by["PDF (union)"]["summary"]["2x2"]["preservation"] <= 1.0


@pytest.mark.corpus
def test_preserve_hwp_is_ground_truth_where_no_hwpx_twin(tmp_path: Path) -> None:
    """``--hwp``: HWP 5 files without an HWPX twin become ground truth, so HML exports of
    HWP originals are scored; an HWP 5 file with an HWPX twin is the ``HWP 5`` pathway."""
    hwp_src = SHARED / "corpus" / "hwp"
    if not (hwp_src / "twins").is_dir():
        pytest.skip("../shared/corpus/hwp is not present")
    from llama_index.readers.hwpx import HMLReader

    from llama_index_car.evaluation.preservation import ground_truth

    h, w, m = tmp_path / "hwpx", tmp_path / "hwp", tmp_path / "hml"
    with_hml = ["kaist-055", "nodehwp-table-simple-1"]
    for stem in with_hml:
        _link(hwp_src / f"{stem}.hwp", w)
        _link(hwp_src / "twins" / f"{stem}.hml", m)
    _link(hwp_src / "hwp2hwpx-table.hwp", w)
    _link(hwp_src / "twins" / "hwp2hwpx-table.hwpx", h)
    without = tmp_path / "without"
    assert main(["preserve", str(h), "--hml", str(m), "--out", str(without),
                 "--no-progress"]) == 0
    before = json.loads((without / "results.json").read_text())
    assert {Path(u["file"]).stem for u in before["unpaired"]} == set(with_hml)

    out = tmp_path / "out"
    assert main(["preserve", str(h), "--hwp", str(w), "--hml", str(m), "--out", str(out),
                 "--no-progress"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["ground_truth"] == {"hwp2hwpx-table": "hwpx", "kaist-055": "hwp",
                                   "nodehwp-table-simple-1": "hwp"}
    assert res["unpaired"] == [] and res["unreadable"] == []
    by = {row["pathway"]: row for row in res["pathways"]}
    assert set(by) == {"HWPX (self-test)", "HWP 5 (self-test)", "HWP 5", "HML"}
    assert by["HML"]["documents"] == with_hml
    assert by["HWP 5"]["documents"] == ["hwp2hwpx-table"]
    # oracle: the HML twins' own tables (another format, written by Hangul) hold as many
    # ground-truth cells as the HWP 5 files they were exported from
    twin_cells = sum(len(t.values) for stem in with_hml
                     for t in ground_truth(HMLReader().load_tables(m / f"{stem}.hml")))
    assert by["HML"]["summary"]["all"]["cells"] == twin_cells > 0
    assert by["HWP 5 (self-test)"]["summary"]["all"]["preservation"] == 1.0
    for name in ("HML", "HWP 5"):
        assert by[name]["summary"]["all"]["preservation"] == 1.0, name
    report = (out / "report.md").read_text()
    assert f"--hwp {w}" in report and "2 from binary HWP 5" in report
    assert "| HWP 5 (self-test) | all |" in report
