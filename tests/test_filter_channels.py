"""One meaning per filter operator on every channel (issue 37, item 7).

Differential: for each real store (Milvus Lite, Qdrant local, Chroma, pgserver) and the
in-memory index, every filter of a grid is either refused with a ``ConfigurationError``
naming it, or the dense channel returns exactly the nodes that
:func:`~llama_index_car._filters.matches` accepts — the oracle, and what the BM25
channel returns with the same filter. Before: Chroma raised an untyped ``ValueError`` on
``text_match``, Milvus a raw ``MilvusException`` on ``10**30``, and Milvus answered
``text_match "%"`` with 3 hits where BM25 gave none; PGVectorStore put a quote of a value
into its SQL.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import FilterCondition as C
from llama_index.core.vector_stores.types import FilterOperator as O
from llama_index.core.vector_stores.types import MetadataFilter as F
from llama_index.core.vector_stores.types import MetadataFilters as FS

from llama_index_car._errors import ConfigurationError
from llama_index_car._filters import matches
from llama_index_car.indices import CriterionAwareIndex
from tests.fakes.embeddings import HashedBigramEmbedding

META: list[dict[str, Any]] = [
    {"name": "abc", "n": 3, "x": 2.5, "flag": True},
    {"name": "ab%c", "n": 10, "x": 0.5, "flag": False},
    {"name": "xyz", "n": -2, "x": 7.0},
    {"name": "Abc def", "n": 0},
    {"name": "", "x": 2.5},
    {},
    {"name": "a'b", "n": 3},
    {"name": "a_c", "n": 2**40},
]
WORDS = ["배수", "포장", "교량", "조명", "환기", "방호", "측구", "점검"]


def _nodes() -> list[TextNode]:
    return [TextNode(text=f"터널 기준 {WORDS[i]} 항목", id_=str(uuid.UUID(int=i + 1)), metadata=m)
            for i, m in enumerate(META)]


def _one(leaf: F, cond: C = C.AND) -> FS:
    return FS(filters=[leaf], condition=cond)


CASES: dict[str, FS] = {
    "eq str": _one(F(key="name", value="abc")),
    "eq int": _one(F(key="n", value=3)),
    "eq float": _one(F(key="x", value=2.5)),
    "eq int as float": _one(F(key="n", value=3.0)),
    "eq empty str": _one(F(key="name", value="")),
    "eq quote": _one(F(key="name", value="a'b")),
    "eq backslash": _one(F(key="name", value="a\\b")),
    "ne str": _one(F(key="name", value="abc", operator=O.NE)),
    "ne int": _one(F(key="n", value=3, operator=O.NE)),
    "gt": _one(F(key="n", value=2, operator=O.GT)),
    "gte": _one(F(key="n", value=3, operator=O.GTE)),
    "lt": _one(F(key="n", value=10, operator=O.LT)),
    "lte float": _one(F(key="x", value=2.5, operator=O.LTE)),
    "gt float on ints": _one(F(key="n", value=2.5, operator=O.GT)),
    "gt 2**40": _one(F(key="n", value=2**39, operator=O.GT)),
    "gt 10**30": _one(F(key="n", value=10**30, operator=O.GT)),
    "in str": _one(F(key="name", value=["abc", "xyz"], operator=O.IN)),
    "in int": _one(F(key="n", value=[3, 10], operator=O.IN)),
    "in float": _one(F(key="x", value=[2.5, 7.0], operator=O.IN)),
    "nin str": _one(F(key="name", value=["abc"], operator=O.NIN)),
    "nin int": _one(F(key="n", value=[3], operator=O.NIN)),
    "text_match": _one(F(key="name", value="b", operator=O.TEXT_MATCH)),
    "text_match prefix": _one(F(key="name", value="ab", operator=O.TEXT_MATCH)),
    "text_match %": _one(F(key="name", value="%", operator=O.TEXT_MATCH)),
    "text_match _": _one(F(key="name", value="a_", operator=O.TEXT_MATCH)),
    "text_match_insensitive": _one(F(key="name", value="AB", operator=O.TEXT_MATCH_INSENSITIVE)),
    "is_empty str": _one(F(key="name", value=None, operator=O.IS_EMPTY)),
    "is_empty int": _one(F(key="n", value=None, operator=O.IS_EMPTY)),
    "contains": _one(F(key="name", value="a", operator=O.CONTAINS)),
    "or": FS(filters=[F(key="n", value=3), F(key="name", value="xyz")], condition=C.OR),
    "and": FS(filters=[F(key="n", value=3), F(key="name", value="abc")]),
    "not": _one(F(key="n", value=3), C.NOT),
    "nested": FS(filters=[F(key="x", value=2.5),
                          FS(filters=[F(key="n", value=3), F(key="name", value="")],
                             condition=C.OR)]),
    "key with a dot": _one(F(key="a.b", value=1)),
}
#: what the issue saw, per store: refused now
MUST_REFUSE = {
    "chroma": ["text_match"], "milvus": ["gt 10**30", "text_match %"],
    "postgresql": ["eq quote", "text_match %"],
}
STORES = {
    "milvus": ("pymilvus", "milvus_lite", "llama_index.vector_stores.milvus"),
    "qdrant": ("qdrant_client", "llama_index.vector_stores.qdrant"),
    "chroma": ("chromadb", "llama_index.vector_stores.chroma"),
    "pgserver": ("pgserver", "llama_index.vector_stores.postgres"),
}


@pytest.fixture(params=["memory", "milvus", "qdrant", "chroma",
                        pytest.param("pgserver", marks=pytest.mark.slow)])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CriterionAwareIndex]:
    nodes = _nodes()
    emb = HashedBigramEmbedding()
    if request.param == "memory":
        yield CriterionAwareIndex.from_defaults(nodes, embed_model=emb)
        return
    for module in STORES[request.param]:
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(
                module) is None:
            pytest.skip(f"{module} not installed ([stores] extra)")
    from llama_index_car.stores import close_vector_store, open_vector_store

    root = request.getfixturevalue("pg_data_dir") if request.param == "pgserver" else tmp_path
    uri = {"milvus": f"milvus://{root}/m.db", "qdrant": f"qdrant://{root}/q",
           "chroma": f"chroma://{root}/c", "pgserver": f"pgserver://{root}/pg"}[request.param]
    store = open_vector_store(uri, dim=64, overwrite=True)
    try:
        vi = VectorStoreIndex(nodes, embed_model=emb,
                              storage_context=StorageContext.from_defaults(vector_store=store))
        yield CriterionAwareIndex(nodes, vector_index=vi, embed_model=emb)
    finally:
        close_vector_store(store)


def _ids(hits: Any) -> set[str]:
    return {h.node.node_id for h in hits}


def test_every_filter_means_the_same_on_every_channel_or_is_refused(
    index: CriterionAwareIndex,
) -> None:
    from llama_index_car._filters import store_rules

    nodes = _nodes()
    k = len(nodes)
    assert _ids(index.as_retriever("bm25", similarity_top_k=k).retrieve("터널 기준")) == {
        n.node_id for n in nodes}  # every node scores: a filter's effect is all there is
    known = None if index.snapshot.dense is not None else store_rules(
        index.vector_index.vector_store)
    kind = "memory" if known is None else known[0]
    refused, everywhere, differ = [], [], []
    for name, filters in CASES.items():
        try:
            bm25 = index.as_retriever("bm25", similarity_top_k=k, filters=filters)
        except ConfigurationError:  # out of every channel's range: no channel takes it
            with pytest.raises(ConfigurationError, match="filters"):
                index.as_retriever("dense", filters=filters)
            everywhere.append(name)
            continue
        oracle = {n.node_id for n in nodes if matches(filters, n.metadata)}
        assert _ids(bm25.retrieve("터널 기준")) == oracle, name  # BM25 is the oracle's
        try:
            dense = index.as_retriever("dense", similarity_top_k=k, filters=filters)
        except ConfigurationError as exc:
            assert "filters" in str(exc) and kind in str(exc), (name, str(exc))
            with pytest.raises(ConfigurationError):  # every fused view refuses it too
                index.as_retriever("hybrid", filters=filters)
            refused.append(name)
            continue
        got = _ids(dense.retrieve("터널 기준"))
        if got != oracle:
            differ.append((name, sorted(got), sorted(oracle)))
    assert differ == [], (kind, differ)
    assert everywhere == ["gt 10**30"]
    assert set(MUST_REFUSE.get(kind, [])) <= set(refused + everywhere), (kind, refused)
    if kind == "memory":
        assert refused == []  # the index evaluates every filter itself
    assert len(refused) < len(CASES) / 2, (kind, refused)  # the common operators work


def test_filters_out_of_every_channel_range_are_refused_everywhere() -> None:
    """Integers beyond 64 bits: refused on every channel, BM25 included."""
    from llama_index_car._filters import check_filters

    for value in (10**30, -(2**63) - 1):
        with pytest.raises(ConfigurationError, match="64-bit"):
            check_filters(_one(F(key="n", value=value, operator=O.GT)))
        with pytest.raises(ConfigurationError, match="64-bit"):
            check_filters(_one(F(key="n", value=[1, value], operator=O.IN)))
