"""The HWP 5 fuzz driver, run in a child process by ``test_hwp_fuzz.py`` (so that a hang is
told apart from slowness by a timeout, and the peak memory is the child's own).

Seeds: real HWP 5 files (given as paths) and documents built by ``hwp5_fakes``. Mutations:

- ``flip``: 1-24 random bytes of the file set to random values (header, FAT, directory,
  compressed data alike);
- ``truncate``: the file cut at a random length;
- ``stream``: 1-16 bytes flipped inside one compressed stream, the file re-packed;
- ``record``: DocInfo or a BodyText section decompressed, 1-6 record edits (size field, tag,
  level, extended size, payload bytes, table grid / cell address and span fields, a record
  deleted or duplicated), re-compressed and re-packed;
- ``swap``: two streams' contents exchanged (e.g. DocInfo and Section0), re-packed;
- ``flags``: random FileHeader flags / version.

Every case must give Documents or an :class:`HWPXError` naming the file. The child prints one
JSON line per case before reading it (the last line tells where a hang happened) and a final
``{"summary": ...}`` line with the outcome counts, the untyped exceptions and the peak RSS.
"""

from __future__ import annotations

import io
import json
import random
import resource
import struct
import sys
import traceback
import warnings
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import olefile
from hwp5_fakes import (
    build_cfb,
    deflate,
    hwp5,
    nested_tables,
    paragraph,
    table_paragraph,
)
from llama_index.readers.hwpx import HWPReader, HWPXError

KINDS = ("flip", "truncate", "stream", "record", "swap", "flags")
_KNOWN_TAGS = (16, 25, 66, 67, 68, 69, 71, 72, 76, 77, 85, 88, 91)


@dataclass
class Seed:
    name: str
    data: bytes
    streams: dict[str, bytes]
    compressed: bool



