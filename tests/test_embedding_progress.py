"""Long embedding steps: a progress bar when asked (and on a terminal), the cache reused.

``build_index`` draws one "embedding (N texts)" bar on stderr with ``show_progress=True`` and
none otherwise; the CLI subcommands that embed (``index``, ``demo``, ``eval``, ``probe``) show
their bars only when stderr is a terminal and never with ``--quiet``/``--no-progress``. The
index path goes through the shared embedding cache: a second build embeds nothing and stores
the same vectors.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_index_car.cli import build_parser, main
from llama_index_car.cli._args import show_progress
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from llama_index_car.folder import BuildOptions, build_index
from tests.fakes.embeddings import VecEmbedding

DOC = "dg2019_drainage.hwpx"


class CountingEmbedding(VecEmbedding):
    """Character-class counts (8-d) that records every string it embeds."""

    model_name: str = "counting-8"
    seen: list[str] = []

    def _vec(self, text: str) -> list[float]:
        self.seen.append(text)
        v = [1.0] * 8
        for ch in text:
            v[ord(ch) % 8] += 1.0
        return v


@pytest.fixture(autouse=True)
def _fast_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "use")  # the faster offline model for CLI runs


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(DEMO_CORPUS_DIR / DOC, folder / DOC)
    return folder


def _vectors(folder: Path) -> dict[str, list[float]]:
    from llama_index_car.folder.load import read_vectors

    return read_vectors(folder)


# ----------------------------------------------------------------------------- library
def test_build_index_bar_only_with_show_progress(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = CountingEmbedding(seen=[])
    summary = build_index(src, tmp_path / "a",
                          BuildOptions(embed_model=model, cache_dir=tmp_path / "c1"))
    assert "embedding" not in capsys.readouterr().err
    summary = build_index(src, tmp_path / "b", BuildOptions(
        embed_model=CountingEmbedding(seen=[]), cache_dir=tmp_path / "c2", show_progress=True))
    err = capsys.readouterr().err
    assert f"embedding ({summary.nodes} texts)" in err
    assert "100%" in err  # the bar ran to completion


def test_build_index_reuses_the_cache(src: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = CountingEmbedding(seen=[])
    summary = build_index(src, tmp_path / "a", BuildOptions(embed_model=first, cache_dir=cache))
    node_texts = set(first.seen)
    from llama_index.core.schema import MetadataMode

    from llama_index_car.folder import load_index

    local = load_index(tmp_path / "a", embed_model=CountingEmbedding(seen=[]))
    assert local.spans is not None and len(local.nodes) == summary.nodes >= 2
    # every node text and every span text, each embedded once
    assert node_texts == {n.get_content(metadata_mode=MetadataMode.EMBED) for n in local.nodes} | {
        s.text for d in local.spans.node_ids for s in local.spans.spans_of(d)}
    assert len(first.seen) == len(node_texts)
    second = CountingEmbedding(seen=[])
    build_index(src, tmp_path / "b", BuildOptions(embed_model=second, cache_dir=cache))
    assert not node_texts & set(second.seen)  # no node is embedded again
    assert _vectors(tmp_path / "a") == _vectors(tmp_path / "b")
    third = CountingEmbedding(seen=[])
    build_index(src, tmp_path / "c", BuildOptions(
        embed_model=third, use_cache=False, cache_dir=tmp_path / "unused"))
    assert node_texts <= set(third.seen) and not (tmp_path / "unused").exists()


# ----------------------------------------------------------------------------- CLI
@pytest.mark.parametrize(
    ("tty", "flag", "shown"),
    [(True, None, True), (True, "--quiet", False), (True, "--no-progress", False),
     (False, None, False)],
)  # fmt: skip
def test_show_progress_rule(
    tty: bool, flag: str | None, shown: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("S", "D", "C"):  # input paths are validated at parse time
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty, raising=False)
    for argv in (["index", "S", "--persist", "O"], ["demo"], ["eval", "D", "--out", "O"],
                 ["probe", "C", "--out", "O"]):  # fmt: skip
        args = build_parser().parse_args(argv + ([flag] if flag else []))
        assert show_progress(args) is shown, argv


@pytest.mark.parametrize(("tty", "flag", "shown"), [(True, None, True), (True, "--quiet", False),
                                                    (False, None, False)])  # fmt: skip
def test_cli_index_progress(
    tty: bool, flag: str | None, shown: bool, src: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty, raising=False)
    argv = ["index", str(src), "--persist", str(tmp_path / "o"), "--cache-dir",
            str(tmp_path / "c")]  # fmt: skip
    assert main(argv + ([flag] if flag else [])) == 0
    assert ("embedding (" in capsys.readouterr().err) is shown


def _demo_inputs(tmp_path: Path, src: Path) -> list[str]:
    row = {"qid": "d01", "question": "도로 옆 도랑 깊이", "gold_file": DOC,
           "gold_section": "노측 배수시설 확충방안", "criterion": "설치기준", "style": "everyday"}
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    return ["--corpus", str(src), "--questions", str(q)]


def _eval_inputs(tmp_path: Path) -> list[str]:
    root = tmp_path / "beir"
    root.mkdir()
    (root / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "배수시설", "text": "배수시설 설치기준"}\n'
        '{"_id": "d2", "title": "터널", "text": "터널 조명 기준"}\n', encoding="utf-8")
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "배수 기준"}\n', encoding="utf-8")
    (root / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    return [str(root), "--systems", "bm25,dense", "--out", str(tmp_path / "out")]


def _probe_inputs(tmp_path: Path) -> list[str]:
    p = tmp_path / "s.jsonl"
    p.write_text(
        '{"title": "교량 점검시설 확충방안", "body": "점검시설의 설치기준은 폭 60 cm."}\n'
        '{"title": "배수시설 개선방안", "body": "집수정의 설치간격은 배치기준에 따른다."}\n',
        encoding="utf-8",
    )
    return [str(p), "--out", str(tmp_path / "out")]


@pytest.mark.parametrize(
    ("command", "bar"),
    [("demo", "embedding ("), ("eval", "embed corpus ("), ("probe", "probe queries (")],
)
@pytest.mark.parametrize("flag", [None, "--quiet"])
def test_cli_demo_eval_probe_progress(
    command: str, bar: str, flag: str | None, src: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    inputs: dict[str, Any] = {
        "demo": lambda: _demo_inputs(tmp_path, src) + ["--json"],
        "eval": lambda: _eval_inputs(tmp_path),
        "probe": lambda: _probe_inputs(tmp_path),
    }
    argv = [command, *inputs[command](), "--cache-dir", str(tmp_path / "fresh-cache")]
    assert main(argv + ([flag] if flag else [])) == 0
    assert (bar in capsys.readouterr().err) is (flag is None)


def test_cli_index_draws_bars_on_a_terminal_of_unknown_width(src: Path, tmp_path: Path) -> None:
    """Issue 37, item 14: under ``script -qc`` (a pseudo-terminal of 0×0, as ``pty.openpty``
    makes) ``llama-car index`` drew nothing: tqdm sized its bars to -1 columns. A real
    command in a subprocess, its stderr on a fresh pty."""
    import os
    import pty
    import select
    import subprocess

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("TQDM_NCOLS", None)
    env.pop("TQDM_NROWS", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "llama_index_car", "index", str(src), "--persist",
         str(tmp_path / "o"), "--embed", "use", "--cache-dir", str(tmp_path / "c")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env,
    )
    os.close(slave)
    out = bytearray()
    try:
        while True:  # drain the terminal until the command closes it
            ready, _, _ = select.select([master], [], [], 300)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        child.wait(timeout=300)
        os.close(master)
    text = out.decode("utf-8", "replace")
    assert child.returncode == 0, text[-2000:]
    for bar in ("reading: 100%", "embedding ("):
        assert bar in text, text[-2000:]
