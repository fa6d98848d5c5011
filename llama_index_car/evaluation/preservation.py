"""Level-1 table preservation (paper §4.2, §5.6, Table 7): pure functions, no LlamaIndex.

Definitions (``norm`` = NFKC, then every whitespace character removed):

* **Ground truth** of a document: its HWPX tables that are not nested (``depth == 0``) and
  have at least one cell with text; a table's ground-truth values are ``norm(cell.text)`` of
  its non-empty cells (one value per cell anchor, not per covered grid position). A cell
  holding only a nested table has no text of its own, so nested-table placeholders never count.
* A **recovered table** (any pathway: HML tables, PDF engine output) is a grid of strings; its
  text is ``norm`` of its cells joined in row-major order with no separator, so a value a PDF
  engine split over two cells, or merged with a neighbour, still matches (lenient to PDF, as
  in the paper).
* ``overlap(g, r)`` = number of values ``v`` of ``g`` with ``v`` a substring of text(r).
* **Alignment**: within one document, ground-truth tables are matched one-to-one to recovered
  tables maximising the total overlap (``scipy.optimize.linear_sum_assignment``); each
  ground-truth table's recovered cells are its overlap with its partner (0 if unmatched).
* **Cell preservation** = Σ recovered cells / Σ ground-truth cells (over the tables in scope).
* **Detection** = share of ground-truth tables with recovered/cells ≥ 0.5.
* **Scope** ``all`` or ``2x2`` (tables with n_rows ≥ 2 and n_cols ≥ 2).
* **Robustness**: ``min_chars=2`` drops 1-character values, ``min_chars=3`` values shorter
  than 3 characters, before alignment; tables left without values leave the scope.
* **Bimodality**: tables with recovered share ≥ 0.99 (``perfect``) and = 0 (``lost``).

Example::

    >>> gt = ground_truth([{"n_rows": 1, "n_cols": 2, "cells": ["구분", "기준"]}])
    >>> s = score_document("d", gt, [[["구 분", "기준 값"]]])
    >>> (s[0].n_cells, s[0].n_recovered, summarize(s).preservation)
    (2, 2, 1.0)
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

SCOPES: tuple[str, ...] = ("2x2", "all")
DETECTION_THRESHOLD = 0.5
PERFECT_THRESHOLD = 0.99

Grid = Sequence[Sequence[str | None]]


def normalize(text: str | None) -> str:
    """NFKC with every whitespace character removed ("" for None)."""
    if not text:
        return ""
    return "".join(unicodedata.normalize("NFKC", text).split())


@dataclass(frozen=True)
class GTTable:
    """One ground-truth table: grid size, its position in the reader's table list, and the
    normalised non-empty values of its cells (duplicates kept: each cell counts)."""

    index: int
    n_rows: int
    n_cols: int
    values: tuple[str, ...]

    @property
    def is_2x2(self) -> bool:
        """At least two rows and two columns."""
        return self.n_rows >= 2 and self.n_cols >= 2


def _get(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def ground_truth(tables: Iterable[Any]) -> list[GTTable]:
    """Ground-truth tables from a reader's table list (``HWPXTable``-like objects or dicts with
    ``n_rows``, ``n_cols``, ``cells`` and optional ``depth``/``index``; a cell is an object
    with ``.text`` or a string): non-nested tables with at least one non-empty value."""
    out: list[GTTable] = []
    for pos, t in enumerate(tables):
        depth = _get(t, "depth") if _has(t, "depth") else 0
        if depth:
            continue
        values = tuple(
            v
            for v in (normalize(c if isinstance(c, str) else c.text) for c in _get(t, "cells"))
            if v
        )
        if not values:
            continue
        index = _get(t, "index") if _has(t, "index") else pos
        out.append(GTTable(int(index), int(_get(t, "n_rows")), int(_get(t, "n_cols")), values))
    return out


def _has(obj: Any, name: str) -> bool:
    return name in obj if isinstance(obj, Mapping) else hasattr(obj, name)


def table_text(grid: Grid) -> str:
    """Normalised text of a recovered table: cells in row-major order, no separator."""
    return "".join(normalize(cell) for row in grid for cell in row)


def overlap(values: Sequence[str], text: str) -> int:
    """How many ``values`` are substrings of ``text``."""
    return sum(1 for v in values if v in text)


def align(gt: Sequence[GTTable], texts: Sequence[str]) -> list[tuple[int | None, int]]:
    """One-to-one alignment maximising total overlap.

    Returns, per ground-truth table, ``(recovered index or None, recovered cells)``. Pairs with
    zero overlap are left unmatched."""
    if not gt:
        return []
    if not texts:
        return [(None, 0) for _ in gt]
    m = np.array([[overlap(g.values, t) for t in texts] for g in gt], dtype=np.int64)
    rows, cols = linear_sum_assignment(m, maximize=True)
    out: list[tuple[int | None, int]] = [(None, 0) for _ in gt]
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        if m[r, c] > 0:
            out[r] = (int(c), int(m[r, c]))
    return out


@dataclass(frozen=True)
class TableScore:
    """The score of one ground-truth table."""

    document: str
    gt_index: int
    n_rows: int
    n_cols: int
    n_cells: int
    n_recovered: int
    matched: int | None

    @property
    def share(self) -> float:
        """Recovered share of this table's values."""
        return self.n_recovered / self.n_cells if self.n_cells else 0.0

    @property
    def is_2x2(self) -> bool:
        """At least two rows and two columns."""
        return self.n_rows >= 2 and self.n_cols >= 2


def score_document(
    document: str,
    gt: Sequence[GTTable],
    recovered: Sequence[Grid],
    *,
    min_chars: int = 1,
) -> list[TableScore]:
    """Score one document: keep values of at least ``min_chars`` characters, align, count."""
    kept = [
        GTTable(g.index, g.n_rows, g.n_cols, tuple(v for v in g.values if len(v) >= min_chars))
        for g in gt
    ]
    kept = [g for g in kept if g.values]
    texts = [table_text(r) for r in recovered]
    return [
        TableScore(document, g.index, g.n_rows, g.n_cols, len(g.values), n, match)
        for g, (match, n) in zip(kept, align(kept, texts), strict=True)
    ]


@dataclass(frozen=True)
class Summary:
    """Table 7 row: documents, tables, cells, preservation, detection (+ bimodality)."""

    scope: str
    documents: int
    tables: int
    cells: int
    recovered: int
    preservation: float
    detection: float
    perfect: int
    lost: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def summarize(scores: Iterable[TableScore], scope: str = "all") -> Summary:
    """Aggregate table scores over ``scope`` (``"all"`` or ``"2x2"``); 0.0 rates when empty."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    chosen = [s for s in scores if scope == "all" or s.is_2x2]
    cells = sum(s.n_cells for s in chosen)
    recovered = sum(s.n_recovered for s in chosen)
    detected = sum(1 for s in chosen if s.share >= DETECTION_THRESHOLD)
    return Summary(
        scope=scope,
        documents=len({s.document for s in chosen}),
        tables=len(chosen),
        cells=cells,
        recovered=recovered,
        preservation=recovered / cells if cells else 0.0,
        detection=detected / len(chosen) if chosen else 0.0,
        perfect=sum(1 for s in chosen if s.share >= PERFECT_THRESHOLD),
        lost=sum(1 for s in chosen if s.n_recovered == 0),
    )
