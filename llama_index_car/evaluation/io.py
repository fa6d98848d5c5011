"""Evaluation data in and out: BEIR folders, TREC run and qrels files.

One format throughout the evaluation package: a *run* is ``{qid: {doc_id: score}}`` and
*qrels* are ``{qid: {doc_id: relevance}}`` (relevance > 0 means relevant).

BEIR folder layout (https://github.com/beir-cellar/beir)::

    corpus.jsonl    {"_id": "d1", "title": "...", "text": "..."}   one document per line
    queries.jsonl   {"_id": "q1", "text": "..."}                    one query per line
    qrels.tsv       query-id <TAB> corpus-id <TAB> score            with a header line
                    (``qrels/test.tsv`` is accepted when ``qrels.tsv`` is absent)

TREC formats::

    run    qid Q0 doc_id rank score tag
    qrels  qid 0 doc_id relevance

Every malformed line raises :class:`~llama_index_car._errors.EvaluationDataError` naming the
file and the 1-based line number.

>>> run = {"q1": {"d1": 2.0, "d2": 1.0}}
>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "r.trec"
>>> write_trec_run(run, p, tag="bm25")
>>> read_trec_run(p) == run
True
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llama_index_car._errors import EvaluationDataError
from llama_index_car._jsonl import iter_jsonl, nonblank_lines

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR-style retrieval benchmark held in memory.

    Attributes:
        corpus: ``{doc_id: {"title": str, "text": str}}`` in file order.
        queries: ``{qid: text}`` in file order, restricted to queries that have qrels.
        qrels: ``{qid: {doc_id: relevance}}``.
        name: folder name.
        query_metadata: the optional ``metadata`` object of each query line.
    """

    corpus: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: Qrels
    name: str = ""
    query_metadata: dict[str, dict[str, object]] = field(default_factory=dict)

    def head(self, max_queries: int | None) -> BeirDataset:
        """The first ``max_queries`` queries (file order) with their qrels; the corpus is kept.

        BEIR folders of this project store queries in seeded-random order, so the head is a
        random sample.
        """
        if max_queries is None or max_queries >= len(self.queries):
            return self
        if max_queries < 1:
            raise EvaluationDataError(f"max_queries must be >= 1, got {max_queries}")
        qids = list(self.queries)[:max_queries]
        return BeirDataset(
            corpus=self.corpus,
            queries={q: self.queries[q] for q in qids},
            qrels={q: dict(self.qrels[q]) for q in qids},
            name=self.name,
            query_metadata={q: self.query_metadata[q] for q in qids if q in self.query_metadata},
        )


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """Read a JSON-lines file; blank lines are skipped; each line must be a JSON object."""
    return [obj for _, obj in iter_jsonl(_existing_file(path))]


