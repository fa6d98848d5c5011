"""The counterfactual title-framing probe of the paper (§4.4, Tables 2–3, Figures 3–4).

For every *eligible* section — a plan-framed title (:func:`~llama_index_car.framing.classify_title`
is ``"plan"``) whose body states a ``~기준`` criterion compound absent from the title
(:func:`~llama_index_car.framing.extract_criteria`) — the probe builds six documents over the
same body (:func:`~llama_index_car.framing.make_probe_variants`: ``orig``, ``cf``, ``cfp``,
``cfn``, ``cfb``, ``cfs``; each ``"## {title}\\n\\n{body}"`` cut at 8000 characters) and the
query ``strip_plan_tokens(title) + " " + criterion``
(:func:`~llama_index_car.framing.probe_query`), embeds them with any LlamaIndex
``BaseEmbedding`` and measures cos(query, variant).

Contrasts (:data:`CONTRASTS`, the declared Holm family; each "a − b" tested one-sided a > b):

=============  =====================================================
cf − orig      total title effect
cfb − orig     term frequency (+1 body mention)
cfs − cfb      early body position (primacy)
cf − cfs       title framing beyond position (aboutness residual)
cf − cfb       position + slot combined
cfp − orig     criterion in the title slot, plan framing kept
cf − cfp       removing the plan framing
cfn − cfp      plan semantics at matched length
cf − cfn       title token composition (shortening)
=============  =====================================================

Rank displacement (§5.2 "From cosine shift to rank displacement"): the probe corpus is every
loaded section embedded as its ``orig`` document; for each case the target's rank under its
query is ``1 + #{other sections with a strictly higher cosine}``, once with the target as
``orig`` and once with the target replaced by its ``cf`` document (all others fixed).

>>> sections = [ProbeSection("s1", "배수시설 개선방안", "배수시설의 설치기준은 다음과 같다.")]
>>> [c.criterion for c in eligible_cases(sections)[0]]
['설치기준']
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_car._errors import EvaluationDataError
from llama_index_car.embeddings.cache import EmbeddingCache
from llama_index_car.evaluation.stats import PairedTest, holm, paired_test, wilcoxon_greater

#: the six variants of Table 2
VARIANTS: tuple[str, ...] = ("orig", "cf", "cfp", "cfn", "cfb", "cfs")

#: (a, b, what it isolates): the Table-3 contrasts, tested one-sided "a > b", Holm over all
CONTRASTS: tuple[tuple[str, str, str], ...] = (
    ("cf", "orig", "Total title effect"),
    ("cfb", "orig", "Term frequency (+1 body mention)"),
    ("cfs", "cfb", "Early body position (primacy)"),
    ("cf", "cfs", "Title framing beyond position (aboutness)"),
    ("cf", "cfb", "Position + slot combined"),
    ("cfp", "orig", "Criterion in the title slot, plan framing kept"),
    ("cf", "cfp", "Removing the plan framing"),
    ("cfn", "cfp", "Plan semantics at matched length"),
    ("cf", "cfn", "Title token composition (shortening)"),
)


@dataclass(frozen=True)
class ProbeSection:
    """One corpus section: ``id``, ``title``, ``body`` and where it came from."""

    id: str
    title: str
    body: str
    source: str = ""


@dataclass(frozen=True)
class ProbeCase:
    """An eligible section with its criterion, probe query and six variant documents."""

    section: ProbeSection
    criterion: str
    query: str
    variants: dict[str, str] = field(compare=False)


@dataclass
class ProbeResult:
    """Everything the probe measured (see :meth:`to_dict` for the JSON shape)."""

    model: dict[str, Any]
    counts: dict[str, int]
    cases: list[ProbeCase]
    cosines: dict[str, list[float]]
    contrasts: list[dict[str, Any]]
    displacement: dict[str, Any]
    per_case_ranks: list[dict[str, Any]]
    frames: list[str] = field(default_factory=lambda: ["plan"])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: model, counts, variant means, contrasts, displacement, cases."""
        means = {v: float(np.mean(c)) if c else None for v, c in self.cosines.items()}
        sems = {
            v: float(np.std(c, ddof=1) / np.sqrt(len(c))) if len(c) > 1 else None
            for v, c in self.cosines.items()
        }
        cases = []
        for i, case in enumerate(self.cases):
            row: dict[str, Any] = {
                "id": case.section.id,
                "source": case.section.source,
                "title": case.section.title,
                "criterion": case.criterion,
                "query": case.query,
                "cos": {v: self.cosines[v][i] for v in VARIANTS},
            }
            if i < len(self.per_case_ranks):
                row.update(self.per_case_ranks[i])
            cases.append(row)
        return {
            "model": self.model,
            "counts": self.counts,
            "frames": self.frames,
            "variant_mean_cos": means,
            "variant_sem_cos": sems,
            "contrasts": self.contrasts,
            "displacement": self.displacement,
            "cases": cases,
        }


