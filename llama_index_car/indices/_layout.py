"""The names of one index generation's files (no imports: what a caller that only reads the
manifest, e.g. a no-op ``--update``, needs without loading LlamaIndex)."""

from __future__ import annotations

#: 6: the vectors of an index that keeps them itself are a flat store's files in ``flat/``;
#: the nodes a record set ``nodes.*`` read when used (index.json no longer lists them), the
#: spans likewise (``spans.*``: records, row offsets, memory-mapped vectors)
#: (5: one generation of flat files bound by one manifest, BM25 arrays included; index.json
#: records the embedding (its spec) along with the tokenizer)
FORMAT_VERSION = 6
KIND = "CriterionAwareIndex"
INDEX_NAME = "index.json"
#: the nodes' record set (``_node_records``): ``nodes.blob``, ``nodes.*.npy``, this file
NODES_NAME = "nodes.meta.json"
NODES_PREFIX = "nodes."
BM25_PREFIX = "bm25."
#: the flat store's files (``flat_store.write_state``), vectors kept in the folder
FLAT_DIR = "flat"
#: the span index (``SpanIndex.persist_records``): ``spans.blob`` and the record tables,
#: ``spans.rows.npy``, ``spans.vectors.npy``, this file
SPANS_META = "spans.meta.json"
SPANS_PREFIX = "spans."


def checked_by_loader(name: str) -> bool:
    """Whether a file of a generation is checked by its own loader rather than hashed with
    the manifest: the BM25 arrays, the flat store's arrays and records and the nodes' record
    set (size-checked and memory-mapped; their small JSON files are hashed)."""
    return name.startswith(BM25_PREFIX) or (
        name.startswith((FLAT_DIR + "/", NODES_PREFIX, SPANS_PREFIX))
        and not name.endswith(".json"))
