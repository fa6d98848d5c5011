"""Safe opening of an HWPX (OWPML) zip package.

Order of checks: size of the raw file; OLE2/CFB signature (binary HWP 5); zip structure;
per-entry encryption flag; per-part and total uncompressed size and compression ratio (checked
on the declared sizes *and* while decompressing, since declared sizes can lie; the ratio of
every part above ``RATIO_FLOOR_BYTES``, and of everything read from the package against the
file's size, so many small parts cannot add up to a bomb); mimetype;
``META-INF/manifest.xml`` ``encryption-data``; section order from the ``Contents/content.hpf``
spine with a fallback to the number in ``Contents/section<N>.xml``.

XML is parsed with ``resolve_entities=False, no_network=True, load_dtd=False`` and any DOCTYPE
is refused, so external entities (XXE) and entity expansion (billion laughs) never happen.
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from io import BytesIO

from llama_index.readers.hwpx._errors import (
    HWPXEncryptedError,
    HWPXError,
    HWPXFormatError,
    HWPXLimitError,
)
from lxml import etree

OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_LINESEG = re.compile(rb"<hp:linesegarray>(?:<hp:lineseg\s[^<>\n]*/>)*</hp:linesegarray>")
# Cell markup exactly as Hangul writes it, slimmed before parsing (see :meth:`Package.xml`):
# the start tags of a cell's ``hp:tc``, its ``hp:subList`` and its first ``hp:p`` lose their
# attribute lists (none is read: a paragraph's ``paraPrIDRef`` only counts in the body, never in
# a cell), and its trailing ``hp:cellSz`` + ``hp:cellMargin`` (empty, last in the ``hp:tc``) go.
# Attribute values are restricted to plain ASCII word characters, so what is removed is always
# well-formed, and the parse sees the same elements, text and tails.
_CELL_START = re.compile(
    rb'<hp:tc name="[\w.-]*" header="\d" hasMargin="\d" protect="\d" editable="\d" '
    rb'dirty="\d" borderFillIDRef="\d+"><hp:subList id="[\w.-]*" textDirection="\w+" '
    rb'lineWrap="\w+" vertAlign="\w+" linkListIDRef="\d+" linkListNextIDRef="\d+" '
    rb'textWidth="\d+" textHeight="\d+" hasTextRef="\d" hasNumRef="\d">'
    rb'<hp:p id="\d+" paraPrIDRef="\d+" styleIDRef="\d+" pageBreak="\d" columnBreak="\d" '
    rb'merged="\d">'
)
_CELL_START_SLIM = b"<hp:tc><hp:subList><hp:p>"
_CELL_LAYOUT = re.compile(
    rb'<hp:cellSz width="\d+" height="\d+"/>'
    rb'<hp:cellMargin left="\d+" right="\d+" top="\d+" bottom="\d+"/>(?=</hp:tc>)'
)
SECTION_RE = re.compile(r"^Contents/section(\d+)\.xml$", re.IGNORECASE)
HWPX_MIMETYPE_PREFIX = "application/hwp"
_CHUNK = 1 << 20
# Compression-ratio checks apply to every part (and to the package total) once its
# uncompressed size passes this floor: a few-KiB XML part can legitimately compress > 100x
# (its zip entry overhead dominates), and a floor this small bounds what a hostile file of
# N bytes can expand to at max(N * max_compression_ratio, 64 KiB) per part and in total.
RATIO_FLOOR_BYTES = 64 << 10
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    struct.error,
    ValueError,
    OSError,
    UnicodeDecodeError,
    KeyError,
    IndexError,
    OverflowError,
)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one package (see :class:`HWPXReader` fields for the defaults)."""

    max_file_bytes: int
    max_part_bytes: int
    max_total_bytes: int
    max_compression_ratio: float
    max_table_depth: int
    max_table_cells: int
    max_text_chars: int = 5_000_000


def make_parser() -> etree.XMLParser:
    """An lxml parser that never resolves entities, loads DTDs or touches the network."""
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        collect_ids=False,
        remove_comments=True,
        remove_pis=True,
    )


