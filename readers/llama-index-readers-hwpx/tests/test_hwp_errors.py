"""Bad binary HWP 5 input, built in code (``hwp5_fakes``): each gives the HWP reader's typed
error naming the file and the problem, the HWPX reader's limits apply before allocation, and a
batch keeps the good documents."""

from __future__ import annotations

import io
import random
import struct
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path

import olefile
import pytest
from llama_index.readers.hwpx import (
    HWPEncryptedError,
    HWPFormatError,
    HWPLimitError,
    HWPReader,
    HWPXEncryptedError,
    HWPXError,
    HWPXFormatError,
    HWPXLimitError,
    HWPXReader,
    HWPXReadWarning,
)
from llama_index.readers.hwpx._hwp5_records import Records, iter_records, read_records
from llama_index.readers.hwpx._hwp5_section import SectionBuilder
from llama_index.readers.hwpx._parse import FileState, SectionWalker

from .hwp5_fakes import (
    FLAG_COMPRESSED,
    FLAG_DISTRIBUTION,
    FLAG_PASSWORD,
    TAG_PARA_TEXT,
    build_cfb,
    deflate,
    docinfo,
    field_paragraph,
    file_header,
    header_paragraph,
    hwp5,
    lpwstr,
    nested_tables,
    paragraph,
    property_set,
    record,
    table_paragraph,
)

HWP3 = b"HWP Document File V3.00 \x1a\x01\x02\x03\x04\x05" + b"\x00" * 96 + "옛 문서".encode("cp949")


def _fails(data: bytes, name: str, kind: type[HWPXError], match: str, **fields: object) -> HWPXError:
    """``data`` read as ``name`` raises ``kind`` whose message starts with the name and
    matches ``match``; returns the error."""
    with pytest.raises(kind, match=match) as exc:
        HWPReader(**fields).load_bytes(data, name)  # type: ignore[arg-type]
    err = exc.value
    assert err.file == name and str(err).startswith(name), str(err)
    return err


def _limit(data: bytes, name: str, limit: str, **fields: object) -> HWPLimitError:
    err = _fails(data, name, HWPLimitError, f"{limit}=", **fields)
    assert isinstance(err, HWPLimitError) and isinstance(err, HWPXLimitError)
    assert err.limit == limit and err.value > err.maximum
    assert f"HWPReader({limit}=" in str(err)  # how to raise it
    return err


# ----------------------------------------------------------------------------- the fakes
def test_the_cfb_writer_round_trips_through_olefile() -> None:
    """The oracle for the fixture writer: olefile (strict) reads every stream back, mini
    (under 4096 bytes) and regular, in nested storages."""
    streams = {
        "FileHeader": file_header(),
        "DocInfo": b"d" * 4096,
        "BodyText/Section0": b"s" * 5000,
        "BodyText/Section1": b"t" * 70,
        "Empty": b"",
    }
    ole = olefile.OleFileIO(io.BytesIO(build_cfb(streams)), raise_defects=olefile.DEFECT_INCORRECT)
    assert sorted("/".join(e) for e in ole.listdir()) == sorted(streams)
    for name, data in streams.items():
        assert ole.openstream(name).read() == data


def test_a_built_document_reads() -> None:
    data = hwp5([paragraph("첫 문단"), table_paragraph([["가", "나"], ["다", "라"]])])
    parsed = HWPReader().parse_bytes(data, "ok.hwp")
    assert [c.text for c in parsed.tables[0].cells] == ["가", "나", "다", "라"]
    assert "첫 문단" in HWPReader().load_bytes(data, "ok.hwp")[0].text
    stored = hwp5([paragraph("저장")], flags=0)  # uncompressed streams
    assert HWPReader().load_bytes(stored, "raw.hwp")[0].text == "저장"


# ----------------------------------------------------------------------------- protected
def test_password_document_cannot_be_read() -> None:
    data = hwp5(flags=FLAG_COMPRESSED | FLAG_PASSWORD)
    err = _fails(data, "secret.hwp", HWPEncryptedError, "password-protected")
    assert "cannot be read" in str(err) and isinstance(err, HWPXEncryptedError)


