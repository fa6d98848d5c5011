"""``CriterionSpanPostprocessor``: attach the spans that state the criterion to every hit.

A hit is a whole section (median ~1 kchar); the criterion sits in one sentence, table row or
cell of it. For each node it is given the postprocessor scores the node's spans
(:func:`llama_index_car.spans.node_spans`: sentences and table rows, plus the cells of each
table row decoded from the node's ``cells`` metadata) and attaches the ``top_n`` best to a copy
of the node as ``metadata["criterion_spans"]`` (excluded from embed and LLM metadata), best
first::

    {"kind": "sentence" | "row" | "cell", "text", "score", "start", "end",
     "parts": {"vector", "lexical", "cue"},
     # table spans also:
     "table_index", "row", "col", "row_span", "col_span", "header"}

``start``/``end`` are offsets into ``node.get_content()``: the sentence, the row's ``<tr>`` /
``| … |`` line, or the cell's rendered text inside it (:func:`~llama_index_car.spans.
cell_offsets`; its row when not found there). A cell's ``header`` is its column's label in
its table's header (:func:`~llama_index_car.spans.table_header`: the first row with two
distinct texts, a caption row merged over the table skipped), so it reads ``header: text``;
a cell past the first column also has ``row_header`` (its row's cells in the first two
columns, left of it: ``규격 · 길이``).

Score of a span ``s`` for a query ``q`` (:func:`combine`)::

    score = vector_weight · cos(s, q) + lexical_weight · bm25(s) / max bm25 + cue_weight · cue(s)

* ``cos`` — the span vector of the :class:`~llama_index_car.span_index.SpanIndex` · the query
  vector (cosine; a cell has no vector of its own and takes its row's). No embedding happens
  here beyond the one query vector (``query_bundle.embedding`` when set);
* ``bm25`` — Okapi BM25 of the query's Kiwi tokens against the span's
  (:func:`~llama_index_car.bm25.lucene_bm25`: Lucene's non-negative idf, idf and average
  length over the node's own spans), divided by the best
  BM25 in the node (so it is in [0, 1]). A row known by its cells is the sum of the tokens of
  its column headers and cell values (each distinct text tokenized once and cached per node:
  the row texts, ~60% of a table's characters, are never tokenized themselves);
* ``cue`` — :func:`cue_score`: criterion cues (numbers with units, ratios, 기준 이상 이하 이내
  미만 초과), ``min(count, 2) / 2``; for a table row counted in its cell values, not in the
  header labels its text repeats (a header "기준" would cue every row).

Defaults ``1.0 / 0.3 / 0.1`` are round numbers, not tuned on evaluation data (a later
cross-validation step may change them). A table row and its cells are one *place*: only the
best-scoring of them is kept, so the ``top_n`` spans point at ``top_n`` different places.
A node the span index does not hold, or holds in another version (same id, its spans no longer
at their offsets), is cut on the fly and scored without the vector term.

>>> post = CriterionSpanPostprocessor(span_index=spans, embed_model=embed)  # doctest: +SKIP
>>> hits = post.postprocess_nodes(hits, query_bundle=QueryBundle("비상주차대 750m 이내"))  # doctest: +SKIP
>>> hits[0].node.metadata["criterion_spans"][0]  # doctest: +SKIP
{'kind': 'cell', 'text': '750m 이내', 'score': 0.89, ..., 'table_index': 0, 'row': 1, 'col': 1,
 'row_span': 1, 'col_span': 2, 'header': '기준', 'row_header': '설치 간격'}
"""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_car._errors import ConfigurationError
from llama_index_car._nodes import with_metadata
from llama_index_car.bm25 import lucene_bm25
from llama_index_car.postprocessors.span_rerank import check_span_inputs, query_vector
from llama_index_car.span_index import SpanIndex
from llama_index_car.spans import Span, cell_offsets, node_spans, table_header
from llama_index_car.tokenizers.kiwi import DOMAIN_PATTERNS, KiwiTokenizer

