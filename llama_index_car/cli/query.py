"""``llama-car query DIR "질문"``: search a local index folder and explain the hits.

Prints the top hits with section title, file, score and each channel's rank (dense, BM25);
for ``--retriever car`` the criterion hypothesis the query was expanded with; for table hits
the cells with their (row, col) coordinates. ``--explain`` adds the heading path, a text
snippet, every cell and the fusion details. ``--spans [N]`` prints under each hit its ``N``
(default 3) best criterion spans — sentences, table rows and cells, with (table, row, col)
— one line each (:class:`~llama_index_car.postprocessors.criterion_spans.CriterionSpanPostprocessor`;
``car`` attaches them itself, the other retrievers get them from the folder's span index,
``hybrid`` always, so ``--json`` carries them). Every printed field is cut (a title or a cell at
120 characters, a cell line at 400: a whole standard can sit in one cell); ``--full`` prints
them whole, and ``--json`` prints the same as JSON, never cut.

Providers: the query embedding must match the one the index was built with (``--embed``);
``--llm anthropic`` makes CAR write its hypothesis with Claude (``ANTHROPIC_API_KEY``);
``--rerank cohere`` reorders the pool with Cohere ``rerank-multilingual-v3.0``
(``COHERE_API_KEY``). A missing key or extra exits with code 2 and one line saying what to set.

Limits: ``--llm-timeout`` (default 30 s) is a hard deadline for the LLM hypothesis of a query
— the SDK's retries and ``Retry-After`` waits included; at it the request's socket is closed,
CAR answers with the plain hybrid and the process exits at once. The question may hold at most
``$LLAMA_CAR_MAX_QUERY_CHARS`` characters (default 2000). Everything printed is stripped of
terminal escape sequences and control/bidi characters.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from llama_index_car.cli._args import (
    existing_dir,
    positive_int,
    positive_seconds,
    query_text,
    store_uri,
    subcommand,
    unit_float,
)
from llama_index_car.hypothesizers.base import sanitize_text
from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE  # default of --llm-timeout
from llama_index_car.providers import CLI_LLMS, EMBED_MODELS, RERANKERS

EPILOG = """examples:
  llama-car query ./car-index "비 올 때 고속도로 옆 도랑은 얼마나 깊어야 해?"
  llama-car query ./car-index "교량 점검통로 구조기준" --retriever hybrid --top-k 3 --explain
  llama-car query ./car-index "비상주차대 설치 간격" --spans 2
