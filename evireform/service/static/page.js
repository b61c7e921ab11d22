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

function auth() {
  const key = $("key").value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

function headers() {
  return { "Content-Type": "application/json", ...auth() };
}

// the words a passage is highlighted by: the question's and the residual queries' that
// reached it, without the function words every text has
const STOP = new Set(("a an the of in on at to for from by with and or but is are was were be " +
  "been who whom whose what which when where why how does did do this that these those it " +
  "its as into than then there their they he she his her him we you your our i me my not " +
  "no can could will would should may might must has have had if so any all also").split(" "));
const WORD = /[\p{L}\p{N}_][\p{L}\p{N}_'’.-]*[\p{L}\p{N}_]|[\p{L}\p{N}_]/gu;

function termsOf(texts) {
  const out = new Set();
  for (const t of texts) {
    for (const m of String(t || "").matchAll(WORD)) {
      const w = m[0].toLowerCase();
      if (!STOP.has(w) && w.length > 1) out.add(w);
    }
  }
  return out;
}

function highlighted(cls, text, terms) {
  // the text as text nodes, each word of ``terms`` in a <mark>: never parsed as markup
  const box = el("div", cls);
  let last = 0;
  for (const m of String(text).matchAll(WORD)) {
    if (!terms.has(m[0].toLowerCase())) continue;
    if (m.index > last) box.append(document.createTextNode(text.slice(last, m.index)));
    box.append(el("mark", null, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) box.append(document.createTextNode(text.slice(last)));
  return box;
}

function reachedBy(trace) {
  // passage id -> the residual queries whose hits (dense or lexical) include it
  const out = new Map();
  (trace.hits || []).slice(1).forEach((h) => {
    for (const hit of [...(h.dense || []), ...(h.lexical || [])]) {
      const qs = out.get(hit.passage) || [];
      if (!qs.includes(h.query)) qs.push(h.query);
      out.set(hit.passage, qs);
    }
  });
  return out;
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
                 method: $("method").value, graph: true, answer: true };
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
  const top = Math.max(...res.passages.map((p) => p.score), 0);
  const reached = reachedBy(res.trace);
  showReply(res.answer);
  const list = $("passages");
  const own = new Set(res.trace.own_search || []);  // placed by the question's own search
  list.replaceChildren(...res.passages.map((p, i) => passageItem(
    p, i, top, termsOf([res.question, ...(reached.get(p.id) || [])]), own.has(p.id))));
  showTrace(res.trace);
  drawGraph(res.graph || { nodes: [], edges: [] });
}

// the answer above the passages (issue 82): an LLM's, or the best-matching sentence marked
// extractive, or "not found in these documents"; the passages it cites with their sentences
function showReply(a) {
  const box = $("reply");
  box.replaceChildren();
  if (!a) return;
  box.append(el("p", "text" + (a.found ? "" : " missing"), a.text));
  const how = a.kind === "llm" ? "the LLM's answer from the passages"
    : "extractive: the passages' sentence that best matches the question";
  const sim = a.similarity === null || a.similarity === undefined ? ""
    : `, best dense match ${a.similarity.toFixed(2)}`;
  box.append(el("p", "how", `${how}; ${Math.round(100 * a.confidence)}% of the ` +
                `question's words in the top passages${sim}`));
  if (a.cites.length) {
    const ul = el("ul", "cites");
    for (const c of a.cites) {
      const li = el("li");
      li.dataset.id = c.id;
      li.append(el("span", "cite", `${a.found ? "cites" : "closest"} [${c.id}] ${c.title}: `),
                el("span", null, c.sentence));
      ul.append(li);
    }
    box.append(ul);
  }
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

function passageItem(p, i, top, terms, own) {
  const li = el("li");
  li.dataset.id = p.id;
  const head = el("div", "head");
  head.append(el("span", "rank", `#${i + 1}`), el("span", "title", p.title || p.id),
              el("span", "score", `score ${p.score.toFixed(4)}`));
  li.append(head);
  const md = p.metadata || {};
  const where = [];
  if (md.source !== undefined) where.push(String(md.source));
  for (const k of ["section", "page", "slide", "row"]) {
    if (md[k] !== undefined && md[k] !== null) where.push(`${k} ${md[k]}`);
  }
  if (own) where.push("found by the question's own search");  // issue 85
  if (where.length) li.append(el("div", "source", where.join(" · ")));
  const twins = p.duplicates || [];
  if (twins.length) {  // the same text in other passages: shown once (issue 68)
    li.append(el("div", "source twins", "same text in " + twins.slice(0, 3).join(", ") +
                 (twins.length > 3 ? ` and ${twins.length - 3} more` : "")));
  }
  li.append(highlighted("text", p.text, terms || new Set()));
  const rest = Object.fromEntries(Object.entries(md).filter(([k]) =>
    !["source", "chunk", "title", "section", "page", "slide", "row"].includes(k)));
  if (Object.keys(rest).length) {
    const m = el("details", "meta");
    m.append(el("summary", null, "metadata"), el("code", null, clip(JSON.stringify(rest), 600)));
    li.append(m);
  }
  const parts = [["q", "question", p.from_question], ["r", "residual", p.from_residual],
                 ["p", "propagation", p.from_propagation]];
  const total = parts.reduce((s, x) => s + Math.max(0, x[2] || 0), 0);
  if (total > 0) {
    // the bar's length is the score against the top score; its parts split that length
    const bar = el("div", "parts");
    bar.title = "score against the top score; parts: from the question, the residual " +
                "queries, propagation";
    bar.style.width = (100 * Math.max(0, p.score) / (top || p.score || 1)).toFixed(2) + "%";
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
  const edgeList = $("edgelist");
  edgeList.replaceChildren();
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
    root.append(grp);
    // what carried each edge, as a list (labels on the curves collided): the only view
    // on a narrow screen, where the drawing hides
    const item = el("li", null, `#${s.rank} → #${t.rank} `);
    item.append(el("span", "kind-" + kind, e.kind), document.createTextNode(": " + e.via));
    edgeList.append(item);
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

// ---------------------------------------------------------------- documents
// One upload is at most UPLOAD_FILES files and about UPLOAD_BYTES bytes (the service's own
// caps are 100 files and 64 MiB); a larger folder goes in several, one generation each.
const UPLOAD_FILES = 100;
const UPLOAD_BYTES = 32 * 1024 * 1024;

function hidden(path) {
  return path.split("/").some((p) => p.startsWith("."));
}

// [{file, name}] from a FileList: a folder's files keep their path below it ("notes/a.md"),
// hidden files and folders (.git) are left out and counted.
function collect(list) {
  const out = [];
  let left = 0;
  for (const f of Array.from(list || [])) {
    if (!f || f.size === undefined) continue;
    const name = f.webkitRelativePath || f.name;
    if (hidden(name)) { left += 1; continue; }
    out.push({ file: f, name });
  }
  out.hidden = left;
  return out;
}

// Files and folders dropped on the panel: folders walked through their entries (a
// browser that gives no entries gives the files themselves).
async function collectDropped(dt) {
  const entries = Array.from(dt.items || []).map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry());
  if (!entries.length || entries.some((e) => !e)) return collect(dt.files);
  const out = [];
  out.hidden = 0;
  const fileOf = (entry) => new Promise((ok, bad) => entry.file(ok, bad));
  const children = (dir) => new Promise((ok, bad) => {
    const reader = dir.createReader();
    const all = [];
    const more = () => reader.readEntries((got) => {
      if (!got.length) { ok(all); return; }
      all.push(...got);
      more();
    }, bad);
    more();
  });
  const walk = async (entry) => {
    const name = entry.fullPath.replace(/^\/+/, "");
    if (hidden(name)) { out.hidden += 1; return; }
    if (entry.isDirectory) {
      for (const child of await children(entry)) await walk(child);
    } else {
      out.push({ file: await fileOf(entry), name });
    }
  };
  for (const e of entries) await walk(e);
  return out;
}

function batches(items) {
  const out = [];
  let cur = [], bytes = 0;
  for (const it of items) {
    if (cur.length && (cur.length >= UPLOAD_FILES || bytes + it.file.size > UPLOAD_BYTES)) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(it);
    bytes += it.file.size;
  }
  if (cur.length) out.push(cur);
  return out;
}

// POST one batch with the bytes sent shown as they go; resolves to {status, body}.
function send(batch, say) {
  return new Promise((ok, bad) => {
    const fd = new FormData();
    for (const it of batch) fd.append("files", it.file, it.name);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "documents");
    for (const [k, v] of Object.entries(auth())) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) say(`sending ${Math.floor(100 * e.loaded / e.total)}%`);
    };
    xhr.upload.onload = () => say("reading into the index");
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
      ok({ status: xhr.status, statusText: xhr.statusText, body });
    };
    xhr.onerror = () => bad(new Error("network error"));
    xhr.send(fd);
  });
}

let dropped = [];

// what the two pickers hold: files, and a folder's files with their paths
function chosen() {
  const a = collect($("files").files), b = collect($("folder").files);
  const out = a.concat(b);
  out.hidden = a.hidden + b.hidden;
  return out;
}

function ready(items) {
  const n = items.length;
  $("upstatus").textContent = `${n} file${n === 1 ? "" : "s"} ready: Add to the index` +
    (items.hidden ? ` (${items.hidden} hidden left out)` : "");
}

async function upload() {
  const files = dropped.length ? dropped : chosen();
  if (!files.length) { $("upstatus").textContent = "Choose or drop files first."; return; }
  const parts = batches(files);
  const results = [];
  let last = null;
  $("upload").disabled = true;
  try {
    for (let i = 0; i < parts.length; i++) {
      const batch = parts[i];
      const kb = Math.ceil(batch.reduce((a, it) => a + it.file.size, 0) / 1024);
      const head = `${files.length} file${files.length === 1 ? "" : "s"}` +
        (parts.length > 1 ? `, part ${i + 1} of ${parts.length}` : "") +
        ` (${kb.toLocaleString()} KB): `;
      const say = (what) => { $("upstatus").textContent = head + what + "…"; };
      say("sending");
      const r = await send(batch, say);
      if (r.status !== 200) {
        $("upstatus").textContent = `Error ${r.status}: ` +
          `${(r.body && r.body.error) || r.statusText}` +
          (results.length ? ` (${results.length} files done before it)` : "");
        break;
      }
      results.push(...r.body.files);
      last = r.body;
    }
    if (last) {
      const ok = results.filter((f) => f.status === "indexed").length;
      const status = `${ok} of ${results.length} indexed · generation ` +
        `${last.generation} · ${last.passages.toLocaleString()} passages`;
      if (results.length === files.length) $("upstatus").textContent = status;
    }
    $("uploads").replaceChildren(...results.map((f) => el("li", f.status,
      f.status === "indexed" ? `${f.file}: indexed, ${f.passages} passage` +
        `${f.passages === 1 ? "" : "s"} (${f.source})` : `${f.file}: skipped: ${f.reason}`)));
    dropped = [];
    $("files").value = "";
    $("folder").value = "";
    loadStats();
    loadSources();
  } catch (e) {
    $("upstatus").textContent = "The service did not answer: " + e.message;
  } finally {
    $("upload").disabled = false;
  }
}

async function loadSources() {
  const box = $("sources");
  try {
    const r = await fetch("sources", { headers: auth() });
    const out = await readJSON(r);
    if (!r.ok) {
      box.replaceChildren(el("li", "none", r.status === 401 ? "enter the API key under " +
        "Options to list the sources" : `Error ${r.status}: ${(out && out.error) || ""}`));
      return;
    }
    if (!out.sources.length) {
      box.replaceChildren(el("li", "none", "no sources: the index holds passages without " +
                                           "a source"));
      return;
    }
    box.replaceChildren(...out.sources.map((s) => {
      const li = el("li");
      li.dataset.source = s.source;
      const del = el("button", "del", "Delete");
      del.type = "button";
      del.addEventListener("click", () => removeSource(s.source, s.passages));
      li.append(el("span", "src", s.source), el("span", "n",
        ` ${s.passages} passage${s.passages === 1 ? "" : "s"} · ${s.title}`), del);
      return li;
    }));
  } catch (e) {
    box.replaceChildren(el("li", "none", "The service did not answer: " + e.message));
  }
}

async function removeSource(src, passages) {
  // a deletion cannot be undone: say what goes, and ask
  if (!window.confirm(`Delete ${src} and its ${passages} passage${passages === 1 ? "" : "s"} ` +
                      "from the index?")) return;
  $("upstatus").textContent = `Deleting ${src}…`;
  const r = await fetch("update", { method: "POST", headers: headers(),
    body: JSON.stringify({ delete_where: { source: src } }) });
  const out = await readJSON(r);
  $("upstatus").textContent = r.ok ? `Deleted ${src}: generation ${out.generation}, ` +
    `${out.passages.toLocaleString()} passages` : `Error ${r.status}: ${(out && out.error) || ""}`;
  loadStats();
  loadSources();
}

async function openPassage(ev) {
  if (ev) ev.preventDefault();
  const id = $("pid").value.trim();
  const box = $("passage");
  if (!id) return;
  const r = await fetch("passages/" + encodeURIComponent(id).replace(/%2F/g, "/"),
                        { headers: auth() });
  const p = await readJSON(r);
  if (!r.ok) {
    box.replaceChildren(el("p", "error", `Error ${r.status}: ${(p && p.error) || ""}`));
    return;
  }
  const md = p.metadata || {};
  box.replaceChildren(el("h3", null, p.title || p.id), el("div", "source", p.id +
    (md.section ? " · section " + md.section : "") + (md.page ? " · page " + md.page : "")),
    el("div", "text", p.text));
}

function initLibrary() {
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    dropped = await collectDropped(e.dataTransfer);
    ready(dropped);
  });
  for (const id of ["files", "folder"]) {
    $(id).addEventListener("change", () => {
      dropped = [];
      ready(chosen());
    });
  }
  $("upload").addEventListener("click", upload);
  $("openform").addEventListener("submit", openPassage);
  $("library").addEventListener("toggle", () => { if ($("library").open) loadSources(); });
}

function init() {
  initLibrary();
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