CRITERION_SPANS_KEY = "criterion_spans"
#: spans attached per hit by default
DEFAULT_CRITERION_SPANS = 3
DEFAULT_VECTOR_WEIGHT = 1.0
DEFAULT_LEXICAL_WEIGHT = 0.3
DEFAULT_CUE_WEIGHT = 0.1
#: cue count at which :func:`cue_score` saturates
CUE_CAP = 2
#: BM25 parameters (Okapi defaults, as :mod:`llama_index_car.bm25`)
BM25_K1 = 1.5
BM25_B = 0.75
#: columns a cell's ``row_header`` is read from (row labels sit in the first columns)
ROW_HEADER_COLS = 2
#: nodes whose candidates and Kiwi tokens are kept per postprocessor (LRU)
NODE_CACHE_SIZE = 4_096

_CUE_WORDS = ("기준", "이상", "이하", "이내", "미만", "초과")
_CUE_RE = re.compile(
    "|".join(f"(?:{rx})" for name, rx, _ in DOMAIN_PATTERNS if name in ("number_unit", "ratio"))
    + "|" + "|".join(_CUE_WORDS)
)
#: Korean question form, from the grammar (not tuned on evaluation data): a question mark, an
#: interrogative word (누구/누가 무엇/뭐 무슨 언제 어디 어느 어떤/어떻-/어때 얼마 몇, 왜 as a
#: word of its own) anywhere, or an interrogative ending (-나요 -까요 -가요 -니까 -는지요) at
#: the end of the text
QUESTION_RE = re.compile(
    r"[?？]|누구|누가|무엇|뭐|무슨|언제|어디|어느|어떤|어떻|어때|얼마|몇"
    r"|(?<![가-힣])왜(?:요)?(?![가-힣])"
    r"|(?:나요|까요|가요|니까|는지요)[\s.!。]*$"
)


# ----------------------------------------------------------------------------- pure maths
def cue_score(text: str, cap: int = CUE_CAP) -> float:
    """Criterion cues in ``text``: ``min(count, cap) / cap`` where ``count`` is the number of
    non-overlapping matches of numbers with units (``1.5m``, ``80km/h``, ``3%``), ratios
    (``1:1.5``) and the words 기준 이상 이하 이내 미만 초과 (the tokenizer's
    ``number_unit``/``ratio`` patterns).

    >>> cue_score("폭은 1.5m 이상으로 한다"), cue_score("기준"), cue_score("배수시설")
    (1.0, 0.5, 0.0)
    """
    return min(len(_CUE_RE.findall(text)), cap) / cap


def question_cue(text: str) -> bool:
    """Whether ``text`` is phrased as a question (:data:`QUESTION_RE`: a question mark, an
    interrogative word, or an interrogative ending at its end).

    The offline CAR's span step counts only for a question: re-ranking by the best span lifts
    the section whose one sentence answers what is asked, while a statement of an issue (a
    court holding, a keyword list) asks for no one sentence (``benchmarks/span_cv.py``).

    >>> question_cue("비 오는 날 압접 작업은 어떻게 하나요?"), question_cue("배수관 간격은 얼마")
    (True, True)
    >>> question_cue("채권자대위권 행사의 요건인지 여부"), question_cue("배수시설 설치기준")
    (False, False)
    """
    return QUESTION_RE.search(text) is not None


def combine(
    cosine: float,
    lexical: float,
    cue: float,
    vector_weight: float = DEFAULT_VECTOR_WEIGHT,
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
    cue_weight: float = DEFAULT_CUE_WEIGHT,
) -> float:
    """``vector_weight·cosine + lexical_weight·lexical + cue_weight·cue`` (module docstring).

    >>> round(combine(0.5, 1.0, 0.5), 6)
    0.85
    """
    return vector_weight * cosine + lexical_weight * lexical + cue_weight * cue


