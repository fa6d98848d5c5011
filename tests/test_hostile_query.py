"""Issue 13.10 / 11.5: odd and hostile queries, and bad command lines.

Every retriever of the package (Kiwi BM25, weighted RRF, CAR with and without routing) goes
through one guard (:mod:`llama_index_car.query_guard`). The attacks, reproduced first (the
comment says what happened before):

* ``retrieve("")`` / whitespace → ``[]`` (before: TypeError from the dense channel);
* a lone surrogate or control/bidi characters → the same hits as the cleaned query (before:
  UnicodeEncodeError from Kiwi);
* a 1 MB query → a typed ``QueryError`` naming the limit, before any tokenization (before:
  37–56 s of work);
* ``llama-car`` usage errors → one line on stderr, exit 2 (before: tracebacks).

The oracle for "same hits" is the retriever itself on the query with the offending
characters removed by hand.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_car._errors import QueryError
from llama_index_car.cli import main
from llama_index_car.hypothesizers.events import CriterionHypothesisEvent
from llama_index_car.query_guard import DEFAULT_MAX_QUERY_CHARS, QueryLimits, clean_query
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from llama_index_car.retrievers.kiwi_bm25 import KiwiBM25Retriever
from llama_index_car.retrievers.weighted_rrf import WeightedRRFRetriever
from tests.fakes.corpus import CRITERION_TEXTS
from tests.fakes.embeddings import VecEmbedding

REPO = Path(__file__).resolve().parents[1]
QUERY = "배수시설 설치기준"


class CharEmbedding(VecEmbedding):
    """Bag of Hangul syllables hashed into 64 dimensions (deterministic, model-free)."""

    def _vec(self, text: str) -> list[float]:
        vec = [0.0] * 64
        for ch in text:
            if "가" <= ch <= "힣":
                vec[ord(ch) % 64] += 1.0
        vec[0] += 1e-3  # never the zero vector
        return vec


@pytest.fixture(scope="module")
def nodes() -> list[TextNode]:
    return [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(CRITERION_TEXTS)]


@pytest.fixture(scope="module")
def retrievers(nodes: list[TextNode]) -> dict[str, BaseRetriever]:
    index = VectorStoreIndex(nodes=nodes, embed_model=CharEmbedding())
    bm25 = KiwiBM25Retriever.from_defaults(nodes=nodes, similarity_top_k=5)
    dense = index.as_retriever(similarity_top_k=5)
    car_kw: dict[str, Any] = {"index": index, "pool_top_k": 5, "similarity_top_k": 5}
    return {
        "bm25": bm25,
        "hybrid": WeightedRRFRetriever.from_alpha(dense, bm25, pool_top_k=5, similarity_top_k=5),
        "car": CriterionAwareRetriever.from_defaults(nodes=nodes, **car_kw),
        "car-alpha": CriterionAwareRetriever.from_defaults(nodes=nodes, alpha=0.7, **car_kw),
    }


KINDS = ["bm25", "hybrid", "car", "car-alpha"]


def ids(hits: list[NodeWithScore]) -> list[str]:
    return [h.node.node_id for h in hits]


# ----------------------------------------------------------------------------- empty queries
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("query", ["", " ", "\t\n  ", "\u200b\u202e", "\x1b[2J"])
def test_empty_query_returns_nothing(
    retrievers: dict[str, BaseRetriever], kind: str, query: str
) -> None:
    """Before: TypeError from the dense channel (hybrid, CAR)."""
    assert retrievers[kind].retrieve(query) == []
    assert asyncio.run(retrievers[kind].aretrieve(query)) == []
    assert retrievers[kind].retrieve(QueryBundle(query_str=query)) == []


def test_dense_only_bundle_with_an_embedding_is_still_searched(
    retrievers: dict[str, BaseRetriever],
) -> None:
    bundle = QueryBundle(query_str="", embedding=CharEmbedding()._vec(QUERY))
    assert retrievers["hybrid"].retrieve(bundle)  # the dense channel answers


# ----------------------------------------------------------------------------- invalid Unicode
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "dirty",
    [
        "배수시설\ud800 설치기준",  # lone surrogate (before: UnicodeEncodeError in Kiwi)
        "배수시설\udcff 설치기준",  # an undecodable byte smuggled through surrogateescape
        "배수시설\u202e 설치\u200b기준",  # bidi override, zero-width space
        "\x1b[31m배수시설\x1b[0m 설치\x00기준",  # terminal escapes, NUL
    ],
)
def test_invalid_characters_are_removed(
    retrievers: dict[str, BaseRetriever], kind: str, dirty: str
) -> None:
    expected = ids(retrievers[kind].retrieve("배수시설 설치기준"))
    assert expected
    assert ids(retrievers[kind].retrieve(dirty)) == expected
    assert ids(asyncio.run(retrievers[kind].aretrieve(dirty))) == expected


def test_ordinary_text_passes_unchanged() -> None:
    for query in (QUERY, " 배수\n시설 ", "drainage 기준 3.5m (KDS 44)", "배수  시설\t기준"):
        assert clean_query(query) == query


# ----------------------------------------------------------------------------- length cap
@pytest.mark.parametrize("kind", KINDS)
def test_a_megabyte_query_is_refused_with_the_limit_named(
    retrievers: dict[str, BaseRetriever], kind: str
) -> None:
    """Before: 37–56 s of tokenization and embedding."""
    huge = "배수시설 설치기준 " * 100_000
    with pytest.raises(QueryError, match=f"the limit is {DEFAULT_MAX_QUERY_CHARS}"):
        retrievers[kind].retrieve(huge)
    with pytest.raises(QueryError, match="LLAMA_CAR_MAX_QUERY_CHARS"):
        asyncio.run(retrievers[kind].aretrieve(huge))


def test_the_cap_applies_before_tokenization(nodes: list[TextNode]) -> None:
    bm25 = KiwiBM25Retriever.from_defaults(nodes=nodes)
    calls: list[str] = []
    bm25.index.tokens.tokenizer = _Counting(bm25.tokenizer, calls)  # the index's tokenizer
    with pytest.raises(QueryError):
        bm25.retrieve("가" * (DEFAULT_MAX_QUERY_CHARS + 1))
    assert calls == []
    bm25.retrieve("가" * DEFAULT_MAX_QUERY_CHARS)  # at the limit: accepted
    assert len(calls) == 1


class _Counting:
    """Delegates to a tokenizer, recording every text it is asked to tokenize."""

    def __init__(self, inner: Any, calls: list[str]) -> None:
        self._inner, self._calls = inner, calls

    def tokenize(self, text: str) -> list[str]:
        self._calls.append(text)
        return list(self._inner.tokenize(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_the_limit_is_configurable(
    retrievers: dict[str, BaseRetriever], monkeypatch: pytest.MonkeyPatch
) -> None:
    long_query = "배수시설 설치기준 " * 300  # 3000 characters
    bm25 = retrievers["bm25"]
    with pytest.raises(QueryError):
        bm25.retrieve(long_query)
    monkeypatch.setenv("LLAMA_CAR_MAX_QUERY_CHARS", "5000")
    assert bm25.retrieve(long_query)
    monkeypatch.delenv("LLAMA_CAR_MAX_QUERY_CHARS")
    car = retrievers["car"]
    car.query_limits = QueryLimits(max_chars=4000)  # type: ignore[attr-defined]
    try:
        assert car.retrieve(long_query)
    finally:
        del car.query_limits  # type: ignore[attr-defined]
    with pytest.raises(QueryError):
        car.retrieve(long_query)


class Utf8Embedding(CharEmbedding):
    """:class:`CharEmbedding` that encodes its text as UTF-8 first, as a real model's
    tokenizer does (a lone surrogate fails there), and counts the texts it embeds."""

    calls: int = 0

    def _vec(self, text: str) -> list[float]:
        text.encode("utf-8")
        self.calls += 1
        return super()._vec(text)


@pytest.fixture(scope="module")
def index_views(nodes: list[TextNode]) -> tuple[Utf8Embedding, dict[str, BaseRetriever]]:
    from llama_index_car.indices import CriterionAwareIndex
    from llama_index_car.retrievers.views import RETRIEVER_KINDS

    emb = Utf8Embedding()
    index = CriterionAwareIndex.from_defaults(nodes, embed_model=emb)
    return emb, {k: index.as_retriever(k, similarity_top_k=5) for k in RETRIEVER_KINDS}


@pytest.mark.parametrize("kind", ["dense", "bm25", "hybrid", "car"])
def test_every_view_of_an_index_goes_through_the_guard(
    index_views: tuple[Utf8Embedding, dict[str, BaseRetriever]], kind: str
) -> None:
    """Issue 37, item 6: the ``dense`` view had no guard — a 1 MB query was embedded (18.8 s
    with e5) and answered, a lone surrogate was an untyped error inside the model, and a
    query of control characters returned hits. Oracle: the cleaned query's hits."""
    emb, views = index_views
    view = views[kind]
    expected = ids(view.retrieve(QUERY))
    assert expected
    before = emb.calls
    with pytest.raises(QueryError, match="the limit is"):
        view.retrieve("배수시설 설치기준 " * 100_000)
    with pytest.raises(QueryError, match="the limit is"):
        asyncio.run(view.aretrieve("배수시설 설치기준 " * 100_000))
    assert emb.calls == before  # refused before anything was embedded
    for dirty in ("배수시설\udcff 설치기준", "\x1b[31m배수시설\x1b[0m 설치\u202e기준"):
        assert ids(view.retrieve(dirty)) == expected
        assert ids(asyncio.run(view.aretrieve(dirty))) == expected
    for empty in ("\x1b[0m\x07", "\u202e\u200b", "\udcff", " \t"):
        assert view.retrieve(empty) == []
    bundle = QueryBundle(query_str=QUERY, custom_embedding_strs=["\udcff" + QUERY])
    assert ids(view.retrieve(bundle)) == expected


