// batch.js — the runs & batches pages but a run's and the timeline: every workspace (#/runs),
// one workspace (#/runs/<ws>), and one orchestration (#/runs/<ws>/o/<id>: its stage graph as a
// picture, per-stage counts, tokens and durations, its runs sorted, filtered and paged by the
// server).
// Must not: sort, filter or page runs itself (the server does, for 10,000-run batches), or
// keep a page's state past its `stop`.

import { api } from "./api.js";
import { href, orchestrationHref, runsQuery, stageOf, workspaceQuery } from "./address.js";
import { cell, crumbs, el, statusSpan, svg } from "./dom.js";
import { age, clip, fmtInt, fmtMs, fmtTokens, fmtUsd, isIdle, rowsShown, shortRun, stageProgress, stagesSummary, statusWords } from "./format.js";
import { STAGE_BOX, stageLayout } from "./geometry.js";
import { poller } from "./poll.js";
import { go, replaceAddress } from "./router.js";
import { automation, state } from "./state.js";

const PAGE_SIZE = 100;

// A table row that opens `link` when clicked anywhere but on its own links.
const opens = (link) => (e) => { if (e.target.tagName !== "A") go(link); };

// ---------- every workspace ----------
export function homePage(view) {
  const render = () => {
    view.replaceChildren(el("h1", {}, "Runs & batches"));
    if (!state.workspaces.length) {
      view.append(el("p", { class: "hint" }, "No workspace yet: start with `delta serve -w DIR`, or create a session for a folder " +
        "(its runs, and those of its workspaces/W001… folders, are shown)."));
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
    const all = "all " + orchestrations.length + " orchestrations and " + own.length + " runs of this workspace";
    card.append(el("a", { href: href(["runs", workspace.path]) }, all));
  }
  if (!orchestrations.length && !own.length && !workspace.error) card.append(el("p", { class: "hint" }, "no runs yet"));
  return card;
}

// <colgroup> of columns `[width, class?]`.
const columns = (...widths) => el("colgroup", {}, ...widths.map(([width, cls]) => el("col", { class: cls, style: "width:" + width })));

function orchestrationTable(workspace, orchestrations) {
  const table = el("table", { class: "data orchestrations" }, columns(["40%"], ["16%"], ["44%"]),
    el("tr", {}, el("th", {}, "Orchestration"), el("th", {}, "Status"), el("th", {}, "Stages")));
  for (const o of orchestrations) {
    const link = href(["runs", workspace, "o", o.id]);
    table.append(el("tr", { class: "clickable", "data-orchestration": o.id, onclick: opens(link) },
      el("td", { title: o.id + " — " + o.plan }, el("a", { href: link }, o.id)),
      el("td", { class: "status" }, statusSpan(o.status)),
      cell(stagesSummary(o.stages))));
  }
  return table;
}

function runTable(workspace, runs) {
  const headings = [["Run", ""], ["Status", ""], ["Agent", "wide-only"], ["Iter.", "num"], ["Tokens", "num wide-only"],
    ["Cost", "num wide-only"], ["Age", ""], ["Task", ""]];
  const table = el("table", { class: "data runs" },
    columns(["28%"], ["15%"], ["11%", "wide-only"], ["7%"], ["9%", "wide-only"], ["9%", "wide-only"], ["9%"], ["21%"]),
    el("tr", {}, ...headings.map(([h, cls]) => el("th", { class: cls }, h))));
  const now = Date.now();
  for (const run of runs) {
    const link = href(["runs", workspace, "r", run.runId]);
    table.append(el("tr", { class: "clickable", "data-run": run.runId, onclick: opens(link) },
      el("td", { title: run.runId }, el("a", { href: link }, run.runId)),
      el("td", { class: "status" }, statusSpan(run.status)),
      cell(run.agent, { class: "wide-only" }), cell(String(run.iterations), { class: "num" }), cell(fmtTokens(run.tokens), { class: "num wide-only" }),
      cell(fmtUsd(run.costUsd), { class: "num wide-only" }), cell(age(run.createdAt, now)), cell(run.task)));
  }
  return table;
}

// ---------- one workspace ----------
export function workspacePage(view, path) {
  const render = () => {
    const workspace = state.workspaces.find((w) => w.path === path);
    view.replaceChildren(crumbs({ text: "Runs & batches", href: "#/runs" }, { text: path }), el("h1", {}, path));
    if (!workspace) {
      view.append(el("p", { class: "hint" }, "This workspace is not shown by this server (yet): start it with `delta serve -w " + path +
        "`, or open a session on it."));
      return;
    }
    view.append(workspaceCard(workspace, 1000, 500));
  };
  render();
  return { dashboard: render };
}

// ---------- one orchestration ----------
export function orchestrationPage(view, workspace, id, route) {
  const page = { detail: null, rows: null, error: null, route, loading: null };
  const header = el("div", {});
  const graphBox = el("div", { class: "graph", id: "stage-graph" });
  const stagesBox = el("div", {});
  const tableBox = el("div", { id: "batch-runs" });
  view.append(header, graphBox, stagesBox, tableBox);

  const params = () => page.route.params;
  const stage = () => stageOf(page.route.parts);
  const address = (changes, at) => orchestrationHref(workspace, id, params(), changes, at === undefined ? stage() : at);

  async function load() {
    const base = "/api/orchestrations/" + encodeURIComponent(id);
    const query = runsQuery(workspace, stage(), params(), PAGE_SIZE);
    try {
      const [detail, rows] = await Promise.all([api("GET", base + "?" + workspaceQuery(workspace)), api("GET", base + "/runs?" + query)]);
      page.detail = detail; page.rows = rows; page.error = null;
    } catch (e) { page.error = e.message; }
    render();
  }

  function render() {
    const detail = page.detail;
    header.replaceChildren(crumbs({ text: "Runs & batches", href: "#/runs" }, { text: workspace, href: href(["runs", workspace]) }, { text: id }));
    if (page.error) { header.append(el("p", { class: "error-text", role: "alert" }, page.error)); }
    if (!detail) { if (!page.error) header.append(el("p", { class: "hint" }, "loading…")); return; }
    const totals = detail.totals;
    const timelineHref = href(["runs", workspace, "o", id, "timeline"], stage() ? { stage: stage() } : {});
    header.append(el("h1", {}, "Orchestration " + id + " ", statusSpan(detail.status)),
      el("div", { class: "meta" },
        el("span", {}, "plan ", el("b", { title: detail.plan }, detail.plan || "?")),
        el("span", {}, el("b", {}, fmtInt(totals.planned)), " runs: ", el("b", {}, fmtInt(totals.completed)), " completed, ",
          el("b", { class: totals.failed ? "status-FAILED" : "" }, fmtInt(totals.failed)), " failed",
          totals.running ? ", " + fmtInt(totals.running) + " running" : "", totals.queued ? ", " + fmtInt(totals.queued) + " queued" : "",
          totals.notStarted ? ", " + fmtInt(totals.notStarted) + " not started" : ""),
        el("span", {}, "tokens ", el("b", {}, fmtTokens(detail.tokens))),
        el("span", { title: detail.costUsd == null ? "cost unknown: a model had no price (set llm.price)" : "" }, "cost ",
          el("b", { id: "batch-cost" }, fmtUsd(detail.costUsd))),
        el("span", {}, "duration ", el("b", {}, fmtMs(detail.durationMs))),
        detail.resumes ? el("span", {}, "resumed " + detail.resumes + "×") : null),
      el("nav", { class: "tabs" }, el("a", { href: address({}, stage()), class: "current" }, "Runs"),
        el("a", { href: timelineHref, id: "open-timeline" }, "Timeline")));
    if (detail.graphProblem) header.append(el("p", { class: "hint" }, detail.graphProblem));
    graphBox.replaceChildren(stageGraph(detail, stage(), (s) => address({ page: "" }, s === stage() ? "" : s)));
    stagesBox.replaceChildren(stageTable(detail, (s) => address({ page: "" }, s)));
    renderRows();
  }

  function renderRows() {
    const detail = page.detail;
    const rows = page.rows;
    const p = params();
    const at = stage();
    const totals = at ? (detail.stages.find((s) => s.id === at) || {}).counts || detail.totals : detail.totals;
    const chips = el("div", { class: "toolbar", role: "group", "aria-label": "status" });
    const chip = (label, value, count) => el("button", { class: "chip" + ((p.get("status") || "") === value ? " current" : ""), "data-status": value || "all",
      onclick: () => replaceAddress(address({ status: value, page: "" })) }, label + (count !== undefined ? " " + fmtInt(count) : ""));
    chips.append(el("b", {}, at ? "Runs of " + at : "Runs"), chip("All", "", totals.planned - totals.notStarted),
      chip("Failed", "FAILED", totals.failed), chip("Running", "RUNNING", totals.running), chip("Queued", "QUEUED", totals.queued),
      chip("Waiting", "WAITING_FOR_INPUT", totals.waiting), chip("Interrupted", "INTERRUPTED", totals.interrupted),
      chip("Completed", "COMPLETED", totals.completed));
    if (at) chips.append(el("a", { href: address({ page: "" }, "") }, "all stages"));
    const search = el("input", { class: "grow", id: "runs-filter", type: "search", placeholder: "filter: run id, index or error",
      value: p.get("q") || "", "aria-label": "filter runs" });
    let typing = null;
    search.oninput = () => { clearTimeout(typing); typing = setTimeout(() => replaceAddress(address({ q: search.value, page: "" })), 250); };
    const sort = el("select", { id: "runs-sort", "aria-label": "sort by" },
      ...[["index", "by index"], ["status", "by status (failed first)"], ["duration", "by duration"], ["tokens", "by tokens"]]
        .map(([v, t]) => el("option", { value: v, selected: (p.get("sort") || "index") === v }, t)));
    sort.onchange = () => replaceAddress(address({ sort: sort.value, page: "" }));
    const reverse = () => replaceAddress(address({ order: p.get("order") === "desc" ? "asc" : "desc", page: "" }));
    const order = el("button", { id: "runs-order", title: "reverse the order", onclick: reverse }, p.get("order") === "desc" ? "↓ desc" : "↑ asc");
    const kinds = detail.errorKinds.length
      ? el("div", { class: "toolbar" }, el("span", { class: "hint" }, "failed by error kind:"), ...detail.errorKinds.map((k) =>
        el("button", { class: "chip", "data-error-kind": k.kind, onclick: () => replaceAddress(address({ status: "FAILED", q: k.kind, page: "" })) },
          k.kind + " " + fmtInt(k.count))))
      : null;
    const tools = el("div", { class: "toolbar" }, search, sort, order);
    tableBox.replaceChildren(chips, kinds || "", tools);
    if (!rows) return;
    const pageNo = Math.max(1, Number(p.get("page")) || 1);
    const pages = Math.max(1, Math.ceil(rows.matched / PAGE_SIZE));
    const table = el("table", { class: "data batch-runs", id: "batch-runs-table" },
      columns(["7%"], ["22%"], ["14%"], ["6%", "wide-only"], ["10%"], ["9%", "wide-only"], ["9%", "wide-only"], ["5%", "wide-only"], ["18%"]),
      el("tr", {}, el("th", { class: "num" }, "#"), el("th", {}, "Run"), el("th", {}, "Status"), el("th", { class: "num wide-only" }, "Tries"),
        el("th", { class: "num" }, "Duration"), el("th", { class: "num wide-only" }, "Tokens"), el("th", { class: "num wide-only" }, "Cost"),
        el("th", { class: "num wide-only" }, "Iter."),
        el("th", {}, "Error")));
    for (const row of rows.rows) {
      const link = href(["runs", workspace, "r", row.runId]);
      const error = el("td", { title: row.error || "" }, row.errorKind ? el("b", { class: "status-FAILED" }, row.errorKind) : "",
        row.error ? " " + row.error.slice((row.errorKind || "").length + 2) : "");
      table.append(el("tr", { class: "clickable", "data-run": row.runId, "data-status": row.status, onclick: opens(link) },
        cell(row.index, { class: "num" }),
        el("td", { title: row.runId + (at ? "" : " (stage " + row.stage + ")") }, el("a", { href: link }, shortRun(row.runId, id))),
        el("td", { class: "status" }, statusSpan(row.status)),
        cell(row.attempts, { class: "num wide-only" }), cell(fmtMs(row.durationMs), { class: "num" }), cell(fmtTokens(row.tokens), { class: "num wide-only" }),
        cell(fmtUsd(row.costUsd), { class: "num wide-only" }), cell(row.iterations, { class: "num wide-only" }),
        error));
    }
    if (!rows.rows.length) {
      const none = rows.total ? "no run matches these filters" : "no run started yet";
      table.append(el("tr", {}, el("td", { colspan: "8", class: "hint" }, none)));
    }
    const pager = el("div", { class: "pager" },
      el("button", { id: "page-prev", disabled: pageNo <= 1, onclick: () => replaceAddress(address({ page: String(pageNo - 1) })) }, "‹ previous"),
      el("span", { id: "page-info" }, rowsShown(rows)),
      el("button", { id: "page-next", disabled: pageNo >= pages, onclick: () => replaceAddress(address({ page: String(pageNo + 1) })) }, "next ›"));
    tableBox.append(table, pager);
    const q = p.get("q") || "";
    if (q && document.activeElement !== search && page.focusSearch) { search.focus(); search.setSelectionRange(q.length, q.length); }
    automation.batchPaintedAt = performance.now();
  }

  const polling = poller(load, 2000, () => !page.detail || page.detail.status === "RUNNING");
  polling.start();
  return {
    update(next) {
      page.focusSearch = document.activeElement && document.activeElement.id === "runs-filter";
      page.route = next;
      polling.kick();
    },
    stop() { polling.stop(); },
  };
}

// The stage graph: a box per stage (progress bar, counts, tokens, duration), an arrow per
// `needs`, stages laid out in columns by depth (geometry.js). Stages not started yet are dashed.
function stageGraph(detail, selected, stageHref) {
  const stages = detail.stages;
  const { width: W, height: H, gapX: GX } = STAGE_BOX;
  const { width, height, position } = stageLayout(stages);
  const arrow = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a91a0" }));
  const picture = svg("svg", { viewBox: "0 0 " + width + " " + height, width: String(width), height: String(height), role: "img", "aria-label": "stage graph" },
    svg("defs", {}, arrow));
  for (const s of stages) {
    const to = position.get(s.id);
    for (const need of s.needs) {
      const from = position.get(need);
      if (!from) continue;
      const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x - 2, y2 = to.y + H / 2;
      const d = "M" + x1 + "," + y1 + " C" + (x1 + GX / 2) + "," + y1 + " " + (x2 - GX / 2) + "," + y2 + " " + x2 + "," + y2;
      picture.append(svg("path", { class: "edge", d, "marker-end": "url(#arrow)" }));
    }
  }
  for (const s of stages) {
    const { x, y } = position.get(s.id);
    const c = s.counts;
    const planned = Math.max(c.planned, 1);
    const idle = isIdle(s);
    const bar = (from, count, color) =>
      svg("rect", { x: String(x + 10 + (W - 20) * from / planned), y: String(y + 60), width: String((W - 20) * count / planned), height: "7", fill: color });
    const done = c.completed, failed = c.failed, running = c.running + c.waiting;
    const label = stageProgress(s);
    const words = statusWords(s.status).toLowerCase();
    const tokensAndTime = fmtTokens(s.tokens) + " tokens" + (s.durationMs != null ? " · " + fmtMs(s.durationMs) : "");
    const box = svg("a", { href: stageHref(s.id), class: "box" + (s.id === selected ? " selected" : "") + (idle ? " idle" : ""),
      "data-stage": s.id, "data-status": s.status },
      svg("title", {}, s.id + ": " + words + "; " + label + "; cost " + fmtUsd(s.costUsd)),
      svg("rect", { class: "frame", x: String(x), y: String(y), width: String(W), height: String(H), rx: "6" }),
      svg("text", { class: "id", x: String(x + 10), y: String(y + 18) }, clip(s.id, 26)),
      svg("text", { class: "status-" + s.status, x: String(x + 10), y: String(y + 35), fill: "currentColor" }, words),
      svg("text", { class: "dim", x: String(x + 10), y: String(y + 52) }, label),
      svg("rect", { x: String(x + 10), y: String(y + 60), width: String(W - 20), height: "7", fill: "#262b36" }),
      bar(0, done, "#3fb950"), bar(done, failed, "#f85149"), bar(done + failed, running, "#5aa9ff"),
      svg("text", { class: "dim", x: String(x + 10), y: String(y + 85) }, tokensAndTime));
    picture.append(box);
  }
  return picture;
}

function stageTable(detail, stageHref) {
  const table = el("table", { class: "data stages" },
    columns(["18%"], ["16%"], ["9%"], ["9%"], ["9%", "wide-only"], ["9%", "wide-only"], ["10%"], ["10%", "wide-only"], ["10%"]),
    el("tr", {}, el("th", {}, "Stage"), el("th", {}, "Status"), el("th", { class: "num" }, "Done"), el("th", { class: "num" }, "Failed"),
      el("th", { class: "num wide-only" }, "Running"), el("th", { class: "num wide-only" }, "Not started"), el("th", { class: "num" }, "Tokens"),
      el("th", { class: "num wide-only" }, "Cost"), el("th", { class: "num" }, "Duration")));
  for (const s of detail.stages) {
    const c = s.counts;
    table.append(el("tr", { "data-stage-row": s.id },
      el("td", { title: s.id + (s.needs.length ? " (needs " + s.needs.join(", ") + ")" : "") }, el("a", { href: stageHref(s.id) }, s.id)),
      el("td", { class: "status" }, statusSpan(s.status)), cell(fmtInt(c.completed) + "/" + fmtInt(c.planned), { class: "num" }),
      cell(fmtInt(c.failed), { class: "num" + (c.failed ? " status-FAILED" : "") }), cell(fmtInt(c.running + c.queued + c.waiting), { class: "num wide-only" }),
      cell(fmtInt(c.notStarted), { class: "num wide-only" }), cell(fmtTokens(s.tokens), { class: "num" }),
      cell(fmtUsd(s.costUsd), { class: "num wide-only" }), cell(fmtMs(s.durationMs), { class: "num" })));
  }
  return table;
}
