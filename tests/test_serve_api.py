"""``llama-car serve``'s API over HTTP: httpx against the real app (uvicorn on 127.0.0.1) over a
real index folder built from demo documents and a hostile HWPX (``tests/fakes/serve_folder``).

Oracles: the library itself on an independently loaded copy of the folder (the same hits and
scores as ``load_index(...).as_retriever``), the reader's ``node_cells()`` for every cell
coordinate, ``html.parser`` for the table HTML and ``prometheus_client``'s parser for
``/metrics``.
"""

from __future__ import annotations

import html.parser
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.serve_folder import (
    HOSTILE,
    HOSTILE_QUESTION,
    running,
    shared_folder,
)

pytest.importorskip("fastapi", reason="the [serve] extra is needed")

QUESTION = "터널 비상주차대는 얼마 간격으로 두나요?"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_folder(tmp_path_factory)[1]


@pytest.fixture(scope="module")
def engine(folder: Path) -> Any:
    from llama_index_car.serve import FolderEngine

    engine = FolderEngine(folder)
    engine.open()
    return engine


@pytest.fixture(scope="module")
def oracle(folder: Path, engine: Any) -> Any:
    """The same folder loaded independently (sharing only the embedding model)."""
    from llama_index_car.folder import load_index

    return load_index(folder, embed_model=engine.current.index.embed_model)


@pytest.fixture(scope="module")
def client(engine: Any) -> Iterator[httpx.Client]:
    from llama_index_car.serve import ServeSettings, create_app

    with running(create_app(engine, ServeSettings(reload_interval=0))) as url, \
            httpx.Client(base_url=url, timeout=120) as c:
        yield c


def _cells(node: Any) -> dict[tuple[int, int, int], Any]:
    from llama_index.readers.hwpx import node_cells

    return {(c.table, c.row, c.col): c for c in node_cells(node)}


def _generation(folder: Path) -> str:
    return str(json.loads((folder / "CURRENT").read_text())["generation"])


def _check_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "generation"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert "\n" not in body["error"]["message"] and "Traceback" not in body["error"]["message"]


