// The xpushare web view: a page per route (#/fleet, #/node/NAME, #/pod/NS/NAME, #/search,
// #/whatif), all of its state in the URL's fragment so a link shows what its sender saw.
// It reads the scheduler's JSON API only (docs/web-view.md) and polls it: the fleet every
// second with If-None-Match (an unchanged fleet costs a 304), the other pages every 2 s.
"use strict";

const FLEET_POLL_MS = 1000;
const DETAIL_POLL_MS = 2000;
// History moves at Prometheus' scrape interval (15 s to 1 min): asking more often shows nothing new.
const HISTORY_POLL_MS = 30000;
const HISTORY_MINUTES = 60;
const main = document.getElementById("main");
let timer = null;
let generation = 0;
let fleetTag = null;
let fleetData = null;
let history = null;
let historyBusy = false;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function token() { return sessionStorage.getItem("xpushare-token") || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401 || response.status === 403) {
    const body = await response.json().catch(() => ({}));
    document.getElementById("token-box").hidden = false;
    document.getElementById("token-error").textContent = body.error || "";
    throw new Error(body.error || "not allowed");
  }
  return response;
}

async function getJSON(path) {
  const response = await api(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
  return body;
}

function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "fleet";
  const [path, query] = hash.split("?");
  const parts = path.split("/").map(decodeURIComponent);
  return { page: parts[0], args: parts.slice(1), params: new URLSearchParams(query || "") };
}

function setHash(page, params) {
  const query = params.toString();
  const next = "#/" + page + (query ? "?" + query : "");
  if (location.hash !== next) location.hash = next;
}

function setStatus(text, bad) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = bad ? "bad" : "";
}

function schedule(fn, ms, mine) {
  clearTimeout(timer);
  timer = setTimeout(() => { if (mine === generation) fn(); }, ms);
}

function pct(used, cap) { return cap > 0 ? Math.min(1, used / cap) : 0; }
function when(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// ---- fleet ------------------------------------------------------------------------------

function fleetQuery(params) {
  const q = new URLSearchParams();
  for (const key of ["vendor", "model", "node"]) if (params.get(key)) q.set(key, params.get(key));
  for (const label of params.getAll("label")) if (label) q.append("label", label);
  return q;
}

// Human units: MiB as GiB/TiB/PiB, fractions as percentages, counts with separators.
function bytes(mib) {
  const units = ["MiB", "GiB", "TiB", "PiB"];
  let v = mib;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
  return (u === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : 1)) + " " + units[u];
}
function percent(used, cap) { return cap > 0 ? (100 * used / cap).toFixed(1) + "%" : "–"; }
function count(n) { return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 }); }
function gpus(n) { return n.toLocaleString("en-US", { maximumFractionDigits: 1 }); }

function totals(summary) {
  const t = { vendor: "all", model: "", nodes: 0 };
  for (const key of ["devices", "healthy", "memory_used_mib", "memory_cap_mib", "compute_used_percent",
    "compute_cap_percent", "idle", "free_gpus", "fragmentation_gpus"]) {
    t[key] = summary.reduce((a, s) => a + s[key], 0);
  }
  return t;
}

// The overview: one card per vendor and model (and the fleet's when there are several), every
// figure in an operator's units, the raw value in data-v for tools and tests.
function overview(data) {
  const card = (s, all) => {
    const figure = (key, label, text, value) => `<div class="fig"><b data-k="${key}" data-v="${value}">${text}</b><span>${label}</span></div>`;
    return `<section class="card${all ? " all" : ""}" data-testid="${all ? "overview-all" : "overview-card"}" data-vendor="${esc(s.vendor)}" data-model="${esc(s.model)}">
      <h3>${all ? "Fleet" : `${esc(s.model)} <span class="muted">${esc(s.vendor)}</span>`}</h3>
      <div class="figs">
      ${figure("memory_alloc", `memory allocated<br>${bytes(s.memory_used_mib)} of ${bytes(s.memory_cap_mib)}`, percent(s.memory_used_mib, s.memory_cap_mib), s.memory_cap_mib ? s.memory_used_mib / s.memory_cap_mib : 0)}
      ${figure("compute_alloc", "compute allocated", percent(s.compute_used_percent, s.compute_cap_percent), s.compute_cap_percent ? s.compute_used_percent / s.compute_cap_percent : 0)}
      ${figure("idle", `whole GPUs free<br>of ${count(s.devices)}`, count(s.idle), s.idle)}
      ${figure("free_gpus", "GPUs of free capacity", gpus(s.free_gpus), s.free_gpus)}
      ${figure("fragmentation_gpus", "of it fragmented", data.fragmentation_measured ? gpus(s.fragmentation_gpus) : "–", s.fragmentation_gpus)}
      ${figure("unhealthy", "unhealthy", count(s.devices - s.healthy), s.devices - s.healthy)}
      </div></section>`;
  };
  const cards = data.summary.map((s) => card(s, false));
  if (data.summary.length > 1) cards.unshift(card(totals(data.summary), true));
  return `<div class="overview" data-testid="overview">${cards.join("")}</div>`;
}

