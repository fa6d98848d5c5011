"""HWPXReader: Hancom HWPX (OWPML) documents -> LlamaIndex Documents and cell-exact tables.

Example::

    from llama_index.readers.hwpx import HWPXReader, HWPXNodeParser

    reader = HWPXReader()
    docs = reader.load_data("standard.hwpx")             # one Document per file
    tables = reader.load_tables("standard.hwpx")         # list[HWPXTable], pre-order
    nodes = HWPXNodeParser().get_nodes_from_documents(docs)

    docs = reader.load_data("corpus_dir/")               # batch: bad files are skipped,
    reader.failures                                      # listed here, and warned about
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, ClassVar

from llama_index.core.readers.base import BasePydanticReader
from llama_index.core.schema import Document
from llama_index.readers.hwpx._errors import HWPXError, HWPXFormatError, HWPXLimitError
from llama_index.readers.hwpx._headings import classify
from llama_index.readers.hwpx._model import HWPXTable
from llama_index.readers.hwpx._package import (
    OLE2_MAGIC,
    ZIP_MAGICS,
    Limits,
    check_mimetype_and_manifest,
    open_package,
    outline_levels,
    section_order,
)
from llama_index.readers.hwpx._parse import Block, FileState, SectionWalker
from llama_index.readers.hwpx._render import STRUCTURE_KEY, blocks_text, structure_json
from pydantic import Field, PrivateAttr

__all__ = ["HWPXReader", "HWPXFailure", "HWPXReadWarning", "ParsedHWPX", "STRUCTURE_KEY"]

_MIB = 1 << 20
_NOTE_MARK = re.compile(r"\[\^e?\d+\]")
# Metadata hidden from embedding text: all of ours, so what gets embedded / BM25-indexed is
# the text itself (the paper's "## {title}\n\n{body}" form once chunked). The LLM still sees
# file name, title and heading path for citations; never the bulky structure.
EMBED_EXCLUDED = [
    STRUCTURE_KEY,
    "file_name",
    "file_path",
    "section",
    "heading_path",
    "title",
    "table_count",
]
LLM_EXCLUDED = [STRUCTURE_KEY, "file_path", "section", "table_count"]


class HWPXReadWarning(UserWarning):
    """Emitted once per file skipped during a batch load."""


@dataclass(frozen=True)
class HWPXFailure:
    """A file a batch load skipped, and why."""

    file: str
    error: str
    error_type: str


#: format name -> the reader class whose ``native_format`` it is (filled as classes are defined)
_READERS: dict[str, type[HWPXReader]] = {}


@dataclass
class ParsedHWPX:
    """Everything read from one file. ``sections[i]`` are section i's blocks (spine order)."""

    file: str
    title: str
    package_title: str
    sections: list[list[Block]]
    tables: list[HWPXTable]
    warnings: list[str]


