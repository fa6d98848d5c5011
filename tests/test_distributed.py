"""Ray ingestion (``llama_index_car.folder.ray``) against the single-process ``build_index``.

One local Ray cluster with 2 CPUs (2 workers) indexes a small corpus: three HWPX files built
in code (sections, a table, shared and rare terms), one broken file, a directory named
``*.hwpx``, and — when ``../shared``
is present — three small files of the shared corpus, one of its ``bad/`` files, and a binary
HWP 5, an HWPML and an HWP 5 file named ``.hwpx``. The same
corpus is indexed by ``build_index`` in this process. Oracles: the single-process folder
(node JSON incl. table cells, vectors, BM25 counts, manifest, folder listing, hypothesizer
files byte for byte) and
``rank_bm25.BM25Okapi`` on the single-process tokens (scores to 1e-9 relative).

Tests on the cluster are marked ``slow`` (about 30–50 s together on 2 shared cores, most of it
the two builds and ``ray.init``); CI runs them. The embedding is a deterministic hashed
character-bigram embedding (cheap, exactly
reproducible in any process); it is pickled by value to the workers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode
from llama_index.core.storage.docstore.utils import doc_to_json
from llama_index.readers.hwpx.writer import HWPXBuilder

from llama_index_car._persist import live_dir
from llama_index_car.bm25 import BM25Okapi
from llama_index_car.folder.ray import (
    BM25Shard,
    merge_bm25_shards,
    ray_builder,
    shard_from_term_counts,
)
from tests.conftest import SHARED

QUERIES = ["배수시설 설치기준", "터널 환기 설비 용량", "포장 두께 설치", "난간 높이 1.1 m", "없는단어"]
SHARED_FILES = ("hwpjs_outline.hwpx", "hwpxlib_table_small.hwpx", "osk_textbox_table.hwpx")
OTHER_FORMATS = {"g_table.hwp": "hwp/nodehwp-table-simple-1.hwp",
                 "g_form.hml": "hml/kaist_double_major_form.hml",
                 "g_hwp5_named.hwpx": "hwp/kaist-055.hwp"}


class BigramHashEmbedding(BaseEmbedding):
    """64-d L2-normalised counts of hashed character bigrams (deterministic, no model)."""

    dim: int = 64

    @classmethod
    def class_name(cls) -> str:
        return "BigramHashEmbedding"

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dim)
        for a, b in zip(text, text[1:], strict=False):
            h = hashlib.blake2b((a + b).encode(), digest_size=4).digest()
            v[int.from_bytes(h, "little") % self.dim] += 1.0
        n = float(np.linalg.norm(v)) or 1.0
        return (v / n).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)


# ----------------------------------------------------------------------------- pure merge
def test_merged_shards_score_like_one_index_and_rank_bm25() -> None:
    """Shards of a split corpus merge into the index of the whole corpus (global IDF)."""
    from rank_bm25 import BM25Okapi as RankBM25

    docs = [["설치", "기준", "설치"], ["배수", "시설"], ["설치", "시설"], ["기준"], ["배수"],
            ["터널", "환기", "기준"], [], ["배수", "배수", "시설"]]
    splits = [docs[:3], docs[3:4], docs[4:]]

    def shard(part: list[list[str]]) -> BM25Shard:
        tf = [(list(dict.fromkeys(d)), [d.count(t) for t in dict.fromkeys(d)]) for d in part]
        return shard_from_term_counts(tf)

    merged = merge_bm25_shards([shard(p) for p in splits])
    whole = BM25Okapi(docs)
    oracle = RankBM25(docs)
    assert merged.terms == whole.terms  # first-occurrence order over the whole corpus
    assert (merged.counts != whole.counts).nnz == 0
    for q in (["설치", "기준"], ["배수"], ["시설", "터널", "시설"]):
        np.testing.assert_allclose(merged.get_scores(q), oracle.get_scores(q), rtol=1e-9)
    # a shard-local IDF would differ: "배수" has df 2 of 4 in the last shard, 3 of 8 overall
    local = BM25Okapi(splits[2])
    assert not np.allclose(local.get_scores(["배수"]), merged.get_scores(["배수"])[4:])


def test_merge_bm25_shards_is_bm25okapi_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ray path has no merge of its own: ``merge_bm25_shards`` is ``BM25Okapi.merge``
    over one ``from_counts`` index per shard, and the result saves to the same bytes as a
    single-process build; no shards give an empty index."""
    docs = [["a", "b", "a"], ["c"], [], ["b", "d"], ["a"]]
    calls: list[int] = []
    real = BM25Okapi.merge.__func__  # type: ignore[attr-defined]

    def spy(cls: type[BM25Okapi], shards: list[BM25Okapi], **kw: object) -> BM25Okapi:
        calls.append(len(shards))
        return real(cls, shards, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(BM25Okapi, "merge", classmethod(spy))
    parts = [docs[:2], docs[2:3], docs[3:]]
    shards = [
        shard_from_term_counts([(list(dict.fromkeys(d)), [d.count(t) for t in dict.fromkeys(d)])
                                for d in part])
        for part in parts
    ]
    merged = merge_bm25_shards(shards)
    assert calls == [3]
    merged.save(tmp_path / "m")
    BM25Okapi(docs).save(tmp_path / "w")
    got, want = live_dir(tmp_path / "m"), live_dir(tmp_path / "w")
    names = sorted(p.name for p in want.iterdir())
    assert sorted(p.name for p in got.iterdir()) == names
    for name in names:
        assert (got / name).read_bytes() == (want / name).read_bytes(), name
    assert merge_bm25_shards([]).corpus_size == 0


def test_ray_builder_rejects_a_malformed_address() -> None:
    from llama_index_car._errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="ray://HOST:10001"):
        ray_builder("http://head:8265")