function workloadLine(data) {
  const w = data.workload;
  if (!data.fragmentation_measured || !w) return `<p class="muted">policy ${esc(data.policy)}: fragmentation is measured by the FGD policies only</p>`;
  const origin = w.learnt ? `learnt from ${count(w.pods)} pod${w.pods === 1 ? "" : "s"} that fit a node` : "given in the configuration";
  const top = w.top.map(([text, weight]) => `${esc(text)} <b>${(100 * weight).toFixed(0)}%</b>`).join(" · ");
  if (!w.shapes) return `<p class="muted" data-testid="workload">Fragmented: free capacity that the tasks of the workload could not use (FGD). No workload yet (${w.learnt ? "no pod has fit a node" : "none given"}): nothing counts as fragmented. Policy ${esc(data.policy)}.</p>`;
  return `<p class="muted" data-testid="workload">Fragmented: free capacity that the tasks of the workload could not use (FGD), measured against ${w.shapes} task shape${w.shapes === 1 ? "" : "s"} ${origin}: ${top}. Policy ${esc(data.policy)}.</p>`;
}

// One entry per node for the table: its sums over its groups.
function nodeRows(data) {
  const col = {};
  data.device_columns.forEach((name, i) => { col[name] = i; });
  return data.nodes.map((node, n) => {
    const r = { n, name: node.name, pods: node.pods || 0, models: [], gpus: 0, memUsed: 0, memCap: 0, cmpUsed: 0, cmpCap: 0, free: 0, frag: 0, sick: 0 };
    for (const g of node.groups) {
      r.models.push(g[1]);
      r.frag += g[2];
      for (const d of g[3]) {
        r.gpus += 1;
        r.memUsed += d[col.memory_used_mib]; r.memCap += d[col.memory_cap_mib];
        r.cmpUsed += d[col.compute_used_percent]; r.cmpCap += d[col.compute_cap_percent];
        r.free += d[col.free_units] / 1000;
        if (!d[col.healthy]) r.sick += 1;
      }
    }
    r.mem = r.memCap ? r.memUsed / r.memCap : 0;
    r.cmp = r.cmpCap ? r.cmpUsed / r.cmpCap : 0;
    return r;
  });
}

const SORTS = {
  memory: ["memory allocated", (r) => r.mem], compute: ["compute allocated", (r) => r.cmp],
  pods: ["pods", (r) => r.pods], fragmented: ["fragmented", (r) => r.frag], free: ["free GPUs", (r) => r.free],
  name: ["name", null],
};

function nodeTable(data, params) {
  const sort = SORTS[params.get("sort")] ? params.get("sort") : "memory";
  const top = Math.max(1, Number(params.get("top")) || 20);
  const rows = nodeRows(data);
  const key = SORTS[sort][1];
  if (key) rows.sort((a, b) => key(b) - key(a) || (a.name < b.name ? -1 : 1));
  else rows.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const shown = rows.slice(0, top);
  const head = (k, label, cls) => `<th class="${cls || ""}"><a href="#" data-sort="${k}" class="${k === sort ? "on" : ""}">${label}</a></th>`;
  const body = shown.map((r) => `<tr data-testid="node-row" data-node="${esc(r.name)}"><td><a href="#/node/${encodeURIComponent(r.name)}">${esc(r.name)}</a></td>
    <td>${esc([...new Set(r.models)].join(", "))}</td><td class="n">${r.gpus}${r.sick ? ` <span class="no">(${r.sick} unhealthy)</span>` : ""}</td>
    <td class="n" data-k="mem" data-v="${r.mem}">${(100 * r.mem).toFixed(1)}% <span class="muted">${bytes(r.memUsed)} / ${bytes(r.memCap)}</span></td>
    <td class="n" data-k="cmp" data-v="${r.cmp}">${(100 * r.cmp).toFixed(1)}%</td><td class="n" data-k="pods">${r.pods}</td>
    <td class="n">${gpus(r.free)}</td><td class="n">${data.fragmentation_measured ? r.frag.toFixed(2) : "–"}</td></tr>`).join("");
  const tops = [10, 20, 50, 100, 500].map((t) => `<option ${t === top ? "selected" : ""}>${t}</option>`).join("");
  return `<h2>Nodes <span class="muted" data-testid="table-note">top ${shown.length} of ${count(rows.length)} by ${SORTS[sort][0]}</span>
      <label class="muted">show <select id="top-n">${tops}</select></label></h2>
    <table data-testid="node-table" class="nodes"><thead><tr>${head("name", "node")}<th>model</th><th class="n">GPUs</th>
    ${head("memory", "memory allocated", "n")}${head("compute", "compute", "n")}${head("pods", "pods", "n")}${head("free", "free GPUs", "n")}${head("fragmented", "fragmented", "n")}</tr></thead><tbody>${body}</tbody></table>`;
}

const HEAT = ["#e8f0fe", "#cfe0fc", "#b4cef9", "#97baf5", "#79a5f0", "#5a8fe9", "#3f78de", "#2d63cc", "#234fb0", "#1b3d8f", "#142d6b"];
const SICK = "#f97066";

