"""The page at ``/`` in headless Chromium (Debian's ``chromium``, driven by Playwright): ask a
question with the keyboard, see the hits, choose a table cell span and check that the cell the
page highlights has the text and (row, col) of the reader's ``node_cells()`` for that node,
with its column header marked; the hostile document shows its markup, ``javascript:`` links
and bidi controls as text and nothing runs (no dialog, no ``javascript:`` request, no CSP
violation); the page fits a phone's width. Saves the screenshot ``docs/images/serve-page.png``
(``LLAMA_CAR_SCREENSHOT=1``; else into the test's temporary folder).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.fakes.serve_folder import HOSTILE, HOSTILE_QUESTION, running, shared_folder

pytest.importorskip("fastapi", reason="the [serve] extra is needed")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
#: a question whose first hit's best span is a table cell (the bridge table, merged cells)
CELL_QUESTION = "난간 높이는 몇 m 이상?"
SCREENSHOT = REPO_ROOT / "docs" / "images" / "serve-page.png"

CELL_TEXT = """(el) => {
  const copy = el.cloneNode(true);
  copy.querySelectorAll('.sr-only').forEach((n) => n.remove());
  return copy.textContent;
}"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    from llama_index_car.serve import FolderEngine, ServeSettings, create_app

    engine = FolderEngine(shared_folder(tmp_path_factory)[1])
    engine.open()
    with running(create_app(engine, ServeSettings(reload_interval=0))) as url:
        yield url, engine


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is needed: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=ARGS, headless=True,
            viewport={"width": 1200, "height": 820}, locale="ko-KR")
        try:
            yield context
        finally:
            context.close()


class Watch:
    """What the page did that it must not: dialogs, ``javascript:`` requests, CSP reports,
    script errors."""

    def __init__(self, page: Any) -> None:
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.console: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("console", lambda m: self.console.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def clean(self, origin: str) -> None:
        assert self.dialogs == []
        assert [u for u in self.requests if not u.startswith(origin)] == []
        assert not any(u.lower().startswith("javascript:") for u in self.requests)
        assert not any("Content Security Policy" in m for m in self.console), self.console
        assert self.errors == []


def _ask(page: Any, question: str) -> None:
    page.focus("#query")
    page.keyboard.type(question)
    page.keyboard.press("Enter")
    page.wait_for_selector("#hits .hit")


def test_a_cited_cell_is_highlighted_at_the_readers_coordinates(
    served: tuple[str, Any], browser: Any, tmp_path: Path
) -> None:
    from llama_index.readers.hwpx import node_cells

    url, engine = served
    page = browser.new_page()
    watch = Watch(page)
    page.goto(url + "/")
    assert page.title().startswith("기준 조항 검색")
    _ask(page, CELL_QUESTION)
    first = page.locator("#hits .hit").first
    assert first.locator(".channels").inner_text()  # channel ranks shown
    span = first.locator("button.span-cell").first
    node_id = first.get_attribute("data-node")
    table, row, col = (int(span.get_attribute(a)) for a in ("data-table", "data-row",
                                                             "data-col"))
    span.focus()
    page.keyboard.press("Enter")  # keyboard-usable: the span is a button
    page.wait_for_selector("#detail-body td.cited, #detail-body th.cited")
    cited = page.locator("#detail-body .cited")
    assert cited.count() == 1
    cell = cited.first
    got = (int(cell.get_attribute("data-row")), int(cell.get_attribute("data-col")))
    text = cell.evaluate(CELL_TEXT)
    assert cell.get_attribute("aria-current") == "true"
    assert page.evaluate("document.activeElement.id") == "cited"  # focus moved to it

    node = engine.current.nodes[node_id]
    truth = {(c.row, c.col): c for c in node_cells(node) if c.table == table}
    assert got == (row, col) and text == truth[got].text
    enclosing = cell.evaluate("(el) => el.closest('table').getAttribute('data-table')")
    assert int(enclosing) == table
    heads = page.locator("#detail-body .header-col")
    assert heads.count() >= 1
    for i in range(heads.count()):
        h = heads.nth(i)
        r, c = int(h.get_attribute("data-row")), int(h.get_attribute("data-col"))
        assert r == 0 and h.evaluate(CELL_TEXT) == truth[(r, c)].text
        assert c <= col < c + truth[(r, c)].col_span
    path = SCREENSHOT if os.environ.get("LLAMA_CAR_SCREENSHOT") else tmp_path / "page.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1200, "height": 1100})
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000

    page.click("#answer-button")  # the answer's [n] link to their sources
    page.wait_for_selector("#answer-text a.cite")
    page.locator("#answer-text a.cite").first.click()
    page.wait_for_selector("#detail-body .cited")
    watch.clean(url)


def test_hostile_text_shows_as_text_and_never_runs(
    served: tuple[str, Any], browser: Any
) -> None:
    from playwright.sync_api import expect

    from llama_index_car.serve._html import visible

    url, engine = served
    page = browser.new_page()
    watch = Watch(page)
    page.goto(url + "/")
    _ask(page, HOSTILE_QUESTION)
    hostile = page.locator("#hits .hit", has_text="hostile.hwpx").first
    assert hostile.count() == 1
    hostile.locator("button.link").click()  # the whole section: text and table
    page.wait_for_selector("#detail-body table")
    body = page.locator("#detail-body")
    assert body.locator("script, img, a, iframe, object").count() == 0
    cells = [c.evaluate(CELL_TEXT) for c in body.locator("td, th").all()]
    for value in HOSTILE.values():
        assert visible(value) in cells
    text = body.locator(".text").all_inner_texts()
    assert any("<script>alert('cell')</script>" in t for t in text)
    assert any("⟦U+202E⟧" in t for t in text)
    node_text = engine.current.nodes[hostile.get_attribute("data-node")].get_content()
    sentences = 0
    for button in hostile.locator("button.span").all():  # every span of the hit, shown
        page.evaluate("document.getElementById('status').textContent = ''")
        button.click()
        expect(page.locator("#status")).to_have_text(re.compile("표시했습니다[.]$"))
        if button.get_attribute("data-kind") == "sentence":  # the sentence is highlighted
            start, end = int(button.get_attribute("data-start")), int(
                button.get_attribute("data-end"))
            mark = page.locator("#detail-body mark.cited")
            assert mark.count() == 1 and mark.text_content() == visible(node_text[start:end])
            sentences += 1
    assert sentences > 0
    assert page.evaluate("typeof window.alert") == "function"
    watch.clean(url)


def test_the_page_fits_a_phone(served: tuple[str, Any], browser: Any) -> None:
    url, _ = served
    page = browser.new_page()
    page.set_viewport_size({"width": 360, "height": 740})
    page.goto(url + "/")
    _ask(page, CELL_QUESTION)
    page.locator("#hits .hit button.span-cell").first.click()
    page.wait_for_selector("#detail-body .cited")
    assert page.evaluate("document.documentElement.scrollWidth") <= 360
    for sel in ("#query", "#retriever", "#top-k"):  # every control is labelled
        label = page.evaluate(f"document.querySelector('{sel}').labels.length")
        assert label == 1