@pytest.mark.parametrize("how", ["flag", "viewtext"])
def test_distribution_document_says_it_cannot_be_read_and_why(how: str) -> None:
    if how == "flag":
        data = hwp5(flags=FLAG_COMPRESSED | FLAG_DISTRIBUTION)
    else:  # the flag clear but the body only in ViewText (encrypted): still refused
        data = hwp5(extra={"ViewText/Section0": b"\x8f" * 300}, drop=["BodyText/Section0"])
    err = _fails(data, "dist.hwp", HWPEncryptedError, "배포용")
    msg = str(err)
    assert "cannot be read" in msg and "encrypted" in msg and "does not decrypt" in msg


# ----------------------------------------------------------------------------- not HWP 5
def test_hwp3_document_is_named_as_such(tmp_path: Path) -> None:
    err = _fails(HWP3, "old.hwp", HWPFormatError, "HWP 3.x")
    assert "HWP Document File V3.00" in str(err) and "save it as HWP 5" in str(err)
    path = tmp_path / "old.hwpx"  # named .hwpx: the HWPX reader hands it over, named HWP 3.x
    path.write_bytes(HWP3)
    with pytest.warns(HWPXReadWarning, match="content is HWP 3.x"):
        with pytest.raises(HWPFormatError, match="HWP 3.x"):
            HWPXReader().load_data(path)
    # an OLE2 file whose FileHeader carries the HWP 3 signature
    data = hwp5(header=HWP3[:256].ljust(256, b"\x00"))
    _fails(data, "old5.hwp", HWPFormatError, "HWP 3.x")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "not an OLE2 compound file"),
        ("그냥 텍스트".encode(), "not an OLE2 compound file"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "truncated OLE2"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 2000, "corrupt OLE2"),
    ],
    ids=["empty", "text", "short_header", "zero_header"],
)
def test_not_an_ole_file(data: bytes, match: str) -> None:
    _fails(data, "plain.hwp", HWPFormatError, match)


def test_ole_file_that_is_not_hwp() -> None:
    data = build_cfb({"WordDocument": b"w" * 600})
    _fails(data, "word.hwp", HWPFormatError, "no FileHeader stream")
    bad_sig = hwp5(header=file_header(signature=b"Not a Hangul file"))
    _fails(bad_sig, "sig.hwp", HWPFormatError, "no 'HWP Document File' signature")
    v4 = hwp5(header=file_header(version=0x04000000))
    _fails(v4, "v4.hwp", HWPFormatError, "HWP version 4.0.0.0 is not 5.x")


# ----------------------------------------------------------------------------- streams
@pytest.mark.parametrize(
    ("drop", "match"),
    [
        ("FileHeader", "no FileHeader stream"),
        ("DocInfo", "no DocInfo stream"),
        ("BodyText/Section0", "no BodyText/Section<N> stream"),
    ],
)
def test_missing_stream(drop: str, match: str) -> None:
    err = _fails(hwp5(drop=[drop]), "gap.hwp", HWPFormatError, match)
    assert err.part == drop.split("/")[0]


