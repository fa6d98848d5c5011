"""The service's pure rendering: tables from cell coordinates (the oracle: a grid filled from
the coordinates by hand, read back with ``html.parser``), untrusted spans clamped, text cut at
table blocks."""

from __future__ import annotations

import html.parser

from llama_index_car.serve._html import MAX_GRID_SLOTS, segments, table_html, visible


class _Grid(html.parser.HTMLParser):
    """The browser's placement of cells: each row's cells go to the next free columns."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: dict[tuple[int, int], str] = {}
        self.row = -1
        self.col = 0
        self.cell: tuple[int, int, int, int] | None = None
        self.text: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        a = dict(attrs)
        if tag == "tr":
            self.row, self.col = self.row + 1, 0
        elif tag in ("td", "th"):
            while (self.row, self.col) in self.taken:
                self.col += 1
            rs, cs = int(a.get("rowspan") or 1), int(a.get("colspan") or 1)
            self.cell, self.text = (self.row, self.col, rs, cs), []
            assert (int(a["data-row"] or -1), int(a["data-col"] or -1)) == (self.row, self.col)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            r, c, rs, cs = self.cell
            for i in range(r, r + rs):
                for j in range(c, c + cs):
                    self.taken[(i, j)] = "".join(self.text) if (i, j) == (r, c) else "↑"
            self.col = c + cs
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.text.append(data)


def _layout(table: str) -> _Grid:
    g = _Grid()
    g.feed(table)
    g.close()
    return g


def test_merged_cells_land_at_their_coordinates() -> None:
    # 구분 | 기준 (2 wide) / 규격 (2 high) | 길이 | 40m / 폭 | 3.0m ; (3, 2) missing
    cells = [(0, 0, 1, 1, "구분"), (0, 1, 1, 2, "기준"), (1, 0, 2, 1, "규격"),
             (1, 1, 1, 1, "길이"), (1, 2, 1, 1, "40m"), (2, 1, 1, 1, "폭"),
             (2, 2, 1, 1, "3.0m"), (3, 0, 1, 2, "비고")]
    g = _layout(table_html(cells, 0))
    for r, c, _, _, text in cells:
        assert g.taken[(r, c)] == text
    assert g.taken[(3, 2)] == ""  # an empty slot keeps the columns aligned
    assert len(g.taken) == 4 * 3


def test_document_text_is_escaped_and_controls_made_visible() -> None:
    evil = ['<script>alert(1)</script>', '<img src=x onerror="alert(2)">',
            '" onmouseover="x', "a\u202eb\u200bc", "&amp;"]
    g = _layout(table_html([(0, i, 1, 1, t) for i, t in enumerate(evil)], 3))
    assert g.tags == {"table", "tbody", "tr", "th"}
    assert [g.taken[(0, i)] for i in range(len(evil))] == [visible(t) for t in evil]
    assert visible("a\u202eb\u200bc") == "a⟦U+202E⟧b⟦U+200B⟧c"


def test_untrusted_spans_and_sparse_grids_are_bounded() -> None:
    out = table_html([(0, 0, 10**9, 10**9, "x"), (1, 1, 1, 1, "y")], 0)
    assert 'rowspan="2"' in out and 'colspan="2"' in out  # clamped to the rows/cols in use
    far = 10_000
    sparse = table_html([(0, 0, 1, 1, "a"), (far, far, 1, 1, "b")], 0)
    assert (far + 1) ** 2 > MAX_GRID_SLOTS and sparse.count("<td") + sparse.count("<th") == 2
    assert table_html([(-1, 0, 1, 1, "neg")], 0).count("neg") == 0


def test_segments_cut_text_at_table_blocks() -> None:
    text = "앞 문장.\n<table><tr><td>x</td></tr></table>\n가운데\n| a | b |\n뒤"
    a = text.index("<table>")
    b = text.index("</table>") + len("</table>")
    c, d = text.index("| a"), text.index("b |") + 3
    segs = segments(text, [(a, b), (c, d)], [4, 7])
    assert [(s["kind"], s.get("table")) for s in segs] == [
        ("text", None), ("table", 4), ("text", None), ("table", 7), ("text", None)]
    assert "".join(text[s["start"]:s["end"]] for s in segs) == text
    assert all(s["text"] == text[s["start"]:s["end"]] for s in segs if s["kind"] == "text")
    extra = segments("본문", [], [2])  # a table the text does not render comes last
    assert extra[-1] == {"kind": "table", "start": 2, "end": 2, "table": 2}
