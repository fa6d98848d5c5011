"""``llama-car index SOURCE_DIR --persist DIR``: build a local criterion-aware index folder.

``--update`` re-indexes only the files whose content (sha256) changed or that are new, and
removes the nodes of files that vanished; options it is given must match the folder's
manifest (``--chunk-size``, ``--chunk-overlap``, ``--embed``, ``--store``), and omitted ones
are taken from it. ``--store`` keeps the vectors in a real vector store
(``pip install 'llama-index-car[stores]'``) and BM25 and the manifest in ``DIR``: a bare
``qdrant``, ``chroma``, ``milvus`` or ``pgserver`` keeps the store inside ``DIR/store``; a URI
(``milvus://PATH.db``, ``milvus+http(s)://HOST:PORT/DB`` with ``LLAMA_CAR_MILVUS_TOKEN``,
``postgresql://USER@HOST:PORT/DB`` with ``PGPASSWORD``, ``pgserver://DIR``, ``qdrant://DIR``,
``qdrant+http(s)://HOST:PORT`` with ``LLAMA_CAR_QDRANT_API_KEY``, ``chroma://DIR``) keeps it
there, and queries and
updates need the same ``--store`` again (or ``$LLAMA_CAR_STORE``): an index folder records the
store's kind and a fingerprint, never where to connect.

Reads every ``*.hwp`` (binary HWP 5), ``*.hwpx`` and ``*.hml`` (HWPML) under ``SOURCE_DIR``
(recursively, mixed freely; a file whose bytes are another of the three formats is read by its
content, with one warning), splits it into section, paragraph
and table nodes, embeds them (offline multilingual-e5-small by default, through the
shared embedding cache so a rebuild re-embeds nothing) and writes the vector store, the Kiwi
BM25 index and the criterion hypothesizer into ``DIR`` (see :mod:`llama_index_car.folder`).
Files that fail to parse are reported on stderr and skipped; the summary counts them.

Exit codes: 0 indexed (even with some failed files), 1 nothing could be indexed,
2 bad usage / missing key or extra.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from llama_index_car.cli._args import (
    STORE_HELP,
    add_cache_and_progress_options,
    add_embed_option,
    existing_path,
    nonneg_int,
    output_dir,
    positive_int,
    reader_warnings_to_stderr,
    show_progress,
    store_uri,
    subcommand,
)

EPILOG = """example:
  llama-car index ./guidelines --persist ./car-index
  llama-car index ./guidelines --persist ./car-index --update
  llama-car index ./guidelines --persist ./car-qdrant --store qdrant
  llama-car index ./guidelines --persist ./car-index --ray   # on a local Ray cluster
  llama-car query ./car-index "측구 깊이 설치기준" --retriever car --explain
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``index`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "index",
        help="index a folder of HWP, HWPX and HML files into a local index folder",
        doc=__doc__,
        epilog=EPILOG,
    )
    p.add_argument(
        "source", metavar="SOURCE_DIR", type=existing_path,
        help="folder of .hwp, .hwpx and .hml files, searched recursively (or one file)",
    )
    p.add_argument(
        "--persist", metavar="DIR", type=output_dir, required=True, help="output index folder"
    )
    add_embed_option(p)
    p.add_argument(
        "--chunk-size", type=positive_int, default=None,
        help="tokens per chunk (1000; --update: the folder's)",
    )
    p.add_argument(
        "--chunk-overlap", type=nonneg_int, default=None,
        help="token overlap, < --chunk-size (150; --update: the folder's)",
    )
    p.add_argument(
        "--store", metavar="URI", type=store_uri, default=None,
        help="keep vectors in a store: qdrant | chroma | milvus | pgserver (inside DIR) or "
        f"{STORE_HELP} (outside: give it again to query and --update; needs the [stores] "
        "extra; with Milvus or Qdrant the BM25 rows live there too)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="write into a non-empty DIR")
    mode.add_argument(
        "--update", action="store_true",
        help="re-index only changed or new files, remove vanished ones (DIR must exist)",
    )
    p.add_argument(
        "--no-spans", dest="spans", action="store_false",
        help="skip the span index (spans.json, span_vectors.npy: sentences and table rows, "
        "embedded; about as many characters again as the nodes) that the offline car re-ranks "
        "with (--update: the folder's choice)",
    )
    p.add_argument(
        "--ray", metavar="ADDRESS", nargs="?", const="local", default=None,
        help="read, parse, tokenize and embed on Ray (extra [ray]): no ADDRESS = a local "
        "cluster on this machine; 'auto' or 'ray://HOST:10001' = join that cluster",
    )
    add_cache_and_progress_options(p)
    return p


def check_args(args: argparse.Namespace) -> None:
    """Cross-option checks, before anything is read: ``--chunk-overlap < --chunk-size``;
    ``--update`` needs an index folder."""
    from llama_index_car._errors import ConfigurationError

    size = 1000 if args.chunk_size is None else args.chunk_size
    overlap = 150 if args.chunk_overlap is None else args.chunk_overlap
    if (args.chunk_size is not None or args.chunk_overlap is not None or not args.update) and (
        overlap >= size
    ):
        raise ConfigurationError(
            f"--chunk-overlap {overlap} must be smaller than --chunk-size {size}"
        )
    if args.update:
        from llama_index_car.folder.record import read_record

        read_record(args.persist)  # --update needs an existing, intact index folder


def run(args: argparse.Namespace) -> int:
    """Build the index; print failures to stderr as they happen and a summary to stdout."""
    from llama_index_car._errors import NothingToIndexError
    from llama_index_car.folder.build import build_index
    from llama_index_car.folder.options import BuildOptions
    from llama_index_car.folder.sources import FileFailure

    def report(failure: FileFailure) -> None:
        print(f"skipped {failure.path}: {failure.error}", file=sys.stderr)

    build: Any = build_index
    if args.update:
        if args.ray is not None:  # Ray builds a new folder; an update embeds what changed
            from llama_index_car._errors import ConfigurationError

            raise ConfigurationError(
                "--ray cannot be combined with --update yet; index without --ray, or without "
                "those options"
            )
        from llama_index_car.folder.update import update_index

        build = update_index
    elif args.ray is not None:  # same arguments, per-file work on Ray
        from llama_index_car.folder.ray import ray_builder

        build = ray_builder(args.ray)
    try:
        with reader_warnings_to_stderr():
            summary = build(
                args.source,
                args.persist,
                BuildOptions(
                    embed=args.embed,
                    chunk_size=args.chunk_size,
                    chunk_overlap=args.chunk_overlap,
                    spans=args.spans,
                    store=args.store,
                    cache_dir=args.cache_dir,
                    overwrite=args.overwrite,
                    show_progress=show_progress(args),
                    on_error=report,
                ),
            )
    except NothingToIndexError as exc:
        print(f"llama-car index: {exc}", file=sys.stderr)
        return 1
    print(summary.line())
    if summary.failures:
        print(f"{len(summary.failures)} file(s) skipped; see the messages above", file=sys.stderr)
    return 0
