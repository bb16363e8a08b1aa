// delta serve page, runs & batches: every workspace (#/runs), one workspace (#/runs/<ws>), one
// orchestration (#/runs/<ws>/o/<id>: its stage graph as a picture, per-stage counts, tokens
// and durations, its runs sorted, filtered and paged by the server), and its batch timeline
// (…/timeline: every run as a bar over time, drawn on a canvas so 10,000 runs draw at once).
// Uses app.js's helpers (el, svg, cell, api, href, go, replaceAddress); the run inspector is
// inspector.js. Plain JS, no build step.
"use strict";

const runsState = { page: null };
const PAGE_SIZE = 100;
const ROW_STATUSES = ["FAILED", "RUNNING", "WAITING_FOR_INPUT", "INTERRUPTED", "QUEUED", "COMPLETED"];

function fmtInt(n) { return (n || 0).toLocaleString("en-US"); }
function fmtTokens(tokens) {
  if (tokens === null || tokens === undefined) return "0";
  if (typeof tokens === "number") return fmtInt(tokens);
  return fmtInt(tokens.total_tokens || (tokens.input_tokens || 0) + (tokens.output_tokens || 0));
}
function fmtMs(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 90) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 5400) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}
function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (!isFinite(seconds)) return "";
  if (seconds < 90) return Math.round(seconds) + "s ago";
  if (seconds < 5400) return Math.round(seconds / 60) + "m ago";
  if (seconds < 129600) return Math.round(seconds / 3600) + "h ago";
  return Math.round(seconds / 86400) + "d ago";
}
function statusSpan(status, text) { return el("span", { class: "status-" + status }, text || String(status).replace(/_/g, " ")); }
// A run id without its orchestration's prefix: `map-00042` reads better than the whole id.
function shortRun(runId, orchestrationId) {
  return orchestrationId && runId.startsWith(orchestrationId + "-") ? runId.slice(orchestrationId.length + 1) : runId;
}
function wsQuery(workspace) { return "workspace=" + encodeURIComponent(workspace); }

// Called by app.js: the address says which runs page to show.
function runsPage(route, changedPage) {
  const [, workspace, kind, id, sub, subId] = route.parts;
  const key = [workspace, kind, id, sub === "timeline" ? "timeline" : ""].join("\u0000");
  if (runsState.page && runsState.page.key === key && runsState.page.update) {
    runsState.page.update(route);
    return;
  }
  runsLeave();
  const view = $("runs-view");
  view.replaceChildren();
  let page;
  if (!workspace) page = homePage(view);
  else if (kind === "o" && id && sub === "timeline") page = timelinePage(view, workspace, id, route);
  else if (kind === "o" && id) page = orchestrationPage(view, workspace, id, route);
  else if (kind === "r" && id) page = inspectorPage(view, workspace, id, route);
  else page = workspacePage(view, workspace);
  page.key = key;
  runsState.page = page;
  if (changedPage) $("workspace-view").focus({ preventScroll: true });
}

function runsLeave() {
  if (runsState.page && runsState.page.stop) runsState.page.stop();
  runsState.page = null;
}
function runsDashboardChanged() { if (runsState.page && runsState.page.dashboard) runsState.page.dashboard(); }
function runsResized() { if (runsState.page && runsState.page.resized) runsState.page.resized(); }

// Polls `load` every `ms` while `keepGoing()` says so; stops with the page.
function poller(load, ms, keepGoing) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    await load();
    if (!stopped && keepGoing()) timer = setTimeout(tick, ms);
  };
  return { start: tick, stop() { stopped = true; clearTimeout(timer); }, kick() { clearTimeout(timer); if (!stopped) tick(); } };
}

function crumbs(...items) {
  const box = el("div", { class: "crumbs" });
  items.forEach((item, i) => {
    if (i) box.append(" › ");
    box.append(item.href ? el("a", { href: item.href, title: item.title || item.text }, item.text) : el("span", { title: item.title || item.text }, item.text));
  });
  return box;
}

