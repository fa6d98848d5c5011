"""Evaluation: BEIR/TREC io, metrics, overlap strata, paired statistics, runner, probe.

Pure functions over ``{qid: {doc_id: score}}`` runs and ``{qid: {doc_id: rel}}`` qrels; see
each module's docstring for formulas and defaults. Heavy modules (runner, systems, report,
plots, probe) are imported from their own module paths.
"""

from llama_index_car.evaluation.io import (
    BeirDataset,
    load_beir,
    read_trec_qrels,
    read_trec_run,
    write_trec_qrels,
    write_trec_run,
)
from llama_index_car.evaluation.metrics import DEFAULT_METRICS, Evaluation, evaluate, per_query
from llama_index_car.evaluation.overlap import STRATA, compute_overlaps, overlap, stratify, stratum
from llama_index_car.evaluation.stats import (
    PairedTest,
    bootstrap_ci,
    cohens_dz,
    holm,
    paired_test,
    wilcoxon_greater,
)

__all__ = [
    "DEFAULT_METRICS",
    "STRATA",
    "BeirDataset",
    "Evaluation",
    "PairedTest",
    "bootstrap_ci",
    "cohens_dz",
    "compute_overlaps",
    "evaluate",
    "holm",
    "load_beir",
    "overlap",
    "paired_test",
    "per_query",
    "read_trec_qrels",
    "read_trec_run",
    "stratify",
    "stratum",
    "wilcoxon_greater",
    "write_trec_qrels",
    "write_trec_run",
]
