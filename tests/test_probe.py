"""The counterfactual framing probe: eligibility, variants, cosines, contrasts, displacement, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from llama_index_car._errors import ConfigurationError
from llama_index_car.cli import main
from llama_index_car.evaluation.probe import (
    CONTRASTS,
    VARIANTS,
    ProbeSection,
    eligible_cases,
    load_sections_jsonl,
    probe_markdown,
    run_probe,
    sample_cases,
)
from llama_index_car.framing import make_probe_variants, probe_query
from tests.fakes.embeddings import VecEmbedding

SECTIONS = [
    ProbeSection("s1", "교량 점검시설 확충방안", "점검시설의 설치기준은 다음과 같다. 통로 폭은 60 cm."),
    ProbeSection("s2", "배수시설 개선방안", "집수정의 설치간격은 배치기준에 따른다."),
    ProbeSection("s3", "터널 환기 계획 검토", "환기설비 설계기준과 용량기준을 정한다."),
    ProbeSection("s4", "방호울타리 설치기준", "방호울타리의 성능기준을 만족한다."),  # standard
    ProbeSection("s5", "포장 보수 방안", "균열은 실링으로 보수한다."),  # no criterion
    ProbeSection("s6", "신축이음 강화 추진", "신축이음장치 설치기준은 교량 길이에 따른다."),
]


class LetterEmbedding(VecEmbedding):
    """Counts of a few Hangul syllables and digits: deterministic, position-free."""

    model_name: str = "letters"

    def _vec(self, text: str) -> list[float]:
        keys = "기준설치방안개선계획검토교량배수터널환기0123456789"
        return [float(text.count(k)) + 0.1 for k in keys]


def test_eligibility_follows_the_paper_rule() -> None:
    cases, counts = eligible_cases(SECTIONS)
    assert [c.section.id for c in cases] == ["s1", "s2", "s3", "s6"]
    assert counts["plan"] == 5 and counts["standard"] == 1 and counts["eligible"] == 4
    c = cases[0]
    assert c.criterion == "설치기준"
    assert c.query == probe_query(c.section.title, "설치기준") == "교량 점검시설 설치기준"
    assert c.variants == make_probe_variants(c.section.title, c.section.body, "설치기준")
    assert set(c.variants) == set(VARIANTS)
    wide, _ = eligible_cases(SECTIONS, frames=("plan", "standard"))
    assert "s4" in [x.section.id for x in wide]
    with pytest.raises(ConfigurationError):
        eligible_cases(SECTIONS, frames=("bogus",))


def test_cosines_contrasts_and_displacement_by_hand(tmp_path: Path) -> None:
    cases, counts = eligible_cases(SECTIONS)
    emb = LetterEmbedding()
    res = run_probe(cases, emb, corpus=SECTIONS, cache_dir=tmp_path, counts=counts, seed=1)

    def cos(a: str, b: str) -> float:
        x, y = np.asarray(emb._vec(a)), np.asarray(emb._vec(b))
        return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))

    for i, c in enumerate(cases):
        for v in VARIANTS:
            assert res.cosines[v][i] == pytest.approx(cos(c.query, c.variants[v]), abs=1e-6)
    rows = {(r["a"], r["b"]): r for r in res.contrasts}
    assert [(a, b) for a, b, _ in CONTRASTS] == list(rows)
    cf, orig = np.asarray(res.cosines["cf"]), np.asarray(res.cosines["orig"])
    r = rows[("cf", "orig")]
    assert r["delta"] == pytest.approx(float(np.mean(cf - orig)))
    if np.any(cf != orig):
        ref = sps.wilcoxon(cf, orig, alternative="greater", zero_method="wilcox")
        assert r["p"] == pytest.approx(float(ref.pvalue))
    assert all(row["p_holm"] >= row["p"] for row in res.contrasts)
    # rank displacement: 1 + number of other sections with a strictly higher cosine
    disp = res.displacement
    assert disp["corpus_size"] == len(SECTIONS)
    from llama_index_car.framing import format_section

    for i, c in enumerate(cases):
        others = [cos(c.query, format_section(s.title, s.body)) for s in SECTIONS
                  if s.id != c.section.id]
        assert res.per_case_ranks[i]["rank_orig"] == 1 + sum(o > res.cosines["orig"][i] + 1e-6
                                                             for o in others)
    d = res.to_dict()
    assert len(d["cases"]) == 4 and d["cases"][0]["criterion"] == "설치기준"
    md = probe_markdown(res)
    assert "cf vs. orig" in md and "Rank displacement" in md


def test_jsonl_loader_and_sampling(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"title": "a 방안", "body": "b"}\n{"id": "x", "title": "c", "text": "d"}\n',
                 encoding="utf-8")
    secs = load_sections_jsonl(p)
    assert [(s.id, s.body) for s in secs] == [("line-1", "b"), ("x", "d")]
    p.write_text('{"title": 1}\n', encoding="utf-8")
    with pytest.raises(Exception, match=r"s\.jsonl:1"):
        load_sections_jsonl(p)
    cases, _ = eligible_cases(SECTIONS)
    picked = sample_cases(cases, 2, seed=3)
    assert picked == sample_cases(cases, 2, seed=3) and len(picked) == 2


def test_cli_probe_writes_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "sections.jsonl"
    p.write_text("\n".join(json.dumps({"title": s.title, "body": s.body}, ensure_ascii=False)
                           for s in SECTIONS), encoding="utf-8")
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("llama_index_car.providers.resolve_embed_model",
                   lambda name: LetterEmbedding())
        code = main(["probe", str(p), "--out", str(out), "--cache-dir", str(tmp_path / "c"),
                     "--no-progress"])
    assert code == 0
    assert (out / "probe.md").is_file() and (out / "probe.png").is_file()
    data = json.loads((out / "probe.json").read_text())
    assert data["counts"]["eligible"] == 4 and len(data["contrasts"]) == len(CONTRASTS)
    assert "cf − orig" in capsys.readouterr().out


def test_cli_probe_without_eligible_sections_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"title": "개요", "body": "내용"}\n', encoding="utf-8")
    assert main(["probe", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "eligible" in capsys.readouterr().err


def test_cli_probe_help_has_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    assert "llama-car probe ../shared/corpus/hwpx" in capsys.readouterr().out


@pytest.mark.corpus
def test_hwpx_sections_load(shared_dir: Path) -> None:
    from llama_index_car.evaluation.probe import load_sections_folder

    secs = load_sections_folder(shared_dir / "corpus" / "hwpx")
    assert len(secs) > 50
    assert all(s.title and not s.body.startswith("## ") for s in secs)