// ---------- every workspace ----------
function homePage(view) {
  const render = () => {
    view.replaceChildren(el("h1", {}, "Runs & batches"));
    if (!state.workspaces.length) {
      view.append(el("p", { class: "hint" }, "No workspace yet: start with `delta serve -w DIR`, or create a session for a folder (its runs, and those of its workspaces/W001… folders, are shown)."));
    }
    const sorted = state.workspaces.slice().sort((a, b) => String(a.path).localeCompare(String(b.path)));
    for (const workspace of sorted) view.append(workspaceCard(workspace, 5, 8));
  };
  render();
  return { dashboard: render };
}

function workspaceCard(workspace, maxOrchestrations, maxRuns) {
  const card = el("div", { class: "card", "data-workspace": workspace.path });
  card.append(el("h2", { class: "workspace-title" }, el("a", { href: href(["runs", workspace.path]), title: workspace.path }, workspace.path)));
  if (workspace.error) card.append(el("p", { class: "error-text" }, workspace.error));
  const orchestrations = workspace.orchestrations || [];
  if (orchestrations.length) card.append(orchestrationTable(workspace.path, orchestrations.slice(0, maxOrchestrations)));
  const own = (workspace.runs || []).filter((r) => !r.orchestrationId);
  if (own.length) card.append(runTable(workspace.path, own.slice(0, maxRuns)));
  if (orchestrations.length > maxOrchestrations || own.length > maxRuns) {
    card.append(el("a", { href: href(["runs", workspace.path]) }, "all " + orchestrations.length + " orchestrations and " + own.length + " runs of this workspace"));
  }
  if (!orchestrations.length && !own.length && !workspace.error) card.append(el("p", { class: "hint" }, "no runs yet"));
  return card;
}

function orchestrationTable(workspace, orchestrations) {
  const table = el("table", { class: "data orchestrations" },
    el("colgroup", {}, el("col", { style: "width:40%" }), el("col", { style: "width:16%" }), el("col", { style: "width:44%" })),
    el("tr", {}, el("th", {}, "Orchestration"), el("th", {}, "Status"), el("th", {}, "Stages")));
  for (const o of orchestrations) {
    const link = href(["runs", workspace, "o", o.id]);
    const stages = o.stages.map((s) => s.id + " " + s.completed + "/" + s.total + (s.failed ? " (" + s.failed + " failed)" : "")).join(" · ");
    table.append(el("tr", { class: "clickable", "data-orchestration": o.id, onclick: (e) => { if (e.target.tagName !== "A") go(link); } },
      el("td", { title: o.id + " — " + o.plan }, el("a", { href: link }, o.id)),
      el("td", { class: "status" }, statusSpan(o.status)),
      cell(stages)));
  }
  return table;
}

function runTable(workspace, runs) {
  const table = el("table", { class: "data runs" },
    el("colgroup", {}, el("col", { style: "width:30%" }), el("col", { style: "width:15%" }), el("col", { class: "wide-only", style: "width:12%" }),
      el("col", { style: "width:8%" }), el("col", { class: "wide-only", style: "width:10%" }), el("col", { style: "width:10%" }), el("col", { style: "width:25%" })),
    el("tr", {}, ...["Run", "Status", "Agent", "Iter.", "Tokens", "Age", "Task"].map((h, i) => el("th", { class: (i === 2 || i === 4 ? "wide-only" : "") + (i === 3 || i === 4 ? " num" : "") }, h))));
  for (const run of runs) {
    const link = href(["runs", workspace, "r", run.runId]);
    table.append(el("tr", { class: "clickable", "data-run": run.runId, onclick: (e) => { if (e.target.tagName !== "A") go(link); } },
      el("td", { title: run.runId }, el("a", { href: link }, run.runId)),
      el("td", { class: "status" }, statusSpan(run.status)),
      cell(run.agent, { class: "wide-only" }), cell(String(run.iterations), { class: "num" }), cell(fmtTokens(run.tokens), { class: "num wide-only" }),
      cell(age(run.createdAt)), cell(run.task)));
  }
  return table;
}

// ---------- one workspace ----------
function workspacePage(view, path) {
  const render = () => {
    const workspace = state.workspaces.find((w) => w.path === path);
    view.replaceChildren(crumbs({ text: "Runs & batches", href: "#/runs" }, { text: path }), el("h1", {}, path));
    if (!workspace) {
      view.append(el("p", { class: "hint" }, "This workspace is not shown by this server (yet): start it with `delta serve -w " + path + "`, or open a session on it."));
      return;
    }
    view.append(workspaceCard(workspace, 1000, 500));
  };
  render();
  return { dashboard: render };
}

