"""``llama-car demo``: the bundled corpus, the generator and the rank table, against oracles.

The demo is run once (in-process, ``--json --keep``). Every reported rank is recomputed from
the kept index folder with independent code: numpy cosine over the persisted vectors (dense),
``rank_bm25`` over Kiwi tokens (BM25), the weighted-RRF formula written out here (hybrid) and
the offline CAR's formula recomputed from those oracles (CAR). The demo's numbers are whatever
they are; these tests check they are computed correctly, not that any system wins.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_index_car._persist import live_dir
from llama_index_car.cli import main
from llama_index_car.cli.demo import gold_rank, print_table, reciprocal_rank, summarise
from llama_index_car.demo.loader import (
    DEMO_CORPUS_DIR,
    DemoQuestion,
    demo_corpus_files,
    load_demo_questions,
)
from llama_index_car.demo.spec import DOCUMENTS, QUESTIONS

REPO = Path(__file__).resolve().parents[1]
RRF_K = 60


# ----------------------------------------------------------------------------- corpus + generator
def _generator() -> Any:
    """``scripts/make_demo_corpus.py`` loaded as a module (it is a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_demo_corpus", REPO / "scripts" / "make_demo_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundled_corpus_matches_the_generator(capsys: pytest.CaptureFixture[str]) -> None:
    """The committed HWPX files and questions are exactly what the generator writes."""
    assert _generator().main(["--check"]) == 0, capsys.readouterr().err


def test_generator_is_deterministic_and_check_detects_drift(tmp_path: Path) -> None:
    gen = _generator()
    assert all(gen.build_document(d) == gen.build_document(d) for d in DOCUMENTS)
    out, questions = tmp_path / "corpus", tmp_path / "q.jsonl"
    args = ["--out", str(out), "--questions", str(questions)]
    assert gen.main(args) == 0
    assert sorted(p.name for p in out.glob("*.hwpx")) == sorted(d.file_name for d in DOCUMENTS)
    assert gen.main([*args, "--check"]) == 0
    (out / DOCUMENTS[0].file_name).write_bytes(b"stale")
    assert gen.main([*args, "--check"]) == 1


def test_corpus_shape_and_size() -> None:
    files = demo_corpus_files()
    assert 8 <= len(files) <= 12
    assert sum(p.stat().st_size for p in files) < 200_000  # small enough to commit
    kinds = [s.kind for d in DOCUMENTS for s in d.sections]
    assert kinds.count("plan") > kinds.count("standard") > 0 and "distractor" in kinds
    # merged cells are present in the bundled tables
    assert any(t.spans for d in DOCUMENTS for s in d.sections for t in s.tables)


def test_questions_file_mirrors_spec() -> None:
    loaded = load_demo_questions()
    assert [q.qid for q in loaded] == [q.qid for q in QUESTIONS]
    assert {q.style for q in loaded} == {"formal", "everyday"}
    for q, spec in zip(loaded, QUESTIONS, strict=True):
        assert (q.question, q.gold_file, q.gold_section) == (
            spec.question,
            spec.gold_file,
            spec.gold_section,
        )
        assert (DEMO_CORPUS_DIR / q.gold_file).is_file()


def test_everyday_questions_do_not_name_the_criterion() -> None:
    """Everyday wording never uses the criterion term (…기준) that the gold body states."""
    everyday = [q for q in QUESTIONS if q.style == "everyday"]
    assert len(everyday) >= 5
    for q in everyday:
        assert "기준" not in q.question, q.qid
    spec_bodies = {
        (d.file_name, s.title): " ".join(s.paragraphs + s.closing)
        + " ".join(c for t in s.tables for row in t.rows for c in row)
        for d in DOCUMENTS
        for s in d.sections
    }
    for q in QUESTIONS:  # every gold body states the criterion the question seeks
        assert q.criterion in spec_bodies[(q.gold_file, q.gold_section)], q.qid


def test_bad_question_file_is_named(tmp_path: Path) -> None:
    from llama_index_car._errors import EvaluationDataError

    bad = tmp_path / "q.jsonl"
    bad.write_text('{"qid": "x1", "question": "질문"}\n', encoding="utf-8")
    with pytest.raises(EvaluationDataError, match=r"q\.jsonl:1: missing field\(s\) gold_file"):
        load_demo_questions(bad)


# ----------------------------------------------------------------------------- pure helpers
class _Hit:
    def __init__(self, file_name: str, section: str) -> None:
        class _N:
            metadata = {"file_name": file_name, "section_title": section}

        self.node = _N()


def test_gold_rank_and_summary_formulas() -> None:
    hits = [_Hit("a.hwpx", "x"), _Hit("b.hwpx", "y"), _Hit("b.hwpx", "y")]
    assert gold_rank(hits, "b.hwpx", "y") == 2
    assert gold_rank(hits, "b.hwpx", "z") is None
    ranks: dict[str, dict[str, int | None]] = {
        "q1": {"dense": 1, "bm25": None, "hybrid": 3, "car": 6},
        "q2": {"dense": 4, "bm25": 2, "hybrid": 1, "car": 5},
    }
    s = summarise(ranks, hit_k=5)
    assert s["dense"]["mrr"] == pytest.approx((1 / 1 + 1 / 4) / 2)
    assert s["bm25"]["mrr"] == pytest.approx((0 + 1 / 2) / 2)
    assert s["car"]["hit@5"] == pytest.approx(0.5)
    assert reciprocal_rank(None) == 0.0


def test_print_table_layout(capsys: pytest.CaptureFixture[str]) -> None:
    qs = [DemoQuestion("d01", "도랑 깊이?", "a.hwpx", "노측 배수시설 확충방안", "", "everyday")]
    ranks: dict[str, dict[str, int | None]] = {
        "d01": {"dense": 17, "bm25": None, "hybrid": 4, "car": 2}
    }
    print_table(qs, ranks, summarise(ranks, 5), 5, {"d01": "측구 설치기준"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["qid", "style", "dense", "bm25", "hybrid", "car"]
    assert out[1].split()[:6] == ["d01", "everyday", "17", "—", "4", "2"]
    assert "CAR hypothesis: 측구 설치기준" in out[2]
    assert out[-2].split() == ["MRR", "0.059", "0.000", "0.250", "0.500"]


# ----------------------------------------------------------------------------- the run
@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    keep = tmp_path_factory.mktemp("demo") / "index"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(["demo", "--json", "--keep", str(keep)])
    assert rc == 0, stderr.getvalue()
    return {"payload": json.loads(stdout.getvalue()), "keep": keep, "log": stderr.getvalue()}


@pytest.fixture(scope="module")
def oracle_data(demo: dict[str, Any]) -> dict[str, Any]:
    """Node ids, section keys, vectors and embed texts read straight from the kept folder."""
    from llama_index.core.schema import MetadataMode

    keep: Path = demo["keep"]
    from llama_index_car.folder.load import read_vectors

    stored = read_vectors(keep)
    vectors = {"embedding_dict": stored}
    ids = sorted(stored)
    from llama_index.core.storage.docstore.utils import json_to_doc

    from llama_index_car._records import RecordFile

    rf = RecordFile.open(live_dir(keep), "nodes")
    bm25_nodes = [json_to_doc(rf.json(i)["n"]) for i in range(len(rf))]
    nodes = {n.node_id: n for n in bm25_nodes}
    span_rf = RecordFile.open(live_dir(keep), "spans")
    offsets = np.load(live_dir(keep) / "spans.rows.npy", allow_pickle=False).tolist()
    spans = {
        "rows": {span_rf.key(i): (offsets[i], offsets[i + 1]) for i in range(len(span_rf))},
        "vectors": np.load(live_dir(keep) / "spans.vectors.npy", allow_pickle=False),
    }
    return {
        "ids": ids,
        "spans": spans,
        "section": {
            i: (nodes[i].metadata["file_name"], nodes[i].metadata["section_title"]) for i in ids
        },
        "matrix": np.asarray([vectors["embedding_dict"][i] for i in ids]),
        "texts": [nodes[i].get_content(MetadataMode.EMBED) for i in ids],
    }


def _dense_order(data: dict[str, Any], text: str) -> list[str]:
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding  # the default

    q = np.asarray(MultilingualE5Embedding().get_query_embedding(text))
    m = data["matrix"]
    cos = m @ q / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return [
        data["ids"][i] for i in sorted(range(len(cos)), key=lambda i: (-cos[i], data["ids"][i]))
    ]


def _bm25_order(data: dict[str, Any], text: str) -> list[str]:
    from rank_bm25 import BM25Okapi

    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    tok = KiwiTokenizer()
    if "bm25" not in data:
        data["bm25"] = BM25Okapi(
            [tok.tokenize(t) for t in data["texts"]], k1=1.5, b=0.75, epsilon=0.25
        )
    scores = data["bm25"].get_scores(tok.tokenize(text))
    keep = [i for i in range(len(scores)) if scores[i] > 0]
    return [data["ids"][i] for i in sorted(keep, key=lambda i: (-scores[i], data["ids"][i]))]


def _rrf_order(dense: list[str], lexical: list[str]) -> list[str]:
    """score = 0.5 / (60 + rank_dense) + 0.5 / (60 + rank_lexical), 1-based, absent = 0."""
    score: dict[str, float] = {}
    for ranking in (dense, lexical):
        for r, node_id in enumerate(ranking, start=1):
            score[node_id] = score.get(node_id, 0.0) + 0.5 / (RRF_K + r)
    return sorted(score, key=lambda i: (-score[i], i))


def _section_rank(data: dict[str, Any], order: list[str], q: dict[str, Any]) -> int | None:
    gold = (q["gold_file"], q["gold_section"])
    return next((r for r, i in enumerate(order, start=1) if data["section"][i] == gold), None)


def test_demo_payload_shape(demo: dict[str, Any]) -> None:
    p = demo["payload"]
    assert p["files"] == len(DOCUMENTS) and not p["failures"]
    assert p["nodes"] == sum(len(d.sections) for d in DOCUMENTS)
    assert [q["qid"] for q in p["questions"]] == [q.qid for q in QUESTIONS]
    for q in p["questions"]:
        for system in ("dense", "bm25", "hybrid", "car"):
            r = q["ranks"][system]
            assert r is None or 1 <= r <= p["nodes"], (q["qid"], system, r)
        assert q["car_hypothesis"] == "(none)" and "car_feedback" not in q  # offline: none
    assert "10 files → 10 documents" in demo["log"]


def test_demo_summary_is_mean_reciprocal_rank(demo: dict[str, Any]) -> None:
    p = demo["payload"]
    for system in ("dense", "bm25", "hybrid", "car"):
        rr = [0.0 if q["ranks"][system] is None else 1 / q["ranks"][system] for q in p["questions"]]
        assert p["summary"][system]["mrr"] == pytest.approx(sum(rr) / len(rr))


def test_demo_dense_bm25_hybrid_ranks_match_oracles(
    demo: dict[str, Any], oracle_data: dict[str, Any]
) -> None:
    for q in demo["payload"]["questions"]:
        dense = _dense_order(oracle_data, q["question"])
        lexical = _bm25_order(oracle_data, q["question"])
        assert q["ranks"]["dense"] == _section_rank(oracle_data, dense, q), q["qid"]
        assert q["ranks"]["bm25"] == _section_rank(oracle_data, lexical, q), q["qid"]
        hybrid = _rrf_order(dense, lexical)
        assert q["ranks"]["hybrid"] == _section_rank(oracle_data, hybrid, q), q["qid"]


def _best_spans(data: dict[str, Any], question: str, head: list[str]) -> dict[str, float]:
    """Each node's best span cosine (numpy over the folder's ``span_vectors.npy`` rows of
    that node); nodes without spans are absent."""
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    q = np.asarray(MultilingualE5Embedding().get_query_embedding(question), dtype=np.float32)
    q /= np.linalg.norm(q)
    spans = data["spans"]
    best: dict[str, float] = {}
    for node_id in head:
        lo, hi = spans["rows"][node_id]
        if hi > lo:
            best[node_id] = float((spans["vectors"][lo:hi].astype(np.float32) @ q).max())
    return best


def _span_z_order(
    data: dict[str, Any], question: str, fused: list[tuple[str, float]], weight: float,
    pool: int,
) -> list[str]:
    """The span re-ranking written out: over the first ``pool`` of the fused (id, score)
    list, score + ``weight`` · scipy ``zscore`` of the best span cosines (a node without
    spans: the lowest z), ties by fused position; the rest after."""
    from scipy.stats import zscore

    head = [d for d, _ in fused[:pool]]
    tail = [d for d, _ in fused[pool:]]
    base = dict(fused[:pool])
    best = _best_spans(data, question, head)
    scored = [d for d in head if d in best]
    z = dict(zip(scored, zscore([best[d] for d in scored]), strict=True))
    floor = min(z.values())
    total = {d: base[d] + weight * z.get(d, floor) for d in head}
    return sorted(head, key=lambda d: (-total[d], head.index(d))) + tail


def _z_fusion(lists: list[dict[str, float]], weights: list[float]) -> list[tuple[str, float]]:
    """Σ w_i · scipy ``zscore`` of each channel's scores (absent: the channel's lowest z),
    sorted by score then id."""
    from scipy.stats import zscore

    zs = []
    for scores in lists:
        ids = list(scores)
        flat = len(set(scores.values())) <= 1  # no spread: every z is 0 (an empty list too)
        z = [0.0] * len(ids) if flat else zscore([scores[i] for i in ids])
        zs.append(dict(zip(ids, z, strict=True)))
    every = {d for z in zs for d in z}
    total = {d: sum(w * z.get(d, min(z.values(), default=0.0))
                    for w, z in zip(weights, zs, strict=True))
             for d in every}
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))


def test_demo_car_ranks_match_the_oracle(
    demo: dict[str, Any], oracle_data: dict[str, Any]
) -> None:
    """Offline CAR = β·z(dense cosines) + (1 − β)·z(BM25 scores) (scipy ``zscore`` over each
    channel's list; absent: its lowest z), then, for a question, over the first 50:
    + γ·z(best span cosine)."""
    from llama_index_car.postprocessors.criterion_spans import question_cue
    from llama_index_car.postprocessors.span_rerank import DEFAULT_SPAN_POOL
    from llama_index_car.retrievers.criterion_aware import (
        DEFAULT_OFFLINE_ALPHA,
        DEFAULT_SPAN_Z_WEIGHT,
    )

    for q in demo["payload"]["questions"]:
        dense = _dense_scores(oracle_data, q["question"])
        lexical = _bm25_scores(oracle_data, q["question"])
        fused = _z_fusion([dense, lexical], [DEFAULT_OFFLINE_ALPHA, 1 - DEFAULT_OFFLINE_ALPHA])
        car = [d for d, _ in fused]
        if question_cue(q["question"]):
            car = _span_z_order(oracle_data, q["question"], fused, DEFAULT_SPAN_Z_WEIGHT,
                                DEFAULT_SPAN_POOL)
        assert q["ranks"]["car"] == _section_rank(oracle_data, car, q), q["qid"]


def _top(scores: dict[str, float], n: int) -> list[str]:
    return sorted(scores, key=lambda d: (-scores[d], d))[:n]


def _dense_scores(data: dict[str, Any], text: str) -> dict[str, float]:
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    q = np.asarray(MultilingualE5Embedding().get_query_embedding(text))
    m = data["matrix"]
    cos = m @ q / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return {data["ids"][i]: float(cos[i]) for i in range(len(cos))}


def _bm25_scores(data: dict[str, Any], text: str) -> dict[str, float]:
    _bm25_order(data, text)  # builds data["bm25"]
    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    scores = data["bm25"].get_scores(KiwiTokenizer().tokenize(text))
    return {data["ids"][i]: float(x) for i, x in enumerate(scores) if x > 0}


def _weighted_rrf_order(rankings: list[list[str]], weights: list[float]) -> list[str]:
    score: dict[str, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for r, node_id in enumerate(ranking, start=1):
            score[node_id] = score.get(node_id, 0.0) + w / (RRF_K + r)
    return sorted(score, key=lambda i: (-score[i], i))


def test_demo_keep_folder_is_queryable(
    demo: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["query", str(demo["keep"]), "졸음쉼터 배치기준", "--retriever", "bm25"])
    out = capsys.readouterr().out
    assert rc == 0 and " 1. 졸음쉼터 설치 확충방안" in out


def test_demo_refuses_foreign_keep_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    rc = main(["demo", "--keep", str(tmp_path)])
    assert rc == 2 and "not an index" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.slow
def test_demo_cold_start_in_a_fresh_process(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``python -m llama_index_car demo`` in a fresh process (and an empty embedding cache)
    prints the table and its timing.

    The wall time is printed (``pytest -s``) and reported in the README, not asserted."""
    env = dict(os.environ)
    env["LLAMA_CAR_CACHE"] = str(tmp_path / "cold-cache")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "readers" / "llama-index-readers-hwpx"), env.get("PYTHONPATH", "")]
    )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "llama_index_car", "demo"],
        capture_output=True, text=True, timeout=180, env=env, cwd=REPO,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    assert "summary: MRR dense" in proc.stdout and "elapsed:" in proc.stdout
    with capsys.disabled():
        print(f"\ncold-start demo: {elapsed:.1f} s wall")


def test_demo_with_anthropic_but_no_key_exits_2_before_indexing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rc = main(["demo", "--llm", "anthropic"])
    out, err = capsys.readouterr()
    assert rc == 2 and "ANTHROPIC_API_KEY" in err and len(err.strip().splitlines()) == 1
    assert out == ""  # refused up front: nothing was indexed, nothing answered
