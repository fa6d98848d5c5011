"""WeightedRRFRetriever over tiny in-test retrievers with fixed result lists."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import ConfigurationError
from llama_index_car.retrievers.weighted_rrf import (
    EXPLAIN_KEY,
    WeightedRRFRetriever,
    with_pool_top_k,
)

NODES = {
    i: TextNode(id_=i, text=f"본문 {i}", metadata={"title": f"제목 {i}"}) for i in "abcdefgh"
}


class FixedRetriever(BaseRetriever):
    """Returns its fixed list (truncated to similarity_top_k); records calls and threads."""

    def __init__(
        self, ids: list[str], similarity_top_k: int = 100, delay: float = 0.0,
        barrier: threading.Barrier | None = None,
    ) -> None:
        self.ids = ids
        self.similarity_top_k = similarity_top_k
        self.delay = delay
        self.barrier = barrier  # every channel must reach it before any returns
        self.met: list[bool] = []  # a list: the fusion runs a shallow copy of each channel
        self.calls: list[str] = []
        self.threads: list[str] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        time.sleep(self.delay)
        if self.barrier is not None:
            self.barrier.wait(timeout=60)  # BrokenBarrierError if the channels ran in turn
            self.met.append(True)
        self.calls.append(query_bundle.query_str)
        self.threads.append(threading.current_thread().name)
        k = self.similarity_top_k
        return [NodeWithScore(node=NODES[i], score=float(10 - r)) for r, i in enumerate(self.ids)][:k]


class AsyncFixedRetriever(FixedRetriever):
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        await asyncio.sleep(self.delay)
        if self.barrier is not None:  # waited off the loop, so a sync channel can arrive
            await asyncio.get_running_loop().run_in_executor(None, self.barrier.wait, 60)
            self.met.append(True)
        self.calls.append("async:" + query_bundle.query_str)
        return [NodeWithScore(node=NODES[i], score=1.0) for i in self.ids][: self.similarity_top_k]


class NoTopK(BaseRetriever):
    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=NODES[i], score=None) for i in self.ids]


def test_scores_follow_weighted_formula_and_order() -> None:
    dense = FixedRetriever(["a", "b", "c"])
    lexical = FixedRetriever(["c", "a", "d"])
    fused = WeightedRRFRetriever.from_alpha(dense, lexical, alpha=0.7).retrieve("q")
    scores = {n.node.node_id: n.score for n in fused}
    assert scores["a"] == pytest.approx(0.7 / 61 + 0.3 / 62)
    assert scores["c"] == pytest.approx(0.7 / 63 + 0.3 / 61)
    assert scores["b"] == pytest.approx(0.7 / 62)
    assert scores["d"] == pytest.approx(0.3 / 63)
    # c: 0.7/63 + 0.3/61 = 0.01603 > b: 0.7/62 = 0.01129
    assert [n.node.node_id for n in fused] == ["a", "c", "b", "d"]


def test_explanations_record_channel_ranks_and_are_excluded_from_text() -> None:
    dense = FixedRetriever(["a", "b"])
    lexical = FixedRetriever(["b", "e"])
    fused = WeightedRRFRetriever.from_alpha(dense, lexical).retrieve("q")
    by_id = {n.node.node_id: n.node for n in fused}
    info = by_id["b"].metadata[EXPLAIN_KEY]
    assert info["channels"] == {
        "dense": {"rank": 2, "score": 9.0},
        "lexical": {"rank": 1, "score": 10.0},
    }
    assert info["fallback"] is False and info["hypothesis"] is None
    assert by_id["e"].metadata[EXPLAIN_KEY]["channels"]["dense"] == {"rank": None, "score": None}
    assert EXPLAIN_KEY in by_id["b"].excluded_embed_metadata_keys
    assert EXPLAIN_KEY in by_id["b"].excluded_llm_metadata_keys
    assert "car_explain" not in by_id["b"].get_content(MetadataMode.EMBED)
    assert "car_explain" not in by_id["b"].get_content(MetadataMode.LLM)
    assert "제목 b" in by_id["b"].get_content(MetadataMode.LLM)


def test_inputs_untouched() -> None:
    dense = FixedRetriever(["a", "b"], similarity_top_k=7)
    lexical = FixedRetriever(["b", "c"], similarity_top_k=7)
    before = {k: n.model_dump() for k, n in NODES.items()}
    fused = WeightedRRFRetriever([dense, lexical], pool_top_k=1, similarity_top_k=5).retrieve("q")
    assert {k: n.model_dump() for k, n in NODES.items()} == before
    assert all(EXPLAIN_KEY not in n.metadata for n in NODES.values())
    assert all(n.node is not NODES[n.node.node_id] for n in fused)
    assert dense.similarity_top_k == 7 and lexical.similarity_top_k == 7


def test_pool_top_k_applied_per_channel_on_a_copy() -> None:
    dense = FixedRetriever(["a", "b", "c", "d"], similarity_top_k=10)
    lexical = NoTopK(["e", "f", "g", "h"])  # no similarity_top_k: results truncated instead
    fused = WeightedRRFRetriever([dense, lexical], pool_top_k=2, similarity_top_k=10).retrieve("q")
    assert {n.node.node_id for n in fused} == {"a", "b", "e", "f"}
    assert dense.similarity_top_k == 10
    clone = with_pool_top_k(dense, 3)
    assert clone is not dense and getattr(clone, "similarity_top_k", None) == 3
    assert dense.similarity_top_k == 10
    assert with_pool_top_k(dense, 10) is dense


def test_similarity_top_k_limits_output() -> None:
    fused = WeightedRRFRetriever(
        [FixedRetriever(list("abcdef")), FixedRetriever(list("fedcba"))], similarity_top_k=3
    ).retrieve("q")
    assert len(fused) == 3


def test_dedup_by_node_id() -> None:
    # BaseRetriever.retrieve already drops repeated node_ids inside one channel (so "b" is
    # rank 2 there); across channels the same node_id is fused into one result.
    fused = WeightedRRFRetriever(
        [FixedRetriever(["a", "a", "b"]), FixedRetriever(["b", "a"])], channel_names=["x", "y"]
    ).retrieve("q")
    assert [n.node.node_id for n in fused] == ["a", "b"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused[1].score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1].node.metadata[EXPLAIN_KEY]["channels"]["x"]["rank"] == 2


def test_sync_channels_run_concurrently_in_threads() -> None:
    """Both channels are inside ``_retrieve`` at once: a barrier of two, which a sequential
    fusion could never pass (the first channel would wait for the second for ever)."""
    barrier = threading.Barrier(2)
    a = FixedRetriever(["a"], barrier=barrier)
    b = FixedRetriever(["b"], barrier=barrier)
    WeightedRRFRetriever([a, b]).retrieve("q")
    assert a.met and b.met and not barrier.broken
    assert a.threads[0] != b.threads[0]


async def test_async_channels_gathered() -> None:
    barrier = threading.Barrier(2)
    a = AsyncFixedRetriever(["a", "b"], barrier=barrier)
    b = FixedRetriever(["b", "c"], barrier=barrier)  # sync-only: runs in a worker thread
    fused = await WeightedRRFRetriever([a, b]).aretrieve("질의")
    assert a.met and b.met and not barrier.broken
    assert a.calls == ["async:질의"] and b.calls == ["질의"]
    assert fused[0].node.node_id == "b"
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": [1.0]}, "weights"),
        ({"weights": [-1.0, 1.0]}, "weights"),
        ({"weights": [0.0, 0.0]}, "zero"),
        ({"rrf_k": -5}, "rrf_k"),
        ({"pool_top_k": 0}, "pool_top_k"),
        ({"similarity_top_k": 0}, "similarity_top_k"),
        ({"channel_names": ["x", "x"]}, "unique"),
    ],
)
def test_configuration_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        WeightedRRFRetriever([FixedRetriever(["a"]), FixedRetriever(["b"])], **kwargs)  # type: ignore[arg-type]


def test_rejects_non_retrievers_and_bad_alpha() -> None:
    with pytest.raises(ConfigurationError, match="BaseRetriever"):
        WeightedRRFRetriever([FixedRetriever(["a"]), "bm25"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="empty"):
        WeightedRRFRetriever([])
    with pytest.raises(ConfigurationError, match="alpha"):
        WeightedRRFRetriever.from_alpha(FixedRetriever(["a"]), FixedRetriever(["b"]), alpha=1.5)


def test_alpha_one_is_dense_order() -> None:
    fused = WeightedRRFRetriever.from_alpha(
        FixedRetriever(["c", "b", "a"]), FixedRetriever(["a", "b", "c"]), alpha=1.0
    ).retrieve("q")
    assert [n.node.node_id for n in fused] == ["c", "b", "a"]


def test_works_with_vector_index_retriever() -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    nodes = [TextNode(id_=f"n{i}", text=f"문서 {i}") for i in range(20)]
    index = VectorStoreIndex(nodes=nodes, embed_model=MockEmbedding(embed_dim=8))
    dense = index.as_retriever(similarity_top_k=2)
    fused = WeightedRRFRetriever([dense, FixedRetriever(["a"])], pool_top_k=15, similarity_top_k=30)
    out = fused.retrieve("질의")
    assert len(out) == 16  # 15 from the pooled copy of the vector retriever + 1
    assert getattr(dense, "similarity_top_k", None) == 2
