"""Issues 13.8 / 13.9 / 20.8: a hostile or broken LLM provider, through the real anthropic SDK
(``BoundedAnthropic``, a ``llama-index-llms-anthropic`` subclass) against the local fake server
(``tests/fakes``).

Each test reproduces an attack first (the comment says what the code did before):

* latency — a hung server, 500/529s and 429s with ``Retry-After``: one retry policy (the
  SDK's, ``x-stainless-retry-count`` on each request is the oracle), ``Retry-After`` obeyed up
  to the deadline of :func:`llm_deadline`, the deadline held by the library and by the
  ``llama-car query`` process at exit, hung calls never blocking later queries. Hangs are
  detected with generous bounds (:func:`finishes`), not timed.
* leaks and floods (20.8) — a slow-drip server: threads and open fds back to their baseline
  after the deadline; a huge body: refused at 1 MiB, judged by the bytes the server could
  send; the async client under repeated ``asyncio.run``.
* output — terminal escape sequences, bidi overrides, floods: hypotheses sanitised before
  caching, printing or use; an output with nothing left is an error and is never cached. The
  oracle for "sanitised" is :func:`unsafe_chars`, written from the Unicode categories, not
  from the code under test.
"""

from __future__ import annotations

import asyncio
import contextvars
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
from llama_index_car.llms import (
    AnthropicDeadlineError,
    AnthropicResponseTooLargeError,
    llm_deadline,
)
from llama_index_car.providers import resolve_embed_model, resolve_llm
from tests.fakes.provider_server import (
    HOSTILE_TEXTS,
    FakeProviderServer,
    Reply,
    anthropic_message,
)

QUERY = "온도에 따라 늘었다 줄었다 하는 이음부는 어떻게 설치하나요?"
MESSAGES = "/v1/messages"
REPO = Path(__file__).resolve().parents[1]


def unsafe_chars(text: str) -> list[str]:
    """Characters a terminal may act on or that reorder text: ESC and every other control
    (Cc), format characters (Cf: bidi overrides/isolates, zero-width), surrogates (Cs)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs")]


def hypothesizer(**kw: Any) -> LLMCriterionHypothesizer:
    """Claude through ``resolve_llm`` (what the CLI and users get); ``kw`` go to the LLM."""
    cache = {k: kw.pop(k) for k in ("cache_dir",) if k in kw}
    return LLMCriterionHypothesizer(llm=resolve_llm("anthropic", **kw), **cache)


def finishes(fn: Any, bound: float = 60.0) -> Any:
    """``fn()`` in a thread (in a copy of this context: an enclosing :func:`llm_deadline`
    applies); its result, or a failure if it has not ended within ``bound`` seconds (a
    generous hang detector, not a speed claim)."""
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=context.run, args=(run,), daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"still running after {bound:g} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def retry_counts(fake: FakeProviderServer) -> list[str | None]:
    """The SDK's own retry counter on each request (``x-stainless-retry-count``)."""
    return [r.header("x-stainless-retry-count") for r in fake.requests_to(MESSAGES)]


# =============================================================================== 13.8 latency
def test_retries_are_the_sdks_own(fake: FakeProviderServer) -> None:
    """Before: the hypothesizer retried with the SDK's retries swapped off, so every request
    was a fresh SDK call (retry count 0, 0, 0). Now the SDK retries (0, 1, 2) and the
    hypothesizer makes one call."""
    fake.set_default(MESSAGES, Reply.error(500))
    with pytest.raises(HypothesisError, match="HTTP 500"):
        hypothesizer(max_retries=2).hypothesize(QUERY)
    assert retry_counts(fake) == ["0", "1", "2"]


def test_529_overloaded_is_retried_by_the_sdk(fake: FakeProviderServer) -> None:
    fake.enqueue(MESSAGES, Reply.error(529), Reply.error(503))
    assert hypothesizer(max_retries=2).hypothesize(QUERY).text == "신축이음장치 설치기준"
    assert retry_counts(fake) == ["0", "1", "2"]


async def test_async_client_retries_too(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.error(500))
    with pytest.raises(HypothesisError):
        await hypothesizer(max_retries=1).ahypothesize(QUERY)
    assert retry_counts(fake) == ["0", "1"]


