"""Issue 13.8 / 13.9: a hostile or broken LLM provider, through the real anthropic SDK (via
``llama-index-llms-anthropic``) against the local fake server (``tests/fakes``).

Each test reproduces an attack first (the comment says what the code did before):

* latency — a hung server, 500s and 429s with ``Retry-After``: one retry policy (the
  hypothesizer's), ``Retry-After`` obeyed up to the per-query deadline, the deadline held by
  the library and by the ``llama-car query`` process at exit, hung calls never blocking later
  queries. Request counts are exact (the oracle is ``max_retries + 1``); elapsed times are
  generous behavioural bounds (seconds vs. the minutes the defects cost), not benchmarks.
* output — terminal escape sequences, bidi overrides, floods: hypotheses sanitised before
  caching, printing or use; an output with nothing left is an error and is never cached. The
  oracle for "sanitised" is :func:`unsafe_chars`, written from the Unicode categories, not
  from the code under test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import TextNode

from llama_index_car._errors import HypothesisError
from llama_index_car.hypothesizers.llm import HyDEHypothesizer, LLMCriterionHypothesizer
from llama_index_car.providers import resolve_embed_model, resolve_llm
from tests.fakes.provider_server import HOSTILE_TEXTS, FakeProviderServer, Reply

QUERY = "온도에 따라 늘었다 줄었다 하는 이음부는 어떻게 설치하나요?"
MESSAGES = "/v1/messages"
REPO = Path(__file__).resolve().parents[1]


def unsafe_chars(text: str) -> list[str]:
    """Characters a terminal may act on or that reorder text: ESC and every other control
    (Cc), format characters (Cf: bidi overrides/isolates, zero-width), surrogates (Cs)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs")]


def hypothesizer(sdk_timeout: float | None = None, **kw: Any) -> LLMCriterionHypothesizer:
    """Claude through ``resolve_llm`` with its *defaults* (what the CLI and users get)."""
    llm = resolve_llm("anthropic") if sdk_timeout is None else resolve_llm(
        "anthropic", timeout=sdk_timeout
    )
    kw.setdefault("backoff", 0.01)
    return LLMCriterionHypothesizer(llm=llm, **kw)


# =============================================================================== 13.8 latency
def test_sdk_retries_do_not_stack_on_500(fake: FakeProviderServer) -> None:
    """Before: resolve_llm built the client with max_retries=2, so 3 SDK requests per
    hypothesizer attempt, 3 attempts → 9 requests per query."""
    fake.set_default(MESSAGES, Reply.error(500))
    hyp = hypothesizer(max_retries=2)
    with pytest.raises(HypothesisError, match="after 3 attempt"):
        hyp.hypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == hyp.max_retries + 1


def test_sdk_retries_do_not_stack_on_429(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.error(429))
    hyp = hypothesizer(max_retries=1)
    with pytest.raises(HypothesisError):
        hyp.hypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == 2


def test_callers_llm_keeps_its_retries_but_the_hypothesizer_does_not_stack(
    fake: FakeProviderServer,
) -> None:
    llm: Any = resolve_llm("anthropic", max_retries=2)
    hyp = LLMCriterionHypothesizer(llm=llm, max_retries=1, backoff=0.01)
    assert llm.max_retries == 2 and llm._client.max_retries == 2  # not modified
    fake.set_default(MESSAGES, Reply.error(503))
    with pytest.raises(HypothesisError):
        hyp.hypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == 2


async def test_async_client_retries_are_off_too(fake: FakeProviderServer) -> None:
    hyp = LLMCriterionHypothesizer(llm=resolve_llm("anthropic", max_retries=3), max_retries=0)
    fake.set_default(MESSAGES, Reply.error(500))
    with pytest.raises(HypothesisError):
        await hyp.ahypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == 1


