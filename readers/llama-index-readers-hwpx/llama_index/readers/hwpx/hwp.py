"""HWPReader: binary HWP 5.x (``.hwp``, an OLE2 compound file) -> the same Documents and
tables as HWPX.

The file is opened with ``olefile`` (BSD), its streams inflated with ``zlib`` under the
reader's limits (:mod:`._hwp5_container`), its record streams split (:mod:`._hwp5_records`)
and each section turned into the element tree the HWPX :class:`~._parse.SectionWalker` walks
(:mod:`._hwp5_section`; each module states the format facts it uses). So HWP 5, HWPX
and HWPML share one table model (:class:`HWPXTable`/:class:`HWPXCell`: cell address and spans
from each cell's list header), one renderer, one heading classifier (outline levels from the
DocInfo paragraph shapes), one node parser and the same limits.

Example::

    from llama_index.core import SimpleDirectoryReader
    from llama_index.readers.hwpx import HMLReader, HWPReader, HWPXReader

    docs = SimpleDirectoryReader(
        "in/",
        file_extractor={".hwp": HWPReader(), ".hwpx": HWPXReader(), ".hml": HMLReader()},
    ).load_data()
    tables = HWPReader().load_tables("form.hwp")
"""

from __future__ import annotations

from typing import ClassVar

from llama_index.readers.hwpx._errors import (
    HWPEncryptedError,
    HWPFormatError,
    HWPLimitError,
    HWPXFormatError,
    HWPXLimitError,
)
from llama_index.readers.hwpx._hwp5_container import open_hwp
from llama_index.readers.hwpx._hwp5_records import iter_records, outline_levels, read_records
from llama_index.readers.hwpx._hwp5_section import SectionBuilder
from llama_index.readers.hwpx._parse import Block, FileState, SectionWalker
from llama_index.readers.hwpx.base import HWPXReader, ParsedHWPX
from pydantic import Field

__all__ = ["HWPReader", "HWPFormatError", "HWPLimitError", "HWPEncryptedError"]


def _as_hwp(exc: HWPXFormatError, file: str, part: str) -> HWPFormatError:
    if isinstance(exc, HWPFormatError):
        return exc
    if isinstance(exc, HWPXLimitError):
        return HWPLimitError(
            file, exc.detail, limit=exc.limit, value=exc.value, maximum=exc.maximum, part=part
        )
    prefix = exc.file + (f" [{exc.part}]" if exc.part else "") + ": "
    text = str(exc)
    return HWPFormatError(file, text[len(prefix) :] if text.startswith(prefix) else text, part=part)


class HWPReader(HWPXReader):
    """Read binary HWP 5.x (``.hwp``) files into the same Documents, metadata, structure and
    :class:`HWPXTable` list as :class:`HWPXReader` (every field and limit applies alike:
    ``max_part_bytes`` per decompressed stream, ``max_total_bytes`` for the file,
    ``max_compression_ratio`` per stream and for the file, plus ``max_records`` per stream).

    Errors are :class:`HWPFormatError` / :class:`HWPLimitError` / :class:`HWPEncryptedError`
    (subclasses of the HWPX reader's); batch loads of a directory (``**/*.hwp``) or a list
    skip bad files into :attr:`failures` like the HWPX reader. HWPX or HWPML bytes named
    ``.hwp`` are read by their content, with one warning.
    """

    file_suffix: ClassVar[str] = ".hwp"
    native_format: ClassVar[str] = "hwp"
    max_records: int = Field(
        default=5_000_000, gt=0, description="Most records in one HWP 5 record stream."
    )

    @classmethod
    def class_name(cls) -> str:
        return "HWPReader"

    def _parse_native(self, data: bytes, file: str) -> ParsedHWPX:
        """Parse an HWP 5 document held in memory; ``file`` names it in errors."""
        limits = self.limits()
        hwp = open_hwp(data, file, limits)
        outline = outline_levels(read_records(hwp.docinfo, file, "DocInfo", self.max_records))
        state = FileState(
            file=file,
            limits=limits,
            outline=outline,
            include_headers_footers=self.include_headers_footers,
        )
        raw_sections: list[list[Block]] = []
        for i, (part, stream) in enumerate(hwp.sections):
            try:
                # records read in batches and built as they come: a limit crossed stops
                # the read there (the text charged from a lower bound, see SectionBuilder)
                batches = iter_records(stream, file, part, self.max_records, skip_layout=True)
                root = SectionBuilder(
                    batches, file, part, limits, state.warnings.append, state.text_chars
                ).build()
                raw_sections.append(SectionWalker(state, i, part).walk(root))
            except HWPXFormatError as exc:
                raise _as_hwp(exc, file, part) from exc
            except RecursionError as exc:
                raise HWPFormatError(file, "records nested too deeply", part=part) from exc
        return self._assemble(file, hwp.title, raw_sections, state, hwp.warnings)
