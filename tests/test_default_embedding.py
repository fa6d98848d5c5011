"""The offline default embedding (e5) everywhere, USE on request, and what stays tied to USE.

One resolution path: ``--embed`` (default ``None``) → ``$LLAMA_CAR_EMBED_MODEL`` → ``e5``, for every
subcommand and for the library defaults. Each subcommand is run for real on a tiny input and
the embedding it used is read back from what it wrote (index manifest, ``results.json``,
``probe.json``), with and without the variable. An index folder built with USE must keep being
queried with USE (its manifest decides, not the current default): checked against numpy cosine
over the persisted vectors with USE query vectors. Caches of the two models never mix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llama_index_car._persist import live_dir
from llama_index_car.cli import build_parser, main
from llama_index_car.demo.loader import DEMO_CORPUS_DIR
from llama_index_car.providers import EMBED_MODELS, embed_provider

E5 = "MultilingualE5Embedding"
USE = "UniversalSentenceEncoderEmbedding"
DOC = "dg2019_drainage.hwpx"  # one small demo document (a few nodes): cheap to embed

SECTIONS = [  # two probe-eligible sections (plan title, body states a ~기준 criterion)
    {"title": "교량 점검시설 확충방안", "body": "점검시설의 설치기준은 다음과 같다. 통로 폭은 60 cm."},
    {"title": "배수시설 개선방안", "body": "집수정의 설치간격은 배치기준에 따른다."},
    {"title": "포장 보수 방안", "body": "균열은 실링으로 보수한다."},
]
BEIR_DOCS = [
    ("d1", "배수시설 설치기준", "도로 배수시설의 설치기준은 강우강도를 고려하여 정한다."),
    ("d2", "터널 조명 개선", "터널 조명의 설계기준은 입구부 휘도를 기준으로 한다."),
    ("d3", "교량 점검시설", "교량 점검통로의 폭은 60 cm 이상으로 한다."),
]
BEIR_QUERIES = [("q1", "배수시설은 어떤 기준으로 설치하나요?", "d1"), ("q2", "터널 밝기", "d2")]


@pytest.fixture(autouse=True)
def _no_embed_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLAMA_CAR_EMBED_MODEL", raising=False)


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("src")
    shutil.copy(DEMO_CORPUS_DIR / DOC, folder / DOC)
    return folder


def _manifest(folder: Path) -> dict[str, Any]:
    return dict(json.loads((live_dir(folder) / "car_index.json").read_text(encoding="utf-8")))


# ----------------------------------------------------------------------------- resolution
def test_embed_choices_and_default() -> None:
    assert EMBED_MODELS[0] == "e5" and set(EMBED_MODELS) == {"e5", "use", "openai"}
    assert embed_provider(None) == "e5"
    assert embed_provider(" Use ") == "use"


def test_env_variable_is_the_default_and_a_flag_beats_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "use")
    assert embed_provider(None) == "use"
    assert embed_provider("e5") == "e5"
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "")  # empty = unset
    assert embed_provider(None) == "e5"


@pytest.mark.parametrize(
    "argv",
    [
        ["index", "SRC", "--persist", "OUT"],
        ["query", "DIR", "질문"],
        ["demo"],
        ["eval", "DATA", "--out", "OUT"],
        ["probe", "CORPUS", "--out", "OUT"],
    ],
    ids=lambda a: a[0],
)
def test_every_subcommand_leaves_the_default_to_the_resolver(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No subcommand hard-codes a provider: ``--embed`` parses to ``None`` (→ env → e5), and
    every subcommand accepts the same three names."""
    for name in ("SRC", "DIR", "DATA", "CORPUS"):  # input paths are validated at parse time
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    parser = build_parser()
    assert parser.parse_args(argv).embed is None
    for name in EMBED_MODELS:
        assert parser.parse_args([*argv, "--embed", name]).embed == name
    with pytest.raises(SystemExit):
        parser.parse_args([*argv, "--embed", "bert"])


