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
    ["/recv queue", t.recv_queue_messages + " messages, " + bytes(t.recv_queue_bytes)],
    ["Inbox", inboxText(snapshot.inbox)],
    ["Sessions", t.sessions],
  ];
  const list = $("totals");
  list.replaceChildren();
  for (const [name, value] of rows) { list.appendChild(el("dt", {}, name)); list.appendChild(el("dd", {}, String(value))); }
}

function inboxText(inbox) {
  const held = inbox.messages + " messages, " + bytes(inbox.bytes);
  if (!inbox.durable) return held + " (in memory)";
  const commit = inbox.commit_mean_ms === null ? "" : ", commit " + inbox.commit_mean_ms.toFixed(2) + " ms mean";
  return held + " (on disk" + commit + ")";
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
      [bytes(p.bytes_in), "num"], [bytes(p.bytes_out), "num"],
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
    fillRow(row, [[d.messages_sent, "num"], [bytes(d.bytes_sent), "num"], [d.messages_received, "num"],
                  [bytes(d.bytes_received), "num"], [ack, "num"], failures, clock(d.last_seen)]);
    dests.appendChild(row);
  }
}

// -- the tree as a graph ---------------------------------------------------------

function layoutTree(topology) {
  const parent = new Map(topology.tree.map(e => [e.public_key, e.parent]));
  const self = topology.our_public_key;
  const peers = topology.peers.filter(p => p.up && p.public_key).map(p => p.public_key);
  const keys = new Set([...parent.keys(), self, ...peers]);
  const depth = new Map();
  function depthOf(key, seen) {
    if (depth.has(key)) return depth.get(key);
    const up = parent.get(key);
    let d = 0;
    if (up && !seen.has(up) && keys.has(up)) d = depthOf(up, seen.add(key)) + 1;
    else if (!parent.has(key) && key !== topology.root) d = depthOf(self, seen.add(key)) + 1;
    depth.set(key, d);
    return d;
  }
  const levels = [];
  for (const key of [...keys].sort()) {
    const d = depthOf(key, new Set());
    (levels[d] = levels[d] || []).push(key);
  }
  const place = new Map();
  const rowGap = Math.min(70, 180 / Math.max(1, levels.length - 1));
  levels.forEach((row, d) => (row || []).forEach((key, i) => {
    place.set(key, { x: 600 * (i + 1) / (row.length + 1), y: 25 + d * rowGap });
  }));
  return { parent, self, peers: new Set(peers), place };
}

function renderTopology(topology) {
  const { parent, self, peers, place } = layoutTree(topology);
  const names = new Map(topology.peers.filter(p => p.name).map(p => [p.public_key, p.name]));
  const svg = $("graph");
  svg.replaceChildren();
  const line = (a, b, cls) => svg.appendChild(el("svg:line",
    { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: "edge " + cls }));
  for (const [key, up] of parent) {
    if (up && place.has(up) && place.has(key)) line(place.get(key), place.get(up), "tree");
  }
  for (const key of peers) line(place.get(self), place.get(key), "link");
  for (const [key, at] of place) {
    const cls = "node" + (key === self ? " self" : "") + (peers.has(key) ? " peer" : "");
    const group = el("svg:g", { class: cls, "data-key": key });
    group.appendChild(el("svg:title", {}, key + (key === topology.root ? " (root)" : "")));
    group.appendChild(el("svg:circle", { cx: at.x, cy: at.y, r: 9 }));
    const label = (names.get(key) || short(key)) + (key === topology.root ? " root" : "");
    group.appendChild(el("svg:text", { x: at.x + 13, y: at.y + 4 }, label));
    svg.appendChild(group);
  }
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