class HWPXReader(BasePydanticReader):
    """Read HWPX files: markdown text with headings and tables, plus the cell-level structure.

    Text: headings as ``#`` levels (outline styles and typed glyphs, see ``_headings``),
    paragraphs, footnotes ``[^N]: ...`` after their paragraph, text boxes, captions, tables as
    markdown (HTML where cells are merged); nested tables follow their parent table.

    Metadata per Document: ``file_name``, ``file_path``, ``section`` (0-based index, None for a
    whole-file Document), ``heading_path`` (`` > ``-joined headings in effect where the
    Document starts), ``title``, ``table_count`` and ``hwpx_structure`` (JSON of blocks and
    cells for :class:`HWPXNodeParser`; excluded from embedding and LLM text).

    Args (pydantic fields; defaults in brackets): see each ``Field`` description.
    """

    is_remote: bool = False
    #: what a directory load collects; a directory with this suffix is a (bad) file, not a batch
    file_suffix: ClassVar[str] = ".hwpx"
    #: the :func:`sniff_format` name of the format this class parses itself
    native_format: ClassVar[str] = "hwpx"
    split_sections: bool = Field(
        default=False, description="One Document per section instead of one per file."
    )
    glyph_headings: bool = Field(
        default=True,
        description="Detect headings from typed glyphs (Ⅰ. 1. 가. □ ○ - 제1장 ...).",
    )
    boxed_titles: bool = Field(
        default=True, description="Treat a short 1x1 top-level table as a heading."
    )
    heading_max_chars: int = Field(
        default=60, ge=1, description="Longest paragraph that may be a glyph heading."
    )
    include_headers_footers: bool = Field(
        default=True,
        description="Emit page header/footer text after its anchoring paragraph, as other "
        "readers of both formats do (False leaves it out; their tables are always in "
        "load_tables).",
    )
    max_file_bytes: int = Field(default=256 * _MIB, gt=0, description="Largest input file.")
    max_part_bytes: int = Field(
        default=128 * _MIB, gt=0, description="Largest decompressed package part."
    )
    max_total_bytes: int = Field(
        default=512 * _MIB, gt=0, description="Largest total decompressed size of a package."
    )
    max_compression_ratio: float = Field(
        default=200.0,
        gt=1.0,
        description="Largest uncompressed/compressed ratio of any part above 64 KiB, and of "
        "all parts read against the file size (zip bombs).",
    )
    max_table_depth: int = Field(
        default=32, ge=1, description="Deepest table nesting (1 = no nested tables allowed)."
    )
    max_table_cells: int = Field(
        default=100_000,
        gt=0,
        description="Largest grid of one table (declared rowCnt x colCnt, each at least 1, "
        "and as cells grow it) and most hp:tc cells in one table.",
    )
    max_text_chars: int = Field(
        default=5_000_000,
        gt=0,
        description="Most characters of rendered text per file (paragraphs plus an upper "
        "bound of each table's markdown/HTML), checked while parsing, before rendering.",
    )
    # a Python function, not the builtin `list`: pydantic inspects the factory's signature on
    # every construction, and inspect.signature(list) parses its text signature (~1 ms)
    _failures: list[HWPXFailure] = PrivateAttr(default_factory=lambda: [])

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _READERS.setdefault(cls.native_format, cls)  # the first class of a format reads it

    @classmethod
    def class_name(cls) -> str:
        return "HWPXReader"

    # ------------------------------------------------------------------ public API
    @property
    def failures(self) -> list[HWPXFailure]:
        """Files skipped by the last batch (directory / list) load, with the error."""
        return list(self._failures)

    def limits(self) -> Limits:
        return Limits(
            max_file_bytes=self.max_file_bytes,
            max_part_bytes=self.max_part_bytes,
            max_total_bytes=self.max_total_bytes,
            max_compression_ratio=self.max_compression_ratio,
            max_table_depth=self.max_table_depth,
            max_table_cells=self.max_table_cells,
            max_text_chars=self.max_text_chars,
        )

    def parse_bytes(self, data: bytes, file: str = "<bytes>") -> ParsedHWPX:
        """Parse a document held in memory; ``file`` names it in errors.

        The format is decided by the bytes, not the name: HWP 5 (OLE2), HWPX (zip) or HWPML
        content given to another format's reader is read by the matching reader (same
        fields) with one :class:`HWPXReadWarning`."""
        kind = sniff_format(data)
        if kind is not None and kind != self.native_format:
            return self._parse_as(kind, data, file)
        return self._parse_native(data, file)

    def _parse_as(self, kind: str, data: bytes, file: str) -> ParsedHWPX:
        """``data`` read by the reader of format ``kind`` configured like this one."""
        cls = _reader_class(kind)
        if kind in FORMAT_NAMES:
            name = FORMAT_NAMES[kind]
            if data.startswith(b"HWP Document File V3"):  # refused by the HWP reader
                name = "HWP 3.x"
            warnings.warn(
                f"{file}: the content is {name}, not {suffix_name(self)} as its "
                f"name says; read as {name}",
                HWPXReadWarning,
                stacklevel=3,
            )
        mine = type(self).model_fields
        other = cls(**{k: getattr(self, k) for k in cls.model_fields if k in mine})
        return other._parse_native(data, file)

    def _parse_native(self, data: bytes, file: str) -> ParsedHWPX:
        """Parse an HWPX package held in memory."""
        limits = self.limits()
        pkg = open_package(data, file, limits)
        try:
            check_mimetype_and_manifest(pkg)
            order, package_title = section_order(pkg)
            state = FileState(
                file=file,
                limits=limits,
                outline=outline_levels(pkg),
                include_headers_footers=self.include_headers_footers,
            )
            raw_sections: list[list[Block]] = []
            for i, part in enumerate(order):
                root = pkg.xml(part, strip_layout=True)
                try:
                    raw_sections.append(SectionWalker(state, i, part).walk(root))
                except RecursionError as exc:
                    raise HWPXFormatError(file, "XML nested too deeply", part=part) from exc
                del root
        finally:
            pkg.zf.close()
        return self._assemble(file, package_title, raw_sections, state, pkg.warnings)

    def _assemble(
        self,
        file: str,
        package_title: str,
        raw_sections: list[list[Block]],
        state: FileState,
        warnings_before: Sequence[str] = (),
    ) -> ParsedHWPX:
        """Headings, sections and title from the walked blocks (shared by every format)."""
        _warn_structure(file, state.warnings)
        tables = [t for t in state.tables if t is not None]
        flat = [b for sec in raw_sections for b in sec]
        classified = classify(
            flat,
            tables,
            glyph_headings=self.glyph_headings,
            boxed_titles=self.boxed_titles,
            max_chars=self.heading_max_chars,
        )
        sections: list[list[Block]] = [[] for _ in raw_sections]
        for b in classified:
            sections[b["section"]].append(b)
        title = _pick_title(classified, package_title, file, self.heading_max_chars)
        return ParsedHWPX(
            file, title, package_title, sections, tables, list(warnings_before) + state.warnings
        )

    def load_tables(self, path: str | PurePath, fs: Any | None = None) -> list[HWPXTable]:
        """Every ``hp:tbl`` of one file: sections in spine order, a parent before the tables
        nested in it (pre-order). Cells are placed by ``cellAddr``/``cellSpan``.

        >>> tables = HWPXReader().load_tables("form.hwpx")  # doctest: +SKIP
        >>> tables[0].to_grid()                              # doctest: +SKIP
        """
        data, label = self._read(path, fs)
        return self.parse_bytes(data, label).tables

    def load_bytes(
        self, data: bytes, file_name: str = "<bytes>", extra_info: dict | None = None
    ) -> list[Document]:
        """Documents from an in-memory package (``file_name`` becomes the file metadata)."""
        return self._documents(self.parse_bytes(data, file_name), file_name, extra_info)

    def lazy_load_data(  # type: ignore[override]
        self,
        file: str | PurePath | Sequence[str | PurePath],
        extra_info: dict | None = None,
        fs: Any | None = None,
    ) -> Iterator[Document]:
        """Documents from one file, a directory (``**/*.hwpx``) or a list of files.

        One file: errors propagate (:class:`HWPXError` subclasses, or ``OSError``).
        A directory or list: a bad file is skipped with an :class:`HWPXReadWarning` and
        recorded in :attr:`failures`; the batch never aborts.
        """
        batch = self._batch_inputs(file, fs)
        if batch is None:
            data, label = self._read(file, fs)  # type: ignore[arg-type]
            yield from self._documents(self.parse_bytes(data, label), label, extra_info)
            return
        self._failures = []
        for item in batch:
            try:
                data, label = self._read(item, fs)
                docs = self._documents(self.parse_bytes(data, label), label, extra_info)
            except (HWPXError, OSError) as exc:
                failure = HWPXFailure(str(item), str(exc), type(exc).__name__)
                self._failures.append(failure)
                warnings.warn(
                    f"skipped {item}: {exc}", HWPXReadWarning, stacklevel=2
                )
                continue
            yield from docs

    def load_data(  # type: ignore[override]
        self,
        file: str | PurePath | Sequence[str | PurePath],
        extra_info: dict | None = None,
        fs: Any | None = None,
    ) -> list[Document]:
        """List form of :meth:`lazy_load_data` (same arguments, same failure handling)."""
        return list(self.lazy_load_data(file, extra_info=extra_info, fs=fs))

    # ------------------------------------------------------------------ internals
    def _batch_inputs(
        self, file: str | PurePath | Sequence[str | PurePath], fs: Any | None
    ) -> list[str | PurePath] | None:
        if isinstance(file, (list, tuple)):
            return list(file)
        path = file if isinstance(file, (str, PurePath)) else str(file)
        suffix = self.file_suffix
        if fs is not None:
            if fs.isdir(str(path)) and PurePath(path).suffix.lower() != suffix:
                found = fs.glob(str(PurePath(path) / "**" / f"*{suffix}"))
                return sorted(str(f) for f in found)
            return None
        p = Path(path)
        if p.is_dir() and p.suffix.lower() != suffix:
            # every entry named *.hwpx, files or not: a directory or FIFO so named becomes a
            # recorded failure (see _read), never a silent skip
            return sorted(q for q in p.rglob("*") if q.suffix.lower() == suffix)
        return None

    def _read(self, file: str | PurePath, fs: Any | None) -> tuple[bytes, str]:
        label = str(file)
        if fs is not None:
            with fs.open(label, "rb") as fh:
                data = fh.read(self.max_file_bytes + 1)
        else:
            p = Path(file)
            size = p.stat().st_size
            if not p.is_file():  # checked before opening: reading a FIFO would block
                kind = "a directory" if p.is_dir() else "not a regular file"
                raise HWPXFormatError(label, f"is {kind}, not an {suffix_name(self)} file")
            if size > self.max_file_bytes:
                raise HWPXLimitError(
                    label, f"file is {size} bytes, above max_file_bytes={self.max_file_bytes}",
                    limit="max_file_bytes", value=size, maximum=self.max_file_bytes,
                )
            data = p.read_bytes()
        if len(data) > self.max_file_bytes:
            raise HWPXLimitError(
                label, f"file is above max_file_bytes={self.max_file_bytes}",
                limit="max_file_bytes", value=len(data), maximum=self.max_file_bytes,
            )
        return bytes(data), label

    def _documents(
        self, parsed: ParsedHWPX, label: str, extra_info: dict | None
    ) -> list[Document]:
        name = PurePath(label).name
        groups: list[tuple[int | None, list[Block]]]
        if self.split_sections:
            groups = [(i, blocks) for i, blocks in enumerate(parsed.sections)]
        else:
            groups = [(None, [b for sec in parsed.sections for b in sec])]
        docs: list[Document] = []
        path_before: list[str] = []
        for section, blocks in groups:
            table_ids = {b["index"] for b in blocks if b["type"] == "table"}
            metadata: dict[str, Any] = {"file_name": name, "file_path": label}
            if extra_info:
                metadata.update(extra_info)
            metadata.update(
                {
                    "section": section,
                    "heading_path": " > ".join(path_before),
                    "title": parsed.title,
                    "table_count": len(table_ids),
                    STRUCTURE_KEY: structure_json(blocks, parsed.tables),
                }
            )
            doc_id = label if section is None else f"{label}#section{section}"
            docs.append(
                Document(
                    id_=doc_id,
                    text=blocks_text(blocks, parsed.tables),
                    metadata=metadata,
                    excluded_embed_metadata_keys=list(EMBED_EXCLUDED),
                    excluded_llm_metadata_keys=list(LLM_EXCLUDED),
                )
            )
            for b in blocks:
                if "path" in b:
                    path_before = list(b["path"])
        return docs


