"""CAR and the hybrid over a ``VectorStoreIndex``: snapshots, updates, filters, persistence.

Small in-code corpus, in-memory ``SimpleVectorStore`` and a deterministic hashed-bigram
embedding; the real stores are exercised in ``tests/test_stores.py``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Settings, StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_car import (
    ConfigurationError,
    CriterionAwareRetriever,
    EmptyIndexError,
    KiwiBM25Retriever,
    OfflineCriterionRetriever,
)
from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever
from tests.fakes.embeddings import HashedBigramEmbedding

TEXTS = [
    ("a", "배수시설 설치기준은 강우강도를 고려한다.", "drain.hwpx"),
    ("b", "배수시설 설치기준에 따라 집수정 간격을 정한다.", "drain.hwpx"),
    ("c", "방호울타리 설치기준은 설계속도에 따른다.", "guard.hwpx"),
    ("d", "방호울타리 성능기준을 만족하여야 한다.", "guard.hwpx"),
    ("e", "터널 환기설비 설계기준은 교통량에 따른다.", "tunnel.hwpx"),
    ("f", "터널 조명 설계기준은 입구부 휘도를 기준으로 한다.", "tunnel.hwpx"),
]
NEW = TextNode(id_="n", text="교량 점검통로 설치기준은 교량 형식에 따른다.",
               metadata={"file_name": "bridge.hwpx"})


def _nodes() -> list[TextNode]:
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo

    return [
        TextNode(id_=i, text=t, metadata={"file_name": f},
                 relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f)})
        for i, t, f in TEXTS
    ]


def _index(nodes: list[TextNode]) -> VectorStoreIndex:
    return VectorStoreIndex(nodes, embed_model=HashedBigramEmbedding())


def _car(**kw: Any) -> CriterionAwareRetriever:
    nodes = _nodes()
    return CriterionAwareRetriever.from_defaults(
        index=_index(nodes), nodes=nodes, similarity_top_k=6, pool_top_k=6,
        embed_model=HashedBigramEmbedding(), **kw,
    )


def _ids(hits: Any) -> list[str]:
    return [h.node.node_id for h in hits]


def test_insert_and_delete_reach_both_channels() -> None:
    car = _car()
    car.insert_nodes([NEW])
    hit = car.retrieve("교량 점검통로 설치기준")[0]
    assert hit.node.node_id == "n"
    channels = hit.node.metadata["car_explain"]["channels"]
    assert channels["dense"]["rank"] == 1 and channels["lexical"]["rank"] == 1
    assert "n" in {n.node_id for n in car.lexical_retriever.nodes}
    car.delete_ref_doc("guard.hwpx")
    for q in ("방호울타리 설치기준", "교량 점검통로 설치기준"):
        assert not {"c", "d"} & set(_ids(car.retrieve(q)))
    assert not {"c", "d"} & set(_ids(car.index.as_retriever(similarity_top_k=10).retrieve("방호울타리")))
    car.delete_nodes(["n"])
    assert "n" not in _ids(car.retrieve("교량 점검통로 설치기준"))
    with pytest.raises(ConfigurationError, match="unknown node ids"):
        car.delete_nodes(["zzz"])


def test_offline_car_persists_no_hypothesizer(tmp_path: Path) -> None:
    """Offline CAR learns nothing at index time: persist writes BM25 and the config only, and
    the reloaded retriever is the offline configuration again (feedback channel included)."""
    car = _car(feedback_scale=0.7)
    assert car.hypothesizer is None and car.feedback_scale > 0
    car.persist(tmp_path / "car")
    assert not list(tmp_path.rglob("hypothesizer"))
    again = CriterionAwareRetriever.from_persist_dir(tmp_path / "car", index=car.index)
    assert again.hypothesizer is None and again.feedback_scale == car.feedback_scale
    for q in ("배수시설 설치기준", "터널 조명"):
        assert _ids(again.retrieve(q)) == _ids(car.retrieve(q))


def test_a_query_in_flight_keeps_its_snapshot() -> None:
    """Readers never see half an update: a pinned query keeps the old state for both
    channels; the store deletion waits for it; the next query sees the new state."""
    car = _car()
    with car._pinned():
        car_thread = threading.Thread(target=car.delete_nodes, args=(["a"],))
        car_thread.start()
        time.sleep(0.3)
        assert car_thread.is_alive()  # the store deletion waits for the pinned query
        assert "a" in {n.node_id for n in car.lexical_retriever.nodes}
        assert "a" in _ids(car.dense_retriever.retrieve("배수시설 설치기준 강우강도"))
    car_thread.join(timeout=30)
    assert not car_thread.is_alive()
    assert "a" not in _ids(car.retrieve("배수시설 설치기준 강우강도"))

    with car._pinned():  # an insert: written to the store but hidden from the old snapshot
        car.insert_nodes([NEW])
        assert "n" in _ids(car.index.as_retriever(similarity_top_k=10).retrieve("교량 점검통로"))
        assert "n" not in _ids(car.dense_retriever.retrieve(QueryBundle("교량 점검통로")))
        assert "n" not in {n.node_id for n in car.lexical_retriever.nodes}
    assert _ids(car.retrieve("교량 점검통로 설치기준"))[0] == "n"


def test_filters_apply_to_both_channels() -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="file_name", value="tunnel.hwpx")])
    car = _car(filters=filters)
    hits = car.retrieve("설치기준 설계기준")
    assert hits and {h.node.metadata["file_name"] for h in hits} == {"tunnel.hwpx"}
    assert car.filters == filters
    assert car.lexical_retriever.filters == filters
    assert {h.node.metadata["file_name"] for h in car.dense_retriever.retrieve("설치기준")} == {
        "tunnel.hwpx"}
    with pytest.raises(ConfigurationError, match="MetadataFilters"):
        _car(filters={"file_name": "x"})


def test_persist_and_reload_give_the_same_results(tmp_path: Path) -> None:
    nodes = _nodes()
    index = _index(nodes)
    car = CriterionAwareRetriever.from_defaults(index=index, nodes=nodes, similarity_top_k=4,
                                                pool_top_k=6, alpha=0.7)
    hybrid = WeightedRRFRetriever.from_index(index, nodes, alpha=0.3, similarity_top_k=4)
    car.persist(tmp_path / "car")
    hybrid.persist(tmp_path / "hybrid")
    car2 = CriterionAwareRetriever.from_persist_dir(tmp_path / "car", index=index)
    hybrid2 = WeightedRRFRetriever.from_persist_dir(tmp_path / "hybrid", index=index)
    assert (car2.alpha, car2.similarity_top_k, car2.pool_top_k) == (0.7, 4, 6)
    assert hybrid2.weights == [0.3, 0.7]
    for q in ("배수시설 설치기준", "터널 조명"):
        assert _ids(car2.retrieve(q)) == _ids(car.retrieve(q))
        assert [h.score for h in hybrid2.retrieve(q)] == [h.score for h in hybrid.retrieve(q)]
    assert not list(tmp_path.rglob("*.pkl"))
    car2.insert_nodes([NEW])  # the reloaded retriever is bound to the index too
    assert _ids(car2.retrieve("교량 점검통로 설치기준"))[0] == "n"


def test_persist_needs_an_index_bound_retriever(tmp_path: Path) -> None:
    nodes = _nodes()
    car = _car()
    plain = OfflineCriterionRetriever(car.index.as_retriever(), KiwiBM25Retriever(nodes))
    with pytest.raises(ConfigurationError, match="VectorStoreIndex"):
        plain.persist(tmp_path / "x")
    with pytest.raises(ConfigurationError, match="VectorStoreIndex"):
        plain.insert_nodes([NEW])


def test_bm25_over_a_store_backed_index_raises() -> None:
    store = SimpleVectorStore()
    store.stores_text = True  # what external stores say: the docstore stays empty
    index = VectorStoreIndex(
        _nodes(), storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=HashedBigramEmbedding(),
    )
    assert not index.docstore.docs
    with pytest.raises(EmptyIndexError, match="pass nodes="):
        KiwiBM25Retriever.from_defaults(index=index)
    with pytest.raises(EmptyIndexError):
        WeightedRRFRetriever.from_index(index)
    with pytest.raises(EmptyIndexError, match="nodes="):
        CriterionAwareRetriever.from_defaults(index=index)


def test_settings_embed_model_is_respected() -> None:
    from llama_index_car.providers import resolve_embed_model

    emb = HashedBigramEmbedding()
    Settings.embed_model = emb
    try:
        assert resolve_embed_model() is emb
        car = CriterionAwareRetriever.from_defaults(nodes=_nodes(), pool_top_k=6)
        assert car.index._embed_model is emb
        assert type(resolve_embed_model("use")).__name__ == "UniversalSentenceEncoderEmbedding"
    finally:
        Settings._embed_model = None


def test_the_span_index_persists_reloads_and_follows_updates(tmp_path: Path) -> None:
    """The span index is part of the snapshot: persisted under ``spans/``, listed in the
    manifest, reloaded equal (ids, spans, vectors), and kept to the BM25 node ids by updates."""
    from llama_index_car._persist import live_dir

    car = _car()
    assert car.span_index is not None and car.span_weight > 0
    car.insert_nodes([NEW])
    car.delete_ref_doc("guard.hwpx")
    lexical_ids = {n.node_id for n in car.lexical_retriever.nodes}
    assert set(car.span_index.node_ids) == lexical_ids == {"a", "b", "e", "f", "n"}
    car.persist(tmp_path / "car")
    gen = live_dir(tmp_path / "car")
    assert {"spans/spans.json", "spans/vectors.npy"} <= set(
        __import__("json").loads((gen / "manifest.json").read_text())["files"]
    )
    again = CriterionAwareRetriever.from_persist_dir(tmp_path / "car", index=car.index)
    old, new = car.span_index, again.span_index
    assert new is not None and new.node_ids == old.node_ids
    assert all(new.spans_of(i) == old.spans_of(i) for i in old.node_ids)
    assert (new._vectors == old._vectors).all()
    hit = again.retrieve("교량 점검통로 설치기준")[0]
    assert hit.node.node_id == "n" and hit.node.metadata["car_explain"]["span"]["text"]
    again.delete_nodes(["n"])
    assert "n" not in again.span_index and "n" in car.span_index  # snapshots are not shared


def test_span_weight_without_a_persisted_span_index_is_refused(tmp_path: Path) -> None:
    """A folder whose config ranks by spans but whose manifest lists no ``spans/`` (e.g.
    written before spans were persisted) is refused by name; ``span_weight=0`` opens it."""
    import shutil

    from llama_index_car._errors import IndexPersistError
    from llama_index_car._persist import live_dir, write_manifest

    car = _car()
    car.persist(tmp_path / "car")
    gen = live_dir(tmp_path / "car")
    shutil.rmtree(gen / "spans")
    (gen / "manifest.json").unlink()
    write_manifest(gen, kind="CriterionAwareRetriever", format_version=1)
    with pytest.raises(IndexPersistError, match=r"span_weight=[0-9.]+ but no spans/"):
        CriterionAwareRetriever.from_persist_dir(tmp_path / "car", index=car.index)
    plain = CriterionAwareRetriever.from_persist_dir(
        tmp_path / "car", index=car.index, span_weight=0
    )
    assert plain.span_index is None
    assert "span" not in plain.retrieve("터널 조명")[0].node.metadata["car_explain"]


def test_from_persist_dir_reopens_whichever_car_was_persisted(tmp_path: Path) -> None:
    """Both CAR retrievers persist as one manifest kind; ``retriever.json`` names the class,
    and ``from_persist_dir`` reopens it with its own options (a hypothesizer is passed again)."""
    from llama_index_car import HypothesisCriterionRetriever
    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

    class Fixed(BaseCriterionHypothesizer):
        name = "fixed"

        def hypothesize(self, query: str) -> CriterionHypothesis:
            return CriterionHypothesis(text="조명 설계기준", criteria=("설계기준",), source="stub")

    car = _car(hypothesizer=Fixed(), route="auto", strict=True, alpha=0.6)
    assert isinstance(car, HypothesisCriterionRetriever)
    car.persist(tmp_path / "hyp")
    again = CriterionAwareRetriever.from_persist_dir(tmp_path / "hyp", index=car.index,
                                                     hypothesizer=Fixed())
    assert type(again) is HypothesisCriterionRetriever
    assert (again.route, again.strict, again.alpha) == ("auto", True, 0.6)
    for q in ("배수시설 설치기준", "터널 조명"):
        assert [(h.node.node_id, h.score) for h in again.retrieve(q)] == [
            (h.node.node_id, h.score) for h in car.retrieve(q)]
    with pytest.raises(ConfigurationError, match="pass hypothesizer= or llm="):
        CriterionAwareRetriever.from_persist_dir(tmp_path / "hyp", index=car.index)
    offline = _car()
    offline.persist(tmp_path / "off")
    with pytest.raises(ConfigurationError, match="OfflineCriterionRetriever"):
        CriterionAwareRetriever.from_persist_dir(tmp_path / "off", index=offline.index,
                                                 hypothesizer=Fixed())
    assert type(OfflineCriterionRetriever.from_persist_dir(
        tmp_path / "off", index=offline.index)) is OfflineCriterionRetriever