// ---------- one orchestration ----------
function orchestrationPage(view, workspace, id, route) {
  const page = { detail: null, rows: null, error: null, route, loading: null };
  const header = el("div", {});
  const graphBox = el("div", { class: "graph", id: "stage-graph" });
  const stagesBox = el("div", {});
  const tableBox = el("div", { id: "batch-runs" });
  view.append(header, graphBox, stagesBox, tableBox);

  const params = () => page.route.params;
  const stageOf = () => (page.route.parts[4] === "stage" ? page.route.parts[5] : "");
  const address = (changes, stage) => {
    const current = Object.fromEntries(params().entries());
    Object.assign(current, changes);
    const parts = ["runs", workspace, "o", id];
    const s = stage === undefined ? stageOf() : stage;
    if (s) parts.push("stage", s);
    return href(parts, current);
  };

  async function load() {
    const stage = stageOf();
    const p = params();
    const query = new URLSearchParams({ workspace, stage, status: p.get("status") || "", q: p.get("q") || "",
      sort: p.get("sort") || "index", order: p.get("order") || "asc", offset: String(Math.max(0, (Number(p.get("page")) || 1) - 1) * PAGE_SIZE), limit: String(PAGE_SIZE) });
    const base = "/api/orchestrations/" + encodeURIComponent(id);
    try {
      const [detail, rows] = await Promise.all([api("GET", base + "?" + wsQuery(workspace)), api("GET", base + "/runs?" + query)]);
      page.detail = detail; page.rows = rows; page.error = null;
    } catch (e) { page.error = e.message; }
    render();
  }

  function render() {
    const detail = page.detail;
    header.replaceChildren(crumbs({ text: "Runs & batches", href: "#/runs" }, { text: workspace, href: href(["runs", workspace]) }, { text: id }));
    if (page.error) { header.append(el("p", { class: "error-text", role: "alert" }, page.error)); }
    if (!detail) { if (!page.error) header.append(el("p", { class: "hint" }, "loading…")); return; }
    header.append(el("h1", {}, "Orchestration " + id + " ", statusSpan(detail.status)),
      el("div", { class: "meta" },
        el("span", {}, "plan ", el("b", { title: detail.plan }, detail.plan || "?")),
        el("span", {}, el("b", {}, fmtInt(detail.totals.planned)), " runs: ", el("b", {}, fmtInt(detail.totals.completed)), " completed, ",
          el("b", { class: detail.totals.failed ? "status-FAILED" : "" }, fmtInt(detail.totals.failed)), " failed",
          detail.totals.running ? ", " + fmtInt(detail.totals.running) + " running" : "", detail.totals.queued ? ", " + fmtInt(detail.totals.queued) + " queued" : "",
          detail.totals.notStarted ? ", " + fmtInt(detail.totals.notStarted) + " not started" : ""),
        el("span", {}, "tokens ", el("b", {}, fmtTokens(detail.tokens))),
        el("span", {}, "duration ", el("b", {}, fmtMs(detail.durationMs))),
        detail.resumes ? el("span", {}, "resumed " + detail.resumes + "×") : null),
      el("nav", { class: "tabs" }, el("a", { href: address({}, stageOf()), class: "current" }, "Runs"),
        el("a", { href: href(["runs", workspace, "o", id, "timeline"], stageOf() ? { stage: stageOf() } : {}), id: "open-timeline" }, "Timeline")));
    if (detail.graphProblem) header.append(el("p", { class: "hint" }, detail.graphProblem));
    graphBox.replaceChildren(stageGraph(detail, stageOf(), (s) => address({ page: "" }, s === stageOf() ? "" : s)));
    stagesBox.replaceChildren(stageTable(detail, (s) => address({ page: "" }, s)));
    renderRows();
  }

  function renderRows() {
    const detail = page.detail;
    const rows = page.rows;
    const p = params();
    const stage = stageOf();
    const totals = stage ? (detail.stages.find((s) => s.id === stage) || {}).counts || detail.totals : detail.totals;
    const chips = el("div", { class: "toolbar", role: "group", "aria-label": "status" });
    const chip = (label, value, count) => el("button", { class: "chip" + ((p.get("status") || "") === value ? " current" : ""), "data-status": value || "all",
      onclick: () => replaceAddress(address({ status: value, page: "" })) }, label + (count !== undefined ? " " + fmtInt(count) : ""));
    chips.append(el("b", {}, stage ? "Runs of " + stage : "Runs"), chip("All", "", totals.planned - totals.notStarted),
      chip("Failed", "FAILED", totals.failed), chip("Running", "RUNNING", totals.running), chip("Queued", "QUEUED", totals.queued),
      chip("Waiting", "WAITING_FOR_INPUT", totals.waiting), chip("Interrupted", "INTERRUPTED", totals.interrupted), chip("Completed", "COMPLETED", totals.completed));
    if (stage) chips.append(el("a", { href: address({ page: "" }, "") }, "all stages"));
    const search = el("input", { class: "grow", id: "runs-filter", type: "search", placeholder: "filter: run id, index or error", value: p.get("q") || "", "aria-label": "filter runs" });
    let typing = null;
    search.oninput = () => { clearTimeout(typing); typing = setTimeout(() => replaceAddress(address({ q: search.value, page: "" })), 250); };
    const sort = el("select", { id: "runs-sort", "aria-label": "sort by" },
      ...[["index", "by index"], ["status", "by status (failed first)"], ["duration", "by duration"], ["tokens", "by tokens"]]
        .map(([v, t]) => el("option", { value: v, selected: (p.get("sort") || "index") === v }, t)));
    sort.onchange = () => replaceAddress(address({ sort: sort.value, page: "" }));
    const order = el("button", { id: "runs-order", title: "reverse the order", onclick: () => replaceAddress(address({ order: p.get("order") === "desc" ? "asc" : "desc", page: "" })) },
      p.get("order") === "desc" ? "↓ desc" : "↑ asc");
    const kinds = detail.errorKinds.length
      ? el("div", { class: "toolbar" }, el("span", { class: "hint" }, "failed by error kind:"), ...detail.errorKinds.map((k) =>
        el("button", { class: "chip", "data-error-kind": k.kind, onclick: () => replaceAddress(address({ status: "FAILED", q: k.kind, page: "" })) }, k.kind + " " + fmtInt(k.count))))
      : null;
    const tools = el("div", { class: "toolbar" }, search, sort, order);
    tableBox.replaceChildren(chips, kinds || "", tools);
    if (!rows) return;
    const pageNo = Math.max(1, Number(p.get("page")) || 1);
    const pages = Math.max(1, Math.ceil(rows.matched / PAGE_SIZE));
    const table = el("table", { class: "data batch-runs", id: "batch-runs-table" },
      el("colgroup", {}, el("col", { style: "width:7%" }), el("col", { style: "width:24%" }), el("col", { style: "width:14%" }),
        el("col", { class: "wide-only", style: "width:7%" }), el("col", { style: "width:11%" }), el("col", { class: "wide-only", style: "width:9%" }),
        el("col", { class: "wide-only", style: "width:6%" }), el("col", { style: "width:22%" })),
      el("tr", {}, el("th", { class: "num" }, "#"), el("th", {}, "Run"), el("th", {}, "Status"), el("th", { class: "num wide-only" }, "Tries"),
        el("th", { class: "num" }, "Duration"), el("th", { class: "num wide-only" }, "Tokens"), el("th", { class: "num wide-only" }, "Iter."), el("th", {}, "Error")));
    for (const row of rows.rows) {
      const link = href(["runs", workspace, "r", row.runId]);
      table.append(el("tr", { class: "clickable", "data-run": row.runId, "data-status": row.status, onclick: (e) => { if (e.target.tagName !== "A") go(link); } },
        cell(row.index, { class: "num" }),
        el("td", { title: row.runId + (stage ? "" : " (stage " + row.stage + ")") }, el("a", { href: link }, shortRun(row.runId, id))),
        el("td", { class: "status" }, statusSpan(row.status)),
        cell(row.attempts, { class: "num wide-only" }), cell(fmtMs(row.durationMs), { class: "num" }), cell(fmtTokens(row.tokens), { class: "num wide-only" }),
        cell(row.iterations, { class: "num wide-only" }),
        el("td", { title: row.error || "" }, row.errorKind ? el("b", { class: "status-FAILED" }, row.errorKind) : "", row.error ? " " + row.error.slice((row.errorKind || "").length + 2) : "")));
    }
    if (!rows.rows.length) table.append(el("tr", {}, el("td", { colspan: "8", class: "hint" }, rows.total ? "no run matches these filters" : "no run started yet")));
    const pager = el("div", { class: "pager" },
      el("button", { id: "page-prev", disabled: pageNo <= 1, onclick: () => replaceAddress(address({ page: String(pageNo - 1) })) }, "‹ previous"),
      el("span", { id: "page-info" }, rows.matched ? fmtInt(rows.offset + 1) + "–" + fmtInt(rows.offset + rows.rows.length) + " of " + fmtInt(rows.matched) + (rows.matched !== rows.total ? " (filtered from " + fmtInt(rows.total) + ")" : "") : "0 runs"),
      el("button", { id: "page-next", disabled: pageNo >= pages, onclick: () => replaceAddress(address({ page: String(pageNo + 1) })) }, "next ›"));
    tableBox.append(table, pager);
    const q = p.get("q") || "";
    if (q && document.activeElement !== search && page.focusSearch) { search.focus(); search.setSelectionRange(q.length, q.length); }
    window.deltaServe.batchPaintedAt = performance.now();
  }

  const polling = poller(load, 2000, () => !page.detail || page.detail.status === "RUNNING");
  polling.start();
  return {
    update(route) {
      page.focusSearch = document.activeElement && document.activeElement.id === "runs-filter";
      page.route = route;
      polling.kick();
    },
    stop() { polling.stop(); },
  };
}