def test_retry_after_beyond_the_deadline_gives_up_at_once(fake: FakeProviderServer) -> None:
    """Before: `Retry-After: 3600` was ignored (retried after 0.5 s, twice, and the SDK
    retried on its own): 9 requests. Now the server is obeyed: it asked for an hour, the
    deadline is 30 s, so the hypothesizer fails at once — one request, no hour-long sleep."""
    fake.set_default(MESSAGES, Reply.error(429, retry_after=3600))
    hyp = hypothesizer(max_retries=2)
    start = time.monotonic()
    with pytest.raises(HypothesisError, match="retry after 3600 s"):
        hyp.hypothesize(QUERY)
    assert time.monotonic() - start < 5.0
    assert len(fake.requests_to(MESSAGES)) == 1


def test_retry_after_within_the_deadline_is_obeyed(fake: FakeProviderServer) -> None:
    """Before: a hint above max_backoff was replaced by the (shorter) backoff, i.e. the
    client came back sooner than the server allowed."""
    fake.enqueue(MESSAGES, Reply.error(503, retry_after=1))
    hyp = hypothesizer(max_retries=2, backoff=0.01, max_backoff=0.05, deadline=10.0)
    result = hyp.hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    first, second = fake.requests_to(MESSAGES)
    assert second.received - first.received >= 1.0


def test_retry_after_http_date_is_understood(fake: FakeProviderServer) -> None:
    from email.utils import formatdate

    fake.set_default(MESSAGES, Reply.error(429, retry_after=formatdate(time.time() + 600)))
    with pytest.raises(HypothesisError, match="retry after"):
        hypothesizer(max_retries=2).hypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == 1


def test_backoff_that_would_pass_the_deadline_is_not_slept(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.error(500))
    hyp = hypothesizer(max_retries=5, backoff=5.0, max_backoff=5.0, deadline=1.0)
    start = time.monotonic()
    with pytest.raises(HypothesisError, match="deadline"):
        hyp.hypothesize(QUERY)
    assert time.monotonic() - start < 1.0 + 2.0
    assert len(fake.requests_to(MESSAGES)) == 1


def test_hung_server_sync_deadline(fake: FakeProviderServer) -> None:
    """A hung server: the per-attempt timeout (10 s) is cut to the deadline (1 s)."""
    fake.set_default(MESSAGES, Reply.hang())
    hyp = hypothesizer(timeout=10.0, deadline=1.0, max_retries=3)
    start = time.monotonic()
    with pytest.raises(HypothesisError):
        hyp.hypothesize(QUERY)
    assert time.monotonic() - start < 1.0 + 2.0
    assert len(fake.requests_to(MESSAGES)) == 1


async def test_hung_server_async_deadline(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.hang())
    hyp = hypothesizer(timeout=10.0, deadline=1.0, max_retries=3)
    start = time.monotonic()
    with pytest.raises(HypothesisError):
        await hyp.ahypothesize(QUERY)
    assert time.monotonic() - start < 1.0 + 2.0


async def test_retry_after_async(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.error(429, retry_after=3600))
    with pytest.raises(HypothesisError, match="retry after 3600 s"):
        await hypothesizer(max_retries=2).ahypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == 1


def test_hung_calls_do_not_block_later_queries(fake: FakeProviderServer) -> None:
    """Before: each attempt ran in a shared 4-thread pool; hung requests (SDK timeout 60 s)
    kept its workers busy, so after the server recovered the next query waited in the queue
    and timed out too. Six hung queries, then one after recovery, which must succeed."""
    fake.set_default(MESSAGES, Reply.hang())
    hyp = hypothesizer(sdk_timeout=60.0, timeout=0.5, deadline=0.8, max_retries=0)
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            hyp.hypothesize(f"{QUERY} {i}")
        except HypothesisError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(errors) == 6
    fake.set_default(MESSAGES, None)  # the server recovers
    result = hyp.hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert len(fake.requests_to(MESSAGES)) == 7


def test_car_falls_back_within_the_deadline(fake: FakeProviderServer) -> None:
    from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

    nodes = [
        TextNode(id_="a", text="신축이음장치 설치기준: 온도 변화에 따른 신축량을 흡수한다."),
        TextNode(id_="b", text="배수시설의 구조기준은 집중호우 빈도에 맞춘다."),
    ]
    car = CriterionAwareRetriever.from_defaults(
        nodes=nodes,
        embed_model=resolve_embed_model("openai", max_retries=0),
        hypothesizer=hypothesizer(timeout=10.0, deadline=1.0),
        hypothesis_timeout=1.0,
        pool_top_k=2,
        similarity_top_k=2,
    )
    fake.set_default(MESSAGES, Reply.hang())
    start = time.monotonic()
    hits = car.retrieve(QUERY)
    assert time.monotonic() - start < 1.0 + 3.0
    assert hits and hits[0].node.metadata["car_explain"]["fallback"] is True