"""

SNIPPET_CHARS = 160
COMPACT_CELLS = 8
#: longest printed field (a title, a file name, one cell) unless ``--full``; ``--json`` and
#: ``--full`` keep everything
FIELD_CHARS = 120
#: longest printed cell line unless ``--full`` (a whole standard can sit in one cell)
LINE_CHARS = 400
#: longest printed span line unless ``--full``
SPAN_CHARS = 160
#: spans per hit for a bare ``--spans``
DEFAULT_SPAN_LINES = 3


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``query`` on the ``llama-car`` subparsers."""
    p = subcommand(
        subparsers, "query",
        help="search an index folder built by `llama-car index`",
        doc=__doc__,
        epilog=EPILOG,
    )
    p.add_argument(
        "persist_dir", metavar="DIR", type=existing_dir, help="index folder (from llama-car index)"
    )
    p.add_argument("question", metavar="QUESTION", type=query_text, help="the question, in quotes")
    p.add_argument(
        "--retriever",
        choices=("car", "hybrid", "bm25", "dense"),
        default="car",
        help="car = criterion-aware (default), hybrid = weighted RRF of dense and BM25",
    )
    p.add_argument("--top-k", type=positive_int, default=5, help="hits to show (default 5)")
    p.add_argument(
        "--alpha", type=unit_float, default=None,
        help="dense weight in the fusion, 0..1 (hybrid: 0.5; car: its own β, 0.3)"
    )
    p.add_argument("--explain", action="store_true", help="snippets, all cells, fusion details")
    p.add_argument("--full", action="store_true",
                   help=f"print fields whole (default: cut at {FIELD_CHARS} characters, a "
                   f"cell line at {LINE_CHARS}; --json is never cut)")
    p.add_argument("--json", action="store_true", help="print the hits as JSON")
    p.add_argument(
        "--spans", nargs="?", const=DEFAULT_SPAN_LINES, default=None, type=positive_int,
        metavar="N",
        help=f"print each hit's N best criterion spans (sentences, table rows, cells with "
        f"coordinates; default {DEFAULT_SPAN_LINES}), one line each",
    )
    p.add_argument(
        "--store", metavar="URI", type=store_uri, default=None,
        help="the vector store of a folder built with --store URI (default "
        "$LLAMA_CAR_STORE; a server's secret from $LLAMA_CAR_MILVUS_TOKEN or "
        "$LLAMA_CAR_QDRANT_API_KEY); the folder itself never says where to connect",
    )
    p.add_argument(
        "--embed",
        choices=EMBED_MODELS,
        default=None,
        help="query embedding (default: the provider recorded in the index)",
    )
    p.add_argument(
        "--llm",
        choices=CLI_LLMS,
        default=None,
        help="hypothesis writer for car: none = offline CAR, no hypothesis (default; "
        "or $LLAMA_CAR_LLM), anthropic = claude-sonnet-4-6 (needs ANTHROPIC_API_KEY)",
    )
    p.add_argument(
        "--llm-timeout",
        type=positive_seconds,
        default=DEFAULT_LLM_DEADLINE,
        metavar="SECONDS",
        help="hard deadline for the LLM hypothesis of the query, retries included; then CAR "
        "falls back to the plain hybrid (default %(default)g)",
    )
    p.add_argument(
        "--rerank",
        choices=RERANKERS,
        default=None,
        help="rerank the candidate pool: none (default; or $LLAMA_CAR_RERANKER), "
        "cohere = rerank-multilingual-v3.0 (needs COHERE_API_KEY)",
    )
    return p


