"""Reading the files of an untrusted folder, and writing durable ones.

Everything read from an index folder or a cache goes through here: a file is opened
non-blocking and checked with ``fstat`` before it is read (:func:`open_regular`: no FIFO,
device or directory), read up to a bound (:func:`read_bounded`), parsed as JSON with a depth
bound (:func:`read_json`, :func:`parse_json`); a cache's files must also be the user's own
(:func:`read_owned_file`). ``.npy`` arrays are read by :func:`llama_index_car._npy.open_npy`
(over :func:`open_regular`). Writes are fsynced (:func:`fsync_write`) and a failed one is a
:class:`~llama_index_car._errors.IndexPersistError` saying what to fix (:func:`write_error`).
Used by :mod:`llama_index_car._persist` (generations and manifests) and every loader.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from llama_index_car._errors import IndexPersistError, UntrustedFileError

_HASH_CHUNK = 1 << 22

#: Called with the path of every file :func:`read_bounded` reads (a test counting how often
#: a load reads one file); empty by default.
READ_OBSERVERS: list[Callable[[Path], None]] = []

#: Deepest JSON nesting read from an index folder (the formats use at most 4).
MAX_JSON_DEPTH = 32

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(
    os, "O_NOCTTY", 0
)

#: Largest ``manifest.json`` read (one ~100-byte entry per file of a generation).
MAX_MANIFEST_BYTES = 64 << 20

def write_cause(path: str | os.PathLike[str], exc: OSError) -> str:
    """The cause of a failed write as a short phrase: ``"no space left on device"`` for a full
    disk or quota, ``"read-only file system"``, ``"permission denied"``, else the system's
    message. numpy's ``tofile`` reports a short write without an errno; it is recognised from
    the free space left in ``path``'s folder.

    >>> write_cause("/x", OSError(errno.ENOSPC, "No space left on device"))
    'no space left on device'
    """
    code = exc.errno
    if code is None:
        with contextlib.suppress(OSError):
            st = os.statvfs(Path(path).parent)
            if st.f_bavail == 0 or st.f_favail == 0:
                code = errno.ENOSPC
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on device"
    if code == errno.EROFS:
        return "read-only file system"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def write_error(path: str | os.PathLike[str], exc: OSError) -> IndexPersistError:
    """An :class:`IndexPersistError` naming ``path`` and the cause of a failed write
    (:func:`write_cause`), with the fix: a full disk says "no space left on device", a
    read-only mount "read-only file system"."""
    cause = write_cause(path, exc)
    fix = {
        "no space left on device": "free some space or write the index elsewhere",
        "read-only file system": "write the index to a writable directory",
        "permission denied": "write the index to a directory you can write",
    }.get(cause, "check the directory and retry")
    return IndexPersistError(f"cannot write {path}: {cause}; {fix}")


def fsync_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it before returning.

    Raises:
        IndexPersistError: the write failed (see :func:`write_error`).
    """
    try:
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except IndexPersistError:
        raise
    except OSError as exc:
        raise write_error(path, exc) from exc


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    The file is opened non-blocking (a FIFO cannot hang the reader) and checked with
    ``fstat`` on the open descriptor before anything is read: a FIFO, a device (a symlink to
    ``/dev/zero``), a directory or a file larger than ``max_bytes`` is refused.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IndexPersistError: anything else, naming ``path``.
    """
    for observe in READ_OBSERVERS:
        observe(Path(path))
    with open_regular(path) as fh:
        return _read_at_most(path, fh, max_bytes)


def _read_at_most(path: Path, fh: BinaryIO, max_bytes: int) -> bytes:
    try:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise IndexPersistError(
                f"{path} is {st.st_size} bytes, more than the {max_bytes} such a file can "
                "hold; it is not one written by llama-index-car: persist it again"
            )
        data = fh.read(max_bytes + 1)
    except OSError as exc:
        if isinstance(exc, IndexPersistError):
            raise
        raise IndexPersistError(f"{path} is unreadable ({exc.strerror or exc})") from exc
    if len(data) > max_bytes:
        raise IndexPersistError(f"{path} grew past {max_bytes} bytes while read; persist it again")
    return data


def _depth_ok(obj: Any, limit: int) -> bool:
    """Whether the parsed JSON ``obj`` nests at most ``limit`` containers (iterative)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return False
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


