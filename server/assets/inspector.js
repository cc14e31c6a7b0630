// convstore inspector: reads the server's JSON API and draws it. No
// dependencies, no build step. Every text from the database is set with
// textContent, never as HTML.
"use strict";

const TOKEN_KEY = "convstore-token";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child != null) node.append(child);
  }
  return node;
}

function fmt(n) {
  return n == null ? "…" : Number(n).toLocaleString("en-US");
}

// A request for data: the token, if the user gave one; a 401 shows the
// token box and waits for it.
async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(path, { headers });
  if (response.status === 401) {
    if (token) sessionStorage.removeItem(TOKEN_KEY);
    showTokenBox(token ? "The token was refused; give another." : null);
    throw new Error(token ? "the token was refused" : "this server needs a token");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw new Error(message);
  }
  return body;
}

function showTokenBox(message) {
  const box = document.getElementById("token-box");
  if (!box || !box.hidden) return;
  box.hidden = false;
  if (message) document.getElementById("token-note").textContent = message;
  box.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
    location.reload();
  });
}

// Runs `tasks` (functions returning promises) at most `width` at a time.
async function pooled(tasks, width) {
  let next = 0;
  async function worker() {
    while (next < tasks.length) {
      const task = tasks[next++];
      try { await task(); } catch (e) { /* shown by the task */ }
    }
  }
  await Promise.all(Array.from({ length: width }, worker));
}

// ---- the list of conversations --------------------------------------

async function listPage() {
  const tbody = document.querySelector("#conversations tbody");
  const status = document.getElementById("status");
  const more = document.getElementById("more");
  const filter = document.getElementById("filter");
  let after = null;
  let generation = 0;
  const names = new Map();

  async function load(reset) {
    const mine = reset ? ++generation : generation;
    if (reset) { tbody.textContent = ""; after = null; }
    const params = new URLSearchParams({ limit: "50" });
    if (filter.value) params.set("prefix", filter.value);
    if (after) params.set("after", after);
    status.textContent = "Loading…";
    let page;
    try {
      page = await api("/v1/conversations?" + params);
    } catch (e) {
      status.textContent = "error: " + e.message;
      return;
    }
    if (mine !== generation) return;
    after = page.next;
    more.hidden = !page.next;
    const rows = page.conversations.map(addRow);
    for (const link of tbody.querySelectorAll("a.parent")) {
      const name = names.get(link.dataset.parent);
      if (name) link.textContent = name;
    }
    const shown = tbody.rows.length;
    status.textContent = shown === 0
      ? (filter.value ? "No conversation's name starts with that." : "No conversations yet.")
      : `${fmt(shown)} conversation${shown === 1 ? "" : "s"}${page.next ? " (more below)" : ""}`;
    // Tokens and last activity take a pass over each log: two at a time.
    await pooled(rows.map((row) => () => fillRow(row)), 2);
  }

  function addRow(c) {
    const label = c.name || "(unnamed)";
    const cells = {
      tokens: el("td", { class: "num", text: "…" }),
      projected: el("td", { class: "num", text: "…" }),
      last: el("td", { text: "…" }),
    };
    const lineage = el("td");
    names.set(c.id, label);
    if (c.parent) {
      const link = el("a", { href: "/c/" + c.parent, class: "parent", "data-parent": c.parent, text: c.parent.slice(0, 12) });
      lineage.append("fork of ", link);
    }
    const tr = el("tr", { "data-id": c.id },
      el("td", {}, el("a", { href: "/c/" + c.id, class: c.name ? "" : "unnamed", text: label })),
      el("td", { class: "mono", text: c.id.slice(0, 12) }),
      el("td", { class: "num", text: fmt(c.events) }),
      el("td", { class: "num", text: fmt(c.turns) }),
      cells.tokens, cells.projected, cells.last, lineage);
    tbody.append(tr);
    return { id: c.id, cells };
  }

  async function fillRow(row) {
    try {
      const t = await api(`/v1/conversations/${row.id}/timeline?buckets=1`);
      row.cells.tokens.textContent = fmt(t.raw_tokens);
      row.cells.projected.textContent = fmt(t.projected_tokens);
      row.cells.last.textContent = t.last_activity ? t.last_activity.replace("T", " ").slice(0, 19) : "-";
    } catch (e) {
      row.cells.last.textContent = "error: " + e.message;
    }
  }

  let timer = null;
  filter.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => load(true), 200);
  });
  more.addEventListener("click", () => load(false));
  document.getElementById("search-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const q = document.getElementById("search").value.trim();
    const box = document.getElementById("search-results");
    const list = document.getElementById("hits");
    list.textContent = "";
    if (!q) { box.hidden = true; return; }
    box.hidden = false;
    try {
      const hits = await api("/v1/search?" + new URLSearchParams({ q, limit: "20" }));
      if (hits.length === 0) list.append(el("li", { text: "Nothing found." }));
      for (const h of hits) {
        const where = `${h.name || h.conversation.slice(0, 12)} · seq ${h.seq} · turn ${h.turn} · ${h.kind} · ${h.view}`;
        list.append(el("li", {},
          el("a", { href: `/c/${h.conversation}?from=${h.seq}`, text: where }),
          el("div", { class: "snippet", text: h.snippet })));
      }
    } catch (e) {
      list.append(el("li", { text: "error: " + e.message }));
    }
  });
  await load(true);
}

