"""Binary HWP 5.x (OLE2/CFB compound file) -> OWPML-shaped element trees for the HWPX walker.

Format facts (Hancom, 한글 문서 파일 형식 5.0, revision 1.3):

- Streams: ``FileHeader`` (256 bytes: 32-byte signature ``HWP Document File``, UINT32 version
  ``0xMMnnPPrr``, UINT32 flags: bit 0 compressed, bit 1 password, bit 2 distribution
  (배포용), ...), ``DocInfo`` and ``BodyText/Section<N>`` (record streams, raw-deflate
  compressed when flag bit 0 is set), ``ViewText/Section<N>`` (distribution documents: the
  sections encrypted), ``\\x05HwpSummaryInformation`` (an OLE property set; 2 = title).
- A record: UINT32 header = tag id (bits 0-9), level (bits 10-19), size (bits 20-31); size
  0xFFF means a UINT32 extended size follows. Records nest by level: a record's children are
  the records after it with a greater level, up to the next with a level <= its own.
- DocInfo ``PARA_SHAPE`` (tag 25), in id order: UINT32 properties 1, bits 23-24 the heading
  type (1 = outline), bits 25-27 the level (0-based), as ``<hh:heading type="OUTLINE"
  level=..>`` in HWPX.
- BodyText: ``PARA_HEADER`` (66: UINT32 nchars, UINT32 control mask, UINT16 para shape id, ...)
  with children ``PARA_TEXT`` (67: WCHAR[nchars]) and one ``CTRL_HEADER`` (71: UINT32 ctrl id)
  per extended control character of the text, in text order. Character codes 0-31 are
  controls: *char* controls take 1 WCHAR (0 unusable, 10 line break, 13 paragraph end, 24
  hyphen, 25-29 reserved, 30 non-breaking space, 31 fixed-width space); *inline* controls
  take 8 WCHARs (4 field end, 5-7 reserved, 8 title mark, 9 tab, 19-20 reserved); *extended*
  controls take 8 WCHARs and own the next CTRL_HEADER (1 reserved, 2 section/column
  definition, 3 field start, 11 drawing object/table, 12 reserved, 14 reserved, 15 hidden
  comment, 16 header/footer, 17 footnote/endnote, 18 auto number, 21 page control, 22
  bookmark/index mark, 23 overlapping letters/ruby text).
- ``tbl `` ctrl: a ``LIST_HEADER`` (72) before the ``TABLE`` record (77: UINT32 props, UINT16
  rows, UINT16 cols, ...) is the caption; each ``LIST_HEADER`` after it is a cell: INT16
  paragraph count, UINT32 properties, UINT16 (unused), then the cell properties UINT16 column,
  UINT16 row, UINT16 column span, UINT16 row span, .... A list's paragraphs are the
  ``PARA_HEADER`` records that follow its LIST_HEADER at the same level.
- ``gso `` ctrl (drawing objects, pictures): a LIST_HEADER directly under the ctrl is the
  caption; LIST_HEADERs inside its ``SHAPE_COMPONENT`` (76) tree are text boxes (글상자).
  ``fn  ``/``en  `` (notes), ``head``/``foot`` (page header/footer): one LIST_HEADER and its
  paragraphs. ``eqed`` (equation): ``EQEDIT`` (88: UINT32 props, WORD len, WCHAR[len] script).
  ``atno`` (auto number): UINT32 props, UINT16 number.

Each section becomes the element tree :class:`~._parse.SectionWalker` walks for HWPX (``sec >
p > t | tbl | footNote | endNote | drawText | caption | header | footer | equation >
script | autoNum``; ``tbl > caption, tr > tc > subList, cellAddr, cellSpan``), so HWP 5 shares
the HWPX table model, renderer, heading classifier and limits.
"""

from __future__ import annotations

import re
import struct
import zlib
from array import array
from codecs import utf_16_le_decode as _utf16
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from llama_index.readers.hwpx._errors import (
    HWPEncryptedError,
    HWPFormatError,
    HWPLimitError,
    HWPXEncryptedError,
    HWPXFormatError,
    HWPXLimitError,
)
from llama_index.readers.hwpx._package import OLE2_MAGIC, RATIO_FLOOR_BYTES, Limits
from lxml import etree

HWP_SIGNATURE = b"HWP Document File"
HWP3_SIGNATURE = b"HWP Document File V3"
FLAG_COMPRESSED = 0x1
FLAG_PASSWORD = 0x2
FLAG_DISTRIBUTION = 0x4

TAG_PARA_SHAPE = 25
TAG_PARA_HEADER = 66
TAG_PARA_TEXT = 67
TAG_CTRL_HEADER = 71
TAG_LIST_HEADER = 72
TAG_SHAPE_COMPONENT = 76
TAG_TABLE = 77
TAG_EQEDIT = 88
TAG_FORM_OBJECT = 91

_EXTENDED = frozenset({1, 2, 3, 11, 12, 14, 15, 16, 17, 18, 21, 22, 23})
_INLINE = frozenset({4, 5, 6, 7, 8, 9, 19, 20})
_CHAR_TEXT = {9: "\t", 10: "\n", 24: "-", 30: " ", 31: " "}
_CONTROL = re.compile(r"[\x00-\x1f]")
_SECTION = re.compile(r"^Section(\d+)$")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")  # a paragraph's shape id
_CELL = struct.Struct("<HHHH")  # a cell's column, row, column span, row span
_CHUNK = 1 << 20
# a list (cell, text box, note) nested in another deeper than this is refused (each level is
# a few Python frames in the builder and the walker; HWPX gets the same cap from libxml2)
MAX_LIST_DEPTH = 200


