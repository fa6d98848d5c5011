"""The span index of an index folder (``spans/``): built by ``llama-car index``, kept in step by
``--update`` (oracle: a fresh build of the same files), left out by ``--no-spans``, kept in the
folder for store-backed indexes, checked on load, and used by the folder's ``car``.

Offline USE embedding (``--embed use``, fast) on demo files copied into a temporary folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car._persist import live_dir
from llama_index_car.cli import main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from llama_index_car.folder import load_index
from llama_index_car.folder.record import read_record
from llama_index_car.indices._layout import FORMAT_VERSION
from llama_index_car.spans import node_spans

FIRST = ("dg2012_tunnel.hwpx", "dg2015_rest.hwpx", "dg2016_slope.hwpx")
QUESTIONS = ("측구 깊이 기준은 얼마인가요?", "터널 조명 휘도는 어떻게 정하나요?",
             "휴게소 주차 대수는 몇 대인가요?")  # questions: the span step counts


def _index(capsys: pytest.CaptureFixture[str], src: Path, idx: Path, *extra: str) -> str:
    rc = main(["index", str(src), "--persist", str(idx), "--no-progress", *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    for name in FIRST:
        shutil.copy(DEMO_CORPUS_DIR / name, folder / name)
    return folder


def _span_table(folder: Path) -> dict[str, list[tuple[str, str]]]:
    local = load_index(folder)
    assert local.spans is not None
    return {d: [(s.kind, s.text) for s in local.spans.spans_of(d)] for d in local.spans.node_ids}


def _scores(folder: Path, query_vector: np.ndarray) -> dict[str, float]:
    local = load_index(folder)
    assert local.spans is not None
    ids = local.spans.node_ids
    return {d: h.score for d, h in zip(ids, local.spans.best_spans(query_vector, ids), strict=True)
            if h is not None}


def test_folder_spans_cover_every_node_and_car_ranks_with_them(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = tmp_path / "idx"
    _index(capsys, src, idx, "--embed", "use")
    local = load_index(idx)
    assert local.spans is not None
    assert sorted(local.spans.node_ids) == sorted(n.node_id for n in local.nodes)
    for n in local.nodes:  # the spans of each node are node_spans(node), in order
        assert [s.text for s in local.spans.spans_of(n.node_id)] == [
            s.text for s in node_spans(n)]
    manifest = read_record(idx)
    assert manifest["spans"] == {"spans": local.spans.n_spans, "dim": 512}
    car = local.as_retriever("car", similarity_top_k=5)
    assert car.span_index is local.spans and car.span_weight > 0
    for q in QUESTIONS:
        hits = car.retrieve(q)
        assert hits
        spans = [h.node.metadata["car_explain"].get("span") for h in hits]
        assert all(s is not None and s["text"] for s in spans), q
        for h, s in zip(hits, spans, strict=True):  # the explained span is in the node's text
            assert s["text"] in [x.text for x in local.spans.spans_of(h.node.node_id)]


def test_update_keeps_spans_equal_to_a_fresh_build(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = tmp_path / "idx"
    _index(capsys, src, idx, "--embed", "use")
    before = _span_table(idx)
    shutil.copy(DEMO_CORPUS_DIR / "dg2019_drainage.hwpx", src / "dg2016_slope.hwpx")
    shutil.copy(DEMO_CORPUS_DIR / "dg2018_bridge.hwpx", src / "dg2018_bridge.hwpx")
    (src / "dg2015_rest.hwpx").unlink()
    out = _index(capsys, src, idx, "--update")
    assert "2 changed or new, 1 removed, 1 unchanged" in out
    fresh = tmp_path / "fresh"
    _index(capsys, src, fresh, "--embed", "use")
    updated = _span_table(idx)
    assert updated == _span_table(fresh)
    assert set(updated) != set(before)  # the update did change the span index
    q = np.random.default_rng(0).standard_normal(512)
    a, b = _scores(idx, q), _scores(fresh, q)
    assert a.keys() == b.keys()
    np.testing.assert_allclose([a[k] for k in a], [b[k] for k in a], rtol=0, atol=1e-6)
    assert read_record(idx)["spans"] == read_record(fresh)["spans"]


def test_no_spans_builds_none_and_update_keeps_that(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idx = tmp_path / "idx"
    _index(capsys, src, idx, "--embed", "use", "--no-spans")
    assert read_record(idx)["spans"] is None
    assert not list(live_dir(idx).glob("spans.*"))
    local = load_index(idx)
    assert local.spans is None
    car = local.as_retriever("car")
    assert car.span_index is None and car.span_weight == 0
    assert car.retrieve(QUESTIONS[0])
    for kind in ("bm25", "dense", "hybrid"):  # spans asked of a folder without: one line
        with pytest.raises(ConfigurationError, match="criterion_spans=2 needs a span index"):
            local.as_retriever(kind, criterion_spans=2)
    shutil.copy(DEMO_CORPUS_DIR / "dg2018_bridge.hwpx", src / "dg2018_bridge.hwpx")
    _index(capsys, src, idx, "--update")
    assert load_index(idx).spans is None and read_record(idx)["spans"] is None


def test_store_backed_folder_keeps_its_spans_in_the_folder(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("qdrant_client", reason="the [stores] extra is not installed")
    idx = tmp_path / "idx"
    _index(capsys, src, idx, "--embed", "use", "--store", "qdrant")
    assert (live_dir(idx) / "spans.vectors.npy").is_file()
    local = load_index(idx)
    assert local.spans is not None
    assert sorted(local.spans.node_ids) == sorted(n.node_id for n in local.nodes)
    hits = local.as_retriever("car", similarity_top_k=3).retrieve(QUESTIONS[0])
    assert hits and all("span" in h.node.metadata["car_explain"] for h in hits)
    shutil.copy(DEMO_CORPUS_DIR / "dg2018_bridge.hwpx", src / "dg2018_bridge.hwpx")
    _index(capsys, src, idx, "--update")
    local = load_index(idx)
    assert local.spans is not None
    assert sorted(local.spans.node_ids) == sorted(n.node_id for n in local.nodes)


def test_spans_of_other_nodes_are_refused_on_load(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A consistent generation whose span index does not cover the BM25 nodes (e.g. written
    by a buggy tool): a named error, not spans silently missing for some hits."""
    import json

    from llama_index_car import _persist

    idx = tmp_path / "idx"
    _index(capsys, src, idx, "--embed", "use")
    local = load_index(idx)
    assert local.spans is not None
    fewer = local.spans.without(local.spans.node_ids[:1])
    gen = _persist.live_dir(idx)

    def rebind() -> None:  # a consistent generation, as a buggy tool could write one
        (gen / "manifest.json").unlink()
        _persist.write_manifest(gen, kind="CriterionAwareIndex", format_version=FORMAT_VERSION)

    for path in gen.glob("spans.*"):
        path.unlink()
    fewer.persist_records(gen)
    spec = json.loads((gen / "index.json").read_text(encoding="utf-8"))
    (gen / "index.json").write_text(json.dumps(
        spec | {"spans": {"spans": fewer.n_spans, "dim": fewer.dim}}), encoding="utf-8")
    rebind()
    with pytest.raises(IndexPersistError, match="spans of .* nodes"):
        load_index(idx)
    (gen / "index.json").write_text(json.dumps(spec | {"spans": None}), encoding="utf-8")
    rebind()
    with pytest.raises(IndexPersistError, match="records no span index"):
        load_index(idx)