def test_car_expansion_of_a_query_at_the_limit_is_not_refused(
    retrievers: dict[str, BaseRetriever],
) -> None:
    """CAR's lexical channel gets query + criterion terms, longer than the user's query:
    the nested call is not checked again."""
    at_limit = ("배수시설 설치기준 " * 300)[:DEFAULT_MAX_QUERY_CHARS]
    hits = retrievers["car"].retrieve(at_limit)
    assert hits and hits[0].node.metadata["car_explain"]["routed"] == "car"


def test_non_string_query_is_a_typed_error() -> None:
    with pytest.raises(QueryError, match="must be a str"):
        clean_query(b"bytes")


def test_bad_limit_in_the_environment_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_index_car._errors import ConfigurationError

    monkeypatch.setenv("LLAMA_CAR_MAX_QUERY_CHARS", "lots")
    with pytest.raises(ConfigurationError, match="LLAMA_CAR_MAX_QUERY_CHARS"):
        QueryLimits()


# ----------------------------------------------------------------------------- the event
class Collect(BaseEventHandler):
    events: list[Any] = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, CriterionHypothesisEvent):
            self.events.append(event)


@pytest.fixture
def collected() -> Any:
    handler = Collect(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield handler.events
    finally:
        root.event_handlers.remove(handler)


def test_the_offline_car_dispatches_no_hypothesis_event(
    retrievers: dict[str, BaseRetriever], collected: list[CriterionHypothesisEvent]
) -> None:
    """The offline CAR forms no hypothesis (its feedback channel is gone): no event."""
    car = retrievers["car"]
    car.retrieve("비탈 옆 물 빠지는 배수 길 만드는 법")
    asyncio.run(car.aretrieve("배수 길은 어떻게 만드나요?"))
    assert collected == []


def test_hypothesis_event_on_fallback(
    nodes: list[TextNode], collected: list[CriterionHypothesisEvent]
) -> None:
    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer

    class Broken(BaseCriterionHypothesizer):
        name = "broken"

        def hypothesize(self, query: str) -> Any:
            raise RuntimeError("down")

    car = CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=CharEmbedding(), hypothesizer=Broken(), pool_top_k=5
    )
    assert car.retrieve(QUERY)[0].node.metadata["car_explain"]["fallback"] is True
    (event,) = collected
    assert (event.source, event.hypothesis, event.hypothesizer) == ("fallback", None, "broken")
    assert "down" in (event.error or "")


