"""HWP 5 files built in code: a small OLE2/CFB (compound file) writer and an HWP 5 record
builder, for the error, limit and fuzz tests (no committed binary fixtures).

CFB facts used (MS-CFB, version 3): a 512-byte header (signature ``D0 CF 11 E0 A1 B1 1A E1``,
minor version 0x3E, major version 3, byte order 0xFFFE, sector shift 9, mini sector shift 6,
FAT sector count @44, first directory sector @48, mini stream cutoff 4096 @56, first mini FAT
sector @60 and count @64, first DIFAT sector @68 and count @72, 109 DIFAT entries @76), then
512-byte sectors. The FAT chains sectors (ENDOFCHAIN 0xFFFFFFFE, FATSECT 0xFFFFFFFD, FREESECT
0xFFFFFFFF). Directory entries are 128 bytes: UTF-16 name (64 bytes) and its byte length with
the terminator, type (1 storage, 2 stream, 5 root), colour, left/right sibling and child ids
(NOSTREAM 0xFFFFFFFF), start sector @116, UINT64 size @120. Streams under 4096 bytes live in
the mini stream (64-byte mini sectors chained by the mini FAT), which is the root entry's
chain. Siblings here form a right-leaning chain in CFB order (name length, then upper-cased
name), a valid if unbalanced binary tree.

HWP 5 facts used: see the docstrings of ``llama_index/readers/hwpx/_hwp5_container.py``
(FileHeader layout), ``_hwp5_records.py`` (record header) and ``_hwp5_section.py``
(PARA_HEADER / PARA_TEXT / CTRL_HEADER / TABLE / LIST_HEADER payloads).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

ENDOFCHAIN = 0xFFFFFFFE
FATSECT = 0xFFFFFFFD
FREESECT = 0xFFFFFFFF
NOSTREAM = 0xFFFFFFFF
SECTOR = 512
MINI = 64
CUTOFF = 4096

TAG_PARA_SHAPE = 25
TAG_PARA_HEADER = 66
TAG_PARA_TEXT = 67
TAG_CTRL_HEADER = 71
TAG_LIST_HEADER = 72
TAG_TABLE = 77

FLAG_COMPRESSED = 0x1
FLAG_PASSWORD = 0x2
FLAG_DISTRIBUTION = 0x4


# ----------------------------------------------------------------------------- CFB writer
@dataclass
class _Node:
    name: str
    kind: int  # 1 storage, 2 stream, 5 root
    data: bytes = b""
    children: dict[str, _Node] = field(default_factory=dict)
    sid: int = 0
    start: int = ENDOFCHAIN
    size: int = 0


def _cfb_key(name: str) -> tuple[int, str]:
    return (len(name), name.upper())


def _chain(fat: list[int], first: int, count: int) -> None:
    for i in range(count):
        fat[first + i] = first + i + 1 if i + 1 < count else ENDOFCHAIN


def build_cfb(
    streams: Mapping[str, bytes], declared_sizes: Mapping[str, int] | None = None
) -> bytes:
    """A compound file holding ``streams`` (``"BodyText/Section0"``: storages from the
    ``/`` path). ``declared_sizes`` overrides a stream's size in its directory entry (a
    lying or truncated stream)."""
    root = _Node("Root Entry", 5)
    for path, data in streams.items():
        node = root
        *dirs, leaf = path.split("/")
        for d in dirs:
            node = node.children.setdefault(d, _Node(d, 1))
        node.children[leaf] = _Node(leaf, 2, bytes(data))
    order: list[_Node] = []

    def visit(n: _Node) -> None:
        n.sid = len(order)
        order.append(n)
        for c in sorted(n.children.values(), key=lambda x: _cfb_key(x.name)):
            visit(c)

    visit(root)
    # mini stream: every stream under the cutoff, 64-byte aligned
    mini = bytearray()
    minifat: list[int] = []
    for n in order:
        if n.kind == 2 and 0 < len(n.data) < CUTOFF:
            count = -(-len(n.data) // MINI)
            n.start = len(minifat)
            minifat.extend([0] * count)
            _chain(minifat, n.start, count)
            mini += n.data + b"\x00" * (count * MINI - len(n.data))
        n.size = len(n.data)
    # regular sectors: big streams, mini stream, mini FAT, directory, then the FAT
    sectors: list[bytes] = []

    def put(blob: bytes) -> tuple[int, int]:
        count = -(-len(blob) // SECTOR)
        first = len(sectors)
        padded = blob + b"\x00" * (count * SECTOR - len(blob))
        sectors.extend(padded[i * SECTOR : (i + 1) * SECTOR] for i in range(count))
        return (first if count else ENDOFCHAIN), count

    chains: list[tuple[int, int]] = []
    for n in order:
        if n.kind == 2 and len(n.data) >= CUTOFF:
            n.start, count = put(n.data)
            chains.append((n.start, count))
    root.start, count = put(bytes(mini))
    root.size = len(mini)
    chains.append((root.start, count))
    minifat_bytes = struct.pack(f"<{len(minifat)}I", *minifat) if minifat else b""
    if minifat_bytes:
        minifat_bytes += struct.pack("<I", FREESECT) * (-len(minifat) % (SECTOR // 4))
    minifat_start, minifat_count = put(minifat_bytes)
    chains.append((minifat_start, minifat_count))
    sizes = dict(declared_sizes or {})
    paths = _paths(root)
    right: dict[int, int] = {}
    first_child: dict[int, int] = {}
    for n in order:
        kids = sorted(n.children.values(), key=lambda x: _cfb_key(x.name))
        if kids:
            first_child[n.sid] = kids[0].sid
        for a, b in zip(kids, kids[1:], strict=False):
            right[a.sid] = b.sid
    directory = bytearray()
    for n in order:
        size = sizes.get(paths[n.sid], n.size) if n.kind == 2 else n.size
        directory += _entry(
            n, first_child.get(n.sid, NOSTREAM), size, right.get(n.sid, NOSTREAM)
        )
    directory += _empty_entry() * (-len(order) % (SECTOR // 128))
    dir_start, dir_count = put(bytes(directory))
    chains.append((dir_start, dir_count))
    n_content = len(sectors)
    n_fat = 1
    while n_fat * (SECTOR // 4) < n_content + n_fat:
        n_fat += 1
    if n_fat > 109:
        raise ValueError("build_cfb writes no DIFAT sectors: keep the file under ~7 MB")
    fat = [FREESECT] * (n_fat * (SECTOR // 4))
    for first, count in chains:
        if count:
            _chain(fat, first, count)
    for i in range(n_fat):
        fat[n_content + i] = FATSECT
    sectors.extend(
        struct.pack(f"<{SECTOR // 4}I", *fat[i * 128 : (i + 1) * 128]) for i in range(n_fat)
    )
    difat = [n_content + i for i in range(n_fat)] + [FREESECT] * (109 - n_fat)
    header = (
        bytes.fromhex("d0cf11e0a1b11ae1")
        + b"\x00" * 16
        + struct.pack("<HHHHH6xIIIIIIIII", 0x3E, 3, 0xFFFE, 9, 6, 0, n_fat, dir_start, 0,
                      CUTOFF, minifat_start if minifat_count else ENDOFCHAIN, minifat_count,
                      ENDOFCHAIN, 0)
        + struct.pack("<109I", *difat)
    )
    assert len(header) == SECTOR
    return header + b"".join(sectors)


def _paths(root: _Node) -> dict[int, str]:
    out: dict[int, str] = {}

    def walk(n: _Node, prefix: str) -> None:
        for c in n.children.values():
            p = prefix + c.name
            out[c.sid] = p
            walk(c, p + "/")

    walk(root, "")
    out[root.sid] = ""
    return out


def _entry(n: _Node, child: int, size: int, right: int = NOSTREAM) -> bytes:
    name = n.name.encode("utf-16-le") + b"\x00\x00"
    assert len(name) <= 64
    return (
        name.ljust(64, b"\x00")
        + struct.pack("<HBBIII", len(name), n.kind, 1, NOSTREAM, right, child)
        + b"\x00" * 16  # CLSID
        + b"\x00" * 4  # state bits
        + b"\x00" * 16  # creation and modification times
        + struct.pack("<IQ", n.start if (n.size or n.kind == 5) else ENDOFCHAIN, size)
    )


def _empty_entry() -> bytes:
    return b"\x00" * 64 + struct.pack("<HBBIII", 0, 0, 0, NOSTREAM, NOSTREAM, NOSTREAM) + (
        b"\x00" * 48
    )


# ----------------------------------------------------------------------------- HWP 5
def file_header(flags: int = FLAG_COMPRESSED, version: int = 0x05000300,
                signature: bytes = b"HWP Document File") -> bytes:
    """The 256-byte ``FileHeader`` stream: signature[32], UINT32 version, UINT32 flags."""
    return signature.ljust(32, b"\x00") + struct.pack("<II", version, flags) + b"\x00" * 216


def record(tag: int, level: int, payload: bytes, extended: bool = False,
           size: int | None = None) -> bytes:
    """One record: header (tag 10 bits, level 10 bits, size 12 bits; 0xFFF + UINT32 size
    when the payload is 0xFFF bytes or more, or when ``extended``). ``size`` declares a size
    other than the payload's (a lying record)."""
    n = len(payload) if size is None else size
    if extended or n >= 0xFFF:
        return struct.pack("<II", tag | level << 10 | 0xFFF << 20, n) + payload
    return struct.pack("<I", tag | level << 10 | n << 20) + payload


