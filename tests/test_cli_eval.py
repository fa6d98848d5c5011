"""``llama-car eval`` end to end on a small BEIR folder.

The embedding provider is replaced by a hashed character-bigram embedding (any
``BaseEmbedding`` works; the real USE model is exercised by the ``slow`` test, the default e5
by ``tests/test_default_embedding.py``). The metrics in
results.json are recomputed from the written TREC runs with ranx.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_index_car.cli import main
from tests.fakes.embeddings import VecEmbedding


class CharBigramEmbedding(VecEmbedding):
    """Hashed character-bigram counts (64-d): a fast deterministic stand-in for USE."""

    model_name: str = "char-bigram-64"

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 64
        for a, b in zip(text, text[1:], strict=False):
            v[hashlib.md5((a + b).encode()).digest()[0] % 64] += 1.0
        return v


DOCS = [
    ("d01", "배수시설 설치기준", "도로 배수시설의 설치기준은 강우강도와 배수면적을 고려하여 정한다."),
    ("d02", "배수시설 개선방안", "배수시설 설치기준에 따라 집수정 간격을 20미터 이하로 한다."),
    ("d03", "방호울타리 설치기준", "방호울타리의 설치기준은 설계속도와 도로 조건에 따른다."),
    ("d04", "방호울타리 성능 검토", "차량 충돌 시 방호울타리의 성능기준을 만족하여야 한다."),
    ("d05", "터널 환기 계획", "터널 환기설비의 설계기준은 교통량과 연장에 따라 정한다."),
    ("d06", "터널 조명 개선", "터널 조명의 설계기준은 입구부 휘도를 기준으로 한다."),
    ("d07", "교량 점검시설 확충방안", "교량 점검시설의 설치기준은 교량 형식에 따라 다르다."),
    ("d08", "교량 받침 교체", "교량 받침 교체 시 성능기준을 확인하고 작업한다."),
    ("d09", "포장 유지관리", "아스팔트 포장 균열은 실링으로 보수한다."),
    ("d10", "신축이음장치", "온도 변화로 늘어나고 줄어드는 이음부에 신축이음장치를 둔다."),
    ("d11", "비탈면 보호", "비탈면 보호공은 토질과 경사에 따라 선정한다."),
    ("d12", "차선 도색", "차선 도색은 야간 시인성을 위해 유리알을 살포한다."),
]
QUERIES = [
    ("q1", "배수시설은 어떤 기준으로 설치하나요?", ["d01", "d02"]),
    ("q2", "방호울타리 설치 기준", ["d03"]),
    ("q3", "온도에 따라 늘었다 줄었다 하는 이음부에 무엇을 두나요?", ["d10"]),
    ("q4", "터널 안의 밝기는 어떻게 정하나요?", ["d06"]),
    ("q5", "교량 점검시설 설치기준", ["d07"]),
    ("q6", "경사진 흙 사면은 어떻게 보호하나요?", ["d11"]),
]
SYSTEMS = "bm25,dense,hybrid,car"


def _beir(root: Path) -> Path:
    root.mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, title, text in DOCS:
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False))
            fh.write("\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text, _ in QUERIES:
            fh.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{qid}\t{d}\t1" for qid, _, golds in QUERIES for d in golds]
    (root / "qrels.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    base = tmp_path_factory.mktemp("eval")
    data = _beir(base / "beir")
    cache = base / "cache"
    out1, out2 = base / "out1", base / "out2"
    args = [str(data), "--systems", SYSTEMS, "--cache-dir", str(cache), "--no-progress"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            "llama_index_car.providers.resolve_embed_model", lambda name: CharBigramEmbedding()
        )
        assert main(["eval", *args, "--out", str(out1)]) == 0
        assert main(["eval", *args, "--out", str(out2)]) == 0
    yield {"data": data, "out1": out1, "out2": out2, "cache": cache}


@pytest.mark.slow
def test_use_embedding_end_to_end(tmp_path: Path) -> None:
    data = _beir(tmp_path / "beir")
    out = tmp_path / "out"
    assert main(["eval", str(data), "--systems", "bm25,dense,car", "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--embed", "use"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["embed_model"]["class"] == "UniversalSentenceEncoderEmbedding"
    assert res["systems"]["dense"]["all"]["mrr"] > 0.3


def test_outputs_and_results_shape(evaluated: dict[str, Path]) -> None:
    out = evaluated["out1"]
    for name in ("results.json", "report.md", "per_query.json", "qrels.trec",
                 "mrr_by_overlap.png", "alpha_sweep.png"):
        assert (out / name).is_file(), name
    res = json.loads((out / "results.json").read_text())
    assert list(res["systems"]) == SYSTEMS.split(",")
    for strata in res["systems"].values():
        assert set(strata) == {"all", "high", "mid", "low"}
        assert strata["all"]["n"] == len(QUERIES)
        assert {"n", "mrr", "mrr@10", "recall@10", "recall@50", "ndcg@10"} <= set(strata["all"])
        assert sum(strata[s]["n"] for s in ("high", "mid", "low")) == len(QUERIES)
    fams = {t["family"] for t in res["tests"]}
    assert "vs-hybrid" in fams and "car-vs-baselines" in fams
    assert all(0.0 <= t["p_holm"] <= 1.0 and t["p_holm"] >= t["p"] for t in res["tests"])
    # the alpha sweep at 0.5 is the hybrid system itself
    assert res["alpha_sweep"]["hybrid"]["0.5"] == pytest.approx(res["systems"]["hybrid"]["all"]["mrr"])
    report = (out / "report.md").read_text()
    assert "Table 9 shape" in report and "Holm" in report and "llama-car eval" in report


def test_ranx_on_written_runs_equals_results_json(evaluated: dict[str, Path]) -> None:
    ranx = pytest.importorskip("ranx")
    out = evaluated["out1"]
    res = json.loads((out / "results.json").read_text())
    pq = json.loads((out / "per_query.json").read_text())
    all_qrels = ranx.Qrels.from_file(str(out / "qrels.trec"), kind="trec").to_dict()
    names = {"mrr": "mrr", "mrr@10": "mrr@10", "recall@10": "recall@10",
             "recall@50": "recall@50", "ndcg@10": "ndcg@10"}
    for system, strata in res["systems"].items():
        run_path = out / res["runs"][system]
        lines = run_path.read_text().splitlines()
        assert lines and all(len(ln.split()) == 6 for ln in lines)
        run = ranx.Run.from_file(str(run_path), kind="trec").to_dict()
        for stratum, cell in strata.items():
            qids = [q for q, o in pq["overlap"].items() if stratum == "all" or o["stratum"] == stratum]
            if not qids:
                continue
            sub_q = ranx.Qrels({q: all_qrels[q] for q in qids})
            sub_r = ranx.Run({q: run[q] for q in qids if q in run})
            theirs = ranx.evaluate(sub_q, sub_r, list(names.values()), make_comparable=True)
            for ours, key in names.items():
                assert cell[ours] == pytest.approx(theirs[key], abs=1e-9), (system, stratum, ours)


def test_second_run_reembeds_nothing(evaluated: dict[str, Path]) -> None:
    first = json.loads((evaluated["out1"] / "results.json").read_text())
    second = json.loads((evaluated["out2"] / "results.json").read_text())
    assert first["embedding_cache"]["misses"] > len(DOCS)  # corpus + queries
    assert second["embedding_cache"]["misses"] == 0
    assert first["systems"] == second["systems"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--systems", "bm25,bogus"], "unknown system 'bogus'"),
        (["--depth", "50"], "--depth: '50' is not an integer >= 100"),
        (["--systems", "car-hyde"], "car-hyde needs an LLM"),
        (["--systems", "bm25+exp"], "need an LLM hypothesis"),
        (["--systems", "dense+rerank"], "need --rerank cohere"),
    ],
)
def test_errors_go_to_stderr_with_nonzero_exit(
    evaluated: dict[str, Path], capsys: pytest.CaptureFixture[str], extra: list[str],
    message: str, tmp_path: Path,
) -> None:
    code = main(["eval", str(evaluated["data"]), "--out", str(tmp_path / "o"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err


def test_missing_data_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["eval", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "nope does not exist" in capsys.readouterr().err


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "llama-car eval ../shared/eval/lhcs_construction" in capsys.readouterr().out
