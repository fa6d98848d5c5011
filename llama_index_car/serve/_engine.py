"""The one adapter between the service and an index folder: every touch of the folder's files,
its ``CURRENT`` pointer and the index's views is here (``app``, ``_mcp`` and ``_ray`` call
only :class:`FolderEngine`).

* :meth:`FolderEngine.open` reads the folder once (:func:`llama_index_car.folder.load_index`:
  the query embedding is the provider recorded in the folder) and warms every model (Kiwi's and
  the embedding engine's at once, then the arrays and the span index with one CAR query), so
  ready means ready.
* Each request takes a :meth:`~FolderEngine.lease` on the current :class:`Generation` and reads
  only it; the response names ``generation.name`` (the folder's ``gen-…`` directory).
* :meth:`~FolderEngine.refresh` (the service calls it every ``reload_interval`` seconds) reads
  ``CURRENT``; when another process (``llama-car index --update``) has published a new
  generation it opens and warms it beside the old one, then swaps the reference in one
  assignment. Requests holding the old generation finish on it; it is dropped (its store client
  closed when it is not the new one's) when the last of them ends. A generation that fails to
  open is logged and retried at the next poll; the old one keeps serving.
* Retrieval: ``index.as_retriever(kind, criterion_spans=3)`` views (cached per kind and
  ``top_k``; the view attaches the spans, none for a folder built without them, as for
  ``llama-car query``); answers: ``index.as_citation_engine`` (``SpanCitationQueryEngine``);
  without an LLM its failure path gives the cited retrieval-only answer (:class:`NoLLM`).
* Queries pass :func:`llama_index_car.query_guard.clean_query` first (length limit, control
  and bidi characters removed); filters are LlamaIndex ``MetadataFilters`` JSON, checked by
  the views.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM

from llama_index_car._errors import CarError, ConfigurationError
from llama_index_car.serve._html import segments, table_html

logger = logging.getLogger(__name__)

#: retriever kinds a request may name (``RETRIEVER_KINDS`` of the index)
KINDS: tuple[str, ...] = ("car", "hybrid", "bm25", "dense")
#: the query every generation answers once before it is served (loads every model)
WARM_QUERY = "설치기준"
#: criterion spans attached per hit
SPANS_PER_HIT = 3
#: retriever views kept per generation (per kind and top_k)
MAX_VIEWS = 64
#: span keys a hit carries (what the postprocessor writes; anything else is left out)
SPAN_KEYS = ("kind", "text", "score", "start", "end", "table_index", "row", "col",
             "row_span", "col_span", "header", "row_header")


class NoLLMError(ConfigurationError):
    """No LLM is configured (``llama-car serve --llm none``): answers are retrieval-only."""


class NoLLM(CustomLLM):
    """The LLM of a service started without one: every call raises :class:`NoLLMError`, so
    :class:`~llama_index_car.query_engines.SpanCitationQueryEngine` answers with its cited
    retrieval-only answer (``fallback=True``, ``error="NoLLMError"``) on its one failure path."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="none")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NoLLMError("no LLM is configured (llama-car serve --llm none)")

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        raise NoLLMError("no LLM is configured (llama-car serve --llm none)")


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def span_json(span: dict[str, Any]) -> dict[str, Any]:
    """A criterion span as the API returns it: the known keys, numbers finite or ``None``."""
    out: dict[str, Any] = {}
    for key in SPAN_KEYS:
        value = span.get(key)
        if key in ("score",):
            out[key] = _finite(value)
        elif key in ("text", "kind", "header", "row_header"):
            out[key] = _text(value)
        else:
            out[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    return out


@dataclass
class Answer:
    """One answer: its text (or the token stream still to come), every numbered source and
    the citations (sources the text cites), as JSON-ready dicts."""

    text: str
    sources: list[dict[str, Any]]
    citations: list[dict[str, Any]]
    fallback: bool
    error: str | None


@dataclass
class Generation:
    """One opened generation of the folder: its name, the index, the nodes by id, and the
    views built over it (cached). ``leases``: requests reading it."""

    name: str
    index: Any
    nodes: Mapping[str, Any]  # read when looked up (a loaded index's nodes are records)
    loaded_at: float
    leases: int = 0
    retired: bool = False
    _views: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def view(self, key: tuple[Any, ...], build: Any) -> Any:
        """The view cached under ``key``, built by ``build()`` on first use."""
        with self._lock:
            found = self._views.get(key)
        if found is not None:
            return found
        made = build()
        with self._lock:
            if len(self._views) >= MAX_VIEWS:
                self._views.pop(next(iter(self._views)))
            return self._views.setdefault(key, made)


def read_generation_name(folder: Path) -> str:
    """The live generation's directory name (``gen-…`` named by ``CURRENT``; the folder's own
    name for a folder without ``CURRENT``), read as a bounded file.

    Raises:
        IndexPersistError: ``CURRENT`` is damaged or names a missing generation.
    """
    from llama_index_car import _persist

    return _persist.live_dir(folder).name


class FolderEngine:
    """Retrieval, answers and node views over one index folder, following its generations
    (module docstring).

    Args:
        folder: the index folder (``llama-car index … --persist DIR``); read only.
        store: the vector store URI of a folder built with ``--store`` (default
            ``$LLAMA_CAR_STORE``).
        llm: the LlamaIndex LLM answers are written with; ``None``: retrieval-only answers.
        llm_timeout: seconds for one answer's LLM call (an ``llm_deadline``).
        embed_model: the query embedding (default: the provider recorded in the folder).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        store: str | None = None,
        llm: Any | None = None,
        llm_timeout: float = 30.0,
        embed_model: Any | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.store = store
        self.llm = llm
        self.llm_timeout = float(llm_timeout)
        self._embed_model = embed_model
        self._current: Generation | None = None
        self._swap = threading.Lock()  # one refresh at a time
        self._leases = threading.Condition()
        self._failed: dict[str, int] = {}
        #: names this engine (one per process or Ray replica) in ``/readyz``
        self.replica = uuid.uuid4().hex[:12]

    # ------------------------------------------------------------------ generations
    @property
    def current(self) -> Generation | None:
        """The generation new requests read (``None`` before :meth:`open`)."""
        return self._current

    def open(self) -> Generation:
        """Open the live generation, warm it and make it current."""
        with self._swap:
            gen = self._load()
            self._current = gen
            return gen

    def _load(self) -> Generation:
        """The live generation, opened and warmed (retried when ``CURRENT`` moved meanwhile)."""
        from llama_index_car.folder import load_index

        for _ in range(5):
            before = read_generation_name(self.folder)
            index = load_index(self.folder, embed_model=self._embed_model, store=self.store)
            if read_generation_name(self.folder) != before:
                continue  # swapped while loading: load_index may have read the next one
            if self._embed_model is None:
                self._embed_model = index.embed_model  # later generations reuse the model
            gen = Generation(before, index, index.snapshot.lexical.by_id(), time.time())
            self._warm(gen)
            return gen
        raise CarError(f"{self.folder}: the generation kept changing while it was opened")

    def _warm(self, gen: Generation) -> None:
        """Load Kiwi's model (in a thread) while the embedding engine embeds a first query,
        then run one CAR query (BM25 without vectors): every model and array is in memory
        before the generation is served."""
        tokenizer = threading.Thread(target=gen.index.tokenizer.tokenize, args=(WARM_QUERY,))
        tokenizer.start()
        try:
            if gen.index.vector_index is not None:
                gen.index.embed_model.get_query_embedding(WARM_QUERY)
        finally:
            tokenizer.join()
        self.hits(gen, WARM_QUERY, "car" if gen.index.vector_index is not None else "bm25", 3)

    def refresh(self) -> Generation | None:
        """If ``CURRENT`` names another generation, open it and swap it in; return it
        (``None``: nothing new). A generation that fails to open is logged and skipped until
        it changed again or three attempts failed; the old one keeps serving."""
        with self._swap:
            name = read_generation_name(self.folder)
            old = self._current
            if old is not None and name == old.name:
                return None
            if self._failed.get(name, 0) >= 3:
                return None
            try:
                gen = self._load()
            except (CarError, OSError) as exc:
                self._failed[name] = self._failed.get(name, 0) + 1
                logger.warning("llama-car serve: generation %s not opened: %s", name, exc)
                raise
            self._current = gen  # one assignment: new requests read gen from here on
            self._failed.clear()
            if old is not None:
                with self._leases:
                    old.retired = True
                    if old.leases == 0:
                        self._drop(old, gen)
            logger.info("llama-car serve: now serving %s (was %s)", gen.name,
                        old.name if old else None)
            return gen

    @contextlib.contextmanager
    def lease(self) -> Iterator[Generation]:
        """The current generation, held for the block (a swap waits for no one: the old
        generation is dropped when its last lease ends)."""
        with self._leases:
            gen = self._current
            if gen is None:
                raise CarError("the index is not open yet")
            gen.leases += 1
        try:
            yield gen
        finally:
            with self._leases:
                gen.leases -= 1
                if gen.retired and gen.leases == 0:
                    self._drop(gen, self._current)

    @staticmethod
    def _drop(old: Generation, new: Generation | None) -> None:
        """Release ``old``'s views and, when its vector store client is not ``new``'s, close it."""
        old._views.clear()
        store = getattr(old.index.vector_index, "vector_store", None)
        newer = getattr(getattr(new, "index", None), "vector_index", None)
        if store is None or store is getattr(newer, "vector_store", None):
            return
        if type(store).__name__ in ("SimpleVectorStore", "FlatVectorStore"):  # no client
            return
        from llama_index_car.stores import close_vector_store

        with contextlib.suppress(Exception):  # a client already gone: nothing to release
            close_vector_store(store)

    # ------------------------------------------------------------------ retrieval
    @staticmethod
    def _filters(filters: dict[str, Any] | None) -> Any:
        if filters is None:
            return None
        from llama_index.core.vector_stores.types import MetadataFilters

        try:
            return MetadataFilters.model_validate(filters)
        except ValueError as exc:
            first = exc.errors()[0] if hasattr(exc, "errors") else {}
            where = ".".join(str(p) for p in first.get("loc", ())) or "filters"
            raise ConfigurationError(
                f"filters: {where}: {first.get('msg', exc)} (LlamaIndex MetadataFilters JSON: "
                '{"filters": [{"key": "file_name", "value": "a.hwpx", "operator": "=="}]})'
            ) from None

    def _views_for(self, gen: Generation, kind: str, top_k: int, filters: Any) -> Any:
        if kind not in KINDS:
            raise ConfigurationError(f"retriever {kind!r} is unknown; use one of {', '.join(KINDS)}")

        def build() -> Any:  # the view attaches the spans (a folder built without: none)
            spans = SPANS_PER_HIT if gen.index.spans is not None else None
            return gen.index.as_retriever(kind, similarity_top_k=top_k, filters=filters,
                                          criterion_spans=spans)

        if filters is not None:
            return build()  # filtered views are per request
        return gen.view((kind, top_k), build)

    def hits(self, gen: Generation, query: str, kind: str, top_k: int,
             filters: dict[str, Any] | None = None) -> list[Any]:
        """The ``top_k`` ``NodeWithScore`` hits of ``kind`` with their criterion spans."""
        from llama_index_car.query_guard import clean_query

        text = clean_query(query)  # QueryError: too long / not a str
        if not text.strip():
            return []
        return list(self._views_for(gen, kind, top_k, self._filters(filters)).retrieve(text))

    def retrieve(self, gen: Generation, query: str, kind: str, top_k: int,
                 filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The hits as JSON-ready dicts (:meth:`hit_json`)."""
        found = self.hits(gen, query, kind, top_k, filters)
        return [self.hit_json(rank, h, kind) for rank, h in enumerate(found, start=1)]

    @staticmethod
    def hit_json(rank: int, hit: Any, kind: str) -> dict[str, Any]:
        """One hit: node id, file, section title, heading path, score, each channel's rank
        and score, the criterion spans, and the hypothesis/fallback of a fused retriever."""
        meta = dict(hit.node.metadata or {})
        explain = meta.get("car_explain") or {}
        channels = {
            str(name): {"rank": ch.get("rank") if isinstance(ch.get("rank"), int) else None,
                        "score": _finite(ch.get("score"))}
            for name, ch in (explain.get("channels") or {}).items() if isinstance(ch, dict)
        }
        if not channels and kind in ("bm25", "dense"):
            channels = {"lexical" if kind == "bm25" else "dense":
                        {"rank": rank, "score": _finite(hit.score)}}
        spans = meta.get("criterion_spans") or []
        return {
            "rank": rank,
            "node_id": hit.node.node_id,
            "file": _text(meta.get("file_name")) or "",
            "section_title": _text(meta.get("section_title") or meta.get("title")) or "",
            "heading_path": _text(meta.get("heading_path")) or "",
            "table_index": meta.get("table_index") if isinstance(meta.get("table_index"),
                                                                  int) else None,
            "score": _finite(hit.score),
            "channels": channels,
            "spans": [span_json(s) for s in spans if isinstance(s, dict)],
            "hypothesis": _text(explain.get("hypothesis")),
            "fallback": bool(explain.get("fallback", False)),
        }

    # ------------------------------------------------------------------ answers
    def _citation_engine(self, gen: Generation, kind: str, top_k: int, streaming: bool) -> Any:
        if kind not in KINDS:
            raise ConfigurationError(f"retriever {kind!r} is unknown; use one of {', '.join(KINDS)}")
        llm = self.llm if self.llm is not None else NoLLM()
        return gen.view(("answer", kind, top_k, streaming), lambda: gen.index.as_citation_engine(
            llm, kind, similarity_top_k=top_k, criterion_spans=SPANS_PER_HIT,
            streaming=streaming, llm_timeout=self.llm_timeout if self.llm is not None else None))

    @staticmethod
    def _source_json(source: Any) -> dict[str, Any]:
        """A source node in llama-index-server's ``SourceNodes`` shape (``id``, ``metadata``,
        ``score``, ``text``, ``url``)."""
        meta = {k: v for k, v in dict(source.node.metadata or {}).items()
                if v is None or isinstance(v, str | int | float | bool)}
        return {"id": source.node.node_id, "metadata": meta, "score": _finite(source.score),
                "text": source.node.get_content(), "url": None}

    @staticmethod
    def _citations(metadata: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for c in metadata.get("citations") or []:
            d = c.to_dict()
            d["score"] = _finite(d.get("score"))
            out.append(d)
        return out

    def answer(self, gen: Generation, query: str, kind: str, top_k: int) -> Answer:
        """The cited answer (retrieval-only without an LLM or when the LLM fails)."""
        from llama_index_car.query_guard import clean_query

        text = clean_query(query)
        engine = self._citation_engine(gen, kind, top_k, streaming=False)
        response = engine.query(text if text.strip() else " ")
        meta = dict(response.metadata or {})
        return Answer(str(response.response or ""),
                      [self._source_json(s) for s in response.source_nodes],
                      self._citations(meta), bool(meta.get("fallback")), meta.get("error"))

    def answer_stream(
        self, gen: Generation, query: str, kind: str, top_k: int
    ) -> tuple[list[dict[str, Any]], Iterator[str], Any]:
        """``(sources, tokens, finish)``: the numbered sources at once, the answer's token
        deltas, and ``finish()`` → the :class:`Answer` once the tokens are consumed."""
        from llama_index_car.query_guard import clean_query

        text = clean_query(query)
        engine = self._citation_engine(gen, kind, top_k, streaming=True)
        response = engine.query(text if text.strip() else " ")
        sources = [self._source_json(s) for s in response.source_nodes]
        parts: list[str] = []

        def tokens() -> Iterator[str]:
            for token in response.response_gen:
                parts.append(token)
                yield token

        def finish() -> Answer:
            meta = dict(response.metadata or {})
            return Answer("".join(parts), sources, self._citations(meta),
                          bool(meta.get("fallback")), meta.get("error"))

        return sources, tokens(), finish

    # ------------------------------------------------------------------ nodes
    def node(self, gen: Generation, node_id: str) -> dict[str, Any] | None:
        """A node's text cut into text and table segments, and its tables (cells with their
        coordinates, and as HTML with ``rowspan``/``colspan``); ``None`` if unknown."""
        node = gen.nodes.get(node_id)
        if node is None:
            return None
        from llama_index.readers.hwpx import node_cells

        from llama_index_car.spans import _table_blocks

        meta = dict(node.metadata or {})
        text = node.get_content()
        try:
            cells = node_cells(meta)
        except (ValueError, TypeError) as exc:
            logger.warning("node %s: cells not readable: %s", node_id, exc)
            cells = []
        grouped: dict[int, list[Any]] = {}
        for c in cells:
            grouped.setdefault(c.table, []).append(c)
        tables = []
        for table, group in grouped.items():
            tuples = [(c.row, c.col, c.row_span, c.col_span, c.text) for c in group]
            tables.append({
                "table": table,
                "depth": group[0].depth,
                "parent": None if group[0].parent is None else list(group[0].parent),
                "cells": [{"row": r, "col": k, "row_span": rs, "col_span": cs, "text": t}
                          for r, k, rs, cs, t in tuples],
                "html": table_html(tuples, table),
            })
        top = [t["table"] for t in tables if t["depth"] == 0]
        blocks = [(a, b) for a, b, _ in _table_blocks(text)]
        return {
            "node_id": node.node_id,
            "file": _text(meta.get("file_name")) or "",
            "section_title": _text(meta.get("section_title") or meta.get("title")) or "",
            "heading_path": _text(meta.get("heading_path")) or "",
            "text": text,
            "segments": segments(text, blocks, top),
            "tables": tables,
        }

    def describe(self, gen: Generation) -> dict[str, Any]:
        """What ``/readyz`` reports: the generation, node count and embedding."""
        embed = dict((gen.index.metadata or {}).get("embed") or {})
        return {"generation": gen.name, "nodes": len(gen.nodes), "replica": self.replica,
                "embedding": _text(embed.get("model_name")),
                "vectors": "store" if (gen.index.metadata or {}).get("store") else "folder"}


def dumps(payload: Any) -> bytes:
    """``payload`` as compact UTF-8 JSON (Korean kept readable; NaN refused)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")
