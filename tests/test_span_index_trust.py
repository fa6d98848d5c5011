"""A persisted ``SpanIndex`` folder is untrusted input: every damage is an
``IndexPersistError`` naming the file, never a numpy error or a wrong answer."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_car._errors import IndexPersistError
from llama_index_car.span_index import RECORDS_NAME, VECTORS_NAME, SpanIndex
from tests.fakes.embeddings import HashedBigramEmbedding

TEXTS = ["배수시설 설치기준은 강우강도를 고려한다. 집수정 간격은 20 m 이하로 한다.",
         "터널 조명 설계기준은 입구부 휘도를 기준으로 한다."]


def _persisted(tmp_path: Path) -> tuple[SpanIndex, Path]:
    nodes = [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(TEXTS)]
    spans = SpanIndex.from_nodes(nodes, HashedBigramEmbedding())
    spans.persist(tmp_path / "spans")
    return spans, tmp_path / "spans"


def test_a_persisted_span_index_reloads_equal(tmp_path: Path) -> None:
    spans, folder = _persisted(tmp_path)
    again = SpanIndex.load(folder)
    assert again.node_ids == spans.node_ids and again.n_spans == spans.n_spans >= 2
    assert (again._vectors == spans._vectors).all() and again._vectors.dtype == np.float16


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _truncate(folder: Path) -> str:
    data = (folder / VECTORS_NAME).read_bytes()
    (folder / VECTORS_NAME).write_bytes(data[: len(data) - 7])
    return VECTORS_NAME


def _float32(folder: Path) -> str:
    arr = np.load(folder / VECTORS_NAME)
    (folder / VECTORS_NAME).write_bytes(_npy(arr.astype(np.float32)))
    return VECTORS_NAME


def _one_row_less(folder: Path) -> str:
    arr = np.load(folder / VECTORS_NAME)
    (folder / VECTORS_NAME).write_bytes(_npy(arr[:-1]))
    return VECTORS_NAME


def _nan(folder: Path) -> str:
    arr = np.load(folder / VECTORS_NAME)
    arr[0, 0] = np.nan
    (folder / VECTORS_NAME).write_bytes(_npy(arr))
    return VECTORS_NAME


def _records(change: Callable[[dict], None]) -> Callable[[Path], str]:
    def damage(folder: Path) -> str:
        data = json.loads((folder / RECORDS_NAME).read_text(encoding="utf-8"))
        change(data)
        (folder / RECORDS_NAME).write_text(json.dumps(data), encoding="utf-8")
        return RECORDS_NAME
    return damage


DAMAGES = {
    "truncated vectors.npy": _truncate,
    "float32 vectors": _float32,
    "one vector row less": _one_row_less,
    "non-finite vector": _nan,
    "offsets past the spans": _records(lambda d: d["offsets"].__setitem__(-1, 999)),
    "decreasing offsets": _records(lambda d: d.update(offsets=[0, 5, 1][: len(d["offsets"])])),
    "offsets not one per node": _records(lambda d: d["offsets"].pop(1)),
    "repeated node id": _records(lambda d: d.update(node_ids=["n0", "n0"])),
    "a span with end < start": _records(lambda d: d["spans"][0].update(start=9, end=2)),
    "bool offset": _records(lambda d: d["offsets"].__setitem__(0, False)),
    "wrong format": _records(lambda d: d.update(format_version=99)),
    "dim that is not the vectors'": lambda f: (_records(lambda d: d.update(dim=d["dim"] + 1))(f),
                                               VECTORS_NAME)[1],
}


@pytest.mark.parametrize("damage", list(DAMAGES), ids=list(DAMAGES))
def test_damaged_span_folders_name_the_file(tmp_path: Path, damage: str) -> None:
    _, folder = _persisted(tmp_path)
    name = DAMAGES[damage](folder)
    with pytest.raises(IndexPersistError) as info:
        SpanIndex.load(folder)
    assert str(folder / name) in str(info.value)


def test_a_missing_vectors_file_is_named(tmp_path: Path) -> None:
    _, folder = _persisted(tmp_path)
    (folder / VECTORS_NAME).unlink()
    with pytest.raises(IndexPersistError, match=VECTORS_NAME):
        SpanIndex.load(folder)


def test_from_cut_equals_from_nodes_and_refuses_a_wrong_vector_count() -> None:
    """Cutting once and embedding elsewhere (the index build's cache path) gives the index
    ``from_nodes`` gives; a vector list of the wrong length is a typed error, not a shifted
    assignment of vectors to spans."""
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.span_index import cut_nodes

    nodes = [
        TextNode(id_="a", text="폭은 1.5m 이상으로 한다. 높이는 2.0m 이상으로 한다."),
        TextNode(id_="b", text="배수관의 경사는 1/100 이상으로 한다."),
    ]
    model = HashedBigramEmbedding()
    cut = cut_nodes(nodes)
    assert cut.node_ids == ["a", "b"] and list(cut.offsets) == [0, 1, 2] == [0, 1, len(cut.spans)]
    raw = model.get_text_embedding_batch([s.text for s in cut.spans])
    a, b = SpanIndex.from_cut(cut, raw), SpanIndex.from_nodes(nodes, model)
    q = model.get_query_embedding("경사 기준")
    for x, y in zip(a.span_cosines(q, ["a", "b"]), b.span_cosines(q, ["a", "b"]), strict=True):
        assert x is not None and y is not None and np.array_equal(x, y)
    with pytest.raises(ConfigurationError, match="vectors for"):
        SpanIndex.from_cut(cut, raw[:-1])


def test_generation_span_vectors_are_read_by_rows_not_mapped(tmp_path: Path) -> None:
    """An index generation's span vectors (``open_records``) give the in-memory index's best
    spans, stay out of the process's mappings (a node's rows cost their bytes, not resident
    pages), and a vectors file truncated after opening is an error naming it, not SIGBUS."""
    nodes = [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(TEXTS * 3)]
    model = HashedBigramEmbedding()
    spans = SpanIndex.from_nodes(nodes, model)
    spans.persist_records(tmp_path)
    got = SpanIndex.open_records(tmp_path, nodes=len(nodes), spans=spans.n_spans, dim=spans.dim,
                                 full=True)
    q = model.get_query_embedding("집수정 간격 기준")
    ids = [n.node_id for n in nodes][::-1]
    want = [(h.span.text, h.score) for h in spans.best_spans(q, ids) if h is not None]
    assert [(h.span.text, h.score) for h in got.best_spans(q, ids) if h is not None] == want
    assert [s.text for s in got.spans_of("n4")] == [s.text for s in spans.spans_of("n4")]
    with open("/proc/self/maps") as fh:
        assert not any(line.rstrip("\n").endswith(str((tmp_path / "spans.vectors.npy").resolve()))
                       for line in fh)
    (tmp_path / "spans.vectors.npy").write_bytes(b"")  # truncated in place
    with pytest.raises(IndexPersistError, match=r"spans\.vectors\.npy was truncated after it was opened"):
        got.best_spans(q, ids)