def _wstring(props: str, name: str) -> str | None:
    """Whitespace-normalised value of ``name:wstring:<n>:<n chars>`` in a property string."""
    m = re.search(rf"(?:^|[\s:]){name}:wstring:(\d+):", props)
    if m is None:
        return None
    return " ".join(props[m.end() : m.end() + int(m.group(1))].split())


def _ctrl_id(raw: bytes) -> str:
    """A CTRL_HEADER's UINT32 ctrl id as its 4 characters (stored little-endian, reversed)."""
    return raw[3::-1].decode("latin-1")


@dataclass
class HWPFile:
    """The streams of an opened HWP 5 file that the reader uses."""

    version: tuple[int, int, int, int]
    flags: int
    docinfo: bytes
    sections: list[tuple[str, bytes]]
    title: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class Records:
    """A record stream, flat: tag, level, payload start/end (into ``data``), subtree end.

    Typed arrays, 28 bytes a record (Python lists of ints took ~124): ``max_records`` records
    of a stream are 140 MB at most, however small each record."""

    data: bytes
    tags: array[int]
    levels: array[int]
    starts: array[int]
    ends: array[int]
    sub_end: array[int]


class _Budget:
    """Decompressed bytes read so far from one file (``max_total_bytes`` and the ratio)."""

    def __init__(self, file: str, limits: Limits, file_bytes: int) -> None:
        self.file = file
        self.limits = limits
        self.file_bytes = file_bytes
        self.total = 0


def _limit(
    file: str, message: str, limit: str, value: float, maximum: float, part: str | None
) -> HWPXLimitError:
    return HWPLimitError(file, message, limit=limit, value=value, maximum=maximum, part=part)


def _format(file: str, message: str, part: str | None = None) -> HWPXFormatError:
    return HWPFormatError(file, message, part=part)


def inflate(raw: bytes, budget: _Budget, part: str) -> bytes:
    """Raw-deflate ``raw`` in bounded chunks, enforcing ``max_part_bytes``,
    ``max_total_bytes`` and ``max_compression_ratio`` (per stream above 64 KiB, and of the
    whole file) before each chunk is kept."""
    limits = budget.limits
    file = budget.file
    d = zlib.decompressobj(-15)
    chunks: list[bytes] = []
    size = 0
    buf = raw
    try:
        while True:
            chunk = d.decompress(buf, _CHUNK)
            buf = d.unconsumed_tail
            if chunk:
                size += len(chunk)
                _check_sizes(budget, part, size, len(raw), "expands to")
                chunks.append(chunk)
            elif not buf or d.eof:
                break
        tail = d.flush()
    except zlib.error as exc:
        raise _format(file, f"corrupt compressed stream (zlib: {exc})", part) from exc
    if tail:
        size += len(tail)
        _check_sizes(budget, part, size, len(raw), "expands to")
        chunks.append(tail)
    if not d.eof:
        raise _format(file, "truncated compressed stream (the deflate data ends early)", part)
    budget.total += size
    ratio_cap = limits.max_compression_ratio
    if budget.total > RATIO_FLOOR_BYTES and budget.total > ratio_cap * max(budget.file_bytes, 1):
        ratio = budget.total / max(budget.file_bytes, 1)
        raise _limit(
            file,
            f"file compression ratio {ratio:.1f} ({budget.total} bytes from "
            f"{budget.file_bytes}) exceeds max_compression_ratio={ratio_cap:g}",
            "max_compression_ratio", ratio, ratio_cap, part,
        )
    return b"".join(chunks)


def _check_sizes(budget: _Budget, part: str, size: int, compressed: int, what: str) -> None:
    limits = budget.limits
    file = budget.file
    if size > limits.max_part_bytes:
        raise _limit(
            file,
            f"stream exceeds max_part_bytes={limits.max_part_bytes} when decompressed",
            "max_part_bytes", size, limits.max_part_bytes, part,
        )
    if budget.total + size > limits.max_total_bytes:
        raise _limit(
            file,
            f"file exceeds max_total_bytes={limits.max_total_bytes} when decompressed",
            "max_total_bytes", budget.total + size, limits.max_total_bytes, part,
        )
    cap = limits.max_compression_ratio
    if size > RATIO_FLOOR_BYTES and size > cap * max(compressed, 1):
        ratio = size / max(compressed, 1)
        raise _limit(
            file,
            f"stream compression ratio {ratio:.1f} ({what} {size} bytes from {compressed}) "
            f"exceeds max_compression_ratio={cap:g}",
            "max_compression_ratio", ratio, cap, part,
        )


def _hwp3_error(file: str) -> HWPXFormatError:
    return _format(
        file,
        "this is an HWP 3.x document ('HWP Document File V3.00'), an older binary format "
        "this reader does not read; open it in Hangul and save it as HWP 5 (.hwp) or HWPX",
    )


