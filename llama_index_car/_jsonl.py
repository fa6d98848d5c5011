"""Line-oriented data files: non-blank lines and JSON-lines objects with 1-based line numbers.

Standard library only (the demo loader imports it without pulling in LlamaIndex). Both
readers report problems as :class:`~llama_index_car._errors.EvaluationDataError` naming the
file and line; a missing file is the caller's to report (each caller names its own fix).

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
>>> _ = p.write_text('{"a": 1}\\n\\n{"a": 2}\\n', encoding="utf-8")
>>> list(iter_jsonl(p))
[(1, {'a': 1}), (3, {'a': 2})]
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from llama_index_car._errors import EvaluationDataError


def nonblank_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(lineno, line)`` for each non-blank line of a UTF-8 text file (1-based)."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                yield lineno, line


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """Yield ``(lineno, object)`` for each non-blank line of a JSON-lines file.

    Raises:
        EvaluationDataError: ``"<path>:<lineno>: invalid JSON (...)"`` or ``"... expected a
            JSON object per line"``.
    """
    for lineno, line in nonblank_lines(path):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvaluationDataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise EvaluationDataError(f"{path}:{lineno}: expected a JSON object per line")
        yield lineno, obj