// The heat map: one cell per device on a canvas sized to the screen, nodes in the fleet's
// order, each node's devices side by side; hover names the device, a click opens its node.
function drawHeat(canvas, data, color) {
  const col = {};
  data.device_columns.forEach((name, i) => { col[name] = i; });
  const usedI = color === "memory" ? col.memory_used_mib : col.compute_used_percent;
  const capI = color === "memory" ? col.memory_cap_mib : col.compute_cap_percent;
  const cells = [];
  for (let n = 0; n < data.nodes.length; n++) {
    const groups = data.nodes[n].groups;
    for (let g = 0; g < groups.length; g++) {
      const rows = groups[g][3];
      for (let d = 0; d < rows.length; d++) cells.push([n, g, d]);
    }
  }
  const width = Math.max(200, canvas.parentElement.clientWidth);
  const height = Math.max(160, Math.min(560, window.innerHeight * 0.45));
  const size = Math.max(2, Math.min(14, Math.floor(Math.sqrt((width * height) / Math.max(1, cells.length)))));
  const perRow = Math.max(1, Math.floor(width / size));
  const rowsNeeded = Math.ceil(cells.length / perRow);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = perRow * size * ratio;
  canvas.height = Math.max(1, rowsNeeded * size) * ratio;
  canvas.style.width = perRow * size + "px";
  canvas.style.height = Math.max(1, rowsNeeded * size) + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const gap = size >= 5 ? 1 : 0;
  for (let k = 0; k < cells.length; k++) {
    const [n, g, d] = cells[k];
    const r = data.nodes[n].groups[g][3][d];
    ctx.fillStyle = r[col.healthy] ? HEAT[Math.round(pct(r[usedI], r[capI]) * 10)] : SICK;
    ctx.fillRect((k % perRow) * size, Math.floor(k / perRow) * size, size - gap, size - gap);
  }
  canvas.dataset.cells = String(cells.length);
  canvas.dataset.cell = String(size);
  canvas.dataset.perRow = String(perRow);
  return { cells, size, perRow, col };
}

function renderFleet(data, params) {
  const color = params.get("color") === "compute" ? "compute" : "memory";
  const vendors = data.vendors.map((v) => `<option ${v === params.get("vendor") ? "selected" : ""}>${esc(v)}</option>`).join("");
  const models = data.models.filter((m) => !params.get("vendor") || m.vendor === params.get("vendor"))
    .map((m) => `<option ${m.model === params.get("model") ? "selected" : ""}>${esc(m.model)}</option>`).join("");
  const devices = data.summary.reduce((a, s) => a + s.devices, 0);
  main.innerHTML = `<h1>Fleet <span class="muted" data-testid="shown">${count(data.shown_nodes)} of ${count(data.total_nodes)} nodes, ${count(devices)} devices</span></h1>
    <form class="filters" id="fleet-filters">
      <label>vendor<select name="vendor"><option value="">all</option>${vendors}</select></label>
      <label>model<select name="model"><option value="">all</option>${models}</select></label>
      <label>node label (KEY or KEY=VALUE)<input name="label" value="${esc(params.getAll("label").join(","))}"></label>
      <label>node name<input name="node" value="${esc(params.get("node") || "")}"></label>
      <label>colour by<select name="color"><option ${color === "memory" ? "selected" : ""}>memory</option><option ${color === "compute" ? "selected" : ""}>compute</option></select></label>
      <button type="submit">Apply</button>
    </form>
    ${overview(data)}
    ${workloadLine(data)}
    <div id="history-box" data-testid="history"></div>
    <h2>Every device <span class="muted">allocated ${color}: 0% ${HEAT.map((c, i) => `<i class="sw h${i}"></i>`).join("")} 100% <i class="sw gap sick"></i> unhealthy · click a device for its node</span></h2>
    <div class="heatwrap"><canvas id="heatmap" data-testid="heatmap"></canvas></div><div id="tip" hidden></div>
    <div id="node-table-box">${nodeTable(data, params)}</div>`;
  const form = document.getElementById("fleet-filters");
  const apply = (event) => {
    if (event) event.preventDefault();
    const next = new URLSearchParams();
    for (const key of ["vendor", "model", "node", "color"]) {
      const value = form.elements[key].value.trim();
      if (value && !(key === "color" && value === "memory")) next.set(key, value);
    }
    for (const label of form.elements.label.value.split(",")) if (label.trim()) next.append("label", label.trim());
    for (const key of ["sort", "top"]) if (params.get(key)) next.set(key, params.get(key));
    setHash("fleet", next);
  };
  form.addEventListener("submit", apply);
  for (const key of ["vendor", "model", "color"]) form.elements[key].addEventListener("change", () => apply());
  const tableBox = document.getElementById("node-table-box");
  tableBox.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-sort]");
    if (!link) return;
    event.preventDefault();
    const next = new URLSearchParams(params);
    next.set("sort", link.dataset.sort);
    setHash("fleet", next);
  });
  tableBox.addEventListener("change", (event) => {
    if (event.target.id !== "top-n") return;
    const next = new URLSearchParams(params);
    next.set("top", event.target.value);
    setHash("fleet", next);
  });
  drawHistory();
  const canvas = document.getElementById("heatmap");
  const tip = document.getElementById("tip");
  // Drawn after the overview is on screen: the figures paint first.
  requestAnimationFrame(() => {
    const heat = drawHeat(canvas, data, color);
    const at = (event) => {
      const box = canvas.getBoundingClientRect();
      const x = Math.floor((event.clientX - box.left) / heat.size);
      const y = Math.floor((event.clientY - box.top) / heat.size);
      if (x < 0 || x >= heat.perRow) return null;
      return heat.cells[y * heat.perRow + x] || null;
    };
    canvas.addEventListener("mousemove", (event) => {
      const cell = at(event);
      if (!cell) { tip.hidden = true; return; }
      const c = heat.col;
      const node = data.nodes[cell[0]];
      const group = node.groups[cell[1]];
      const r = group[3][cell[2]];
      tip.textContent = `${node.name} · ${group[0]} #${r[c.index]} ${group[1]}${r[c.healthy] ? "" : " (unhealthy)"}\n` +
        `memory ${bytes(r[c.memory_used_mib])} of ${bytes(r[c.memory_cap_mib])} (${percent(r[c.memory_used_mib], r[c.memory_cap_mib])})\n` +
        `compute ${percent(r[c.compute_used_percent], r[c.compute_cap_percent])} · slots ${r[c.slots_used]} of ${r[c.slots]}${r[c.exclusive] ? ", exclusive" : ""}\n` +
        `free ${(r[c.free_units] / 1000).toFixed(2)} GPU · click: node page`;
      tip.style.left = (event.clientX + 12) + "px";
      tip.style.top = (event.clientY + 12) + "px";
      tip.hidden = false;
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (event) => {
      const cell = at(event);
      if (cell) location.hash = "#/node/" + encodeURIComponent(data.nodes[cell[0]].name);
    });
    main.dataset.heat = String(Date.now());
  });
}

