"""``evaluation.span_eval``: the span ranker's order over a node's spans (places), on the demo
corpus's table nodes (rows and cells), and the per-system query selection."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

from llama_index_car.demo import demo_corpus_dir
from llama_index_car.evaluation.span_eval import SpanRanker, evaluate_spans, gold_in_top
from llama_index_car.postprocessors import CriterionSpanPostprocessor
from llama_index_car.postprocessors.criterion_spans import CRITERION_SPANS_KEY
from llama_index_car.span_index import SpanIndex
from tests.fakes.embeddings import HashedBigramEmbedding


@pytest.fixture(scope="module")
def table_nodes() -> list:
    reader, parser = HWPXReader(), HWPXNodeParser()
    nodes = []
    for f in sorted(demo_corpus_dir().glob("*.hwpx")):
        nodes.extend(parser.get_nodes_from_documents(reader.load_data(f)))
    return [n for n in nodes if n.metadata.get("cells")]


def test_rank_orders_every_place_as_the_postprocessor_does(table_nodes: list) -> None:
    embed = HashedBigramEmbedding()
    index = SpanIndex.from_nodes(table_nodes, embed)
    ranker = SpanRanker(index, embed)
    post = CriterionSpanPostprocessor(index, embed, top_n=256)
    assert table_nodes
    for node in table_nodes:
        query = "설치 간격 기준 " + node.metadata.get("section_title", "")
        order = ranker.rank(node, query)
        spans = index.spans_of(node.node_id)
        assert sorted(order) == list(range(len(spans)))
        items = post.postprocess_nodes([NodeWithScore(node=node, score=1.0)],
                                       query_bundle=QueryBundle(query_str=query))[0]
        items = items.node.metadata[CRITERION_SPANS_KEY]
        for place, item in zip(order, items, strict=True):
            span = spans[place]
            if item["kind"] == "sentence":
                assert (span.kind, span.start, span.end) == ("sentence", item["start"], item["end"])
            else:  # a row or one of its cells: the row's place
                assert span.kind == "row"
                assert (span.table_index, span.row) == (item["table_index"], item["row"])


def test_vector_only_weights_order_by_span_cosine(table_nodes: list) -> None:
    embed = HashedBigramEmbedding()
    node = max(table_nodes, key=lambda n: len(n.get_content()))
    index = SpanIndex.from_nodes([node], embed)
    ranker = SpanRanker(index, embed)
    default = ranker.rank(node, "기준 이상")
    ranker.set_weights((1.0, 0.0, 0.0))
    assert ranker.weights == (1.0, 0.0, 0.0)
    cos = index.span_cosines(embed.get_query_embedding("기준 이상"), [node.node_id])[0]
    ordered = [float(cos[i]) for i in ranker.rank(node, "기준 이상")]
    assert ordered == sorted(ordered, reverse=True)
    ranker.set_weights((1.0, 0.3, 0.1))
    assert ranker.rank(node, "기준 이상") == default


def test_gold_selection_per_system() -> None:
    assert gold_in_top({"a": 1.0, "b": 1.0}, {"b": 1}, 1) is None  # tie: "a" first by id
    assert gold_in_top({"a": 1.0, "b": 1.0}, {"b": 1}, 2) == "b"
    assert gold_in_top({"a": 2.0}, {"a": 0}, 5) is None  # judged non-relevant
    text = ("경사는 토질 조건에 따라 1:1.5 이하로 하여야 하며 필요시 완화하도록 한다. "
            "배수시설은 비탈면 상단과 소단에 설치하여 우수가 흐르지 않게 하여야 한다.")
    nodes = [TextNode(id_="d1", text=text), TextNode(id_="d2", text="다른 문서의 내용입니다.")]
    res = evaluate_spans(
        nodes, {"q1": "경사 기준"}, {"q1": {"d1": 1}}, {"q1": "경사는 1:1.5 이하"},
        {"top": {"q1": {"d1": 2.0, "d2": 1.0}}, "missed": {"q1": {"d2": 2.0}}},
        HashedBigramEmbedding(), morphemes=lambda s: s.split(),
    )
    assert res["systems"]["top"]["qids"] == ["q1"]
    assert res["systems"]["missed"]["skipped"]["not_retrieved"] == 1
    assert res["queries"]["q1"]["best"] == [0] and res["queries"]["q1"]["n_spans"] == 2
