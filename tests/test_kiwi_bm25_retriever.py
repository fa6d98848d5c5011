"""KiwiBM25Retriever: parity with rank_bm25, filters, updates, persistence, cache, async."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import rank_bm25
from llama_index.core import SummaryIndex
from llama_index.core.schema import MetadataMode, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_car import _files, _persist
from llama_index_car._errors import ConfigurationError, IndexPersistError, TokenizerMismatchWarning
from llama_index_car._persist import live_dir
from llama_index_car.indices import CriterionAwareIndex
from llama_index_car.indices import _storage as storage
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.tokenizers.kiwi import KiwiTokenizer

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"

TEXTS = [
    ("배수시설 설치기준은 도로의 종단경사 3.6%를 넘는 구간에 적용한다.", "road", 1),
    ("측구의 폭은 0.6m 이상으로 하고 배수 능력을 검토한다.", "road", 2),
    ("비탈면 경사는 1:1.5를 표준으로 하며 토질에 따라 조정한다.", "earth", 3),
    ("조경 식재 기준: 수목의 간격은 1.1 m 이상 확보한다.", "landscape", 4),
    ("포장 두께 설계기준은 교통량과 노상 지지력에 따른다.", "road", 5),
    ("제29조의2에 따른 안전점검 계획을 수립한다.", "safety", 6),
    ("콘크리트 압축강도는 24 MPa 이상이어야 한다.", "concrete", 7),
    ("배수관의 최소 관경은 300 mm로 한다.", "drain", 8),
    ("가로등 설치 간격과 조도 기준을 정한다.", "road", 9),
    ("옹벽 배면의 배수시설은 유지관리가 쉽도록 설치한다.", "earth", 10),
]
QUERIES = ["배수시설 설치기준", "경사 1:1.5", "0.6m 측구 폭", "콘크리트 강도", "없는단어", "기준"]


def make_nodes() -> list[TextNode]:
    return [
        TextNode(
            text=t,
            id_=f"n{i:02d}",
            metadata={"category": cat, "page": page, "file_path": f"/tmp/doc{i}.hwpx"},
            excluded_embed_metadata_keys=["file_path"],
        )
        for i, (t, cat, page) in enumerate(TEXTS)
    ]


@pytest.fixture(scope="module")
def tokenizer() -> KiwiTokenizer:
    return KiwiTokenizer()


@pytest.fixture()
def retriever(tokenizer: KiwiTokenizer) -> KiwiBM25Retriever:
    return KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=tokenizer)


def oracle_scores(nodes: list[TextNode], tok: KiwiTokenizer, query: str) -> np.ndarray:
    corpus = [tok.tokenize(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in nodes]
    return np.asarray(rank_bm25.BM25Okapi(corpus).get_scores(tok.tokenize(query)))


def load(d: Path, **kw: object) -> KiwiBM25Retriever:
    """The BM25 view of the index persisted in ``d``."""
    return CriterionAwareIndex.load(d, **kw).as_retriever("bm25")  # type: ignore[return-value]


def all_scores(r: KiwiBM25Retriever, query: str) -> dict[str, float]:
    old = r.similarity_top_k
    r.similarity_top_k = max(1, len(r))
    try:
        return {n.node.node_id: n.score for n in r.retrieve(query) if n.score is not None}
    finally:
        r.similarity_top_k = old


def test_scores_and_order_match_rank_bm25(
    retriever: KiwiBM25Retriever, tokenizer: KiwiTokenizer
) -> None:
    nodes = make_nodes()
    retriever.similarity_top_k = len(nodes)
    for q in QUERIES:
        expected = oracle_scores(nodes, tokenizer, q)
        got = retriever.retrieve(q)
        order = sorted(
            (i for i in range(len(nodes)) if expected[i] != 0), key=lambda i: (-expected[i], i)
        )
        assert [n.node.node_id for n in got] == [nodes[i].node_id for i in order]
        for n, i in zip(got, order, strict=True):
            assert n.score == pytest.approx(expected[i], rel=1e-9, abs=1e-9)
    assert retriever.retrieve("없는단어") == []  # zero scores are dropped
    assert retriever.retrieve("   ") == []


def test_indexed_text_is_embed_mode_content(retriever: KiwiBM25Retriever) -> None:
    counts = retriever.token_counts("n00")
    assert counts["road"] == 1  # metadata value in EMBED mode
    assert "/tmp/doc0.hwpx" not in counts and "hwpx" not in counts  # excluded key


def test_top_k_is_clamped_with_warning(tokenizer: KiwiTokenizer) -> None:
    with pytest.warns(UserWarning, match="exceeds the 10 indexed nodes"):
        r = KiwiBM25Retriever.from_defaults(
            nodes=make_nodes(), tokenizer=tokenizer, similarity_top_k=50
        )
    assert 0 < len(r.retrieve("기준 배수")) <= 10
    r2 = KiwiBM25Retriever.from_defaults(
        nodes=make_nodes(), tokenizer=tokenizer, similarity_top_k=2
    )
    assert len(r2.retrieve("배수시설 기준 설치")) == 2


@pytest.mark.parametrize(
    ("filters", "allowed"),
    [
        (
            MetadataFilters(filters=[MetadataFilter(key="category", value="road")]),
            {"n00", "n01", "n04", "n08"},
        ),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(
                        key="category", value=["earth", "drain"], operator=FilterOperator.IN
                    )
                ]
            ),
            {"n02", "n07", "n09"},
        ),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="category", value="road"),
                    MetadataFilter(key="page", value=3, operator=FilterOperator.LT),
                ],
                condition=FilterCondition.AND,
            ),
            {"n00", "n01"},
        ),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="category", value="safety"),
                    MetadataFilter(key="page", value=10),
                ],
                condition=FilterCondition.OR,
            ),
            {"n05", "n09"},
        ),
        (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="category", value="earth"),
                    MetadataFilters(
                        filters=[
                            MetadataFilter(key="page", value=1),
                            MetadataFilter(key="page", value=5),
                        ],
                        condition=FilterCondition.OR,
                    ),
                ],
                condition=FilterCondition.OR,
            ),
            {"n00", "n02", "n04", "n09"},
        ),
    ],
)
def test_metadata_filters(
    tokenizer: KiwiTokenizer, filters: MetadataFilters, allowed: set[str]
) -> None:
    base = KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=tokenizer)
    r = KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=tokenizer, filters=filters)
    q = "배수시설 설치 기준 경사 강도 안전점검"
    unfiltered = all_scores(base, q)
    got = all_scores(r, q)
    assert set(got) == {k for k in unfiltered if k in allowed}
    assert set(got)  # the filter leaves matches to check
    for k, v in got.items():
        assert v == unfiltered[k]  # corpus statistics are not changed by the filter


def test_insert_and_delete_equal_fresh_build(tokenizer: KiwiTokenizer) -> None:
    nodes = make_nodes()
    r = KiwiBM25Retriever.from_defaults(nodes=nodes[:6], tokenizer=tokenizer)
    r.index.insert_nodes(nodes[6:])
    r.index.delete_nodes(["n01", "n07"])
    changed = TextNode(
        text="배수시설 설치기준 개정안 300 mm", id_="n03", metadata={"category": "x"}
    )
    r.index.insert_nodes([changed])  # upsert: replaces n03, appended at the end
    expected_nodes = [n for n in nodes if n.node_id not in {"n01", "n07", "n03"}] + [changed]
    assert [n.node_id for n in r.nodes] == [n.node_id for n in expected_nodes]
    fresh = KiwiBM25Retriever.from_defaults(nodes=expected_nodes, tokenizer=tokenizer)
    for q in QUERIES:
        toks = tokenizer.tokenize(q)
        assert r.bm25.get_scores(toks).tolist() == fresh.bm25.get_scores(toks).tolist()
        assert all_scores(r, q) == all_scores(fresh, q)
    with pytest.raises(ConfigurationError, match="unknown node ids"):
        r.index.delete_nodes(["nope"])


def test_updates_never_show_queries_half_an_update(tokenizer: KiwiTokenizer) -> None:
    """Issue 13.7: a delete/insert loop in one thread while two threads query. Before the
    one-assignment snapshot, a query could read the new BM25 index with the old node list
    (IndexError, or hits naming the wrong node). Every hit must be a node of the index with
    the score a fresh build over one of the two versions gives it."""
    nodes = make_nodes()
    r = KiwiBM25Retriever.from_defaults(nodes=nodes, tokenizer=tokenizer, similarity_top_k=5)
    moving = nodes[:4]
    full = {q: dict(all_scores(r, q)) for q in QUERIES}
    rest = KiwiBM25Retriever.from_defaults(nodes=nodes[4:], tokenizer=tokenizer)
    part = {q: dict(all_scores(rest, q)) for q in QUERIES}
    stop = threading.Event()
    errors: list[BaseException] = []
    wrong: list[tuple[str, str, float]] = []

    def write() -> None:
        try:
            for _ in range(150):
                r.index.delete_nodes([n.node_id for n in moving])
                r.index.insert_nodes(moving)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            stop.set()

    def read() -> None:
        try:
            while not stop.is_set():
                for q in QUERIES:
                    for h in r.retrieve(q):
                        want = {full[q].get(h.node.node_id), part[q].get(h.node.node_id)}
                        if not any(w is not None and abs(w - h.score) <= 1e-9 * max(1, w)
                                   for w in want):
                            wrong.append((q, h.node.node_id, h.score))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    assert not wrong, wrong[:3]


def test_persist_roundtrip(tmp_path: Path, retriever: KiwiBM25Retriever) -> None:
    """The index of a BM25 view persists as one generation of flat files, one manifest."""
    d = tmp_path / "idx"
    retriever.index.persist(d)
    gen = live_dir(d)
    assert sorted(p.name for p in gen.iterdir()) == [
        "bm25.doc_len.npy", "bm25.indices.npy", "bm25.indptr.npy", "bm25.term_hash.npy",
        "bm25.term_offsets.npy", "bm25.term_order.npy", "bm25.terms.npy", "bm25.tf.npy",
        "index.json", "manifest.json", "nodes.blob", "nodes.key_hash.npy", "nodes.key_len.npy",
        "nodes.key_order.npy", "nodes.meta.json", "nodes.offsets.npy",
    ]
    spec = json.loads((gen / "index.json").read_text(encoding="utf-8"))
    assert spec["format_version"] == storage.FORMAT_VERSION == 6
    assert spec["tokenizer"]["spec_hash"] == retriever.tokenizer.spec_hash
    assert spec["vectors"] == "none"  # BM25 only: no vector store bound
    loaded = load(d)
    for q in QUERIES:
        assert all_scores(loaded, q) == all_scores(retriever, q)
    got = loaded.retrieve("콘크리트 강도")[0].node
    assert isinstance(got, TextNode) and got.metadata["page"] == 7
    assert got.excluded_embed_metadata_keys == ["file_path"]
    assert not list(tmp_path.glob(".idx.*"))  # no temp dirs left behind


def test_views_keep_their_own_filters_and_top_k(tmp_path: Path, tokenizer: KiwiTokenizer) -> None:
    """Filters and ``similarity_top_k`` are options of a view, not state of the index: a view
    of the reloaded index with the same options scores the same."""
    filters = MetadataFilters(filters=[MetadataFilter(key="category", value="road")])
    r = KiwiBM25Retriever.from_defaults(
        nodes=make_nodes(), tokenizer=tokenizer, filters=filters, similarity_top_k=3
    )
    r.index.persist(tmp_path / "f")
    index = CriterionAwareIndex.load(tmp_path / "f")
    loaded = index.as_retriever("bm25", similarity_top_k=3, filters=filters)
    assert loaded.similarity_top_k == 3 and loaded.filters == filters
    assert all_scores(loaded, "기준 설치") == all_scores(r, "기준 설치")
    unfiltered = index.as_retriever("bm25")
    assert set(all_scores(unfiltered, "기준 설치")) > set(all_scores(loaded, "기준 설치"))


@pytest.mark.parametrize(
    "victim",
    [
        "manifest.json",
        "bm25.indices.npy",
        "bm25.terms.npy",
        "bm25.doc_len.npy",
        "nodes.blob",
        "nodes.offsets.npy",
        "nodes.meta.json",
        "index.json",
    ],
)
@pytest.mark.parametrize("damage", ["delete", "corrupt"])
def test_damaged_directory_raises_naming_the_file(
    tmp_path: Path, retriever: KiwiBM25Retriever, victim: str, damage: str
) -> None:
    d = tmp_path / "idx"
    retriever.index.persist(d)
    path = live_dir(d) / victim
    if damage == "delete":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    with pytest.raises(IndexPersistError, match=victim.replace(".", r"\.")):
        load(d)


def test_older_formats_raise_a_typed_error(tmp_path: Path, retriever: KiwiBM25Retriever) -> None:
    """Format 1 (``counts.npz``) and the nested format 3 of the retriever's own generation
    are not read: rebuild."""
    d = tmp_path / "old"
    d.mkdir()
    for name in ("config.json", "terms.json", "counts.npz", "nodes.json"):
        (d / name).write_bytes(b"{}")
    manifest = {"format_version": 1, "kind": "KiwiBM25Retriever", "files": {}}
    (d / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(IndexPersistError, match="KiwiBM25Retriever"):
        load(d)
    retriever.index.persist(tmp_path / "new")
    gen = live_dir(tmp_path / "new")
    bound = json.loads((gen / "manifest.json").read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=3)
    with pytest.raises(IndexPersistError, match=r"format_version 3.*rebuild"):
        load(tmp_path / "new")


def test_crash_mid_persist_keeps_old_index(
    tmp_path: Path,
    retriever: KiwiBM25Retriever,
    tokenizer: KiwiTokenizer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = tmp_path / "idx"
    retriever.index.persist(d)
    before = all_scores(load(d), "배수시설")
    other = KiwiBM25Retriever.from_defaults(nodes=make_nodes()[:4], tokenizer=tokenizer)
    calls = {"n": 0}
    real = _files.fsync_write

    def flaky(path: Path, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (simulated)")
        real(path, data)

    monkeypatch.setattr(_files, "fsync_write", flaky)
    with pytest.raises(OSError, match="simulated"):
        other.index.persist(d)
    monkeypatch.undo()
    assert calls["n"] == 2
    assert all_scores(load(d), "배수시설") == before
    assert [p.name for p in d.iterdir() if p.name.startswith("gen-")] == [live_dir(d).name]
    # a directory with data files but no manifest (crash before the manifest) never loads
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("index.json", "nodes.blob"):
        (partial / name).write_bytes((live_dir(d) / name).read_bytes())
    with pytest.raises(IndexPersistError, match="manifest.json is missing"):
        load(partial)
    with pytest.raises(IndexPersistError, match="no such index directory"):
        load(tmp_path / "absent")


def test_tokenizer_mismatch_warns(
    tmp_path: Path, retriever: KiwiBM25Retriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "idx"
    retriever.index.persist(d)
    with pytest.warns(TokenizerMismatchWarning, match="compounds"):
        load(d, tokenizer=KiwiTokenizer(compounds="none"))
    import kiwipiepy

    monkeypatch.setattr(kiwipiepy, "__version__", "0.0.1")
    with pytest.warns(TokenizerMismatchWarning, match="kiwipiepy_version"):
        other_version = load(d)
    assert other_version.token_cache == {}  # stored tokens are not reused across versions
    assert all_scores(other_version, "배수시설") == all_scores(retriever, "배수시설")


def test_same_tokenizer_loads_without_warning(tmp_path: Path, retriever: KiwiBM25Retriever) -> None:
    retriever.index.persist(tmp_path / "idx")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", TokenizerMismatchWarning)
        load(tmp_path / "idx")


def test_token_cache_skips_kiwi(
    tmp_path: Path, tokenizer: KiwiTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=tokenizer)
    cache = first.token_cache
    assert cache is not None and len(cache) == len(TEXTS)
    first.index.persist(tmp_path / "idx")
    loaded = load(tmp_path / "idx")

    def boom(*a: object, **k: object) -> list[list[str]]:
        raise AssertionError("Kiwi was called for a cached text")

    monkeypatch.setattr(KiwiTokenizer, "tokenize_batch", boom)
    again = KiwiBM25Retriever.from_defaults(
        nodes=make_nodes(), tokenizer=tokenizer, token_cache=cache
    )
    from_disk = KiwiBM25Retriever.from_defaults(
        nodes=make_nodes(), tokenizer=tokenizer, token_cache=loaded.token_cache
    )
    for q in QUERIES:
        assert all_scores(again, q) == all_scores(first, q)
        assert all_scores(from_disk, q) == all_scores(first, q)
    with pytest.raises(AssertionError, match="Kiwi was called"):
        KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=tokenizer, token_cache=False)


def test_cache_is_keyed_by_tokenizer_spec(tokenizer: KiwiTokenizer) -> None:
    shared: dict[str, list[str]] = {}
    KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=tokenizer, token_cache=shared)
    other = KiwiTokenizer(compounds="none")
    r = KiwiBM25Retriever.from_defaults(nodes=make_nodes(), tokenizer=other, token_cache=shared)
    assert len(shared) == 2 * len(TEXTS)
    assert "설치기준" not in r.token_counts("n00")


async def test_aretrieve_does_not_block_event_loop(
    retriever: KiwiBM25Retriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = retriever.retrieve("배수시설 설치기준")
    real = KiwiTokenizer.tokenize

    def slow(self: KiwiTokenizer, text: str) -> list[str]:
        time.sleep(0.3)  # blocking work inside _retrieve
        return real(self, text)

    monkeypatch.setattr(KiwiTokenizer, "tokenize", slow)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(10):
            await asyncio.sleep(0.02)
            ticks += 1

    async def query() -> tuple[list, int]:
        res = await retriever.aretrieve("배수시설 설치기준")
        return res, ticks  # ticks seen when the retrieval finished

    (got, ticks_at_finish), _ = await asyncio.gather(query(), ticker())
    assert ticks_at_finish >= 5  # a blocking _aretrieve would let the ticker run 0-1 times
    assert [(n.node.node_id, n.score) for n in got] == [(n.node.node_id, n.score) for n in expected]


def test_from_docstore_and_index(tokenizer: KiwiTokenizer) -> None:
    ds = SimpleDocumentStore()
    ds.add_documents(make_nodes())
    a = KiwiBM25Retriever.from_defaults(docstore=ds, tokenizer=tokenizer)
    idx = SummaryIndex(make_nodes())
    b = KiwiBM25Retriever.from_defaults(index=idx, tokenizer=tokenizer)
    assert len(a) == len(b) == len(TEXTS)
    assert all_scores(a, "배수시설") == all_scores(b, "배수시설")


def test_invalid_configuration(tokenizer: KiwiTokenizer) -> None:
    with pytest.raises(ConfigurationError, match="exactly one"):
        KiwiBM25Retriever.from_defaults(nodes=make_nodes(), docstore=SimpleDocumentStore())
    with pytest.raises(ConfigurationError, match="exactly one"):
        KiwiBM25Retriever.from_defaults()
    with pytest.raises(ConfigurationError, match="similarity_top_k"):
        KiwiBM25Retriever(nodes=make_nodes(), tokenizer=tokenizer, similarity_top_k=0)
    with pytest.raises(ConfigurationError, match="duplicate node ids"):
        KiwiBM25Retriever(nodes=make_nodes() + make_nodes()[:1], tokenizer=tokenizer)
    with pytest.raises(ConfigurationError, match="MetadataFilters"):
        KiwiBM25Retriever(nodes=make_nodes(), tokenizer=tokenizer, filters={"category": "road"})  # type: ignore[arg-type]


def test_empty_retriever_and_progress(tokenizer: KiwiTokenizer) -> None:
    with pytest.warns(UserWarning, match="exceeds the 0 indexed nodes"):
        r = KiwiBM25Retriever.from_defaults(nodes=[], tokenizer=tokenizer)
    assert r.retrieve("배수") == []
    r.index.insert_nodes(make_nodes())
    assert r.retrieve("배수시설")
    p = KiwiBM25Retriever.from_defaults(
        nodes=make_nodes(), tokenizer=tokenizer, show_progress=True, token_cache=False
    )
    assert len(p) == len(TEXTS)


@pytest.mark.corpus
def test_real_corpus_parity_with_rank_bm25(tokenizer: KiwiTokenizer) -> None:
    path = SHARED / "eval" / "lhcs_construction" / "corpus.jsonl"
    qpath = SHARED / "eval" / "lhcs_construction" / "queries.jsonl"
    if not path.is_file():
        pytest.skip("../shared/eval is not present")
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()[:150]]
    nodes = [TextNode(text=r["title"] + "\n" + r["text"], id_=r["_id"]) for r in rows]
    r = KiwiBM25Retriever.from_defaults(nodes=nodes, tokenizer=tokenizer, similarity_top_k=150)
    corpus = tokenizer.tokenize_batch([n.get_content() for n in nodes])
    oracle = rank_bm25.BM25Okapi(corpus)
    queries = [json.loads(x)["text"] for x in qpath.read_text(encoding="utf-8").splitlines()[:20]]
    for q in queries:
        expected = np.asarray(oracle.get_scores(tokenizer.tokenize(q)))
        got = r.retrieve(q)
        assert len(got) == int((expected != 0).sum())
        for n in got:
            e = expected[r.nodes.index(n.node)]
            assert abs(n.score - e) <= 1e-9 * max(1.0, abs(e))
