"""LlamaIndex reader for HWPX (Hancom OWPML) documents with cell-coordinate tables."""

from llama_index.readers.hwpx._errors import (
    HWPXEncryptedError,
    HWPXError,
    HWPXFormatError,
    HWPXLimitError,
)
from llama_index.readers.hwpx._model import HWPXCell, HWPXTable, HWPXTableParent
from llama_index.readers.hwpx.base import (
    STRUCTURE_KEY,
    HWPXFailure,
    HWPXReader,
    HWPXReadWarning,
    ParsedHWPX,
)
from llama_index.readers.hwpx.hml import HMLFormatError, HMLLimitError, HMLReader
from llama_index.readers.hwpx.hml_writer import HMLBuilder, HMLSectionBuilder
from llama_index.readers.hwpx.node_parser import HWPXNodeParser
from llama_index.readers.hwpx.writer import HWPXBuilder, SectionBuilder, TableSpec

__all__ = [
    "HWPXReader",
    "HWPXNodeParser",
    "HWPXTable",
    "HWPXCell",
    "HWPXTableParent",
    "HWPXError",
    "HWPXEncryptedError",
    "HWPXFormatError",
    "HWPXLimitError",
    "HWPXFailure",
    "HWPXReadWarning",
    "ParsedHWPX",
    "STRUCTURE_KEY",
    "HWPXBuilder",
    "SectionBuilder",
    "TableSpec",
    "HMLReader",
    "HMLFormatError",
    "HMLLimitError",
    "HMLBuilder",
    "HMLSectionBuilder",
]
