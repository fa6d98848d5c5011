"""``llama-car``: the command-line entry point.

Subcommands live in sibling modules, each exposing ``add_parser(subparsers)`` and
``run(args) -> int``, and optionally ``check_args(args)`` (cross-option checks raising
``ConfigurationError``, run before ``run``). Usage errors, the package's typed errors and
what the environment raises (``OSError``: a full disk, a read-only mount, a missing
permission; a store client's error: a server down) are one line on stderr, exit 2;
``LLAMA_CAR_DEBUG=1`` shows the traceback instead. Modules import only the standard library at top level; heavy imports
happen inside ``run`` so ``llama-car --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from llama_index_car._errors import CarError
from llama_index_car.cli._args import OneLineParser, one_line

#: set to any value to let errors through with their traceback (for bug reports)
DEBUG_ENV = "LLAMA_CAR_DEBUG"

#: subcommand name -> module implementing it
SUBCOMMANDS: dict[str, str] = {
    "demo": "llama_index_car.cli.demo",
    "index": "llama_index_car.cli.index",
    "query": "llama_index_car.cli.query",
    "eval": "llama_index_car.cli.eval",
    "probe": "llama_index_car.cli.probe",
    "preserve": "llama_index_car.cli.preserve",
    "serve": "llama_index_car.cli.serve",
    "mcp": "llama_index_car.cli.mcp",
}


#: bar size when stderr is a terminal that reports none (tqdm reads ``TQDM_NCOLS``/``NROWS``)
PROGRESS_COLUMNS, PROGRESS_ROWS = 100, 24


def _size_unsized_terminal() -> None:
    """A terminal that reports a size of 0×0 (a pseudo-terminal nobody sized: ``script -qc``
    run without a terminal, ``docker exec -t``, CI) gets no tqdm bar at all (tqdm sizes them
    -1 × -1): then bars are drawn :data:`PROGRESS_COLUMNS` × :data:`PROGRESS_ROWS`
    (``$TQDM_NCOLS``/``$TQDM_NROWS`` unless set, read by tqdm when it is first imported, which
    no subcommand does before this runs)."""
    try:
        fd = sys.stderr.fileno()
        if not os.isatty(fd):
            return
        size = os.get_terminal_size(fd)
    except (OSError, ValueError, AttributeError):  # not a real file: not a terminal
        return
    if size.columns <= 0:
        os.environ.setdefault("TQDM_NCOLS", str(PROGRESS_COLUMNS))
    if size.lines <= 0:
        os.environ.setdefault("TQDM_NROWS", str(PROGRESS_ROWS))


def build_parser() -> argparse.ArgumentParser:
    """The ``llama-car`` argument parser with every available subcommand."""
    parser = OneLineParser(
        prog="llama-car",
        description="Criterion-aware retrieval for Korean technical standards (HWPX).",
        epilog="Example: llama-car demo",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_parser(subparsers)
    return parser


def _environment_errors() -> tuple[type[BaseException], ...]:
    """What the world around a command raises: ``OSError`` and the store clients' errors."""
    from llama_index_car.stores import client_errors

    return client_errors()


def _environment_error(exc: BaseException) -> BaseException:
    """``exc`` as a message naming the file or the store and the cause."""
    if isinstance(exc, OSError) and not isinstance(exc, CarError):
        where = f"{exc.filename}: " if exc.filename else ""
        return OSError(f"{where}{exc.strerror or exc}")
    from llama_index_car.stores import store_error

    return store_error("the vector store", exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llama-car``; returns the process exit code (errors go to stderr, code 2)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help: argparse's own exit, unchanged
            raise
        return exc.code if isinstance(exc.code, int) else 2  # usage error, already printed
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[args.command])
    _terminate_as_interrupt()
    _size_unsized_terminal()
    with warnings.catch_warnings():
        if not os.environ.get(DEBUG_ENV):
            warnings.showwarning = _warning_printer(args.command)
        return _run(module, args)


def _terminate_as_interrupt() -> None:
    """SIGTERM ends a command as ^C does (exit 130, ``atexit`` handlers run: a pgserver this
    process started is stopped, store clients release their locks); by default it would kill
    the process on the spot."""
    import signal
    import threading

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread() and signal.getsignal(
            signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


def _warning_printer(command: str) -> Any:
    """``warnings.showwarning`` that prints one line per distinct message (a library's
    ``UserWarning`` is a note to the user, not a file/line report)."""
    seen: set[str] = set()

    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        text = one_line(message if isinstance(message, Warning) else Warning(message))
        if text not in seen:
            seen.add(text)
            print(f"llama-car {command}: warning: {text}", file=sys.stderr)

    return show


def _run(module: Any, args: argparse.Namespace) -> int:
    """``module.run(args)`` with the package's and the environment's errors as one line."""
    check = getattr(module, "check_args", None)  # cross-option checks, before any work
    try:
        if check is not None:
            check(args)
        return int(module.run(args) or 0)
    except CarError as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"llama-car {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except _environment_errors() as exc:  # a disk, a mount, a server: the user's to fix
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"llama-car {args.command}: error: {one_line(_environment_error(exc))}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
