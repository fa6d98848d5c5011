"""Crash-safe, lock-serialised, manifest-bound persistence directories.

Every persisted object of llama-index-car (the BM25 index, the CAR
retriever, the CLI index folder) is written with this module, so they share one set of
guarantees:

* **Generations.** ``target/`` holds complete generations ``gen-<hex>/`` and a pointer file
  ``CURRENT`` (JSON ``{"generation": ..., "previous": ...}``). A writer fills a new generation,
  fsyncs it, then replaces ``CURRENT`` with one atomic ``os.replace``. A process killed at any
  instant (SIGKILL included) leaves ``CURRENT`` naming either the old or the new complete
  generation — never nothing, never a mix.
* **One writer at a time.** Writers hold an exclusive ``flock`` on ``target/.lock`` (released by
  the kernel if the process dies, so a crash never leaves a stale lock). A second writer waits
  up to ``lock_timeout`` seconds, then gets :class:`IndexPersistError`.
* **Cleanup.** After each swap, under the lock, every generation other than the current and the
  previous one is removed — including the half-written ones of killed writers. The previous
  generation is kept so that a reader that resolved ``CURRENT`` just before a swap can finish.
* **Manifest.** :func:`write_manifest` records, last, each file's size and sha256 with a ``kind``
  and ``format_version``; :func:`read_manifest` checks them and raises
  :class:`IndexPersistError` naming the file, so a tampered, truncated or foreign part never
  loads silently.

A directory with ``manifest.json`` at its top and no ``CURRENT`` (a single generation copied by
hand, or a nested part such as ``bm25/`` inside a generation) is read as is by
:func:`live_dir`.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as tmp:
...     target = pathlib.Path(tmp) / "idx"
...     with replace_dir(target) as gen:
...         _ = (gen / "a.json").write_text("{}")
...         _ = write_manifest(gen, kind="Demo", format_version=1)
...     manifest = read_manifest(live_dir(target), kind="Demo", format_versions=(1,))
...     sorted(manifest["files"])
['a.json']
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from llama_index_car._errors import CarError, IndexPersistError, UntrustedFileError

__all__ = [
    "CURRENT_NAME",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "fsync_write",
    "live_dir",
    "load_live",
    "open_regular",
    "read_json",
    "parse_json",
    "read_bound_json",
    "read_manifest",
    "read_npy",
    "read_owned_file",
    "write_cause",
    "write_error",
    "replace_dir",
    "write_json",
    "write_manifest",
]

T = TypeVar("T")

CURRENT_NAME = "CURRENT"
#: a sibling of the generations that is not ours to collect: a store inside an index folder
STORE_DIR_NAME = "store"
LOCK_NAME = ".lock"
MANIFEST_NAME = "manifest.json"
_GEN_PREFIX = "gen-"
_GEN_RE = re.compile(r"^gen-[0-9a-f]{32}$")
_HASH_CHUNK = 1 << 22
#: Largest ``CURRENT`` read (it holds two generation names, ~100 bytes).
MAX_CURRENT_BYTES = 4096
#: Largest ``manifest.json`` read (one ~100-byte entry per file of a generation).
MAX_MANIFEST_BYTES = 64 << 20
#: Called with the path of every ``manifest.json`` :func:`read_manifest` reads (e.g. a test
#: counting how many manifests a load reads); empty by default.
MANIFEST_OBSERVERS: list[Callable[[Path], None]] = []
#: Called with the path of every file :func:`read_bounded` reads (a test counting how often
#: a load reads one file); empty by default.
READ_OBSERVERS: list[Callable[[Path], None]] = []
#: Deepest JSON nesting read from an index folder (the formats use at most 4).
MAX_JSON_DEPTH = 32
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(
    os, "O_NOCTTY", 0
)


# ----------------------------------------------------------------------------- files
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


def _fsync_dir(path: Path) -> None:
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


_sha256 = sha256_file


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)


# ----------------------------------------------------------------------------- manifest
def write_manifest(
    root: Path, *, kind: str, format_version: int, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write ``root/manifest.json`` binding every file under ``root`` (recursively).

    Call it last, after every other file is written: a directory without a valid manifest
    never loads. Returns the manifest. ``meta`` is stored under ``"meta"``.
    """
    files = {
        p.relative_to(root).as_posix(): {"sha256": _sha256(p), "bytes": p.stat().st_size}
        for p in _files_under(root)
    }
    manifest = {"kind": kind, "format_version": format_version, "files": files}
    if meta is not None:
        manifest["meta"] = meta
    fsync_write(root / MANIFEST_NAME, json.dumps(manifest, ensure_ascii=False, indent=1).encode())
    for d in {root} | {(root / f).parent for f in files}:
        _fsync_dir(d)
    return manifest