# ----------------------------------------------------------------------------- the CLI process
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import contextlib
    import io
    import shutil

    from llama_index_car.cli import main
    from llama_index_car.demo.loader import DEMO_CORPUS_DIR

    src = tmp_path_factory.mktemp("src")
    for name in ("dg2012_tunnel.hwpx", "dg2019_drainage.hwpx"):
        shutil.copy(DEMO_CORPUS_DIR / name, src / name)
    out = tmp_path_factory.mktemp("idx") / "index"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["index", str(src), "--persist", str(out), "--no-progress"])
    assert rc == 0
    return out


def run_cli(server: FakeProviderServer, *argv: str, timeout: float = 120.0) -> tuple[
    subprocess.CompletedProcess[str], float
]:
    env = dict(os.environ)
    env.update(
        ANTHROPIC_API_KEY="sk-ant-fake", ANTHROPIC_BASE_URL=server.url, PYTHONIOENCODING="utf-8"
    )
    env.pop("CAR_LLM", None)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llama_index_car", *argv],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def cli_server() -> Any:
    server = FakeProviderServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def baseline_seconds(cli_server: FakeProviderServer, index_dir: Path) -> float:
    """Elapsed time of a healthy `--llm anthropic` query (model loading included)."""
    cli_server.reset()
    proc, elapsed = run_cli(cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic")
    assert proc.returncode == 0, proc.stderr
    assert "criterion hypothesis: 신축이음장치 설치기준" in proc.stdout
    return elapsed


@pytest.mark.slow
def test_cli_exits_within_the_deadline_on_a_hung_server(
    cli_server: FakeProviderServer, index_dir: Path, baseline_seconds: float
) -> None:
    """Before: CAR fell back at 30 s but the process exited after 186 s (interpreter exit
    joined the pool thread stuck in a 60 s × 3 SDK-retry request)."""
    cli_server.reset()
    cli_server.set_default(MESSAGES, Reply.hang())
    deadline = 2.0
    proc, elapsed = run_cli(
        cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic",
        "--llm-timeout", str(deadline), timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    assert "criterion hypothesis: (none)" in proc.stdout  # the hybrid fallback answered
    assert elapsed < baseline_seconds + deadline + 10.0
    assert len(cli_server.requests_to(MESSAGES)) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("reply", "requests"),
    [(Reply.error(500), 3), (Reply.error(429, retry_after=3600), 1)],
    ids=["500", "429-retry-after-3600"],
)
def test_cli_request_count(
    cli_server: FakeProviderServer, index_dir: Path, baseline_seconds: float,
    reply: Reply, requests: int,
) -> None:
    """Before: 9 requests per query for both (SDK retries × hypothesizer retries)."""
    cli_server.reset()
    cli_server.set_default(MESSAGES, reply)
    proc, elapsed = run_cli(cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic")
    assert proc.returncode == 0, proc.stderr
    assert len(cli_server.requests_to(MESSAGES)) == requests
    assert elapsed < baseline_seconds + 10.0


@pytest.mark.slow
def test_cli_prints_hostile_hypothesis_safely(
    cli_server: FakeProviderServer, index_dir: Path, baseline_seconds: float
) -> None:
    """Before: the hypothesis went to the terminal raw (screen clear, colour, U+202E)."""
    cli_server.reset()
    cli_server.set_default(MESSAGES, Reply.anthropic_text(HOSTILE_TEXTS["ansi"] + "\u202e"))
    proc, _ = run_cli(cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic")
    assert proc.returncode == 0, proc.stderr
    assert "criterion hypothesis: 신축이음장치 설치기준" in proc.stdout
    assert unsafe_chars(proc.stdout.replace("\n", "")) == []
    assert unsafe_chars(proc.stderr.replace("\n", "")) == []


# =============================================================================== 13.9 output
@pytest.mark.parametrize("kind", ["ansi", "osc", "bidi", "c1", "flood"])
def test_hostile_output_is_sanitised_before_caching(
    fake: FakeProviderServer, tmp_path: Path, kind: str
) -> None:
    fake.set_default(MESSAGES, Reply.anthropic_text(HOSTILE_TEXTS[kind]))
    hyp = hypothesizer(cache_dir=tmp_path)
    result = hyp.hypothesize(QUERY)
    assert result.text and unsafe_chars(result.text) == []
    assert all(c and unsafe_chars(c) == [] for c in result.criteria)
    assert "신축이음장치" in result.text
    assert len(result.text) <= 200 and len(result.criteria) <= 8
    assert all(len(c) <= 30 for c in result.criteria)
    (cache_file,) = tmp_path.glob("*.json")
    stored = json.loads(cache_file.read_text(encoding="utf-8"))
    assert unsafe_chars(stored["text"]) == []
    assert all(unsafe_chars(c) == [] for c in stored["criteria"])
    # the cached answer is the sanitised one
    again = hypothesizer(cache_dir=tmp_path).hypothesize(QUERY)
    assert (again.text, again.criteria, again.cached) == (result.text, result.criteria, True)
    assert len(fake.requests_to(MESSAGES)) == 1


def test_bidi_override_is_removed_not_just_hidden(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.anthropic_text(HOSTILE_TEXTS["bidi"]))
    result = hypothesizer().hypothesize(QUERY)
    assert "\u202e" not in result.text and "\u2066" not in result.text
    assert result.criteria[0] == "신축이음장치"  # the zero-width space is gone


@pytest.mark.parametrize("kind", ["only_escapes", "labelled_escapes"])
def test_output_with_nothing_left_is_an_error_and_never_cached(
    fake: FakeProviderServer, tmp_path: Path, kind: str
) -> None:
    fake.set_default(MESSAGES, Reply.anthropic_text(HOSTILE_TEXTS[kind]))
    hyp = hypothesizer(cache_dir=tmp_path, max_retries=0)
    for _ in range(2):
        with pytest.raises(HypothesisError) as info:
            hyp.hypothesize(QUERY)
        assert "\x1b" not in str(info.value) and "\u202e" not in str(info.value)
    assert list(tmp_path.glob("*.json")) == []
    assert hyp.cache_info()["size"] == 0
    assert len(fake.requests_to(MESSAGES)) == 2  # the failure was not cached


def test_tampered_cache_file_is_sanitised_on_load(fake: FakeProviderServer, tmp_path: Path) -> None:
    hyp = hypothesizer(cache_dir=tmp_path)
    key = hyp.cache_key(QUERY)
    (tmp_path / f"{key}.json").write_text(
        json.dumps({"format_version": 1, "text": "\x1b[2J배수시설\u202e 기준",
                    "criteria": ["배수\x07시설", "\u200b"], "source": "llm"}),
        encoding="utf-8",
    )
    result = hyp.hypothesize(QUERY)
    assert (result.text, result.criteria, result.cached) == ("배수시설 기준", ("배수시설",), True)
    assert fake.requests_to(MESSAGES) == []


def test_tampered_cache_file_with_nothing_left_is_a_miss(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    hyp = hypothesizer(cache_dir=tmp_path)
    (tmp_path / f"{hyp.cache_key(QUERY)}.json").write_text(
        json.dumps({"format_version": 1, "text": "\x1b[2J", "criteria": []}), encoding="utf-8"
    )
    assert hyp.hypothesize(QUERY).text == "신축이음장치 설치기준"
    assert len(fake.requests_to(MESSAGES)) == 1


def test_hostile_hyde_passage_is_sanitised(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.anthropic_text("\x1b]0;x\x07신축이음장치는\u202e 온도에 따라 " * 500))
    hyde = HyDEHypothesizer(llm=resolve_llm("anthropic"), term_extractor=str.split, backoff=0.01)
    result = hyde.hypothesize(QUERY)
    assert unsafe_chars(result.text) == [] and len(result.text) <= hyde.max_chars
    assert all(unsafe_chars(c) == [] for c in result.criteria)


def test_error_body_escapes_do_not_reach_the_message(fake: FakeProviderServer) -> None:
    body = {"type": "error", "error": {"type": "api_error", "message": "\x1b]0;pwned\x07\x1b[2J"}}
    fake.set_default(MESSAGES, Reply(status=500, body=body))
    with pytest.raises(HypothesisError) as info:
        hypothesizer(max_retries=0).hypothesize(QUERY)
    assert unsafe_chars(str(info.value)) == []


def test_every_hypothesis_is_sanitised_whoever_builds_it() -> None:
    from llama_index_car.hypothesizers.base import (
        MAX_CRITERIA,
        MAX_HYPOTHESIS_TEXT_CHARS,
        CriterionHypothesis,
    )

    h = CriterionHypothesis(
        text="\x1b[31m배수\u202e시설\x00" + "가" * 10_000,
        criteria=tuple(f"기준{i}\x1b[0m" for i in range(100)) + ("", "\u200b"),
    )
    assert unsafe_chars(h.text) == [] and len(h.text) == MAX_HYPOTHESIS_TEXT_CHARS
    assert len(h.criteria) == MAX_CRITERIA and h.criteria[0] == "기준0"
    assert CriterionHypothesis(text="\x1b[2J\u202e", criteria=("\x07",)).is_empty


HUNG_HYPOTHESIZER_SCRIPT = """
import time
from llama_index.core.schema import TextNode
from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer
from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever
from tests.fakes.embeddings import VecEmbedding

class Emb(VecEmbedding):
    def _vec(self, text):
        return [float(len(text) % 7) + 1.0, float(text.count("기")) + 1.0]

class Hung(BaseCriterionHypothesizer):
    def hypothesize(self, query):
        time.sleep(600)  # a user's hypothesizer stuck in some call with no timeout

nodes = [TextNode(id_="a", text="배수시설 설치기준"), TextNode(id_="b", text="교량 난간 높이")]
car = CriterionAwareRetriever.from_defaults(
    nodes=nodes, embed_model=Emb(), hypothesizer=Hung(), hypothesis_timeout=1.0, pool_top_k=2
)
import asyncio, sys
if sys.argv[1:] == ["async"]:
    hits = asyncio.run(car.aretrieve("배수 기준"))
else:
    hits = car.retrieve("배수 기준")
print("fallback", hits[0].node.metadata["car_explain"]["fallback"], flush=True)
print("returned", time.monotonic(), flush=True)
"""


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_process_exits_after_fallback_even_if_the_hypothesizer_never_returns(mode: str) -> None:
    """Before: the hypothesis ran in a ThreadPoolExecutor worker (sync) or the event loop's
    default executor (async, ``asyncio.to_thread``), which the interpreter / ``asyncio.run``
    joins at exit, so the process waited for the stuck call (here 600 s) after CAR had
    answered."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", HUNG_HYPOTHESIZER_SCRIPT, mode],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    assert "fallback True" in proc.stdout
    returned = float(proc.stdout.split("returned")[1].split()[0])
    assert ended - returned < 5.0  # exit follows the answer; nothing joins the stuck thread
    assert ended - start < 90


async def test_hung_sync_hypothesizers_do_not_fill_the_event_loops_pool() -> None:
    """Before: ``ahypothesize`` defaulted to ``asyncio.to_thread``; on 2 cores the loop's
    default executor has 6 workers, so 6 hung hypotheses blocked every later ``to_thread``
    call of the loop (including the sync channels' retrievals)."""
    from llama_index_car.hypothesizers.base import BaseCriterionHypothesizer

    release = threading.Event()

    class Stuck(BaseCriterionHypothesizer):
        def hypothesize(self, query: str) -> Any:
            release.wait(60)
            raise RuntimeError("released")

    stuck = Stuck()
    tasks = [asyncio.ensure_future(stuck.ahypothesize(str(i))) for i in range(40)]
    await asyncio.sleep(0.2)
    try:
        start = time.monotonic()
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), timeout=5) == 42
        assert time.monotonic() - start < 5
    finally:
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
