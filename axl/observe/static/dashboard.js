// The AXL node dashboard: reads /dashboard/api/*, then follows the event stream.
// Plain DOM and SVG, no libraries; every text from the node goes through textContent.
"use strict";

const API = "/dashboard/api/";
const SVG = "http://www.w3.org/2000/svg";
const MAX_SAMPLES = 1800;
const MAX_LOG_LINES = 300;
const state = { snapshot: null, samples: [], loadedAt: Date.now() };

function $(id) { return document.getElementById(id); }

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

async function getJSON(path) {
  const response = await fetch(API + path, { cache: "no-store" });
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

function short(key) { return key ? key.slice(0, 12) + "…" : "—"; }

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : Math.round(n)) + " " + units[i];
}

function duration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24;
  const m = Math.floor(seconds / 60) % 60, s = seconds % 60;
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + s + "s";
}

function clock(unix) { return new Date(unix * 1000).toLocaleTimeString(); }

function fillRow(row, cells) {
  for (const cell of cells) {
    const [text, cls] = Array.isArray(cell) ? cell : [cell, ""];
    row.appendChild(el("td", cls ? { class: cls } : {}, String(text)));
  }
}

// -- identity and totals ------------------------------------------------------

function renderSnapshot(snapshot) {
  state.snapshot = snapshot;
  state.loadedAt = Date.now();
  const id = snapshot.identity;
  $("our-key").textContent = id.public_key;
  $("header-key").textContent = short(id.public_key);
  $("our-address").textContent = id.ipv6;
  $("version").textContent = id.version;
  renderUptime();
  const t = snapshot.totals;
  const rows = [
    ["Peers up / down", t.peers_up + " / " + t.peers_down],
    ["Messages sent", t.messages_sent + " (" + bytes(t.payload_bytes_out) + ")"],
    ["Send failures", t.send_failures],
    ["Messages received", t.messages_received + " (" + bytes(t.payload_bytes_in) + ")"],
    ["Link bytes in / out", bytes(t.link_bytes_in) + " / " + bytes(t.link_bytes_out)],
    ["/recv queue", plural(t.recv_queue_messages, "message") + ", " + bytes(t.recv_queue_bytes)],
    ["Inbox", inboxText(snapshot.inbox)],
    ["Sessions", t.sessions],
  ];
  fillList($("totals"), rows);
  renderForwarding(snapshot.adapters, snapshot.listener);
}

function fillList(list, rows) {
  list.replaceChildren();
  for (const [name, value] of rows) { list.appendChild(el("dt", {}, name)); list.appendChild(el("dd", {}, String(value))); }
}

function inboxText(inbox) {
  const held = plural(inbox.messages, "message") + ", " + bytes(inbox.bytes);
  if (!inbox.durable) return held + " (in memory)";
  const commit = inbox.commit_mean_ms === null ? "" : ", commit " + inbox.commit_mean_ms.toFixed(2) + " ms mean";
  return held + " (on disk" + commit + ")";
}

function renderForwarding(adapters, listener) {
  const body = $("adapters").tBodies[0];
  body.replaceChildren();
  for (const [name, kind] of [["MCP", "mcp"], ["A2A", "a2a"]]) {
    const out = adapters[kind + "_out"], inbound = adapters[kind + "_in"];
    const row = el("tr", { "data-adapter": kind });
    row.appendChild(el("th", {}, name));
    fillRow(row, [[out.requests, "num"], [out.errors, out.errors ? "num bad" : "num"],
                  [inbound.requests, "num"], [inbound.errors, inbound.errors ? "num bad" : "num"]]);
    body.appendChild(row);
  }
  fillList($("listener"), [["Accepted", listener.accepts],
                           ["Refused (connection limit)", listener.rejects],
                           ["Messages over max size", listener.oversize],
                           ["Read errors (mid-message)", listener.read_errors]]);
}

