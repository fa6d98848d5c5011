"""02 — Plug ``HWPXReader`` into LlamaIndex's ``SimpleDirectoryReader``.

``file_extractor`` maps the ``.hwpx`` suffix to the reader, so a mixed folder (HWPX next to
plain text, here a README) loads in one call; every HWPX document keeps its cell-coordinate
structure for ``HWPXNodeParser``.

Run: python examples/02_simple_directory_reader.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from llama_index.core import SimpleDirectoryReader
from llama_index.readers.hwpx import HWPXNodeParser, HWPXReader, node_cells

from llama_index_car.demo import demo_corpus_files

with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    for path in demo_corpus_files()[:3]:
        shutil.copy(path, folder / path.name)
    (folder / "README.txt").write_text("사내 설계지침 모음 (HWPX)", encoding="utf-8")

    reader = SimpleDirectoryReader(
        input_dir=str(folder), file_extractor={".hwpx": HWPXReader()}, filename_as_id=True
    )
    documents = reader.load_data()

for doc in documents:
    print(f"{doc.metadata['file_name']:<24} tables={doc.metadata.get('table_count', '-')}")

nodes = HWPXNodeParser().get_nodes_from_documents(
    [d for d in documents if d.metadata["file_name"].endswith(".hwpx")]
)
table_node = next(n for n in nodes if n.metadata.get("table_index") is not None)
print(f"{len(nodes)} section nodes; a table node: {table_node.metadata['section_title']}")
cells = node_cells(table_node)  # decodes the node's "cells" JSON string
print(
    "cells (table, row, col, row_span, col_span, text):",
    [(c.table, c.row, c.col, c.row_span, c.col_span, c.text) for c in cells[:2]],
)
print("node id (uuid5 of document id + chunk index):", table_node.node_id)