def open_hwp(data: bytes, file: str, limits: Limits) -> HWPFile:
    """Check the container and header and return the (decompressed) streams.

    Raises (all naming ``file``): HWP 3.x, not an OLE2 file, header sector counts beyond the
    file (:func:`check_cfb_header`, before olefile), any olefile defect from
    ``DEFECT_INCORRECT`` up (chains out of range or shorter than their stream), missing or
    corrupt streams, a password or distribution (배포용) document, any limit exceeded (stored
    streams on their declared size, compressed ones per 1 MiB inflated)."""
    import olefile

    if len(data) > limits.max_file_bytes:
        raise _limit(
            file, f"file is {len(data)} bytes, above max_file_bytes={limits.max_file_bytes}",
            "max_file_bytes", len(data), limits.max_file_bytes, None,
        )
    if data.startswith(HWP3_SIGNATURE):
        raise _hwp3_error(file)
    if data[:8] != OLE2_MAGIC:
        raise _format(file, "not an OLE2 compound file, so not an HWP 5 document")
    check_cfb_header(data, file)
    try:
        # DEFECT_INCORRECT: a stream chain shorter than its size, a FAT pointer out of range,
        # a stream longer than the FAT... raise instead of being logged and read around
        ole = olefile.OleFileIO(BytesIO(data), raise_defects=olefile.DEFECT_INCORRECT)
    except Exception as exc:  # olefile raises OSError, ValueError, struct.error, IndexError...
        raise _format(
            file, f"corrupt OLE2 compound file ({type(exc).__name__}: {exc})"
        ) from exc
    try:
        root_size = ole.root.size if ole.root is not None else 0
        if root_size > len(data):
            raise _format(
                file,
                f"corrupt OLE2 compound file: the mini stream declares {root_size} bytes, "
                f"more than the file holds ({len(data)})",
            )
        return _read_streams(ole, data, file, limits)
    finally:
        ole.close()