// The stage graph: a box per stage (progress bar, counts, tokens, duration), an arrow per
// `needs`, stages laid out in columns by depth. Stages not started yet are dashed.
function stageGraph(detail, selected, stageHref) {
  const stages = detail.stages;
  const depth = new Map();
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const stage = stages.find((s) => s.id === id);
    const d = stage && stage.needs.length ? 1 + Math.max(...stage.needs.map((n) => depthOf(n, seen))) : 0;
    depth.set(id, d);
    return d;
  };
  stages.forEach((s) => depthOf(s.id));
  const columns = [];
  for (const s of stages) (columns[depth.get(s.id)] = columns[depth.get(s.id)] || []).push(s);
  const W = 220, H = 94, GX = 60, GY = 18, PAD = 8;
  const tallest = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
  const width = PAD * 2 + columns.length * W + (columns.length - 1) * GX;
  const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
  const position = new Map();
  columns.forEach((column, x) => (column || []).forEach((s, y) => {
    const offset = (tallest - column.length) * (H + GY) / 2;
    position.set(s.id, { x: PAD + x * (W + GX), y: PAD + offset + y * (H + GY) });
  }));
  const picture = svg("svg", { viewBox: "0 0 " + width + " " + height, width: String(width), height: String(height), role: "img", "aria-label": "stage graph" },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
      svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a91a0" }))));
  for (const s of stages) {
    const to = position.get(s.id);
    for (const need of s.needs) {
      const from = position.get(need);
      if (!from) continue;
      const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x - 2, y2 = to.y + H / 2;
      picture.append(svg("path", { class: "edge", d: "M" + x1 + "," + y1 + " C" + (x1 + GX / 2) + "," + y1 + " " + (x2 - GX / 2) + "," + y2 + " " + x2 + "," + y2, "marker-end": "url(#arrow)" }));
    }
  }
  for (const s of stages) {
    const { x, y } = position.get(s.id);
    const c = s.counts;
    const planned = Math.max(c.planned, 1);
    const idle = ["PENDING", "NOT_STARTED", "SKIPPED"].includes(s.status);
    const bar = (from, count, color) => svg("rect", { x: String(x + 10 + (W - 20) * from / planned), y: String(y + 60), width: String((W - 20) * count / planned), height: "7", fill: color });
    const done = c.completed, failed = c.failed, running = c.running + c.waiting;
    const label = c.planned ? fmtInt(done) + "/" + fmtInt(c.planned) + " done" + (failed ? ", " + fmtInt(failed) + " failed" : "") + (running ? ", " + fmtInt(running) + " running" : "") : (idle ? "waits for " + (s.needs.join(", ") || "its start") : "no runs");
    const box = svg("a", { href: stageHref(s.id), class: "box" + (s.id === selected ? " selected" : "") + (idle ? " idle" : ""), "data-stage": s.id, "data-status": s.status },
      svg("title", {}, s.id + ": " + s.status.replace(/_/g, " ").toLowerCase() + "; " + label),
      svg("rect", { class: "frame", x: String(x), y: String(y), width: String(W), height: String(H), rx: "6" }),
      svg("text", { class: "id", x: String(x + 10), y: String(y + 18) }, s.id.length > 26 ? s.id.slice(0, 25) + "…" : s.id),
      svg("text", { class: "status-" + s.status, x: String(x + 10), y: String(y + 35), fill: "currentColor" }, s.status.replace(/_/g, " ").toLowerCase()),
      svg("text", { class: "dim", x: String(x + 10), y: String(y + 52) }, label),
      svg("rect", { x: String(x + 10), y: String(y + 60), width: String(W - 20), height: "7", fill: "#262b36" }),
      bar(0, done, "#3fb950"), bar(done, failed, "#f85149"), bar(done + failed, running, "#5aa9ff"),
      svg("text", { class: "dim", x: String(x + 10), y: String(y + 85) }, fmtTokens(s.tokens) + " tokens" + (s.durationMs != null ? " · " + fmtMs(s.durationMs) : "")));
    picture.append(box);
  }
  return picture;
}