def parse_xml(data: bytes, file: str, part: str) -> etree._Element:
    """Parse one part; malformed XML or a DOCTYPE raise :class:`HWPXFormatError`.

    The message names the file, the part and the line, e.g.
    ``a.hwpx [Contents/section0.xml]: malformed XML at line 3: ...``.
    """
    head = data[:4096]
    if b"<!DOCTYPE" in head or b"<!doctype" in head or b"<!ENTITY" in head:
        raise HWPXFormatError(
            file,
            "DOCTYPE / entity declarations are not allowed in HWPX parts (refused to guard "
            "against XXE and entity expansion)",
            part=part,
        )
    try:
        root = etree.fromstring(data, make_parser())
    except etree.XMLSyntaxError as exc:
        line = exc.lineno if exc.lineno is not None else "?"
        msg = exc.msg or str(exc)
        raise HWPXFormatError(file, f"malformed XML at line {line}: {msg}", part=part) from exc
    except (ValueError, MemoryError) as exc:
        raise HWPXFormatError(file, f"unparseable XML: {exc}", part=part) from exc
    if root is None:
        raise HWPXFormatError(file, "empty XML part", part=part)
    if root.getroottree().docinfo.doctype:
        raise HWPXFormatError(file, "DOCTYPE is not allowed in HWPX parts", part=part)
    return root


def local(tag: object) -> str:
    """Local name of an lxml tag (``{ns}name`` -> ``name``); "" for comments/entities."""
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2]