# ----------------------------------------------------------------------------- candidates
@dataclass(frozen=True, slots=True)
class SpanCandidate:
    """A span or a cell that may be attached: its text, offsets, its *place* (the index of its
    span among the node's spans: a row and its cells share one, and take its vector) and, for
    table spans, the coordinate fields."""

    kind: str
    text: str
    start: int
    end: int
    place: int
    table: dict[str, Any] | None = None
    #: the text criterion cues are counted in (a row's cell values, without the header
    #: labels its text repeats; ``None``: ``text``)
    cue_text: str | None = None
    #: the texts whose Kiwi tokens, summed, are its lexical document (a row known by its
    #: cells: its column headers and cell values, so only cell texts are tokenized;
    #: ``None``: ``text``)
    token_parts: tuple[str, ...] | None = None


def _norm(value: str) -> str:
    return " ".join(str(value).split())


class _Grid:
    """One table's cells indexed once: its header (:func:`~llama_index_car.spans.
    table_header`), the cells covering each row, the cells starting in each row (each by
    column)."""

    def __init__(self, cells: Sequence[Any]) -> None:
        by_col = sorted(cells, key=lambda c: (c.col, c.row))
        self.table_header = table_header(cells)
        self.covering: dict[int, list[Any]] = {}
        self.starting: dict[int, list[Any]] = {}
        height = max((c.row + c.row_span for c in cells), default=0)
        for c in by_col:
            self.starting.setdefault(c.row, []).append(c)
            for r in range(c.row, min(c.row + max(c.row_span, 1), height)):
                self.covering.setdefault(r, []).append(c)

    def header(self, row: int, col: int, col_span: int) -> str | None:
        """The header labels over columns ``[col, col + col_span)`` for a cell of ``row``
        (None in and above the header rows)."""
        if not self.table_header.labels(row):
            return None
        return self.table_header.over(col, col_span)

    def row_header(self, row: int, col: int) -> str | None:
        """Distinct non-empty texts of the row's cells in the first :data:`ROW_HEADER_COLS`
        columns left of ``col`` (the labels of a row), joined by ``" · "``."""
        left = [c for c in self.covering.get(row, []) if c.col < min(col, ROW_HEADER_COLS)]
        return " · ".join(n for n in dict.fromkeys(_norm(c.text) for c in left) if n) or None


def _grids(metadata: Mapping[str, Any]) -> dict[int, _Grid]:
    if not metadata.get("cells"):
        return {}
    try:
        from llama_index.readers.hwpx import node_cells

        cells = node_cells(metadata)
    except (ImportError, ValueError, TypeError, KeyError):
        return {}
    tables: dict[int, list[Any]] = {}
    for c in cells:
        tables.setdefault(c.table, []).append(c)
    return {t: _Grid(group) for t, group in tables.items()}


