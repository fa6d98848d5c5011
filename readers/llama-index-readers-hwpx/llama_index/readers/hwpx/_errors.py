"""Typed errors of the HWPX reader. Every message names the file it is about."""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "HMLFormatError", "HMLLimitError", "HWPEncryptedError", "HWPFormatError", "HWPLimitError",
    "HWPXError", "HWPXEncryptedError", "HWPXFormatError", "HWPXLimitError",
]


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


class HWPXLimitError(HWPXFormatError):
    """A resource limit of the reader was exceeded (hostile or unusually large input).

    Raised before the offending structure is allocated: a declared table grid above
    ``max_table_cells``, more cells in one table than ``max_table_cells``, rendered text above
    ``max_text_chars``, nesting above ``max_table_depth``, a part or package above the size or
    compression-ratio limits. The message names the file, the limit, the value found and the
    reader field that raises the limit.

    Attributes:
        limit: the :class:`HWPXReader` field name (e.g. ``"max_table_cells"``).
        value: the value found (or estimated) in the file.
        maximum: the limit in force.
        detail: the message without the file prefix and the "raise the limit" hint.
    """

    #: the reader class named in the "raise the limit" hint
    reader_name: ClassVar[str] = "HWPXReader"

    def __init__(
        self,
        file: str,
        message: str,
        *,
        limit: str,
        value: float,
        maximum: float,
        part: str | None = None,
    ) -> None:
        self.limit = limit
        self.detail = message
        self.value = value
        self.maximum = maximum
        super().__init__(
            file,
            f"{message}; raise the limit if the file is trusted, e.g. "
            f"{self.reader_name}({limit}={_suggest(value)})",
            part=part,
        )


class HWPFormatError(HWPXFormatError):
    """The file is not a readable HWP 5 document: not an OLE2 compound file, an HWP 3.x file,
    a missing, corrupt or truncated stream, a record running past its stream, a limit
    exceeded. A subclass of :class:`HWPXFormatError`; the message names the file (and the
    stream, e.g. ``BodyText/Section0``)."""


class HWPLimitError(HWPFormatError, HWPXLimitError):
    """A reader limit was exceeded by an HWP 5 file (``limit``, ``value``, ``maximum``)."""

    reader_name: ClassVar[str] = "HWPReader"


class HWPEncryptedError(HWPXEncryptedError):
    """A password-protected HWP 5 document, or a distribution document (배포용 문서, whose
    body Hangul stores encrypted in ``ViewText``): neither is decrypted by this reader."""


class HMLFormatError(HWPXFormatError):
    """The file is not a readable HWPML 2.x document (malformed XML, a DOCTYPE, a root other
    than ``HWPML``, no ``BODY``/``SECTION``, a bad table attribute, a limit exceeded).

    A subclass of :class:`HWPXFormatError`, so code catching the HWPX reader's errors also
    catches these; the message names the file."""


class HMLLimitError(HMLFormatError, HWPXLimitError):
    """A reader limit was exceeded by an HWPML file: both an :class:`HMLFormatError` and an
    :class:`HWPXLimitError` (``limit``, ``value``, ``maximum`` name what to raise)."""

    reader_name: ClassVar[str] = "HMLReader"


# the HWP 5 modules' errors, typed as the HWPX errors they subclass
def hwp_limit_error(
    file: str, message: str, limit: str, value: float, maximum: float, part: str | None
) -> HWPXLimitError:
    return HWPLimitError(file, message, limit=limit, value=value, maximum=maximum, part=part)


def hwp_format_error(file: str, message: str, part: str | None = None) -> HWPXFormatError:
    return HWPFormatError(file, message, part=part)


def hwp_encrypted_error(file: str, message: str) -> HWPXEncryptedError:
    return HWPEncryptedError(file, message)


def _suggest(value: float) -> str:
    """A round limit above ``value`` for the error message's "how to raise it"."""
    v = max(int(value), 1)
    step = 10 ** (len(str(v)) - 1)
    return f"{(v // step + 1) * step:_}"