def test_retry_after_beyond_the_deadline_gives_up_at_once(fake: FakeProviderServer) -> None:
    """`Retry-After: 3600` under a 30 s deadline: no retry (the SDK alone would ignore a hint
    above 60 s and come back after 0.5 s, i.e. sooner than the server allowed)."""
    fake.set_default(MESSAGES, Reply.error(429, retry_after=3600))
    with llm_deadline(30.0), pytest.raises(HypothesisError, match="HTTP 429"):
        finishes(lambda: hypothesizer(max_retries=2).hypothesize(QUERY))
    assert len(fake.requests_to(MESSAGES)) == 1


def test_retry_after_within_the_deadline_is_obeyed(fake: FakeProviderServer) -> None:
    fake.enqueue(MESSAGES, Reply.error(503, retry_after=1))
    with llm_deadline(10.0):
        result = hypothesizer(max_retries=2).hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    first, second = fake.requests_to(MESSAGES)
    assert second.received - first.received >= 1.0  # never sooner than the server asked
    assert retry_counts(fake) == ["0", "1"]


def test_retry_after_http_date_is_understood(fake: FakeProviderServer) -> None:
    from email.utils import formatdate

    fake.set_default(MESSAGES, Reply.error(429, retry_after=formatdate(time.time() + 600)))
    with llm_deadline(30.0), pytest.raises(HypothesisError):
        hypothesizer(max_retries=2).hypothesize(QUERY)
    assert len(fake.requests_to(MESSAGES)) == 1


def test_backoff_that_would_pass_the_deadline_is_not_slept(fake: FakeProviderServer) -> None:
    """The SDK's backoff before retry n is at most min(0.5 * 2**n, 8) s: 0.5 and 1 s fit in
    a 3 s deadline, the 2 s wait after the third request would not, so it is not slept and
    the call ends with the server's error, not at the deadline."""
    hyp = hypothesizer(max_retries=10)
    hyp.hypothesize("예열 질문")  # first use of the client (imports, connection) outside the clock
    fake.reset()
    fake.set_default(MESSAGES, Reply.error(500))
    with llm_deadline(3.0), pytest.raises(HypothesisError, match="HTTP 500"):
        hyp.hypothesize(QUERY)
    assert retry_counts(fake) == ["0", "1", "2"]


def test_hung_server_sync_deadline(fake: FakeProviderServer) -> None:
    """A hung server: the attempt timeout (10 s) is cut to the deadline (1 s), which the SDK
    does not retry past."""
    fake.set_default(MESSAGES, Reply.hang())
    with llm_deadline(1.0), pytest.raises(HypothesisError, match="deadline") as info:
        finishes(lambda: hypothesizer(timeout=10.0, max_retries=3).hypothesize(QUERY))
    assert isinstance(info.value.__cause__, AnthropicDeadlineError)
    assert len(fake.requests_to(MESSAGES)) == 1


async def test_hung_server_async_deadline(fake: FakeProviderServer) -> None:
    fake.set_default(MESSAGES, Reply.hang())
    hyp = hypothesizer(timeout=10.0, max_retries=3)
    with llm_deadline(1.0), pytest.raises(HypothesisError, match="deadline"):
        await asyncio.wait_for(hyp.ahypothesize(QUERY), timeout=60)
    assert len(fake.requests_to(MESSAGES)) == 1


def test_hung_calls_do_not_block_later_queries(fake: FakeProviderServer) -> None:
    """Before: each attempt ran in a shared 4-thread pool; hung requests (SDK timeout 60 s)
    kept its workers busy, so after the server recovered the next query waited in the queue
    and timed out too. Six hung queries, then one after recovery, which must succeed."""
    fake.set_default(MESSAGES, Reply.hang())
    hyp = hypothesizer(timeout=60.0, max_retries=0)
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            with llm_deadline(0.8):
                hyp.hypothesize(f"{QUERY} {i}")
        except HypothesisError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(errors) == 6
    fake.set_default(MESSAGES, None)  # the server recovers
    result = hyp.hypothesize(QUERY)
    assert result.text == "신축이음장치 설치기준"
    assert len(fake.requests_to(MESSAGES)) == 7