# ----------------------------------------------------------------------------- index / query
@pytest.fixture(scope="module")
def use_index(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("use") / "index"
    assert main(["index", str(src), "--persist", str(out), "--embed", "use", "--quiet"]) == 0
    return out


def test_index_default_is_e5_and_env_selects_use(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_index: Path
) -> None:
    assert main(["index", str(src), "--persist", str(tmp_path / "a"), "--quiet"]) == 0
    spec = _manifest(tmp_path / "a")["embed"]
    assert (spec["provider"], spec["class_name"], spec["dimensions"]) == ("e5", E5, 384)
    monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", "use")
    assert main(["index", str(src), "--persist", str(tmp_path / "b"), "--quiet"]) == 0
    spec = _manifest(tmp_path / "b")["embed"]
    assert (spec["provider"], spec["class_name"], spec["dimensions"]) == ("use", USE, 512)
    assert _manifest(use_index)["embed"]["provider"] == "use"  # --embed use, env unset


@pytest.mark.parametrize("env", [None, "e5"])
def test_use_built_index_is_still_queried_with_use(
    use_index: Path,
    env: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Oracle: numpy cosine of the persisted 512-d vectors with the USE query vector."""
    from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding
    from llama_index_car.folder import load_index

    if env:
        monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", env)
    local = load_index(use_index)
    assert type(local.embed_model).__name__ == USE
    from llama_index_car.folder.load import read_vectors

    store = {"embedding_dict": read_vectors(use_index)}
    ids = sorted(store["embedding_dict"])
    matrix = np.asarray([store["embedding_dict"][i] for i in ids])
    question = "비 올 때 도로 옆 도랑은 얼마나 깊어야 해?"
    q = np.asarray(UniversalSentenceEncoderEmbedding().get_query_embedding(question))
    cos = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    k = min(3, len(ids))
    expected = [ids[i] for i in np.argsort(-cos, kind="stable")[:k]]
    rc = main(["query", str(use_index), question, "--retriever", "dense", "--top-k", str(k),
               "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    hits = json.loads(captured.out)["hits"]
    assert [h["node_id"] for h in hits] == expected
    np.testing.assert_allclose([h["score"] for h in hits], np.sort(cos)[::-1][:k], atol=1e-5)
    rc = main(["query", str(use_index), question, "--retriever", "car"])
    captured = capsys.readouterr()
    assert rc == 0 and "embedding use-multilingual-v3" in captured.out, captured.err


def test_e5_query_on_a_use_index_is_refused_in_one_line(
    use_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["query", str(use_index), "질문", "--embed", "e5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "use-multilingual-v3" in err and "--embed use" in err


# ----------------------------------------------------------------------------- demo / eval / probe
def _demo_inputs(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(DEMO_CORPUS_DIR / DOC, corpus / DOC)
    questions = tmp_path / "q.jsonl"
    row = {"qid": "d01", "question": "비 올 때 고속도로 옆 도랑은 얼마나 깊어야 해?",
           "gold_file": DOC, "gold_section": "노측 배수시설 확충방안", "criterion": "설치기준",
           "style": "everyday"}  # fmt: skip
    questions.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    return corpus, questions


@pytest.mark.parametrize(("env", "provider"), [(None, "e5"), ("use", "use")])
def test_demo_uses_the_default_resolution(
    env: str | None, provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    if env:
        monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", env)
    corpus, questions = _demo_inputs(tmp_path)
    keep = tmp_path / "keep"
    rc = main(["demo", "--corpus", str(corpus), "--questions", str(questions), "--keep",
               str(keep), "--json"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert _manifest(keep)["embed"]["provider"] == provider


def _beir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": t, "text": x}, ensure_ascii=False) + "\n"
                for d, t, x in BEIR_DOCS), encoding="utf-8")  # fmt: skip
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
                for q, t, _ in BEIR_QUERIES), encoding="utf-8")  # fmt: skip
    (root / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, _, d in BEIR_QUERIES),
        encoding="utf-8",
    )
    return root


@pytest.mark.parametrize(("env", "provider", "cls"), [(None, "e5", E5), ("use", "use", USE)])
def test_eval_uses_the_default_resolution(
    env: str | None, provider: str, cls: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", env)
    data = _beir(tmp_path / "beir")
    out = tmp_path / "out"
    rc = main(["eval", str(data), "--systems", "bm25,dense", "--out", str(out), "--quiet",
               "--cache-dir", str(tmp_path / "cache")])  # fmt: skip
    assert rc == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["config"]["embed_model"]["class"] == cls
    assert f"--embed {provider}" in results["command"]  # the report reproduces the same run


@pytest.mark.parametrize(("env", "cls"), [(None, E5), ("use", USE)])
def test_probe_uses_the_default_resolution(
    env: str | None, cls: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", env)
    corpus = tmp_path / "sections.jsonl"
    corpus.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in SECTIONS),
                      encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    rc = main(["probe", str(corpus), "--out", str(out), "--quiet",
               "--cache-dir", str(tmp_path / "cache")])  # fmt: skip
    assert rc == 0
    assert json.loads((out / "probe.json").read_text(encoding="utf-8"))["model"]["class"] == cls


# ----------------------------------------------------------------------------- library defaults
def _nodes() -> list[Any]:
    from llama_index.core.schema import TextNode

    texts = {
        "d1": "배수시설 설치기준\n도로 배수시설의 설치기준은 강우강도를 고려하여 정한다.",
        "d2": "터널 조명 설치기준\n터널 조명의 설치기준은 입구부 휘도를 기준으로 한다.",
        "d3": "교량 점검시설\n교량 점검통로의 폭은 60 cm 이상이다.",
        "d4": "포장 유지관리\n아스팔트 포장 균열은 실링으로 보수한다.",
    }
    return [TextNode(text=t, id_=d) for d, t in texts.items()]


@pytest.mark.parametrize(("env", "cls"), [(None, E5), ("use", USE)])
def test_library_defaults_follow_the_resolver(
    env: str | None, cls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

    if env:
        monkeypatch.setenv("LLAMA_CAR_EMBED_MODEL", env)
    car = CriterionAwareRetriever.from_defaults(nodes=_nodes())
    assert type(car.dense_retriever._embed_model).__name__ == cls  # type: ignore[attr-defined]
    assert car.hypothesizer is None  # offline: nothing is built at index time but the indexes
    assert car.retrieve("배수시설 설치기준")[0].node.node_id == "d1"


# ----------------------------------------------------------------------------- caches
def test_e5_is_not_symmetric_and_its_cache_never_mixes_with_use(tmp_path: Path) -> None:
    from llama_index_car.embeddings.cache import SYMMETRIC_MODELS, EmbeddingCache
    from llama_index_car.embeddings.e5 import MultilingualE5Embedding
    from llama_index_car.embeddings.use import UniversalSentenceEncoderEmbedding

    assert E5 not in SYMMETRIC_MODELS and USE in SYMMETRIC_MODELS
    texts = ["배수시설 설치기준", "터널 조명 설계기준"]
    use_model, e5_model = UniversalSentenceEncoderEmbedding(), MultilingualE5Embedding()
    use_cache = EmbeddingCache(tmp_path, use_model)
    u = use_cache.embed(texts)
    e5_cache = EmbeddingCache(tmp_path, e5_model)
    assert e5_cache.path != use_cache.path and e5_cache.path.parent == use_cache.path.parent
    assert len(e5_cache) == 0  # the USE vectors of the same strings are not visible
    v = e5_cache.embed(texts)
    assert (u.shape, v.shape) == ((2, 512), (2, 384)) and e5_cache.misses == 2
    np.testing.assert_allclose(v, np.asarray(e5_model.get_text_embedding_batch(texts)),
                               atol=1e-6)  # fmt: skip
    # e5 keeps query: and passage: vectors apart; USE shares them
    assert e5_cache.key(texts[0], "query") != e5_cache.key(texts[0], "text")
    assert use_cache.key(texts[0], "query") == use_cache.key(texts[0], "text")
    q = e5_cache.embed(texts[:1], "query")
    assert e5_cache.misses == 3
    np.testing.assert_allclose(q[0], e5_model.get_query_embedding(texts[0]), atol=1e-6)
    assert not np.allclose(q[0], v[0], atol=1e-3)
    # reopened from disk: each model sees only its own entries
    again_use, again_e5 = EmbeddingCache(tmp_path, use_model), EmbeddingCache(tmp_path, e5_model)
    assert (len(again_use), len(again_e5)) == (2, 3)
    np.testing.assert_array_equal(again_use.embed(texts), u)
    np.testing.assert_array_equal(again_e5.embed(texts), v)
    assert again_use.misses == again_e5.misses == 0
    for folder in (again_use.path, again_e5.path):
        spec = json.loads((folder / "index.json").read_text(encoding="utf-8"))["model"]
        assert spec["class"] == folder.name.split("-", 1)[0]