def span_candidates(node: Any, spans: Sequence[Span] | None = None) -> list[SpanCandidate]:
    """The node's spans (default :func:`~llama_index_car.spans.node_spans`) in order and,
    after each table row known by its cells (``cells`` metadata), the row's own cells (those
    starting in it, non-empty, by column), each with its place.
    A cell's text is the reader's cell text (whitespace collapsed), its offsets those of its
    rendering in its row (the row's cells found in column order), else its row's.

    >>> from llama_index.core.schema import TextNode
    >>> [(c.kind, c.text) for c in span_candidates(TextNode(text="폭은 1.5m 이상으로 하고 높이는 2.0m 이상으로 한다."))]
    [('sentence', '폭은 1.5m 이상으로 하고 높이는 2.0m 이상으로 한다.')]
    """
    if spans is None:
        spans = node_spans(node)
    text = node.get_content()
    grids = _grids(getattr(node, "metadata", None) or {})
    out: list[SpanCandidate] = []
    for place, s in enumerate(spans):
        if s.kind != "row":
            out.append(SpanCandidate(s.kind, s.text, s.start, s.end, place))
            continue
        table = {
            "table_index": s.table_index, "row": s.row, "col": s.col,
            "row_span": s.row_span, "col_span": s.col_span, "header": s.header,
        }
        grid = grids.get(s.table_index) if s.table_index is not None else None
        row = s.row or 0
        covering = grid.covering.get(row, []) if grid else []
        values = [_norm(c.text) for c in covering]
        parts: list[str] = []
        for c, v in zip(covering, values, strict=True):
            h = grid.header(row, c.col, c.col_span) if grid else None
            parts.extend(x for x in (h if h != v else None, v) if x)
        out.append(SpanCandidate("row", s.text, s.start, s.end, place, table,
                                 " ".join(values) if values else None,
                                 tuple(parts) if parts else None))
        own = grid.starting.get(row, []) if grid else []
        found = cell_offsets(text, s.start, s.end, [str(c.text) for c in own])
        for c, where in zip(own, found, strict=True):
            value = _norm(c.text)
            if not value:
                continue
            a, b = where if where is not None else (s.start, s.end)
            info: dict[str, Any] = {
                "table_index": c.table, "row": c.row, "col": c.col,
                "row_span": c.row_span, "col_span": c.col_span,
                "header": grid.header(c.row, c.col, c.col_span),  # type: ignore[union-attr]
            }
            row_header = grid.row_header(c.row, c.col)  # type: ignore[union-attr]
            if row_header is not None and row_header != value:
                info["row_header"] = row_header
            out.append(SpanCandidate("cell", value, a, b, place, info))
    return out


def _scored(
    candidates: Sequence[SpanCandidate],
    cosines: Sequence[float],
    lexical: Sequence[float],
    top_n: int,
    weights: tuple[float, float, float],
) -> list[dict[str, Any]]:
    """The best candidate of each place, the ``top_n`` best places, as dicts (score desc,
    then text order, then row before its cells). ``cosines[place]``: the span's cosine."""
    best = max(lexical, default=0.0)
    ranked = []
    for i, (c, lex) in enumerate(zip(candidates, lexical, strict=True)):
        lex_n = lex / best if best > 0 else 0.0
        cue = cue_score(c.text if c.cue_text is None else c.cue_text)
        cos = float(cosines[c.place])
        score = combine(cos, lex_n, cue, *weights)
        ranked.append((-score, c.start, i, c, {"vector": cos, "lexical": lex_n, "cue": cue}))
    ranked.sort(key=lambda r: r[:3])
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for neg, _, _, c, parts in ranked:
        if c.place in seen:
            continue
        seen.add(c.place)
        item: dict[str, Any] = {
            "kind": c.kind, "text": c.text, "score": -neg, "start": c.start, "end": c.end,
            "parts": parts,
        }
        if c.table is not None:
            item.update(c.table)
        out.append(item)
        if len(out) >= top_n:
            break
    return out


def _with_spans(nws: NodeWithScore, spans: list[dict[str, Any]]) -> NodeWithScore:
    return NodeWithScore(node=with_metadata(nws.node, CRITERION_SPANS_KEY, spans),
                         score=nws.score)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What scoring needs of one node, query-independent: its candidates, the number of its
    spans, and (once tokenized) each candidate's term counts and length."""

    candidates: tuple[SpanCandidate, ...]
    n_spans: int
    #: whether the spans are the span index's (so its vectors apply)
    indexed: bool
    counts: tuple[Counter[str], ...] | None = None
    lengths: tuple[int, ...] | None = None


def _spans_fit(text: str, spans: Sequence[Span]) -> bool:
    """Whether indexed ``spans`` still describe ``text`` (not an updated node under the same
    id): every offset inside it, every sentence at its offsets."""
    return all(
        s.end <= len(text)
        and (s.kind != "sentence" or _norm(text[s.start : s.end]).startswith(s.text[:32]))
        for s in spans
    )