def _peak_rss_kib() -> int:
    """This process's own peak RSS: ``VmHWM`` of its address space. ``ru_maxrss`` is not it:
    Linux keeps it across ``execve``, so a child forked from a large pytest process reports
    the parent's size."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

def built_seeds() -> list[bytes]:
    """Documents built in code: paragraphs, a merged-cell table, nested tables."""
    body = (
        paragraph("제1장 총칙")
        + paragraph("본문 문단 " * 30)
        + table_paragraph([["가", "나", "다"], ["라", "마", "바"]])
        + nested_tables(4, "안쪽")
    )
    return [hwp5([body, paragraph("둘째 구역")]), hwp5([body], flags=0)]


def load_seed(name: str, data: bytes) -> Seed:
    ole = olefile.OleFileIO(io.BytesIO(data))
    try:
        streams = {"/".join(e): ole.openstream(e).read() for e in ole.listdir()}
    finally:
        ole.close()
    flags = struct.unpack_from("<I", streams["FileHeader"], 36)[0]
    return Seed(name, data, streams, bool(flags & 1))


def _inflate(raw: bytes) -> bytes:
    return zlib.decompressobj(-15).decompress(raw)


def _records(data: bytes) -> list[list[int | bytes]]:
    """[tag, level, payload] records, leniently (stops at the first that does not fit)."""
    out: list[list[int | bytes]] = []
    pos = 0
    while pos + 4 <= len(data):
        (h,) = struct.unpack_from("<I", data, pos)
        pos += 4
        size = h >> 20
        if size == 0xFFF:
            if pos + 4 > len(data):
                break
            (size,) = struct.unpack_from("<I", data, pos)
            pos += 4
        if pos + size > len(data):
            break
        out.append([h & 0x3FF, h >> 10 & 0x3FF, data[pos : pos + size]])
        pos += size
    return out


def _join(recs: Sequence[Sequence[int | bytes]], sizes: dict[int, int]) -> bytes:
    out = bytearray()
    for i, (tag, level, payload) in enumerate(recs):
        assert isinstance(tag, int) and isinstance(level, int) and isinstance(payload, bytes)
        size = sizes.get(i, len(payload))
        if size >= 0xFFF or i in sizes and sizes[i] < 0:
            out += struct.pack("<II", tag | level << 10 | 0xFFF << 20, abs(size) & 0xFFFFFFFF)
        else:
            out += struct.pack("<I", tag | level << 10 | size << 20)
        out += payload
    return bytes(out)


def _edit_records(data: bytes, rng: random.Random) -> bytes:
    recs = _records(data)
    if not recs:
        return data
    sizes: dict[int, int] = {}
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(recs))
        tag, level, payload = recs[i]
        assert isinstance(payload, bytes) and isinstance(level, int)
        op = rng.choice(
            ["size", "ext", "tag", "level", "payload", "grid", "cell", "delete", "dup"]
        )
        if op == "size":
            sizes[i] = rng.choice([0, 1, len(payload) + 1, max(len(payload) - 1, 0), 0xFFE])
        elif op == "ext":  # the extended form, with a true or a hostile size
            sizes[i] = -rng.choice([len(payload) or 1, 0xFFFFFFFF, len(payload) + 7, 1 << 24])
        elif op == "tag":
            recs[i][0] = rng.choice(_KNOWN_TAGS + (rng.randrange(1024),))
        elif op == "level":
            recs[i][1] = rng.choice([0, max(level - 1, 0), level + 1, level + 2, 1023])
        elif op == "payload" and payload:
            b = bytearray(payload)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            recs[i][2] = bytes(b)
        elif op == "grid":  # a TABLE record's rows / cols
            j = next((k for k, r in enumerate(recs) if r[0] == 77), None)
            if j is not None and len(recs[j][2]) >= 8:  # type: ignore[arg-type]
                b = bytearray(recs[j][2])  # type: ignore[arg-type]
                at = 4 + 2 * rng.randrange(2)
                b[at : at + 2] = struct.pack("<H", rng.choice([0, 1, 2, 255, 65535]))
                recs[j][2] = bytes(b)
        elif op == "cell":  # a LIST_HEADER's column / row / spans
            cells = [k for k, r in enumerate(recs) if r[0] == 72 and len(r[2]) >= 16]  # type: ignore[arg-type]
            if cells:
                j = rng.choice(cells)
                b = bytearray(recs[j][2])  # type: ignore[arg-type]
                at = 8 + 2 * rng.randrange(4)
                b[at : at + 2] = struct.pack("<H", rng.choice([0, 1, 7, 300, 65535]))
                recs[j][2] = bytes(b)
        elif op == "delete" and len(recs) > 1:
            del recs[i]
            sizes = {}
        elif op == "dup":
            recs.insert(i, list(recs[i]))
            sizes = {}
    return _join(recs, sizes)


def mutate(seed: Seed, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(KINDS)
    data = seed.data
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 24)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return kind, bytes(b)
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data))]
    streams = dict(seed.streams)
    names = sorted(streams)
    bodies = [n for n in names if n == "DocInfo" or n.startswith("BodyText/")]
    if kind == "stream":
        name = rng.choice(bodies)
        b = bytearray(streams[name])
        for _ in range(rng.randint(1, 16)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        streams[name] = bytes(b)
    elif kind == "record":
        name = rng.choice(bodies)
        raw = streams[name]
        plain = _inflate(raw) if seed.compressed else raw
        edited = _edit_records(plain, rng)
        streams[name] = deflate(edited) if seed.compressed else edited
    elif kind == "swap":
        a, b_ = rng.sample(names, 2) if rng.random() < 0.3 or len(bodies) < 2 else rng.sample(
            bodies, 2
        )
        streams[a], streams[b_] = streams[b_], streams[a]
    else:  # flags
        h = bytearray(streams["FileHeader"])
        h[36:40] = struct.pack("<I", rng.choice([0, 1, 3, 5, 0x20, 0xFFFFFFFF, rng.randrange(1 << 32)]))
        if rng.random() < 0.3:
            h[32:36] = struct.pack("<I", rng.choice([0x05000000, 0x05010100, 0x03000000, 0xFFFFFFFF]))
        streams["FileHeader"] = bytes(h)
    return kind, build_cfb(streams)


def run(seed: int, cases: int, paths: Sequence[str]) -> None:
    warnings.simplefilter("ignore")
    seeds = [load_seed(Path(p).name, Path(p).read_bytes()) for p in paths]
    seeds += [load_seed(f"built{i}", d) for i, d in enumerate(built_seeds())]
    rng = random.Random(seed)
    reader = HWPReader()
    outcomes: Counter[str] = Counter()
    untyped: list[str] = []
    unnamed: list[str] = []
    for i in range(cases):
        s = rng.choice(seeds)
        kind, data = mutate(s, rng)
        name = f"mutant{i}-{kind}-{s.name}"
        print(json.dumps({"case": i, "kind": kind, "seed": s.name}), flush=True)
        try:
            docs = reader.load_bytes(data, name)
            if not all(isinstance(d.text, str) for d in docs):
                untyped.append(f"{name}: a Document without text")
            outcomes[f"{kind}:ok"] += 1
        except HWPXError as exc:
            outcomes[f"{kind}:{type(exc).__name__}"] += 1
            if not str(exc).startswith(name):
                unnamed.append(f"{name}: {exc}")
        except Exception as exc:  # the failures the fuzz looks for
            untyped.append(f"{name}: {type(exc).__name__}: {exc} | "
                           + traceback.format_exc(limit=-3).replace("\n", " | "))
    rss_kib = _peak_rss_kib()
    print(json.dumps({
        "summary": {
            "cases": cases,
            "ok": sum(v for k, v in outcomes.items() if k.endswith(":ok")),
            "typed": sum(v for k, v in outcomes.items() if not k.endswith(":ok")),
            "untyped": len(untyped),
            "outcomes": dict(sorted(outcomes.items())),
            "peak_rss_mib": rss_kib // 1024,
        },
        "untyped": untyped[:20],
        "unnamed": unnamed[:20],
    }, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