def read_manifest(
    root: Path,
    *,
    kind: str,
    format_versions: Collection[int],
    verify: bool | Callable[[str], bool] = True,
    required: Collection[str] = (),
) -> dict[str, Any]:
    """Read and check ``root/manifest.json``.

    Checks the ``kind``, that ``format_version`` is one of ``format_versions``, that every file
    in ``required`` is listed, and (``verify=True``) that every listed file exists with the
    recorded size and sha256, and that no listed path escapes ``root``. ``verify`` may be a
    predicate on the listed names: only the files it accepts are hashed (the others are read,
    and checked, by a nested loader). ``manifest.json`` is read with :func:`read_json`.

    Raises:
        IndexPersistError: naming the manifest or the first offending file and the fix.
    """
    mpath = root / MANIFEST_NAME
    for observe in MANIFEST_OBSERVERS:
        observe(mpath)
    try:
        manifest = read_json(mpath)
    except FileNotFoundError:
        raise IndexPersistError(
            f"{mpath} is missing: {root} is incomplete or not a {kind} directory; persist it again"
        ) from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(v, dict)
        and isinstance(v.get("sha256"), str)
        and isinstance(v.get("bytes"), int)
        and not isinstance(v.get("bytes"), bool)
        for v in files.values()
    ):
        raise IndexPersistError(f"{mpath} is damaged (no valid 'files' table); persist it again")
    if manifest.get("kind") != kind:
        raise IndexPersistError(
            f"{mpath} describes a {manifest.get('kind')!r} directory, not a {kind!r} one"
        )
    version = manifest.get("format_version")
    if isinstance(version, bool) or version not in format_versions:
        raise IndexPersistError(
            f"{mpath} has format_version {version!r}; this version of llama-index-car reads "
            f"{sorted(format_versions)}; rebuild it"
        )
    missing = [name for name in required if name not in files]
    if missing:
        raise IndexPersistError(f"{mpath} does not list {missing}; persist it again")
    try:
        resolved_root = root.resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise IndexPersistError(f"{root} cannot be resolved ({exc})") from exc
    for name, entry in files.items():
        path = root / name
        try:
            inside = resolved_root in path.resolve().parents
        except (OSError, RuntimeError, ValueError):  # symlink loop, NUL byte
            inside = False
        if not inside:
            raise IndexPersistError(f"{mpath} lists {name!r}, which is outside {root}")
        if not verify or (callable(verify) and not verify(name)):
            continue
        if not path.is_file():
            raise IndexPersistError(f"{path} is missing; persist it again")
        if path.stat().st_size != entry["bytes"] or _sha256(path) != entry["sha256"]:
            raise IndexPersistError(
                f"{path} is corrupt (size or sha256 differs from {MANIFEST_NAME}); persist it again"
            )
    return manifest


def read_bound_json(
    root: Path, manifest: dict[str, Any], name: str, *, max_bytes: int = MAX_MANIFEST_BYTES
) -> Any:
    """The JSON file ``root/name`` listed in ``manifest`` (:func:`read_manifest`), read once:
    its bytes are checked against the size and sha256 the manifest records, then parsed
    (:func:`parse_json`) — the bytes checked are the bytes used.

    Raises:
        IndexPersistError: not listed, missing, corrupt or not JSON, naming the file.
    """
    entry = manifest["files"].get(name)
    if entry is None:
        raise IndexPersistError(f"{root / MANIFEST_NAME} does not list {name}; persist it again")
    path = root / name
    try:
        raw = read_bounded(path, max_bytes)
    except FileNotFoundError:
        raise IndexPersistError(f"{path} is missing; persist it again") from None
    if len(raw) != entry["bytes"] or hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise IndexPersistError(
            f"{path} is corrupt (size or sha256 differs from {MANIFEST_NAME}); persist it again"
        )
    return parse_json(raw, path)