// ---- one conversation ------------------------------------------------

// Compaction bars: blues and slates, none of the legend's colours.
const COLORS = ["#1c7ed6", "#364fc7", "#495057", "#1864ab", "#5f3dc4", "#748ffc", "#343a40", "#4263eb", "#91a7ff", "#868e96"];
const BAND = { summary: "#7b5cd6", reasoning: "#d08a1e", tool_calls: "#2a8f83" };

function colorOf(seq) {
  return COLORS[Math.abs(seq * 2654435761 | 0) % COLORS.length];
}

function eventText(e) {
  switch (e.type) {
    case "user": case "assistant": case "reasoning": case "system": return e.text;
    case "tool_call": return `${e.name} ${JSON.stringify(e.arguments)}`;
    case "tool_result": return (e.is_error ? "[error] " : "") + e.content;
    case "turn_start": return "── turn start ──";
    case "config": return JSON.stringify(e.delta);
    case "compaction": {
      const parts = [`turns ${e.from_turn}..${e.to_turn}`];
      for (const k of ["summary", "reasoning", "tool_calls", "revert", "profile"]) {
        if (e[k] != null) parts.push(`${k}=${typeof e[k] === "string" ? e[k] : JSON.stringify(e[k])}`);
      }
      return parts.join(" ");
    }
    default: return JSON.stringify(e);
  }
}

function eventNode(e, onSummary, viewSide) {
  const text = eventText(e) || "";
  const node = el("div", { class: "event" }, el("span", { class: "kind", text: e.type }));
  if (e.summary_of && onSummary) {
    node.append(el("button", {
      class: "summary-link", type: "button",
      text: `summary of turns ${e.summary_of[0]}..${e.summary_of[1]}`,
      onclick: () => onSummary(e.summary_of[0], e.summary_of[1]),
    }), " ");
  }
  const recall = viewSide ? text.match(/\(recall (\d+(?:\.\.\d+)?)\)/) : null;
  if (recall) node.append(el("span", { class: "provenance", text: "recall " + recall[1] }));
  if (text.length > 600) {
    node.append(el("details", {}, el("summary", { class: "text", text: text.slice(0, 300) + " …" }),
      el("div", { class: "text", text })));
  } else {
    node.append(el("span", { class: "text", text }));
  }
  return node;
}

