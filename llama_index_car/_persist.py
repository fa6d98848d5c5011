"""Crash-safe, lock-serialised, manifest-bound persistence directories.

Both persisted directories of llama-index-car — a :class:`~llama_index_car.bm25.BM25Okapi`
(``save``) and a :class:`~llama_index_car.indices.CriterionAwareIndex` (``persist``; an index
folder is one, with its ``car_index.json`` inside each generation) — are written with this
module, so they share one set of guarantees (file reading and durable writes:
:mod:`llama_index_car._files`):

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
hand) is read as is by :func:`live_dir`.

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
from typing import Any, TypeVar

from llama_index_car._errors import CarError, IndexPersistError
from llama_index_car._files import (
    MAX_MANIFEST_BYTES,
    fsync_dir,
    fsync_write,
    parse_json,
    read_bounded,
    read_json,
    sha256_file,
    write_error,
)

T = TypeVar("T")

CURRENT_NAME = "CURRENT"
#: a sibling of the generations that is not ours to collect: a store inside an index folder
STORE_DIR_NAME = "store"
LOCK_NAME = ".lock"
MANIFEST_NAME = "manifest.json"
_GEN_PREFIX = "gen-"
_GEN_RE = re.compile(r"^gen-[0-9a-f]{32}$")
#: Largest ``CURRENT`` read (it holds two generation names, ~100 bytes).
MAX_CURRENT_BYTES = 4096
#: Called with the path of every ``manifest.json`` :func:`read_manifest` reads (e.g. a test
#: counting how many manifests a load reads); empty by default.
MANIFEST_OBSERVERS: list[Callable[[Path], None]] = []


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
        p.relative_to(root).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in _files_under(root)
    }
    manifest = {"kind": kind, "format_version": format_version, "files": files}
    if meta is not None:
        manifest["meta"] = meta
    fsync_write(root / MANIFEST_NAME, json.dumps(manifest, ensure_ascii=False, indent=1).encode())
    for d in {root} | {(root / f).parent for f in files}:
        fsync_dir(d)
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
        if path.stat().st_size != entry["bytes"] or sha256_file(path) != entry["sha256"]:
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
            fsync_dir(gen)
            pointer = {"generation": name, "previous": current}
            tmp = root / f".tmp-{uuid.uuid4().hex}"
            fsync_write(tmp, json.dumps(pointer).encode("utf-8"))
            try:
                os.replace(tmp, root / CURRENT_NAME)
            except OSError as exc:
                raise write_error(root / CURRENT_NAME, exc) from exc
            fsync_dir(root)
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