def read_json(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_MANIFEST_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Parse the UTF-8 JSON file ``path`` of an (untrusted) index folder.

    :func:`read_bounded` (regular file, at most ``max_bytes``), then JSON nested at most
    ``max_depth`` deep; integers of more than 4,300 digits and deeper nesting are refused.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IndexPersistError: naming ``path`` and the problem.
    """
    path = Path(path)
    return parse_json(read_bounded(path, max_bytes), path, max_depth)


def parse_json(raw: bytes, path: Path, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` (the bytes of the file ``path``) parsed as UTF-8 JSON nested at most
    ``max_depth`` deep (:func:`read_json`'s checks).

    Raises:
        IndexPersistError: naming ``path`` and the problem.
    """
    try:
        obj = json.loads(raw)
    except RecursionError as exc:
        raise IndexPersistError(
            f"{path} nests JSON deeper than {max_depth} levels; persist it again"
        ) from exc
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, int digits limit
        raise IndexPersistError(f"{path} is damaged ({exc}); persist it again") from exc
    if not _depth_ok(obj, max_depth):
        raise IndexPersistError(f"{path} nests JSON deeper than {max_depth} levels; persist it again")
    return obj


def write_json(path: Path, obj: Any) -> None:
    """:func:`fsync_write` of ``obj`` as UTF-8 JSON (non-ASCII kept)."""
    fsync_write(path, json.dumps(obj, ensure_ascii=False).encode("utf-8"))


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse directory fsync
        pass
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for binary reading, after checking on the open descriptor that it is
    a regular file. The open is non-blocking, so a FIFO in an index folder cannot hang the
    reader, and a device (a symlink to ``/dev/zero``) is refused before anything is read.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IndexPersistError: it is unreadable or not a regular file, naming it.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise IndexPersistError(f"{path} is unreadable ({exc})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IndexPersistError(
                f"{path} is not a regular file (a FIFO, device or directory); "
                "an index folder holds regular files only: persist it again"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class PositionalFile:
    """A regular file of an index folder kept open and read with ``os.pread`` (positional:
    safe from any thread; nothing is mapped, so a read costs the process its bytes, not
    resident pages). A read past the end (the file shrank after it was opened) is an
    :class:`IndexPersistError` naming it and ``fix``; a read after :meth:`close` a
    ``ValueError``."""

    def __init__(self, path: Path, fd: int, fix: str = "write the folder again") -> None:
        self.path, self._fd, self._fix = path, fd, fix

    @classmethod
    def of(cls, fh: BinaryIO, path: Path, fix: str = "write the folder again") -> PositionalFile:
        """A reader of the file open as ``fh`` (its own descriptor: ``fh`` may be closed)."""
        return cls(path, os.dup(fh.fileno()), fix)

    def _fd_open(self) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def _short(self) -> IndexPersistError:
        return IndexPersistError(f"{self.path} was truncated after it was opened; {self._fix}")

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset``."""
        if size == 0:
            return b""
        got = os.pread(self._fd_open(), size, offset)
        if len(got) != size:
            raise self._short()
        return got

    def pread_into(self, buf: memoryview, offset: int) -> None:
        """Fill ``buf`` from ``offset``."""
        if len(buf) and os.preadv(self._fd_open(), [buf], offset) != len(buf):
            raise self._short()

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


def read_owned_file(path: str | os.PathLike[str], max_bytes: int, *, size: int | None = None) -> bytes:
    """The bytes of the cache file ``path``, trusted the way ssh trusts ``~/.ssh``.

    Opened without following a symlink (``O_NOFOLLOW``) and without blocking (a FIFO cannot
    hang the reader); then checked on the open descriptor (``fstat``), so what is read is what
    was checked: a regular file, owned by the effective user, not writable by group or others,
    of at most ``max_bytes`` (and of exactly ``size`` bytes when the caller knows the size it
    recorded). Exactly that many bytes are read.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        UntrustedFileError: anything else, naming ``path`` and the reason.
    """
    flags = _OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        reason = "is a symbolic link" if exc.errno == errno.ELOOP else (
            f"is unreadable ({exc.strerror or exc})"
        )
        raise UntrustedFileError(f"{path} {reason}") from exc
    except ValueError as exc:  # a NUL byte in the name
        raise UntrustedFileError(f"{path!r} is not a valid file name") from exc
    with os.fdopen(fd, "rb", buffering=0) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFileError(f"{path} is not a regular file (a FIFO, device or directory)")
        euid = os.geteuid() if hasattr(os, "geteuid") else None
        if euid is not None and st.st_uid != euid:
            raise UntrustedFileError(f"{path} is owned by uid {st.st_uid}, not by you (uid {euid})")
        if st.st_mode & 0o022:
            raise UntrustedFileError(
                f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
            )
        want = st.st_size if size is None else size
        if st.st_size > max_bytes or st.st_size != want:
            raise UntrustedFileError(
                f"{path} is {st.st_size} bytes, not the {want} recorded (at most {max_bytes})"
            )
        try:
            chunks: list[bytes] = []
            left = want + 1  # one byte more: a file that grew while read is refused
            while left > 0 and (chunk := fh.read(min(left, _HASH_CHUNK))):
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as exc:
            raise UntrustedFileError(f"{path} is unreadable ({exc.strerror or exc})") from exc
    data = b"".join(chunks)
    if len(data) != want:
        raise UntrustedFileError(f"{path} changed size while read ({len(data)} bytes, not {want})")
    return data


def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 hex digest of the regular file ``path`` (see :func:`open_regular`)."""
    h = hashlib.sha256()
    try:
        with open_regular(path) as fh:
            while chunk := fh.read(_HASH_CHUNK):
                h.update(chunk)
    except FileNotFoundError as exc:
        raise IndexPersistError(f"{path} is missing; persist the index again") from exc
    except OSError as exc:
        if isinstance(exc, IndexPersistError):
            raise
        raise IndexPersistError(f"{path} is unreadable ({exc})") from exc
    return h.hexdigest()