# ----------------------------------------------------------------------------- Ray vs local
def _guide(path: Path, title: str, body: list[str], table: list[list[str]] | None) -> Path:
    builder = HWPXBuilder(title=title)
    s = builder.add_section()
    s.heading(title, level=1)
    for p in body:
        s.paragraph(p)
    if table:
        s.table(table, caption=f"{title} 기준표")
    s2 = builder.add_section()
    s2.heading("부칙", level=1)
    s2.paragraph("이 기준은 고시한 날부터 시행한다. 설치기준은 별도로 정한다.")
    builder.save(path)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray-corpus")
    _guide(root / "a_drain.hwpx", "배수시설 설치기준",
           ["측구의 깊이는 0.3 m 이상으로 한다.", "배수시설 설치기준은 강우 강도에 따른다."],
           [["구분", "설치기준"], ["측구", "깊이 0.3 m 이상"], ["집수정", "간격 20 m"]])
    _guide(root / "b_tunnel.hwpx", "터널 환기 설계",
           ["환기설비의 용량기준은 터널 연장과 교통량을 고려하여 정한다.",
            "제트팬의 설치기준은 터널 단면에 따른다."] * 3, None)
    _guide(root / "c_bridge.hwpx", "교량 점검시설",
           ["점검통로 폭은 0.6 m 이상으로 한다.", "포장 두께는 설계 교통량에 따라 정한다."],
           [["구분", "기준"], ["난간", "높이 1.1 m 이상"], ["통로", "폭 0.6 m"]])
    (root / "d_broken.hwpx").write_bytes(b"PK\x03\x04 not really a zip")
    (root / "d_folder.hwpx").mkdir()  # a directory named like a file: a listed failure
    if SHARED.is_dir():
        src = SHARED / "corpus" / "hwpx"
        for name in SHARED_FILES:
            shutil.copy(src / name, root / f"e_{name}")
        shutil.copy(src / "bad" / "encrypted_password_12345.hwpx", root / "f_encrypted.hwpx")
        for name, rel in OTHER_FORMATS.items():  # binary HWP 5 and HWPML read like HWPX
            shutil.copyfile(SHARED / "corpus" / rel, root / name)
    return root


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    ray = pytest.importorskip(
        "ray", reason="ray is not installed: pip install 'llama-index-car[ray]'"
    )
    from ray import cloudpickle

    # the test embedding lives in this (importlib-loaded) module: ship it by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def built(
    corpus: Path, ray_session: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    from llama_index_car.folder import BuildOptions, build_index
    from llama_index_car.folder.ray import build_index_ray

    out = tmp_path_factory.mktemp("ray-out")
    failed_local: list[str] = []
    failed_ray: list[str] = []
    local = build_index(corpus, out / "local", BuildOptions(
        embed_model=BigramHashEmbedding(), on_error=lambda f: failed_local.append(f.path)))
    remote = build_index_ray(corpus, out / "ray", BuildOptions(
        embed_model=BigramHashEmbedding(), on_error=lambda f: failed_ray.append(f.path)))
    assert ray_session.cluster_resources().get("CPU") == 2
    return {"local": local, "ray": remote, "out": out, "failed_local": failed_local,
            "failed_ray": failed_ray}