async function conversationPage() {
  const conv = decodeURIComponent(location.pathname.slice("/c/".length));
  const params = new URLSearchParams(location.search);
  // Values from the address: whole numbers, else ignored.
  const whole = (name) => (/^\d{1,15}$/.test(params.get(name) || "") ? Number(params.get(name)) : null);
  const state = {
    asOf: whole("as_of"),
    from: whole("from"),
    turn: whole("turn"),
    info: null, timeline: null, page: null,
  };
  const base = `/v1/conversations/${encodeURIComponent(conv)}`;
  const asOfParam = () => (state.asOf == null ? "" : `&as_of=${state.asOf}`);

  function remember() {
    const p = new URLSearchParams();
    if (state.asOf != null) p.set("as_of", state.asOf);
    if (state.page) p.set("from", state.page.from);
    history.replaceState(null, "", location.pathname + (p.toString() ? "?" + p : ""));
  }

  let info;
  try {
    info = await api(base);
  } catch (e) {
    document.getElementById("title").textContent = "error: " + e.message;
    document.querySelector("main").textContent = "error: " + e.message;
    return;
  }
  state.info = info;
  if (info.events === 0) {
    for (const section of document.querySelectorAll(".asof, .timeline, .side-by-side")) section.hidden = true;
    document.getElementById("lineage").textContent = "This conversation has no records yet.";
  }
  if (state.asOf != null && state.asOf >= info.events - 1) state.asOf = null;
  if (state.asOf != null && state.from != null) state.from = Math.min(state.from, state.asOf);
  document.title = `${info.name || info.id.slice(0, 12)} · convstore`;
  document.getElementById("title").textContent = info.name || info.id;
  const facts = document.getElementById("facts");
  for (const [k, v] of [["id", info.id], ["events", fmt(info.events)], ["turns", fmt(info.turns)],
    ["created", info.created], ["head", info.head.slice(0, 16) + "…"]]) {
    facts.append(el("dt", { text: k }), el("dd", { class: k === "id" || k === "head" ? "mono" : "", text: v }));
  }
  const lineage = document.getElementById("lineage");
  if (info.parent) {
    const parent = info.lineage.find((l) => l.id === info.parent) || { id: info.parent };
    const own = info.lineage[0];
    lineage.append("A fork of ",
      el("a", { href: `/c/${info.parent}?from=${Math.max(0, (own.shared || 1) - 1)}`, text: parent.name || info.parent.slice(0, 12) }),
      `, sharing its records 0..${(own.shared || 1) - 1} (the fork point).`);
  }
  const range = document.getElementById("asof-range");
  const seqInput = document.getElementById("asof-seq");
  const note = document.getElementById("asof-note");
  const last = Math.max(0, info.events - 1);
  range.max = String(last);
  seqInput.max = String(last);
  range.value = String(state.asOf ?? last);
  seqInput.value = String(state.asOf ?? last);
  function setAsOf(value) {
    state.asOf = value == null || value >= last ? null : Math.max(0, Math.min(last, value));
    range.value = String(state.asOf ?? last);
    seqInput.value = String(state.asOf ?? last);
    note.textContent = state.asOf == null ? "the view as it is now" : `the view as it was after record ${state.asOf}`;
    refresh();
  }
  let slide = null;
  range.addEventListener("input", () => {
    clearTimeout(slide);
    seqInput.value = range.value;
    slide = setTimeout(() => setAsOf(Number(range.value)), 250);
  });
  seqInput.addEventListener("change", () => setAsOf(Number(seqInput.value)));
  document.getElementById("asof-latest").addEventListener("click", () => setAsOf(null));
  note.textContent = state.asOf == null ? "the view as it is now" : `the view as it was after record ${state.asOf}`;

  const timelineCanvas = document.getElementById("timeline");
  const tokensCanvas = document.getElementById("tokens");
  const tip = document.getElementById("timeline-tip");
  let layout = null;

  let timelineAsked = 0;
  async function loadTimeline() {
    const mine = ++timelineAsked;
    const width = Math.max(200, Math.floor(timelineCanvas.clientWidth || 1200));
    const t = await api(`${base}/timeline?buckets=${Math.min(width, 4000)}${asOfParam()}`);
    if (mine !== timelineAsked) return; // a newer one was asked for
    state.timeline = t;
    layout = drawTimeline(timelineCanvas, t);
    drawTokens(tokensCanvas, t);
    document.getElementById("tokens-note").textContent =
      `raw ${fmt(t.raw_tokens)} tokens, projected ${fmt(t.projected_tokens)} (four characters a token); ` +
      (t.bucket_turns > 1 ? `each bar is ${fmt(t.bucket_turns)} turns` : "each bar is a turn");
    fillCompactions(t);
  }

  function fillCompactions(t) {
    const tbody = document.querySelector("#compactions tbody");
    tbody.textContent = "";
    document.getElementById("compactions-title").textContent =
      `${fmt(t.compactions.length)} compaction${t.compactions.length === 1 ? "" : "s"}` +
      (t.compactions.length > 500 ? " (the newest 500 listed)" : "");
    for (const c of t.compactions.slice(-500).reverse()) {
      const covers = c.covers ? `${c.covers[0]}..${c.covers[1]}` : `${c.from_turn}..${c.to_turn} (beyond the log)`;
      const tr = el("tr", { class: "clickable" },
        el("td", { class: "num", text: String(c.seq) }),
        el("td", {}, el("a", { href: "#", text: covers, onclick: (e) => { e.preventDefault(); goTurn(c.from_turn); } })),
        el("td", { text: c.revert ? "revert (keep everything)" : c.describe }),
        el("td", { text: c.profile || "" }));
      tbody.append(tr);
    }
  }

  timelineCanvas.addEventListener("mousemove", (event) => {
    if (!layout) return;
    const hit = layout.at(event);
    tip.textContent = hit ? hit.text : "";
  });
  timelineCanvas.addEventListener("click", (event) => {
    if (!layout) return;
    const hit = layout.at(event);
    if (hit) goTurn(hit.turn);
  });
  tokensCanvas.addEventListener("click", (event) => {
    const t = state.timeline;
    if (!t || t.turns === 0) return;
    const rect = tokensCanvas.getBoundingClientRect();
    goTurn(Math.floor(((event.clientX - rect.left) / rect.width) * t.turns));
  });

  // ---- the raw log beside the view ----
  const tbody = document.querySelector("#rows tbody");
  const pageNote = document.getElementById("page-note");
  const LIMIT = 200;

  let pageAsked = 0;
  async function loadPage(start, highlight) {
    const mine = ++pageAsked;
    pageNote.textContent = "Loading…";
    let page;
    try {
      page = await api(`${base}/inspect?${start}&limit=${LIMIT}${asOfParam()}`);
    } catch (e) {
      if (mine === pageAsked) pageNote.textContent = "error: " + e.message;
      return;
    }
    if (mine !== pageAsked) return; // a newer one was asked for
    state.page = page;
    remember();
    tbody.textContent = "";
    for (const row of page.rows) {
      const raw = el("td", { class: "raw" }, eventNode(row.raw, null, false));
      const view = el("td", { class: "view" });
      for (const v of row.view) view.append(eventNode(v, showReplaced, true));
      if (row.view.length === 0 || row.fate !== "kept") {
        view.append(el("div", { class: "fate", text: {
          kept: "", changed: "stripped (raw on the left)", dropped: "not shown to the model",
          summarized: "replaced by the summary", }[row.fate] || "" }));
      }
      const lit = highlight && row.summarized_by && row.summarized_by[0] === highlight[0] && row.summarized_by[1] === highlight[1];
      tbody.append(el("tr", { class: `${row.fate}${row.raw.type === "turn_start" ? " turn-start" : ""}${lit ? " highlight" : ""}`, "data-seq": String(row.seq) },
        el("td", { class: "num", text: String(row.seq) }),
        el("td", { class: "num", text: String(row.turn) }), raw, view));
    }
    const first = page.rows.length ? page.rows[0].turn : 0;
    const lastTurn = page.rows.length ? page.rows[page.rows.length - 1].turn : 0;
    pageNote.textContent = page.rows.length
      ? `records ${fmt(page.from)}..${fmt(page.end - 1)} of ${fmt(page.events)}, turns ${fmt(first)}..${fmt(lastTurn)}`
      : "no records";
    if (highlight) {
      const lit = page.rows.filter((r) => r.summarized_by && r.summarized_by[0] === highlight[0] && r.summarized_by[1] === highlight[1]);
      pageNote.textContent += ` · highlighted: the ${fmt(lit.length)} record${lit.length === 1 ? "" : "s"} on this page that the summary of turns ${highlight[0]}..${highlight[1]} replaced`;
    }
    document.getElementById("prev").disabled = page.from === 0;
    document.getElementById("next").disabled = page.next == null;
    document.getElementById("goto-turn").value = String(first);
  }

  function goTurn(turn) {
    loadPage(`turn=${Math.max(0, turn)}`);
    document.querySelector(".side-by-side").scrollIntoView({ block: "start" });
  }
  // A summary's link: the records it replaced, from its first, lit.
  function showReplaced(first, last) {
    loadPage(`turn=${Math.max(0, first)}`, [first, last]);
  }
  document.getElementById("prev").addEventListener("click", () => {
    if (state.page) loadPage(`from=${Math.max(0, state.page.from - LIMIT)}`);
  });
  document.getElementById("next").addEventListener("click", () => {
    if (state.page && state.page.next != null) loadPage(`from=${state.page.next}`);
  });
  document.getElementById("goto").addEventListener("click", () => {
    goTurn(Number(document.getElementById("goto-turn").value) || 0);
  });

  async function refresh() {
    remember();
    const start = state.page ? `from=${Math.min(state.page.from, state.asOf ?? Infinity)}`
      : state.turn != null ? `turn=${state.turn}` : `from=${state.from ?? 0}`;
    await Promise.all([
      loadPage(start),
      loadTimeline().catch((e) => { tip.textContent = "error: " + e.message; }),
    ]);
  }
  await refresh();
  document.body.dataset.ready = "true";
}