async function showFleet(params, mine) {
  const path = "/api/v1/fleet?" + fleetQuery(params).toString();
  try {
    const headers = fleetTag && fleetData && fleetData.path === path ? { "If-None-Match": fleetTag } : {};
    const response = await api(path, { headers });
    if (mine !== generation) return;
    if (response.status === 200) {
      const data = await response.json();
      fleetTag = response.headers.get("ETag");
      fleetData = { path, data };
      renderFleet(data, params);
      main.dataset.rendered = String(Date.now());
      setStatus(statusText(data.status));
    } else if (response.status !== 304) {
      const body = await response.json().catch(() => ({}));
      main.innerHTML = `<p class="error">${esc(body.error || response.status)}</p>`;
    } else if (!main.querySelector("#heatmap")) {
      renderFleet(fleetData.data, params);
    }
  } catch (error) {
    setStatus("not reachable: " + error.message, true);
  }
  refreshHistory(mine);
  schedule(() => showFleet(params, mine), FLEET_POLL_MS, mine);
}

// ---- allocated versus used over time ----------------------------------------------------

// Asked at most every HISTORY_POLL_MS and never twice at once (Prometheus may take its timeout
// to answer); not awaited, so the fleet's own polling never waits for it.
async function refreshHistory(mine) {
  if (historyBusy || (history && Date.now() - history.at < HISTORY_POLL_MS)) return;
  historyBusy = true;
  try {
    history = { at: Date.now(), data: await getJSON("/api/v1/history?minutes=" + HISTORY_MINUTES), error: null };
  } catch (error) {
    history = { at: Date.now(), data: null, error: error.message };
  } finally {
    historyBusy = false;
  }
  if (mine === generation) drawHistory();
}

const HISTORY_SERIES = [["allocated_mib", "allocated", "#2555c8"], ["used_mib", "used", "#e07b00"]];

function clock(seconds) { return new Date(seconds * 1000).toTimeString().slice(0, 5); }

function drawHistory() {
  const box = document.getElementById("history-box");
  if (!box || !history) return;
  const title = `<h2>Device memory, last ${HISTORY_MINUTES} minutes <span class="muted">fleet-wide, from Prometheus</span></h2>`;
  if (history.error) {
    box.innerHTML = `${title}<p class="error" data-testid="history-error">${esc(history.error)}</p>`;
    return;
  }
  const h = history.data;
  if (!h.configured) {
    box.innerHTML = `<p class="muted" data-testid="history-off">${esc(h.message)}</p>`;
    return;
  }
  const latest = (points) => (points.length ? bytes(points[points.length - 1][1]) : "no data");
  const legend = HISTORY_SERIES.map(([key, label], i) => `<i class="sw hist${i}"></i> ${label} <b data-testid="history-${label}">${latest(h.series[key])}</b>`).join(" · ");
  box.innerHTML = `${title}<p class="muted">${legend} <span>(now)</span></p><canvas id="history-chart" data-testid="history-chart"></canvas>`;
  const canvas = document.getElementById("history-chart");
  const width = Math.max(240, Math.min(900, box.clientWidth));
  const height = 160;
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  const left = 64;
  const bottom = height - 18;
  const top = 6;
  let max = 0;
  for (const [key] of HISTORY_SERIES) for (const p of h.series[key]) max = Math.max(max, p[1]);
  max = max > 0 ? max * 1.1 : 1024;
  const x = (t) => left + ((t - h.start) / Math.max(1, h.end - h.start)) * (width - left - 4);
  const y = (v) => bottom - (v / max) * (bottom - top);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#667085";
  ctx.strokeStyle = "#e4e7ec";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const f of [0, 0.5, 1]) {
    const v = (max / 1.1) * f;
    ctx.beginPath(); ctx.moveTo(left, y(v) + 0.5); ctx.lineTo(width - 4, y(v) + 0.5); ctx.stroke();
    ctx.fillText(bytes(v), left - 6, y(v));
  }
  ctx.textBaseline = "top";
  for (const [t, align] of [[h.start, "left"], [(h.start + h.end) / 2, "center"], [h.end, "right"]]) {
    ctx.textAlign = align;
    ctx.fillText(clock(t), x(t), bottom + 4);
  }
  ctx.lineWidth = 2;
  for (const [key, , colour] of HISTORY_SERIES) {
    const points = h.series[key];
    ctx.strokeStyle = colour;
    ctx.beginPath();
    points.forEach((p, i) => (i ? ctx.lineTo(x(p[0]), y(p[1])) : ctx.moveTo(x(p[0]), y(p[1]))));
    ctx.stroke();
  }
  canvas.dataset.points = HISTORY_SERIES.map(([key]) => h.series[key].length).join(",");
  main.dataset.history = String(history.at);
}