def _load(folder: Path) -> Any:
    from llama_index_car.folder import load_index

    return load_index(folder, embed_model=BigramHashEmbedding())


@pytest.mark.slow
def test_failures_are_recorded_not_fatal(built: dict[str, Any], corpus: Path) -> None:
    local, remote = built["local"], built["ray"]
    assert remote.failures == local.failures
    assert {str(corpus / "d_broken.hwpx"), str(corpus / "d_folder.hwpx")} <= {
        f.path for f in remote.failures}
    assert built["failed_ray"] == built["failed_local"] == [f.path for f in local.failures]
    assert (remote.files, remote.documents, remote.nodes, remote.table_nodes) == (
        local.files, local.documents, local.nodes, local.table_nodes)
    assert remote.nodes > 6
    if SHARED.is_dir():  # every format read on the workers, none a failure
        assert not {str(corpus / n) for n in OTHER_FORMATS} & {f.path for f in remote.failures}
        sources = json.loads((live_dir(built["out"] / "ray") / "car_index.json").read_text())[
            "sources"]
        # g_hwp5_named.hwpx holds kaist-055.hwp, the HWP 5 copy of kaist_double_major_form:
        # one document, indexed once (issue 37, item 11; the .hwpx name is preferred), as
        # build_index does
        assert sources["g_form.hml"]["alias_of"] == "g_hwp5_named.hwpx"
        assert all(sources[n]["node_ids"] for n in OTHER_FORMATS if n != "g_form.hml")


@pytest.mark.slow
def test_same_nodes_ids_texts_metadata(built: dict[str, Any]) -> None:
    a, b = _load(built["out"] / "local"), _load(built["out"] / "ray")
    assert [doc_to_json(n) for n in b.nodes] == [doc_to_json(n) for n in a.nodes]
    assert [n.node_id for n in b.as_retriever("bm25").nodes] == [n.node_id for n in a.as_retriever("bm25").nodes]
    assert json.loads((live_dir(built["out"] / "ray") / "car_index.json").read_text()) == json.loads(
        (live_dir(built["out"] / "local") / "car_index.json").read_text())
    assert sorted(p.name for p in live_dir(built["out"] / "ray").iterdir()) == sorted(
        p.name for p in live_dir(built["out"] / "local").iterdir())
    assert any(n.metadata.get("cells") for n in b.nodes)  # table cells travel in the nodes


@pytest.mark.slow
def test_same_embeddings(built: dict[str, Any]) -> None:
    a, b = _load(built["out"] / "local"), _load(built["out"] / "ray")
    # the flat store's files: the same float32 vectors, in the same rows, of the same node ids
    for name in ("flat/vectors.npy", "flat/codes.npy", "flat/nodes.blob"):
        ray_file = live_dir(built["out"] / "ray") / name
        assert ray_file.read_bytes() == (live_dir(built["out"] / "local") / name).read_bytes()
    assert len(a.vector_index.vector_store) == len(b.vector_index.vector_store) == len(a.nodes)
    # span vectors: embedded on the workers, the same files as the single-process build
    for name in ("spans.blob", "spans.rows.npy", "spans.vectors.npy"):
        ray_file = live_dir(built["out"] / "ray") / name
        assert ray_file.read_bytes() == (live_dir(built["out"] / "local") / name).read_bytes()
    assert b.spans is not None and b.spans.n_spans > len(b.nodes)
    assert not (live_dir(built["out"] / "ray") / "hypothesizer").exists()  # nothing else learnt