def _node_key(node: Any) -> tuple[str, int, int]:
    """``(node_id, hash of the text, hash of the cells)``: what the candidates depend on (not
    ``node.hash``, which covers every metadata key, ``car_explain`` included)."""
    cells = (getattr(node, "metadata", None) or {}).get("cells")
    return node.node_id, hash(node.get_content()), hash(str(cells) if cells else "")


class _NodeCache:
    """:class:`_Prepared` nodes by :func:`_node_key`, LRU-bounded, thread-safe; the
    candidate texts of the nodes missing are tokenized in one batch."""

    def __init__(self, tokenizer: Any, size: int = NODE_CACHE_SIZE) -> None:
        self.tokenizer = tokenizer
        self.size = size
        self._data: OrderedDict[tuple[str, int, int], _Prepared] = OrderedDict()
        self._lock = threading.Lock()

    def prepared(
        self, nodes: Sequence[Any], span_index: SpanIndex, lexical: bool
    ) -> list[_Prepared]:
        keys = [_node_key(n) for n in nodes]
        with self._lock:
            found = [self._data.get(k) for k in keys]
        todo = [i for i, p in enumerate(found) if p is None or (lexical and p.counts is None)]
        if todo:
            fresh = []
            for i in todo:
                node = nodes[i]
                spans = (span_index.spans_of(node.node_id) if node.node_id in span_index
                         else None)
                indexed = spans is not None and _spans_fit(node.get_content(), spans)
                if spans is None or not indexed:
                    spans = node_spans(node)
                fresh.append(_Prepared(tuple(span_candidates(node, spans)), len(spans), indexed))
            if lexical:
                fresh = self._tokenized(fresh)
            for i, p in zip(todo, fresh, strict=True):
                found[i] = p
        out = [p for p in found if p is not None]
        with self._lock:
            for k, p in zip(keys, out, strict=True):
                self._data[k] = p
                self._data.move_to_end(k)
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return out

    def _tokenized(self, fresh: Sequence[_Prepared]) -> list[_Prepared]:
        """``fresh`` with term counts: each distinct part text tokenized once, in one batch."""
        texts = list(dict.fromkeys(t for p in fresh for c in p.candidates for t in _parts(c)))
        tokens = dict(zip(texts, self.tokenizer.tokenize_batch(texts), strict=True)) if texts \
            else {}
        done = []
        for p in fresh:
            counts = []
            for c in p.candidates:
                total: Counter[str] = Counter()
                for t in _parts(c):
                    total.update(tokens[t])
                counts.append(total)
            done.append(_Prepared(p.candidates, p.n_spans, p.indexed, tuple(counts),
                                  tuple(sum(x.values()) for x in counts)))
        return done


def _parts(c: SpanCandidate) -> tuple[str, ...]:
    return c.token_parts if c.token_parts is not None else (c.text,)


def _attach_spans(
    nodes: Sequence[NodeWithScore],
    span_index: SpanIndex,
    query_vector: Sequence[float] | np.ndarray | None,
    query_tokens: Sequence[str],
    cache: _NodeCache,
    *,
    top_n: int = DEFAULT_CRITERION_SPANS,
    weights: tuple[float, float, float] = (
        DEFAULT_VECTOR_WEIGHT, DEFAULT_LEXICAL_WEIGHT, DEFAULT_CUE_WEIGHT
    ),
) -> list[NodeWithScore]:
    """New ``NodeWithScore`` objects over node copies carrying ``criterion_spans`` (module
    docstring); order and scores unchanged, the inputs are not modified. ``cache`` holds the
    nodes' candidates and tokens (a postprocessor's); ``query_vector`` ``None`` drops the
    vector term."""
    lexical_on = weights[1] != 0 and bool(query_tokens)
    prepared = cache.prepared([n.node for n in nodes], span_index, lexical_on)
    ids = [n.node.node_id for n in nodes]
    cosines: list[np.ndarray | None] = (
        span_index.span_cosines(query_vector, ids) if query_vector is not None
        else [None] * len(ids)
    )
    out = []
    for nws, p, cos in zip(nodes, prepared, cosines, strict=True):
        if cos is None or not p.indexed or len(cos) != p.n_spans:
            cos = np.zeros(p.n_spans, dtype=np.float32)
        if lexical_on and p.counts is not None and p.lengths is not None:
            spans_only = [i for i, c in enumerate(p.candidates) if c.kind != "cell"] or list(
                range(len(p.candidates)))
            lexical = lucene_bm25(
                query_tokens, p.counts, p.lengths,
                [p.counts[i] for i in spans_only], [p.lengths[i] for i in spans_only],
                k1=BM25_K1, b=BM25_B,
            )
        else:
            lexical = [0.0] * len(p.candidates)
        out.append(_with_spans(nws, _scored(p.candidates, cos.tolist(), lexical, top_n,
                                            weights)))
    return out


