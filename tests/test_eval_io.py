"""BEIR and TREC input/output: round trips, tie handling, and errors that name file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_index_car._errors import EvaluationDataError
from llama_index_car.evaluation.io import (
    load_beir,
    rank_items,
    read_trec_qrels,
    read_trec_run,
    strictly_decreasing_scores,
    write_trec_qrels,
    write_trec_run,
)


def _beir(tmp_path: Path, qrels_text: str | None = None) -> Path:
    root = tmp_path / "beir"
    root.mkdir()
    docs = [{"_id": "d1", "title": "배수", "text": "배수시설 설치기준"}, {"_id": "d2", "text": "x"}]
    (root / "corpus.jsonl").write_text(
        "\n".join(json.dumps(d, ensure_ascii=False) for d in docs) + "\n", encoding="utf-8"
    )
    queries = [{"_id": "q1", "text": "배수 기준?"}, {"_id": "q2", "text": "no gold"}]
    (root / "queries.jsonl").write_text(
        "\n".join(json.dumps(q, ensure_ascii=False) for q in queries), encoding="utf-8"
    )
    (root / "qrels.tsv").write_text(
        qrels_text or "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0\n", encoding="utf-8"
    )
    return root


def test_load_beir(tmp_path: Path) -> None:
    ds = load_beir(_beir(tmp_path))
    assert ds.corpus["d1"] == {"title": "배수", "text": "배수시설 설치기준"}
    assert ds.corpus["d2"]["title"] == ""
    assert ds.queries == {"q1": "배수 기준?"}  # q2 has no relevant qrel
    assert ds.qrels == {"q1": {"d1": 1}}
    assert ds.head(1) is ds


def test_load_beir_errors_name_file_and_line(tmp_path: Path) -> None:
    root = _beir(tmp_path, "query-id\tcorpus-id\tscore\nq1\td1\tx\n")
    with pytest.raises(EvaluationDataError, match=r"qrels\.tsv:2: relevance 'x'"):
        load_beir(root)
    (root / "qrels.tsv").write_text("q1\td9\t1\n", encoding="utf-8")
    with pytest.raises(EvaluationDataError, match="'d9', which is not in corpus"):
        load_beir(root)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n{bad json\n')
    with pytest.raises(EvaluationDataError, match=r"corpus\.jsonl:2: invalid JSON"):
        load_beir(root)
    with pytest.raises(EvaluationDataError, match="not a directory"):
        load_beir(tmp_path / "nope")


def test_load_beir_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    root = _beir(tmp_path)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n\n{"text": "b"}\n')
    with pytest.raises(EvaluationDataError, match=r"corpus\.jsonl:3: missing '_id'"):
        load_beir(root)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "x"}\n')
    (root / "queries.jsonl").write_text('\n{"_id": "q1", "text": 7}\n')
    with pytest.raises(EvaluationDataError, match=r"queries\.jsonl:2: field 'text'"):
        load_beir(root)


def test_trec_run_round_trip_keeps_order_and_exact_scores(tmp_path: Path) -> None:
    run = {"q1": {"b": 0.1 + 0.2, "a": 1 / 3, "c": -2.5}, "q2": {"x": 1.0}}
    p = tmp_path / "runs" / "r.trec"
    write_trec_run(run, p, tag="sys")
    lines = p.read_text().splitlines()
    assert lines[0] == f"q1 Q0 a 1 {1 / 3!r} sys"
    assert [ln.split()[2] for ln in lines] == ["a", "b", "c", "x"]
    assert read_trec_run(p) == run


def test_trec_run_ties_written_strictly_decreasing(tmp_path: Path) -> None:
    run = {"q": {"d2": 0.5, "d1": 0.5, "d3": 0.5, "d0": 0.9}}
    p = tmp_path / "r.trec"
    write_trec_run(run, p)
    back = read_trec_run(p)
    order = [d for d, _ in sorted(back["q"].items(), key=lambda kv: -kv[1])]
    assert order == ["d0", "d1", "d2", "d3"]
    assert len(set(back["q"].values())) == 4
    assert all(abs(back["q"][d] - 0.5) < 1e-12 for d in ("d1", "d2", "d3"))


def test_trec_run_depth_and_bad_tokens(tmp_path: Path) -> None:
    p = tmp_path / "r.trec"
    write_trec_run({"q": {f"d{i}": float(i) for i in range(10)}}, p, depth=3)
    assert len(p.read_text().splitlines()) == 3
    with pytest.raises(EvaluationDataError, match="whitespace"):
        write_trec_run({"q 1": {"d": 1.0}}, p)


def test_read_trec_errors(tmp_path: Path) -> None:
    p = tmp_path / "bad.trec"
    p.write_text("q Q0 d 1 0.5 t\nq Q0 d2 2 high t\n")
    with pytest.raises(EvaluationDataError, match=r"bad\.trec:2: score 'high'"):
        read_trec_run(p)
    p.write_text("q Q0 d 1 0.5\n")
    with pytest.raises(EvaluationDataError, match=r"bad\.trec:1: expected 6 fields"):
        read_trec_run(p)
    p.write_text("q Q0 d 1 0.5 t\nq Q0 d 2 0.4 t\n")
    with pytest.raises(EvaluationDataError, match="appears twice"):
        read_trec_run(p)


def test_trec_qrels_round_trip(tmp_path: Path) -> None:
    qrels = {"q2": {"b": 2, "a": 0}, "q1": {"z": 1}}
    p = tmp_path / "q.qrels"
    write_trec_qrels(qrels, p)
    assert p.read_text().splitlines()[0] == "q1 0 z 1"
    assert read_trec_qrels(p) == qrels
    p.write_text("q1 0 z\n")
    with pytest.raises(EvaluationDataError, match=r"q\.qrels:1"):
        read_trec_qrels(p)


def test_rank_items_and_strict_scores() -> None:
    assert rank_items({"b": 1.0, "a": 1.0, "c": 0.0}) == [("a", 1.0), ("b", 1.0), ("c", 0.0)]
    out = strictly_decreasing_scores([("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 0.5)])
    assert [d for d, _ in out] == ["a", "b", "c", "d"]
    assert out[0][1] > out[1][1] > out[2][1] > out[3][1] == 0.5
    with pytest.raises(EvaluationDataError, match="NaN"):
        rank_items({"a": float("nan")})


def test_ranx_reads_our_tied_run_in_our_order(tmp_path: Path) -> None:
    ranx = pytest.importorskip("ranx")
    run = {"q": {f"d{i}": 1.0 for i in range(8)}}
    p = tmp_path / "r.trec"
    write_trec_run(run, p)
    r = ranx.Run.from_file(str(p), kind="trec")
    for gold in ("d0", "d5"):
        res = ranx.evaluate(ranx.Qrels({"q": {gold: 1}}), r, "mrr")
        assert res == pytest.approx(1 / (int(gold[1]) + 1))
