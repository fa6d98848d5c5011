"""A folder update published while ``llama-car serve`` is under load: the service notices the
new generation, swaps it in atomically and finishes the requests in flight on the old one.

The writer is :func:`llama_index_car.folder.update_index` (what ``llama-car index --update``
runs) on its own loaded copy of the folder; the service sees only the folder's ``CURRENT``.
Oracle for "atomic": every response's top hit is the new document exactly when the response
names the new generation, and each client sees the generations in order (old, then new).
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.serve_folder import NEW_FILE, copy_folder, running, shared_folder

pytest.importorskip("fastapi", reason="the [serve] extra is needed")

#: a question only the new document answers
NEW_QUESTION = "노측 배수시설 측구 깊이 확충방안"
CLIENTS = 8


def test_an_update_is_swapped_in_under_load_and_in_flight_requests_finish_on_the_old(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, fake: Any
) -> None:
    from llama_index_car.demo.loader import DEMO_CORPUS_DIR
    from llama_index_car.folder import update_index
    from llama_index_car.providers import resolve_llm
    from llama_index_car.serve import FolderEngine, ServeSettings, create_app
    from tests.fakes.provider_server import Reply

    src, idx = copy_folder(*shared_folder(tmp_path_factory), tmp_path)
    engine = FolderEngine(idx, llm=resolve_llm("anthropic"), llm_timeout=120)
    old = engine.open()
    released = threading.Event()

    def gate(_: Any) -> Any:  # the in-flight answer's LLM reply waits for the test
        released.wait(300)
        return Reply.anthropic_text("측구 깊이는 0.6m 이상입니다 [1].")  # streamed as SSE

    fake.enqueue("/v1/messages", gate)
    stop = threading.Event()
    seen: list[list[tuple[int, str | None, str | None]]] = [[] for _ in range(CLIENTS)]

    with running(create_app(engine, ServeSettings(reload_interval=0.05))) as url:
        def client(i: int) -> None:
            with httpx.Client(base_url=url, timeout=120) as c:
                while not stop.is_set():
                    r = c.post("/v1/retrieve", json={"query": NEW_QUESTION, "top_k": 1,
                                                     "retriever": ("car", "bm25")[i % 2]})
                    body = r.json() if r.status_code == 200 else {}
                    top = (body.get("hits") or [{}])[0].get("file")
                    seen[i].append((r.status_code, body.get("generation"), top))

        result: dict[str, Any] = {}

        def in_flight() -> None:
            with httpx.Client(base_url=url, timeout=300) as c:
                r = c.post("/v1/answer", json={"query": NEW_QUESTION, "stream": True,
                                               "top_k": 2})
                result["events"] = [json.loads(b[6:]) for b in r.text.split("\n\n")
                                    if b.startswith("data: ")]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        answer = threading.Thread(target=in_flight)
        answer.start()
        for _ in range(6000):  # the answer holds the old generation once its LLM is called
            if fake.requests_to("/v1/messages"):
                break
            threading.Event().wait(0.01)
        assert fake.requests_to("/v1/messages")
        for t in threads:
            t.start()
        while min(len(s) for s in seen) < 3:
            threading.Event().wait(0.01)
        shutil.copy(DEMO_CORPUS_DIR / NEW_FILE, src / NEW_FILE)
        update_index(src, idx)  # another writer: a new generation, CURRENT swapped
        new = json.loads((idx / "CURRENT").read_text())["generation"]
        assert new != old.name
        for _ in range(30000):
            if all(any(g == new for _, g, _ in s) for s in seen):
                break
            threading.Event().wait(0.01)
        counts = [len(s) for s in seen]
        while any(len(s) < n + 3 for s, n in zip(seen, counts, strict=True)):
            threading.Event().wait(0.01)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert old.retired and old.leases == 1  # swapped out, still held by the answer
        released.set()
        answer.join(timeout=120)

    assert all(status == 200 for s in seen for status, _, _ in s)
    for s in seen:
        gens = [g for _, g, _ in s]
        assert set(gens) == {old.name, new}
        flip = gens.index(new)
        assert gens[:flip] == [old.name] * flip and gens[flip:] == [new] * (len(gens) - flip)
        for _, g, top in s:  # the new document is found exactly in the new generation
            assert (top == NEW_FILE) == (g == new), (g, top)
    events = result["events"]
    assert [e["type"] for e in events][-2:] == ["sources", "done"]
    assert events[-1]["data"]["generation"] == old.name
    assert all(n["metadata"]["file_name"] != NEW_FILE for n in events[-2]["data"]["nodes"])
    assert old.retired and old.leases == 0
    assert engine.current.name == new