function renderUptime() {
  if (!state.snapshot) return;
  const extra = (Date.now() - state.loadedAt) / 1000;
  $("uptime").textContent = duration(state.snapshot.identity.uptime_secs + extra);
}

// -- peerings and destinations -------------------------------------------------

function renderPeers(data) {
  const now = Date.now() / 1000;
  const body = $("peerings").tBodies[0];
  body.replaceChildren();
  for (const p of data.peerings) {
    const row = el("tr", { "data-key": p.public_key, "data-up": String(p.up) });
    const label = p.name ? p.name + " · " + short(p.public_key) : short(p.public_key);
    const key = el("td", { class: "key", title: p.public_key }, label);
    row.appendChild(key);
    fillRow(row, [
      [p.up ? "up" : "down", p.up ? "up" : "down"], p.inbound ? "in" : "out", p.uri || "—",
      p.up_since ? duration(now - p.up_since) : "—",
      [p.rtt_ms === null ? "—" : p.rtt_ms.toFixed(2) + " ms", "num"],
      [bytes(p.queued_bytes), "num"], [bytes(p.bytes_in), "num"], [bytes(p.bytes_out), "num"],
      [p.frames_in + " / " + p.frames_out, "num"], [p.reconnects, "num"], p.last_reason || "",
    ]);
    body.appendChild(row);
  }
  const dests = $("destinations").tBodies[0];
  dests.replaceChildren();
  for (const d of data.destinations) {
    const row = el("tr", { "data-key": d.public_key });
    row.appendChild(el("td", { class: "key", title: d.public_key }, short(d.public_key)));
    const failures = Object.entries(d.failures).map(([code, n]) => code + "×" + n).join(" ") || "—";
    const ack = d.last_ack_ms === null ? "—" : d.last_ack_ms.toFixed(1) + " / " + d.mean_ack_ms.toFixed(1) + " ms";
    const overlay = d.overlay_rtt_ms === null ? "—"
      : d.overlay_rtt_ms.toFixed(1) + " ms · " + d.retransmits + " / " + d.timeouts;
    fillRow(row, [[d.messages_sent, "num"], [bytes(d.bytes_sent), "num"], [d.messages_received, "num"],
                  [bytes(d.bytes_received), "num"], [ack, "num"], [overlay, "num"], failures,
                  clock(d.last_seen)]);
    dests.appendChild(row);
  }
}

// -- the topology: a tree or force layout of every node this one knows ------------

// Room, in pixels of the drawing, that keeps it legible at a hundred nodes:
// a crowded tree level wraps into several rows, and labels show only where
// they fit (the full key is always in the node's tooltip).
const MARGIN = 26;
const NODE_GAP = 26;
const LABEL_ROOM = 64;
const DEPTH_GAP = 66;
const WRAP_GAP = 34;
const FORCE_ROUNDS = 300;
const graph = { layout: "tree", frozen: false, filter: "", shown: null, latest: null, forcePlaces: new Map() };

function graphModel(topology) {
  const self = topology.our_public_key, root = topology.root;
  const parentOf = new Map(topology.tree.map(e => [e.public_key, e.parent]));
  const peers = new Set(topology.peers.filter(p => p.up && p.public_key).map(p => p.public_key));
  const keys = [...new Set([...parentOf.keys(), self, ...peers])].sort();
  const known = new Set(keys);
  // A peer the tree does not place yet hangs under this node, drawn by its peering alone.
  const up = new Map();
  for (const key of keys) {
    const parent = parentOf.get(key);
    if (parent && parent !== key && known.has(parent)) up.set(key, parent);
    else if (!parentOf.has(key) && key !== self) up.set(key, self);
  }
  const children = new Map(keys.map(key => [key, []]));
  for (const [key, parent] of up) children.get(parent).push(key);
  const tops = keys.filter(key => !up.has(key)).sort((a, b) => (b === root) - (a === root));
  const depth = new Map(), order = [];
  const visit = (key, d) => {
    if (depth.has(key)) return;
    depth.set(key, d);
    order.push(key);
    for (const child of children.get(key)) visit(child, d + 1);
  };
  for (const key of tops) visit(key, 0);
  for (const key of keys) visit(key, 0);  // anything left on a cycle of stale entries
  const treeEdges = [...up].filter(([key, parent]) => parentOf.get(key) === parent);
  return { self, root, peers, keys, children, depth, order, treeEdges };
}