function stageTable(detail, stageHref) {
  const table = el("table", { class: "data stages" },
    el("colgroup", {}, el("col", { style: "width:20%" }), el("col", { style: "width:18%" }), el("col", { style: "width:10%" }), el("col", { style: "width:10%" }),
      el("col", { class: "wide-only", style: "width:10%" }), el("col", { class: "wide-only", style: "width:10%" }), el("col", { style: "width:11%" }), el("col", { style: "width:11%" })),
    el("tr", {}, el("th", {}, "Stage"), el("th", {}, "Status"), el("th", { class: "num" }, "Done"), el("th", { class: "num" }, "Failed"),
      el("th", { class: "num wide-only" }, "Running"), el("th", { class: "num wide-only" }, "Not started"), el("th", { class: "num" }, "Tokens"), el("th", { class: "num" }, "Duration")));
  for (const s of detail.stages) {
    const c = s.counts;
    table.append(el("tr", { "data-stage-row": s.id },
      el("td", { title: s.id + (s.needs.length ? " (needs " + s.needs.join(", ") + ")" : "") }, el("a", { href: stageHref(s.id) }, s.id)),
      el("td", { class: "status" }, statusSpan(s.status)), cell(fmtInt(c.completed) + "/" + fmtInt(c.planned), { class: "num" }),
      cell(fmtInt(c.failed), { class: "num" + (c.failed ? " status-FAILED" : "") }), cell(fmtInt(c.running + c.queued + c.waiting), { class: "num wide-only" }),
      cell(fmtInt(c.notStarted), { class: "num wide-only" }), cell(fmtTokens(s.tokens), { class: "num" }), cell(fmtMs(s.durationMs), { class: "num" })));
  }
  return table;
}

