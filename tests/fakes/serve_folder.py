"""Index folders for the service tests, built in code: a few bundled demo documents plus a
hostile HWPX whose paragraphs and table cells hold markup, script, ``javascript:`` links and
bidi controls (it must show as text, never run).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llama_index_car.demo.loader import DEMO_CORPUS_DIR

#: demo documents of the small test folder (the tunnel one holds a merged-cell table)
DEMO_FILES = ("dg2012_tunnel.hwpx", "dg2016_slope.hwpx", "dg2018_bridge.hwpx")
#: a document added by the update tests (not in DEMO_FILES)
NEW_FILE = "dg2019_drainage.hwpx"

#: what the hostile document's cells and paragraphs hold, each of which must stay text
HOSTILE = {
    "script": "<script>alert('cell')</script>",
    "img": '<img src=x onerror="alert(1)">',
    "link": '<a href="javascript:alert(2)">교량 점검 링크</a>',
    "md_link": "[점검 기준](javascript:alert(3))",
    "bidi": "점검 \u202e기준 역순\u202c 이상",
    "attr": '" onmouseover="alert(4)',
}
#: the hostile document's title and the question that finds it
HOSTILE_TITLE = "위험 문자열 점검시설 설치기준"
HOSTILE_QUESTION = "위험 문자열 점검시설 설치기준 표"


def hostile_hwpx() -> bytes:
    """An HWPX whose paragraph and table cells hold :data:`HOSTILE` (header row + 3 rows,
    one merged cell), written with the reader's own builder."""
    from llama_index.readers.hwpx.writer import HWPXBuilder

    b = HWPXBuilder(title="위험 문서")
    s = b.add_section()
    s.heading(HOSTILE_TITLE, level=1)
    s.paragraph(f"점검시설 설치기준은 다음 표에 따른다. {HOSTILE['script']} {HOSTILE['img']}")
    s.paragraph(f"참고: {HOSTILE['link']} 및 {HOSTILE['md_link']}; {HOSTILE['bidi']}.")
    s.table(
        [
            ["구분", "기준", "비고"],
            ["점검통로", HOSTILE["script"], HOSTILE["img"]],
            ["난간", HOSTILE["link"], HOSTILE["md_link"]],
            ["계단", HOSTILE["bidi"], HOSTILE["attr"]],
        ],
        caption="표 1 위험 문자열 점검시설 설치기준",
    )
    return b.to_bytes()


def source_folder(dest: Path, files: tuple[str, ...] = DEMO_FILES, hostile: bool = True) -> Path:
    """``dest`` filled with ``files`` from the demo corpus and (``hostile``) the hostile HWPX."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        shutil.copy(DEMO_CORPUS_DIR / name, dest / name)
    if hostile:
        (dest / "hostile.hwpx").write_bytes(hostile_hwpx())
    return dest


def build_folder(source: Path, persist: Path) -> Path:
    """Index ``source`` into ``persist`` with the defaults (offline e5, spans)."""
    from llama_index_car.folder import build_index

    build_index(source, persist)
    return persist


def shared_folder(tmp_path_factory: Any) -> tuple[Path, Path]:
    """``(source, index)`` built once per test run and shared by the pytest-xdist workers
    (a file lock in their common temporary root); read-only by convention — a test that
    changes it copies it first (:func:`copy_folder`)."""
    import os

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = root / "serve-folder"
    root.mkdir(exist_ok=True)
    source, index = root / "src", root / "idx"
    with FileLock(str(root / ".lock")):
        if not (index / "CURRENT").is_file():
            shutil.rmtree(index, ignore_errors=True)
            shutil.rmtree(source, ignore_errors=True)
            build_folder(source_folder(source), index)
    return source, index


def copy_folder(source: Path, index: Path, dest: Path) -> tuple[Path, Path]:
    """A private copy of a source folder and its index folder (moved together, the node ids
    and source keys stay the same)."""
    shutil.copytree(source, dest / "src")
    shutil.copytree(index, dest / "idx")
    return dest / "src", dest / "idx"


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free 127.0.0.1 port; yields the base URL
    and stops the server (lifespan shutdown included) at exit."""
    import socket
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(6000):  # the lifespan opens the index when it is not open yet
            if server.started or not thread.is_alive():
                break
            time.sleep(0.01)
        if not server.started:
            raise RuntimeError("the test server did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
