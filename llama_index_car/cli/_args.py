"""Argument types and the one-line error parser shared by every ``llama-car`` subcommand.

Each type is an ``argparse`` ``type=`` callable: it returns the converted value or raises
``argparse.ArgumentTypeError`` with a message naming the allowed values, so bad usage is
refused while parsing — before any model loads — with **one line** on stderr and exit code 2
(:class:`OneLineParser`). Standard library only (``llama-car --help`` stays instant).

>>> positive_int("5"), unit_float("0.25"), positive_seconds("1.5")
(5, 0.25, 1.5)
>>> positive_int("-5")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: '-5' is not an integer >= 1
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from llama_index_car.providers import EMBED_MODELS


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line: ``prog: error: message (see
    prog --help)`` on stderr, exit code 2 (the default prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line and exit with code 2."""
        text = " ".join(str(message).split())
        line = f"{self.prog}: error: {text} (see {self.prog} --help)\n"
        encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
        self.exit(2, line.encode(encoding, "backslashreplace").decode(encoding, "replace"))


def _int(value: str, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = minimum - 1
    if number < minimum:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer >= {minimum}")
    return number


def int_at_least(minimum: int) -> Callable[[str], int]:
    """A ``type=`` for an integer >= ``minimum``."""

    def convert(value: str) -> int:
        return _int(value, minimum)

    convert.__name__ = f"integer >= {minimum}"
    return convert


def positive_int(value: str) -> int:
    """An integer >= 1."""
    return _int(value, 1)


def nonneg_int(value: str) -> int:
    """An integer >= 0."""
    return _int(value, 0)


def unit_float(value: str) -> float:
    """A finite number in [0, 1]."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number in [0, 1]")
    return number


def positive_seconds(value: str) -> float:
    """A finite number of seconds > 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds > 0")
    return number


def _undecodable(text: str) -> str | None:
    """The first character of ``text`` that cannot be encoded as UTF-8 (a lone surrogate:
    an undecodable byte of the command line), described; ``None`` when all are valid."""
    for position, ch in enumerate(text):
        if "\ud800" <= ch <= "\udfff":
            code = ord(ch)
            what = f"byte 0x{code - 0xDC00:02x}" if code >= 0xDC80 else f"U+{code:04X}"
            return f"{what} at position {position}"
    return None


def existing_dir(value: str) -> str:
    """An existing directory (named in the error when it is not)."""
    bad = _undecodable(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"the path is not valid UTF-8 ({bad})")
    if not Path(value).is_dir():
        reason = "is not a directory" if Path(value).exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{value} {reason}")
    return value


def existing_file(value: str) -> str:
    """An existing regular file."""
    existing_path(value)
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"{value} is not a file")
    return value


def output_dir(value: str) -> str:
    """A folder to write into: valid UTF-8, and not an existing non-directory."""
    bad = _undecodable(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"the path is not valid UTF-8 ({bad})")
    if not value.strip():
        raise argparse.ArgumentTypeError("the output folder is empty")
    if Path(value).exists() and not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value} exists and is not a directory")
    return value


def existing_path(value: str) -> str:
    """An existing file or directory."""
    bad = _undecodable(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"the path is not valid UTF-8 ({bad})")
    if not Path(value).exists():
        raise argparse.ArgumentTypeError(f"{value} does not exist")
    return value