// ---------- the batch timeline ----------
const BAR_COLORS = { FAILED: "#f85149", RUNNING: "#5aa9ff", WAITING_FOR_INPUT: "#bc8cff", INTERRUPTED: "#d29922", QUEUED: "#4a5163", COMPLETED: "#3fb950" };
const PHASE_COLORS = { model: "#39c5cf", tool: "#f0883e", human: "#bc8cff" };
const MAX_PHASE_RUNS = 500;

function timelinePage(view, workspace, id, route) {
  const page = { data: null, phases: null, route, error: null };
  const header = el("div", {});
  const canvas = el("canvas", { class: "timeline-canvas", id: "batch-timeline", tabindex: "0", role: "img", "aria-label": "batch timeline" });
  const legend = el("div", { class: "legend" },
    ...[["queued", BAR_COLORS.QUEUED], ["completed", BAR_COLORS.COMPLETED], ["failed", BAR_COLORS.FAILED], ["running", BAR_COLORS.RUNNING],
      ["interrupted", BAR_COLORS.INTERRUPTED], ["waiting for an answer", BAR_COLORS.WAITING_FOR_INPUT]].map(([t, c]) => el("span", {}, el("i", { style: "background:" + c }), t)),
    el("span", { id: "phase-legend" }, "inside a run: ", el("i", { style: "background:" + PHASE_COLORS.model }), "model ", el("i", { style: "background:" + PHASE_COLORS.tool }), "tool"));
  const note = el("p", { class: "hint", id: "timeline-note" });
  const tip = el("div", { class: "tooltip", id: "timeline-tooltip", hidden: true });
  view.append(header, canvas, legend, note, tip);
  const stage = () => page.route.params.get("stage") || "";
  // The tooltip describes the bar under the pointer as last drawn: a zoom, a redraw or a
  // scroll moves the bars (and a fixed tooltip would stay where it was), so each hides it.
  const hideTip = () => { tip.hidden = true; };
  $("workspace-view").addEventListener("scroll", hideTip, { passive: true });

  async function load() {
    try {
      const base = "/api/orchestrations/" + encodeURIComponent(id);
      const [detail, data] = await Promise.all([api("GET", base + "?" + wsQuery(workspace)),
        api("GET", base + "/timeline?" + wsQuery(workspace) + "&stage=" + encodeURIComponent(stage()))]);
      page.detail = detail; page.data = data; page.error = null;
      if (data.bars.length && data.bars.length <= MAX_PHASE_RUNS) {
        page.phases = await api("GET", base + "/phases?" + wsQuery(workspace) + "&runs=" + encodeURIComponent(data.runIds.join(",")));
      } else page.phases = null;
    } catch (e) { page.error = e.message; }
    render();
  }

  function render() {
    const detail = page.detail;
    header.replaceChildren(crumbs({ text: "Runs & batches", href: "#/runs" }, { text: workspace, href: href(["runs", workspace]) }, { text: id, href: href(["runs", workspace, "o", id]) }, { text: "timeline" }));
    if (page.error) header.append(el("p", { class: "error-text", role: "alert" }, page.error));
    if (!detail) return;
    const select = el("select", { id: "timeline-stage", "aria-label": "zoom to a stage" }, el("option", { value: "" }, "every stage"),
      ...detail.stages.map((s) => el("option", { value: s.id, selected: s.id === stage() }, "stage " + s.id)));
    select.onchange = () => replaceAddress(href(["runs", workspace, "o", id, "timeline"], { stage: select.value }));
    header.append(el("h1", {}, "Orchestration " + id + " ", statusSpan(detail.status)),
      el("nav", { class: "tabs" }, el("a", { href: href(["runs", workspace, "o", id].concat(stage() ? ["stage", stage()] : [])) }, "Runs"), el("a", { href: "#", class: "current", onclick: (e) => e.preventDefault() }, "Timeline")),
      el("div", { class: "toolbar" }, el("label", { for: "timeline-stage" }, "Zoom to "), select));
    draw();
  }

  function draw() {
    hideTip();
    const data = page.data;
    if (!data) return;
    const bars = data.bars;
    const width = Math.max(300, canvas.parentElement.clientWidth - 2);
    const rowH = bars.length ? Math.max(0.5, Math.min(14, 560 / bars.length)) : 14;
    const axisH = 22;
    const height = Math.max(80, Math.ceil(bars.length * rowH) + axisH + 6);
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
    canvas.style.height = height + "px";
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    g.fillStyle = "#171a22"; g.fillRect(0, 0, width, height);
    let t0 = Infinity, t1 = -Infinity;
    for (const [, , , q, s, e] of bars) {
      for (const t of [q, s, e]) if (t != null) { t0 = Math.min(t0, t); t1 = Math.max(t1, t); }
      if (e == null && (q != null || s != null)) t1 = Math.max(t1, data.now);
    }
    if (!isFinite(t0)) { note.textContent = "No run has been handed to the engine yet."; window.deltaServe.timeline = { bars: 0, drawn: true }; return; }
    if (t1 <= t0) t1 = t0 + 1;
    const left = 4, right = width - 4;
    const x = (t) => left + (right - left) * (t - t0) / (t1 - t0);
    // Time axis: about ten ticks at a round step.
    const span = t1 - t0;
    const step = [10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000].find((s) => span / s <= 10) || 3600000;
    g.fillStyle = "#8a91a0"; g.font = "11px system-ui"; g.strokeStyle = "#262b36";
    for (let t = 0; t <= span; t += step) {
      const px = x(t0 + t);
      g.beginPath(); g.moveTo(px, axisH - 4); g.lineTo(px, height); g.stroke();
      g.fillText(fmtMs(t), Math.min(px + 2, width - 50), 12);
    }
    const phases = page.phases;
    bars.forEach(([, , status, q, s, e], i) => {
      const y = axisH + i * rowH;
      const h = Math.max(rowH - (rowH > 3 ? 1 : 0), 0.5);
      const end = e ?? data.now;
      if (q != null) { g.fillStyle = BAR_COLORS.QUEUED; g.fillRect(x(q), y, Math.max(1, x(s ?? end) - x(q)), h); }
      if (s != null) {
        g.fillStyle = BAR_COLORS[data.statuses[status]] || "#888";
        g.fillRect(x(s), y, Math.max(1, x(end) - x(s)), h);
      }
      const runPhases = phases && phases[data.runIds[i]];
      if (runPhases && rowH >= 3) {
        for (const [kind, ps, pe] of runPhases) {
          g.fillStyle = PHASE_COLORS[kind] || "#888";
          g.fillRect(x(ps), y + h * 0.25, Math.max(1, x(pe ?? data.now) - x(ps)), h * 0.5);
        }
      }
    });
    note.textContent = fmtInt(bars.length) + " runs over " + fmtMs(span) + (phases ? "; each run shows its model calls and tool calls." :
      bars.length > MAX_PHASE_RUNS ? "; zoom to a stage of at most " + MAX_PHASE_RUNS + " runs to see each run's model calls and tool calls." : "") +
      " Hover a bar for the run; click it to open the run.";
    page.geometry = { x, t0, t1, rowH, axisH, left, right };
    window.deltaServe.timeline = { bars: bars.length, phases: !!phases, drawn: true };
  }

  const rowAt = (event) => {
    const geometry = page.geometry;
    if (!geometry || !page.data) return -1;
    const rect = canvas.getBoundingClientRect();
    const i = Math.floor((event.clientY - rect.top - geometry.axisH) / geometry.rowH);
    return i >= 0 && i < page.data.bars.length ? i : -1;
  };
  canvas.onmousemove = (event) => {
    const i = rowAt(event);
    if (i < 0) { tip.hidden = true; return; }
    const [index, stageIndex, status, q, s, e] = page.data.bars[i];
    const runId = page.data.runIds[i];
    tip.replaceChildren(el("b", {}, shortRun(runId, id)), " (" + page.data.stages[stageIndex] + " #" + index + ") ", statusSpan(page.data.statuses[status]),
      el("br"), (s != null && q != null ? "queued " + fmtMs(s - q) + ", " : "") + (s != null ? "ran " + fmtMs((e ?? page.data.now) - s) : "not started"));
    tip.style.left = Math.min(event.clientX + 12, window.innerWidth - 300) + "px";
    tip.style.top = (event.clientY + 12) + "px";
    tip.hidden = false;
  };
  canvas.onmouseleave = hideTip;
  canvas.onclick = (event) => {
    const i = rowAt(event);
    if (i >= 0) go(href(["runs", workspace, "r", page.data.runIds[i]]));
  };

  const polling = poller(load, 3000, () => !page.detail || page.detail.status === "RUNNING");
  polling.start();
  return {
    update(next) { hideTip(); page.route = next; polling.kick(); },
    stop() { polling.stop(); $("workspace-view").removeEventListener("scroll", hideTip); tip.remove(); },
    resized() { draw(); },
  };
}
