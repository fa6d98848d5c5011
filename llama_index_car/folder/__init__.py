"""The folder product: a folder of Hangul documents (binary HWP 5 ``.hwp``, HWPX ``.hwpx``,
HWPML ``.hml``, mixed freely) made into a self-contained, crash-safe index folder, updated in
place and opened again::

    PERSIST_DIR/CURRENT → gen-…/   one generation of the folder's CriterionAwareIndex
      car_index.json      the folder's record (record.py): format_version, embedding spec,
                          chunking, counts, failures, sources (sha256, node ids, text digest,
                          alias_of), the store record
      index.json, nodes.*, bm25.*.npy   the index: tokenizer and embedding specs, the
                          nodes (a record set read when used), BM25 arrays
                          (llama_index_car.indices._storage); with a Milvus or
                          Qdrant store bm25_df.json instead (the rows in the store)
      flat/               the vectors: the exact flat store's arrays and records,
                          memory-mapped at load (absent with a store)
      spans.*             every node's sentences and table rows and their vectors
                          (records + float16 vectors, read when used; in the folder also
                          for store-backed indexes)
      manifest.json       every file's size and sha256: the only manifest

Modules: :mod:`~llama_index_car.folder.sources` (files, readers, parsing),
:mod:`~llama_index_car.folder.keys` (content keys, twins), :mod:`~llama_index_car.folder.record`
(``car_index.json``), :mod:`~llama_index_car.folder.store` (a store's record and where it is
opened), :mod:`~llama_index_car.folder.build`, :mod:`~llama_index_car.folder.update` (the
pending-file protocol), :mod:`~llama_index_car.folder.load`, :mod:`~llama_index_car.folder.ray`
(the per-file work on a Ray cluster). One set of options for all three builders:
:class:`BuildOptions`. Names resolve lazily (PEP 562): a no-op ``--update`` decides from the
record without importing LlamaIndex.

>>> from llama_index_car.folder import BuildOptions
>>> BuildOptions(embed="use").chunk_size is None
True
"""

from __future__ import annotations

from llama_index_car._lazy import lazy_exports

_EXPORTS = {
    "BuildOptions": "llama_index_car.folder.options",
    "BuildSummary": "llama_index_car.folder.record",
    "FileFailure": "llama_index_car.folder.sources",
    "NothingToIndexError": "llama_index_car._errors",
    "build_index": "llama_index_car.folder.build",
    "build_index_ray": "llama_index_car.folder.ray",
    "load_index": "llama_index_car.folder.load",
    "load_retriever": "llama_index_car.folder.load",
    "update_index": "llama_index_car.folder.update",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