def car_over(hyp: LLMCriterionHypothesizer, **kw: Any) -> Any:
    from llama_index_car.retrievers.criterion_aware import CriterionAwareRetriever

    nodes = [
        TextNode(id_="a", text="신축이음장치 설치기준: 온도 변화에 따른 신축량을 흡수한다."),
        TextNode(id_="b", text="배수시설의 구조기준은 집중호우 빈도에 맞춘다."),
    ]
    return CriterionAwareRetriever.from_defaults(
        nodes=nodes, embed_model=resolve_embed_model("openai", max_retries=0),
        hypothesizer=hyp, pool_top_k=2, similarity_top_k=2, **kw,
    )


def test_car_falls_back_within_the_deadline(fake: FakeProviderServer) -> None:
    car = car_over(hypothesizer(timeout=10.0), hypothesis_timeout=1.0)
    fake.set_default(MESSAGES, Reply.hang())
    hits = finishes(lambda: car.retrieve(QUERY))
    assert hits and hits[0].node.metadata["car_explain"]["fallback"] is True


# ======================================================================= 20.8 leaks and floods
def resources() -> tuple[int, int]:
    """(live threads, open file descriptors) of this process."""
    return threading.active_count(), len(os.listdir("/proc/self/fd"))


def back_to(
    baseline: tuple[int, int], bound: float = 45.0, until: Any = lambda: True
) -> tuple[int, int]:
    """Poll until threads and fds are no more than ``baseline`` and ``until()`` holds (or
    ``bound`` seconds passed); return the last (threads, fds)."""
    give_up = time.monotonic() + bound
    while True:
        now = resources()
        done = now[0] <= baseline[0] and now[1] <= baseline[1] and until()
        if done or time.monotonic() > give_up:
            return now
        time.sleep(0.1)


@pytest.mark.parametrize("phase", ["body", "headers"])
def test_slow_drip_attempts_end_with_the_car_deadline(
    fake: FakeProviderServer, phase: str
) -> None:
    """Issue 20.8. Before: against a server dripping a byte every 50 ms (each read well
    within the read timeout), every query fell back at its deadline but its attempt thread
    and socket lived on (41 threads, 46 fds after 40 queries, unchanged 90 s later). Now the
    transport ends the request at the deadline: threads and fds return to the baseline.
    The fake server runs in this process; its handler for a dripping request ends only
    when the client closes the socket, so it is counted too."""
    car = car_over(hypothesizer(timeout=60.0), hypothesis_timeout=0.5)
    car.retrieve(QUERY)  # warm: a pooled connection, the embedding client, caches
    baseline = back_to(resources(), bound=5.0)
    fake.set_default(MESSAGES, Reply.slow_drip(0.05, headers=phase == "headers"))
    for i in range(8):
        hits = finishes(lambda i=i: car.retrieve(f"{QUERY} {i}"))
        assert hits[0].node.metadata["car_explain"]["fallback"] is True
    # every dripping handler ended (it ends only when its client closes the socket), then
    # threads and fds are back (the warm connection, reused and closed, may leave them below)
    threads, fds = back_to(baseline, until=lambda: len(fake.body_bytes_sent) == 8)
    assert len(fake.body_bytes_sent) == 8
    assert threads <= baseline[0] and fds <= baseline[1], (baseline, (threads, fds))


def call(hyp: LLMCriterionHypothesizer, query: str, mode: str) -> Any:
    """``hyp.hypothesize(query)``, or ``ahypothesize`` in a fresh event loop (``mode="async"``;
    the loop's main task copies this context, so an enclosing :func:`llm_deadline` applies)."""
    if mode == "async":
        return asyncio.run(hyp.ahypothesize(query))
    return hyp.hypothesize(query)


