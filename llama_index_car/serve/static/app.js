// llama-car serve: the page. No framework, no build step, no network beyond this origin.
// Document text reaches the page only through textContent, except the tables, which the
// server renders as HTML with every cell text escaped (and the CSP forbids inline script).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const INVISIBLE = /[\u200b-\u200f\u202a-\u202e\u2060-\u2069\u061c\ufeff\u00ad]/g;
  const KIND = { sentence: "문장", row: "표 행", cell: "표 셀", section: "절" };
  const CHANNEL = { dense: "밀집", lexical: "BM25", feedback: "피드백" };
  let sources = new Map(); // answer source number -> where it is

  // bidi controls and other invisible characters shown as marks, never applied
  function visible(text) {
    return String(text == null ? "" : text).replace(INVISIBLE, (ch) =>
      "⟦U+" + ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟧");
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" ||
               k === "id" || k === "tabindex" || k === "type" || k === "href") node.setAttribute(k, String(v));
      else node[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(typeof c === "string" ? document.createTextNode(visible(c)) : c);
    }
    return node;
  }

  function status(text) { $("status").textContent = text; }

  function headers() {
    const h = { "content-type": "application/json" };
    const key = sessionStorage.getItem("llama-car-key");
    if (key) h.authorization = "Bearer " + key;
    return h;
  }

  async function call(path, body) {
    const init = body === undefined ? { headers: headers() }
      : { method: "POST", headers: headers(), body: JSON.stringify(body) };
    const res = await fetch(path, init);
    showGeneration(res.headers.get("x-index-generation"));
    if (res.status === 401) {
      $("key-row").hidden = false;
      $("api-key").focus();
      throw new Error("API 키가 필요합니다. 키를 입력하고 다시 시도하세요.");
    }
    if (!res.ok) {
      let msg = res.status + "";
      try { const e = await res.json(); msg = e.error.code + ": " + e.error.message; } catch (_) {}
      throw new Error(msg);
    }
    return res;
  }

  function showGeneration(gen) {
    if (gen) $("generation").textContent = "색인 세대 " + gen.slice(0, 12);
  }

  function request() {
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem("llama-car-key", key);
    return {
      query: $("query").value,
      retriever: $("retriever").value,
      top_k: Math.max(1, Math.min(50, parseInt($("top-k").value, 10) || 5)),
    };
  }

  function where(span) {
    if (span.kind === "sentence" || span.kind === "section") return KIND[span.kind] || span.kind;
    const t = "표 " + span.table_index;
    if (span.kind === "row") return t + " · " + span.row + "행";
    return t + " · (" + span.row + ", " + span.col + ")";
  }

  function channelText(channels) {
    return Object.keys(channels).sort().map((name) => {
      const r = channels[name].rank;
      return (CHANNEL[name] || name) + " " + (r ? r + "위" : "—");
    }).join(" · ");
  }

  function renderHits(hits) {
    const list = $("hits");
    list.replaceChildren();
    if (!hits.length) { list.append(el("li", { class: "empty" }, "결과가 없습니다.")); return; }
    for (const h of hits) {
      const spans = el("ul", { class: "spans", "aria-label": "기준 후보" });
      for (const s of h.spans) {
        const label = where(s) + (s.kind === "cell" && s.header ? " · " + s.header : "");
        const button = el("button", { type: "button", class: "span span-" + s.kind,
          "data-node": h.node_id, "data-kind": s.kind, "data-table": s.table_index,
          "data-row": s.row, "data-col": s.col, "data-start": s.start, "data-end": s.end },
          el("span", { class: "tag" }, label), " ", s.text || "",
          el("span", { class: "score" }, " " + (s.score == null ? "" : s.score.toFixed(3))));
        button.addEventListener("click", () => show(h.node_id, s));
        spans.append(el("li", null, button));
      }
      const open = el("button", { type: "button", class: "link" }, "절 전체 보기");
      open.addEventListener("click", () => show(h.node_id, null));
      list.append(el("li", { class: "hit", "data-node": h.node_id },
        el("div", { class: "hit-head" },
          el("span", { class: "title" }, h.section_title || "(제목 없음)"),
          el("span", { class: "file" }, h.file)),
        el("div", { class: "meta" },
          "점수 " + (h.score == null ? "—" : h.score.toFixed(4)),
          el("span", { class: "channels" }, channelText(h.channels))),
        spans, open));
    }
  }

  async function search(event) {
    if (event) event.preventDefault();
    const body = request();
    if (!body.query.trim()) { status("질문을 입력하세요."); return; }
    status("검색 중…");
    $("answer").hidden = true;
    try {
      const res = await call("/v1/retrieve", body);
      const data = await res.json();
      renderHits(data.hits);
      status(data.hits.length + "건을 찾았습니다.");
    } catch (e) { status("오류: " + e.message); }
  }

  // ---------------------------------------------------------------- the section view
  function textWithMark(text, offset, span) {
    const frag = document.createDocumentFragment();
    if (span && span.kind !== "row" && span.kind !== "cell" && span.start != null &&
        span.start < offset + text.length && span.end > offset) {
      const a = Math.max(0, span.start - offset), b = Math.min(text.length, span.end - offset);
      frag.append(visible(text.slice(0, a)));
      frag.append(el("mark", { class: "cited", id: "cited", tabindex: "-1" }, text.slice(a, b)));
      frag.append(visible(text.slice(b)));
    } else {
      frag.append(visible(text));
    }
    return frag;
  }

  function tableElement(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html; // server-escaped cell text; only table markup
    return tpl.content.querySelector("table");
  }

  function attr(node, name) { return parseInt(node.getAttribute(name), 10); }

  function markTable(table, span) {
    const r = span.row, c = span.col;
    const cells = Array.from(table.querySelectorAll("[data-row][data-col-span]"));
    let cited = [];
    if (span.kind === "cell") {
      cited = cells.filter((n) => attr(n, "data-row") === r && attr(n, "data-col") === c);
    } else {
      cited = cells.filter((n) => attr(n, "data-row") === r);
    }
    for (const n of cited) {
      n.classList.add("cited");
      n.setAttribute("aria-current", "true");
      n.prepend(el("span", { class: "sr-only" }, "인용된 셀: "));
    }
    if (span.kind !== "cell" || !cited.length) return cited[0] || null;
    const cs = attr(cited[0], "data-col-span");
    for (const n of cells) {
      const nr = attr(n, "data-row"), nc = attr(n, "data-col");
      const nrs = attr(n, "data-row-span"), ncs = attr(n, "data-col-span");
      if (n === cited[0]) continue;
      if (nr === 0 && r > 0 && nc < c + cs && c < nc + ncs) {
        n.classList.add("header-col");
        n.prepend(el("span", { class: "sr-only" }, "열 머리글: "));
      } else if (nc < Math.min(c, 2) && nr <= r && r < nr + nrs) {
        n.classList.add("header-row");
        n.prepend(el("span", { class: "sr-only" }, "행 머리글: "));
      }
    }
    return cited[0];
  }

  async function show(nodeId, span) {
    status("조항을 불러오는 중…");
    let node;
    try {
      node = await (await call("/v1/nodes/" + encodeURIComponent(nodeId))).json();
    } catch (e) { status("오류: " + e.message); return; }
    const body = $("detail-body");
    body.replaceChildren();
    $("detail-where").textContent = visible([node.file, node.heading_path || node.section_title]
      .filter(Boolean).join(" · "));
    const tables = new Map(node.tables.map((t) => [t.table, t]));
    let focus = null;
    for (const seg of node.segments) {
      if (seg.kind === "text") {
        const p = el("div", { class: "text" });
        p.append(textWithMark(seg.text, seg.start, span));
        body.append(p);
        focus = focus || p.querySelector("mark");
        continue;
      }
      const t = tables.get(seg.table);
      if (!t) continue;
      const table = tableElement(t.html);
      if (!table) continue;
      table.setAttribute("aria-label", "표 " + t.table);
      const cited = span && span.table_index === t.table ? markTable(table, span) : null;
      if (cited) { cited.setAttribute("tabindex", "-1"); cited.id = "cited"; focus = cited; }
      body.append(el("div", { class: "table-wrap", role: "region", "aria-label": "표 " + t.table,
        tabindex: "0" }, table));
    }
    status(span ? where(span) + "을(를) 표시했습니다." : "절을 표시했습니다.");
    (focus || $("detail-title")).focus();
    if (focus && focus.scrollIntoView) focus.scrollIntoView({ block: "center" });
  }

  // ---------------------------------------------------------------- answers
  const CITE = /\[(\d{1,3}(?:\s*[,\-–]\s*\d{1,3})*)\]/g;

  function numbers(group) {
    const out = [];
    for (const part of group.split(",")) {
      const m = part.trim().match(/^(\d+)\s*[-–]\s*(\d+)$/);
      if (m) { for (let i = +m[1]; i <= +m[2] && i - +m[1] < 50; i++) out.push(i); }
      else if (part.trim()) out.push(+part.trim());
    }
    return out;
  }

  function renderAnswer(text) {
    const box = $("answer-text");
    box.replaceChildren();
    let last = 0;
    for (const m of text.matchAll(CITE)) {
      box.append(visible(text.slice(last, m.index)));
      box.append("[");
      numbers(m[1]).forEach((n, i) => {
        if (i) box.append(", ");
        const src = sources.get(n);
        if (!src) { box.append(String(n)); return; }
        const a = el("a", { href: "#cite-" + n, class: "cite", "data-source": n,
          "aria-label": "출처 " + n + ": " + where(src) }, String(n));
        a.addEventListener("click", (e) => { e.preventDefault(); show(src.node_id, src); });
        box.append(a);
      });
      box.append("]");
      last = m.index + m[0].length;
    }
    box.append(visible(text.slice(last)));
  }

  function sourceOf(node) {
    const m = node.metadata || {};
    return { node_id: m.parent_node_id, kind: m.kind, table_index: m.table_index,
      row: m.row, col: m.col, start: m.span_start, end: m.span_end, header: m.header };
  }

  async function answer() {
    const body = request();
    if (!body.query.trim()) { status("질문을 입력하세요."); return; }
    body.stream = true;
    status("답변을 만드는 중…");
    $("answer").hidden = false;
    sources = new Map();
    let text = "";
    renderAnswer("");
    try {
      const res = await call("/v1/answer", body);
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const line = block.split("\n").find((l) => l.startsWith("data: "));
          if (!line) continue;
          const event = JSON.parse(line.slice(6));
          if (event.type === "delta") { text += event.data; renderAnswer(text); }
          else if (event.type === "sources") {
            event.data.nodes.forEach((n, i) => sources.set(
              (n.metadata && n.metadata.source_number) || i + 1, sourceOf(n)));
            renderAnswer(text);
          } else if (event.type === "error") { throw new Error(event.data.message); }
          else if (event.type === "done") {
            status("답변 완료: 인용 " + event.data.citations.length + "건" +
              (event.data.fallback ? " (검색 결과만으로 답함)" : ""));
          }
        }
      }
    } catch (e) { status("오류: " + e.message); }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("ask").addEventListener("submit", search);
    $("answer-button").addEventListener("click", () => { search(null).then(answer); });
    $("query").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); search(null); }
    });
    fetch("/readyz").then((r) => { showGeneration(r.headers.get("x-index-generation")); });
  });
})();