@pytest.mark.slow
def test_same_bm25_statistics_and_scores(built: dict[str, Any]) -> None:
    from rank_bm25 import BM25Okapi as RankBM25

    a, b = _load(built["out"] / "local"), _load(built["out"] / "ray")
    assert b.as_retriever("bm25").bm25.terms == a.as_retriever("bm25").bm25.terms
    assert (b.as_retriever("bm25").bm25.counts != a.as_retriever("bm25").bm25.counts).nnz == 0
    tok = a.as_retriever("bm25").tokenizer
    oracle = RankBM25(
        [tok.tokenize(n.get_content(metadata_mode=MetadataMode.EMBED)) for n in a.as_retriever("bm25").nodes]
    )
    for q in QUERIES:
        qt = tok.tokenize(q)
        np.testing.assert_allclose(b.as_retriever("bm25").bm25.get_scores(qt), oracle.get_scores(qt), rtol=1e-9)
        hits_a = [(h.node.node_id, h.score) for h in a.as_retriever("bm25").retrieve(q)]
        hits_b = [(h.node.node_id, h.score) for h in b.as_retriever("bm25").retrieve(q)]
        assert hits_b == hits_a
        car_a = [h.node.node_id for h in a.as_retriever("car").retrieve(q)]
        assert [h.node.node_id for h in b.as_retriever("car").retrieve(q)] == car_a


@pytest.mark.slow
def test_cli_index_ray_writes_the_same_folder(
    built: dict[str, Any], corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llama-car index --ray`` on the running session (USE embedding: nodes and BM25)."""
    from llama_index_car.cli import main

    out = tmp_path / "cli"
    rc = main(["index", str(corpus), "--persist", str(out), "--ray", "--embed", "use",
               "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr()
    assert "skipped" in printed.err and "d_broken.hwpx" in printed.err
    manifest = json.loads((live_dir(out) / "car_index.json").read_text())
    assert manifest["embed"]["provider"] == "use"
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_car.indices import CriterionAwareIndex

    def lexical(folder: Path) -> Any:
        """The folder's BM25 view; a stand-in of its recorded embedding answers the load's
        embedding check (every load path checks it against the record) without loading USE."""
        recorded = json.loads((live_dir(folder) / "car_index.json").read_text())["embed"]
        mock = MockEmbedding(embed_dim=recorded.get("dimensions") or 8,
                             model_name=recorded.get("model_name") or "unknown")
        return CriterionAwareIndex.load(folder, embed_model=mock).as_retriever("bm25")

    cli_bm25 = lexical(out)
    ref = lexical(built["out"] / "local")
    assert [doc_to_json(n) for n in cli_bm25.nodes] == [doc_to_json(n) for n in ref.nodes]
    assert (cli_bm25.bm25.counts != ref.bm25.counts).nnz == 0


def test_ray_builder_refuses_options_it_does_not_support(corpus: Path, tmp_path: Path) -> None:
    """The Ray path takes the local build's options (one ``BuildOptions``) and refuses, by
    flag, those it cannot honour yet, before any work: a store, an embedding cache."""
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.folder import BuildOptions
    from llama_index_car.folder.ray import build_index_ray

    pytest.importorskip("ray", reason="ray is not installed: pip install 'llama-index-car[ray]'")
    with pytest.raises(ConfigurationError, match="--ray cannot be combined with --store"):
        ray_builder("local")(corpus, tmp_path / "x", BuildOptions(store="chroma:///tmp/x"))
    with pytest.raises(ConfigurationError, match="--ray cannot be combined with --cache-dir"):
        ray_builder("local")(corpus, tmp_path / "x", BuildOptions(cache_dir=tmp_path / "c"))
    with pytest.raises(ConfigurationError, match="--store, --cache-dir"):
        build_index_ray(corpus, tmp_path / "x", BuildOptions(store="qdrant", cache_dir="c"))
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_only_broken_files_is_nothing_to_index(
    built: dict[str, Any], corpus: Path, tmp_path: Path
) -> None:
    """Every file failing is ``NothingToIndexError`` (exit 1 in the CLI), as without Ray."""
    from llama_index_car.folder import BuildOptions, NothingToIndexError
    from llama_index_car.folder.ray import build_index_ray

    failed: list[str] = []
    with pytest.raises(NothingToIndexError, match="1 failed to parse"):
        build_index_ray([corpus / "d_broken.hwpx"], tmp_path / "none", BuildOptions(
            embed_model=BigramHashEmbedding(), on_error=lambda f: failed.append(f.path)))
    assert failed == [str(corpus / "d_broken.hwpx")]
    assert not (tmp_path / "none").exists()