function statusText(status) {
  if (!status) return "";
  const state = !status.synced ? "reading the cluster" : (status.leader ? "leader" : "standby replica");
  return `${state} · updated ${new Date().toLocaleTimeString()}`;
}

// ---- node -------------------------------------------------------------------------------

// The node's CPU and memory: allocatable as the Node says; what is used, where the scheduler
// books it (kube-scheduler books them for the extender's nodes).
function hostLine(d) {
  const cpu = d.cpu_milli;
  const mem = d.memory_mib;
  const cores = (m) => (m / 1000).toLocaleString("en-US", { maximumFractionDigits: 1 });
  const cpuText = cpu.allocatable == null ? "unknown" : (cpu.used == null ? "" : cores(cpu.used) + " of ") + cores(cpu.allocatable) + " cores";
  const memText = mem.allocatable == null ? "unknown" : (mem.used == null ? "" : bytes(mem.used) + " of ") + bytes(mem.allocatable);
  const note = cpu.used == null ? " (allocatable; kube-scheduler books CPU and memory, xpushare the devices)" : " used";
  return `CPU <span data-k="cpu">${cpuText}</span> · memory <span data-k="memory">${memText}</span>${note}`;
}

function renderNode(d) {
  const live = d.live ? d.live.devices : {};
  const devices = d.devices.map((x) => {
    const l = live[x.id] || {};
    return `<tr data-testid="device-row" data-id="${esc(x.id)}"><td>${esc(x.vendor)}</td><td class="n">${x.index}</td><td>${esc(x.id)}</td><td>${esc(x.model)}</td>
      <td class="${x.healthy ? "yes" : "no"}">${x.healthy ? "healthy" : "unhealthy"}</td>
      <td class="n" data-k="memory_used_mib">${x.memory_used_mib}</td><td class="n" data-k="memory_cap_mib">${x.memory_cap_mib}</td>
      <td class="n" data-k="compute_used_percent">${x.compute_used_percent}</td><td class="n">${x.compute_cap_percent}</td>
      <td class="n" data-k="slots_used">${x.slots_used} / ${x.slots}</td><td class="n">${(x.free_units / 1000).toFixed(3)}</td>
      <td class="n" data-k="live_util">${l.utilization === undefined ? "" : (l.utilization * 100).toFixed(0) + "%"}</td>
      <td class="n" data-k="live_mem">${l.memory_used_bytes === undefined ? "" : (l.memory_used_bytes / 1048576).toFixed(0)}</td></tr>`;
  }).join("");
  const shares = d.shares.map((s) => `<tr data-testid="share-row"><td>${esc(s.device_id)}</td>
      <td>${s.pod ? `<a href="#/pod/${encodeURIComponent(s.namespace)}/${encodeURIComponent(s.pod)}">${esc(s.namespace)}/${esc(s.pod)}</a>` : esc(s.key)}</td>
      <td>${esc(s.container)}${s.init ? " (init)" : ""}</td><td class="n" data-k="memory_mib">${s.memory_mib}</td>
      <td class="n" data-k="compute_percent">${s.compute_percent}${s.exclusive ? " (exclusive)" : ""}</td>
      <td>${esc(when(s.since))}</td><td>${s.reserved ? "binding" : (s.started ? "running" : "bound")}</td></tr>`).join("");
  const frag = d.fragmentation_gpus ? Object.entries(d.fragmentation_gpus).map(([v, f]) => `${esc(v)} ${f.toFixed(3)}`).join(", ") : "not measured";
  const labels = Object.entries(d.labels).map(([k, v]) => `<code>${esc(k)}=${esc(v)}</code>`).join(" ");
  main.innerHTML = `<h1>Node <span data-testid="node-name">${esc(d.name)}</span></h1>
    <p>fragmented GPUs: <span data-testid="node-frag">${frag}</span>${d.handoff && !d.handoff.served ? ` · handing devices to ${esc(d.handoff.pod)}` : ""}</p>
    <p class="muted" data-testid="host">${hostLine(d)}</p>
    <h2>Devices</h2><table data-testid="devices"><thead><tr><th>vendor</th><th class="n">index</th><th>id</th><th>model</th><th>health</th>
      <th class="n">memory used MiB</th><th class="n">of MiB</th><th class="n">compute used %</th><th class="n">of %</th><th class="n">slots</th><th class="n">free GPU</th>
      <th class="n">live util</th><th class="n">live MiB</th></tr></thead><tbody>${devices}</tbody></table>
    <p class="muted" data-testid="live-note">${d.live_error ? "live usage: " + esc(d.live_error) : "live usage from Prometheus"}</p>
    <h2>Shares</h2><table data-testid="shares"><thead><tr><th>device</th><th>pod</th><th>container</th><th class="n">memory MiB</th>
      <th class="n">compute %</th><th>since</th><th>state</th></tr></thead><tbody>${shares}</tbody></table>
    <h2>Labels</h2><p>${labels}</p>`;
}

