"""A hostile index folder gives typed errors only (issue 37, item 2).

A real small folder (one demo file, a model-free 64-d embedding) is copied and one field of
``index.json``, ``spans.meta.json``, ``nodes.meta.json`` or ``car_index.json`` is changed — wrong types,
huge and negative numbers, deep nesting, deleted keys — and the generation's manifest is bound
again, as whoever controls the folder can. Loading it and querying it with every retriever
kind must either work or raise a :class:`~llama_index_car._errors.CarError`: never a
``ValidationError``, ``TypeError``, ``OverflowError`` or ``tokenize.TokenError`` traceback.
The default tier runs the targeted cases and a small seeded sweep; ``-m slow`` a larger one.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_index_car import _persist
from llama_index_car._errors import CarError, IndexPersistError
from tests.fakes.embeddings import HashedBigramEmbedding
from tests.fakes.folders import tunnel_folder

FILES = ("index.json", "spans.meta.json", "nodes.meta.json", "car_index.json")
VALUES: tuple[Any, ...] = (
    None, True, False, -1, 0, 1, 3000, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308, -1e308, 0.5,
    "", "x" * 300, "NNG", [], {}, [1], ["a"], {"a": 1}, [[[[[[[[1]]]]]]]], {"a": {"b": {"c": []}}},
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tunnel_folder(tmp_path_factory, "fuzz")


def _paths(obj: Any, prefix: tuple[Any, ...] = (), depth: int = 0) -> Iterator[tuple[Any, ...]]:
    """Every path into ``obj`` (lists: their first and last items), to depth 6."""
    if prefix:
        yield prefix
    if depth > 6:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k), depth + 1)
    elif isinstance(obj, list) and obj:
        for i in sorted({0, len(obj) - 1}):
            yield from _paths(obj[i], (*prefix, i), depth + 1)


def _mutated(obj: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    copy = json.loads(json.dumps(obj))
    parent = copy
    for p in path[:-1]:
        parent = parent[p]
    if delete:
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return copy


def _hostile(base: Path, tmp: Path, name: str, content: bytes) -> Path:
    """A copy of ``base`` whose ``name`` holds ``content``, its manifest bound again."""
    folder = tmp / "case"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(base, folder)
    gen = _persist.live_dir(folder)
    (gen / name).write_bytes(content)
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    return folder


def _open_and_query(folder: Path) -> None:
    """What a user does with a folder: load it, query every kind."""
    from llama_index_car.folder import load_index

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = load_index(folder, embed_model=HashedBigramEmbedding())
        for kind in ("bm25", "dense", "hybrid", "car"):
            index.as_retriever(kind).retrieve("터널 조명 기준")


def _outcome(folder: Path) -> str:
    try:
        _open_and_query(folder)
    except CarError:
        return "typed"
    except Exception as exc:  # what the test counts
        return f"untyped {type(exc).__name__}: {exc}"
    return "ok"


def _cases(base: Path, n: int, seed: int) -> list[tuple[str, tuple[Any, ...], Any, bool]]:
    gen = _persist.live_dir(base)
    data = {f: json.loads((gen / f).read_text(encoding="utf-8")) for f in FILES}
    paths = [(f, p) for f in FILES for p in _paths(data[f])]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        f, p = rng.choice(paths)
        out.append((f, p, rng.choice(VALUES), rng.random() < 0.1))
    return out


def _sweep(base: Path, tmp: Path, n: int, seed: int) -> dict[str, int]:
    gen = _persist.live_dir(base)
    data = {f: json.loads((gen / f).read_text(encoding="utf-8")) for f in FILES}
    counts: dict[str, int] = {}
    bad: list[str] = []
    for f, path, value, delete in _cases(base, n, seed):
        content = json.dumps(_mutated(data[f], path, value, delete)).encode()
        result = _outcome(_hostile(base, tmp, f, content))
        kind = result.split(" ", 1)[0]
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "untyped":
            bad.append(f"{f} {list(path)} {'deleted' if delete else repr(value)[:40]}: {result}")
    assert bad == [], bad[:10]
    return counts


def test_a_seeded_sweep_of_field_mutations_gives_typed_errors_only(
    base: Path, tmp_path: Path
) -> None:
    counts = _sweep(base, tmp_path, 40, seed=37)
    assert counts.get("typed", 0) > 0  # the sweep does reach the checks


@pytest.mark.slow
def test_a_larger_sweep_of_field_mutations_gives_typed_errors_only(
    base: Path, tmp_path: Path
) -> None:
    counts = _sweep(base, tmp_path, 600, seed=2037)
    assert counts.get("typed", 0) > 100


@pytest.mark.parametrize(("field", "value"), [
    ("num_workers", 3000), ("processes", 64), ("min_texts_per_process", 1),
    ("keep_tags", 5), ("keep_tags", [{}]), ("compounds", True), ("model_type", "../x"),
    ("max_chars_per_call", 10**9), ("user_words", [["w", "NNG", float("inf")]]),
    ("surprise", 1),
])
def test_the_tokenizer_spec_is_checked_against_an_allow_list(
    base: Path, tmp_path: Path, field: str, value: Any
) -> None:
    """A folder never chooses threads or processes (``num_workers=3000`` started 3,000
    threads on the first BM25 query), and a field of the wrong type is named, not a
    pydantic ValidationError."""
    spec = json.loads((_persist.live_dir(base) / "index.json").read_text(encoding="utf-8"))
    raw = json.dumps(_mutated(spec, ("tokenizer", "config", field), value, False))
    folder = _hostile(base, tmp_path, "index.json", raw.encode())
    threads = threading.active_count()
    with pytest.raises(IndexPersistError, match=f"index.json: tokenizer.*{field}"):
        _open_and_query(folder)
    assert threading.active_count() <= threads + 2  # no pool of the folder's size


@pytest.mark.parametrize("field", ["start", "end", "row"])
def test_span_offsets_beyond_int64_are_named(base: Path, tmp_path: Path, field: str) -> None:
    """Every span record of the folder gets a field of 2**63: the first span read names the
    record file (spans are parsed when read)."""
    from llama_index_car._records import RecordFile, write_records

    folder = tmp_path / "case"
    shutil.copytree(base, folder)
    gen = _persist.live_dir(folder)
    rf = RecordFile.open(gen, "spans")
    items = [(rf.key(i), json.dumps([s | {field: 2**63} for s in rf.json(i)]).encode())
             for i in range(len(rf))]
    del rf
    for path in gen.glob("spans.*"):
        if not path.name.startswith(("spans.rows", "spans.vectors")):
            path.unlink()
    write_records(gen, "spans", items)
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    with pytest.raises(IndexPersistError, match="spans.blob"):
        _open_and_query(folder)


def test_span_row_offsets_beyond_the_spans_are_named(base: Path, tmp_path: Path) -> None:
    import numpy as np

    raw = np.load(_persist.live_dir(base) / "spans.rows.npy")
    raw[1] = 2**62
    import io

    buf = io.BytesIO()
    np.save(buf, raw)
    with pytest.raises(IndexPersistError, match="spans.rows.npy"):
        _open_and_query(_hostile(base, tmp_path, "spans.rows.npy", buf.getvalue()))


@pytest.mark.parametrize("name", ["flat/vectors.npy", "flat/codes.npy", "spans.vectors.npy"])
def test_an_npy_header_cut_mid_dict_is_named(base: Path, tmp_path: Path, name: str) -> None:
    """The header's declared length is kept and its dict cut in the middle: numpy's parser
    raised ``tokenize.TokenError``. Every other cut through the header as well."""
    from llama_index_car.folder.load import read_vectors

    raw = (_persist.live_dir(base) / name).read_bytes()
    length = int.from_bytes(raw[8:10], "little")
    header = raw[10:10 + length]
    cut = raw[:10] + header[:length // 2] + b" " * (length - length // 2 - 1) + b"\n"
    for content in [cut + raw[10 + length:], *(raw[:i] for i in range(0, 10 + length, 9))]:
        folder = _hostile(base, tmp_path, name, content)
        with pytest.raises(IndexPersistError, match=name):
            _open_and_query(folder)
        if name.startswith("flat/"):
            with pytest.raises(IndexPersistError, match=name):
                read_vectors(folder)


def test_an_npy_header_declaring_more_than_the_file_holds_is_refused_before_reading(
    base: Path, tmp_path: Path
) -> None:
    import numpy as np

    from llama_index_car._npy import open_npy

    path = tmp_path / "big.npy"
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**12, 384)}
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        fh.write(b"\0" * 64)
    with pytest.raises(IndexPersistError, match="declares"):
        open_npy(path, dtypes=(np.float32,), ndim=2, mmap=False)
