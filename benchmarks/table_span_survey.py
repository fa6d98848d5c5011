"""Survey: table spans over the shared corpus (issue 37, item 12), the figures in CHANGELOG.

Every HWPX file under ``../shared/corpus`` (``bad/`` left out) is read with the defaults and
cut by ``HWPXNodeParser(chunk_size=1000, chunk_overlap=150)`` (the pipeline's); for each node
the span candidates (``span_candidates``: sentences, table rows and their cells) are checked
against the node text:

- ``rows on their own row``: the row span's ``text[start:end]`` is one ``<tr>…</tr>`` or one
  line (markdown or layout table), not a table block;
- ``cells on their own text``: the cell's ``text[start:end]``, HTML/markdown escapes undone,
  is the cell text (not its row, not the table);
- ``caption rows``: tables whose row 0 is one non-empty cell merged over the whole table
  (width >= 2), and where :func:`~llama_index_car.spans.table_header` puts their header.

    python benchmarks/table_span_survey.py [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import html
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _ws(s: str) -> str:
    return " ".join(s.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO / ".." / "shared" / "corpus")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader

    from llama_index_car.postprocessors.criterion_spans import span_candidates

    try:
        from llama_index_car.spans import table_header
    except ImportError:  # the code before issue 37: row 0 was every table's header
        table_header = None
    stats: Counter[str] = Counter()
    nodes_parser = HWPXNodeParser(chunk_size=1000, chunk_overlap=150)
    for path in sorted(p for p in args.corpus.rglob("*.hwpx") if "bad" not in p.parts):
        reader = HWPXReader()
        try:
            tables = reader.load_tables(path)
            docs = reader.load_data(path)
        except Exception:  # noqa: BLE001 - a file the reader refuses is counted, not surveyed
            stats["files refused"] += 1
            continue
        stats["files"] += 1
        for t in tables:
            stats["tables"] += 1
            width = max((c.col + c.col_span for c in t.cells), default=0)
            row0 = [c for c in t.cells if c.row == 0]
            if width >= 2 and t.n_rows >= 2 and len(row0) == 1 and row0[0].col_span == width \
                    and row0[0].text.strip():
                stats["caption rows"] += 1
                if table_header is not None:
                    rows = table_header(t.cells).rows
                    stats[f"  header now at row {rows[0] if rows else 'none'}"] += 1
        for node in nodes_parser.get_nodes_from_documents(docs):
            text = node.get_content()
            for c in span_candidates(node):
                seg = text[c.start : c.end]
                if c.kind == "row":
                    stats["row spans"] += 1
                    own = (seg.startswith("<tr") and seg.count("<tr") == 1) or (
                        "\n" not in seg and not seg.startswith("<table"))
                    stats["  rows on their own row"] += own
                elif c.kind == "cell":
                    stats["cell spans"] += 1
                    plain = _ws(html.unescape(seg.replace("<br>", "\n")).replace("\\|", "|"))
                    own = plain == c.text and not seg.startswith(("<tr", "|"))
                    stats["  cells on their own text"] += own
    for key in ("files", "files refused", "tables", "caption rows"):
        print(f"{key:32} {stats.pop(key, 0):>8,}")
    for key in sorted(k for k in stats if k.startswith("  header")):
        print(f"{key:32} {stats.pop(key):>8,}")
    for key in ("row spans", "  rows on their own row", "cell spans", "  cells on their own text"):
        print(f"{key:32} {stats.get(key, 0):>8,}")


if __name__ == "__main__":
    main()
