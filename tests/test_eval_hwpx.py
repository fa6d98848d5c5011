"""HWPX folder + QA file: gold sections and cell coordinates resolve to nodes; eval runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core.embeddings import MockEmbedding

from llama_index_car._errors import EvaluationDataError
from llama_index_car.evaluation.runner import EvalConfig, load_hwpx_eval, run_evaluation


def _qa(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "qa.jsonl"
    p.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return p


@pytest.mark.corpus
def test_gold_section_and_cell_resolve(shared_dir: Path, tmp_path: Path) -> None:
    folder = shared_dir / "corpus" / "hwpx"
    qa = _qa(tmp_path, [
        {"id": "sec", "question": "이수 과목과 교육 시간은?",
         "gold": [{"file": "edu_completion_cert.hwpx",
                   "section_title": "● 이수 과목 및 교육 이수 시간"}]},
        {"id": "cell", "question": "과목명", "file": "edu_completion_cert.hwpx",
         "table": 1, "row": 0, "col": 0},
    ])
    data = load_hwpx_eval(folder, qa)
    assert set(data.queries) == {"sec", "cell"}
    sec_nodes = {n.node_id: n for n in data.nodes}
    for qid in ("sec", "cell"):
        golds = list(data.qrels[qid])
        assert golds and all(g.startswith("edu_completion_cert-") for g in golds)
    assert all(
        sec_nodes[g].metadata["section_title"] == "● 이수 과목 및 교육 이수 시간"
        for g in data.qrels["sec"]
    )
    out = run_evaluation(
        data, EvalConfig(systems=("bm25", "dense"), show_progress=False),
        MockEmbedding(embed_dim=8), cache_dir=tmp_path / "cache",
    )
    assert out.results["systems"]["bm25"]["all"]["n"] == 2
    assert out.results["dataset"]["source"] == "hwpx"


@pytest.mark.corpus
def test_unresolvable_gold_names_the_line(shared_dir: Path, tmp_path: Path) -> None:
    folder = shared_dir / "corpus" / "hwpx"
    qa = _qa(tmp_path, [
        {"question": "q", "gold": {"file": "edu_completion_cert.hwpx", "section_title": "없음"}},
    ])
    with pytest.raises(EvaluationDataError, match=r"qa\.jsonl:1: gold .* matches no node"):
        load_hwpx_eval(folder, qa)
    qa = _qa(tmp_path, [{"question": "q", "gold": {"file": "missing.hwpx", "table": 0,
                                                   "row": 0, "col": 0}}])
    with pytest.raises(EvaluationDataError, match="missing.hwpx"):
        load_hwpx_eval(folder, qa)


def test_bundled_demo_corpus_and_questions(tmp_path: Path) -> None:
    """The package's demo HWPX corpus with its question file (gold_file/gold_section keys)."""
    root = Path(__file__).resolve().parents[1] / "llama_index_car" / "data"
    data = load_hwpx_eval(root / "demo_corpus", root / "demo_questions.jsonl")
    assert len(data.queries) == 14 and all(data.qrels[q] for q in data.queries)
    out = run_evaluation(
        data, EvalConfig(systems=("bm25",), show_progress=False),
        MockEmbedding(embed_dim=8), cache_dir=tmp_path / "cache",
    )
    assert out.results["systems"]["bm25"]["all"]["mrr"] > 0.5


def test_a_bm25_only_evaluation_embeds_nothing(tmp_path: Path) -> None:
    """Issue 37, item 14: ``llama-car eval --systems bm25`` embedded every text (404 s with
    e5 on autorag_ko, cold). Only systems with a dense channel need vectors; the positive
    control (``bm25,dense``) embeds the corpus and the queries."""
    from tests.fakes.embeddings import VecEmbedding

    class Counting(VecEmbedding):
        model_name: str = "counting-4"
        texts: list[str] = []

        def _vec(self, text: str) -> list[float]:
            self.texts.append(text)
            return [1.0, float(len(text)), float(text.count(" ")), 1.0]

    root = Path(__file__).resolve().parents[1] / "llama_index_car" / "data"
    data = load_hwpx_eval(root / "demo_corpus", root / "demo_questions.jsonl")
    emb = Counting()
    bm25 = run_evaluation(data, EvalConfig(systems=("bm25",), show_progress=False), emb,
                          cache_dir=tmp_path / "cache")
    assert emb.texts == []
    assert bm25.results["systems"]["bm25"]["all"]["mrr"] > 0.5
    both = run_evaluation(data, EvalConfig(systems=("bm25", "dense"), show_progress=False),
                          emb, cache_dir=tmp_path / "cache")
    assert len(emb.texts) >= len(data.nodes) + len(data.queries)
    assert both.results["systems"]["bm25"] == bm25.results["systems"]["bm25"]
