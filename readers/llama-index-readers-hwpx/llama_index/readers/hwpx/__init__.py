"""LlamaIndex readers for Hangul documents (HWPX, HWPML, binary HWP 5) with cell-coordinate
tables."""

from llama_index.readers.hwpx._errors import (
    HWPXEncryptedError,
    HWPXError,
    HWPXFormatError,
    HWPXLimitError,
)
from llama_index.readers.hwpx._model import HWPXCell, HWPXTable, HWPXTableParent
from llama_index.readers.hwpx._node_meta import (
    NodeCell,
    clean_title,
    node_cells,
    stable_id_func,
    stable_node_id,
)
from llama_index.readers.hwpx.base import (
    STRUCTURE_KEY,
    HWPXFailure,
    HWPXReader,
    HWPXReadWarning,
    ParsedHWPX,
)
from llama_index.readers.hwpx.hml import HMLFormatError, HMLLimitError, HMLReader
from llama_index.readers.hwpx.hwp import (
    HWPEncryptedError,
    HWPFormatError,
    HWPLimitError,
    HWPReader,
)
from llama_index.readers.hwpx.node_parser import HWPXNodeParser

__all__ = [
    "HWPXReader",
    "HWPXNodeParser",
    "NodeCell",
    "node_cells",
    "stable_node_id",
    "stable_id_func",
    "clean_title",
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
    "HMLReader",
    "HMLFormatError",
    "HMLLimitError",
    "HWPReader",
    "HWPFormatError",
    "HWPLimitError",
    "HWPEncryptedError",
]