def _existing_file(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.is_file():
        raise EvaluationDataError(f"{p}: file not found")
    return p


def _add_relevance(qrels: Qrels, qid: str, doc_id: str, rel: str, where: str) -> None:
    """``qrels[qid][doc_id] = int(rel)``, or :class:`EvaluationDataError` naming ``where``."""
    try:
        qrels.setdefault(qid, {})[doc_id] = int(rel)
    except ValueError as exc:
        raise EvaluationDataError(f"{where}: relevance {rel!r} is not an integer") from exc


def _require_str(obj: Mapping[str, object], key: str, where: str, *, optional: bool = False) -> str:
    value = obj.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise EvaluationDataError(f"{where}: field {key!r} must be a string, got {value!r}")
    return value


def _require_id(obj: Mapping[str, object], where: str) -> str:
    """The ``_id`` field (a string or an integer) as a string."""
    value = obj.get("_id")
    if not isinstance(value, str | int):
        raise EvaluationDataError(f"{where}: missing '_id'")
    return str(value)


def read_qrels_tsv(path: str | os.PathLike[str]) -> Qrels:
    """Read BEIR ``qrels.tsv`` (header ``query-id corpus-id score``; tab-separated).

    Relevance must be an integer; rows with relevance 0 are kept (judged non-relevant).
    """
    p = _existing_file(path)
    qrels: Qrels = {}
    for lineno, line in nonblank_lines(p):
        parts = line.rstrip("\n").split("\t")
        if lineno == 1 and parts[0].strip().lower() in {"query-id", "query_id", "qid"}:
            continue
        if len(parts) != 3:
            raise EvaluationDataError(
                f"{p}:{lineno}: expected 3 tab-separated fields "
                f"(query-id, corpus-id, score), got {len(parts)}"
            )
        qid, doc_id, rel = (x.strip() for x in parts)
        _add_relevance(qrels, qid, doc_id, rel, f"{p}:{lineno}")
    return qrels


def load_beir(folder: str | os.PathLike[str]) -> BeirDataset:
    """Load a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``).

    Queries without any relevant document (relevance > 0) are dropped; qrels that name a
    document absent from the corpus raise :class:`EvaluationDataError`.

    >>> ds = load_beir("../shared/eval/lhcs_construction")  # doctest: +SKIP
    >>> len(ds.corpus), len(ds.queries)                        # doctest: +SKIP
    (651, 342)
    """
    root = Path(folder)
    if not root.is_dir():
        raise EvaluationDataError(f"{root}: not a directory (expected a BEIR folder)")
    qrels_path = root / "qrels.tsv"
    if not qrels_path.is_file() and (root / "qrels" / "test.tsv").is_file():
        qrels_path = root / "qrels" / "test.tsv"
    for needed in (root / "corpus.jsonl", root / "queries.jsonl", qrels_path):
        if not needed.is_file():
            raise EvaluationDataError(
                f"{needed}: file not found; a BEIR folder needs corpus.jsonl, queries.jsonl "
                f"and qrels.tsv"
            )
    corpus: dict[str, dict[str, str]] = {}
    for lineno, row in iter_jsonl(root / "corpus.jsonl"):
        where = f"{root / 'corpus.jsonl'}:{lineno}"
        corpus[_require_id(row, where)] = {
            "title": _require_str(row, "title", where, optional=True),
            "text": _require_str(row, "text", where),
        }
    queries: dict[str, str] = {}
    metadata: dict[str, dict[str, object]] = {}
    for lineno, row in iter_jsonl(root / "queries.jsonl"):
        where = f"{root / 'queries.jsonl'}:{lineno}"
        qid = _require_id(row, where)
        queries[qid] = _require_str(row, "text", where)
        meta = row.get("metadata")
        if isinstance(meta, dict):
            metadata[qid] = meta
    qrels = read_qrels_tsv(qrels_path)
    for qid, docs in qrels.items():
        for doc_id in docs:
            if doc_id not in corpus:
                raise EvaluationDataError(
                    f"{qrels_path}: query {qid!r} names document {doc_id!r}, "
                    f"which is not in corpus.jsonl"
                )
    kept = {
        q: t for q, t in queries.items() if any(r > 0 for r in qrels.get(q, {}).values())
    }
    if not kept:
        raise EvaluationDataError(f"{root}: no query in queries.jsonl has a relevant qrel")
    return BeirDataset(
        corpus=corpus,
        queries=kept,
        qrels={q: qrels[q] for q in kept},
        name=root.name,
        query_metadata={q: metadata[q] for q in kept if q in metadata},
    )


def rank_items(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """Documents of one query ranked by score descending, then doc id ascending.

    This is the package-wide tie-break; every metric uses it.

    >>> rank_items({"b": 1.0, "a": 1.0, "c": 2.0})
    [('c', 2.0), ('a', 1.0), ('b', 1.0)]
    """
    for doc_id, s in scores.items():
        if math.isnan(s):
            raise EvaluationDataError(f"score of document {doc_id!r} is NaN")
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def strictly_decreasing_scores(ranked: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Make the scores of an already ranked list strictly decreasing, keeping the order.

    Tied scores are lowered by the smallest representable steps
    (``math.nextafter(prev, -inf)``), so tools that ignore our tie-break (trec_eval breaks
    ties by doc id *descending*, ranx by an unstable sort) read the documented order.
    A score changes by at most a few units in the last place.

    >>> out = strictly_decreasing_scores([("a", 1.0), ("b", 1.0)])
    >>> out[0] == ("a", 1.0) and out[1][1] < 1.0 and out[1][1] > 0.9999999
    True
    """
    out: list[tuple[str, float]] = []
    prev = math.inf
    for doc_id, score in ranked:
        s = float(score)
        if s >= prev:
            s = math.nextafter(prev, -math.inf)
        out.append((doc_id, s))
        prev = s
    return out


def _check_token(value: str, what: str) -> None:
    if not value or any(ch.isspace() for ch in value):
        raise EvaluationDataError(
            f"{what} {value!r} is empty or contains whitespace; TREC files are "
            f"whitespace-separated"
        )


def write_trec_run(
    run: Mapping[str, Mapping[str, float]],
    path: str | os.PathLike[str],
    *,
    tag: str = "llama-car",
    depth: int | None = None,
    strict_order: bool = True,
) -> None:
    """Write a run as ``qid Q0 doc_id rank score tag`` (ranks 1-based, order as :func:`rank_items`).

    Args:
        run: ``{qid: {doc_id: score}}``.
        path: output file (parent folders are created).
        tag: the run name in the last column (no whitespace).
        depth: keep only the top ``depth`` documents of each query (``None`` = all).
        strict_order: write strictly decreasing scores (see :func:`strictly_decreasing_scores`)
            so any reader recovers the documented tie-break. Scores are written with
            ``repr`` and round-trip exactly.
    """
    _check_token(tag, "run tag")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for qid in sorted(run):
        _check_token(qid, "query id")
        ranked = rank_items(run[qid])
        if depth is not None:
            ranked = ranked[:depth]
        if strict_order:
            ranked = strictly_decreasing_scores(ranked)
        for rank, (doc_id, score) in enumerate(ranked, start=1):
            _check_token(doc_id, "document id")
            lines.append(f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n")
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(p)


def read_trec_run(path: str | os.PathLike[str]) -> Run:
    """Read a TREC run file (6 whitespace-separated columns) into ``{qid: {doc_id: score}}``."""
    p = _existing_file(path)
    run: Run = {}
    for lineno, line in nonblank_lines(p):
        parts = line.split()
        if len(parts) != 6:
            raise EvaluationDataError(
                f"{p}:{lineno}: expected 6 fields 'qid Q0 doc_id rank score tag', "
                f"got {len(parts)}"
            )
        qid, _, doc_id, _rank, score, _tag = parts
        try:
            value = float(score)
        except ValueError as exc:
            raise EvaluationDataError(f"{p}:{lineno}: score {score!r} is not a number") from exc
        docs = run.setdefault(qid, {})
        if doc_id in docs:
            raise EvaluationDataError(
                f"{p}:{lineno}: document {doc_id!r} appears twice for query {qid!r}"
            )
        docs[doc_id] = value
    return run


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | os.PathLike[str]) -> None:
    """Write qrels as ``qid 0 doc_id relevance`` (sorted by qid, then doc id)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for qid in sorted(qrels):
        _check_token(qid, "query id")
        for doc_id in sorted(qrels[qid]):
            _check_token(doc_id, "document id")
            lines.append(f"{qid} 0 {doc_id} {int(qrels[qid][doc_id])}\n")
    p.write_text("".join(lines), encoding="utf-8")


def read_trec_qrels(path: str | os.PathLike[str]) -> Qrels:
    """Read TREC qrels (``qid iter doc_id relevance``) into ``{qid: {doc_id: relevance}}``."""
    p = _existing_file(path)
    qrels: Qrels = {}
    for lineno, line in nonblank_lines(p):
        parts = line.split()
        if len(parts) != 4:
            raise EvaluationDataError(
                f"{p}:{lineno}: expected 4 fields 'qid 0 doc_id relevance', got {len(parts)}"
            )
        qid, _, doc_id, rel = parts
        _add_relevance(qrels, qid, doc_id, rel, f"{p}:{lineno}")
    return qrels