# ----------------------------------------------------------------------------- loading
def load_sections_jsonl(path: str | os.PathLike[str]) -> list[ProbeSection]:
    """Sections from a JSON-lines file of ``{"title": ..., "body": ...}`` objects.

    ``text`` is accepted for ``body``; ``id``/``_id`` are optional (default ``line-<n>``).
    """
    from llama_index_car.evaluation.io import read_jsonl

    p = Path(path)
    out: list[ProbeSection] = []
    for lineno, row in enumerate(read_jsonl(p), start=1):
        title = row.get("title")
        body = row.get("body", row.get("text"))
        if not isinstance(title, str) or not isinstance(body, str):
            raise EvaluationDataError(
                f"{p}:{lineno}: each line needs string fields 'title' and 'body'"
            )
        sid = row.get("id", row.get("_id", f"line-{lineno}"))
        out.append(ProbeSection(str(sid), title, body, source=p.name))
    return out


def load_sections_folder(folder: str | os.PathLike[str]) -> list[ProbeSection]:
    """Heading sections of every ``*.hwp``, ``*.hwpx`` and ``*.hml`` file under ``folder``
    (recursively, sorted).

    Each file is read by the reader of its suffix
    (:func:`~llama_index_car.folder.sources.load_source_file`) and split with ``HWPXNodeParser``;
    consecutive nodes sharing a ``section_title`` form one section whose body is their texts
    joined by newlines. Files the reader rejects (encrypted, damaged) are skipped.
    """
    from llama_index.readers.hwpx import HWPXNodeParser

    from llama_index_car._errors import ConfigurationError
    from llama_index_car.folder.sources import (
        file_extractor,
        find_source_files,
        load_source_file,
        read_errors,
    )

    root = Path(folder)
    try:
        files = find_source_files(root)
    except ConfigurationError as exc:
        raise EvaluationDataError(str(exc)) from exc
    readers = file_extractor()
    parser = HWPXNodeParser()
    out: list[ProbeSection] = []
    for f in files:
        try:
            docs = load_source_file(f, readers)
        except read_errors():
            continue
        nodes = parser.get_nodes_from_documents(docs)
        groups: list[tuple[str, list[str]]] = []
        for node in nodes:
            title = str(node.metadata.get("section_title") or "").strip()
            text = node.get_content()
            if groups and groups[-1][0] == title:
                groups[-1][1].append(text)
            else:
                groups.append((title, [text]))
        for i, (title, texts) in enumerate(groups):
            if not title:
                continue
            body = "\n".join(_strip_header(t, title) for t in texts)
            out.append(ProbeSection(f"{f.stem}#{i}", title, body, source=f.name))
    return out


def _strip_header(text: str, title: str) -> str:
    """Drop the ``## {title}`` line the node parser puts first (and a repeated title line)."""
    for head in (f"## {title}", title):
        if text.startswith(head):
            text = text[len(head) :].lstrip("\n")
    return text


