"""Run named retrieval systems over a benchmark and score them by overlap stratum.

Inputs: a BEIR folder (:func:`~llama_index_car.evaluation.io.load_beir`) or an HWPX folder plus
a QA file (:func:`load_hwpx_eval`). Steps (each long one shows a tqdm bar):

1. corpus and query embeddings through the on-disk cache (:mod:`.cache`);
2. query–gold lexical overlap and strata (:mod:`.overlap`);
3. LLM hypotheses of every query, once, on demand (the offline CAR needs none);
4. every system (:mod:`.systems`) retrieves ``depth`` (100) documents per query →
   a run ``{qid: {doc_id: score}}``;
5. metrics per stratum (:mod:`.metrics`), bootstrap CIs and the declared test families
   (:func:`declare_tests`, :mod:`.stats`), and an α sweep of the fusion.

HWPX QA file (JSON lines), one question per line::

    {"id": "q1", "question": "...", "gold": [{"file": "a.hwpx", "section_title": "..."}]}
    {"id": "q2", "question": "...", "gold": [{"file": "a.hwpx", "table": 3, "row": 2, "col": 1}]}

``gold`` may also be written inline (``"file"`` + ``"section_title"`` or ``"table"``/``"row"``/
``"col"`` at the top level), or as ``"gold_file"`` + ``"gold_section"`` (the format of the
bundled ``demo_questions.jsonl``); ``"qid"`` is accepted for ``"id"``; an optional ``"answer"``
string is the reference answer (``llama-car eval --spans``). A section gold is relevant in every node of that file whose
``section_title`` equals it (whitespace-normalised) or whose ``heading_path`` contains it; a
cell gold (0-based table index in document order, 0-based row/column of the HWPX cell grid) in
every node whose ``cells`` cover that grid position. Node ids are ``<file stem>-<nnnn>``.

>>> cfg = EvalConfig(systems=("bm25", "dense"))
>>> cfg.depth
100
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.schema import BaseNode, TextNode

from llama_index_car._errors import ConfigurationError, EvaluationDataError
from llama_index_car.evaluation.io import BeirDataset, Qrels, Run, read_jsonl
from llama_index_car.evaluation.metrics import DEFAULT_METRICS, mean, per_query
from llama_index_car.evaluation.overlap import QueryOverlap, compute_overlaps, stratify
from llama_index_car.evaluation.stats import bootstrap_ci, holm, paired_test
from llama_index_car.evaluation.systems import SystemSpec, parse_system

STRATA_KEYS: tuple[str, ...] = ("all", "high", "mid", "low")
DEFAULT_ALPHAS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
BASELINES: tuple[str, ...] = ("bm25", "dense", "hybrid")
_EXCLUDED = ["section_title", "original_section_title", "reframed_criteria"]


@dataclass(frozen=True)
class EvalConfig:
    """Options of one evaluation run (all fixed before the run).

    Attributes:
        systems: system names (see :mod:`.systems`).
        alpha: default dense weight of fusion systems (0.5 = plain RRF order).
        rrf_k: RRF constant (60).
        depth: documents per query in every run (>= 100 for the TREC files).
        hypothesizer: ``"auto"`` (``llm`` when an LLM is given, else ``offline``),
            ``"offline"`` (``car`` is the offline CAR), ``"llm"``.
        rerank_pool: candidates a ``+rerank`` system reorders (50).
        seed: bootstrap seed.
        n_resamples: bootstrap resamples (2000).
        alphas: the α grid of the sweep.
        metrics: metrics written per system and stratum.
        test_metric: the per-query metric the paired tests compare (``mrr``).
        show_progress: tqdm bars.
    """

    systems: Sequence[str] = ("bm25", "dense", "hybrid", "car")
    alpha: float = 0.5
    rrf_k: int = 60
    depth: int = 100
    hypothesizer: str = "auto"
    rerank_pool: int = 50
    seed: int = 0
    n_resamples: int = 2000
    alphas: Sequence[float] = DEFAULT_ALPHAS
    metrics: Sequence[str] = DEFAULT_METRICS
    test_metric: str = "mrr"
    show_progress: bool = True


@dataclass
class EvalData:
    """Nodes to index, the passages for the overlap measure, queries and qrels (and each
    query's optional metadata, e.g. its reference ``answer``)."""

    name: str
    nodes: list[BaseNode]
    passages: dict[str, dict[str, str]]
    queries: dict[str, str]
    qrels: Qrels
    source: str = ""
    query_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    def head(self, max_queries: int | None) -> EvalData:
        """The first ``max_queries`` queries (file order), the full corpus."""
        if max_queries is None or max_queries >= len(self.queries):
            return self
        if max_queries < 1:
            raise ConfigurationError(f"max_queries must be >= 1, got {max_queries}")
        keep = list(self.queries)[:max_queries]
        return EvalData(
            self.name, self.nodes, self.passages, {q: self.queries[q] for q in keep},
            {q: self.qrels[q] for q in keep}, self.source,
            {q: self.query_metadata[q] for q in keep if q in self.query_metadata},
        )


@dataclass
class EvalOutcome:
    """What :func:`run_evaluation` produced (``results`` is the ``results.json`` object)."""

    results: dict[str, Any]
    runs: dict[str, Run]
    per_query: dict[str, dict[str, dict[str, float]]]
    overlaps: dict[str, QueryOverlap]
    qrels: Qrels
    data: EvalData = field(repr=False)


# ----------------------------------------------------------------------------- data
def _node(doc_id: str, title: str, text: str) -> TextNode:
    body = f"## {title}\n\n{text}" if title else text
    return TextNode(
        id_=doc_id,
        text=body,
        metadata={"section_title": title},
        excluded_embed_metadata_keys=list(_EXCLUDED),
        excluded_llm_metadata_keys=list(_EXCLUDED),
    )


def beir_to_eval_data(ds: BeirDataset) -> EvalData:
    """Nodes ``"## {title}\\n\\n{text}"`` (``section_title`` in metadata) from a BEIR dataset."""
    nodes: list[BaseNode] = [_node(d, v["title"], v["text"]) for d, v in ds.corpus.items()]
    return EvalData(ds.name, nodes, ds.corpus, dict(ds.queries), ds.qrels, source="beir",
                    query_metadata={q: dict(m) for q, m in ds.query_metadata.items()})


def _norm(s: str) -> str:
    """Whitespace-collapsed, without private-use glyphs (the node parser's clean titles)."""
    from llama_index.readers.hwpx import clean_title

    return clean_title(str(s))


def _cells(node: BaseNode) -> list[list[int]]:
    """``[table, row, col, row_span, col_span]`` of the node's cells (``node_cells``)."""
    from llama_index.readers.hwpx import node_cells

    try:
        cells = node_cells(node)
    except ValueError:
        return []
    return [[c.table, c.row, c.col, c.row_span, c.col_span] for c in cells]


def _file_id_func(stem: str) -> Callable[[int, BaseNode], str]:
    """``id_func`` naming a file's nodes ``<stem>-<nnnn>`` (readable run files)."""

    def node_id(i: int, doc: BaseNode) -> str:
        return f"{stem}-{i:04d}"

    return node_id


def load_hwpx_eval(
    folder: str | os.PathLike[str], qa_file: str | os.PathLike[str], *, show_progress: bool = False
) -> EvalData:
    """A folder of Hangul documents (every ``*.hwp``, ``*.hwpx``, ``*.hml``, recursively; see
    :func:`~llama_index_car.folder.sources.find_source_files`) plus a QA JSONL file (module
    docstring)."""
    from llama_index.readers.hwpx import HWPXError, HWPXNodeParser

    from llama_index_car._errors import ConfigurationError
    from llama_index_car.folder.sources import (
        file_extractor,
        find_source_files,
        load_source_file,
    )

    root = Path(folder)
    try:
        files = find_source_files(root)
    except ConfigurationError as exc:
        raise EvaluationDataError(str(exc)) from exc
    readers = file_extractor()
    nodes: list[BaseNode] = []
    by_file: dict[str, list[BaseNode]] = {}
    iterator: Iterable[Path] = files
    if show_progress:
        from tqdm.auto import tqdm

        iterator = tqdm(files, desc="read HWP/HWPX/HML", unit="file")
    for f in iterator:
        try:
            docs = load_source_file(f, readers)
        except HWPXError:
            continue
        # one Document per file, so the chunk index is the node's position in the file
        parser = HWPXNodeParser(id_func=_file_id_func(f.stem))
        for node in parser.get_nodes_from_documents(docs):
            nodes.append(node)
            by_file.setdefault(f.name, []).append(node)
    qa = Path(qa_file)
    queries: dict[str, str] = {}
    qrels: Qrels = {}
    query_metadata: dict[str, dict[str, Any]] = {}
    for lineno, row in enumerate(read_jsonl(qa), start=1):
        where = f"{qa}:{lineno}"
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise EvaluationDataError(f"{where}: field 'question' must be a non-empty string")
        qid = str(row.get("id", row.get("_id", row.get("qid", f"q{lineno}"))))
        golds = row.get("gold")
        if golds is None and "gold_file" in row:  # the demo-question spelling
            golds = [{"file": row["gold_file"], "section_title": row.get("gold_section", "")}]
        if golds is None:
            golds = [row]
        if isinstance(golds, dict):
            golds = [golds]
        if not isinstance(golds, list) or not golds:
            raise EvaluationDataError(f"{where}: 'gold' must be an object or a list of objects")
        rel: dict[str, int] = {}
        for g in golds:
            if not isinstance(g, dict) or not isinstance(g.get("file"), str):
                raise EvaluationDataError(f"{where}: every gold needs a 'file' (an .hwpx name)")
            fname = Path(str(g["file"])).name
            candidates = by_file.get(fname)
            if candidates is None:
                raise EvaluationDataError(f"{where}: gold file {fname!r} is not in {root}")
            if "section_title" in g:
                title = _norm(str(g["section_title"]))
                hits = [
                    n.node_id for n in candidates
                    if _norm(n.metadata.get("section_title", "")) == title
                    or title in [_norm(p) for p in str(n.metadata.get("heading_path", "")).split(" > ")]
                ]
            elif all(k in g for k in ("table", "row", "col")):
                t, r, c = int(g["table"]), int(g["row"]), int(g["col"])
                hits = [
                    n.node_id for n in candidates
                    if any(
                        cell[0] == t and cell[1] <= r < cell[1] + cell[3]
                        and cell[2] <= c < cell[2] + cell[4]
                        for cell in _cells(n)
                    )
                ]
            else:
                raise EvaluationDataError(
                    f"{where}: a gold needs 'section_title' or 'table'+'row'+'col'"
                )
            if not hits:
                raise EvaluationDataError(f"{where}: gold {g!r} matches no node of {fname}")
            rel.update({h: 1 for h in hits})
        queries[qid] = question
        qrels[qid] = rel
        if isinstance(row.get("answer"), str):
            query_metadata[qid] = {"answer": row["answer"]}
    if not queries:
        raise EvaluationDataError(f"{qa}: no questions")
    passages = {n.node_id: {"title": "", "text": n.get_content()} for n in nodes}
    return EvalData(root.name, nodes, passages, queries, qrels, source="hwpx",
                    query_metadata=query_metadata)


def load_eval_data(
    data: str | os.PathLike[str], qa_file: str | os.PathLike[str] | None = None,
    *, show_progress: bool = False,
) -> EvalData:
    """A BEIR folder, or an HWPX folder when ``qa_file`` is given."""
    from llama_index_car.evaluation.io import load_beir
    from llama_index_car.folder.sources import SOURCE_SUFFIXES

    if qa_file is not None:
        return load_hwpx_eval(data, qa_file, show_progress=show_progress)
    root = Path(data)
    if root.is_dir() and not (root / "corpus.jsonl").exists() and any(
        q.suffix.lower() in SOURCE_SUFFIXES for q in root.rglob("*")
    ):
        raise EvaluationDataError(
            f"{root} holds HWP/HWPX/HML files but no corpus.jsonl; pass the questions with "
            "--qa FILE"
        )
    return beir_to_eval_data(load_beir(root))


# ----------------------------------------------------------------------------- tests
def declare_tests(systems: Sequence[str], strata_sizes: Mapping[str, int]) -> list[dict[str, str]]:
    """The paired one-sided tests, declared from the system list before any score is seen.

    * family ``vs-hybrid`` (stratum ``all``): hybrid > bm25 and hybrid > dense; every other
      system > hybrid.
    * family ``car-vs-baselines`` (strata ``all`` and ``low``, the paper's six CAR tests): every
      CAR-family system > bm25, dense, hybrid.

    Holm is applied within each family; strata with no query are left out.
    """
    present = set(systems)
    out: list[dict[str, str]] = []
    if "hybrid" in present and strata_sizes.get("all", 0):
        for s in systems:
            if s == "hybrid":
                continue
            a, b = ("hybrid", s) if s in ("bm25", "dense") else (s, "hybrid")
            out.append({"family": "vs-hybrid", "a": a, "b": b, "stratum": "all"})
    for s in systems:
        if not parse_system(s).is_car:
            continue
        for stratum in ("all", "low"):
            if not strata_sizes.get(stratum, 0):
                continue
            for b in BASELINES:
                if b in present:
                    out.append({"family": "car-vs-baselines", "a": s, "b": b, "stratum": stratum})
    return out


def _run_tests(
    declared: Sequence[dict[str, str]],
    per_q: Mapping[str, Mapping[str, Mapping[str, float]]],
    strata: Mapping[str, list[str]],
    metric: str,
    seed: int,
    n_resamples: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for t in declared:
        qids = strata[t["stratum"]]
        a = [per_q[t["a"]][metric][q] for q in qids]
        b = [per_q[t["b"]][metric][q] for q in qids]
        res = paired_test(a, b, seed=seed, n_resamples=n_resamples).to_dict()
        rows.append({**t, "metric": metric, **res})
    for family in sorted({r["family"] for r in rows}):
        members = [r for r in rows if r["family"] == family]
        for r, ph in zip(members, holm([r["p"] for r in members]), strict=True):
            r["p_holm"] = ph
    return rows


# ----------------------------------------------------------------------------- running
def _progress(items: Sequence[Any], show: bool, desc: str) -> Iterable[Any]:
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="q")


def _retrieve_all(
    retriever: Any, queries: Mapping[str, str], show: bool, desc: str
) -> tuple[Run, list[float], dict[str, int]]:
    run: Run = {}
    latencies: list[float] = []
    routing = {"car": 0, "hybrid": 0, "fallback": 0}
    for qid in _progress(list(queries), show, desc):
        t0 = time.perf_counter()
        hits = retriever.retrieve(queries[qid])
        latencies.append(1000.0 * (time.perf_counter() - t0))
        docs: dict[str, float] = {}
        for h in hits:
            docs.setdefault(h.node.node_id, float(h.score if h.score is not None else 0.0))
        run[qid] = docs
        explain = hits[0].node.metadata.get("car_explain") if hits else None
        if isinstance(explain, dict):
            if explain.get("fallback"):
                routing["fallback"] += 1
            elif explain.get("routed") in routing:
                routing[str(explain["routed"])] += 1
    return run, latencies, routing


def _stratum_metrics(
    pq: Mapping[str, Mapping[str, float]], qids: Sequence[str], seed: int, n_resamples: int
) -> dict[str, Any]:
    cell: dict[str, Any] = {"n": len(qids)}
    for metric, values in pq.items():  # an empty stratum has no mean: null in results.json
        cell[metric] = mean([values[q] for q in qids]) if qids else None
    mrr_values = [pq["mrr"][q] for q in qids] if "mrr" in pq else []
    lo, hi = bootstrap_ci(mrr_values, seed=seed, n_resamples=n_resamples)
    cell["mrr_ci95"] = [lo, hi] if qids else [None, None]
    return cell


def _channel_lists(run: Run, qids: Iterable[str]) -> dict[str, list[str]]:
    from llama_index_car.evaluation.io import rank_items

    return {q: [d for d, _ in rank_items(run.get(q, {}))] for q in qids}


def _alpha_sweep(
    pairs: Mapping[str, tuple[Run, Run]],
    qrels: Qrels,
    alphas: Sequence[float],
    rrf_k: int,
    depth: int,
) -> dict[str, dict[str, float]]:
    from llama_index_car.fusion import weighted_rrf

    out: dict[str, dict[str, float]] = {}
    for label, (dense_run, lexical_run) in pairs.items():
        qids = sorted(qrels)
        dense_l, lex_l = _channel_lists(dense_run, qids), _channel_lists(lexical_run, qids)
        points: dict[str, float] = {}
        for a in alphas:
            if not 0.0 <= a <= 1.0:
                raise ConfigurationError(f"alpha {a} of the sweep is not in [0, 1]")
            if a == 0.0 and not lex_l or a == 1.0 and not dense_l:
                continue
            fused: Run = {
                q: dict(weighted_rrf([dense_l[q], lex_l[q]], [a, 1.0 - a], rrf_k)[:depth])
                for q in qids
            }
            points[f"{a:g}"] = mean(per_query(fused, qrels, ["mrr"])["mrr"])
        out[label] = points
    return out


def run_evaluation(
    data: EvalData,
    config: EvalConfig,
    embed_model: Any,
    *,
    llm: Any = None,
    reranker: Any = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> EvalOutcome:
    """Run every system of ``config`` on ``data`` and score it (see the module docstring)."""
    from llama_index_car.embeddings.cache import CachedEmbedding, EmbeddingCache, default_cache_dir
    from llama_index_car.evaluation.systems import SystemFactory

    if config.depth < 1:
        raise ConfigurationError(f"depth={config.depth} must be >= 1 (100 for TREC files)")
    specs: list[SystemSpec] = [parse_system(s) for s in config.systems]
    names = [s.name for s in specs]
    if not specs:
        raise ConfigurationError("no system given; e.g. --systems bm25,dense,hybrid,car")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"system names repeat: {names}")
    show = config.show_progress
    kind = config.hypothesizer
    if kind == "auto":
        kind = "llm" if llm is not None else "offline"

    cache = EmbeddingCache(cache_dir or default_cache_dir(), embed_model)
    cached = CachedEmbedding(cache)
    from llama_index.core.schema import MetadataMode

    vectors = any(s.needs_vectors for s in specs)  # bm25 alone embeds nothing
    if vectors:
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in data.nodes]
        cache.embed(texts, "text", show_progress=show, desc="embed corpus")
        cache.embed(list(data.queries.values()), "query", show_progress=show,
                    desc="embed queries")

    overlaps = compute_overlaps(
        data.queries, data.passages, data.qrels, show_progress=show
    )
    strata = stratify(overlaps)
    # every qrels query with a relevant doc is scored; strata come from the overlaps
    strata["all"] = sorted(q for q in data.qrels if any(r > 0 for r in data.qrels[q].values()))

    hyp_cache = Path(cache_dir or default_cache_dir()).parent / "hypotheses"
    factory = SystemFactory(
        data.nodes, cached, depth=config.depth, alpha=config.alpha, rrf_k=config.rrf_k,
        hypothesizer=kind, llm=llm, reranker=reranker, rerank_pool=config.rerank_pool,
        show_progress=show, hypothesis_cache_dir=str(hyp_cache), vectors=vectors,
    )

    runs: dict[str, Run] = {}
    timing: dict[str, dict[str, float]] = {}
    routing: dict[str, dict[str, int]] = {}
    for spec in specs:
        retriever = factory.build(spec)
        run, lat, route = _retrieve_all(retriever, data.queries, show, spec.name)
        runs[spec.name] = run
        timing[spec.name] = {
            "ms_per_query_mean": statistics.fmean(lat) if lat else 0.0,
            "ms_per_query_median": statistics.median(lat) if lat else 0.0,
        }
        if spec.is_car:
            routing[spec.name] = route

    per_q = {name: per_query(runs[name], data.qrels, config.metrics) for name in names}
    if config.test_metric not in config.metrics:
        raise ConfigurationError(f"test_metric {config.test_metric!r} is not in metrics")
    systems_out: dict[str, dict[str, Any]] = {}
    for name in names:
        systems_out[name] = {
            s: _stratum_metrics(per_q[name], strata[s], config.seed, config.n_resamples)
            for s in STRATA_KEYS
        }
    sizes = {s: len(strata[s]) for s in STRATA_KEYS}
    tests = _run_tests(
        declare_tests(names, sizes), per_q, strata, config.test_metric, config.seed,
        config.n_resamples,
    )

    pairs: dict[str, tuple[Run, Run]] = {}
    plain = factory.variant(None)
    need_channels = any(s.base in ("hybrid", "car", "car-auto") for s in specs)
    if need_channels and plain.dense is not None:
        dense_run = runs.get("dense") or _retrieve_all(plain.dense, data.queries, False, "")[0]
        bm25_run = runs.get("bm25") or _retrieve_all(plain.bm25, data.queries, False, "")[0]
        pairs["hybrid"] = (dense_run, bm25_run)
        if "dense+hyp" in runs and "bm25+exp" in runs:
            pairs["car (dense+hyp ⊕ bm25+exp)"] = (runs["dense+hyp"], runs["bm25+exp"])
    sweep = _alpha_sweep(pairs, data.qrels, config.alphas, config.rrf_k, config.depth)

    values = [o.value for o in overlaps.values()]
    results: dict[str, Any] = {
        "format_version": 1,
        "dataset": {
            "name": data.name, "source": data.source, "n_queries": len(data.queries),
            "n_docs": len(data.nodes),
        },
        "config": {
            **{k: v for k, v in asdict(config).items() if k != "show_progress"},
            "hypothesizer": kind,
            "embed_model": dict(cache.spec),
            "llm": type(llm).__name__ if llm is not None else None,
        },
        "overlap": {
            "n": len(values),
            "mean": statistics.fmean(values) if values else None,
            "median": statistics.median(values) if values else None,
            **{s: sizes[s] for s in ("high", "mid", "low")},
        },
        "systems": systems_out,
        "tests": tests,
        "alpha_sweep": sweep,
        "timing": timing,
        "routing": routing,
        "embedding_cache": {"hits": cache.hits, "misses": cache.misses, "path": str(cache.path)},
    }
    return EvalOutcome(results, runs, per_q, overlaps, data.qrels, data)