// Draws winners per content type as three bands, then each compaction
// as a bar over the turns it covers (lanes stacked), reverts in grey, and
// pins on the bottom row. Returns what is at a mouse position.
function drawTimeline(canvas, t) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 1200;
  const lanes = [];
  const bars = [];
  for (const c of t.compactions) {
    if (!c.covers) continue;
    let lane = lanes.findIndex((end) => end < c.covers[0]);
    if (lane === -1) { lane = lanes.length < 16 ? lanes.length : 15; if (lane === lanes.length) lanes.push(-1); }
    lanes[lane] = Math.max(lanes[lane], c.covers[1]);
    bars.push({ c, lane });
  }
  const bandH = 14, laneH = 8, top = 4;
  const barsTop = top + 3 * (bandH + 2) + 6;
  const height = barsTop + Math.max(1, lanes.length) * (laneH + 2) + 18;
  canvas.height = height * ratio;
  canvas.style.height = height + "px";
  canvas.width = width * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  const turns = Math.max(1, t.turns);
  // Whole pixels, so that adjacent spans meet without a seam.
  const x = (turn) => Math.floor((turn / turns) * width);
  const w = (a, b) => Math.max(1, Math.ceil(((b + 1) / turns) * width) - x(a));
  const bySeq = new Map(t.compactions.map((c) => [c.seq, c]));
  ["summary", "reasoning", "tool_calls"].forEach((kind, i) => {
    const y = top + i * (bandH + 2);
    ctx.fillStyle = "#f1f3f7";
    ctx.fillRect(0, y, width, bandH);
    for (const s of t.spans) {
      const winner = s[kind];
      if (winner == null) continue;
      const c = bySeq.get(winner);
      ctx.fillStyle = c && c.revert ? "#9aa1ad" : BAND[kind];
      ctx.fillRect(x(s.first), y, w(s.first, s.last), bandH);
    }
  });
  for (const { c, lane } of bars) {
    const y = barsTop + lane * (laneH + 2);
    ctx.fillStyle = c.revert ? "#9aa1ad" : colorOf(c.seq);
    ctx.fillRect(x(c.covers[0]), y, w(c.covers[0], c.covers[1]), laneH);
  }
  const pinY = height - 12;
  ctx.fillStyle = "#2f9e44";
  for (const [a, b] of t.pins) ctx.fillRect(x(a), pinY, w(a, b), 6);
  ctx.fillStyle = "#5c6578";
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillText("turn 0", 2, height - 1);
  const endLabel = `turn ${fmt(turns - 1)}`;
  ctx.fillText(endLabel, width - ctx.measureText(endLabel).width - 2, height - 1);
  return {
    at(event) {
      const rect = canvas.getBoundingClientRect();
      const px = event.clientX - rect.left;
      const py = event.clientY - rect.top;
      const turn = Math.min(turns - 1, Math.max(0, Math.floor((px / rect.width) * turns)));
      if (py < barsTop) {
        const kind = ["summary", "reasoning", "tool_calls"][Math.max(0, Math.min(2, Math.floor((py - top) / (bandH + 2))))];
        const span = t.spans.find((s) => s.first <= turn && turn <= s.last);
        const winner = span ? span[kind] : null;
        const c = winner == null ? null : bySeq.get(winner);
        return { turn, text: `turn ${turn}: ${kind} ` + (c ? `from the compaction at seq ${c.seq} (${c.revert ? "revert" : c.describe})` : "as logged (no compaction sets it)") };
      }
      const lane = Math.floor((py - barsTop) / (laneH + 2));
      const bar = bars.find((b) => b.lane === lane && b.c.covers[0] <= turn && turn <= b.c.covers[1]);
      if (bar) return { turn: bar.c.covers[0], text: `compaction at seq ${bar.c.seq}, turns ${bar.c.covers[0]}..${bar.c.covers[1]}: ${bar.c.revert ? "revert" : bar.c.describe}` };
      const pin = t.pins.find(([a, b]) => a <= turn && turn <= b);
      return { turn, text: pin ? `turns ${pin[0]}..${pin[1]} are pinned` : `turn ${turn}` };
    },
  };
}