# ----------------------------------------------------------------------------- generations
def _read_current(target: Path) -> dict[str, Any] | None:
    path = target / CURRENT_NAME
    try:
        current = read_json(path, max_bytes=MAX_CURRENT_BYTES, max_depth=1)
    except FileNotFoundError:
        return None
    gen = current.get("generation") if isinstance(current, dict) else None
    prev = current.get("previous") if isinstance(current, dict) else None
    if not isinstance(gen, str) or not _GEN_RE.match(gen) or (
        prev is not None and (not isinstance(prev, str) or not _GEN_RE.match(prev))
    ):
        raise IndexPersistError(f"{path} names no valid generation; persist the index again")
    return {"generation": gen, "previous": prev}


def live_dir(target: str | os.PathLike[str]) -> Path:
    """The directory holding the live generation of ``target``.

    ``target/gen-…`` named by ``CURRENT``; or ``target`` itself when it has no ``CURRENT``
    (a single generation or a nested part).

    Raises:
        IndexPersistError: ``target`` is not a directory, or ``CURRENT`` is damaged or names a
            missing generation.
    """
    root = Path(target)
    if not root.is_dir():
        raise IndexPersistError(f"{root}: no such index directory")
    current = _read_current(root)
    if current is None:
        return root
    gen = root / current["generation"]
    if not gen.is_dir():
        raise IndexPersistError(
            f"{root / CURRENT_NAME} names {current['generation']}, which is missing; "
            "persist the index again"
        )
    return gen