function treeLayout(model, width) {
  const usable = width - 2 * MARGIN;
  const leaves = model.order.filter(key => !model.children.get(key).some(child => model.depth.get(child) > model.depth.get(key)));
  const places = new Map();
  const levels = [];
  for (const key of model.order) (levels[model.depth.get(key)] = levels[model.depth.get(key)] || []).push(key);
  if (leaves.length * NODE_GAP <= usable) {
    const gap = usable / leaves.length;
    leaves.forEach((key, i) => places.set(key, { x: MARGIN + gap * (i + 0.5), y: 0 }));
    for (const key of [...model.order].reverse()) {
      const below = model.children.get(key).filter(child => places.has(child) && model.depth.get(child) > model.depth.get(key));
      if (!places.has(key)) places.set(key, { x: below.reduce((sum, c) => sum + places.get(c).x, 0) / below.length, y: 0 });
    }
    const depthGap = Math.max(34, Math.min(DEPTH_GAP, 540 / Math.max(1, levels.length - 1)));
    for (const [key, at] of places) at.y = MARGIN + model.depth.get(key) * depthGap;
    return { places, height: 2 * MARGIN + (levels.length - 1) * depthGap + 16, room: gap };
  }
  // Too many for one row: each level wraps, in depth-first order, so siblings
  // stay together; every other row is shifted by half a gap, so that edges to
  // a lower row pass between the nodes of the rows above it.
  const perRow = Math.max(1, Math.floor(usable / NODE_GAP) - 1);
  let y = MARGIN, room = Infinity;
  for (const level of levels) {
    const gap = Math.min(usable / (Math.min(level.length, perRow) + 0.5), 2 * LABEL_ROOM);
    room = Math.min(room, gap);
    for (let start = 0, row = 0; start < level.length; start += perRow, row++) {
      const keys = level.slice(start, start + perRow);
      const shift = (row % 2) * gap / 2;
      keys.forEach((key, i) => places.set(key, { x: width / 2 + (i - (keys.length - 1) / 2) * gap + shift, y }));
      y += WRAP_GAP;
    }
    y += DEPTH_GAP - WRAP_GAP;
  }
  return { places, height: y - DEPTH_GAP + MARGIN + 16, room };
}

function graphEdges(model) {
  const edges = model.treeEdges.map(([a, b]) => [a, b, "tree"]);
  for (const key of model.peers) edges.push([model.self, key, "link"]);
  return edges;
}

function forceLayout(model, width, height, start) {
  // Fruchterman-Reingold in open space for a fixed number of rounds (the same
  // input gives the same drawing; a hundred nodes take a few milliseconds),
  // then stretched to fill the box.
  const keys = model.keys, n = keys.length;
  const at = keys.map(key => ({ ...(start.get(key) || { x: width / 2, y: height / 2 }) }));
  const index = new Map(keys.map((key, i) => [key, i]));
  const springs = graphEdges(model).map(([a, b]) => [index.get(a), index.get(b)]);
  const k = 40;
  keys.forEach((key, i) => { at[i].x += (parseInt(key.slice(0, 4), 16) % 7) - 3; at[i].y += (parseInt(key.slice(4, 8), 16) % 7) - 3; });
  for (let round = 0; round < FORCE_ROUNDS; round++) {
    const heat = 2 * k * (1 - round / FORCE_ROUNDS) + 0.5;
    const push = at.map(() => ({ x: 0, y: 0 }));
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const dx = at[i].x - at[j].x, dy = at[i].y - at[j].y, d2 = Math.max(1, dx * dx + dy * dy);
        const f = k * k / d2;
        push[i].x += dx * f; push[i].y += dy * f; push[j].x -= dx * f; push[j].y -= dy * f;
      }
    }
    for (const [i, j] of springs) {
      const dx = at[i].x - at[j].x, dy = at[i].y - at[j].y, f = Math.hypot(dx, dy) / k;
      push[i].x -= dx * f; push[i].y -= dy * f; push[j].x += dx * f; push[j].y += dy * f;
    }
    for (let i = 0; i < n; i++) {
      const p = push[i];
      p.x += (width / 2 - at[i].x) * 0.05;
      p.y += (height / 2 - at[i].y) * 0.05;
      const d = Math.max(1e-9, Math.hypot(p.x, p.y)), step = Math.min(d, heat);
      at[i].x += p.x / d * step;
      at[i].y += p.y / d * step;
    }
  }
  return fitted(keys, at, width, height);
}

