"""The source files of a folder and how they are read: suffixes, readers, parsing.

A source is a folder (searched recursively for ``*.hwp``, ``*.hwpx``, ``*.hml``) or a list of
files. Each file goes to the reader of its suffix (:func:`file_extractor`: ``HWPReader``,
``HWPXReader``, ``HMLReader``; one table model) and its documents to
:class:`~llama_index.readers.hwpx.HWPXNodeParser`. A file that cannot be read is a
:class:`FileFailure` (reported and skipped), never an aborted build. Standard library only at
import: the readers load on first use.

>>> from llama_index_car.demo import demo_corpus_dir
>>> [p.name for p in find_source_files(demo_corpus_dir())][:2]
['dg2012_tunnel.hwpx', 'dg2015_rest.hwpx']
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode, Document
    from llama_index.readers.hwpx import HWPXReader

#: the suffixes a source folder is searched for (case-insensitive): binary HWP 5, HWPX, HWPML
SOURCE_SUFFIXES: tuple[str, ...] = (".hwp", ".hwpx", ".hml")
#: how messages name them
SOURCE_FORMATS = ".hwp, .hwpx or .hml"
#: node parser defaults (tokens)
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 150


@dataclass(frozen=True)
class FileFailure:
    """A source file that could not be indexed: its path and ``"ErrorType: message"``."""

    path: str
    error: str


def read_errors() -> tuple[type[Exception], ...]:
    """What a reader raises for a file it cannot read (a :class:`FileFailure`, never an
    aborted build): ``HWPXError`` (and its HWP/HML subclasses), ``OSError``, a broken zip,
    malformed XML (``ValueError``), a missing part (``KeyError``)."""
    from llama_index.readers.hwpx import HWPXError

    return (HWPXError, OSError, zipfile.BadZipFile, ValueError, KeyError)


def file_extractor() -> dict[str, HWPXReader]:
    """One reader per source suffix, for ``SimpleDirectoryReader(file_extractor=...)`` and
    :func:`read_documents`: ``.hwp`` → :class:`~llama_index.readers.hwpx.HWPReader`,
    ``.hwpx`` → :class:`~llama_index.readers.hwpx.HWPXReader`, ``.hml`` →
    :class:`~llama_index.readers.hwpx.HMLReader` (default settings). Each reads a file by its
    content, so one whose bytes are another of the three formats is read by that format's
    reader with one ``HWPXReadWarning``.

    >>> sorted(file_extractor())
    ['.hml', '.hwp', '.hwpx']
    """
    from llama_index.readers.hwpx import HMLReader, HWPReader, HWPXReader

    return {".hwp": HWPReader(), ".hwpx": HWPXReader(), ".hml": HMLReader()}


def find_source_files(source: str | Path | Sequence[str | Path]) -> list[Path]:
    """The ``*.hwp``, ``*.hwpx`` and ``*.hml`` files under ``source`` (a folder, searched
    recursively, or file paths: a file is taken whatever its suffix).

    Sorted by path so builds are deterministic.

    Raises:
        ConfigurationError: a path does not exist, or no such file was found.
    """
    sources = [source] if isinstance(source, str | Path) else list(source)
    files: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            # not only regular files: a directory or FIFO named *.hwpx is a listed failure
            files.extend(q for q in p.rglob("*") if q.suffix.lower() in SOURCE_SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigurationError(
                f"{p} does not exist; pass a folder of {SOURCE_FORMATS} files"
            )
    if not files:
        raise ConfigurationError(
            f"no {SOURCE_FORMATS} files found in {', '.join(map(str, sources))}"
        )
    return sorted(set(files))


def load_source_file(path: Path, readers: dict[str, HWPXReader]) -> list[Document]:
    """The documents of one file, read by ``readers[suffix]`` (:func:`file_extractor`);
    another suffix (a file named on the command line) goes to the HWPX reader, which reads
    it by its content. Raises what the reader raises (:func:`read_errors`)."""
    reader = readers.get(path.suffix.lower(), readers[".hwpx"])
    return reader.load_data(path)


def sha256_file(path: Path) -> str:
    """The file's sha256; ``"unreadable:<reason>"`` for a directory, FIFO or unreadable path
    named like a source file (listed as a failure, re-tried by ``--update`` once that changes)."""
    if not path.is_file():
        return "unreadable:not-a-regular-file"
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable:{type(exc).__name__}"
    return h.hexdigest()


def _progress(items: Sequence[Any], enabled: bool, desc: str) -> Iterable[Any]:
    if not enabled:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="file")


def read_documents(
    files: Sequence[Path],
    *,
    show_progress: bool = False,
    on_error: Callable[[FileFailure], None] | None = None,
) -> tuple[list[Document], list[FileFailure]]:
    """Read HWP 5, HWPX and HWPML files, each by the reader of its suffix
    (:func:`load_source_file`; one document per file, tables kept).

    A file that fails to parse (``HWPXError`` and its HWP/HML subclasses, a broken zip or OLE
    file, an unreadable path, malformed XML) is recorded as a :class:`FileFailure`, passed to
    ``on_error`` and skipped.
    """
    errors = read_errors()
    readers = file_extractor()
    documents: list[Document] = []
    failures: list[FileFailure] = []
    for path in _progress(files, show_progress, "reading"):
        try:
            docs = load_source_file(Path(path), readers)
        except errors as exc:
            failure = FileFailure(str(path), f"{type(exc).__name__}: {exc}")
            failures.append(failure)
            if on_error is not None:
                on_error(failure)
            continue
        documents.extend(docs)
    return documents, failures


def parse_nodes(
    documents: Sequence[Document],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    show_progress: bool = False,
) -> list[BaseNode]:
    """Split documents with :class:`HWPXNodeParser` (sections, paragraphs, tables)."""
    from llama_index.readers.hwpx import HWPXNodeParser

    parser = HWPXNodeParser(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    return list(parser.get_nodes_from_documents(list(documents), show_progress=show_progress))


def cells_for(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells of a table node as ``[{"table", "row", "col", "row_span", "col_span", "text",
    "depth", "parent"}]`` (0-based; see :func:`llama_index.readers.hwpx.node_cells`); ``[]``
    for other nodes."""
    from llama_index.readers.hwpx import node_cells

    return [c.to_dict() for c in node_cells(metadata)]