def deflate(data: bytes, level: int = 9) -> bytes:
    """Raw deflate (no zlib header), as HWP 5 compresses its streams."""
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def _para_header(nchars: int, shape: int = 0) -> bytes:
    # UINT32 nchars, UINT32 control mask, UINT16 para shape, UINT8 style, UINT8 break,
    # UINT16 char shapes, UINT16 range tags, UINT16 line segs, UINT32 instance id
    return struct.pack("<IIHBBHHHI", nchars, 0, shape, 0, 0, 1, 0, 1, 0)


def paragraph(text: str, level: int = 0, shape: int = 0) -> bytes:
    """PARA_HEADER + PARA_TEXT (the text, then the paragraph end 13)."""
    units = text.encode("utf-16-le") + b"\r\x00"
    return record(TAG_PARA_HEADER, level, _para_header(len(units) // 2, shape)) + record(
        TAG_PARA_TEXT, level + 1, units
    )


TABLE_CHAR = struct.pack("<8H", 11, *struct.unpack("<2H", b" lbt"), 0, 0, 0, 0, 11)


def table_paragraph(
    rows: Sequence[Sequence[str | bytes]], level: int = 0, grid: tuple[int, int] | None = None
) -> bytes:
    """A paragraph holding one table: ``rows`` of cell texts (or of ready-made cell
    paragraph records, as ``bytes``, for nested tables); ``grid`` overrides the declared
    row and column counts."""
    n_rows = len(rows)
    n_cols = max((len(r) for r in rows), default=0)
    decl_rows, decl_cols = grid if grid is not None else (n_rows, n_cols)
    units = TABLE_CHAR + b"\r\x00"
    out = record(TAG_PARA_HEADER, level, _para_header(len(units) // 2))
    out += record(TAG_PARA_TEXT, level + 1, units)
    out += record(TAG_CTRL_HEADER, level + 1, b" lbt" + b"\x00" * 42)
    shown = min(max(decl_rows, 0), 64)  # row heights (only a few for a huge grid)
    out += record(
        TAG_TABLE, level + 2,
        struct.pack("<IHHH4H", 0, decl_rows, decl_cols, 0, 0, 0, 0, 0)
        + struct.pack(f"<{shown}H", *([100] * shown))
        + struct.pack("<HH", 1, 0),
    )
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            out += record(
                TAG_LIST_HEADER, level + 2,
                struct.pack("<hIH", 1, 0, 0) + struct.pack("<HHHHII4HH", c, r, 1, 1, 1000, 300,
                                                             0, 0, 0, 0, 1),
            )
            out += cell if isinstance(cell, bytes) else paragraph(cell, level + 2)
    return out


def _ext(code: int, ctrl_id: bytes) -> bytes:
    """An extended control character: 8 WCHARs, the code, the ctrl id, the code again."""
    return struct.pack("<8H", code, *struct.unpack("<2H", ctrl_id), 0, 0, 0, 0, code)


def field_paragraph(text: str, guide: str, modified: bool = False, level: int = 0) -> bytes:
    """A paragraph holding one click-here field (누름틀) whose text is ``text``: a field start
    (extended control 3, CTRL_HEADER ``%clk``: UINT32 ctrl id, UINT32 properties (bit 15:
    modified), BYTE, WORD command length, WCHAR command ``Clickhere:set:..:Direction:
    wstring:<n>:<guide> ...``, UINT32 field id), the text, a field end (inline control 4)."""
    units = (
        _ext(3, b"klc%") + text.encode("utf-16-le")
        + struct.pack("<8H", 4, 0, 0, 0, 0, 0, 0, 4) + b"\r\x00"
    )
    body = f"Direction:wstring:{len(guide)}:{guide} HelpState:wstring:0: "
    command = f"Clickhere:set:{len(body)}:{body}".encode("utf-16-le")
    ctrl = (
        b"klc%" + struct.pack("<IBH", 0x8001 if modified else 0x1, 9, len(command) // 2)
        + command + struct.pack("<I", 12345)
    )
    return (
        record(TAG_PARA_HEADER, level, _para_header(len(units) // 2))
        + record(TAG_PARA_TEXT, level + 1, units)
        + record(TAG_CTRL_HEADER, level + 1, ctrl)
    )


def header_paragraph(texts: Sequence[str], kind: bytes = b"daeh", level: int = 0) -> bytes:
    """A paragraph holding a page header (``kind`` b"daeh", the ctrl id ``head`` stored
    reversed) or footer (b"toof"): extended control 16, its CTRL_HEADER, then one
    LIST_HEADER under the control and the header's paragraphs after it at the same level."""
    units = _ext(16, kind) + b"\r\x00"
    out = record(TAG_PARA_HEADER, level, _para_header(len(units) // 2))
    out += record(TAG_PARA_TEXT, level + 1, units)
    out += record(TAG_CTRL_HEADER, level + 1, kind + b"\x00" * 8)
    out += record(TAG_LIST_HEADER, level + 2, struct.pack("<hIH", len(texts), 0, 0))
    for t in texts:
        out += paragraph(t, level + 2)
    return out


def nested_tables(depth: int, text: str = "속") -> bytes:
    """``depth`` tables each inside the single cell of the one before (depth 1: one table)."""
    def at(level: int, remaining: int) -> bytes:
        if remaining == 1:
            return table_paragraph([[text]], level)
        return table_paragraph([[at(level + 2, remaining - 1)]], level)

    return at(0, depth)


def docinfo(n_shapes: int = 1) -> bytes:
    """A DocInfo stream of ``n_shapes`` PARA_SHAPE records (body text, no outline)."""
    return b"".join(record(TAG_PARA_SHAPE, 1, b"\x00" * 54) for _ in range(n_shapes))


def hwp5(
    sections: Iterable[bytes] = (),
    *,
    flags: int = FLAG_COMPRESSED,
    header: bytes | None = None,
    doc_info: bytes | None = None,
    extra: Mapping[str, bytes] | None = None,
    drop: Iterable[str] = (),
    raw: Mapping[str, bytes] | None = None,
    declared_sizes: Mapping[str, int] | None = None,
) -> bytes:
    """An HWP 5 file: FileHeader, DocInfo and ``BodyText/Section<i>`` (compressed when
    ``flags`` has bit 0); ``extra`` adds streams as given, ``raw`` replaces a stream's
    stored bytes after compression, ``drop`` removes streams."""
    secs = list(sections) or [paragraph("본문")]
    compress = deflate if flags & FLAG_COMPRESSED else (lambda b: b)
    streams: dict[str, bytes] = {
        "FileHeader": header if header is not None else file_header(flags),
        "DocInfo": compress(docinfo() if doc_info is None else doc_info),
    }
    for i, s in enumerate(secs):
        streams[f"BodyText/Section{i}"] = compress(s)
    streams.update(extra or {})
    streams.update(raw or {})
    for name in drop:
        streams.pop(name, None)
    return build_cfb(streams, declared_sizes)


def property_set(props: Mapping[int, tuple[int, bytes]]) -> bytes:
    """An OLE property set stream (MS-OLEPS) with one set: ``{id: (VT type, value bytes)}``.

    Header: UINT16 byte order 0xFFFE, UINT16 version 0, UINT32 system id, CLSID[16], UINT32
    set count 1, FMTID[16], UINT32 offset 48; the set: UINT32 size, UINT32 count, (id, offset)
    pairs, then each value as UINT32 type + bytes (padded to 4)."""
    pairs = b""
    values = b""
    head = 8 + 8 * len(props)
    for pid, (vtype, value) in props.items():
        pairs += struct.pack("<II", pid, head + len(values))
        blob = struct.pack("<I", vtype) + value
        values += blob + b"\x00" * (-len(blob) % 4)
    section = struct.pack("<II", head + len(values), len(props)) + pairs + values
    return (
        struct.pack("<HHI", 0xFFFE, 0, 0x00020006) + b"\x00" * 16 + struct.pack("<I", 1)
        + bytes.fromhex("e0859ff2f94f6810ab9108002b27b3d9") + struct.pack("<I", 48) + section
    )


def lpwstr(text: str) -> bytes:
    """A VT_LPWSTR value: UINT32 length in characters (terminator included), UTF-16LE."""
    return struct.pack("<I", len(text) + 1) + (text + "\x00").encode("utf-16-le")