function fitted(keys, at, width, height) {
  const xs = at.map(p => p.x), ys = at.map(p => p.y);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const sx = x1 > x0 ? (width - 2 * MARGIN) / (x1 - x0) : 0, sy = y1 > y0 ? (height - 2 * MARGIN - 16) / (y1 - y0) : 0;
  return new Map(keys.map((key, i) => [key, {
    x: sx ? MARGIN + (at[i].x - x0) * sx : width / 2,
    y: sy ? MARGIN + (at[i].y - y0) * sy : height / 2,
  }]));
}

function matchesFilter(key) { return graph.filter !== "" && key.startsWith(graph.filter); }

function keyPrefix(text) { return text.toLowerCase().replace(/[^0-9a-f]/g, ""); }

function plural(count, one, many) { return count + " " + (count === 1 ? one : (many || one + "s")); }

function placeGraph(model, width) {
  const tree = treeLayout(model, width);
  if (graph.layout !== "force") return tree;
  const height = Math.round(Math.min(640, Math.max(320, 75 * Math.sqrt(model.keys.length))));
  const start = graph.forcePlaces.size ? graph.forcePlaces
    : new Map([...tree.places].map(([key, p]) => [key, { x: p.x, y: p.y * height / tree.height }]));
  graph.forcePlaces = forceLayout(model, width, height, start);
  return { places: graph.forcePlaces, height, room: model.keys.length <= 30 ? LABEL_ROOM : 0 };
}

function labelLines(model, places, room) {
  // Which nodes get a label, and on which of two lines: where labels sit
  // closer than their width, neighbours alternate.
  const labelled = model.order.filter(key => room >= LABEL_ROOM || matchesFilter(key) || key === model.self ||
                                             (key === model.root && room >= 2 * NODE_GAP));
  const rows = new Map();
  for (const key of labelled) rows.set(places.get(key).y, [...(rows.get(places.get(key).y) || []), key]);
  const lines = new Map();
  for (const row of rows.values()) {
    row.sort((a, b) => places.get(a).x - places.get(b).x).forEach((key, i) => {
      const crowded = room < LABEL_ROOM && i > 0 && places.get(key).x - places.get(row[i - 1]).x < LABEL_ROOM;
      lines.set(key, crowded ? 1 - lines.get(row[i - 1]) : 0);
    });
  }
  return lines;
}

function nodeGroup(model, key, at, radius, dimmed) {
  const roles = [key === model.self && "this node", key === model.root && "root",
                 model.peers.has(key) && "direct peer"].filter(Boolean);
  const cls = ["node", key === model.self && "self", model.peers.has(key) && "peer", key === model.root && "root",
               matchesFilter(key) && "match", dimmed && "dim"].filter(Boolean).join(" ");
  const group = el("svg:g", { class: cls, "data-key": key });
  group.appendChild(el("svg:title", {}, key + (roles.length ? " (" + roles.join(", ") + ")" : "") +
                                        " · depth " + model.depth.get(key)));
  if (key === model.root) group.appendChild(el("svg:circle", { cx: at.x, cy: at.y, r: radius + 4, class: "halo" }));
  group.appendChild(el("svg:circle", { cx: at.x, cy: at.y, r: radius }));
  return group;
}