def test_llm_hypothesis_event_source(
    nodes: list[TextNode], collected: list[CriterionHypothesisEvent], fake: Any
) -> None:
    from llama_index_car.hypothesizers.llm import LLMCriterionHypothesizer
    from llama_index_car.providers import resolve_llm

    car = CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=CharEmbedding(), pool_top_k=5,
        hypothesizer=LLMCriterionHypothesizer(llm=resolve_llm("anthropic")),
    )
    car.retrieve(QUERY)
    (event,) = collected
    assert (event.source, event.hypothesis) == ("llm", "신축이음장치 설치기준")


# ----------------------------------------------------------------------------- the CLI
@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    """An existing folder: the checks below must fire before it is even read."""
    return tmp_path


def bad_command_lines(folder: Path) -> list[list[str]]:
    d, f = str(folder), str(folder / "file.txt")
    (folder / "file.txt").write_text("x", encoding="utf-8")
    missing = str(folder / "missing")
    return [
        ["query", d, ""],
        ["query", d, "   "],
        ["query", d, "질문" * 1001],
        ["query", missing, "질문"],
        ["query", f, "질문"],
        ["query", d, "질문", "--top-k", "0"],
        ["query", d, "질문", "--top-k", "many"],
        ["query", d, "질문", "--alpha", "1.5"],
        ["query", d, "질문", "--alpha", "nan"],
        ["query", d, "질문", "--llm-timeout", "0"],
        ["query", d, "질문", "--llm-timeout", "inf"],
        ["query", d, "질문", "--retriever", "magic"],
        ["index", d, "--persist", str(folder / "o"), "--chunk-size", "100",
         "--chunk-overlap", "200"],
        ["index", d, "--persist", str(folder / "o"), "--chunk-size", "-5"],
        ["index", d, "--persist", str(folder / "o"), "--chunk-overlap", "-1"],
        ["index", missing, "--persist", str(folder / "o")],
        ["index", d, "--persist", f],
        ["index", d],
        ["demo", "--hit-k", "0"],
        ["demo", "--corpus", missing],
        ["demo", "--questions", missing],
        ["demo", "--questions", d],
        ["demo", "--keep", f],
        ["eval", missing, "--out", str(folder / "o")],
        ["eval", d, "--out", f],
        ["eval", d, "--out", str(folder / "o"), "--qa", missing],
        ["eval", d, "--out", str(folder / "o"), "--alpha", "-0.1"],
        ["eval", d, "--out", str(folder / "o"), "--depth", "10"],
        ["eval", d, "--out", str(folder / "o"), "--rrf-k", "-1"],
        ["eval", d, "--out", str(folder / "o"), "--max-queries", "0"],
        ["probe", missing, "--out", str(folder / "o")],
        ["probe", d, "--out", f],
        ["probe", d, "--out", str(folder / "o"), "--max-sections", "1"],
        ["nosuchcommand"],
        [],
    ]