@pytest.mark.parametrize("phase", ["body", "headers"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_slow_drip_standalone_hypothesizer_frees_its_socket(
    fake: FakeProviderServer, mode: str, phase: str
) -> None:
    """The call itself ends at its deadline (the async client cancels the attempt, the sync
    one bounds every socket read by the time left): the dripping handler ends, which it does
    only when the client closes the socket, and threads and fds return to the baseline."""
    hyp = hypothesizer(timeout=60.0)
    call(hyp, QUERY, mode)
    baseline = back_to(resources(), bound=5.0)
    fake.set_default(MESSAGES, Reply.slow_drip(0.05, headers=phase == "headers"))
    for i in range(4):
        with llm_deadline(0.4), pytest.raises(HypothesisError) as info:
            finishes(lambda i=i: call(hyp, f"{QUERY} {i}", mode))
        assert isinstance(info.value.__cause__, AnthropicDeadlineError)
    threads, fds = back_to(baseline, until=lambda: len(fake.body_bytes_sent) == 4)
    assert len(fake.body_bytes_sent) == 4
    assert threads <= baseline[0] and fds <= baseline[1], (baseline, (threads, fds))


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_huge_body_is_refused_not_buffered(
    fake: FakeProviderServer, declare_length: bool, mode: str
) -> None:
    """Issue 20.8. Before: a 400 MB body was read whole, then cut to 20,000 characters
    (peak RSS 128 → 1,329 MB). Now reading stops at 1 MiB (a declared Content-Length above it
    is refused before the body): the oracle is what the server managed to send, which can
    only exceed the cap by the kernel's socket buffers, not by the body."""
    size = 64 << 20
    fake.set_default(MESSAGES, Reply.huge(size, declare_length=declare_length))
    with pytest.raises(HypothesisError, match="max_response_bytes") as info:
        call(hypothesizer(max_retries=2), QUERY, mode)
    assert isinstance(info.value.__cause__, AnthropicResponseTooLargeError)
    assert len(fake.requests_to(MESSAGES)) == 1  # refused, not retried
    give_up = time.monotonic() + 30
    while not fake.body_bytes_sent and time.monotonic() < give_up:
        time.sleep(0.05)
    (sent,) = fake.body_bytes_sent
    assert sent < size // 4, f"the server wrote {sent:,} of {size:,} bytes"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_compressed_body_is_refused(fake: FakeProviderServer, mode: str) -> None:
    """The cap counts bytes on the wire; a gzip body would inflate past it above the
    transport, so the request asks for identity and a compressed reply is refused."""
    import gzip

    body = gzip.compress(json.dumps(anthropic_message("가설: 배수시설")).encode())
    fake.set_default(MESSAGES, Reply(raw=body, headers={"Content-Encoding": "gzip"}))
    with pytest.raises(HypothesisError, match="compressed"):
        call(hypothesizer(max_retries=0), QUERY, mode)
    assert fake.requests_to(MESSAGES)[0].header("accept-encoding") == "identity"


def test_async_client_works_across_event_loops(fake: FakeProviderServer) -> None:
    """Issue 18. Before: ``asyncio.run(car.aretrieve(q))`` in a loop fell back to the hybrid
    on every second event loop (``APIConnectionError``: the async client's pooled socket
    belonged to the previous, closed loop)."""
    car = car_over(hypothesizer(timeout=30.0, max_retries=0), hypothesis_timeout=30.0)
    explains = [
        asyncio.run(car.aretrieve(f"{QUERY} {i}"))[0].node.metadata["car_explain"]
        for i in range(6)
    ]
    assert [e["fallback"] for e in explains] == [False] * 6, [e.get("error") for e in explains]
    assert len(fake.requests_to(MESSAGES)) == 6


def test_connection_errors_are_not_retried_past_the_deadline() -> None:
    """A refused connection is retried by the SDK after its backoff (0.5 s first); with
    0.3 s left the backoff is not slept: the call ends naming the network error (a retry
    would have ended at the deadline instead, "passed its deadline")."""
    import socket

    from llama_index_car.llms import BoundedAnthropic

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = BoundedAnthropic(api_key="sk-ant-fake", base_url=f"http://127.0.0.1:{port}")
    hyp = LLMCriterionHypothesizer(llm=llm)
    with llm_deadline(0.3), pytest.raises(HypothesisError, match="ConnectError") as info:
        finishes(lambda: hyp.hypothesize(QUERY))
    assert isinstance(info.value.__cause__, AnthropicDeadlineError)


def test_redirects_are_not_followed(fake: FakeProviderServer) -> None:
    """An API key never goes where a redirect points."""
    fake.set_default(MESSAGES, Reply(status=307, headers={"Location": fake.url + "/elsewhere"}))
    with pytest.raises(HypothesisError):
        hypothesizer(max_retries=0).hypothesize(QUERY)
    assert fake.requests_to("/elsewhere") == []


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


def run_cli(
    server: FakeProviderServer, *argv: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        ANTHROPIC_API_KEY="sk-ant-fake", ANTHROPIC_BASE_URL=server.url, PYTHONIOENCODING="utf-8"
    )
    env.pop("LLAMA_CAR_LLM", None)
    return subprocess.run(
        [sys.executable, "-m", "llama_index_car", *argv],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )


@pytest.fixture(scope="module")
def cli_server() -> Any:
    server = FakeProviderServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def healthy_query(cli_server: FakeProviderServer, index_dir: Path) -> None:
    """A healthy `--llm anthropic` query works first (so a failure below is the fault's)."""
    cli_server.reset()
    proc = run_cli(cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic")
    assert proc.returncode == 0, proc.stderr
    assert "criterion hypothesis: 신축이음장치 설치기준" in proc.stdout


@pytest.mark.slow
def test_cli_exits_within_the_deadline_on_a_hung_server(
    cli_server: FakeProviderServer, index_dir: Path, healthy_query: None
) -> None:
    """Before: CAR fell back at 30 s but the process exited after 186 s (interpreter exit
    joined the pool thread stuck in a 60 s × 3 SDK-retry request)."""
    cli_server.reset()
    cli_server.set_default(MESSAGES, Reply.hang())
    deadline = 2.0
    proc = run_cli(
        cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic",
        "--llm-timeout", str(deadline), timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    assert "criterion hypothesis: (none)" in proc.stdout  # the hybrid fallback answered
    # the server never answers and the SDK alone would wait 3 × 60 s: exiting inside
    # run_cli's 90 s bound at all is the deadline's doing (no elapsed figure is asserted)
    # never retried past the deadline; 0 when a starved machine reached the deadline before
    # the connect (a request is not started once the deadline has passed)
    assert len(cli_server.requests_to(MESSAGES)) <= 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("reply", "requests"),
    [(Reply.error(500), 3), (Reply.error(429, retry_after=3600), 1)],
    ids=["500", "429-retry-after-3600"],
)
def test_cli_request_count(
    cli_server: FakeProviderServer, index_dir: Path, healthy_query: None,
    reply: Reply, requests: int,
) -> None:
    """Before: 9 requests per query for both (SDK retries × hypothesizer retries)."""
    cli_server.reset()
    cli_server.set_default(MESSAGES, reply)
    proc = run_cli(cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic")
    assert proc.returncode == 0, proc.stderr
    assert len(cli_server.requests_to(MESSAGES)) == requests  # Retry-After 3600 s not slept:
    # obeying it would outlast run_cli's bound and fail the test there


@pytest.mark.slow
def test_cli_prints_hostile_hypothesis_safely(
    cli_server: FakeProviderServer, index_dir: Path, healthy_query: None
) -> None:
    """Before: the hypothesis went to the terminal raw (screen clear, colour, U+202E)."""
    cli_server.reset()
    cli_server.set_default(MESSAGES, Reply.anthropic_text(HOSTILE_TEXTS["ansi"] + "\u202e"))
    proc = run_cli(cli_server, "query", str(index_dir), QUERY, "--llm", "anthropic")
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
    hyde = HyDEHypothesizer(llm=resolve_llm("anthropic"), term_extractor=str.split)
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
    proc = subprocess.run(
        [sys.executable, "-c", HUNG_HYPOTHESIZER_SCRIPT, mode],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    # the stuck call lasts 600 s: a process that joined it would outlast the 120 s bound
    assert proc.returncode == 0, proc.stderr
    assert "fallback True" in proc.stdout and "returned" in proc.stdout


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
        # a full pool would hold this call until ``release`` (60 s); wait_for's bound fails it
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), timeout=5) == 42
    finally:
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