def load_sections(corpus: str | os.PathLike[str]) -> list[ProbeSection]:
    """A JSONL file (``{title, body}``) or a folder of HWP/HWPX/HML files, by what
    ``corpus`` is."""
    p = Path(corpus)
    if p.is_dir():
        return load_sections_folder(p)
    if p.is_file():
        return load_sections_jsonl(p)
    raise EvaluationDataError(
        f"{p}: neither a folder of .hwp/.hwpx/.hml files nor a JSONL file of {{title, body}}"
    )


# ----------------------------------------------------------------------------- cases
def eligible_cases(
    sections: Iterable[ProbeSection],
    *,
    frames: Sequence[str] = ("plan",),
    heads: Sequence[str] | None = None,
) -> tuple[list[ProbeCase], dict[str, int]]:
    """Eligible sections as :class:`ProbeCase` plus counts by title frame and eligibility.

    Eligible = a title whose :func:`~llama_index_car.framing.classify_title` is in ``frames``
    (the paper: ``("plan",)``) and at least one body criterion compound (``heads``, default
    ``~기준``) absent from the title; the criterion is the first such compound. With
    non-plan frames, ``cf``, ``cfp`` and ``cfn`` coincide (no plan token to remove), so only the
    title-slot contrasts are informative; :func:`run_probe` counts identical variant pairs.
    """
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.framing import (
        DEFAULT_CRITERION_HEADS,
        classify_title,
        extract_criteria,
        make_probe_variants,
        probe_query,
    )

    allowed = ("plan", "standard", "mixed", "neither")
    bad = [f for f in frames if f not in allowed]
    if bad or not frames:
        raise ConfigurationError(f"frames={list(frames)!r}; use a subset of {allowed}")
    head_tuple = tuple(heads) if heads else DEFAULT_CRITERION_HEADS
    counts = {"sections": 0, "plan": 0, "standard": 0, "mixed": 0, "neither": 0}
    counts["framed_with_criterion"] = 0
    cases: list[ProbeCase] = []
    for s in sections:
        counts["sections"] += 1
        frame = classify_title(s.title)
        counts[frame] += 1
        if frame not in frames:
            continue
        criteria = extract_criteria(s.body, title=s.title, heads=head_tuple)
        if not criteria:
            continue
        counts["framed_with_criterion"] += 1
        crit = criteria[0]
        cases.append(
            ProbeCase(
                section=s,
                criterion=crit,
                query=probe_query(s.title, crit),
                variants=make_probe_variants(s.title, s.body, crit),
            )
        )
    counts["eligible"] = len(cases)
    return cases, counts