def check_cfb_header(data: bytes, file: str) -> None:
    """The compound-file header's counts checked against the file's size before olefile
    reads it: olefile loops ``num_difat_sectors`` times over a DIFAT chain (a chain pointing
    at itself would grow the FAT by 127 sectors per turn) and reads ``num_mini_fat_sectors``
    sectors for the mini FAT, both straight from the header. Sector size must be 512 or
    4096 bytes (sector shift 9 or 12, @30) and the mini sector 64 bytes (shift 6, @32); the
    FAT (@44), mini FAT (@64) and DIFAT (@72) sector counts at most the file's sectors."""
    if len(data) < 512:
        raise _format(file, f"truncated OLE2 compound file ({len(data)} bytes, header is 512)")
    shift, mini_shift = struct.unpack_from("<HH", data, 30)
    if shift not in (9, 12) or mini_shift != 6:
        raise _format(
            file,
            f"corrupt OLE2 header: sector shift {shift} / mini sector shift {mini_shift} "
            "(must be 9 or 12 / 6)",
        )
    n_sectors = -(-(len(data) - 512) // (1 << shift))
    (n_fat,) = struct.unpack_from("<I", data, 44)
    (n_minifat,) = struct.unpack_from("<I", data, 64)
    (n_difat,) = struct.unpack_from("<I", data, 72)
    for name, value in (("FAT", n_fat), ("mini FAT", n_minifat), ("DIFAT", n_difat)):
        if value > n_sectors:
            raise _format(
                file,
                f"corrupt OLE2 header: {value} {name} sectors declared, the file has "
                f"{n_sectors} sectors",
            )


def _size(ole: Any, name: str, file: str) -> int:
    try:
        return int(ole.get_size(name))
    except Exception as exc:
        raise _format(file, f"corrupt stream entry ({type(exc).__name__}: {exc})", name) from exc


def _stream(ole: Any, name: str, file: str, size_cap: int) -> bytes:
    try:
        size = ole.get_size(name)
        if size > size_cap:
            raise _format(
                file, f"stream declares {size} bytes, more than the file holds", name
            )
        with ole.openstream(name) as fh:
            out = fh.read()
    except HWPXFormatError:
        raise
    except Exception as exc:
        raise _format(
            file, f"corrupt or truncated stream ({type(exc).__name__}: {exc})", name
        ) from exc
    return bytes(out)


def _read_streams(ole: Any, data: bytes, file: str, limits: Limits) -> HWPFile:
    try:
        entries = ole.listdir(streams=True, storages=False)
    except Exception as exc:
        raise _format(file, f"corrupt OLE2 directory ({type(exc).__name__}: {exc})") from exc
    names = {"/".join(e) for e in entries}
    if "FileHeader" not in names:
        raise _format(file, "no FileHeader stream: not an HWP 5 document", "FileHeader")
    header = _stream(ole, "FileHeader", file, len(data))
    if header.startswith(HWP3_SIGNATURE):  # before the HWP 5 signature, its prefix
        raise _hwp3_error(file)
    if len(header) < 40 or not header.startswith(HWP_SIGNATURE):
        raise _format(
            file, "FileHeader has no 'HWP Document File' signature: not an HWP 5 document",
            "FileHeader",
        )
    v, flags = struct.unpack_from("<II", header, 32)
    version = (v >> 24 & 0xFF, v >> 16 & 0xFF, v >> 8 & 0xFF, v & 0xFF)
    if version[0] != 5:
        raise _format(
            file, f"HWP version {'.'.join(map(str, version))} is not 5.x", "FileHeader"
        )
    if flags & FLAG_PASSWORD:
        raise _encrypted(
            file,
            "cannot be read: the document is password-protected (암호 설정 문서) and its "
            "streams are encrypted; open it in Hangul with the password and save an "
            "unprotected copy",
        )
    if flags & FLAG_DISTRIBUTION or any(n.startswith("ViewText/") for n in names):
        raise _encrypted(
            file,
            "cannot be read: this is a distribution document (배포용 문서), whose body Hangul "
            "stores encrypted (ViewText streams) so that it can only be viewed or printed, "
            "and this reader does not decrypt it; ask the author for the original document",
        )
    budget = _Budget(file, limits, len(data))
    compressed = bool(flags & FLAG_COMPRESSED)

    def body(name: str) -> bytes:
        if not compressed:  # stored: the declared size checked before the stream is read
            size = _size(ole, name, file)
            if size <= len(data):  # else _stream says the stream is larger than the file
                _check_sizes(budget, name, size, size, "is")
        raw = _stream(ole, name, file, len(data))
        if compressed:
            return inflate(raw, budget, name)
        _check_sizes(budget, name, len(raw), len(raw), "is")
        budget.total += len(raw)
        return raw

    if "DocInfo" not in names:
        raise _format(file, "no DocInfo stream", "DocInfo")
    docinfo = body("DocInfo")
    numbered = sorted(
        (int(m.group(1)), n)
        for n in names
        if n.startswith("BodyText/") and (m := _SECTION.match(n[9:])) is not None
    )
    if not numbered:
        raise _format(file, "no BodyText/Section<N> stream: no document body", "BodyText")
    sections = [(n, body(n)) for _, n in numbered]
    title = ""
    if SUMMARY in names:
        # parsed here, not by olefile's getproperties: that loops over a vector property's
        # declared count (2**32 for a hostile file: a hang) and misreads VT_LPWSTR lengths
        try:
            title = summary_title(_stream(ole, SUMMARY, file, len(data)))
        except HWPXFormatError:  # a broken summary never makes the document unreadable
            title = ""
    return HWPFile(version, flags, docinfo, sections, title)


SUMMARY = "\x05HwpSummaryInformation"
VT_I2 = 0x02
VT_LPSTR = 0x1E
VT_LPWSTR = 0x1F


def summary_title(raw: bytes) -> str:
    """The title (property id 2) of an OLE property set stream, or ``""``.

    MS-OLEPS: a 28-byte header (byte order 0xFFFE, version, system id, CLSID), UINT32 set
    count @24, the first set's FMTID @28 and UINT32 offset @44; a set is UINT32 size, UINT32
    property count, then (UINT32 id, UINT32 offset from the set's start) pairs. A VT_LPWSTR
    (0x1F) value is a UINT32 length in characters, the terminating null included, then
    UTF-16LE; a VT_LPSTR (0x1E) a UINT32 length in bytes in the set's code page (property 1,
    VT_I2). Reads at most the pairs the stream holds; anything out of bounds gives ``""``."""
    u32 = struct.Struct("<I").unpack_from
    if len(raw) < 48:
        return ""
    (base,) = u32(raw, 44)
    if base + 8 > len(raw):
        return ""
    (count,) = u32(raw, base + 4)
    count = min(count, (len(raw) - base - 8) // 8)
    values: dict[int, int] = {}
    for i in range(count):
        pid, off = struct.unpack_from("<II", raw, base + 8 + 8 * i)
        if pid in (1, 2) and base + off + 8 <= len(raw):
            values.setdefault(pid, base + off)
    at = values.get(2)
    if at is None:
        return ""
    vtype, n = struct.unpack_from("<II", raw, at)
    if vtype == VT_LPWSTR:
        text = raw[at + 8 : at + 8 + 2 * n].decode("utf-16-le", "replace")
    elif vtype == VT_LPSTR:
        codepage = 949
        if 1 in values and u32(raw, values[1])[0] == VT_I2:
            codepage = struct.unpack_from("<H", raw, values[1] + 4)[0]
        chunk = raw[at + 8 : at + 8 + n]
        try:
            text = chunk.decode("utf-16-le" if codepage == 1200 else f"cp{codepage}", "replace")
        except LookupError:  # an unknown code page
            text = chunk.decode("cp949", "replace")
    else:
        return ""
    return _xml_safe(text.replace("\x00", "")).strip()


def _encrypted(file: str, message: str) -> HWPXEncryptedError:
    return HWPEncryptedError(file, message)


def read_records(
    data: bytes, file: str, part: str, max_records: int, skip_layout: bool = False
) -> Records:
    """Split a whole record stream into one :class:`Records` (see :func:`iter_records`)."""
    for rec in iter_records(data, file, part, max_records, skip_layout, batch=None):
        return rec
    raise AssertionError("iter_records yields at least one batch")  # pragma: no cover


def iter_records(
    data: bytes,
    file: str,
    part: str,
    max_records: int,
    skip_layout: bool = False,
    batch: int | None = 4096,
) -> Iterator[Records]:
    """Split a record stream as it is read; a size beyond the stream or too many records
    raise when that record is reached.

    One pass: each record's header, payload bounds and subtree end (the first later record
    whose level is <= its own, found with a stack of the open records). Every record counts
    against ``max_records``. With ``batch`` set, the records go out in batches of whole
    top-level subtrees: a batch is cut before the first record, once it holds ``batch``
    records, that closes every open record (its level is at most every earlier record's);
    indices (``sub_end``) are local to their batch, payload bounds index ``data``. A consumer
    that stops early (a limit crossed) has read one batch past the refusal, not the stream.
    ``batch=None`` gives the whole stream as one batch (at least one, maybe empty).

    ``skip_layout`` leaves out the layout records of a paragraph (PARA_CHAR_SHAPE,
    PARA_LINE_SEG, PARA_RANGE_TAG: tags 68-70 whose parent is a PARA_HEADER), with their
    subtrees, about 40 % of a section's records. Nothing reads them: the builder looks at a
    PARA_HEADER's children only for PARA_TEXT and CTRL_HEADER, and every other walk jumps
    over the paragraph's subtree. The subtree ends of the records kept are those of the full
    stream renumbered (a skipped record's place is taken by the next record kept, whose
    level is at most the skipped one's), so every walk visits the same kept records."""
    cut = batch if batch is not None and batch > 0 else 1 << 62
    n = len(data)
    pos = 0
    unpack = _U32.unpack_from
    count = 0  # records read (all of them); below n // 4 + 1 it can never pass max_records

    def fresh() -> tuple[array[int], array[int], array[int], array[int], array[int]]:
        return array("H"), array("H"), array("q"), array("q"), array("q")

    tags, levels, starts, ends, sub_end = fresh()
    add_tag, add_level, add_start, add_end = tags.append, levels.append, starts.append, ends.append
    add_sub = sub_end.append
    kept = 0  # records kept in this batch (the arrays' length)
    # open kept records as (kept index, level, tag); strictly increasing levels: at most
    # 1024 entries. A skipped layout record is not pushed: while ``skip_below`` holds its
    # level, the records deeper than it (its subtree) are skipped without touching the stack
    # (they could only close one another), and the first record at its level or above ends
    # the skip and closes the open records as if the skipped ones had been there.
    no_skip = 0x400  # above every 10-bit level
    skip_below = no_skip
    stack: list[tuple[int, int, int]] = []
    pop, push = stack.pop, stack.append
    while pos < n:
        if pos + 4 > n:
            raise _format(file, f"truncated record header at byte {pos}", part)
        (h,) = unpack(data, pos)
        pos += 4
        size = h >> 20
        if size == 0xFFF:
            if pos + 4 > n:
                raise _format(file, f"truncated extended record size at byte {pos}", part)
            (size,) = unpack(data, pos)
            pos += 4
        end = pos + size
        if end > n:
            raise _format(
                file,
                f"record (tag {h & 0x3FF}) at byte {pos - 4} declares {size} bytes, beyond "
                f"the end of the stream ({n} bytes)",
                part,
            )
        if count >= max_records:
            raise _limit(
                file, f"more than max_records={max_records} records in one stream",
                "max_records", count + 1, max_records, part,
            )
        count += 1
        lvl = h >> 10 & 0x3FF
        if lvl > skip_below:  # inside a skipped layout record
            pos = end
            continue
        skip_below = no_skip
        tag = h & 0x3FF
        while stack and stack[-1][1] >= lvl:
            sub_end[pop()[0]] = kept
        if skip_layout and 68 <= tag <= 70 and stack and stack[-1][2] == TAG_PARA_HEADER:
            skip_below = lvl
            pos = end
            continue
        if kept >= cut and not stack:  # every record of the batch is closed: hand it out
            yield Records(data, tags, levels, starts, ends, sub_end)
            tags, levels, starts, ends, sub_end = fresh()
            add_tag, add_level = tags.append, levels.append
            add_start, add_end, add_sub = starts.append, ends.append, sub_end.append
            kept = 0
        push((kept, lvl, tag))
        add_tag(tag)
        add_level(lvl)
        add_start(pos)
        add_end(end)
        add_sub(0)
        kept += 1
        pos = end
    for i, _, _ in stack:  # still open at the end of the stream
        sub_end[i] = kept
    yield Records(data, tags, levels, starts, ends, sub_end)


def outline_levels(rec: Records) -> dict[str, int]:
    """Para shape id (its position among PARA_SHAPE records) -> 1-based outline level."""
    out: dict[str, int] = {}
    pid = 0
    data = rec.data
    for tag, start, end in zip(rec.tags, rec.starts, rec.ends, strict=True):
        if tag != TAG_PARA_SHAPE:
            continue
        if end - start >= 4:
            (props,) = struct.unpack_from("<I", data, start)
            if props >> 23 & 0x3 == 1:
                out[str(pid)] = (props >> 25 & 0x7) + 1
        pid += 1
    return out


class SectionBuilder:
    """Build one section's OWPML-shaped tree from its records (see the module docstring).

    The tree is written as XML text in document order and parsed once by libxml2, which is
    several times faster than creating each element from Python; every text and attribute
    value is XML-escaped, and nothing else reaches the text.

    ``records`` is the section's :class:`Records`, or its batches from :func:`iter_records`,
    built as they are read. The text written is charged against ``max_text_chars`` as it
    goes, on top of ``text_before`` (what the walker charged for the file's earlier
    sections), with a lower bound of what the walker will charge for it
    (:meth:`_charge_paragraph`): a file the walker would refuse for its text is refused
    here once the bound crosses the limit, before the rest of the stream is read or any
    tree is built, and a file the walker accepts is never refused here."""

    def __init__(
        self, records: Records | Iterable[Records], file: str, part: str, limits: Limits,
        warn: Callable[[str], None], text_before: int = 0,
    ) -> None:
        self.batches: Iterable[Records] = (
            (records,) if isinstance(records, Records) else records
        )
        self.rec = Records(b"", array("H"), array("H"), array("q"), array("q"), array("q"))
        self.file = file
        self.part = part
        self.limits = limits
        self.warn = warn
        self.depth = 0
        self.table_depth = 0
        self.out: list[str] = []
        self.text_before = text_before
        self.text_bound = 0  # the lower bound charged for this section so far
        # what a paragraph's text is charged on top of its characters: per open list, -1
        # outside table cells (the walker's 8 for a paragraph block), else the lines the
        # cell holds so far (its lines are joined by one character each, see _charge_paragraph)
        self.lists = [-1]

    def build(self) -> etree._Element:
        """The section's tree. Top-level paragraphs are the PARA_HEADERs on the stream's
        top chain (each record at most as deep as every record before it) at the chain's
        last (lowest) level; when a batch brings a lower level, what was built from the
        higher one is dropped, with its charge."""
        self.out = ["<sec>"]
        top = 1 << 30
        for rec in self.batches:
            self.rec = rec
            tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
            i, end = 0, len(tags)
            while i < end:
                lvl = levels[i]
                if lvl < top:
                    if top != 1 << 30:  # a lower top level: nothing built so far was top
                        del self.out[1:]
                        self.text_bound = 0
                    top = lvl
                if tags[i] == TAG_PARA_HEADER and lvl == top:
                    self._paragraph(i)
                i = sub_end[i]
        self.out.append("</sec>")
        text = "".join(self.out)
        self.out = []
        # our own markup: no DTD, no entities; huge_tree lifts libxml2's depth cap (256) to
        # what MAX_LIST_DEPTH allows (each list level is at most 5 elements deep)
        parser = etree.XMLParser(huge_tree=True, resolve_entities=False, no_network=True)
        try:
            return etree.fromstring(text, parser)
        except etree.XMLSyntaxError as exc:  # pragma: no cover - the markup is ours
            raise _format(
                self.file, f"section could not be assembled ({exc})", self.part
            ) from exc

    def _charge_paragraph(self, n: int) -> None:
        """Charge a paragraph whose text pieces strip to ``n`` characters in all (n > 0).

        The walker charges each paragraph block its stripped text + 8 (a block's pieces
        strip to at least the sum of the pieces stripped one by one); a table its cells'
        texts, each the cell's lines (one per paragraph with text, text boxes' included)
        joined by ``\n``, at least one character more per line after a cell's first, plus
        its frame (:func:`~._parse.table_text_bound`). So: n + 8 outside cells, n + 1 for a
        cell's second and later lines, n for its first. Notes, headers/footers and table
        captions inside a cell are paragraph blocks (charged 8 by the walker, at most 1 here)."""
        lists = self.lists
        cell = lists[-1]
        if cell < 0:
            n += 8
        else:
            n += cell > 0
            lists[-1] = cell + 1
        self.text_bound += n
        total = self.text_before + self.text_bound
        cap = self.limits.max_text_chars
        if total > cap:
            raise _limit(
                self.file,
                f"rendered text would exceed max_text_chars={cap} (at least {total} "
                "characters by the paragraphs read so far)",
                "max_text_chars", total, cap, self.part,
            )

    # ------------------------------------------------------------------ lists
    def _list_after(self, head: int, end: int) -> int:
        """The paragraphs following LIST_HEADER ``head`` at its level, as ``p`` elements;
        returns the index after them."""
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        level = levels[head]
        self.depth += 1
        if self.depth > MAX_LIST_DEPTH:
            raise _format(
                self.file,
                f"lists (cells, text boxes, notes) nested deeper than {MAX_LIST_DEPTH}",
                self.part,
            )
        i = sub_end[head]
        while i < end and tags[i] == TAG_PARA_HEADER and levels[i] == level:
            self._paragraph(i)
            i = sub_end[i]
        self.depth -= 1
        return i

    # ------------------------------------------------------------------ paragraphs
    def _paragraph(self, i: int) -> None:
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        j = i + 1
        end = sub_end[i]
        if j == end:
            return  # no text, no control: nothing the walker would read
        data = rec.data
        text_at = -1
        ctrls: list[int] = []
        child_level = levels[i] + 1
        while j < end:
            if levels[j] == child_level:
                tag = tags[j]
                if tag == TAG_PARA_TEXT and text_at < 0:
                    text_at = j
                elif tag == TAG_CTRL_HEADER:
                    ctrls.append(j)
            j = sub_end[j]
        if text_at < 0 and not ctrls:
            return  # an empty paragraph: nothing the walker would read
        out = self.out
        mark = len(out)
        start = rec.starts[i]
        if rec.ends[i] - start >= 10:
            (shape,) = _U16.unpack_from(data, start + 8)
            out.append(f'<p paraPrIDRef="{shape}">')
        else:
            out.append("<p>")
        # text and objects go straight into ``p``: the walker reads a ``run`` only as a
        # container, and HWP 5 has no run-level properties it would use
        if text_at < 0:
            # no text record: a paragraph holding nothing but its controls
            for c in ctrls:
                self._control(c)
        else:
            n = self._text(data[rec.starts[text_at] : rec.ends[text_at]], ctrls)
            if n:
                self._charge_paragraph(n)
            elif not ctrls:
                del out[mark:]  # white space only: nothing the walker would read
                return
        out.append("</p>")

    def _text(self, raw: bytes, ctrls: list[int]) -> int:
        """Decode PARA_TEXT: text pieces into ``t`` elements, extended controls in order;
        returns the characters of the pieces, each stripped.

        A field's text (between its start, code 3, and its end, code 4) is read as any
        text: the text of an unfilled click-here field (누름틀) is its guide text, which
        Hangul keeps in the field in both formats (an HWPX saved by some older versions
        leaves it out)."""
        if len(raw) & 1:
            raw = raw[:-1]
        s = _utf16(raw, "surrogatepass", True)[0]  # bytes.decode, without the lookup
        if len(s) * 2 != len(raw):  # a surrogate pair: work in code units
            s = "".join(chr(u) for u in struct.unpack(f"<{len(raw) // 2}H", raw))
        n = len(s)
        search = _CONTROL.search
        m = search(s)
        if m is None or (m.start() == n - 1 and s[-1] == "\r"):
            # the common case (nine texts in ten): no control but the paragraph end, so
            # no field and no object in the text; the loop below would do the same
            text = s if m is None else s[:-1]
            counted = self._t([text]) if text else 0
            for c in ctrls:
                self._control(c)
            return counted
        counted = 0
        n_ctrl = 0
        pieces: list[str] = []
        pos = 0
        while pos < n:
            m = search(s, pos)
            if m is None:
                pieces.append(s[pos:])
                break
            k = m.start()
            if k > pos:
                pieces.append(s[pos:k])
            code = ord(s[k])
            if code in _EXTENDED:
                pos = k + 8
                if n_ctrl < len(ctrls) and code != 3:  # a field start holds no text
                    if pieces:
                        counted += self._t(pieces)
                    self._control(ctrls[n_ctrl])
                n_ctrl += 1
                continue
            if code in _INLINE:
                pos = k + 8
                if code == 9:
                    pieces.append("\t")
                continue
            if code == 13:
                pos = k + 1
                continue
            piece = _CHAR_TEXT.get(code)
            if piece is not None:
                pieces.append(piece)
            pos = k + 1
        if pieces:
            counted += self._t(pieces)
        # controls the text did not reference (a damaged text): read them anyway, in order
        for c in ctrls[n_ctrl:]:
            self._control(c)
        return counted

    def _t(self, pieces: list[str]) -> int:
        """Write ``pieces`` as one ``t`` element; returns its length stripped (as the
        walker will read it: characters XML cannot hold dropped, surrogates paired)."""
        text = "".join(pieces)
        pieces.clear()
        if not text:
            return 0
        if _XML_SPECIAL.search(text) is None:  # the common case: nothing to escape or pair
            self.out.append(f"<t>{text}</t>")
            return len(text.strip())
        if _SURROGATE.search(text):  # code units from the slow path: pair them again
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        text = _xml_safe(text)
        self.out.append(f"<t>{_xml_text(text)}</t>")
        return len(text.strip())

    # ------------------------------------------------------------------ controls
    def _control(self, c: int) -> None:
        rec = self.rec
        start, stop = rec.starts[c], rec.ends[c]
        if stop - start < 4:
            return
        cid = _ctrl_id(rec.data[start : start + 4])
        if cid == "tbl ":
            self._table(c)
        elif cid == "gso ":
            self._shape(c)
        elif cid in ("fn  ", "en  ", "head", "foot"):
            name = {"fn  ": "footNote", "en  ": "endNote", "head": "header", "foot": "footer"}
            self.out.append(f"<{name[cid]}><subList>")
            self.lists.append(-1)  # paragraph blocks, in a cell too
            self._first_list(c)
            self.lists.pop()
            self.out.append(f"</subList></{name[cid]}>")
        elif cid == "eqed":
            self._equation(c)
        elif cid == "atno":
            if stop - start >= 10:
                (num,) = struct.unpack_from("<H", rec.data, start + 8)
                self.out.append(f'<autoNum num="{num}"/>')
        elif cid == "form":
            self._form(c)
        elif cid == "tcmt":
            return  # hidden comment (숨은 설명): never text, as hp:hiddenComment in HWPX

    def _form(self, c: int) -> None:
        """A form object (양식 개체): check boxes and radio buttons as HWPX ``checkBtn`` /
        ``radioBtn`` (caption and checked state). FORM_OBJECT: UINT32 type id twice (``+cbt``
        check box, ``+rbt`` radio button...), UINT32 length, then the property string as a
        WORD-length-prefixed WCHAR string (``... Caption:wstring:<n>:<text> Value:int:<v>``)."""
        rec = self.rec
        j, end = c + 1, rec.sub_end[c]
        while j < end:
            if rec.tags[j] == TAG_FORM_OBJECT:
                start, stop = rec.starts[j], rec.ends[j]
                data = rec.data
                if stop - start < 14:
                    return
                kind = data[start : start + 4][::-1]
                name = {b"+cbt": "checkBtn", b"+rbt": "radioBtn"}.get(kind)
                if name is None:
                    return
                raw = data[start + 14 : stop]
                props = raw[: len(raw) & ~1].decode("utf-16-le", "replace")
                caption = _xml_attr(_wstring(props, "Caption") or "")
                value = re.search(r"(?:^|\s)Value:int:(\d+)", props)
                checked = "CHECKED" if value and value.group(1) == "1" else "UNCHECKED"
                self.out.append(f'<{name} caption="{caption}" value="{checked}"/>')
                return
            j = rec.sub_end[j]

    def _first_list(self, c: int) -> None:
        """The paragraphs of the first LIST_HEADER directly under ctrl ``c``."""
        rec = self.rec
        j, end = c + 1, rec.sub_end[c]
        lvl = rec.levels[c] + 1
        while j < end:
            if rec.tags[j] == TAG_LIST_HEADER and rec.levels[j] == lvl:
                self._list_after(j, end)
                return
            j = rec.sub_end[j]

    def _equation(self, c: int) -> None:
        rec = self.rec
        j, end = c + 1, rec.sub_end[c]
        while j < end:
            if rec.tags[j] == TAG_EQEDIT:
                start, stop = rec.starts[j], rec.ends[j]
                if stop - start >= 6:
                    (n,) = struct.unpack_from("<H", rec.data, start + 4)
                    raw = rec.data[start + 6 : min(start + 6 + 2 * n, stop)]
                    script = raw[: len(raw) & ~1].decode("utf-16-le", "replace")
                    self.out.append(f"<equation><script>{_xml_text(script)}</script></equation>")
                return
            j = rec.sub_end[j]

    def _shape(self, c: int) -> None:
        """``gso ``: caption (LIST_HEADER under the ctrl) and text boxes (LIST_HEADERs in the
        SHAPE_COMPONENT tree, groups included)."""
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        out = self.out
        out.append("<gso>")
        j, end = c + 1, sub_end[c]
        lvl = levels[c] + 1
        while j < end:
            if levels[j] == lvl:
                if tags[j] == TAG_LIST_HEADER:
                    out.append("<caption><subList>")
                    j = self._list_after(j, end)
                    out.append("</subList></caption>")
                    continue
                if tags[j] == TAG_SHAPE_COMPONENT:
                    self._text_boxes(j)
            j = sub_end[j]
        out.append("</gso>")

    def _text_boxes(self, k: int) -> None:
        rec = self.rec
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        out = self.out
        j, end = k + 1, sub_end[k]
        lvl = levels[k] + 1
        while j < end:
            if levels[j] == lvl:
                if tags[j] == TAG_LIST_HEADER:
                    out.append("<drawText><subList>")
                    j = self._list_after(j, end)
                    out.append("</subList></drawText>")
                    continue
                if tags[j] == TAG_SHAPE_COMPONENT:  # a member of a group (묶음 개체)
                    self.depth += 1
                    if self.depth > MAX_LIST_DEPTH:
                        raise _format(self.file, "drawing objects grouped too deeply", self.part)
                    self._text_boxes(j)
                    self.depth -= 1
            j = sub_end[j]

    def _table(self, c: int) -> None:
        # the walker's max_table_depth, checked here before the nested tree is built
        cap = self.limits.max_table_depth
        if self.table_depth >= cap:
            raise _limit(
                self.file,
                f"tables nested deeper than max_table_depth={cap}",
                "max_table_depth", self.table_depth + 1, cap, self.part,
            )
        self.table_depth += 1
        try:
            self._table_body(c)
        finally:
            self.table_depth -= 1

    def _table_body(self, c: int) -> None:
        rec = self.rec
        data = rec.data
        tags, levels, sub_end = rec.tags, rec.levels, rec.sub_end
        out = self.out
        head = len(out)
        out.append("<tbl>")  # given its grid attributes when the TABLE record is read
        j, end = c + 1, sub_end[c]
        lvl = levels[c] + 1
        seen_table = False
        in_row = False
        last_row = -1
        n_cells = 0
        cap_cells = self.limits.max_table_cells
        while j < end:
            if levels[j] != lvl:
                j = sub_end[j]
                continue
            tag = tags[j]
            if tag == TAG_TABLE and not seen_table:
                seen_table = True
                start, stop = rec.starts[j], rec.ends[j]
                if stop - start >= 8:
                    rows, cols = struct.unpack_from("<HH", data, start + 4)
                    grid = max(rows, 1) * max(cols, 1)
                    if grid > cap_cells:
                        raise _limit(
                            self.file,
                            f"table declares a {rows}x{cols} grid: {grid} exceeds "
                            f"max_table_cells={cap_cells}",
                            "max_table_cells", grid, cap_cells, self.part,
                        )
                    out[head] = f'<tbl rowCnt="{rows}" colCnt="{cols}">'
            elif tag == TAG_LIST_HEADER:
                if not seen_table:
                    # the caption comes before the TABLE record; each one goes first in
                    # ``tbl`` (a later caption before an earlier one)
                    mark = len(out)
                    out.append("<caption><subList>")
                    self.lists.append(-1)  # paragraph blocks, in a cell too
                    j = self._list_after(j, end)
                    self.lists.pop()
                    out.append("</subList></caption>")
                    chunk = out[mark:]
                    del out[mark:]
                    out[head + 1 : head + 1] = chunk
                    continue
                n_cells += 1
                if n_cells > cap_cells:
                    raise _limit(
                        self.file, f"table cell count {n_cells} exceeds "
                        f"max_table_cells={cap_cells}",
                        "max_table_cells", n_cells, cap_cells, self.part,
                    )
                start, stop = rec.starts[j], rec.ends[j]
                if stop - start >= 16:
                    col, row, cs, rs = _CELL.unpack_from(data, start + 8)
                else:
                    col, row, cs, rs = 0, max(last_row, 0), 1, 1
                if not in_row or row != last_row:
                    out.append("</tr><tr>" if in_row else "<tr>")
                    in_row = True
                    last_row = row
                out.append("<tc><subList>")
                self.lists.append(0)  # a cell: no line yet
                j = self._list_after(j, end)
                self.lists.pop()
                out.append(
                    f'</subList><cellAddr rowAddr="{row}" colAddr="{col}"/>'
                    f'<cellSpan rowSpan="{rs}" colSpan="{cs}"/></tc>'
                )
                continue
            j = sub_end[j]
        out.append("</tr></tbl>" if in_row else "</tbl>")


_SURROGATE = re.compile("[\ud800-\udfff]")
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: anything :func:`_xml_text` would change (or a surrogate to pair): absent, text goes as is
_XML_SPECIAL = re.compile("[\x00-\x08\x0b\x0c\x0d\x0e-\x1f\ud800-\udfff\ufffe\uffff&<>]")


def _xml_safe(text: str) -> str:
    """Characters lxml refuses (C0 controls, lone surrogates) dropped."""
    return _XML_BAD.sub("", text) if _XML_BAD.search(text) else text


def _xml_text(text: str) -> str:
    """``text`` as XML character data: characters XML cannot hold dropped, ``&<>`` escaped
    (``>`` too, so ``]]>`` never appears), carriage returns as character references."""
    text = _xml_safe(text)
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    if "\r" in text:  # a parser would turn a raw carriage return into a line feed
        text = text.replace("\r", "&#13;")
    return text


def _xml_attr(text: str) -> str:
    """``text`` as a double-quoted XML attribute value (whitespace kept as character
    references: a parser would normalise raw tabs and newlines to spaces)."""
    text = _xml_text(text).replace('"', "&quot;")
    return text.replace("\t", "&#9;").replace("\n", "&#10;")
