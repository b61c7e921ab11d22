// The search page of `evireform serve`: asks POST /query and draws its answer.  Every value
// from the service is set as text (textContent / SVG text nodes), never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const KEY = "evireform.key";
const GRAPH_MAX = 15;  // nodes drawn; the rest are listed below the graph
const KIND_COLOR = { query: "#c2571a", entity: "#2f8a4a", dependency: "#7a4fb0",
                     chain: "#1f5fa8" };

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function clip(s, n) {
  s = String(s ?? "");
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text || "";
  s.classList.toggle("error", !!isError);
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function readJSON(resp) {
  try { return await resp.json(); } catch (e) { return null; }
}

async function loadStats() {
  try {
    const r = await fetch("health");
    const h = await readJSON(r);
    if (h && h.status === "ok" && h.index) {
      const i = h.index;
      $("stats").textContent = `${i.passages.toLocaleString()} passages · ` +
        `${i.propositions.toLocaleString()} propositions · embedder ${i.embedder} · ` +
        `generation ${i.generation}`;
    } else {
      $("stats").textContent = "index unavailable: " + ((h && h.error) || r.status);
    }
  } catch (e) {
    $("stats").textContent = "the service does not answer";
  }
}

async function loadSchema() {
  // the methods and the largest k, as the service publishes them
  try {
    const doc = await readJSON(await fetch("openapi.json"));
    const props = doc.components.schemas.QueryIn.properties;
    const m = props.method;
    const methods = m.enum || (m.anyOf || []).flatMap((x) => x.enum || []);
    if (methods.length) {
      const sel = $("method");
      const keep = sel.value;
      sel.replaceChildren(...methods.map((v) => {
        const o = el("option", null, v);
        o.value = v;
        return o;
      }));
      sel.value = methods.includes(keep) ? keep : (m.default || methods[0]);
    }
    if (props.k && props.k.maximum) $("k").max = props.k.maximum;
  } catch (e) { /* the defaults in the page stay */ }
}

function request() {
  const body = { question: $("question").value, k: Number($("k").value) || 5,
                 method: $("method").value, graph: true };
  const ns = $("namespace").value.trim();
  if (ns) body.namespace = ns;
  const f = $("filter").value.trim();
  if (f) {
    try { body.filter = JSON.parse(f); } catch (e) {
      throw new Error("the filter is not valid JSON: " + e.message);
    }
  }
  return body;
}

async function ask(ev) {
  if (ev) ev.preventDefault();
  const q = $("question").value;
  if (!q.trim()) { setStatus("Type a question first.", true); return; }
  let body;
  try { body = request(); } catch (e) { setStatus(e.message, true); return; }
  const url = new URL(location.href);
  url.searchParams.set("q", q);
  history.replaceState(null, "", url);
  $("go").disabled = true;
  setStatus("Searching…");
  try {
    const r = await fetch("query", { method: "POST", headers: headers(),
                                     body: JSON.stringify(body) });
    const out = await readJSON(r);
    if (r.status === 401) {
      $("options").open = true;
      $("key").focus();
      setStatus("This service needs an API key: enter it under Options.", true);
      return;
    }
    if (!r.ok) {
      const wait = r.headers.get("Retry-After");
      setStatus(`Error ${r.status}: ${(out && out.error) || r.statusText}` +
                (wait ? ` (try again in ${wait} s)` : ""), true);
      return;
    }
    setStatus("");
    show(out);
  } catch (e) {
    setStatus("The service did not answer: " + e.message, true);
  } finally {
    $("go").disabled = false;
  }
}

function show(res) {
  $("answer").hidden = false;
  const n = res.passages.length;
  $("summary").textContent = `${n} passage${n === 1 ? "" : "s"} for “${res.question}” · ` +
    `${res.trace.method} · ${res.took_ms} ms · generation ${res.generation}`;
  showTrace(res.trace);
  drawGraph(res.graph || { nodes: [], edges: [] });
  const list = $("passages");
  list.replaceChildren(...res.passages.map(passageItem));
}

function showTrace(trace) {
  const box = $("trace");
  box.replaceChildren();
  const lists = [["residual_queries", "Residual queries (the bridges the first passages revealed)"],
                 ["queries", "Queries"], ["forward", "Forward passages"],
                 ["backward", "Backward passages"], ["role_events", "LLM role events"]];
  for (const [field, label] of lists) {
    const v = trace[field];
    if (!Array.isArray(v)) continue;
    if (field === "role_events" && !v.length) continue;
    box.append(el("h2", null, label));
    if (!v.length) {
      box.append(el("p", "none", field === "residual_queries"
        ? "none: the question's first passages offered no bridge" : "none"));
      continue;
    }
    const ul = el("ul", field === "residual_queries" ? "residual" : null);
    for (const item of v) ul.append(el("li", null, Array.isArray(item) ? item.join(" → ") : item));
    box.append(ul);
  }
  if (Array.isArray(trace.hits) && trace.hits.length) {
    // dense and lexical together: what each query reached by its embedding and by BM25
    box.append(el("h2", null, "What each query reached (dense · lexical)"));
    const ul = el("ul", "hits");
    const fmt = (hs) => hs.length
      ? hs.map((h) => `${h.passage} (${Number(h.score).toFixed(3)})`).join(", ") : "nothing";
    for (const h of trace.hits) {
      const li = el("li", null, `${h.query}: `);
      li.append(el("span", "dense", "dense " + fmt(h.dense)), " · ",
                el("span", "lexical", "lexical " + fmt(h.lexical)));
      ul.append(li);
    }
    box.append(ul);
  }
  if (trace.score) box.append(el("p", "source", trace.score));
  const t = trace.timings_ms || {};
  if (Object.keys(t).length) {
    box.append(el("p", "source timings", "Stages (ms): " + Object.entries(t)
      .map(([k, v]) => `${k} ${Number(v).toFixed(1)}`).join(" · ")));
  }
  const d = el("details");
  d.append(el("summary", null, "Full trace (JSON)"));
  d.append(el("pre", null, JSON.stringify(trace, null, 2)));
  box.append(d);
}

function passageItem(p, i) {
  const li = el("li");
  li.dataset.id = p.id;
  const head = el("div", "head");
  head.append(el("span", "rank", `#${i + 1}`), el("span", "title", p.title || p.id),
              el("span", "score", `score ${p.score.toFixed(4)}`));
  li.append(head);
  const md = p.metadata || {};
  if (md.source !== undefined) li.append(el("div", "source", `source: ${md.source}`));
  const rest = Object.fromEntries(Object.entries(md).filter(([k]) => k !== "source"));
  if (Object.keys(rest).length) {
    const m = el("div", "meta", "metadata: ");
    m.append(el("code", null, clip(JSON.stringify(rest), 300)));
    li.append(m);
  }
  li.append(el("div", "text", p.text));
  const parts = [["q", "question", p.from_question], ["r", "residual", p.from_residual],
                 ["p", "propagation", p.from_propagation]];
  const total = parts.reduce((s, x) => s + Math.max(0, x[2] || 0), 0);
  if (total > 0) {
    const bar = el("div", "parts");
    bar.title = "score parts: from the question, the residual queries, propagation";
    for (const [cls, , v] of parts) {
      const seg = el("span", cls);
      seg.style.width = (100 * Math.max(0, v || 0) / total).toFixed(2) + "%";
      bar.append(seg);
    }
    li.append(bar, el("div", "partsline", parts.map(([, name, v]) =>
      `${name} ${(v || 0).toFixed(4)}`).join(" · ")));
  }
  return li;
}

function drawGraph(g) {
  const root = $("graph");
  root.replaceChildren();
  const nodes = g.nodes.slice(0, GRAPH_MAX);
  const W = 760, H = nodes.length > 6 ? 460 : 340, cx = W / 2, cy = H / 2;
  const R = Math.min(W * 0.3, H / 2 - 40);
  root.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const defs = svg("defs");
  for (const [kind, color] of Object.entries({ ...KIND_COLOR, other: "#6b7580" })) {
    const m = svg("marker", { id: "arrow-" + kind, viewBox: "0 0 10 10", refX: 10, refY: 5,
                              markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: color }));
    defs.append(m);
  }
  root.append(defs);
  const pos = new Map();
  nodes.forEach((n, i) => {
    const a = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(nodes.length, 1);
    pos.set(n.id, { x: cx + R * Math.cos(a), y: cy + R * Math.sin(a), a, rank: i + 1, n });
  });
  const r = 15;
  const kinds = new Set();
  for (const e of g.edges) {
    const s = pos.get(e.src), t = pos.get(e.dst);
    if (!s || !t || s === t) continue;
    const kind = KIND_COLOR[e.kind] ? e.kind : "other";
    kinds.add(kind);
    const dx = t.x - s.x, dy = t.y - s.y, len = Math.hypot(dx, dy) || 1;
    const ux = dx / len, uy = dy / len;
    // a gentle curve, so that edges both ways between two passages stay apart
    const mx = (s.x + t.x) / 2 - uy * 28, my = (s.y + t.y) / 2 + ux * 28;
    const x1 = s.x + ux * r, y1 = s.y + uy * r, x2 = t.x - ux * (r + 2), y2 = t.y - uy * (r + 2);
    const grp = svg("g", { class: "edge", "data-kind": e.kind });
    grp.append(svg("title", {}, `#${s.rank} → #${t.rank} via ${e.kind}: ${e.via}`));
    grp.append(svg("path", { d: `M${x1},${y1} Q${mx},${my} ${x2},${y2}`,
                             stroke: KIND_COLOR[kind] || "#6b7580",
                             "marker-end": `url(#arrow-${kind})` }));
    // the label at the curve's midpoint
    grp.append(svg("text", { x: (x1 + 2 * mx + x2) / 4, y: (y1 + 2 * my + y2) / 4 - 3,
                             "text-anchor": "middle" }, clip(e.via, 28)));
    root.append(grp);
  }
  for (const p of pos.values()) {
    const grp = svg("g", { class: "node", "data-id": p.n.id });
    grp.append(svg("title", {}, `#${p.rank} ${p.n.title || p.n.id}`));
    grp.append(svg("circle", { cx: p.x, cy: p.y, r }));
    grp.append(svg("text", { class: "rank", x: p.x, y: p.y + 4, "text-anchor": "middle" },
                   p.rank));
    const out = Math.cos(p.a) >= 0;
    const lx = p.x + Math.cos(p.a) * (r + 6), ly = p.y + Math.sin(p.a) * (r + 6) + 4;
    grp.append(svg("text", { x: lx, y: ly, "text-anchor": Math.abs(Math.cos(p.a)) < 0.2
                                 ? "middle" : (out ? "start" : "end") },
                   clip(p.n.title || p.n.id, 30)));
    root.append(grp);
  }
  const legend = $("legend");
  legend.replaceChildren();
  if (!g.edges.length) {
    legend.append(el("span", null, "No edges: every passage was reached by the question alone."));
  }
  for (const k of kinds) {
    const s = el("span");
    const sw = el("i");
    sw.style.background = KIND_COLOR[k] || "#6b7580";
    s.append(sw, document.createTextNode(k === "query" ? "residual query (via its text)"
      : k === "entity" ? "shared entity" : k));
    legend.append(s);
  }
  if (g.nodes.length > GRAPH_MAX) {
    legend.append(el("span", null, `showing the top ${GRAPH_MAX} of ${g.nodes.length}`));
  }
}

function init() {
  const stored = sessionStorage.getItem(KEY);
  if (stored) $("key").value = stored;
  $("key").addEventListener("change", () => {
    const v = $("key").value.trim();
    if (v) sessionStorage.setItem(KEY, v); else sessionStorage.removeItem(KEY);
  });
  $("ask").addEventListener("submit", ask);
  loadStats();
  const q = new URL(location.href).searchParams.get("q");
  loadSchema().then(() => {
    if (q) { $("question").value = q; ask(); }
  });
}

document.addEventListener("DOMContentLoaded", init);
