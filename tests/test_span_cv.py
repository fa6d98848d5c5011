"""``benchmarks/span_cv.py`` ranks through the retriever's own functions: the shipped defaults
reproduce its in-sample figures exactly (issue 38 item 3), on a small BEIR folder built here
and (slow tier) on a shared developer set, against ``llama-car eval``'s own per-query values."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llama_index_car.evaluation.runner import EvalConfig, load_eval_data, run_evaluation
from llama_index_car.postprocessors.span_rerank import DEFAULT_SPAN_POOL
from llama_index_car.retrievers.criterion_aware import (
    DEFAULT_OFFLINE_ALPHA,
    DEFAULT_SPAN_Z_WEIGHT,
)
from tests.fakes.embeddings import HashedBigramEmbedding

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("bm25", "dense", "hybrid", "car")


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("span_cv", ROOT / "benchmarks" / "span_cv.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["span_cv"] = mod
    spec.loader.exec_module(mod)
    return mod


TOPICS = ("배수관", "포장층", "교량 난간", "조명 시설", "옹벽", "말뚝", "거푸집", "철근")
CRITERIA = ("설치 간격은 {n}m 이하로 한다.", "두께는 {n}cm 이상으로 한다.",
            "높이는 {n}m 이상이어야 한다.", "점검은 {n}개월마다 실시한다.")


def _beir(folder: Path) -> None:
    """64 passages of several sentences (topic × criterion; more than a span pool), 12
    queries: questions and statements, each with one gold passage."""
    folder.mkdir()
    docs = []
    for i in range(64):
        topic, other = TOPICS[i % 8], TOPICS[(i + 3) % 8]
        sentences = [f"{topic}의 일반 사항을 정한다.",
                     CRITERIA[i % 4].format(n=i + 2).replace("설치", f"{topic} 설치"),
                     f"{other}와 연결되는 부분은 감독자의 승인을 받는다.",
                     f"시공 중 {topic} 주변은 청결하게 유지한다."]
        docs.append({"_id": f"d{i:02d}", "title": f"{topic} 시공 {i}", "text": " ".join(sentences)})
    queries = []
    for j in range(12):
        i = (j * 5) % 64
        topic = TOPICS[i % 8]
        text = (f"{topic} 간격이나 두께는 얼마나 되어야 하나요?" if j % 2 == 0
                else f"{topic} 시공 기준 {i + 2}")
        queries.append({"_id": f"q{j:02d}", "text": text, "gold": f"d{i:02d}"})
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": q["_id"], "text": q["text"]}, ensure_ascii=False) + "\n"
        for q in queries), encoding="utf-8")
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q['_id']}\t{q['gold']}\t1\n" for q in queries),
        encoding="utf-8")


def _check_reproduces(bench: ModuleType, folder: Path, embed: object, cache_dir: Path | None
                      ) -> None:
    s = bench.collect(folder, embed_model=embed, cache_dir=cache_dir, store=None, levers=False)
    shipped = bench.Point(beta=DEFAULT_OFFLINE_ALPHA, gamma=DEFAULT_SPAN_Z_WEIGHT,
                          pool=DEFAULT_SPAN_POOL, cue=True)
    out = run_evaluation(load_eval_data(folder),
                         EvalConfig(systems=SYSTEMS, show_progress=False, n_resamples=10),
                         embed, cache_dir=cache_dir)
    qids = s.strata["all"]
    assert qids and set(qids) <= set(out.per_query["car"]["mrr"])
    for system in SYSTEMS:
        for qid in qids:
            ranked = (bench.car_ranking(s, qid, shipped) if system == "car"
                      else bench.channel_ranking(s, qid, system))
            got = bench.metrics_of(s, qid, ranked)
            want = (out.per_query[system]["mrr"][qid], out.per_query[system]["ndcg@10"][qid])
            assert got == want, (system, qid)  # exactly: the same functions on the same inputs
    # the comparison can fail: another point ranks some query differently
    plain = bench.Point(beta=DEFAULT_OFFLINE_ALPHA)
    assert any(bench.car_ranking(s, q, plain)[:10] != bench.car_ranking(s, q, shipped)[:10]
               for q in qids)


def test_shipped_defaults_reproduce_the_benchmark_on_a_small_set(tmp_path: Path) -> None:
    bench = _bench()
    folder = tmp_path / "mini"
    _beir(folder)
    data = load_eval_data(folder)
    from llama_index_car.postprocessors.criterion_spans import question_cue

    cues = [question_cue(q) for q in data.queries.values()]
    assert any(cues) and not all(cues)  # both branches of the span weight rule run
    _check_reproduces(bench, folder, HashedBigramEmbedding(), tmp_path / "cache")


def test_the_grid_holds_the_shipped_point_and_each_lever() -> None:
    bench = _bench()
    fams = bench.families()
    shipped = bench.Point(beta=DEFAULT_OFFLINE_ALPHA, gamma=DEFAULT_SPAN_Z_WEIGHT,
                          pool=DEFAULT_SPAN_POOL, cue=True)
    assert shipped in fams[bench.SHIPPED]
    assert all(p.cue for p in fams[bench.SHIPPED])
    levers = {"WIG → β": "beta_wig", "WIG → γ": "gamma_wig", "span BM25": "lam",
              "CoNg": "expand", "late interaction": "span"}
    for label, attr in levers.items():
        alone = next(ps for f, ps in fams.items() if label in f and "cue" not in f)
        default = bench.Point()
        assert all(getattr(p, attr) != getattr(default, attr) for p in alone), label


def test_the_recorded_default_is_the_shipped_one() -> None:
    """docs/results/span_cv.json records the point CV chose on all queries; the code ships it."""
    recorded = json.loads((ROOT / "docs" / "results" / "span_cv.json").read_text())["default"]
    assert recorded["beta"] == DEFAULT_OFFLINE_ALPHA
    assert recorded["gamma"] == DEFAULT_SPAN_Z_WEIGHT
    assert recorded["pool"] == DEFAULT_SPAN_POOL and recorded["cue"] is True
    assert not any(recorded[k] for k in ("beta_wig", "gamma_wig", "lam", "expand"))
    assert recorded["span"] == "best"


@pytest.mark.slow
@pytest.mark.corpus
def test_shipped_defaults_reproduce_the_benchmark_on_lhcs() -> None:
    folder = ROOT.parent / "shared" / "eval" / "lhcs_construction"
    if not folder.is_dir():
        pytest.fail(f"{folder} is missing (the corpus tier needs ../shared)")
    from llama_index_car.providers import resolve_embed_model

    _check_reproduces(_bench(), folder, resolve_embed_model(), None)