# ----------------------------------------------------------------------------- retrieval
@pytest.mark.parametrize("kind", ["car", "hybrid", "bm25", "dense"])
def test_retrieve_returns_the_librarys_hits_and_names_the_generation(
    client: httpx.Client, oracle: Any, folder: Path, kind: str
) -> None:
    r = client.post("/v1/retrieve", json={"query": QUESTION, "retriever": kind, "top_k": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["generation"] == r.headers["x-index-generation"] == _generation(folder)
    want = oracle.as_retriever(kind, similarity_top_k=4).retrieve(QUESTION)
    got = [(h["node_id"], h["score"]) for h in body["hits"]]
    assert [g[0] for g in got] == [w.node.node_id for w in want]
    assert [g[1] for g in got] == pytest.approx([w.score for w in want], rel=1e-6)
    top = body["hits"][0]
    assert top["file"] == "dg2012_tunnel.hwpx" and top["section_title"]
    assert top["channels"] and all(c["rank"] is None or c["rank"] >= 1
                                   for c in top["channels"].values())
    if kind in ("car", "hybrid"):
        assert {"dense", "lexical"} <= set(top["channels"])
    assert top["spans"], "criterion spans attached"


def test_table_spans_carry_the_readers_cell_coordinates(
    client: httpx.Client, oracle: Any
) -> None:
    nodes = {n.node_id: n for n in oracle.nodes}
    seen = 0
    for q in (QUESTION, "비상주차대 설치 간격 750m", "교량 점검통로 유효폭", HOSTILE_QUESTION):
        for hit in client.post("/v1/retrieve", json={"query": q, "top_k": 5}).json()["hits"]:
            cells = _cells(nodes[hit["node_id"]])
            for s in hit["spans"]:
                if s["kind"] == "cell":
                    c = cells[(s["table_index"], s["row"], s["col"])]
                    assert " ".join(c.text.split()) == s["text"]
                    assert (c.row_span, c.col_span) == (s["row_span"], s["col_span"])
                    seen += 1
                elif s["kind"] == "row":
                    assert any(k[0] == s["table_index"] and k[1] == s["row"] for k in cells)
                    seen += 1
    assert seen > 0


def test_filters_restrict_every_channel(client: httpx.Client) -> None:
    filters = {"filters": [{"key": "file_name", "value": "dg2016_slope.hwpx", "operator": "=="}]}
    for kind in ("car", "bm25"):
        hits = client.post("/v1/retrieve", json={"query": QUESTION, "retriever": kind,
                                                 "filters": filters}).json()["hits"]
        assert hits and {h["file"] for h in hits} == {"dg2016_slope.hwpx"}
    bad = {"filters": [{"key": "file'name", "value": "x", "operator": "=="}]}
    _check_error(client.post("/v1/retrieve", json={"query": QUESTION, "filters": bad}), 400,
                 "invalid_request")
    _check_error(client.post("/v1/retrieve", json={"query": QUESTION,
                                                   "filters": {"filters": "x"}}), 400,
                 "invalid_request")


# ----------------------------------------------------------------------------- answers
def test_answer_without_llm_is_the_cited_retrieval_only_answer(
    client: httpx.Client, oracle: Any
) -> None:
    r = client.post("/v1/answer", json={"query": QUESTION, "top_k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["fallback"] is True and body["error"] == "NoLLMError"
    assert body["citations"] and "[1]" in body["answer"]
    nodes = {n.node_id: n for n in oracle.nodes}
    for c in body["citations"]:
        node = nodes[c["node_id"]]
        assert c["file"] == node.metadata["file_name"]
        assert c["section_title"] == node.metadata["section_title"]
        if c["kind"] == "cell":
            cell = _cells(node)[(c["table_index"], c["row"], c["col"])]
            assert " ".join(cell.text.split()) == c["text"]
        if c["kind"] == "sentence":
            assert node.get_content()[c["start"]:c["end"]].split() == c["text"].split()
    assert [s["metadata"]["source_number"] for s in body["sources"]] == list(
        range(1, len(body["sources"]) + 1))


def _events(r: httpx.Response) -> list[dict[str, Any]]:
    out = []
    for block in r.text.split("\n\n"):
        if block.startswith("data: "):
            out.append(json.loads(block[len("data: "):]))
    return out


def test_answer_stream_is_deltas_then_sources_then_done(client: httpx.Client) -> None:
    whole = client.post("/v1/answer", json={"query": QUESTION, "top_k": 3}).json()
    r = client.post("/v1/answer", json={"query": QUESTION, "top_k": 3, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r)
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["sources", "done"] and set(kinds[:-2]) == {"delta"}
    assert "".join(e["data"] for e in events if e["type"] == "delta") == whole["answer"]
    nodes = events[-2]["data"]["nodes"]
    assert all(set(n) == {"id", "metadata", "score", "text", "url"} for n in nodes)
    assert [n["id"] for n in nodes] == [s["id"] for s in whole["sources"]]
    done = events[-1]["data"]
    assert done["generation"] == whole["generation"] and done["citations"] == whole["citations"]


def test_answer_with_an_llm_cites_cells(engine: Any, fake: Any) -> None:
    """The real Anthropic SDK against the local fake: the answer cites [2]; citations
    resolve to that source, streamed and not."""
    from llama_index_car.providers import resolve_llm
    from llama_index_car.serve import FolderEngine, ServeSettings, create_app
    from tests.fakes.provider_server import Reply

    llm_engine = FolderEngine(engine.folder, llm=resolve_llm("anthropic"), llm_timeout=30,
                              embed_model=engine.current.index.embed_model)
    llm_engine.open()
    fake.enqueue("/v1/messages", Reply.anthropic_text("간격은 750m 이내입니다 [2]."),
                 Reply.anthropic_text("간격은 750m 이내입니다 [2]."))
    with running(create_app(llm_engine, ServeSettings(reload_interval=0))) as url, \
            httpx.Client(base_url=url, timeout=60) as c:
        body = c.post("/v1/answer", json={"query": QUESTION, "top_k": 3}).json()
        assert body["fallback"] is False and body["answer"] == "간격은 750m 이내입니다 [2]."
        assert [x["number"] for x in body["citations"]] == [2]
        assert body["citations"][0]["node_id"] == body["sources"][1]["metadata"][
            "parent_node_id"]
        events = _events(c.post("/v1/answer", json={"query": QUESTION, "top_k": 3,
                                                     "stream": True}))
        assert "".join(e["data"] for e in events if e["type"] == "delta") == body["answer"]
        assert events[-1]["data"]["citations"] == body["citations"]
    prompt = json.dumps(fake.requests_to("/v1/messages")[0].body, ensure_ascii=False)
    assert "Source 2 (" in prompt


# ----------------------------------------------------------------------------- nodes
class _Table(html.parser.HTMLParser):
    """Tags and, per cell, its attributes and text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.cells: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag in ("td", "th"):
            self._open, self._text = dict(attrs), []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._open is not None:
            self.cells.append((self._open, "".join(self._text)))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)


def _parsed(table_html: str) -> _Table:
    p = _Table()
    p.feed(table_html)
    p.close()
    return p


def test_node_tables_render_every_cell_at_its_coordinates(
    client: httpx.Client, oracle: Any
) -> None:
    from llama_index_car.serve._html import visible

    tables = [n for n in oracle.nodes if n.metadata.get("cells")]
    assert tables
    merged = 0
    for node in tables:
        body = client.get(f"/v1/nodes/{node.node_id}").json()
        assert body["text"] == node.get_content()
        cells = _cells(node)
        for t in body["tables"]:
            parsed = _parsed(t["html"])
            assert parsed.tags <= {"table", "tbody", "tr", "td", "th"}
            placed = {}
            for attrs, text in parsed.cells:
                if attrs.get("class") == "empty":
                    continue
                key = (t["table"], int(attrs["data-row"] or 0), int(attrs["data-col"] or 0))
                placed[key] = text
                want = cells[key]
                assert text == visible(want.text)
                assert int(attrs.get("rowspan") or 1) == want.row_span
                assert int(attrs.get("colspan") or 1) == want.col_span
                merged += (want.row_span, want.col_span) != (1, 1)
            assert set(placed) == {k for k in cells if k[0] == t["table"]}
        kinds = [s["kind"] for s in body["segments"]]
        assert kinds.count("table") == len(body["tables"])
    assert merged > 0, "the demo tunnel table has merged cells"
    _check_error(client.get("/v1/nodes/no-such-node"), 404, "not_found")


def test_hostile_document_text_is_escaped_everywhere(
    client: httpx.Client, oracle: Any
) -> None:
    from llama_index_car.serve._html import visible

    node = next(n for n in oracle.nodes if n.metadata.get("file_name") == "hostile.hwpx"
                and n.metadata.get("cells"))
    body = client.get(f"/v1/nodes/{node.node_id}")
    assert body.headers["content-type"].startswith("application/json")
    table = body.json()["tables"][0]
    parsed = _parsed(table["html"])
    assert parsed.tags <= {"table", "tbody", "tr", "td", "th"}  # no script, img, a
    texts = {text for _, text in parsed.cells}
    for value in HOSTILE.values():
        assert visible(value) in texts
    assert "\u202e" not in table["html"] and "⟦U+202E⟧" in table["html"]
    assert "<script" not in table["html"] and "&lt;script&gt;" in table["html"]
    hits = client.post("/v1/retrieve", json={"query": HOSTILE_QUESTION}).json()["hits"]
    assert hits[0]["file"] == "hostile.hwpx"


# ----------------------------------------------------------------------------- limits
def test_bodies_queries_and_bad_requests_get_json_errors(client: httpx.Client) -> None:
    big = json.dumps({"query": "가" * 30_000}).encode()
    assert len(big) > 64 * 1024
    _check_error(client.post("/v1/retrieve", content=big,
                             headers={"content-type": "application/json"}), 413,
                 "body_too_large")

    def chunks() -> Iterator[bytes]:
        yield b'{"query": "'
        for _ in range(70):
            yield b"x" * 1024
        yield b'"}'

    _check_error(client.post("/v1/retrieve", content=chunks(),
                             headers={"content-type": "application/json"}), 413,
                 "body_too_large")
    _check_error(client.post("/v1/retrieve", json={"query": "가" * 2001}), 400, "invalid_query")
    _check_error(client.post("/v1/retrieve", content=b"{not json",
                             headers={"content-type": "application/json"}), 400,
                 "invalid_request")
    _check_error(client.post("/v1/retrieve", json={"query": "x", "extra": 1}), 400,
                 "invalid_request")
    _check_error(client.post("/v1/retrieve", json={"query": "x", "retriever": "magic"}), 400,
                 "invalid_request")
    _check_error(client.post("/v1/retrieve", json={"query": "x", "top_k": 51}), 400,
                 "invalid_request")
    _check_error(client.get("/v1/retrieve"), 405, "method_not_allowed")
    _check_error(client.get("/nowhere"), 404, "not_found")
    empty = client.post("/v1/retrieve", json={"query": "\u202e \x1b[0m "})
    assert empty.status_code == 200 and empty.json()["hits"] == []


def test_security_headers_and_no_cors_by_default(client: httpx.Client) -> None:
    for path in ("/", "/static/app.js", "/healthz"):
        r = client.get(path, headers={"origin": "http://evil.example"})
        assert r.status_code == 200
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "access-control-allow-origin" not in r.headers
    page = client.get("/").text
    assert "<script>" not in page and "onclick" not in page and "style=" not in page
    assert "http://" not in page and "https://" not in page  # nothing from a CDN
    pre = client.options("/v1/retrieve", headers={
        "origin": "http://evil.example", "access-control-request-method": "POST"})
    assert "access-control-allow-origin" not in pre.headers


def test_cors_only_for_the_origins_asked_for(engine: Any) -> None:
    from llama_index_car.serve import ServeSettings, create_app

    app = create_app(engine, ServeSettings(reload_interval=0, api_key="k" * 24,
                                           cors_origins=("http://app.example",)))
    with running(app) as url, httpx.Client(base_url=url) as c:
        ok = c.get("/healthz", headers={"origin": "http://app.example"})
        assert ok.headers["access-control-allow-origin"] == "http://app.example"
        other = c.get("/healthz", headers={"origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        pre = c.options("/v1/retrieve", headers={  # a preflight needs no key
            "origin": "http://app.example", "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "http://app.example"


def test_api_key_is_required_where_configured(engine: Any) -> None:
    from llama_index_car.serve import ServeSettings, create_app

    key = "k" * 24
    app = create_app(engine, ServeSettings(reload_interval=0, api_key=key))
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        for headers in ({}, {"authorization": "Bearer " + "x" * 24},
                        {"authorization": key}, {"authorization": "Basic " + key}):
            r = c.post("/v1/retrieve", json={"query": QUESTION}, headers=headers)
            _check_error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"] == "Bearer"
        _check_error(c.get("/metrics"), 401, "unauthorized")
        assert c.post("/v1/retrieve", json={"query": QUESTION},
                      headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
        assert c.get("/").status_code == 200  # the page asks for the key itself


def test_metrics_count_requests_per_endpoint_and_retriever(engine: Any) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from llama_index_car.serve import ServeSettings, create_app

    with running(create_app(engine, ServeSettings(reload_interval=0))) as url, \
            httpx.Client(base_url=url, timeout=60) as c:
        for kind in ("bm25", "bm25", "car"):
            assert c.post("/v1/retrieve", json={"query": QUESTION, "retriever": kind}
                          ).status_code == 200
        c.post("/v1/retrieve", json={"query": "x", "top_k": 0})
        text = c.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {(s.labels["endpoint"], s.labels["retriever"], s.labels["status"]): s.value
                for s in families["llama_car_requests"].samples}
    assert requests[("/v1/retrieve", "bm25", "200")] == 2
    assert requests[("/v1/retrieve", "car", "200")] == 1
    assert requests[("/v1/retrieve", "", "400")] == 1
    errors = {(s.labels["endpoint"], s.labels["code"]): s.value
              for s in families["llama_car_errors"].samples}
    assert errors[("/v1/retrieve", "invalid_request")] == 1
    hist = [s for s in families["llama_car_request_seconds"].samples
            if s.labels.get("retriever") == "bm25"]
    buckets = [s.value for s in hist if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == 2
    assert next(s.value for s in hist if s.name.endswith("_count")) == 2
    gen = [s for s in families["llama_car_generation_info"].samples]
    assert gen[0].labels["generation"] == engine.current.name


def test_health_readiness_and_openapi(client: httpx.Client, engine: Any) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "generation": engine.current.name}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["nodes"] == len(engine.current.nodes)
    schema = client.get("/openapi.json").json()
    assert {"/v1/retrieve", "/v1/answer", "/v1/nodes/{node_id}", "/healthz", "/readyz",
            "/metrics"} <= set(schema["paths"])
    kinds = schema["components"]["schemas"]["RetrieveRequest"]["properties"]["retriever"]
    assert set(kinds["enum"]) == {"car", "hybrid", "bm25", "dense"}
    assert client.get("/docs").status_code == 404  # no CDN-backed docs page


def test_a_request_past_its_deadline_gets_504(engine: Any, fake: Any) -> None:
    """One worker thread held by an answer whose LLM reply waits for the test: a retrieval
    queued behind it passes its deadline."""
    import threading

    from llama_index_car.providers import resolve_llm
    from llama_index_car.serve import FolderEngine, ServeSettings, create_app
    from tests.fakes.provider_server import Reply

    hung = FolderEngine(engine.folder, llm=resolve_llm("anthropic", max_retries=0),
                        llm_timeout=600, embed_model=engine.current.index.embed_model)
    hung.open()
    released = threading.Event()

    def gate(_: Any) -> Any:
        released.wait(120)
        return Reply.anthropic_text("간격은 750m 이내입니다 [1].")

    fake.enqueue("/v1/messages", gate)
    app = create_app(hung, ServeSettings(reload_interval=0, threads=1, deadline=0.5))
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        held = threading.Thread(target=lambda: c.post("/v1/answer", json={"query": QUESTION}))
        held.start()
        for _ in range(3000):
            if fake.requests_to("/v1/messages"):
                break
            threading.Event().wait(0.01)
        assert fake.requests_to("/v1/messages"), "the answer reached the LLM"
        _check_error(c.post("/v1/retrieve", json={"query": QUESTION}), 504,
                     "deadline_exceeded")
        released.set()
        held.join(timeout=60)
        assert not held.is_alive()


def test_a_folder_built_without_spans_is_served_by_every_kind(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The service asks each view for spans only when the folder has them (it asked ``car``
    for 3 spans of a folder built with ``--no-spans``: the engine could not even warm up)."""
    from llama_index_car.folder import BuildOptions, build_index, load_index
    from llama_index_car.serve import FolderEngine

    source = shared_folder(tmp_path_factory)[0]
    build_index(source, tmp_path / "idx", BuildOptions(spans=False))
    engine = FolderEngine(tmp_path / "idx")
    gen = engine.open()
    oracle = load_index(tmp_path / "idx", embed_model=gen.index.embed_model)
    for kind in ("car", "hybrid", "bm25", "dense"):
        hits = engine.hits(gen, QUESTION, kind, 3)
        want = oracle.as_retriever(kind, similarity_top_k=3).retrieve(QUESTION)
        assert [h.node.node_id for h in hits] == [w.node.node_id for w in want] != []
        assert all(not h.node.metadata.get("criterion_spans") for h in hits)
