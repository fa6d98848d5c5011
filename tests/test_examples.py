"""Every numbered example runs as a subprocess, as a user would run it.

Offline examples must exit 0 and print what their docstring promises; the key-requiring one
(04, Claude) must exit 2 with one line naming ``ANTHROPIC_API_KEY`` when the key is absent.
The README quickstart (the first ``python`` block of ``README.md``, or of
``docs/README_DRAFT.md`` until the README carries it) is run the same way. Examples that
embed the whole demo corpus take ~10-40 s each and are marked ``slow``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "COHERE_API_KEY", "CO_API_KEY")

#: example file -> regular expressions its stdout must match (offline run)
EXPECTED: dict[str, tuple[str, ...]] = {
    "01_quickstart.py": (r"hypothesis \(\w+\): \S", r"^-?\d+\.\d{4}  \S.*\(dg\d{4}_\w+\.hwpx\)$"),
    "02_simple_directory_reader.py": (
        r"^dg2012_tunnel\.hwpx\s+tables=1$",
        r"README\.txt",
        r"cells \(table, row, col, row_span, col_span, text\): \[\(0, 0, 0, 1, 1, '",
        r"^node id \(uuid5 of document id \+ chunk index\): [0-9a-f]{8}-[0-9a-f]{4}-5",
    ),
    "03_hybrid_weighted_rrf.py": (r"^alpha=0\.5$", r"^alpha=0\.8$", r"dense #\d+  bm25 #"),
    "05_chat_engine.py": (r"^  context: \S", r"memory holds 4 messages"),
    "06_reframing_ingestion_pipeline.py": (
        r"  →  ",
        r"^\d+ of \d+ sections reframed$",
        r"plain → reframed: \[\(",
    ),
    "07_evaluate_and_probe.py": (r"^eval exit code 0$", r"^probe exit code 0$", r"cf"),
}
FAST = {"02_simple_directory_reader.py"}


def _env() -> dict[str, str]:
    """The user's environment minus API keys and provider overrides (the offline path)."""
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARS}
    for var in ("LLAMA_CAR_LLM", "LLAMA_CAR_EMBED_MODEL", "LLAMA_CAR_RERANKER"):
        env.pop(var, None)
    paths = [str(REPO), str(REPO / "readers" / "llama-index-readers-hwpx")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return env


def _run(script: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        cwd=REPO,
    )


def test_examples_are_numbered_short_and_documented() -> None:
    files = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert [f[:3] for f in files] == [f"{i:02d}_" for i in range(1, 8)]
    for name in files:
        text = (EXAMPLES / name).read_text(encoding="utf-8")
        assert len(text.splitlines()) < 60, name
        assert text.startswith('"""') and "Run:" in text, name
    assert set(EXPECTED) | {"04_car_with_claude.py"} == set(files)


def _params() -> list[object]:
    return [
        pytest.param(name, marks=() if name in FAST else pytest.mark.slow, id=name)
        for name in sorted(EXPECTED)
    ]


@pytest.mark.parametrize("name", _params())
def test_offline_example_runs(name: str) -> None:
    proc = _run(EXAMPLES / name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for pattern in EXPECTED[name]:
        assert re.search(pattern, proc.stdout, flags=re.MULTILINE), (pattern, proc.stdout)


def test_claude_example_without_key_exits_2_with_one_line() -> None:
    proc = _run(EXAMPLES / "04_car_with_claude.py", timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ANTHROPIC_API_KEY" in lines[0]
    assert proc.stdout == ""


def _readme_quickstart() -> str:
    for doc in (REPO / "README.md", REPO / "docs" / "README_DRAFT.md"):
        if doc.is_file():
            blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
            if blocks and "CriterionAwareRetriever" in blocks[0]:
                return blocks[0]
    pytest.fail("no python quickstart block in README.md or docs/README_DRAFT.md")


@pytest.mark.slow
def test_readme_quickstart_runs(tmp_path: Path) -> None:
    code = _readme_quickstart()
    assert len(code.strip().splitlines()) <= 15
    script = tmp_path / "quickstart.py"
    script.write_text(code, encoding="utf-8")
    proc = _run(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hits = [line for line in proc.stdout.splitlines() if re.match(r"-?\d+\.\d{4}  \S", line)]
    assert len(hits) == 3, proc.stdout