def query_text(value: str) -> str:
    """A question: valid UTF-8, not blank, at most ``$LLAMA_CAR_MAX_QUERY_CHARS`` characters
    (default 2000, the library's :class:`~llama_index_car.query_guard.QueryLimits`)."""
    bad = _undecodable(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(
            f"the question is not valid UTF-8 ({bad}); pass it in UTF-8"
        )
    if not value.strip():
        raise argparse.ArgumentTypeError("the question is empty; pass a question in quotes")
    from llama_index_car._env import env

    raw = (env("MAX_QUERY_CHARS") or "").strip()
    limit = int(raw) if raw.isdigit() and int(raw) > 0 else 2000
    if len(value) > limit:
        raise argparse.ArgumentTypeError(
            f"the question has {len(value)} characters; the limit is {limit} "
            "(raise it with LLAMA_CAR_MAX_QUERY_CHARS)"
        )
    return value


#: URI schemes of ``--store`` (kept in step with ``llama_index_car.stores.STORE_KINDS`` and
#: ``SERVER_SCHEMES``)
STORE_SCHEMES: tuple[str, ...] = (
    "milvus", "milvus+http", "milvus+https", "postgresql", "postgres", "pgserver", "qdrant",
    "qdrant+http", "qdrant+https", "chroma",
)


#: local store kinds that may live inside the index folder (``--store qdrant``)
INSIDE_STORES: tuple[str, ...] = ("milvus", "pgserver", "qdrant", "chroma")

#: ``--store``'s help: the URIs it takes
STORE_HELP = (
    "milvus://F.db | milvus+http(s)://HOST:PORT[/DB] ($LLAMA_CAR_MILVUS_TOKEN) | "
    "postgresql://USER@HOST:PORT/DB ($PGPASSWORD) | pgserver://DIR | qdrant://DIR | "
    "qdrant+http(s)://HOST:PORT ($LLAMA_CAR_QDRANT_API_KEY) | chroma://DIR"
)


def store_uri(value: str) -> str:
    """A vector-store URI: ``milvus://F.db``, ``milvus+http(s)://HOST:PORT/DB``,
    ``postgresql://…``, ``pgserver://DIR``, ``qdrant://DIR``, ``qdrant+http(s)://HOST:PORT``
    or ``chroma://DIR``; or a bare local kind (``qdrant``, ``chroma``, ``milvus``,
    ``pgserver``): a store kept inside the index folder. A server URI is checked here
    (:func:`~llama_index_car.stores.parse_server`: no user, password or query in it); no
    message repeats a password."""
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.stores import _safe, is_server_uri, parse_server

    if value in INSIDE_STORES:
        return value
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in STORE_SCHEMES or not rest.strip():
        raise argparse.ArgumentTypeError(
            f"{_safe(value)!r} is not a store URI; use {STORE_HELP}, or "
            "qdrant|chroma|milvus|pgserver for a store inside the index folder"
        )
    if is_server_uri(value):
        try:
            parse_server(value)
        except ConfigurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    elif scheme.lower() == "milvus" and not rest.split("?", 1)[0].endswith(".db"):
        raise argparse.ArgumentTypeError(f"{value!r}: a Milvus Lite file must end in .db")
    return value


# ----------------------------------------------------------------------------- shared options
def add_cache_and_progress_options(p: argparse.ArgumentParser) -> None:
    """Add ``--cache-dir DIR`` (embedding cache) and ``--no-progress``/``--quiet``, shared by
    the subcommands that embed a corpus (``index``, ``demo``, ``eval``, ``probe``).

    Progress bars go to stderr and are shown only when stderr is a terminal
    (:func:`show_progress`)."""
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="embedding cache, reused across runs (default: $LLAMA_CAR_CACHE or "
                   "~/.cache/llama-index-car/embeddings)")
    p.add_argument("--no-progress", "--quiet", dest="no_progress", action="store_true",
                   help="hide progress bars (they are off anyway when stderr is not a terminal)")


def add_embed_option(p: argparse.ArgumentParser) -> None:
    """Add ``--embed {e5,use,openai}`` whose default (``None``) resolves through
    :func:`llama_index_car.providers.embed_provider`: ``$LLAMA_CAR_EMBED_MODEL``, else ``e5``."""
    p.add_argument(
        "--embed",
        choices=EMBED_MODELS,
        default=None,
        help="dense embedding: e5 = offline multilingual-e5-small (default; or "
        "$LLAMA_CAR_EMBED_MODEL), use = offline multilingual USE v3, "
        "openai = text-embedding-3-large (needs OPENAI_API_KEY)",
    )


def show_progress(args: argparse.Namespace) -> bool:
    """Whether a subcommand shows progress bars: not ``--no-progress``/``--quiet`` and stderr
    is a terminal (bars are written to stderr, so logs and pipes stay clean)."""
    if getattr(args, "no_progress", False):
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def one_line(exc: BaseException) -> str:
    """``exc`` as one printable line (whitespace collapsed; characters the terminal's
    encoding cannot show, e.g. lone surrogates, as backslash escapes)."""
    text = " ".join(str(exc).split())
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def _is_reader_warning(category: type[Warning]) -> bool:
    """``category`` is the reader's ``HWPXReadWarning`` (or a subclass), recognised without
    importing the reader (a no-op ``--update`` never loads it)."""
    return any(c.__name__ == "HWPXReadWarning" and c.__module__.startswith(
        "llama_index.readers.hwpx") for c in category.__mro__)


@contextlib.contextmanager
def reader_warnings_to_stderr() -> Iterator[None]:
    """While active, each ``HWPXReadWarning`` (a file read by its content rather than its
    name, a structural oddity) is one line on stderr, ``warning: <message>``, every time it
    happens; other warnings keep their handling (``UserWarning`` s, the reader's base, are
    all let through; :func:`main` prints each distinct one once)."""
    with warnings.catch_warnings():
        previous = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: object = None, line: str | None = None) -> None:
            if _is_reader_warning(category):
                print(f"warning: {one_line(Exception(message))}", file=sys.stderr)
            else:
                previous(message, category, filename, lineno, file, line)  # type: ignore[arg-type]

        warnings.simplefilter("always", UserWarning)
        warnings.showwarning = show
        yield


def subcommand(
    subparsers: Any, name: str, *, help: str, epilog: str, doc: str | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` with its one-line ``help`` and its ``epilog``
    (examples, printed as written); the description is ``description``, else the first line
    of the module docstring ``doc`` after its ``llama-car NAME: ``."""
    if description is None:
        description = doc.splitlines()[0].split(": ", 1)[-1] if doc else None
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(command=name)
    return parser
