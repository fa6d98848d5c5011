"""What a folder calls each source file and each document: content keys and twins.

A file's **key** is its path under the source folder (:func:`source_keys`), so the folder
spelled absolutely, relatively or through a symlink gives the same keys, and moving it keeps
them. Its documents are named ``key@sha256[:16]`` (plus the reader's ``#sectionN``,
:func:`key_documents`), so node ids (uuid5 of the document id and chunk index) are the same
for the same content at the same place and new for changed content: an update never
overwrites a live node's vector in a store.

Files holding the same document (the same normalised text, :func:`text_digest`) are
**twins**: one of them is indexed (:data:`TWIN_PREFERENCE`, :func:`twin_canon`) and the
others are kept as its aliases in the folder's record. Standard library only.

>>> twin_canon({"a.hwp": "d1", "a.hwpx": "d1", "b.hwp": "d2"})
{'a.hwp': 'a.hwpx', 'a.hwpx': 'a.hwpx', 'b.hwp': 'b.hwp'}
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import Document

#: when files hold the same document (:func:`text_digest`), the copy indexed is the first by
#: this order of suffixes, then by key; the others are kept as its aliases. HWPX first: the
#: format the others are converted to and from.
TWIN_PREFERENCE: tuple[str, ...] = (".hwpx", ".hml", ".hwp")


def source_keys(source: str | Path | Sequence[str | Path], files: Sequence[Path]) -> dict[str, str]:
    """``{str(file): key}``: what the record and the node ids call each file.

    For one source folder, the key is the file's path under it (POSIX); otherwise the file's
    resolved absolute path.

    >>> source_keys("docs", [Path("docs/a/b.hwpx")])
    {'docs/a/b.hwpx': 'a/b.hwpx'}
    """
    if isinstance(source, str | Path) and Path(source).is_dir():
        root = Path(source)
        return {str(f): f.relative_to(root).as_posix() for f in files}
    return {str(f): f.resolve().as_posix() for f in files}


def key_documents(documents: Sequence[Document], key: str, digest: str) -> None:
    """Name one file's documents by content: ``key@sha256[:16]`` (plus the reader's
    ``#sectionN``)."""
    base = f"{key}@{digest[:16]}"
    for doc in documents:
        _, sep, section = str(doc.id_).rpartition("#section")
        doc.id_ = f"{base}#section{section}" if sep and section.isdigit() else base


def key_all(documents: Sequence[Document], keys: dict[str, str], hashes: dict[str, str]) -> None:
    """:func:`key_documents` for every document (grouped by the ``file_path`` it came from;
    ``keys``/``hashes``: ``{str(file): key / sha256}``)."""
    for doc in documents:
        path = str(doc.metadata.get("file_path", ""))
        if path in keys:
            key_documents([doc], keys[path], hashes[path])


def doc_key(ref_doc_id: str | None) -> str:
    """The file key of a node's ``ref_doc_id`` (``key@digest[#sectionN]``).

    >>> doc_key("a/b.hwpx@0123456789abcdef#section2")
    'a/b.hwpx'
    """
    base = str(ref_doc_id or "").split("#section")[0]
    return base.rpartition("@")[0] or base


def text_digest(texts: Iterable[str]) -> str:
    """What makes two files the same document: the sha256 of their texts, in order,
    NFKC-normalised with every run of whitespace made one space; ``""`` for no text.

    >>> text_digest(["배수 기준 "]) == text_digest([" 배수  기준"]) != text_digest(["배수기준"])
    True
    """
    joined = " ".join(" ".join(unicodedata.normalize("NFKC", t).split()) for t in texts)
    return hashlib.sha256(joined.strip().encode("utf-8")).hexdigest() if joined.strip() else ""


def twin_canon(digests: dict[str, str]) -> dict[str, str]:
    """``{key: the key indexed for its text}`` for the files of ``digests`` (``{key: text
    digest}``): each group of keys with one digest maps to its first by
    (:data:`TWIN_PREFERENCE` rank of the suffix, key); a unique text maps to itself."""
    def rank(key: str) -> tuple[int, str]:
        suffix = Path(key).suffix.lower()
        order = TWIN_PREFERENCE.index(suffix) if suffix in TWIN_PREFERENCE else len(
            TWIN_PREFERENCE)
        return order, key

    groups: dict[str, list[str]] = {}
    for key, digest in digests.items():
        groups.setdefault(digest, []).append(key)
    first = {digest: min(members, key=rank) for digest, members in groups.items()}
    return {key: first[digest] for key, digest in digests.items()}


def file_digests(documents: Sequence[Document], keys: dict[str, str]) -> dict[str, str]:
    """``{key: text digest}`` of the files ``documents`` came from (by ``file_path``); files
    without text are left out (nothing to be a twin of)."""
    texts: dict[str, list[str]] = {}
    for doc in documents:
        key = keys.get(str(doc.metadata.get("file_path", "")))
        if key is not None:
            texts.setdefault(key, []).append(doc.text)
    digests = {key: text_digest(t) for key, t in texts.items()}
    return {key: d for key, d in digests.items() if d}


def indexed_only(
    documents: Sequence[Document], keys: dict[str, str], canon: dict[str, str]
) -> list[Document]:
    """``documents`` without those of files that are another's twin (``canon``: key → key
    indexed for its text)."""
    out = []
    for doc in documents:
        key = keys.get(str(doc.metadata.get("file_path", "")))
        if key is None or canon.get(key, key) == key:
            out.append(doc)
    return out