@dataclass
class Package:
    """An opened package: normalised entry names mapped to zip entries."""

    file: str
    zf: zipfile.ZipFile
    limits: Limits
    entries: dict[str, zipfile.ZipInfo] = field(default_factory=dict)
    total_read: int = 0
    file_bytes: int = 0
    warnings: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return name in self.entries

    def read(self, name: str) -> bytes:
        """Decompress one part, enforcing the per-part, total and ratio limits while reading."""
        info = self.entries[name]
        cap = self.limits.max_part_bytes
        # declared sizes first (cheap), then the real sizes while decompressing
        if info.flag_bits & 0x1:
            raise HWPXEncryptedError(
                self.file, "zip entry is encrypted; save an unprotected copy in Hangul", part=name
            )
        if info.file_size > cap:
            raise HWPXLimitError(
                self.file,
                f"part declares {info.file_size} bytes, above max_part_bytes={cap}",
                limit="max_part_bytes", value=info.file_size, maximum=cap, part=name,
            )
        self._check_ratio(name, info.file_size, info.compress_size, "declares")
        chunks: list[bytes] = []
        size = 0
        try:
            with self.zf.open(info) as fh:
                while True:
                    chunk = fh.read(_CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > cap:
                        raise HWPXLimitError(
                            self.file,
                            f"part exceeds max_part_bytes={cap} when decompressed (zip bomb?)",
                            limit="max_part_bytes", value=size, maximum=cap, part=name,
                        )
                    total = self.limits.max_total_bytes
                    if self.total_read + size > total:
                        raise HWPXLimitError(
                            self.file,
                            f"package exceeds max_total_bytes={total} when decompressed",
                            limit="max_total_bytes", value=self.total_read + size,
                            maximum=total, part=name,
                        )
                    # ratio while decompressing, so a lying declared size stops early
                    self._check_ratio(name, size, info.compress_size, "expands to")
                    chunks.append(chunk)
        except HWPXError:
            raise
        except _ZIP_ERRORS as exc:
            raise HWPXFormatError(
                self.file, f"corrupt zip entry ({type(exc).__name__}: {exc})", part=name
            ) from exc
        self.total_read += size
        self._check_ratio(name, self.total_read, self.file_bytes, "package total")
        return b"".join(chunks)

    def _check_ratio(self, name: str, size: int, compressed: int, what: str) -> None:
        """Refuse ``size`` uncompressed bytes from ``compressed`` bytes above the ratio limit.

        Applies to every part and to the package total (everything read so far against the
        file size), once ``size`` passes :data:`RATIO_FLOOR_BYTES`."""
        limit = self.limits.max_compression_ratio
        if size <= RATIO_FLOOR_BYTES or size <= limit * max(compressed, 1):
            return
        ratio = size / max(compressed, 1)
        scope = "package" if what == "package total" else "part"
        raise HWPXLimitError(
            self.file,
            f"{scope} compression ratio {ratio:.1f} ({what} {size} bytes from {compressed}) "
            f"exceeds max_compression_ratio={limit:g} (zip bomb?)",
            limit="max_compression_ratio", value=ratio, maximum=limit, part=name,
        )

    def xml(self, name: str, *, strip_layout: bool = False) -> etree._Element:
        """Parse a part. ``strip_layout`` drops Hangul's line-layout caches
        (``<hp:linesegarray>`` of self-closing ``<hp:lineseg .../>``, no newlines inside) before
        parsing: they hold no text and are a large share of every section. It also slims
        Hangul's cell markup (``_CELL_START``, ``_CELL_LAYOUT``) when that parses; the tree
        walked is the same but for attributes nobody reads."""
        data = self.read(name)
        if not strip_layout:
            return parse_xml(data, self.file, name)
        data = _LINESEG.sub(b"", data)
        # Fast path: parse the part with its cell markup slimmed (a large share of libxml2's
        # work in table-heavy sections is attribute parsing). If that parse fails, the part is
        # parsed again as is, so errors report exactly the same message, line and column.
        # Parts with CDATA sections (whose text could spell such markup) are never slimmed.
        if b"<![CDATA[" in data:
            return parse_xml(data, self.file, name)
        slim = _CELL_LAYOUT.sub(b"", _CELL_START.sub(_CELL_START_SLIM, data))
        if len(slim) == len(data):
            return parse_xml(data, self.file, name)
        try:
            root = parse_xml(slim, self.file, name)
        except HWPXFormatError:
            return parse_xml(data, self.file, name)
        if local(root.tag) == "tc":  # a cell as the part's root: its paragraphs are the body
            return parse_xml(data, self.file, name)
        return root


def open_package(data: bytes, file: str, limits: Limits) -> Package:
    """Validate the container and index its entries (names with ``\\`` normalised to ``/``).

    Size, ratio and encryption limits are enforced per part when it is read
    (:meth:`Package.read`), so embedded images (``BinData/``), which are never decompressed,
    cannot cause a false alarm.
    """
    if len(data) > limits.max_file_bytes:
        raise HWPXLimitError(
            file, f"file is {len(data)} bytes, above max_file_bytes={limits.max_file_bytes}",
            limit="max_file_bytes", value=len(data), maximum=limits.max_file_bytes,
        )
    if data[:8] == OLE2_MAGIC:
        raise HWPXFormatError(
            file,
            "this is a binary HWP 5 (OLE2/CFB) document with an .hwpx name, not HWPX; "
            "read it with HWPReader (HWPXReader.parse_bytes does so by itself)",
        )
    if data[:4] not in ZIP_MAGICS:
        raise HWPXFormatError(file, "not a zip file, so not an HWPX package")
    try:
        zf = zipfile.ZipFile(BytesIO(data))
        infos = zf.infolist()
    except _ZIP_ERRORS as exc:
        raise HWPXFormatError(
            file,
            f"truncated or corrupt zip ({type(exc).__name__}: {exc}); the central directory "
            "could not be read",
        ) from exc
    pkg = Package(file=file, zf=zf, limits=limits, file_bytes=len(data))
    for info in infos:
        name = info.filename.replace("\\", "/").lstrip("/")
        if "\\" in info.filename and "backslash entry names" not in pkg.warnings:
            pkg.warnings.append("backslash entry names")
        pkg.entries.setdefault(name, info)
    return pkg


def check_mimetype_and_manifest(pkg: Package) -> None:
    """Refuse non-HWPX mimetypes and encrypted (password / distribution) documents."""
    if pkg.has("mimetype"):
        mt = pkg.read("mimetype").decode("utf-8", "replace").strip()
        if not mt.lower().startswith(HWPX_MIMETYPE_PREFIX):
            raise HWPXFormatError(
                pkg.file,
                f"mimetype is {mt[:60]!r}, not 'application/hwp+zip': not an HWPX package",
                part="mimetype",
            )
    name = "META-INF/manifest.xml"
    if pkg.has(name):
        raw = pkg.read(name)
        if b"encryption-data" in raw:
            raise HWPXEncryptedError(
                pkg.file,
                "the manifest declares encryption-data: this is a password-protected or "
                "distribution (배포용) document; save an unprotected copy in Hangul",
                part=name,
            )


def section_order(pkg: Package) -> tuple[list[str], str]:
    """Section part names in reading order, and the ``opf:title`` ("" if none).

    Order comes from the ``content.hpf`` spine (itemrefs pointing at manifest items whose href
    is a ``Contents/section<N>.xml`` part). Without a usable spine the parts are ordered by N.
    A spine entry whose part is missing raises :class:`HWPXFormatError`.
    """
    by_number = sorted(
        (int(m.group(1)), n) for n in pkg.entries if (m := SECTION_RE.match(n)) is not None
    )
    fallback = [n for _, n in by_number]
    title = ""
    hpf = "Contents/content.hpf"
    order: list[str] = []
    if pkg.has(hpf):
        root = pkg.xml(hpf)
        hrefs: dict[str, str] = {}
        for el in root.iter():
            name = local(el.tag)
            if name == "title" and not title:
                title = "".join(el.itertext()).strip()
            elif name == "item":
                iid, href = el.get("id"), el.get("href")
                if iid is not None and href is not None:
                    hrefs[iid] = href.replace("\\", "/").lstrip("/")
            elif name == "itemref":
                ref = el.get("idref")
                href = hrefs.get(ref or "")
                if href is not None and SECTION_RE.match(href) and href not in order:
                    order.append(href)
        for href in order:
            if not pkg.has(href):
                raise HWPXFormatError(
                    pkg.file, f"the spine lists {href} but the package has no such part", part=hpf
                )
        # sections present but absent from the spine are kept (after the spine), not dropped
        order += [n for n in fallback if n not in order]
    if not order:
        order = fallback
    if not order:
        raise HWPXFormatError(pkg.file, "no Contents/section<N>.xml part: not an HWPX document")
    return order, title


_HEADER_TOKENS = re.compile(
    rb"<hh:paraPr\s([^<>]*)>|<hh:heading\s([^<>]*?)/?>|</hh:paraPr>"
)
_ID_ATTR = re.compile(rb'(?:^|\s)id\s*=\s*"([^"]*)"')
_ATTR = re.compile(rb'([A-Za-z_:][-.\w:]*)\s*=\s*"([^"]*)"')


def _outline_from_tokens(data: bytes) -> dict[str, int] | None:
    """Fast path: one linear regex pass over header.xml written with the usual ``hh:`` prefix.

    Returns None when the prefix is not ``hh:`` (then the caller parses the XML).
    """
    levels: dict[str, int] = {}
    current: str | None = None
    seen = False
    # Only the span from the first ``<hh:paraPr`` to the last paraPr/heading start tag can
    # change the result: tokens before it find no current paraPr, and after it only
    # ``</hh:paraPr>`` can match. No token contains ``<`` after its first byte, so none
    # crosses the cut; ``find``/``rfind`` are far cheaper than regex-scanning fonts and fills.
    start = data.find(b"<hh:paraPr")
    if start < 0:
        start = len(data)
    last = max(data.rfind(b"<hh:paraPr"), data.rfind(b"<hh:heading"))
    end = data.find(b">", last) + 1 if last >= 0 else 0
    if end <= 0:
        end = len(data)
    for m in _HEADER_TOKENS.finditer(data, start, max(start, end)):
        para_attrs, heading_attrs = m.group(1), m.group(2)
        if para_attrs is not None:
            seen = True
            pid = _ID_ATTR.search(para_attrs)
            current = pid.group(1).decode("ascii", "replace") if pid is not None else None
        elif heading_attrs is not None:
            if current is not None and current not in levels:
                if b"OUTLINE" in heading_attrs:
                    attrs = dict(_ATTR.findall(heading_attrs))
                    try:
                        lvl = int(attrs.get(b"level", b"0"))
                    except ValueError:
                        lvl = 0
                    is_outline = attrs.get(b"type") == b"OUTLINE"
                    levels[current] = min(max(lvl, 0), 9) + 1 if is_outline else 0
                else:
                    levels[current] = 0
        else:
            current = None
    if not seen and b"paraPr" in data:
        return None
    return {k: v for k, v in levels.items() if v}


def outline_levels(pkg: Package) -> dict[str, int]:
    """``paraPr`` id -> outline level (1-based) for ``<hh:heading type="OUTLINE">``.

    The first ``hh:heading`` of a ``paraPr`` counts (in a ``switch`` the ``case`` comes before
    the ``default``, and the case is what Hangul 2016+ uses). Missing ``Contents/header.xml``
    (seen in some tool-written files) yields {}.
    """
    name = "Contents/header.xml"
    if not pkg.has(name):
        return {}
    data = pkg.read(name)
    fast = _outline_from_tokens(data)
    if fast is not None:
        return fast
    root = parse_xml(data, pkg.file, name)
    levels: dict[str, int] = {}
    for el in root.iter("{*}paraPr"):
        pid = el.get("id")
        if pid is None:
            continue
        for child in el.iter("{*}heading"):
            if child.get("type") == "OUTLINE":
                try:
                    lvl = int(child.get("level", "0"))
                except ValueError:
                    lvl = 0
                levels[pid] = min(max(lvl, 0), 9) + 1
            break
    return levels
