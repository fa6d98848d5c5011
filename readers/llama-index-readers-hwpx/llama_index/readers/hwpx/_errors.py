"""Typed errors of the HWPX reader. Every message names the file it is about."""

from __future__ import annotations

__all__ = ["HWPXError", "HWPXEncryptedError", "HWPXFormatError"]


class HWPXError(Exception):
    """Base class: the file could not be read as HWPX.

    Attributes:
        file: the file (path or name) the error is about.
        part: the package part (e.g. ``Contents/section0.xml``) when known, else None.
    """

    def __init__(self, file: str, message: str, *, part: str | None = None) -> None:
        self.file = file
        self.part = part
        where = f"{file}" + (f" [{part}]" if part else "")
        super().__init__(f"{where}: {message}")


class HWPXEncryptedError(HWPXError):
    """The package is password-protected or a distribution (배포용) document.

    Raised when ``META-INF/manifest.xml`` declares ``encryption-data`` or a zip entry is
    encrypted. Save an unprotected copy in Hangul (파일 > 문서 암호 해제) and read that.
    """


class HWPXFormatError(HWPXError):
    """The file is not a readable HWPX package.

    Causes: not a zip; a binary HWP 5 (OLE2/CFB) file with an ``.hwpx`` name; a truncated or
    corrupt zip; malformed XML in a part (the message names the part and the line); a part
    missing that the spine lists; a size, compression-ratio or table-nesting limit exceeded;
    a DOCTYPE (entity declarations are refused: XXE / billion laughs).
    """
