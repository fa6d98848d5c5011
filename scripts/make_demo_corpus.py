"""Regenerate the bundled demo corpus from ``llama_index_car/demo/spec.py``.

Writes one HWPX file per document to ``llama_index_car/data/demo_corpus/`` and the questions
to ``llama_index_car/data/demo_questions.jsonl``. The output is byte-for-byte deterministic
(fixed zip timestamps, fixed order), so ``--check`` can verify that the committed files match
the spec.

Usage::

    python scripts/make_demo_corpus.py            # rewrite the files
    python scripts/make_demo_corpus.py --check    # exit 1 if any committed file is stale
    python scripts/make_demo_corpus.py --out /tmp/corpus --questions /tmp/q.jsonl

Each document becomes one HWPX section: a level-1 heading with the document title, then for
every section a level-2 heading, its paragraphs, its tables (merged cells kept) and its closing
paragraphs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "readers" / "llama-index-readers-hwpx")]

from llama_index.readers.hwpx.writer import HWPXBuilder  # noqa: E402

from llama_index_car.demo.loader import DEMO_CORPUS_DIR, DEMO_QUESTIONS_PATH  # noqa: E402
from llama_index_car.demo.spec import DOCUMENTS, QUESTIONS, DocumentSpec  # noqa: E402


def build_document(doc: DocumentSpec) -> bytes:
    """The HWPX bytes of one spec document."""
    builder = HWPXBuilder(title=doc.title)
    sec = builder.add_section()
    sec.heading(doc.title, level=1)
    for section in doc.sections:
        sec.heading(section.title, level=2)
        for text in section.paragraphs:
            sec.paragraph(text)
        for table in section.tables:
            spans = {(r, c): (rs, cs) for r, c, rs, cs in table.spans} or None
            sec.table([list(row) for row in table.rows], spans=spans, caption=table.caption or None)
        for text in section.closing:
            sec.paragraph(text)
    return builder.to_bytes()


def questions_jsonl() -> str:
    """The question file's text: one JSON object per line, in spec order."""
    lines = [
        json.dumps(
            {
                "qid": q.qid,
                "question": q.question,
                "gold_file": q.gold_file,
                "gold_section": q.gold_section,
                "criterion": q.criterion,
                "style": q.style,
            },
            ensure_ascii=False,
        )
        for q in QUESTIONS
    ]
    return "\n".join(lines) + "\n"


def validate_spec() -> None:
    """Every question's gold section exists, file names and section titles are unique."""
    titles: dict[str, set[str]] = {}
    for doc in DOCUMENTS:
        names = [s.title for s in doc.sections]
        if len(set(names)) != len(names) or doc.file_name in titles:
            raise SystemExit(f"duplicate file or section title in {doc.file_name}")
        titles[doc.file_name] = set(names)
    for q in QUESTIONS:
        if q.gold_section not in titles.get(q.gold_file, set()):
            raise SystemExit(f"{q.qid}: gold {q.gold_file} / {q.gold_section!r} not in the spec")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEMO_CORPUS_DIR, help="HWPX output folder")
    parser.add_argument("--questions", type=Path, default=DEMO_QUESTIONS_PATH)
    parser.add_argument(
        "--check", action="store_true", help="compare with the files on disk; write nothing"
    )
    args = parser.parse_args(argv)
    validate_spec()
    wanted: dict[Path, bytes] = {args.out / doc.file_name: build_document(doc) for doc in DOCUMENTS}
    wanted[args.questions] = questions_jsonl().encode("utf-8")
    if args.check:
        stale = [p for p, data in wanted.items() if not p.is_file() or p.read_bytes() != data]
        extra = sorted(set(args.out.glob("*.hwpx")) - set(wanted))
        for p in stale:
            print(f"stale: {p}", file=sys.stderr)
        for p in extra:
            print(f"not in the spec: {p}", file=sys.stderr)
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for path, data in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    total = sum(len(d) for d in wanted.values())
    print(f"wrote {len(DOCUMENTS)} HWPX files and {len(QUESTIONS)} questions ({total:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