// Raw tokens per bucket as light bars, projected tokens over them dark.
function drawTokens(canvas, t) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 1200;
  const height = 140;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  const max = Math.max(1, ...t.tokens.map((b) => b[0]), ...t.tokens.map((b) => b[1]));
  const chartTop = 16; // the caption's line
  const n = Math.max(1, t.tokens.length);
  const bw = width / n;
  t.tokens.forEach(([raw, projected], i) => {
    const hr = (raw / max) * (height - 12 - chartTop);
    const hp = (projected / max) * (height - 12 - chartTop);
    ctx.fillStyle = "#c5cbe0";
    ctx.fillRect(i * bw, height - 12 - hr, Math.max(1, bw - (bw > 3 ? 1 : 0)), hr);
    ctx.fillStyle = "#3b5bdb";
    ctx.fillRect(i * bw, height - 12 - hp, Math.max(1, bw - (bw > 3 ? 1 : 0)), hp);
  });
  ctx.fillStyle = "#5c6578";
  ctx.font = "10px system-ui, sans-serif";
  ctx.fillText(`max ${fmt(max)} tokens a bar · light: raw · dark: projected`, 2, 10);
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  const run = page === "list" ? listPage : conversationPage;
  run().catch((e) => {
    const status = document.getElementById("status") || document.getElementById("page-note");
    if (status) status.textContent = "error: " + e.message;
  }).finally(() => {
    if (page === "list") document.body.dataset.ready = "true";
  });
});
