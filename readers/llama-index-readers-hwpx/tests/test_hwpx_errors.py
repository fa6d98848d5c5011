"""Bad input: typed errors naming the file, limits, XXE / billion laughs, batch failures."""

from __future__ import annotations

import io
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.readers.hwpx import (
    HWPXEncryptedError,
    HWPXError,
    HWPXFormatError,
    HWPXReader,
    HWPXReadWarning,
)
from llama_index.readers.hwpx.writer import HWPXBuilder

Write = Callable[..., Path]
OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _package(**parts: bytes | str) -> bytes:
    """A zip with ``mimetype`` first and the given parts (``__`` in names stands for ``/``)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mimetype", "application/hwp+zip", compress_type=zipfile.ZIP_STORED)
        for name, data in parts.items():
            zf.writestr(name.replace("__", "/"), data)
    return buf.getvalue()


def _simple() -> HWPXBuilder:
    b = HWPXBuilder()
    b.add_section().paragraph("본문")
    return b


def test_error_hierarchy() -> None:
    assert issubclass(HWPXEncryptedError, HWPXError)
    assert issubclass(HWPXFormatError, HWPXError)
    assert issubclass(HWPXError, Exception)


def test_not_a_zip(tmp_path: Path, reader: HWPXReader) -> None:
    path = tmp_path / "plain.hwpx"
    path.write_text("그냥 텍스트", encoding="utf-8")
    with pytest.raises(HWPXFormatError, match="not a zip") as exc:
        reader.load_data(path)
    assert str(path) in str(exc.value) and exc.value.file == str(path)


def test_hwp5_bytes_go_to_the_hwp_reader(tmp_path: Path, reader: HWPXReader) -> None:
    from llama_index.readers.hwpx import HWPFormatError

    path = tmp_path / "old.hwpx"
    path.write_bytes(OLE2 + b"\x00" * 504)  # OLE2 magic, nothing valid behind it
    with pytest.warns(HWPXReadWarning, match="HWP 5"):
        with pytest.raises(HWPFormatError, match="OLE2") as exc:
            reader.load_data(path)
    assert isinstance(exc.value, HWPXFormatError) and str(path) in str(exc.value)


def test_truncated_zip(tmp_path: Path, reader: HWPXReader) -> None:
    data = _simple().to_bytes()
    path = tmp_path / "cut.hwpx"
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(HWPXFormatError, match="truncated or corrupt zip") as exc:
        reader.load_data(path)
    assert str(path) in str(exc.value)


def test_encrypted_manifest(write: Write, reader: HWPXReader) -> None:
    path = write(_simple(), name="secret.hwpx", encrypted=True)
    with pytest.raises(HWPXEncryptedError, match="encryption-data") as exc:
        reader.load_data(path)
    assert str(path) in str(exc.value)


def test_malformed_xml_names_part_and_line(reader: HWPXReader) -> None:
    good = zipfile.ZipFile(io.BytesIO(_simple().to_bytes()))
    parts = {n.replace("/", "__"): good.read(n) for n in good.namelist() if n != "mimetype"}
    parts["Contents__section0.xml"] = b'<?xml version="1.0"?>\n<hs:sec xmlns:hs="x">\n<p>\n</hs:sec>'
    with pytest.raises(HWPXFormatError) as exc:
        reader.load_bytes(_package(**parts), "broken.hwpx")
    msg = str(exc.value)
    assert "broken.hwpx" in msg and "Contents/section0.xml" in msg and "line 4" in msg
    assert exc.value.part == "Contents/section0.xml"


def test_wrong_mimetype(reader: HWPXReader) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        zf.writestr("Contents/section0.xml", "<a/>")
    with pytest.raises(HWPXFormatError, match="not an HWPX package"):
        reader.load_bytes(buf.getvalue(), "odt.hwpx")


def test_no_sections(reader: HWPXReader) -> None:
    with pytest.raises(HWPXFormatError, match="no Contents/section"):
        reader.load_bytes(_package(**{"Contents__header.xml": "<a/>"}), "empty.hwpx")


def test_spine_part_missing(reader: HWPXReader) -> None:
    good = zipfile.ZipFile(io.BytesIO(_simple().to_bytes()))
    parts = {
        n.replace("/", "__"): good.read(n)
        for n in good.namelist()
        if n not in ("mimetype", "Contents/section0.xml")
    }
    parts["Contents__section7.xml"] = good.read("Contents/section0.xml")
    with pytest.raises(HWPXFormatError, match="spine lists Contents/section0.xml"):
        reader.load_bytes(_package(**parts), "gap.hwpx")


XXE = (
    b'<?xml version="1.0"?>\n<!DOCTYPE sec [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
    b'<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
    b'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph"><hp:p><hp:run><hp:t>&x;</hp:t>'
    b"</hp:run></hp:p></hs:sec>"
)
LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'.encode()
        for i in range(1, 10)
    )
    + b']>\n<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
    b'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph"><hp:p><hp:run><hp:t>&lol9;'
    b"</hp:t></hp:run></hp:p></hs:sec>"
)


@pytest.mark.parametrize("payload", [XXE, LAUGHS], ids=["xxe", "billion_laughs"])
def test_doctype_and_entities_are_refused(payload: bytes, reader: HWPXReader) -> None:
    data = _package(**{"Contents__section0.xml": payload})
    with pytest.raises(HWPXFormatError, match="DOCTYPE") as exc:
        reader.load_bytes(data, "evil.hwpx")
    assert "evil.hwpx" in str(exc.value)
    assert "root:" not in str(exc.value)


def test_doctype_after_a_long_prefix_is_still_refused(reader: HWPXReader) -> None:
    pad = b"<!--" + b"x" * 5000 + b"-->"
    payload = XXE.replace(b"<!DOCTYPE", pad + b"<!DOCTYPE", 1)
    with pytest.raises(HWPXFormatError, match="DOCTYPE"):
        reader.load_bytes(_package(**{"Contents__section0.xml": payload}), "evil2.hwpx")


def test_zip_bomb_ratio_and_sizes() -> None:
    zeros = b"<a>" + b" " * (3 << 20) + b"</a>"  # ~3 MiB compressing > 1000x
    data = _package(**{"Contents__section0.xml": zeros})
    with pytest.raises(HWPXFormatError, match="compression ratio"):
        HWPXReader().load_bytes(data, "bomb.hwpx")
    with pytest.raises(HWPXFormatError, match="max_part_bytes=1048576"):
        HWPXReader(max_part_bytes=1 << 20, max_compression_ratio=1e9).load_bytes(data, "b.hwpx")
    with pytest.raises(HWPXFormatError, match="max_total_bytes"):
        HWPXReader(max_total_bytes=1 << 20, max_compression_ratio=1e9).load_bytes(data, "b.hwpx")
    with pytest.raises(HWPXFormatError, match="max_file_bytes"):
        HWPXReader(max_file_bytes=100).load_bytes(data, "b.hwpx")


def test_lying_declared_size_is_an_error() -> None:
    data = bytearray(_package(**{"Contents__section0.xml": b"<a>" + b" " * 5000 + b"</a>"}))
    # shrink the declared uncompressed size in the central directory to 10 bytes
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 24 : cd + 28] = (10).to_bytes(4, "little")
    with pytest.raises(HWPXFormatError):
        HWPXReader().load_bytes(bytes(data), "liar.hwpx")


def test_huge_table_grid_is_refused(reader: HWPXReader) -> None:
    sec = (
        '<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
        'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph"><hp:p><hp:run>'
        '<hp:tbl rowCnt="1" colCnt="1"><hp:tr><hp:tc><hp:subList/>'
        '<hp:cellAddr rowAddr="0" colAddr="0"/><hp:cellSpan rowSpan="100000" colSpan="100000"/>'
        "</hp:tc></hp:tr></hp:tbl></hp:run></hp:p></hs:sec>"
    )
    with pytest.raises(HWPXFormatError, match="max_table_cells"):
        reader.load_bytes(_package(**{"Contents__section0.xml": sec}), "grid.hwpx")


def test_non_integer_address_is_a_format_error(reader: HWPXReader) -> None:
    sec = (
        '<hs:sec xmlns:hs="http://www.hancom.co.kr/hwpml/2011/section" '
        'xmlns:hp="http://www.hancom.co.kr/hwpml/2011/paragraph"><hp:p><hp:run>'
        '<hp:tbl rowCnt="1" colCnt="1"><hp:tr><hp:tc><hp:subList/>'
        '<hp:cellAddr rowAddr="zero" colAddr="0"/></hp:tc></hp:tr></hp:tbl></hp:run></hp:p>'
        "</hs:sec>"
    )
    with pytest.raises(HWPXFormatError, match="rowAddr='zero'") as exc:
        reader.load_bytes(_package(**{"Contents__section0.xml": sec}), "addr.hwpx")
    assert "addr.hwpx" in str(exc.value)


def test_batch_collects_failures_and_keeps_good_documents(tmp_path: Path) -> None:
    good = _simple().to_bytes()
    (tmp_path / "a_good.hwpx").write_bytes(good)
    (tmp_path / "b_bad.hwpx").write_bytes(b"not a zip")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "c_good.hwpx").write_bytes(good)
    (sub / "d_secret.hwpx").write_bytes(_simple().to_bytes(encrypted=True))
    (tmp_path / "ignored.txt").write_text("x")
    reader = HWPXReader()
    with pytest.warns(HWPXReadWarning) as record:
        docs = reader.load_data(tmp_path)
    assert [d.metadata["file_name"] for d in docs] == ["a_good.hwpx", "c_good.hwpx"]
    assert [(Path(f.file).name, f.error_type) for f in reader.failures] == [
        ("b_bad.hwpx", "HWPXFormatError"),
        ("d_secret.hwpx", "HWPXEncryptedError"),
    ]
    assert len(record) == 2 and "b_bad.hwpx" in str(record[0].message)
    # a list works the same way, and failures are reset per batch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HWPXReadWarning)
        docs = reader.load_data([tmp_path / "a_good.hwpx", tmp_path / "missing.hwpx"])
    assert len(docs) == 1
    assert [f.error_type for f in reader.failures] == ["FileNotFoundError"]


def test_single_bad_file_raises(tmp_path: Path, reader: HWPXReader) -> None:
    path = tmp_path / "bad.hwpx"
    path.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(HWPXFormatError):
        reader.load_data(path)


def test_images_are_never_decompressed_so_cannot_trip_limits(reader: HWPXReader) -> None:
    good = zipfile.ZipFile(io.BytesIO(_simple().to_bytes()))
    parts = {n.replace("/", "__"): good.read(n) for n in good.namelist() if n != "mimetype"}
    parts["BinData__image1.bmp"] = b"\x00" * (4 << 20)  # ratio ~1000, 4 MiB
    data = _package(**parts)
    assert [d.text for d in reader.load_bytes(data, "img.hwpx")] == ["본문"]
    small = HWPXReader(max_part_bytes=1 << 20, max_total_bytes=2 << 20)
    assert [d.text for d in small.load_bytes(data, "img.hwpx")] == ["본문"]


def test_zip_level_encryption_flag(reader: HWPXReader) -> None:
    data = bytearray(_simple().to_bytes())
    name = b"Contents/section0.xml"
    for sig in (b"PK\x01\x02", b"PK\x03\x04"):  # central directory and local header
        start = 0
        while (i := data.find(sig, start)) >= 0:
            name_at = i + (46 if sig == b"PK\x01\x02" else 30)
            if data[name_at : name_at + len(name)] == name:
                flag_at = i + (8 if sig == b"PK\x01\x02" else 6)
                data[flag_at] |= 0x1
            start = i + 4
    with pytest.raises(HWPXEncryptedError, match="encrypted") as exc:
        reader.load_bytes(bytes(data), "zipcrypt.hwpx")
    assert exc.value.part == "Contents/section0.xml"