function drawGraph() {
  if (!graph.shown) return;
  const svg = $("graph");
  const width = Math.max(360, Math.round(svg.getBoundingClientRect().width) || 900);
  const model = graphModel(graph.shown);
  const { places, height, room } = placeGraph(model, width);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", String(height));
  svg.setAttribute("data-layout", graph.layout);
  svg.setAttribute("data-nodes", String(model.keys.length));
  svg.classList.toggle("crowded", model.keys.length > 40);
  svg.replaceChildren();
  const dim = key => graph.filter !== "" && !matchesFilter(key);
  for (const [a, b, kind] of graphEdges(model)) {
    const p = places.get(a), q = places.get(b);
    svg.appendChild(el("svg:line", { x1: p.x, y1: p.y, x2: q.x, y2: q.y,
                                     class: "edge " + kind + (dim(a) && dim(b) ? " dim" : "") }));
  }
  const radius = model.keys.length > 60 ? 5 : 7;
  const lines = labelLines(model, places, room);
  const names = new Map(graph.shown.peers.filter(p => p.name).map(p => [p.public_key, p.name]));
  for (const key of model.order) {
    const at = places.get(key);
    const group = nodeGroup(model, key, at, radius, dim(key));
    if (lines.has(key)) {
      group.appendChild(el("svg:text", { x: at.x, y: at.y + radius + 13 + 12 * lines.get(key), "text-anchor": "middle" },
                           (names.get(key) || key).slice(0, room >= LABEL_ROOM ? 8 : 6)));
    }
    svg.appendChild(group);
  }
  $("graph-stats").textContent = describeGraph(model);
}

function describeGraph(model) {
  const parts = [plural(model.keys.length, "node") + " known", plural(model.peers.size, "direct peer"),
                 "tree depth " + Math.max(...model.depth.values())];
  if (graph.filter !== "") {
    parts.push(plural(model.keys.filter(matchesFilter).length, "match", "matches") + " for " + graph.filter + "…");
  }
  if (graph.frozen) parts.push(graph.latest === graph.shown ? "frozen" : "frozen (newer topology held back)");
  return parts.join(" · ");
}

function renderTopology(topology) {
  graph.latest = topology;
  if (!graph.frozen || !graph.shown) graph.shown = topology;
  drawGraph();
}

function setupGraphControls() {
  const params = new URLSearchParams(location.search);
  const layoutButtons = { tree: $("layout-tree"), force: $("layout-force") };
  const chooseLayout = layout => {
    graph.layout = layout === "force" ? "force" : "tree";
    for (const [name, button] of Object.entries(layoutButtons)) button.setAttribute("aria-pressed", String(name === graph.layout));
    drawGraph();
  };
  for (const [name, button] of Object.entries(layoutButtons)) button.addEventListener("click", () => chooseLayout(name));
  $("freeze").addEventListener("click", () => {
    graph.frozen = !graph.frozen;
    $("freeze").setAttribute("aria-pressed", String(graph.frozen));
    $("freeze").textContent = graph.frozen ? "frozen" : "freeze";
    if (!graph.frozen) graph.shown = graph.latest;
    drawGraph();
  });
  const filter = $("key-filter");
  filter.addEventListener("input", () => {
    graph.filter = keyPrefix(filter.value);
    drawGraph();
  });
  filter.value = params.get("filter") || "";
  graph.filter = keyPrefix(filter.value);
  chooseLayout(params.get("layout"));
  let pending = null;
  window.addEventListener("resize", () => { clearTimeout(pending); pending = setTimeout(drawGraph, 150); });
}

