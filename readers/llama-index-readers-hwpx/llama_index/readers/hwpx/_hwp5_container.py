"""Binary HWP 5.x: the OLE2/CFB compound file checked and opened, its streams read and
inflated under the reader's limits, the summary title read.

Format facts (Hancom, 한글 문서 파일 형식 5.0, revision 1.3):

- Streams: ``FileHeader`` (256 bytes: 32-byte signature ``HWP Document File``, UINT32 version
  ``0xMMnnPPrr``, UINT32 flags: bit 0 compressed, bit 1 password, bit 2 distribution
  (배포용), ...), ``DocInfo`` and ``BodyText/Section<N>`` (record streams, raw-deflate
  compressed when flag bit 0 is set), ``ViewText/Section<N>`` (distribution documents: the
  sections encrypted), ``\\x05HwpSummaryInformation`` (an OLE property set; 2 = title).

The record streams are split by :mod:`._hwp5_records`; each section's records become an
element tree in :mod:`._hwp5_section`.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

from llama_index.readers.hwpx._errors import HWPXFormatError
from llama_index.readers.hwpx._errors import hwp_encrypted_error as _encrypted
from llama_index.readers.hwpx._errors import hwp_format_error as _format
from llama_index.readers.hwpx._errors import hwp_limit_error as _limit
from llama_index.readers.hwpx._hwp5_xml import xml_safe as _xml_safe
from llama_index.readers.hwpx._package import OLE2_MAGIC, RATIO_FLOOR_BYTES, Limits

HWP_SIGNATURE = b"HWP Document File"
HWP3_SIGNATURE = b"HWP Document File V3"
FLAG_COMPRESSED = 0x1
FLAG_PASSWORD = 0x2
FLAG_DISTRIBUTION = 0x4

_SECTION = re.compile(r"^Section(\d+)$")
_CHUNK = 1 << 20


@dataclass
class HWPFile:
    """The streams of an opened HWP 5 file that the reader uses."""

    version: tuple[int, int, int, int]
    flags: int
    docinfo: bytes
    sections: list[tuple[str, bytes]]
    title: str = ""
    warnings: list[str] = field(default_factory=list)



class _Budget:
    """Decompressed bytes read so far from one file (``max_total_bytes`` and the ratio)."""

    def __init__(self, file: str, limits: Limits, file_bytes: int) -> None:
        self.file = file
        self.limits = limits
        self.file_bytes = file_bytes
        self.total = 0



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