def load_live(
    target: str | os.PathLike[str], loader: Callable[[Path], T], *, attempts: int = 3
) -> T:
    """``loader(live_dir(target))``, retried when a concurrent writer swapped generations.

    A reader that resolved ``CURRENT`` just before two quick swaps may find its generation
    removed; when the load fails and ``CURRENT`` has changed meanwhile, it is retried (up to
    ``attempts`` times). Other failures propagate unchanged.
    """
    root = Path(target)
    for attempt in range(attempts):
        before = _read_current(root) if root.is_dir() else None
        try:
            return loader(live_dir(root))
        except (IndexPersistError, FileNotFoundError):
            after = _read_current(root) if root.is_dir() else None
            if attempt + 1 >= attempts or after == before:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def _exclusive_lock(target: Path, timeout: float) -> Iterator[None]:
    path = target / LOCK_NAME
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise write_error(path, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IndexPersistError(f"{path} is not a regular file; remove it and retry")
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: msvcrt byte-range lock
            import msvcrt

            deadline = time.monotonic() + timeout
            while True:
                try:
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
                    break
                except OSError as exc:
                    if time.monotonic() >= deadline:
                        raise IndexPersistError(
                            f"{path}: another process is writing this index ({timeout:g} s)"
                        ) from exc
                    time.sleep(0.05)
            yield
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() >= deadline:
                    raise IndexPersistError(
                        f"{path}: another process is still writing this index after "
                        f"{timeout:g} s; retry later"
                    ) from exc
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _is_ours(target: Path) -> bool:
    names = {p.name for p in target.iterdir()}
    return (
        not names
        or CURRENT_NAME in names
        or LOCK_NAME in names
        or names == {STORE_DIR_NAME}  # a local store kept inside an index folder, built first
        or any(_GEN_RE.match(n) for n in names)
    )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _collect(target: Path, keep: set[str]) -> None:
    """Remove generations not in ``keep`` and killed writers' leftovers."""
    for entry in target.iterdir():
        if _GEN_RE.match(entry.name) and entry.name not in keep:
            _remove(entry)
        elif entry.name.startswith(".tmp-"):
            _remove(entry)


@contextlib.contextmanager
def replace_dir(target: str | os.PathLike[str], *, lock_timeout: float = 60.0) -> Iterator[Path]:
    """Yield an empty directory; on a clean exit it atomically becomes ``target``'s live one.

    Writers of the same ``target`` are serialised by a lock file. On an exception the new
    generation is removed and ``target`` is unchanged. ``target`` must be absent, empty, or a
    directory written by this module:
    anything else raises :class:`IndexPersistError` instead of being overwritten.
    """
    root = Path(target)
    if root.exists() and not root.is_dir():
        raise IndexPersistError(f"{root} is a file; pass a directory to persist into")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(root, exc) from exc
    if not _is_ours(root):
        raise IndexPersistError(
            f"{root} is a non-empty directory that is not a llama-index-car index; "
            "refusing to overwrite it (pass an empty or new directory)"
        )
    with _exclusive_lock(root, lock_timeout):
        current = _read_current_lenient(root)
        name = _GEN_PREFIX + uuid.uuid4().hex
        gen = root / name
        try:
            gen.mkdir()
        except OSError as exc:
            raise write_error(gen, exc) from exc
        try:
            yield gen
            _fsync_dir(gen)
            pointer = {"generation": name, "previous": current}
            tmp = root / f".tmp-{uuid.uuid4().hex}"
            fsync_write(tmp, json.dumps(pointer).encode("utf-8"))
            try:
                os.replace(tmp, root / CURRENT_NAME)
            except OSError as exc:
                raise write_error(root / CURRENT_NAME, exc) from exc
            _fsync_dir(root)
        except CarError:
            shutil.rmtree(gen, ignore_errors=True)
            raise
        except OSError as exc:  # a write inside the block: one typed line naming the file
            error = write_error(exc.filename or root, exc)  # before the space is freed
            shutil.rmtree(gen, ignore_errors=True)
            raise error from exc
        except BaseException:
            shutil.rmtree(gen, ignore_errors=True)
            raise
        _collect(root, {name} | ({current} if current else set()))


def _read_current_lenient(root: Path) -> str | None:
    """The live generation's name, or ``None`` (no pointer, or a damaged one to replace)."""
    try:
        current = _read_current(root)
    except IndexPersistError:
        return None
    if current is None or not (root / current["generation"]).is_dir():
        return None
    return str(current["generation"])


#: what numpy's ``.npy`` header parser raises on a damaged header (a dict cut in the middle
#: fails to tokenize: ``tokenize.TokenError``)
def _npy_errors() -> tuple[type[BaseException], ...]:
    import tokenize

    return (ValueError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError,
            EOFError, UnicodeDecodeError, tokenize.TokenError)


def read_npy(path: str | os.PathLike[str], *, dtype: Any, ndim: int) -> Any:
    """The C-ordered ``ndim``-dimensional ``dtype`` array in the ``.npy`` file ``path`` of an
    (untrusted) index folder: a regular file (:func:`open_regular`) whose header parses and
    declares exactly the file's size before anything is allocated; no pickle. Any other
    content is an :class:`IndexPersistError` naming the file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    import numpy as np

    fmt = np.lib.format
    want = np.dtype(dtype)
    with open_regular(path) as fh:
        try:
            version = fmt.read_magic(fh)
            if version == (1, 0):
                shape, fortran, found = fmt.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, found = fmt.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except _npy_errors() as exc:
            raise IndexPersistError(
                f"{path} is not a readable .npy array (damaged header: {exc}); "
                "rebuild the index"
            ) from exc
        except OSError as exc:
            raise IndexPersistError(f"{path} is unreadable ({exc}); rebuild the index") from exc
        if found != want or fortran or len(shape) != ndim:
            raise IndexPersistError(
                f"{path} holds a {found} array of shape {shape}, expected a {ndim}-D {want} "
                "array; rebuild the index"
            )
        count = 1
        for n in shape:
            count *= int(n)
        offset = fh.tell()
        size = os.fstat(fh.fileno()).st_size
        if offset + count * want.itemsize != size:
            raise IndexPersistError(
                f"{path}: its header declares {shape} ({offset + count * want.itemsize} bytes "
                f"with the header), the file has {size} bytes; rebuild the index"
            )
        try:
            arr = np.fromfile(fh, dtype=want, count=count)
        except (OSError, ValueError) as exc:
            raise IndexPersistError(f"{path} is unreadable ({exc}); rebuild the index") from exc
    if arr.size != count:
        raise IndexPersistError(f"{path} was truncated while read; rebuild the index")
    return arr.reshape(shape)
