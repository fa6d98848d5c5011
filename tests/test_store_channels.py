"""CAR and the hybrid as views of a ``CriterionAwareIndex`` over a ``VectorStoreIndex``:
snapshots, updates, filters, persistence (the index owns all of them).

Small in-code corpus, in-memory ``SimpleVectorStore`` and a deterministic hashed-bigram
embedding; the real stores are exercised in ``tests/test_stores.py``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import Settings, StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_car import (
    ConfigurationError,
    CriterionAwareIndex,
    CriterionAwareRetriever,
    EmptyIndexError,
    KiwiBM25Retriever,
    OfflineCriterionRetriever,
)
from llama_index_car.indices._layout import FORMAT_VERSION
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


def _wait_for(predicate: Any) -> None:
    """Wait (bounded) until ``predicate()``; no assertion on elapsed time."""
    for _ in range(3000):
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def test_insert_and_delete_reach_both_channels() -> None:
    car = _car()
    index = car.index
    assert isinstance(index, CriterionAwareIndex)
    index.insert_nodes([NEW])
    hit = car.retrieve("교량 점검통로 설치기준")[0]
    assert hit.node.node_id == "n"
    channels = hit.node.metadata["car_explain"]["channels"]
    assert channels["dense"]["rank"] == 1 and channels["lexical"]["rank"] == 1
    assert "n" in {n.node_id for n in car.lexical_retriever.nodes}
    index.delete_ref_doc("guard.hwpx")
    for q in ("방호울타리 설치기준", "교량 점검통로 설치기준"):
        assert not {"c", "d"} & set(_ids(car.retrieve(q)))
    store = index.vector_index.as_retriever(similarity_top_k=10)
    assert not {"c", "d"} & set(_ids(store.retrieve("방호울타리")))
    index.delete_nodes(["n"])
    assert "n" not in _ids(car.retrieve("교량 점검통로 설치기준"))
    with pytest.raises(ConfigurationError, match="unknown node ids"):
        index.delete_nodes(["zzz"])


def test_offline_car_persists_no_hypothesizer(tmp_path: Path) -> None:
    """Offline CAR learns nothing at index time: the index persists BM25, nodes and vectors
    only, and a view of the reloaded index is the offline configuration again (its options
    included)."""
    car = _car(alpha=0.4)
    assert car.hypothesizer is None and car.alpha == 0.4
    car.index.persist(tmp_path / "car")
    assert not list(tmp_path.rglob("hypothesizer"))
    loaded = CriterionAwareIndex.load(tmp_path / "car", vector_index=car.index.vector_index)
    again = loaded.as_retriever("car", similarity_top_k=6, pool_top_k=6, alpha=0.4)
    assert again.hypothesizer is None and again.alpha == car.alpha
    for q in ("배수시설 설치기준", "터널 조명"):
        assert _ids(again.retrieve(q)) == _ids(car.retrieve(q))


def test_a_query_in_flight_keeps_its_snapshot() -> None:
    """Readers never see half an update: a pinned query keeps the old state for both
    channels; the store deletion waits for it; the next query sees the new state."""
    car = _car()
    index = car.index
    with index.pinned() as snap:
        writer = threading.Thread(target=index.delete_nodes, args=(["a"],))
        writer.start()
        _wait_for(lambda: index.snapshot is not snap)  # the new snapshot is published …
        assert writer.is_alive()  # … and the store deletion waits for the pinned query
        assert "a" not in index.snapshot.ids
        assert "a" in {n.node_id for n in car.lexical_retriever.at(snap).nodes}
        assert "a" in _ids(car.dense_retriever.at(snap).retrieve("배수시설 설치기준 강우강도"))
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert "a" not in _ids(car.retrieve("배수시설 설치기준 강우강도"))

    with index.pinned() as snap:  # an insert: written to the store but hidden from the old snapshot
        index.insert_nodes([NEW])
        store = index.vector_index.as_retriever(similarity_top_k=10)
        assert "n" in _ids(store.retrieve("교량 점검통로"))
        assert "n" not in _ids(car.dense_retriever.at(snap).retrieve(QueryBundle("교량 점검통로")))
        assert "n" not in {n.node_id for n in car.lexical_retriever.at(snap).nodes}
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
    """One index, two views; persisted as one generation with one manifest (flat files, no
    nested generation), reloaded over the same store: the same results, and updates work."""
    from llama_index_car._persist import live_dir

    nodes = _nodes()
    index = _index(nodes)
    car = CriterionAwareRetriever.from_defaults(index=index, nodes=nodes, similarity_top_k=4,
                                                pool_top_k=6, alpha=0.7)
    hybrid = car.index.as_retriever("hybrid", alpha=0.3, similarity_top_k=4)
    assert hybrid.index is car.index
    car.index.persist(tmp_path / "idx")
    assert [p.relative_to(tmp_path / "idx").as_posix() for p in (tmp_path / "idx").rglob(
        "manifest.json")] == [f"{live_dir(tmp_path / 'idx').name}/manifest.json"]
    assert [p.name for p in live_dir(tmp_path / "idx").iterdir() if p.is_dir()] == ["flat"]
    loaded = CriterionAwareIndex.load(tmp_path / "idx", vector_index=index)
    car2 = loaded.as_retriever("car", similarity_top_k=4, pool_top_k=6, alpha=0.7)
    hybrid2 = loaded.as_retriever("hybrid", alpha=0.3, similarity_top_k=4)
    assert (car2.alpha, car2.similarity_top_k, car2.pool_top_k) == (0.7, 4, 6)
    assert hybrid2.weights == [0.3, 0.7]
    for q in ("배수시설 설치기준", "터널 조명"):
        assert _ids(car2.retrieve(q)) == _ids(car.retrieve(q))
        assert [h.score for h in hybrid2.retrieve(q)] == [h.score for h in hybrid.retrieve(q)]
    assert not list(tmp_path.rglob("*.pkl"))
    loaded.insert_nodes([NEW])  # the reloaded index is bound to the store too
    assert _ids(car2.retrieve("교량 점검통로 설치기준"))[0] == "n"


def test_retrievers_over_arbitrary_channels_own_no_index() -> None:
    """Retrievers are views: they neither persist nor update; one built from arbitrary
    channels has no index, one built over an index updates through it."""
    nodes = _nodes()
    car = _car()
    plain = OfflineCriterionRetriever(car.index.vector_index.as_retriever(),
                                      KiwiBM25Retriever(nodes))
    assert plain.index is None
    for name in ("persist", "insert_nodes", "delete_nodes", "from_persist_dir"):
        assert not hasattr(plain, name) and not hasattr(car, name)


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
        WeightedRRFRetriever.from_defaults(index=index)
    with pytest.raises(EmptyIndexError, match="nodes="):
        CriterionAwareRetriever.from_defaults(index=index)


def test_settings_embed_model_is_respected() -> None:
    from llama_index_car.providers import resolve_embed_model

    emb = HashedBigramEmbedding()
    Settings.embed_model = emb
    try:
        assert resolve_embed_model() is emb
        car = CriterionAwareRetriever.from_defaults(nodes=_nodes(), pool_top_k=6)
        assert car.index.embed_model is emb
        assert type(resolve_embed_model("use")).__name__ == "UniversalSentenceEncoderEmbedding"
    finally:
        Settings._embed_model = None


def test_the_span_index_persists_reloads_and_follows_updates(tmp_path: Path) -> None:
    """The span index is part of the snapshot: persisted in the index's generation, listed
    in its manifest, reloaded equal (ids, spans, vectors), and kept to the BM25 node ids by
    updates."""
    from llama_index_car._persist import live_dir

    car = _car()
    assert car.span_index is not None and car.span_weight > 0
    car.index.insert_nodes([NEW])
    car.index.delete_ref_doc("guard.hwpx")
    lexical_ids = {n.node_id for n in car.lexical_retriever.nodes}
    assert set(car.span_index.node_ids) == lexical_ids == {"a", "b", "e", "f", "n"}
    car.index.persist(tmp_path / "car")
    gen = live_dir(tmp_path / "car")
    assert {"spans.blob", "spans.meta.json", "spans.rows.npy", "spans.vectors.npy"} <= set(
        json.loads((gen / "manifest.json").read_text())["files"]
    )
    loaded = CriterionAwareIndex.load(tmp_path / "car", vector_index=car.index.vector_index)
    again = loaded.as_retriever("car", similarity_top_k=6, pool_top_k=6)
    old, new = car.span_index, again.span_index
    assert new is not None and new.node_ids == old.node_ids
    assert all(new.spans_of(i) == old.spans_of(i) for i in old.node_ids)
    assert (np.asarray(new._vectors) == old._vectors).all()
    hit = again.retrieve("교량 점검통로 설치기준은 어떻게 되나요?")[0]  # a question: spans count
    assert hit.node.node_id == "n" and hit.node.metadata["car_explain"]["span"]["text"]
    loaded.delete_nodes(["n"])
    assert "n" not in again.span_index and "n" in car.span_index  # snapshots are not shared


def test_span_weight_without_a_span_index_is_refused(tmp_path: Path) -> None:
    """An index whose generation lists no span index reloads without one: CAR over it has
    no span ranking, and asking for span ranking is refused by name."""
    from llama_index_car import _persist
    from llama_index_car._persist import live_dir

    car = _car()
    car.index.persist(tmp_path / "car")
    gen = live_dir(tmp_path / "car")
    for path in gen.glob("spans.*"):
        path.unlink()
    spec = json.loads((gen / "index.json").read_text())
    (gen / "index.json").write_text(json.dumps(spec | {"spans": None}))
    (gen / "manifest.json").unlink()
    _persist.write_manifest(gen, kind="CriterionAwareIndex", format_version=FORMAT_VERSION)
    loaded = CriterionAwareIndex.load(tmp_path / "car", vector_index=car.index.vector_index)
    assert loaded.spans is None
    with pytest.raises(ConfigurationError, match="span_weight > 0 needs a span_index"):
        loaded.as_retriever("car", span_weight=0.5)
    plain = loaded.as_retriever("car")
    assert plain.span_index is None
    assert "span" not in plain.retrieve("터널 조명")[0].node.metadata["car_explain"]


def test_one_index_gives_either_car(tmp_path: Path) -> None:
    """The index is the same for both CAR retrievers: ``as_retriever("car")`` is offline
    without a hypothesizer and the hypothesis CAR with one (its options passed again), and a
    retriever built with the wrong mode is refused by name."""
    from llama_index_car import HypothesisCriterionRetriever
    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer, CriterionHypothesis

    class Fixed(BaseCriterionHypothesizer):
        name = "fixed"

        def hypothesize(self, query: str) -> CriterionHypothesis:
            return CriterionHypothesis(text="조명 설계기준", criteria=("설계기준",), source="stub")

    car = _car(hypothesizer=Fixed(), route="auto", strict=True, alpha=0.6)
    assert isinstance(car, HypothesisCriterionRetriever)
    car.index.persist(tmp_path / "hyp")
    loaded = CriterionAwareIndex.load(tmp_path / "hyp", vector_index=car.index.vector_index)
    again = loaded.as_retriever("car", hypothesizer=Fixed(), route="auto", strict=True,
                                alpha=0.6, similarity_top_k=6, pool_top_k=6)
    assert type(again) is HypothesisCriterionRetriever
    assert (again.route, again.strict, again.alpha) == ("auto", True, 0.6)
    for q in ("배수시설 설치기준", "터널 조명"):
        assert [(h.node.node_id, h.score) for h in again.retrieve(q)] == [
            (h.node.node_id, h.score) for h in car.retrieve(q)]
    assert type(loaded.as_retriever("car")) is OfflineCriterionRetriever
    with pytest.raises(ConfigurationError, match="only with a hypothesizer"):
        loaded.as_retriever("car", route="auto")
    from llama_index_car.retrievers.car import car_from_channels
    from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever

    assert type(car_from_channels(again.dense_retriever, again.lexical_retriever,
                                  Fixed())) is HypothesisCriterionRetriever


def test_only_snapshots_still_read_are_kept() -> None:
    """The index remembers a replaced snapshot only while a query reads it (what a store
    deletion waits for): a long series of updates keeps no old BM25 arrays alive."""
    car = _car()
    index = car.index
    for k in range(5):
        index.insert_nodes([NEW.model_copy(update={"id_": f"x{k}"})])
    assert index._older == []
    with index.pinned() as snap:
        index.insert_nodes([NEW])
        assert index._older == [snap]
    index.delete_nodes(["n"])  # nobody reads the old snapshots: nothing to wait for
    assert index._older == []


def test_a_view_is_built_over_an_index_or_over_nodes_not_both() -> None:
    car = _car()
    with pytest.raises(ConfigurationError, match="not both"):
        KiwiBM25Retriever(_nodes(), index=car.index)
    view = KiwiBM25Retriever(index=car.index, similarity_top_k=2)
    assert view.index is car.index and view.tokenizer is car.index.tokenizer


@pytest.mark.parametrize(
    ("kind", "options", "named"),
    [
        ("bm25", {"alpha": 0.3}, "alpha"),
        ("bm25", {"pool_top_k": 20, "rrf_k": 10}, "pool_top_k, rrf_k"),
        ("dense", {"hypothesizer": object()}, "hypothesizer"),
        ("dense", {"span_weight": 0.5}, "span_weight"),
        ("hybrid", {"hypothesizer": object()}, "hypothesizer"),
    ],
)
def test_an_option_the_kind_does_not_use_is_refused(
    kind: str, options: dict[str, Any], named: str
) -> None:
    """Before: ``as_retriever`` accepted and silently ignored them (e.g. ``--alpha`` with a
    BM25 retriever, or a hypothesizer for the hybrid)."""
    index = _car().index
    with pytest.raises(ConfigurationError, match=f"does not use {named}"):
        index.as_retriever(kind, **options)
    assert index.as_retriever(kind, similarity_top_k=3).retrieve("배수시설 설치기준")


def test_cli_alpha_with_a_single_channel_retriever_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_index_car.cli import main
    from llama_index_car.demo import demo_corpus_dir

    src = tmp_path / "src"
    src.mkdir()
    first = sorted(demo_corpus_dir().glob("*.hwpx"))[0]
    (src / first.name).write_bytes(first.read_bytes())
    out = tmp_path / "idx"
    assert main(["index", str(src), "--persist", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["query", str(out), "기준", "--retriever", "bm25", "--alpha", "0.3"]) == 2
    assert "retriever kind 'bm25' does not use alpha" in capsys.readouterr().err


def test_queries_during_updates_of_an_in_memory_index_raise_nothing() -> None:
    """Issue 37, item 5: with the default in-memory ``SimpleVectorStore``, four query threads
    during ``insert_nodes``/``delete_nodes`` raised ``KeyError`` inside LlamaIndex's
    ``VectorIndexRetriever`` (an id the store had just returned was gone from the index's
    dict) in 25 of 876 queries. Each update cycle here waits until every reader has finished
    a query that started after the cycle began (no sleeping, no timing): the readers query
    throughout the updates, and none may fail or see an id outside its snapshot."""
    from llama_index_car.indices import CriterionAwareIndex

    topics = ["배수시설", "방호울타리", "터널 조명", "교량 점검", "포장 두께", "환기설비"]
    nodes = [TextNode(id_=f"base-{i}", text=f"{topics[i % 6]} 설치기준 {i}번 항목은 {i % 17}m 이상",
                      metadata={"file_name": f"{i % 5}.hwpx"}) for i in range(150)]
    index = CriterionAwareIndex.from_defaults(nodes, embed_model=HashedBigramEmbedding())
    views = [index.as_retriever(kind, similarity_top_k=10)
             for kind in ("dense", "dense", "hybrid", "car")]
    errors: list[str] = []
    done = threading.Event()
    start = threading.Barrier(5)
    progress = threading.Condition()
    counts = [0, 0, 0, 0]

    def query(i: int) -> None:
        start.wait()
        while not done.is_set():
            try:
                views[i].retrieve(f"{topics[i]} 설치기준")
            except Exception as exc:  # what the test counts
                errors.append(f"{type(exc).__name__}: {exc}")
            with progress:
                counts[i] += 1
                progress.notify_all()

    threads = [threading.Thread(target=query, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    start.wait()
    try:
        for cycle in range(30):
            with progress:
                seen = list(counts)
            batch = [TextNode(id_=f"new-{cycle}-{k}", text=f"{topics[k % 6]} 기준 신규 {cycle}")
                     for k in range(4)]
            index.insert_nodes(batch)
            index.delete_nodes([n.node_id for n in batch])
            with progress:  # every reader finished a query begun during this cycle
                progress.wait_for(lambda s=seen: all(c >= v + 1 for c, v in zip(counts, s,
                                                                                 strict=True)))
    finally:
        done.set()
        for t in threads:
            t.join(timeout=120)
    assert errors == [], (len(errors), sum(counts), errors[:3])
    assert all(c >= 30 for c in counts), counts
    assert len(index) == 150 and {n.node_id for n in index.nodes} == {n.node_id for n in nodes}