@pytest.mark.parametrize("part", ["DocInfo", "BodyText/Section0"])
def test_corrupt_and_truncated_zlib(part: str) -> None:
    body = b"".join(paragraph(f"문단 {i}") for i in range(200))
    good = deflate(body if part != "DocInfo" else docinfo(200))
    err = _fails(hwp5([body], raw={part: b"\xff" * 64 + good}), "z.hwp", HWPFormatError,
                 "corrupt compressed stream")
    assert err.part == part and f"[{part}]" in str(err)
    err = _fails(hwp5([body], raw={part: good[: len(good) // 2]}), "cut.hwp", HWPFormatError,
                 "truncated compressed stream")
    assert err.part == part


def test_truncated_streams_and_files() -> None:
    data = hwp5([b"".join(paragraph("긴 본문 " * 40) for _ in range(40))], flags=0)
    # a directory entry declaring more than the sector chain holds
    body = b"".join(paragraph("x") for _ in range(200))  # 6800 bytes: 14 sectors
    longer = hwp5([body], flags=0, declared_sizes={"BodyText/Section0": 9000})
    _fails(longer, "long.hwp", HWPFormatError, r"corrupt or truncated stream.*incomplete")
    # ... or less: the last record then runs past the stream's end
    shorter = hwp5([body], flags=0, declared_sizes={"BodyText/Section0": 6790})
    _fails(shorter, "short.hwp", HWPFormatError, "beyond the end of the stream")
    # ... or more than the whole file
    huge = hwp5([body], flags=0, declared_sizes={"BodyText/Section0": 1 << 30})
    _fails(huge, "huge.hwp", HWPFormatError, "declares 1073741824 bytes, more than the file")
    # a mini stream (under 4096 bytes) declaring a regular-sector size: its chain collides
    mini = hwp5(declared_sizes={"BodyText/Section0": 1 << 30})
    _fails(mini, "mini.hwp", HWPFormatError, "corrupt")
    # the file cut anywhere after its header
    for cut in (600, len(data) // 2, len(data) - 512):
        _fails(data[:cut], f"cut{cut}.hwp", HWPFormatError, "corrupt")


# ----------------------------------------------------------------------------- records
@pytest.mark.parametrize(
    ("stream", "match"),
    [
        (paragraph("a") + record(TAG_PARA_TEXT, 1, b"ab", size=200), r"declares 200 bytes, beyond"),
        (paragraph("a") + struct.pack("<I", TAG_PARA_TEXT | 0xFFF << 20) + b"\x10\x00",
         "truncated extended record size"),
        (paragraph("a") + record(TAG_PARA_TEXT, 1, b"x" * 10, extended=True, size=0xFFFFFFFF),
         "declares 4294967295 bytes, beyond"),
        (paragraph("a") + record(TAG_PARA_TEXT, 1, b"x" * 10, extended=True, size=5000),
         "declares 5000 bytes, beyond"),
        (paragraph("a") + b"\x42\x00", "truncated record header"),
    ],
    ids=["size", "ext_header_cut", "ext_4g", "ext_beyond", "header_cut"],
)
def test_record_sizes_beyond_their_stream(stream: bytes, match: str) -> None:
    err = _fails(hwp5([stream]), "rec.hwp", HWPFormatError, match)
    assert err.part == "BodyText/Section0"
    _fails(hwp5(doc_info=stream), "info.hwp", HWPFormatError, match)


def test_extended_size_that_fits_is_read() -> None:
    text = "가" * 3000  # 6002 bytes: past 0xFFF, so the extended size is used
    assert HWPReader().load_bytes(hwp5([paragraph(text)]), "ext.hwp")[0].text == text
    short = record(66, 0, struct.pack("<IIHBBHHHI", 2, 0, 0, 0, 0, 1, 0, 1, 0)) + record(
        TAG_PARA_TEXT, 1, "가\r".encode("utf-16-le"), extended=True
    )  # a short payload written with the extended form: also valid
    assert HWPReader().load_bytes(hwp5([short]), "ext2.hwp")[0].text == "가"


def test_record_count_limit() -> None:
    body = b"".join(paragraph(str(i)) for i in range(50))  # 100 records
    assert HWPReader(max_records=100).load_bytes(hwp5([body]), "n.hwp")
    err = _limit(hwp5([body]), "n.hwp", "max_records", max_records=99)
    assert err.part == "BodyText/Section0"


def test_record_index_is_compact() -> None:
    """The split of a record stream costs under 32 bytes a record (typed arrays; Python
    lists of ints took ~124), so ``max_records`` bounds it at ~140 MB, whatever the records."""
    n = 200_000
    data = struct.pack("<I", TAG_PARA_TEXT | 1 << 10) * n  # empty records: 4 bytes each
    tracemalloc.start()
    try:
        rec = read_records(data, "x.hwp", "BodyText/Section0", 5_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rec.tags) == n and list(rec.sub_end[:3]) == [1, 2, 3]
    assert peak < 32 * n


# ----------------------------------------------------------------------------- limits
@pytest.mark.parametrize(("rows", "cols"), [(65535, 65535), (65535, 2), (2, 65535), (400, 400)])
def test_huge_declared_grid_is_refused_before_allocation(rows: int, cols: int) -> None:
    data = hwp5([table_paragraph([["a"]], grid=(rows, cols))])
    assert len(data) < 8192
    err = _limit(data, "grid.hwp", "max_table_cells")
    assert err.value == max(rows, 1) * max(cols, 1) and err.maximum == 100_000
    lifted = HWPReader(max_table_cells=10**10).parse_bytes(data, "grid.hwp")
    assert (lifted.tables[0].n_rows, lifted.tables[0].n_cols) == (rows, cols)  # the attack


def test_cell_spans_growing_the_grid_are_refused() -> None:
    body = table_paragraph([["a"]])
    # the one cell's list header: column span and row span (offsets 12, 14 of the payload)
    at = body.index(struct.pack("<HHHH", 0, 0, 1, 1))
    grown = body[:at] + struct.pack("<HHHH", 0, 0, 60000, 60000) + body[at + 8 :]
    _limit(hwp5([grown]), "span.hwp", "max_table_cells")


def test_cell_count_is_bounded() -> None:
    data = hwp5([table_paragraph([[str(i) for i in range(11)]], grid=(1, 1))])
    with pytest.raises(HWPLimitError, match="cell count 11 exceeds max_table_cells=10"):
        HWPReader(max_table_cells=10).parse_bytes(data, "pile.hwp")


def test_deep_table_nesting_is_refused_while_building() -> None:
    assert len(HWPReader().parse_bytes(hwp5([nested_tables(32)]), "d32.hwp").tables) == 32
    err = _limit(hwp5([nested_tables(33)]), "d33.hwp", "max_table_depth")
    assert err.value == 33 and err.maximum == 32
    _limit(hwp5([nested_tables(3)]), "d3.hwp", "max_table_depth", max_table_depth=2)
    # far deeper than Python's recursion allows, limit lifted: a typed error, not a crash
    deep = hwp5([nested_tables(400)])
    _fails(deep, "d400.hwp", HWPFormatError, "nested", max_table_depth=10_000)


def test_rendered_text_limit() -> None:
    data = hwp5([paragraph("가" * 2000) for _ in range(10)])
    assert len(HWPReader().load_bytes(data, "t.hwp")[0].text) >= 20_000
    _limit(data, "t.hwp", "max_text_chars", max_text_chars=10_000)


def _one_char_paragraphs(n: int) -> bytes:
    """The attack of issue 37: a valid section of ``n`` one-character paragraphs (random
    syllables, so that it compresses no better than text: 2.4 M of them are a 4.9 MB file)."""
    rng = random.Random(0)
    return b"".join(paragraph(chr(0xAC00 + rng.randrange(11172))) for _ in range(n))


def test_text_limit_is_charged_while_the_records_are_read() -> None:
    """The builder charges each paragraph as it builds it (1 character + the walker's 8) and
    stops at the paragraph that crosses ``max_text_chars``: the records read by then (a
    counter over the batches handed out) are those of limit/9 paragraphs, plus the one batch
    in hand, not the stream's 2 x 60,000."""
    stream = _one_char_paragraphs(60_000)
    limits = HWPReader(max_text_chars=9_000).limits()
    read = 0

    def batches() -> Iterator[Records]:
        nonlocal read
        for rec in iter_records(stream, "a.hwp", "BodyText/Section0", 5_000_000, True, 512):
            read += len(rec.tags)
            yield rec

    builder = SectionBuilder(batches(), "a.hwp", "BodyText/Section0", limits, lambda _: None)
    with pytest.raises(HWPLimitError, match="max_text_chars=9000") as exc:
        builder.build()
    assert exc.value.value == 9_009  # 1001 paragraphs x 9
    assert read <= 2 * 1001 + 512 + 2


def test_a_text_limit_refusal_costs_little_memory() -> None:
    """The whole reader on a 200,000-paragraph file with max_text_chars=90,000: the refusal
    holds the inflated stream and a batch of records (traced peak under 2.5x the stream);
    building the section first took ~10x."""
    section = _one_char_paragraphs(200_000)
    data = hwp5([section])
    tracemalloc.start()
    try:
        with pytest.raises(HWPLimitError, match="max_text_chars"):
            HWPReader(max_text_chars=90_000).load_bytes(data, "a.hwp")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * len(section)


def test_the_builders_text_charge_is_a_lower_bound_of_the_walkers() -> None:
    """The builder never refuses what the walker accepts: per section, what it charged is at
    most what the walker charges, on paragraphs, white space, cells of many lines, notes
    and headers in cells, captions and fields (the corpus check is in test_hwp_twins)."""
    cell_lines = b"".join(paragraph(t, 2) for t in ("가", " ", "나 다", "라"))
    body = (
        paragraph("  앞  ") + paragraph("   ") + paragraph("\t")
        + table_paragraph([[cell_lines, "x", ""], ["", header_paragraph(["머리"], level=2), "y"]])
        + field_paragraph("여기에 입력", "여기에 입력") + header_paragraph(["꼬리"], b"toof")
        + table_paragraph([[table_paragraph([["속", " "]], 2)]])
    )
    for section in (body, table_paragraph([[cell_lines]])):
        bound, charged = _charges(section)
        assert 0 < bound <= charged


def _charges(section: bytes) -> tuple[int, int]:
    limits = HWPReader().limits()
    builder = SectionBuilder(
        iter_records(section, "a.hwp", "s", 5_000_000, True), "a.hwp", "s", limits,
        lambda _: None,
    )
    root = builder.build()
    state = FileState(file="a.hwp", limits=limits, outline={})
    SectionWalker(state, 0, "s").walk(root)
    return builder.text_bound, state.text_chars


def test_batches_build_the_tree_one_stream_builds() -> None:
    """Cutting a stream into batches of whole top-level subtrees changes nothing: the tree
    from batches of 1, 7 and 64 records equals the tree from the whole stream, also when a
    later record is shallower than the first ones (what was built from the deeper level is
    dropped, as the whole-stream builder never took it)."""
    from lxml import etree

    table = table_paragraph([["가", "나"], ["다", nested_tables(2)]])
    streams = [
        paragraph("앞") + table + paragraph("뒤") * 5,
        paragraph("깊은", 2) + table_paragraph([["숨"]], 2) + paragraph("얕은") + table,
    ]
    limits = HWPReader().limits()
    for stream in streams:
        trees = {
            etree.tostring(
                SectionBuilder(
                    iter_records(stream, "a", "s", 5_000_000, True, batch), "a", "s",
                    limits, lambda _: None,
                ).build()
            )
            for batch in (None, 1, 7, 64)
        }
        assert len(trees) == 1
    assert b"\xea\xb9\x8a" not in trees.pop()  # "깊" was dropped with its level


def test_decompression_limits() -> None:
    bomb = hwp5([b"\x00" * (3 << 20)])  # 3 MiB of zeros: ~1000x
    err = _limit(bomb, "bomb.hwp", "max_compression_ratio")
    assert "stream compression ratio" in str(err) and err.part == "BodyText/Section0"
    _limit(bomb, "b.hwp", "max_part_bytes", max_part_bytes=1 << 20, max_compression_ratio=1e9)
    _limit(bomb, "b.hwp", "max_total_bytes", max_total_bytes=1 << 20, max_compression_ratio=1e9)
    _limit(bomb, "b.hwp", "max_file_bytes", max_file_bytes=100)
    # many sections each under the 64 KiB ratio floor add up: the file ratio stops them
    small = paragraph("x") + b"\x00" * 60_000
    many = hwp5([small] * 300)
    err = _limit(many, "many.hwp", "max_compression_ratio")
    assert "file compression ratio" in str(err)
    assert err.value <= 200 + 2 * len(small) / len(many)  # stopped within a section of the cap


def test_decompression_is_bounded_before_the_stream_is_built() -> None:
    """The ratio check runs per 1 MiB chunk: a 64 MiB bomb is refused once its output
    passes max_compression_ratio x its compressed size, never built whole."""
    stream = deflate(b"\x00" * (64 << 20))
    bomb = hwp5(raw={"BodyText/Section0": stream})
    tracemalloc.start()
    try:
        with pytest.raises(HWPLimitError, match="max_compression_ratio"):
            HWPReader().load_bytes(bomb, "bomb.hwp")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * len(stream) + (3 << 20)  # the ratio's allowance + chunks
    assert peak < (64 << 20) // 4


def test_stored_streams_obey_the_size_limits() -> None:
    """Uncompressed documents (FileHeader bit 0 clear): the per-stream and total limits
    still apply (before: only compressed streams were counted)."""
    data = hwp5([paragraph("가" * 3000)] * 3, flags=0)  # three ~6 KB sections
    assert HWPReader().load_bytes(data, "raw.hwp")
    err = _limit(data, "raw.hwp", "max_part_bytes", max_part_bytes=5000)
    assert err.part == "BodyText/Section0"
    _limit(data, "raw.hwp", "max_total_bytes", max_total_bytes=12_000)


def test_cfb_header_counts_beyond_the_file_are_refused_before_olefile() -> None:
    """olefile walks the DIFAT ``num_difat_sectors`` times and reads ``num_mini_fat_sectors``
    sectors as the header says; counts larger than the file are refused first."""
    good = bytearray(hwp5())
    n_sectors = (len(good) - 512) // 512
    for offset, name in ((44, "FAT"), (64, "mini FAT"), (72, "DIFAT")):
        bad = bytearray(good)
        bad[offset : offset + 4] = struct.pack("<I", 0x7FFFFFFF)
        err = _fails(bytes(bad), "hdr.hwp", HWPFormatError, f"{name} sectors declared")
        assert f"the file has {n_sectors} sectors" in str(err)
    bad = bytearray(good)
    bad[30:32] = struct.pack("<H", 30)  # 1 GiB sectors
    _fails(bytes(bad), "shift.hwp", HWPFormatError, "sector shift 30")


def test_mini_stream_larger_than_the_file_is_refused() -> None:
    data = bytearray(hwp5())
    first_dir = struct.unpack_from("<I", data, 48)[0]
    root_size_at = 512 + first_dir * 512 + 120
    data[root_size_at : root_size_at + 4] = struct.pack("<I", 0x7FFFFFFF)
    _fails(bytes(data), "mini.hwp", HWPFormatError, "corrupt OLE2")


# ----------------------------------------------------------------------------- batches
def test_batch_keeps_the_good_documents(tmp_path: Path) -> None:
    good = hwp5([paragraph("좋은 문서"), table_paragraph([["칸"]])])
    files = {
        "a_good.hwp": good,
        "b_secret.hwp": hwp5(flags=FLAG_COMPRESSED | FLAG_PASSWORD),
        "c_dist.hwp": hwp5(flags=FLAG_COMPRESSED | FLAG_DISTRIBUTION),
        "d_hwp3.hwp": HWP3,
        "e_text.hwp": b"not ole",
        "f_zlib.hwp": hwp5(raw={"BodyText/Section0": b"\xff" * 100}),
        "g_grid.hwp": hwp5([table_paragraph([["a"]], grid=(65535, 65535))]),
        "h_record.hwp": hwp5([paragraph("a") + record(TAG_PARA_TEXT, 1, b"", size=99)]),
        "sub/i_good.hwp": good,
    }
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "j_dir.hwp").mkdir()
    (tmp_path / "other.hwpx").write_bytes(b"ignored: not *.hwp")
    reader = HWPReader()
    with pytest.warns(HWPXReadWarning) as record_:
        docs = reader.load_data(tmp_path)
    assert [d.metadata["file_name"] for d in docs] == ["a_good.hwp", "i_good.hwp"]
    assert all("좋은 문서" in d.text and d.metadata["table_count"] == 1 for d in docs)
    got = {Path(f.file).name: f.error_type for f in reader.failures}
    assert got == {
        "b_secret.hwp": "HWPEncryptedError",
        "c_dist.hwp": "HWPEncryptedError",
        "d_hwp3.hwp": "HWPFormatError",
        "e_text.hwp": "HWPFormatError",
        "f_zlib.hwp": "HWPFormatError",
        "g_grid.hwp": "HWPLimitError",
        "h_record.hwp": "HWPFormatError",
        "j_dir.hwp": "HWPXFormatError",
    }
    for f in reader.failures:
        assert Path(f.file).name in f.error  # each message names its file
    assert len([w for w in record_ if issubclass(w.category, HWPXReadWarning)]) == len(got)
    # a list: the same, failures reset per batch; a single bad file raises
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HWPXReadWarning)
        docs = reader.load_data([tmp_path / "a_good.hwp", tmp_path / "e_text.hwp"])
    assert len(docs) == 1 and [f.error_type for f in reader.failures] == ["HWPFormatError"]
    with pytest.raises(HWPFormatError):
        reader.load_data(tmp_path / "f_zlib.hwp")


def test_error_hierarchy() -> None:
    assert issubclass(HWPFormatError, HWPXFormatError)
    assert issubclass(HWPLimitError, HWPFormatError) and issubclass(HWPLimitError, HWPXLimitError)
    assert issubclass(HWPEncryptedError, HWPXEncryptedError)


# ----------------------------------------------------------------------------- summary
SUMMARY = "\x05HwpSummaryInformation"


def test_summary_title_is_read_from_the_property_set() -> None:
    data = hwp5(extra={SUMMARY: property_set({1: (2, struct.pack("<H", 1200)),
                                              2: (0x1F, lpwstr("규정 제목"))})})
    assert HWPReader().parse_bytes(data, "t.hwp").package_title == "규정 제목"
    ansi = "옛 제목".encode("cp949")
    data = hwp5(extra={SUMMARY: property_set({1: (2, struct.pack("<H", 949)),
                                              2: (0x1E, struct.pack("<I", len(ansi) + 1) + ansi + b"\x00")})})
    assert HWPReader().parse_bytes(data, "a.hwp").package_title == "옛 제목"


@pytest.mark.parametrize(
    "summary",
    [
        # a vector of an unknown type declaring 2**32-1 items: olefile's getproperties looped
        # over them (a hang, growing a list of None) - before, this file never finished
        property_set({2: (0x1000, struct.pack("<I", 0xFFFFFFFF))}),
        property_set({2: (0x1F, struct.pack("<I", 0xFFFFFFFF) + b"a\x00")}),  # length lies
        property_set({2: (0x1F, lpwstr("제목"))})[:60],  # cut inside the set
        b"\xfe\xff" + b"\xff" * 100,
        b"",
    ],
    ids=["vector_2e32", "long_string", "cut", "garbage", "empty"],
)
def test_a_broken_summary_never_stops_the_document(summary: bytes) -> None:
    data = hwp5([paragraph("본문")], extra={SUMMARY: summary})
    parsed = HWPReader().parse_bytes(data, "s.hwp")
    assert parsed.package_title in ("", "a", "제목")
    assert HWPReader().load_bytes(data, "s.hwp")[0].text == "본문"


def test_a_summary_stream_with_a_broken_chain_is_skipped() -> None:
    summary = property_set({2: (0x1F, lpwstr("제목"))})
    data = hwp5([paragraph("본문")], extra={SUMMARY: summary},
                declared_sizes={SUMMARY: 5000})  # more than its sectors hold
    parsed = HWPReader().parse_bytes(data, "s.hwp")
    assert parsed.package_title == "" and HWPReader().load_bytes(data, "s.hwp")[0].text == "본문"


def test_simple_directory_reader_skips_a_bad_hwp_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_index.core import SimpleDirectoryReader

    (tmp_path / "a_good.hwp").write_bytes(hwp5([paragraph("좋은 문서")]))
    (tmp_path / "b_dist.hwp").write_bytes(hwp5(flags=FLAG_COMPRESSED | FLAG_DISTRIBUTION))
    (tmp_path / "c_cut.hwp").write_bytes(hwp5([paragraph("잘린 문서")])[:1500])
    docs = SimpleDirectoryReader(str(tmp_path), file_extractor={".hwp": HWPReader()}).load_data()
    assert [d.text for d in docs] == ["좋은 문서"]
    out = capsys.readouterr().out  # SimpleDirectoryReader prints the skipped files' errors
    assert "b_dist.hwp: cannot be read" in out and "c_cut.hwp" in out
    with pytest.raises(Exception, match="Error loading file") as exc:
        SimpleDirectoryReader(
            str(tmp_path), file_extractor={".hwp": HWPReader()}, raise_on_error=True
        ).load_data()
    assert isinstance(exc.value.__cause__, HWPXError)