# ----------------------------------------------------------------------------- component
class CriterionSpanPostprocessor(BaseNodePostprocessor):
    """Attach each node's best criterion spans for the query (module docstring).

    Needs the query: ``postprocess_nodes(nodes, query_bundle=...)`` (query engines pass it).
    The query vector is ``query_bundle.embedding`` when set, else ``embed_model``'s query
    embedding of ``query_bundle.embedding_strs`` (computed once per call); the lexical part
    uses ``query_bundle.query_str``. Node order and scores are unchanged.
    """

    top_n: int = Field(default=DEFAULT_CRITERION_SPANS, gt=0, description="spans per hit")
    vector_weight: float = Field(default=DEFAULT_VECTOR_WEIGHT, ge=0.0,
                                 description="weight of span vector · query vector")
    lexical_weight: float = Field(default=DEFAULT_LEXICAL_WEIGHT, ge=0.0,
                                  description="weight of BM25 within the node (max-normalised)")
    cue_weight: float = Field(default=DEFAULT_CUE_WEIGHT, ge=0.0,
                              description="weight of criterion cues (numbers, 기준/이상/…)")
    _span_index: SpanIndex = PrivateAttr()
    _embed_model: Any = PrivateAttr()
    _tokenizer: Any = PrivateAttr()
    _cache: _NodeCache = PrivateAttr()

    def __init__(
        self,
        span_index: SpanIndex,
        embed_model: Any,
        tokenizer: Any | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_span_inputs(span_index, embed_model)
        if tokenizer is None:
            tokenizer = KiwiTokenizer()
        self._span_index = span_index
        self._embed_model = embed_model
        self._tokenizer = tokenizer
        self._cache = _NodeCache(tokenizer)

    @classmethod
    def class_name(cls) -> str:
        return "CriterionSpanPostprocessor"

    @property
    def weights(self) -> tuple[float, float, float]:
        """``(vector_weight, lexical_weight, cue_weight)``."""
        return (self.vector_weight, self.lexical_weight, self.cue_weight)

    def attach(
        self,
        nodes: Sequence[NodeWithScore],
        query_vector: Sequence[float] | None,
        query_text: str,
        span_index: SpanIndex | None = None,
    ) -> list[NodeWithScore]:
        """:func:`_attach_spans` with this postprocessor's settings, for a query
        vector computed elsewhere (CAR passes its own; ``span_index``: a pinned snapshot's)."""
        query_tokens = self._tokenizer.tokenize(query_text) if self.lexical_weight else []
        return _attach_spans(
            nodes, span_index if span_index is not None else self._span_index, query_vector,
            query_tokens, self._cache, top_n=self.top_n, weights=self.weights,
        )

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ConfigurationError("CriterionSpanPostprocessor needs the query (query_bundle)")
        if not nodes:
            return []
        vector = (
            query_vector(query_bundle, self._embed_model)
            if query_bundle.embedding is not None or self.vector_weight > 0 else None
        )
        return self.attach(nodes, vector, query_bundle.query_str)
