"""HWP 5 record streams split into flat typed arrays (the records of a stream, each with
its payload bounds and the end of its subtree), and the outline levels of DocInfo.

Format facts (Hancom, 한글 문서 파일 형식 5.0, revision 1.3):

- A record: UINT32 header = tag id (bits 0-9), level (bits 10-19), size (bits 20-31); size
  0xFFF means a UINT32 extended size follows. Records nest by level: a record's children are
  the records after it with a greater level, up to the next with a level <= its own.
- DocInfo ``PARA_SHAPE`` (tag 25), in id order: UINT32 properties 1, bits 23-24 the heading
  type (1 = outline), bits 25-27 the level (0-based), as ``<hh:heading type="OUTLINE"
  level=..>`` in HWPX.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from llama_index.readers.hwpx._errors import hwp_format_error as _format
from llama_index.readers.hwpx._errors import hwp_limit_error as _limit

TAG_PARA_SHAPE = 25
TAG_PARA_HEADER = 66
TAG_PARA_TEXT = 67
TAG_CTRL_HEADER = 71
TAG_LIST_HEADER = 72
TAG_SHAPE_COMPONENT = 76
TAG_TABLE = 77
TAG_EQEDIT = 88
TAG_FORM_OBJECT = 91

_U32 = struct.Struct("<I")


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