def _unit(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def _contrast_rows(
    cos: dict[str, np.ndarray], seed: int, cases: Sequence[ProbeCase]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    tests: list[PairedTest] = []
    for a, b, what in CONTRASTS:
        t = paired_test(cos[a], cos[b], seed=seed)
        tests.append(t)
        same = sum(1 for c in cases if c.variants[a] == c.variants[b])
        rows.append({"a": a, "b": b, "contrast": f"{a} − {b}", "isolates": what,
                     "n_identical_text": same})
    adjusted = holm([t.p for t in tests]) if tests else []
    for row, t, ph in zip(rows, tests, adjusted, strict=True):
        d = t.to_dict()
        d["p_holm"] = ph
        row.update(d)
    return rows


def _rank_among(scores_others: np.ndarray, target: float) -> int:
    return int(1 + np.sum(scores_others > target))


def run_probe(
    cases: Sequence[ProbeCase],
    embed_model: Any,
    *,
    corpus: Sequence[ProbeSection] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    counts: dict[str, int] | None = None,
    frames: Sequence[str] = ("plan",),
    show_progress: bool = False,
) -> ProbeResult:
    """Embed queries and variants, compute the Table-3 contrasts and the rank displacement.

    Args:
        cases: eligible cases (:func:`eligible_cases`, possibly sampled).
        embed_model: any LlamaIndex ``BaseEmbedding``.
        corpus: the sections ranked against for the displacement (default: the cases' own).
        cache_dir: embedding-cache root (default :func:`~.cache.default_cache_dir`).
        seed: bootstrap seed.
        counts: eligibility counts to carry into the result.
        frames: the title frames that were eligible (reported).
    """
    from llama_index_car.embeddings.cache import default_cache_dir
    from llama_index_car.framing import format_section

    if not cases:
        raise EvaluationDataError(
            "no eligible section: the probe needs plan-framed titles whose body states a "
            "~기준 criterion absent from the title"
        )
    cache = EmbeddingCache(cache_dir or default_cache_dir(), embed_model)
    q = _unit(cache.embed([c.query for c in cases], "query", show_progress=show_progress,
                          desc="probe queries"))
    cos: dict[str, np.ndarray] = {}
    for v in VARIANTS:
        docs = _unit(cache.embed([c.variants[v] for c in cases], "text",
                                 show_progress=show_progress, desc=f"probe {v}"))
        cos[v] = np.einsum("ij,ij->i", q, docs).astype(float)
    contrasts = _contrast_rows(cos, seed, cases)

    pool = list(corpus) if corpus is not None else [c.section for c in cases]
    pool_docs = _unit(cache.embed([format_section(s.title, s.body) for s in pool], "text",
                                  show_progress=show_progress, desc="probe corpus"))
    index_of = {s.id: i for i, s in enumerate(pool)}
    per_case: list[dict[str, Any]] = []
    r_orig: list[float] = []
    r_cf: list[float] = []
    for i, case in enumerate(cases):
        sims = pool_docs @ q[i]
        j = index_of.get(case.section.id)
        others = np.delete(sims, j) if j is not None else sims
        ro = _rank_among(others, float(cos["orig"][i]))
        rc = _rank_among(others, float(cos["cf"][i]))
        per_case.append({"rank_orig": ro, "rank_cf": rc})
        r_orig.append(ro)
        r_cf.append(rc)
    ro_a, rc_a = np.asarray(r_orig, float), np.asarray(r_cf, float)
    gain = wilcoxon_greater(ro_a, rc_a)  # rank_orig > rank_cf means cf lifted the target
    displacement = {
        "corpus_size": len(pool),
        "mean_rank_orig": float(ro_a.mean()),
        "mean_rank_cf": float(rc_a.mean()),
        "median_rank_orig": float(np.median(ro_a)),
        "median_rank_cf": float(np.median(rc_a)),
        "improved": int(np.sum(rc_a < ro_a)),
        "worsened": int(np.sum(rc_a > ro_a)),
        "unchanged": int(np.sum(rc_a == ro_a)),
        "top10_orig": int(np.sum(ro_a <= 10)),
        "top10_cf": int(np.sum(rc_a <= 10)),
        "wilcoxon_p": gain.p,
        "d_z": None if np.isnan(gain.d_z) else gain.d_z,
    }
    return ProbeResult(
        model=dict(cache.spec),
        counts=dict(counts or {}),
        cases=list(cases),
        cosines={v: [float(x) for x in cos[v]] for v in VARIANTS},
        contrasts=contrasts,
        displacement=displacement,
        per_case_ranks=per_case,
        frames=list(frames),
    )


def sample_cases(cases: Sequence[ProbeCase], n: int | None, seed: int = 0) -> list[ProbeCase]:
    """A seeded random sample of ``n`` cases in their original order (all when ``n`` is None)."""
    if n is None or n >= len(cases):
        return list(cases)
    keep = sorted(random.Random(seed).sample(range(len(cases)), n))
    return [cases[i] for i in keep]


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def _fmt(x: float | None, spec: str = "+.4f") -> str:
    return "–" if x is None else format(x, spec)


def probe_markdown(result: ProbeResult) -> str:
    """Table-3 style markdown: contrasts, variant means and rank displacement."""
    d = result.to_dict()
    n = len(result.cases)
    lines = [
        "# Counterfactual title-framing probe",
        "",
        f"Model: `{d['model'].get('class')}` `{d['model'].get('model_name')}`. "
        f"Sections: {d['counts'].get('sections', '?')} loaded; plan-framed "
        f"{d['counts'].get('plan', '?')}, standard {d['counts'].get('standard', '?')}, "
        f"mixed {d['counts'].get('mixed', '?')}, neither {d['counts'].get('neither', '?')}; "
        f"eligible {d['counts'].get('eligible', '?')} (title frames: "
        f"{', '.join(d['frames'])}); "
        f"probed n = {n}.",
        "",
        "## Contrasts (Table 3 shape)",
        "",
        "Δ is the mean change in cos(query, variant); 'Cases' counts sections moving in the "
        "predicted direction; one-sided paired Wilcoxon (zero differences dropped), Holm over "
        "the nine contrasts; 95% bootstrap CI of Δ (2000 resamples). The last column counts "
        "pairs whose two documents are the same text, and pairs the model embeds with "
        "exactly equal cosine (e.g. a tokenizer that ignores the newline between title and "
        "first body line makes cf and cfs identical).",
        "",
        "| Contrast | What it isolates | Δ cosine | 95% CI | Cases | Wilcoxon p | Holm p | d_z "
        "| identical texts / equal cos |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["contrasts"]:
        cases = f"{r['n_better']}/{r['n']} ({100 * r['n_better'] / max(r['n'], 1):.0f}%)"
        ci = f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
        lines.append(
            f"| {r['a']} vs. {r['b']} | {r['isolates']} | {_fmt(r['delta'])} | {ci} | {cases} "
            f"| {_fmt_p(r['p'])} | {_fmt_p(r['p_holm'])} | {_fmt(r['d_z'], '.2f')} "
            f"| {r['n_identical_text']} / {r['n_ties']} |"
        )
    lines += ["", "## Mean cosine by variant", "", "| variant | mean cos | SEM |", "|---|---|---|"]
    for v in VARIANTS:
        lines.append(
            f"| {v} | {_fmt(d['variant_mean_cos'][v], '.4f')} | "
            f"{_fmt(d['variant_sem_cos'][v], '.4f')} |"
        )
    disp = d["displacement"]
    lines += [
        "",
        "## Rank displacement (target's rank among the probe corpus, orig vs cf title)",
        "",
        f"Corpus: {disp['corpus_size']} sections (each embedded as its orig document).",
        "",
        "| | mean rank | median rank | in top 10 |",
        "|---|---|---|---|",
        f"| orig | {disp['mean_rank_orig']:.1f} | {disp['median_rank_orig']:.1f} | "
        f"{disp['top10_orig']}/{n} |",
        f"| cf | {disp['mean_rank_cf']:.1f} | {disp['median_rank_cf']:.1f} | "
        f"{disp['top10_cf']}/{n} |",
        "",
        f"Improved {disp['improved']}, worsened {disp['worsened']}, unchanged "
        f"{disp['unchanged']}; one-sided Wilcoxon (rank_orig > rank_cf) p = "
        f"{_fmt_p(disp['wilcoxon_p'])}, d_z = {_fmt(disp['d_z'], '.2f')}.",
        "",
    ]
    return "\n".join(lines)


def write_probe_outputs(result: ProbeResult, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``probe.json``, ``probe.md`` and ``probe.png`` (when matplotlib is installed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    (out / "probe.json").write_text(
        json.dumps(result.to_dict(), ensure_ascii=False, indent=2), encoding="utf-8"
    )
    written.append(out / "probe.json")
    (out / "probe.md").write_text(probe_markdown(result), encoding="utf-8")
    written.append(out / "probe.md")
    from llama_index_car.evaluation.plots import plot_probe_conditions

    png = plot_probe_conditions(result.to_dict(), out / "probe.png")
    if png is not None:
        written.append(png)
    return written