async function showNode(name, mine) {
  try {
    const d = await getJSON("/api/v1/nodes/" + encodeURIComponent(name));
    if (mine !== generation) return;
    renderNode(d);
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (error) {
    if (mine === generation) main.innerHTML = `<p class="error" data-testid="error">${esc(error.message)}</p>`;
  }
  schedule(() => showNode(name, mine), DETAIL_POLL_MS, mine);
}

// ---- explanations (Pending pods, what-if) -----------------------------------------------

function renderFit(e) {
  const containers = e.containers.map((c, i) => {
    const reasons = Object.entries(c.reasons).map(([r, n]) => `<tr data-testid="reason"><td>${esc(r)}</td><td class="n">${n}</td></tr>`).join("");
    const devices = c.devices.map((s) => `${esc(s.device_id)} (${s.memory_mib} MiB, ${s.exclusive ? "exclusive" : s.compute_percent + "% compute"})`).join(", ");
    return `<div data-testid="container" data-i="${i}">container ${i + 1}: <span class="${c.fits ? "yes" : "no"}">${c.fits ? "fits" : "does not fit"}</span>
      ${devices ? " → " + devices : ""}${c.message ? ` <span data-testid="container-message">${esc(c.message)}</span>` : ""}
      ${reasons ? `<table><thead><tr><th>devices turned down, by reason</th><th class="n">count</th></tr></thead><tbody>${reasons}</tbody></table>` : ""}</div>`;
  }).join("");
  return `<div class="fit" data-testid="fit" data-node="${esc(e.node)}"><b>${esc(e.node)}</b>:
    <span data-testid="verdict" class="${e.fits ? "yes" : "no"}">${e.fits ? "FITS" : "DOES NOT FIT"}</span>
    ${e.reason ? ` · why: <span data-testid="why">${esc(e.reason)}</span>` : ""}${containers}</div>`;
}

function renderExplanation(x) {
  const groups = x.groups.map((g) => `<tr data-testid="group"><td class="n" data-k="count">${g.count}</td><td data-k="message">${esc(g.message)}</td>
      <td>${g.unresolvable ? "needs other nodes" : "full now"}</td>
      <td>${g.nodes.map((n) => `<a href="#/node/${encodeURIComponent(n)}">${esc(n)}</a>`).join(" ")}${g.count > g.nodes.length ? " …" : ""}</td></tr>`).join("");
  const fits = x.groups.flatMap((g) => g.explanations).map(renderFit).join("");
  const reasons = (x.reasons || []).map((g) => `<tr data-testid="reason-group"><td class="n" data-k="count">${g.count}</td><td data-k="reason">${esc(g.reason)}</td>
      <td class="muted">${g.unresolvable === g.count ? "needs other nodes" : g.unresolvable ? `${g.count - g.unresolvable} full now, ${g.unresolvable} need other nodes` : "full now"}</td>
      <td>${g.nodes.map((n) => `<a href="#/node/${encodeURIComponent(n)}">${esc(n)}</a>`).join(" ")}${g.count > g.nodes.length ? " …" : ""}</td></tr>`).join("");
  const tooLarge = (x.too_large || []).map((t) => `<li>${esc(t)}</li>`).join("");
  const ranking = x.ranking.map((r) => `<tr data-testid="ranked"><td><a href="#/node/${encodeURIComponent(r.node)}">${esc(r.node)}</a></td><td class="n">${r.score}</td><td class="n">${r.policy_score}</td></tr>`).join("");
  // One line, each reason once with its count; /filter's own words, which repeat a reason
  // for every figure they differ by, are each listed once under "Each refusal".
  return `<p data-testid="summary-line">${esc(x.headline ?? x.summary)}</p>
    ${x.asks ? `<p class="muted">asks: ${esc(x.asks)} · policy ${esc(x.policy)} · ${x.nodes_considered} nodes considered</p>` : ""}
    ${x.best ? `<h2>Would go to <span data-testid="best-node">${esc(x.best.node)}</span></h2>${renderFit(x.best)}` : ""}
    ${ranking ? `<h2>Nodes that fit, best first</h2><table data-testid="ranking"><thead><tr><th>node</th><th class="n">extender score</th><th class="n">policy score</th></tr></thead><tbody>${ranking}</tbody></table>` : ""}
    ${tooLarge ? `<h2>Larger than any device</h2><ul data-testid="too-large">${tooLarge}</ul>` : ""}
    ${reasons ? `<h2>Nodes that do not fit, by reason</h2><table data-testid="reasons"><thead><tr><th class="n">nodes</th><th>why</th><th></th><th>which</th></tr></thead><tbody>${reasons}</tbody></table>` : ""}
    ${groups ? `<details><summary>Each refusal as /filter words it (${x.groups.length})</summary><table data-testid="groups"><thead><tr><th class="n">nodes</th><th>why</th><th></th><th>which</th></tr></thead><tbody>${groups}</tbody></table></details>` : ""}
    ${fits ? `<h2>As <code>xpushare fit</code> explains it</h2>${fits}` : ""}
    <details><summary>/filter's answer</summary><pre data-testid="filter-json">${esc(JSON.stringify(x.filter, null, 1))}</pre></details>`;
}

// ---- pod --------------------------------------------------------------------------------

// An event message longer than this shows its first words, the whole of it folded below.
const EVENT_FOLD = 160;

function eventMessage(message) {
  if (message.length <= EVENT_FOLD) return esc(message);
  return `<details data-testid="event-long"><summary>${esc(message.slice(0, EVENT_FOLD - 40))}…</summary>${esc(message)}</details>`;
}

function renderEvents(events, error) {
  if (error) return `<p class="error">${esc(error)}</p>`;
  if (!events.length) return `<p class="muted">no events</p>`;
  // The API gives the same event once with its count (details.py's event_rows).
  return `<table data-testid="events"><thead><tr><th>last</th><th>type</th><th>reason</th><th class="n">times</th><th>message</th></tr></thead><tbody>${events.map((e) => `<tr data-testid="event"><td>${esc(e.time)}</td><td>${esc(e.type)}</td><td data-k="reason">${esc(e.reason)}</td><td class="n" data-k="count">${esc(e.count)}</td><td data-k="message">${eventMessage(e.message)}</td></tr>`).join("")}</tbody></table>`;
}

function renderPod(p) {
  let body = "";
  if (p.assignment) {
    const a = p.assignment;
    const rows = a.containers.flatMap((c) => c.devices.map((s) => `<tr data-testid="assigned"><td>${esc(c.container)}${c.init ? " (init)" : ""}</td><td>${esc(c.vendor)}</td>
      <td>${esc(s.device_id)}</td><td class="n">${s.index ?? ""}</td><td>${esc(s.model ?? "")}</td><td class="n" data-k="memory_mib">${s.memory_mib}</td>
      <td class="n" data-k="compute_percent">${s.compute_percent}${s.exclusive ? " (exclusive)" : ""}</td></tr>`)).join("");
    body = `<p>on node <a data-testid="pod-node" href="#/node/${encodeURIComponent(a.node)}">${esc(a.node)}</a> since ${esc(when(a.since))}</p>
      <table data-testid="assignment"><thead><tr><th>container</th><th>vendor</th><th>device</th><th class="n">index</th><th>model</th><th class="n">memory MiB</th><th class="n">compute %</th></tr></thead><tbody>${rows}</tbody></table>`;
  } else if (p.explanation) {
    body = renderExplanation(p.explanation);
  } else if (p.state === "other") {
    body = `<p>${p.node ? "bound to node " + esc(p.node) + " without xpushare devices" : "phase " + esc(p.phase)}</p>`;
  } else if (p.explanation_error) {
    body = `<p class="error">${esc(p.explanation_error)}</p>`;
  }
  main.innerHTML = `<h1>Pod <a href="#/namespace/${encodeURIComponent(p.namespace)}">${esc(p.namespace)}</a>/${esc(p.name)} <span data-testid="pod-state" class="muted">${esc(p.state)}</span></h1>${body}
    <h2>Events</h2>${renderEvents(p.events, p.events_error)}`;
}

async function showPod(namespace, name, mine) {
  try {
    const p = await getJSON(`/api/v1/pods/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`);
    if (mine !== generation) return;
    renderPod(p);
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (error) {
    if (mine === generation) main.innerHTML = `<p class="error" data-testid="error">${esc(error.message)}</p>`;
  }
  schedule(() => showPod(namespace, name, mine), DETAIL_POLL_MS, mine);
}

// ---- namespace --------------------------------------------------------------------------

function renderNamespace(x) {
  const rows = x.pods.map((p) => `<tr data-testid="task" data-pod="${esc(p.pod)}"><td><a href="#/pod/${encodeURIComponent(x.namespace)}/${encodeURIComponent(p.pod)}">${esc(p.pod)}</a></td>
    <td><a href="#/node/${encodeURIComponent(p.node)}">${esc(p.node)}</a></td><td>${esc(p.state)}</td>
    <td>${p.devices.map((d) => `<span data-testid="task-device" data-id="${esc(d.device_id)}">${esc(d.model || d.vendor)} ${esc(d.device_id)}: ${bytes(d.memory_mib)}, ${d.exclusive ? "exclusive" : d.compute_percent + "% compute"}</span>`).join("<br>")}</td>
    <td>${esc(when(p.since))}</td></tr>`).join("");
  main.innerHTML = `<h1>Namespace <span data-testid="namespace">${esc(x.namespace)}</span></h1>
    <p>${count(x.pods_total)} pods with devices${x.pods.length < x.pods_total ? `, the first ${x.pods.length} shown` : ""} · ${count(x.devices)} devices · ${bytes(x.memory_mib)} of device memory · ${count(x.compute_percent)}% compute booked</p>
    <table data-testid="tasks"><thead><tr><th>pod</th><th>node</th><th>state</th><th>devices</th><th>since</th></tr></thead><tbody>${rows}</tbody></table>`;
}

async function showNamespace(namespace, mine) {
  try {
    const x = await getJSON(`/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`);
    if (mine !== generation) return;
    renderNamespace(x);
    setStatus("updated " + new Date().toLocaleTimeString());
  } catch (error) {
    if (mine === generation) main.innerHTML = `<p class="error" data-testid="error">${esc(error.message)}</p>`;
  }
  schedule(() => showNamespace(namespace, mine), DETAIL_POLL_MS, mine);
}

// ---- search -----------------------------------------------------------------------------

async function showSearch(params, mine) {
  const q = params.get("q") || "";
  main.innerHTML = `<h1>Search</h1><form id="search-form" class="filters"><label>namespace, pod or node
    <input id="search-q" name="q" value="${esc(q)}"></label><button type="submit">Search</button></form><div id="results"></div>`;
  document.getElementById("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setHash("search", new URLSearchParams({ q: document.getElementById("search-q").value }));
  });
  if (!q) return;
  try {
    const r = await getJSON("/api/v1/search?" + new URLSearchParams({ q }).toString());
    if (mine !== generation) return;
    const shown = (list, total) => list.length < total ? `${total}, the first ${list.length} shown: narrow the search` : String(total);
    const pods = (list) => list.map((p) => `<li data-testid="pod-hit"><a href="#/pod/${encodeURIComponent(p.namespace)}/${encodeURIComponent(p.pod)}">${esc(p.namespace)}/${esc(p.pod)}</a>${p.node ? " on " + esc(p.node) : ""} · <a href="#/namespace/${encodeURIComponent(p.namespace)}">namespace</a></li>`).join("");
    document.getElementById("results").innerHTML = `
      <h2 data-testid="nodes-total">Nodes (${shown(r.nodes, r.nodes_total)})</h2><ul>${r.nodes.map((n) => `<li data-testid="node-hit"><a href="#/node/${encodeURIComponent(n)}">${esc(n)}</a></li>`).join("")}</ul>
      <h2 data-testid="pods-total">Pods with devices (${shown(r.pods, r.pods_total)})</h2><ul>${pods(r.pods)}</ul>
      <h2 data-testid="pending-total">Pending pods (${shown(r.pending, r.pending_total)})</h2><ul>${pods(r.pending)}</ul>
      ${r.pending_error ? `<p class="error">${esc(r.pending_error)}</p>` : ""}`;
  } catch (error) {
    document.getElementById("results").innerHTML = `<p class="error">${esc(error.message)}</p>`;
  }
}

// ---- what-if ----------------------------------------------------------------------------

function encodeSpec(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function decodeSpec(value) {
  try {
    const bin = atob(value.replace(/-/g, "+").replace(/_/g, "/"));
    return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch (error) {
    return "";
  }
}

async function showWhatIf(params, mine) {
  const spec = params.get("spec") ? decodeSpec(params.get("spec")) : "";
  main.innerHTML = `<h1>What if</h1><p class="muted">Paste a Pod (YAML or JSON): where it would go and why, as /filter would answer now. Nothing is created.</p>
    <form id="whatif-form"><textarea id="whatif-spec" data-testid="whatif-spec" spellcheck="false">${esc(spec)}</textarea><br>
    <button type="submit" data-testid="whatif-go">Where would it go?</button></form><div id="whatif-result" data-testid="whatif-result"></div>`;
  document.getElementById("whatif-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = document.getElementById("whatif-spec").value;
    const next = new URLSearchParams({ spec: encodeSpec(text) });
    if (location.hash === "#/whatif?" + next.toString()) route_();
    else setHash("whatif", next);
  });
  if (!spec) return;
  const out = document.getElementById("whatif-result");
  try {
    const response = await api("/api/v1/whatif", { method: "POST", body: spec, headers: { "Content-Type": "application/yaml" } });
    const x = await response.json();
    if (mine !== generation) return;
    out.innerHTML = response.ok ? renderExplanation(x) : `<p class="error" data-testid="error">${esc(x.error)}</p>`;
    out.dataset.done = "1";
  } catch (error) {
    out.innerHTML = `<p class="error">${esc(error.message)}</p>`;
  }
}

// ---- router -----------------------------------------------------------------------------

function route_() {
  generation += 1;
  const mine = generation;
  clearTimeout(timer);
  const { page, args, params } = route();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("on", a.dataset.nav === page);
  delete main.dataset.rendered;
  if (page === "node" && args[0]) showNode(args[0], mine);
  else if (page === "pod" && args.length >= 2) showPod(args[0], args[1], mine);
  else if (page === "namespace" && args[0]) showNamespace(args[0], mine);
  else if (page === "search") showSearch(params, mine);
  else if (page === "whatif") showWhatIf(params, mine);
  else showFleet(params, mine);
}

document.getElementById("quick-search").addEventListener("submit", (event) => {
  event.preventDefault();
  setHash("search", new URLSearchParams({ q: document.getElementById("quick-q").value }));
});
document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("xpushare-token", document.getElementById("token").value.trim());
  document.getElementById("token-box").hidden = true;
  route_();
});
window.addEventListener("hashchange", route_);
route_();
