"""Locate the bundled demo corpus and load its questions (standard library only).

The HWPX files under ``llama_index_car/data/demo_corpus/`` and the question file
``llama_index_car/data/demo_questions.jsonl`` are generated from :mod:`llama_index_car.demo.spec`
by ``scripts/make_demo_corpus.py`` and ship inside the wheel.

>>> sorted(p.name for p in demo_corpus_files())[:2]
['dg2012_tunnel.hwpx', 'dg2015_rest.hwpx']
>>> load_demo_questions()[0].qid
'd01'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llama_index_car._errors import EvaluationDataError
from llama_index_car._jsonl import iter_jsonl

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
DEMO_CORPUS_DIR = DATA_DIR / "demo_corpus"
DEMO_QUESTIONS_PATH = DATA_DIR / "demo_questions.jsonl"

_REQUIRED = ("qid", "question", "gold_file", "gold_section")


@dataclass(frozen=True)
class DemoQuestion:
    """One demo question; the gold is the section ``gold_section`` of file ``gold_file``."""

    qid: str
    question: str
    gold_file: str
    gold_section: str
    criterion: str = ""
    style: str = "formal"


def demo_corpus_dir() -> Path:
    """The folder holding the bundled ``*.hwpx`` demo files.

    Raises:
        EvaluationDataError: the folder is missing (regenerate with
            ``python scripts/make_demo_corpus.py``).
    """
    if not DEMO_CORPUS_DIR.is_dir() or not any(DEMO_CORPUS_DIR.glob("*.hwpx")):
        raise EvaluationDataError(
            f"demo corpus not found in {DEMO_CORPUS_DIR}; "
            "regenerate it with: python scripts/make_demo_corpus.py"
        )
    return DEMO_CORPUS_DIR


def demo_corpus_files() -> list[Path]:
    """The demo ``*.hwpx`` files, sorted by name."""
    return sorted(demo_corpus_dir().glob("*.hwpx"))


def load_demo_questions(path: str | Path | None = None) -> list[DemoQuestion]:
    """Read a demo question file (JSON Lines; default: the bundled one).

    Each line is an object with ``qid``, ``question``, ``gold_file``, ``gold_section`` and
    optionally ``criterion`` and ``style``. Blank lines are ignored.

    Raises:
        EvaluationDataError: the file is missing, a line is not a JSON object or lacks a
            field (the message names the file and line).
    """
    p = Path(path) if path is not None else DEMO_QUESTIONS_PATH
    if not p.is_file():
        raise EvaluationDataError(
            f"question file {p} not found; regenerate with: python scripts/make_demo_corpus.py"
        )
    out: list[DemoQuestion] = []
    for lineno, row in iter_jsonl(p):
        missing = [k for k in _REQUIRED if not isinstance(row.get(k), str) or not row.get(k)]
        if missing:
            raise EvaluationDataError(f"{p}:{lineno}: missing field(s) {', '.join(missing)}")
        out.append(
            DemoQuestion(
                qid=str(row["qid"]),
                question=str(row["question"]),
                gold_file=str(row["gold_file"]),
                gold_section=str(row["gold_section"]),
                criterion=str(row.get("criterion", "")),
                style=str(row.get("style", "formal")),
            )
        )
    return out