// -- time series charts ---------------------------------------------------------

const CHARTS = [
  ["chart-messages", ["messages_in_per_sec", "messages_out_per_sec"], v => v.toFixed(1) + "/s"],
  ["chart-bytes", ["bytes_in_per_sec", "bytes_out_per_sec"], v => bytes(v) + "/s"],
  ["chart-queues", ["recv_queue_messages", "link_queue_bytes"], v => String(Math.round(v))],
  ["chart-memory", ["rss_bytes"], v => bytes(v)],
];

function drawChart(id, fields, format) {
  const svg = $(id);
  const samples = state.samples;
  svg.replaceChildren();
  let max = 0;
  for (const s of samples) for (const f of fields) max = Math.max(max, s[f]);
  svg.setAttribute("data-points", String(samples.length));
  svg.setAttribute("data-max", String(max));
  const range = $(id + "-range");
  if (samples.length < 2) {
    range.textContent = "waiting for samples…";
    return;
  }
  const t0 = samples[0].time, span = Math.max(1, samples[samples.length - 1].time - t0);
  const top = max > 0 ? max * 1.1 : 1;
  fields.forEach((field, i) => {
    const points = samples.map(s => ((s.time - t0) / span * 600).toFixed(1) + "," +
                                     (135 - s[field] / top * 125).toFixed(1)).join(" ");
    svg.appendChild(el("svg:polyline", { points, class: "series " + (i ? "out" : "in") }));
  });
  range.textContent = "max " + format(max) + " · from " + clock(t0) + " to " + clock(t0 + span);
}

function drawCharts() { for (const [id, fields, format] of CHARTS) drawChart(id, fields, format); }

// -- log lines -----------------------------------------------------------------

function addLogLine(line) {
  const list = $("logs");
  const item = el("li", { class: line.level },
                  clock(line.time) + " " + line.level + " " + line.logger + ": " + line.message);
  list.prepend(item);
  while (list.children.length > MAX_LOG_LINES) list.lastChild.remove();
}

// -- loading and live updates -------------------------------------------------------

async function refresh(parts) {
  const loaders = {
    snapshot: () => getJSON("snapshot").then(renderSnapshot),
    peers: () => getJSON("peers").then(renderPeers),
    topology: () => getJSON("topology").then(renderTopology),
  };
  await Promise.all(parts.map(part => loaders[part]().catch(err => console.error(err))));
}

function follow() {
  const events = new EventSource(API + "events");
  events.addEventListener("open", () => { $("live").textContent = "live"; $("live").className = "badge"; });
  events.addEventListener("error", () => { $("live").textContent = "reconnecting"; $("live").className = "badge off"; });
  events.addEventListener("sample", event => {
    state.samples.push(JSON.parse(event.data));
    if (state.samples.length > MAX_SAMPLES) state.samples.shift();
    drawCharts();
    refresh(["snapshot", "peers"]);
  });
  events.addEventListener("peer", () => refresh(["snapshot", "peers", "topology"]));
  events.addEventListener("log", event => addLogLine(JSON.parse(event.data)));
}

async function start() {
  setupGraphControls();
  const [series, logs] = await Promise.all([getJSON("series"), getJSON("logs?limit=200"),
                                            refresh(["snapshot", "peers", "topology"])]);
  state.samples = series.samples.slice(-MAX_SAMPLES);
  drawCharts();
  for (const line of logs.lines) addLogLine(line);
  setInterval(renderUptime, 1000);
  // ?live=0 renders the state once: an open event stream never lets a
  // headless browser's virtual clock (--virtual-time-budget) run out.
  if (new URLSearchParams(location.search).get("live") === "0") {
    $("live").textContent = "snapshot";
    return;
  }
  follow();
  setInterval(() => refresh(["topology"]), 10000);
}

document.addEventListener("DOMContentLoaded", () => start().catch(err => {
  $("live").textContent = "error: " + err.message;
}));