def test_every_bad_command_line_is_one_line_and_exit_2(
    index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in bad_command_lines(index_dir):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse exits from inside parse_args
            rc = int(exc.code or 0)
        out, err = capsys.readouterr()
        shown = argv[:4]
        assert rc == 2, (shown, err)
        assert out == "", shown
        if argv:  # `llama-car` alone prints the help (several lines), as before
            assert len(err.strip().splitlines()) == 1, (shown, err)
            assert "error:" in err and "Traceback" not in err, shown
    assert not (index_dir / "o").exists()  # nothing was started


def test_undecodable_question_bytes_on_a_real_command_line(tmp_path: Path) -> None:
    """Before: `llama-car query DIR $'\\xff'` ended in a UnicodeEncodeError traceback."""
    env = dict(os.environ, LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8")
    proc = subprocess.run(
        [sys.executable.encode(), b"-m", b"llama_index_car", b"query",
         str(tmp_path).encode(), b"\xff\xfe question"],
        env=env, capture_output=True, cwd=REPO, timeout=120,
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "not valid UTF-8" in err
    assert "byte 0xff" in err and "Traceback" not in err


def test_json_output_escapes_what_a_terminal_would_act_on() -> None:
    import json
    import unicodedata

    from llama_index_car.cli.query import json_for_terminal

    payload = {"text": "표\u202e\x1b[2J\ud800\u2028끝", "n": [1, 2]}
    out = json_for_terminal(payload)
    assert json.loads(out) == payload  # the data is unchanged for a JSON reader
    assert [c for c in out if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs")] == []


def test_documented_fused_score_ceiling(retrievers: dict[str, BaseRetriever]) -> None:
    """The docstring's claim: no fused score exceeds sum(weights) / (rrf_k + 1)."""
    hybrid = retrievers["hybrid"]
    assert isinstance(hybrid, WeightedRRFRetriever)
    ceiling = sum(hybrid.weights) / (hybrid.rrf_k + 1)
    scores = [h.score or 0.0 for h in hybrid.retrieve(QUERY)]
    assert scores and max(scores) <= ceiling + 1e-12 and ceiling < 0.3


def test_fallback_error_from_a_custom_hypothesizer_is_sanitised(nodes: list[TextNode]) -> None:
    import unicodedata

    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer

    class Hostile(BaseCriterionHypothesizer):
        def hypothesize(self, query: str) -> Any:
            raise RuntimeError("\x1b]0;pwned\x07\x1b[2J\u202edown")

    car = CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=CharEmbedding(), hypothesizer=Hostile(), pool_top_k=5
    )
    error = car.retrieve(QUERY)[0].node.metadata["car_explain"]["error"]
    assert "down" in error
    assert [c for c in error if unicodedata.category(c) in ("Cc", "Cf")] == []


# ----------------------------------------------------------------------------- fuzz
ANY_TEXT = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()),  # surrogates included
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_fuzz_sanitize_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    import unicodedata

    from llama_index_car.hypothesizers.base import sanitize_text

    out = sanitize_text(text, keep_newlines=True)
    assert [c for c in out if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Cs")] == []
    assert sanitize_text(out, keep_newlines=True) == out  # idempotent
    out.encode("utf-8")  # always encodable (no lone surrogates)
    assert len(sanitize_text(text, 10)) <= 10


_FUZZ_BM25: dict[str, KiwiBM25Retriever] = {}


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT)
def test_fuzz_guard_never_crashes_the_lexical_channel(text: str) -> None:
    bm25 = _FUZZ_BM25.get("r")
    if bm25 is None:
        bm25 = _FUZZ_BM25["r"] = KiwiBM25Retriever.from_defaults(
            nodes=[TextNode(id_=f"n{i}", text=t) for i, t in enumerate(CRITERION_TEXTS)],
            similarity_top_k=3,
        )
    hits = bm25.retrieve(text)
    assert len(hits) <= 3
    if not clean_query(text).strip():
        assert hits == []



def test_cli_defaults_match_the_library() -> None:
    """The CLI keeps stdlib-only copies of two defaults (instant ``--help``)."""
    import argparse

    from llama_index_car.cli import _args
    from llama_index_car.cli import query as query_cli
    from llama_index_car.llms.deadline import DEFAULT_LLM_DEADLINE
    from llama_index_car.retrievers.car_hypothesis import HypothesisCriterionRetriever

    assert query_cli.DEFAULT_LLM_DEADLINE == DEFAULT_LLM_DEADLINE
    default = inspect.signature(HypothesisCriterionRetriever.__init__).parameters["hypothesis_timeout"]
    assert default.default == DEFAULT_LLM_DEADLINE
    _args.query_text("가" * DEFAULT_MAX_QUERY_CHARS)
    with pytest.raises(argparse.ArgumentTypeError):
        _args.query_text("가" * (DEFAULT_MAX_QUERY_CHARS + 1))