FORMAT_NAMES = {"hwp": "HWP 5 (OLE2)", "hwpx": "HWPX (zip)", "hml": "HWPML (XML)"}


def sniff_format(data: bytes) -> str | None:
    """The format of ``data`` by its first bytes: ``"hwp"`` (OLE2 compound file, or the HWP
    3.x signature), ``"hwpx"`` (zip), ``"hml"`` (XML whose root is ``HWPML``) or None."""
    if data[:8] == OLE2_MAGIC or data.startswith(b"HWP Document File"):
        return "hwp"
    if data[:4] in ZIP_MAGICS:
        return "hwpx"
    head = data[:2048].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"<") and b"<HWPML" in head:
        return "hml"
    return None


def _reader_class(kind: str) -> type[HWPXReader]:
    """The reader of format ``kind``: the class that declared it as its ``native_format``
    (every reader registers itself when its class is defined, :meth:`HWPXReader.__init_subclass__`;
    the package imports the three), so this module never imports its subclasses."""
    return _READERS.get(kind, HWPXReader)


def suffix_name(reader: HWPXReader) -> str:
    """``HWPX`` / ``HML``: the format a reader reads, for messages."""
    return reader.file_suffix.lstrip(".").upper()


def _warn_structure(file: str, messages: Sequence[str]) -> None:
    """Emit one :class:`HWPXReadWarning` per structural oddity the walk recorded."""
    for msg in messages:
        warnings.warn(f"{file}: {msg}", HWPXReadWarning, stacklevel=3)


def _pick_title(blocks: Sequence[Block], package_title: str, file: str, max_chars: int) -> str:
    """Document title, first match of:

    1. a boxed title (a short text alone in a table) among the first 5 blocks;
    2. the first block, if it is a short paragraph or heading (forms put the title first);
    3. the first level-1 heading; 4. ``opf:title`` (often junk in real files); 5. file stem.
    """
    for b in blocks[:5]:
        if b["type"] == "table" and "heading" in b:
            return str(b["heading"]["text"])
    if blocks:
        b = blocks[0]
        text = " ".join(_NOTE_MARK.sub("", str(b.get("text", ""))).split())
        if b["type"] in ("heading", "paragraph") and 0 < len(text) <= max_chars:
            if b["type"] == "heading" or b.get("location") == "body":
                return text
    for b in blocks:
        if b["type"] == "heading" and b["level"] == 1:
            return str(b["text"])
    if package_title.strip():
        return package_title.strip()
    return PurePath(file).stem
