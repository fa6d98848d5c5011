"""The same document in two formats is indexed once (issue 37, item 11).

Real archives hold a document and its conversion side by side (``x.hwp`` and ``x.hwpx``); both
were indexed and filled the top-k with duplicate hits. Files whose texts are the same after
normalisation (NFKC, whitespace runs) are one document: the copy in the preferred format is
indexed and the others are recorded as its aliases (``car_index.json`` sources,
``alias_of``), and the summary line says so. ``--update`` keeps that consistent whatever
comes and goes; the oracle is a fresh build of the same files. Fast fixtures write one
document in HWPX and in HWPML with the reader package's writers; the corpus test uses the
real ``.hwp``/``.hwpx`` twins of ``../shared/corpus/hwp``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from llama_index_car.folder import BuildOptions, build_index, load_index, update_index
from llama_index_car.folder.record import read_record
from llama_index_car.indices._layout import FORMAT_VERSION
from tests.fakes.embeddings import HashedBigramEmbedding


def _write(path: Path, body: str, fmt: str) -> Path:
    from llama_index.readers.hwpx.hml_writer import HMLBuilder
    from llama_index.readers.hwpx.writer import HWPXBuilder

    builder: Any = HWPXBuilder(title="배수시설") if fmt == "hwpx" else HMLBuilder(title="배수시설")
    section = builder.add_section()
    section.heading("Ⅰ. 총칙", level=1)
    section.paragraph(body)
    section.table([["구분", "기준"], ["측구", "0.3 m 이상"]], caption="표 1 설치기준")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(builder.to_bytes())
    return path


DRAIN = "이 기준은 배수시설의 설치기준을 정한다. 측구의 깊이는 0.3 m 이상으로 한다."
TUNNEL = "터널 조명은 입구부 휘도를 기준으로 설계한다. 비상조명은 200 룩스 이상이다."


def _build(src: Path, out: Path) -> Any:
    return build_index(src, out, BuildOptions(embed_model=HashedBigramEmbedding(), use_cache=False))


def _update(src: Path, out: Path) -> Any:
    return update_index(src, out, BuildOptions(embed_model=HashedBigramEmbedding(), use_cache=False))


def _same_as_fresh(src: Path, idx: Path, tmp: Path) -> dict[str, Any]:
    fresh = tmp / f"fresh-{len(list(tmp.glob('fresh-*')))}"
    _build(src, fresh)
    got, want = read_record(idx), read_record(fresh)
    assert got["sources"] == want["sources"]
    assert (got["documents"], got["nodes"]) == (want["documents"], want["nodes"])
    assert {n.node_id for n in load_index(idx, embed_model=HashedBigramEmbedding()).nodes} == {
        n.node_id for n in load_index(fresh, embed_model=HashedBigramEmbedding()).nodes}
    return got["sources"]


def test_a_document_in_two_formats_is_indexed_once(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _write(src / "drain.hwpx", DRAIN, "hwpx")
    _write(src / "drain.hml", DRAIN, "hml")
    _write(src / "tunnel.hwpx", TUNNEL, "hwpx")
    summary = _build(src, tmp_path / "idx")
    sources = read_record(tmp_path / "idx")["sources"]
    assert sources["drain.hml"]["alias_of"] == "drain.hwpx"
    assert sources["drain.hml"]["node_ids"] == [] and sources["drain.hwpx"]["node_ids"]
    assert "alias_of" not in sources["drain.hwpx"] and "alias_of" not in sources["tunnel.hwpx"]
    assert summary.documents == 2 and summary.duplicates == 1
    assert "1 duplicate of indexed files (kept as aliases)" in summary.line()
    index = load_index(tmp_path / "idx", embed_model=HashedBigramEmbedding())
    for kind in ("bm25", "dense", "car"):
        hits = index.as_retriever(kind, similarity_top_k=10).retrieve("측구 깊이 설치기준")
        texts = [h.node.get_content() for h in hits]
        assert hits and len(texts) == len(set(texts)), kind  # no hit twice


def test_update_keeps_twins_consistent(tmp_path: Path) -> None:
    src, idx = tmp_path / "src", tmp_path / "idx"
    _write(src / "drain.hwpx", DRAIN, "hwpx")
    _write(src / "drain.hml", DRAIN, "hml")
    _write(src / "tunnel.hwpx", TUNNEL, "hwpx")
    _build(src, idx)
    # the indexed copy goes while its alias stays: the alias is indexed
    (src / "drain.hwpx").unlink()
    summary = _update(src, idx)
    sources = _same_as_fresh(src, idx, tmp_path)
    assert "alias_of" not in sources["drain.hml"] and sources["drain.hml"]["node_ids"]
    assert summary.duplicates == 0
    # it comes back (the preferred format): it is indexed again, the other an alias again
    _write(src / "drain.hwpx", DRAIN, "hwpx")
    assert _update(src, idx).duplicates == 1
    sources = _same_as_fresh(src, idx, tmp_path)
    assert sources["drain.hml"]["alias_of"] == "drain.hwpx" and not sources["drain.hml"]["node_ids"]
    # a third copy elsewhere: one more alias; the twin changes into another text: indexed
    (src / "old").mkdir()
    shutil.copy(src / "drain.hwpx", src / "old" / "drain.hwpx")
    _update(src, idx)
    sources = _same_as_fresh(src, idx, tmp_path)
    assert sources["old/drain.hwpx"]["alias_of"] == "drain.hwpx"
    _write(src / "drain.hml", TUNNEL + " 개정", "hml")
    _update(src, idx)
    sources = _same_as_fresh(src, idx, tmp_path)
    assert "alias_of" not in sources["drain.hml"] and sources["drain.hml"]["node_ids"]
    # the indexed copy changes to the text of another file: it becomes that one's alias
    _write(src / "drain.hwpx", TUNNEL, "hwpx")
    summary = _update(src, idx)
    sources = _same_as_fresh(src, idx, tmp_path)
    assert sources["tunnel.hwpx"]["alias_of"] == "drain.hwpx"  # drain.hwpx < tunnel.hwpx
    assert "old/drain.hwpx" in sources and "alias_of" not in sources["old/drain.hwpx"]
    assert summary.duplicates == 1
    # nothing changed: nothing done
    assert _update(src, idx).updated == 0


def test_a_hostile_alias_is_a_typed_error(tmp_path: Path) -> None:
    import json

    from llama_index_car import _persist
    from llama_index_car._errors import IndexPersistError

    src, idx = tmp_path / "src", tmp_path / "idx"
    _write(src / "drain.hwpx", DRAIN, "hwpx")
    _build(src, idx)
    gen = _persist.live_dir(idx)
    record = json.loads((gen / "car_index.json").read_text(encoding="utf-8"))
    for alias in ("nowhere.hwpx", "drain.hwpx", 7):
        bad = json.loads(json.dumps(record))
        bad["sources"]["drain.hwpx"]["alias_of"] = alias
        (gen / "car_index.json").write_text(json.dumps(bad), encoding="utf-8")
        _persist.write_manifest(gen, kind="CriterionAwareIndex", format_version=FORMAT_VERSION)
        with pytest.raises(IndexPersistError, match="sources"):
            read_record(idx)


@pytest.mark.corpus
def test_real_hwp_and_hwpx_twins(shared_dir: Path, tmp_path: Path) -> None:
    """``.hwp`` files and their ``.hwpx`` conversions (``hwp/twins``): each pair is one
    document, indexed from the HWPX copy."""
    pairs = ["hwp2hwpx-table", "hwp2hwpx-multi_run", "eq-002", "expense_report", "landscape-001"]
    src = tmp_path / "src"
    src.mkdir()
    for name in pairs:
        shutil.copy(shared_dir / "corpus" / "hwp" / f"{name}.hwp", src / f"{name}.hwp")
        shutil.copy(shared_dir / "corpus" / "hwp" / "twins" / f"{name}.hwpx", src / f"{name}.hwpx")
    summary = _build(src, tmp_path / "idx")
    sources = read_record(tmp_path / "idx")["sources"]
    assert {k: v.get("alias_of") for k, v in sources.items() if k.endswith(".hwp")} == {
        f"{n}.hwp": f"{n}.hwpx" for n in pairs}
    assert summary.duplicates == len(pairs) and summary.documents == len(pairs)
