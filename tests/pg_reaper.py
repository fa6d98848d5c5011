"""Stop the PostgreSQL servers a test session started, however the session ends.

pgserver starts ``postgres -D DATA`` detached (its parent becomes init), so a pytest that is
interrupted (SIGINT, SIGTERM, SIGKILL, a killed xdist worker) before its fixtures are torn
down leaves it running. :func:`stop_postgres_under` finds every postmaster whose data folder
lies under the given roots (``/proc``: its command line ``postgres -D DATA``) and asks it for
a fast shutdown (SIGINT), waiting until it has exited.

Run as a script (``python tests/pg_reaper.py ROOT...``), it is the session's watchdog: it
blocks on its stdin, the write end of which only the test process holds, and at end of file
— the test process closed it, or died in any way — stops the servers under ``ROOT``.
Standard library only, so the watchdog starts in milliseconds.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

__all__ = ["postmasters_under", "stop_postgres_under"]


def postmasters_under(roots: list[Path]) -> dict[int, Path]:
    """``{pid: data folder}`` of the running postmasters whose data folder is under a root."""
    found: dict[int, Path] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    resolved = [Path(os.path.realpath(r)) for r in roots]
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"postgres") or b"-D" not in argv:
            continue
        at = argv.index(b"-D")
        if at + 1 >= len(argv):
            continue
        data = Path(os.path.realpath(os.fsdecode(argv[at + 1])))
        if any(data == r or r in data.parents for r in resolved):
            found[int(entry.name)] = data
    return found


def stop_postgres_under(roots: list[Path], timeout: float = 30.0) -> list[Path]:
    """Fast-shutdown (SIGINT) every postmaster under ``roots``, then wait for each to exit
    (SIGKILL after ``timeout`` seconds). Returns the data folders that were running."""
    running = postmasters_under(roots)
    for pid in running:
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout
    for pid in running:
        if not _wait_exit(pid, max(0.0, deadline - time.monotonic())):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait_exit(pid, timeout)
    return list(running.values())


def _wait_exit(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` (not our child) has exited: a pidfd becomes readable then."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


def _watch(roots: list[Path]) -> int:
    # the test process's signals (^C to its process group) must not stop the watchdog first
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdin.buffer.read()
    stop_postgres_under(roots)
    return 0


if __name__ == "__main__":  # pragma: no cover - run by the conftest as a watchdog
    raise SystemExit(_watch([Path(p) for p in sys.argv[1:]]))