# ----------------------------------------------------------------------------- formatting
def hit_record(
    rank: int,
    hit: Any,
    kind: str,
    cells: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A plain dict describing one ``NodeWithScore`` hit (what ``--json`` prints).

    Channel ranks and scores come from the ``car_explain`` metadata (of fused hits, and of
    reranked single-channel hits: the retriever's own rank and score before reranking); a
    single-channel hit otherwise has its position, under its channel name (``dense`` or
    ``lexical``).
    """
    node = hit.node
    meta = dict(node.metadata)
    explain = meta.get("car_explain") or {}
    channels = explain.get("channels") or {}
    if not channels and kind in ("dense", "bm25"):
        name = "lexical" if kind == "bm25" else "dense"
        channels = {name: {"rank": rank, "score": hit.score}}
    return {
        "rank": rank,
        "node_id": node.node_id,
        "score": None if hit.score is None else float(hit.score),
        "section_title": section_title(meta),
        "file_name": meta.get("file_name", ""),
        "heading_path": meta.get("heading_path", ""),
        "table_index": meta.get("table_index"),
        "cells": list(cells or []),
        "channels": channels,
        "hypothesis": explain.get("hypothesis"),
        "criteria": list(explain.get("criteria") or []),
        "fallback": bool(explain.get("fallback", False)),
        "criterion_spans": [dict(s) for s in meta.get("criterion_spans") or []],
        "text": node.get_content(),
    }


def section_title(meta: dict[str, Any]) -> str:
    """The section title a node belongs to (``section_title``, else ``title``)."""
    for key in ("section_title", "title"):
        value = meta.get(key)
        if value:
            return str(value)
    return "(untitled)"


def json_for_terminal(payload: Any) -> str:
    """``payload`` as indented JSON, Korean kept readable, with every control, format (bidi,
    zero-width) and surrogate character written as a ``\\uXXXX`` escape: the data is
    unchanged for a JSON reader, but nothing reaches the terminal raw."""
    import unicodedata

    text = json.dumps(payload, ensure_ascii=False, indent=2)
    return "".join(
        f"\\u{ord(ch):04x}"
        if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
        else ch
        for ch in text
    )


def shown(value: Any) -> str:
    """``value`` as one terminal-safe line: no escape sequences, control or bidi characters
    (index text and LLM output are untrusted), whitespace collapsed."""
    return " ".join(sanitize_text(str(value)).split())


def format_channels(channels: dict[str, Any]) -> str:
    """``dense #3 · bm25 #1`` (``—`` when a channel did not return the node)."""
    parts = []
    for name in sorted(channels):
        rank = (channels[name] or {}).get("rank")
        parts.append(f"{shown(name)} #{rank}" if rank else f"{shown(name)} —")
    return " · ".join(parts)


def clip(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with ``…`` (``None``: whole).

    >>> clip("가나다라마", 3), clip("가나", 3), clip("가나다라", None)
    ('가나…', '가나', '가나다라')
    """
    if limit is None or len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def format_cells(
    cells: Sequence[dict[str, Any]], limit: int | None, field: int | None = None,
    line: int | None = None,
) -> str:
    """``(r,c) text | (r,c) text …`` for the first ``limit`` non-empty cells (``(tN r,c)``
    when the cells come from more than one table); each cell text cut to ``field``
    characters and the whole line to ``line``."""
    kept = [c for c in cells if shown(c.get("text", ""))]
    more = 0
    if limit is not None and len(kept) > limit:
        more = len(kept) - limit
        kept = kept[:limit]
    several = len({c.get("table") for c in cells}) > 1  # then each cell names its table

    def where(c: dict[str, Any]) -> str:
        table = f"t{shown(c.get('table'))} " if several else ""
        return f"({table}{shown(c.get('row'))},{shown(c.get('col'))})"

    body = " | ".join(f"{where(c)} {clip(shown(c.get('text')), field)}" for c in kept)
    return clip(body, line) + (f" | … +{more} cells" if more else "")


def span_where(span: dict[str, Any]) -> str:
    """Where a criterion span sits: ``sentence @19-94``, ``row t0 r1``, ``cell t0 (1,2)``
    (``2×1`` added for a merged cell).

    >>> span_where({"kind": "cell", "table_index": 0, "row": 1, "col": 2, "row_span": 2,
    ...             "col_span": 1})
    'cell t0 (1,2) 2×1'
    >>> span_where({"kind": "sentence", "start": 19, "end": 94})
    'sentence @19-94'
    """
    kind = shown(span.get("kind", "?"))
    if kind == "sentence":
        return f"sentence @{shown(span.get('start'))}-{shown(span.get('end'))}"
    table = span.get("table_index")
    t = f"t{shown(table)} " if table is not None else ""
    if kind == "row":
        return f"row {t}r{shown(span.get('row'))}"
    where = f"cell {t}({shown(span.get('row'))},{shown(span.get('col'))})"
    rs, cs = span.get("row_span") or 1, span.get("col_span") or 1
    return where + (f" {shown(rs)}×{shown(cs)}" if (rs, cs) != (1, 1) else "")


def span_line(span: dict[str, Any], width: int | None) -> str:
    """One printed span: ``[where] header: text  (score)``, cut to ``width`` characters.

    >>> span_line({"kind": "cell", "table_index": 0, "row": 1, "col": 1, "header": "기준",
    ...            "text": "750m 이내", "score": 0.8123}, None)
    '[cell t0 (1,1)] 기준: 750m 이내  (0.812)'
    """
    text = shown(span.get("text", ""))
    header = span.get("header")
    if span.get("kind") == "cell" and header:
        row_header = span.get("row_header")
        label = f"{shown(row_header)} / {shown(header)}" if row_header else shown(header)
        text = f"{label}: {text}"
    score = span.get("score")
    tail = f"  ({score:.3f})" if isinstance(score, int | float) else ""
    body = clip(f"[{span_where(span)}] {text}", None if width is None else width - len(tail))
    return body + tail


def print_hits(
    records: Sequence[dict[str, Any]], *, explain: bool, full: bool = False,
    spans: int | None = None,
) -> None:
    """Human-readable listing of :func:`hit_record` dicts; every field is cut to
    :data:`FIELD_CHARS`, a cell line to :data:`LINE_CHARS` and a span line to
    :data:`SPAN_CHARS` unless ``full``; ``spans``: at most that many span lines per hit."""
    field, line = (None, None) if full else (FIELD_CHARS, LINE_CHARS)
    for r in records:
        score = "-" if r["score"] is None else f"{r['score']:.4f}"
        print(
            f"{r['rank']:>2}. {clip(shown(r['section_title']), field)}  "
            f"[{clip(shown(r['file_name']), field)}]  score {score}"
        )
        if r["channels"]:
            print(f"      ranks: {format_channels(r['channels'])}")
        if r["cells"]:
            label = f"table {shown(r['table_index'])}" if r["table_index"] is not None else "table"
            cells = format_cells(r["cells"], None if explain or full else COMPACT_CELLS,
                                 field, line)
            print(f"      {label} cells: {cells}")
        for span in (r.get("criterion_spans") or [])[: spans or 0]:
            print(f"      ▸ {span_line(span, None if full else SPAN_CHARS)}")
        if explain:
            if r["heading_path"]:
                print(f"      path: {clip(shown(r['heading_path']), line)}")
            snippet = shown(r["text"])[:SNIPPET_CHARS]
            print(f"      text: {snippet}…")
            if r["fallback"]:
                print("      (hypothesis failed; plain hybrid fusion was used)")


# ----------------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> int:
    """Load the folder, ask it for the view the options describe, retrieve, print.

    Every decision about the view (its pool, which options a kind takes, the reranker over
    the pool, the spans on the hits) is the view's
    (:func:`~llama_index_car.retrievers.views.view`); the command passes the options on and
    never changes the retriever it gets.
    """
    from llama_index_car.folder.load import load_index
    from llama_index_car.folder.sources import cells_for

    embed_model = None
    if args.embed is not None:
        from llama_index_car.providers import resolve_embed_model

        embed_model = resolve_embed_model(args.embed)
    from llama_index_car.providers import resolve_llm, resolve_reranker

    deadline = float(args.llm_timeout)
    # None for "none" (also the default without LLAMA_CAR_LLM); the SDK retries within the deadline
    llm = resolve_llm(args.llm, timeout=deadline)
    reranker = resolve_reranker(args.rerank, top_n=args.top_k)
    options: dict[str, Any] = {}
    if llm is not None and args.retriever == "car":
        from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer

        # the hypothesis waits exactly the deadline
        options = {"hypothesizer": LLMCriterionHypothesizer(llm=llm),
                   "hypothesis_timeout": deadline}

    local = load_index(args.persist_dir, embed_model=embed_model, store=args.store)
    manifest = local.metadata  # read and checked once, by load_index
    spans = args.spans
    if spans is None and args.retriever == "hybrid" and local.spans is not None:
        spans = DEFAULT_SPAN_LINES  # the hybrid's hits are shown with their spans, as car's
    retriever = local.as_retriever(
        args.retriever, similarity_top_k=args.top_k, alpha=args.alpha, reranker=reranker,
        criterion_spans=spans, **options,
    )
    hits = retriever.retrieve(args.question)
    records = [hit_record(i, h, args.retriever, cells_for(h.node.metadata))
               for i, h in enumerate(hits, start=1)]

    if args.json:
        payload = {
            "question": args.question,
            "retriever": args.retriever,
            "persist_dir": str(args.persist_dir),
            "hits": records,
        }
        print(json_for_terminal(payload))
        return 0
    print(f"query: {shown(args.question)}")
    embed = shown(manifest.get("embed", {}).get("model_name", "?"))
    print(
        f"retriever: {args.retriever}   index: {shown(args.persist_dir)} "
        f"({manifest.get('nodes', '?')} nodes, embedding {embed})"
        + (f"   rerank: {type(reranker).__name__}" if reranker is not None else "")
    )
    if args.retriever == "car":
        hyp = next((r["hypothesis"] for r in records if r["hypothesis"]), None)
        crit: list[str] = next((r["criteria"] for r in records if r["criteria"]), [])
        print(
            f"criterion hypothesis: {shown(hyp) if hyp else '(none)'}"
            + (f"   terms: {' '.join(shown(c) for c in crit)}" if crit else "")
        )
    if not records:
        print("no hits")
        return 0
    print_hits(records, explain=args.explain, full=args.full, spans=args.spans)
    return 0
