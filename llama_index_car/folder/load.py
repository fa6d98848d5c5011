"""Open a folder: its index, with the query embedding it was built with and its store.

:func:`load_index` reads the live generation once — its one manifest, ``index.json``, the
record ``car_index.json`` (:func:`~llama_index_car.folder.record.record_of`) — resolves the
query embedding from the spec ``index.json`` records (the one resolution every load path
uses: :meth:`~llama_index_car.indices._storage.Generation.query_embedding`), opens a
store-backed folder's store only where the user names it
(:func:`~llama_index_car.folder.store.store_uri_for`), and returns the folder's
:class:`~llama_index_car.indices.CriterionAwareIndex` (``metadata``: the record).
:func:`load_retriever` returns one of its four retrievers:

* ``"dense"`` — the vector index retriever (cosine);
* ``"bm25"`` — :class:`~llama_index_car.retrievers.kiwi_bm25.KiwiBM25Retriever`;
* ``"hybrid"`` — weighted RRF of the two (``alpha`` weights dense, ``1 - alpha`` BM25,
  ``rrf_k = 60``);
* ``"car"`` — the offline criterion-aware retriever (dense + BM25 fused by z-score, the pool
  re-ranked by the folder's span index; with an ``llm``, the hybrid over
  LLM-hypothesis-expanded queries).

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:  # doctest: +SKIP
...     summary = build_index(demo_corpus_dir(), tmp)
...     hits = load_retriever(tmp, "car").retrieve("측구 깊이 기준")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_car._errors import ConfigurationError, IndexPersistError
from llama_index_car.folder.record import RECORD_NAME, record_of
from llama_index_car.folder.store import (
    check_store_holds,
    given_store,
    open_store_index,
    store_uri_for,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

    from llama_index_car.indices.criterion_aware import CriterionAwareIndex


def is_index_folder(persist_dir: str | Path) -> Path:
    """The live generation of the index folder ``persist_dir`` (one that holds a record).

    Raises:
        IndexPersistError: no such directory, or not an index folder (the message says how
            to make one).
    """
    from llama_index_car import _persist

    if not Path(persist_dir).is_dir():
        raise IndexPersistError(f"{persist_dir} is not an index folder (no such directory)")
    root = _persist.live_dir(persist_dir)
    if not (root / RECORD_NAME).is_file():
        raise IndexPersistError(
            f"{root / RECORD_NAME} not found; {persist_dir} is not an index folder "
            "(create one with: llama-car index SOURCE_DIR --persist DIR)"
        )
    return root


def load_index(
    persist_dir: str | Path,
    *,
    embed_model: BaseEmbedding | None = None,
    store: str | None = None,
) -> CriterionAwareIndex:
    """Open an index folder written by :func:`~llama_index_car.folder.build_index` (see the
    module docstring). Every file of the generation is read once.

    Args:
        persist_dir: the folder.
        embed_model: the query-time embedding; default: the provider recorded in the index,
            whatever ``$LLAMA_CAR_EMBED_MODEL`` says (``e5`` → offline multilingual-e5-small;
            ``use`` → offline USE; ``openai`` needs ``OPENAI_API_KEY``). A model whose name
            differs from the recorded one is refused, since its vectors are not comparable.
        store: the URI of a store-backed folder's store (default ``$LLAMA_CAR_STORE``),
            checked against the folder's record (kind, fingerprint); a store kept inside the
            folder is opened at ``DIR/store``. Nothing is created: a missing store path or
            collection is an error, and the store must hold the folder's nodes. A PostgreSQL
            password comes from the URI or ``PGPASSWORD``, sent only to the host named.

    Raises:
        IndexPersistError: a file is missing or damaged (named in the message).
        ConfigurationError: ``embed_model`` does not match the recorded embedding, or the
            store is not given, not the recorded one, or does not hold the folder's nodes.
    """
    from llama_index_car import _persist
    from llama_index_car.indices._storage import open_generation
    from llama_index_car.indices.criterion_aware import CriterionAwareIndex

    is_index_folder(persist_dir)
    folder = Path(persist_dir)
    opened: dict[str, Any] = {}

    def read(root: Path) -> CriterionAwareIndex:
        gen = open_generation(root)
        record = record_of(gen.documents, root)
        model = gen.query_embedding(embed_model)
        vector_index = None
        if record.get("store") is None and store is not None:  # $LLAMA_CAR_STORE may be set
            from llama_index_car.stores import _safe

            raise ConfigurationError(
                f"{persist_dir} keeps its vectors in the folder (built without --store); "
                f"drop --store {_safe(store)}"
            )
        if record.get("store") is not None:
            kept = record["store"]
            uri = store_uri_for(kept, folder, given_store(store), what=str(persist_dir))
            vector_index = open_store_index(uri, model, record["embed"].get("dimensions"),
                                            create=False, collection=str(kept["collection"]))
            opened["uri"] = uri
        index = gen.index(CriterionAwareIndex, embed_model=model, vector_index=vector_index)
        index.metadata = record
        return index

    index = _persist.load_live(persist_dir, read)
    index.persist_dir = folder
    if "uri" in opened and index.vector_index is not None:
        lex = index.snapshot.lexical  # a sample of ids: no node parsed
        check_store_holds(index.vector_index,
                          [lex.node_id(i) for i in range(min(len(lex.nodes), 64))], opened["uri"])
    return index


def read_vectors(persist_dir: str | Path) -> dict[str, list[float]]:
    """``{node_id: vector}`` kept in an index folder (its flat store, every row read); ``{}``
    for a store-backed folder."""
    import numpy as np

    from llama_index_car import _persist
    from llama_index_car.indices import _layout
    from llama_index_car.indices._storage import open_flat

    root = _persist.live_dir(persist_dir)
    manifest = _persist.read_manifest(
        root, kind=_layout.KIND, format_versions=(_layout.FORMAT_VERSION,),
        verify=lambda name: not _layout.checked_by_loader(name))
    if f"{_layout.FLAT_DIR}/flat.json" not in manifest["files"]:
        return {}
    state = open_flat(root, manifest)
    out: dict[str, list[float]] = {}
    for seg, i in state.live_rows():
        out[seg.node_id(i)] = seg.rows(np.asarray([i])).astype(np.float32)[0].tolist()
    return out


def load_retriever(
    persist_dir: str | Path,
    kind: str = "car",
    *,
    embed_model: BaseEmbedding | None = None,
    llm: LLM | None = None,
    similarity_top_k: int = 10,
    pool_top_k: int | None = None,
    alpha: float | None = None,
    rrf_k: int | None = None,
) -> BaseRetriever:
    """Open ``persist_dir`` and return a ``kind`` retriever (``car|hybrid|bm25|dense``).

    With ``llm`` the ``car`` retriever uses an :class:`LLMCriterionHypothesizer` over it
    instead of the offline configuration.

    >>> r = load_retriever("./car-index", "hybrid", similarity_top_k=5)  # doctest: +SKIP
    """
    index = load_index(persist_dir, embed_model=embed_model)
    hypothesizer = None
    if llm is not None:
        if kind != "car":
            raise ConfigurationError(f"llm is used by the 'car' retriever only, not {kind!r}")
        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

        hypothesizer = LLMCriterionHypothesizer(llm=llm)
    return index.as_retriever(  # an option ``kind`` does not use is refused there
        kind,
        similarity_top_k=similarity_top_k,
        pool_top_k=pool_top_k,
        alpha=alpha,
        rrf_k=rrf_k,
        hypothesizer=hypothesizer,
    )
