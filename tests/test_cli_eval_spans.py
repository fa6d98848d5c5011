"""``llama-car eval --spans`` end to end on a tiny in-code BEIR set whose queries carry answers.

The embedding is the hashed character-bigram fake of ``tests/test_cli_eval.py``; every figure
of ``spans.json`` is recomputed here from the gold passages' spans, the reference answers and
the span ranker's order (``CriterionSpanPostprocessor``), independently of the CLI's code path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_index_car.cli import main
from tests.test_cli_eval import CharBigramEmbedding

# every passage has several sentences of >= 40 characters (spans.MIN_CHARS), so it has
# several spans; the answer restates one of them
DOCS = [
    ("d1", "비탈면 경사", "비탈면의 경사는 토질 조건에 따라 1:1.5 이하로 하여야 하며 필요시 완화한다. "
     "배수시설은 비탈면 상단과 소단에 설치하여 우수가 비탈면으로 흐르지 않게 한다. "
     "식생 보호공은 시공 후 한 계절 이상 유지관리하여 활착을 확인하여야 한다."),
    ("d2", "방호울타리", "방호울타리의 높이는 노면으로부터 0.8m 이상으로 설치하여야 하며 연속되게 한다. "
     "단부 처리는 충격흡수시설을 두거나 지면으로 매립하는 방식으로 처리하도록 한다. "
     "도장은 내후성이 있는 재료를 사용하여 반사성능이 저하되지 않도록 하여야 한다."),
    ("d3", "터널 조명", "터널 입구부 조명은 설계속도에 따른 휘도 기준을 만족하도록 설계하여야 한다. "
     "기본부 조명은 교통량과 설계속도를 고려하여 평균 노면휘도를 정하도록 한다. "
     "비상조명은 정전 시에도 30분 이상 점등이 가능하도록 예비전원을 갖추어야 한다."),
    ("d4", "교량 받침", "교량 받침은 상부구조의 하중을 하부구조에 안전하게 전달할 수 있어야 한다. "
     "받침의 교체를 위하여 잭업 공간을 확보하고 점검통로를 설치하도록 하여야 한다. "
     "고무받침은 오존 열화에 대한 저항성을 시험으로 확인하여 사용하도록 한다."),
    ("d5", "포장 균열", "아스팔트 포장의 균열은 폭에 따라 실링 또는 패칭으로 보수하도록 한다."),
]
QUERIES = [
    ("q1", "비탈면 경사는 얼마 이하로 해야 하나요?", "d1",
     "비탈면의 경사는 1:1.5 이하로 하여야 합니다."),
    ("q2", "터널 비상조명은 몇 분 동안 켜져야 하나요?", "d3",
     "비상조명은 정전 시에도 30분 이상 점등되어야 하며 예비전원을 갖추어야 합니다."),
    ("q3", "교량 받침 교체를 위한 공간은?", "d4",
     "받침 교체를 위하여 잭업 공간과 점검통로를 확보합니다."),
    ("q4", "방호울타리 높이 기준", "d2", None),  # no answer: skipped
    ("q5", "포장 균열 보수 방법", "d5", "균열은 실링 또는 패칭으로 보수합니다."),  # one span
]


def _beir(root: Path, with_answers: bool = True) -> Path:
    root.mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc_id, title, text in DOCS:
            fh.write(json.dumps({"_id": doc_id, "title": title, "text": text},
                                ensure_ascii=False) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text, _, answer in QUERIES:
            row: dict[str, object] = {"_id": qid, "text": text}
            if with_answers and answer is not None:
                row["metadata"] = {"answer": answer}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, _, d, _ in QUERIES]
    (root / "qrels.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _run(data: Path, out: Path, cache: Path) -> int:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            "llama_index_car.providers.resolve_embed_model", lambda name: CharBigramEmbedding()
        )
        return main(["eval", str(data), "--systems", "bm25,hybrid,car", "--spans",
                     "--out", str(out), "--cache-dir", str(cache), "--no-progress"])


@pytest.fixture(scope="module")
def spans_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    base = tmp_path_factory.mktemp("spans")
    data = _beir(base / "beir")
    assert _run(data, base / "out", base / "cache") == 0
    yield {"result": json.loads((base / "out" / "spans.json").read_text()),
           "md": (base / "out" / "spans.md").read_text(), "data": data}


def test_spans_outputs_and_skips(spans_run: dict[str, object]) -> None:
    res = spans_run["result"]
    assert isinstance(res, dict)
    assert res["k"] == 10 and res["weights"] == [1.0, 0.3, 0.1]
    assert res["n_answers"] == 4
    assert set(res["systems"]) == {"bm25", "hybrid", "car"}
    for entry in res["systems"].values():
        skipped = entry["skipped"]
        # five passages: every gold is in every system's top 10
        assert skipped == {"no_answer": 1, "not_retrieved": 0, "one_span": 1, "no_overlap": 0}
        assert entry["summary"]["n"] + sum(skipped.values()) == len(QUERIES)
    assert set(res["queries"]) == {"q1", "q2", "q3"}
    md = spans_run["md"]
    assert isinstance(md, str) and "| beir | car | 3 |" in md and "--spans" in md


def test_spans_figures_recomputed(spans_run: dict[str, object]) -> None:
    """Best sets from the answers' morphemes, rankings from the postprocessor, rates from both."""
    from llama_index.core.schema import NodeWithScore, QueryBundle

    from llama_index_car.embeddings.cache import CachedEmbedding, EmbeddingCache
    from llama_index_car.evaluation.overlap import surface_content_morphemes
    from llama_index_car.evaluation.runner import load_eval_data
    from llama_index_car.postprocessors.criterion_spans import CriterionSpanPostprocessor
    from llama_index_car.span_index import SpanIndex
    from llama_index_car.spans import node_spans

    res = spans_run["result"]
    assert isinstance(res, dict)
    data = load_eval_data(spans_run["data"])  # type: ignore[arg-type]
    nodes = {n.node_id: n for n in data.nodes}
    embed = CachedEmbedding(EmbeddingCache(Path(str(spans_run["data"])).parent / "cache",
                                           CharBigramEmbedding()))
    answers = {q: a for q, _, _, a in QUERIES if a is not None}
    top1, first = [], []
    for qid, query, gold, _ in QUERIES[:3]:
        rec = res["queries"][qid]
        node = nodes[gold]
        spans = node_spans(node)
        amorph = set(surface_content_morphemes(answers[qid]))
        shares = [len(amorph & set(surface_content_morphemes(s.text))) / len(amorph)
                  for s in spans]
        best = {i for i, x in enumerate(shares) if x == max(shares)}
        assert rec["n_spans"] == len(spans) >= 2
        assert set(rec["best"]) == best
        post = CriterionSpanPostprocessor(SpanIndex.from_nodes([node], embed), embed, top_n=50)
        out = post.postprocess_nodes([NodeWithScore(node=node, score=1.0)],
                                     query_bundle=QueryBundle(query_str=query))
        starts = [s.start for s in spans]  # body sentences only: a span is its start offset
        order = [starts.index(i["start"]) for i in out[0].node.metadata["criterion_spans"]]
        assert rec["ranking"] == order
        top1.append(order[0] in best)
        first.append(0 in best)
    summary = res["systems"]["car"]["summary"]
    assert summary["top1"] == pytest.approx(sum(top1) / 3)
    assert summary["first"] == pytest.approx(sum(first) / 3)


def test_spans_on_a_set_without_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _beir(tmp_path / "beir", with_answers=False)
    assert _run(data, tmp_path / "out", tmp_path / "cache") == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("spans:")]
    assert lines == ["spans: beir has no reference answers (queries' metadata.answer); "
                     "span evaluation skipped"]
    assert not (tmp_path / "out" / "spans.json").exists()
