// timeline.js — an orchestration's batch timeline (#/runs/<ws>/o/<id>/timeline[?stage=]): every
// run as a bar over time (queued, then running in its status's colour), drawn on a canvas so
// 10,000 runs draw at once; zoomed to a stage of at most 500 runs, each bar shows its model
// calls and tool calls. Hover a bar for the run, click it to open the run.
// Must not: ask for the phases of more than MAX_PHASE_RUNS runs, or leave its tooltip or its
// scroll listener behind when the page stops.

import { api } from "./api.js";
import { href, workspaceQuery } from "./address.js";
import { $, crumbs, el, statusSpan } from "./dom.js";
import { fmtInt, fmtMs, shortRun } from "./format.js";
import { rowAt, TIMELINE_AXIS_HEIGHT, ticks, timelineRows, timelineSpan, timeScale } from "./geometry.js";
import { poller } from "./poll.js";
import { go, replaceAddress } from "./router.js";
import { automation } from "./state.js";

const BAR_COLORS = { FAILED: "#f85149", RUNNING: "#5aa9ff", WAITING_FOR_INPUT: "#bc8cff", INTERRUPTED: "#d29922", QUEUED: "#4a5163", COMPLETED: "#3fb950" };
const PHASE_COLORS = { model: "#39c5cf", tool: "#f0883e", human: "#bc8cff" };
const MAX_PHASE_RUNS = 500;

function legend() {
  const swatch = (color) => el("i", { style: "background:" + color });
  const statuses = [["queued", BAR_COLORS.QUEUED], ["completed", BAR_COLORS.COMPLETED], ["failed", BAR_COLORS.FAILED],
    ["running", BAR_COLORS.RUNNING], ["interrupted", BAR_COLORS.INTERRUPTED], ["waiting for an answer", BAR_COLORS.WAITING_FOR_INPUT]];
  return el("div", { class: "legend" }, ...statuses.map(([t, c]) => el("span", {}, swatch(c), t)),
    el("span", { id: "phase-legend" }, "inside a run: ", swatch(PHASE_COLORS.model), "model ", swatch(PHASE_COLORS.tool), "tool"));
}

export function timelinePage(view, workspace, id, route) {
  const page = { data: null, phases: null, route, error: null };
  const header = el("div", {});
  const canvas = el("canvas", { class: "timeline-canvas", id: "batch-timeline", tabindex: "0", role: "img", "aria-label": "batch timeline" });
  const note = el("p", { class: "hint", id: "timeline-note" });
  const tip = el("div", { class: "tooltip", id: "timeline-tooltip", hidden: true });
  view.append(header, canvas, legend(), note, tip);
  const stage = () => page.route.params.get("stage") || "";
  // The tooltip describes the bar under the pointer as last drawn: a zoom, a redraw or a
  // scroll moves the bars (and a fixed tooltip would stay where it was), so each hides it.
  const hideTip = () => { tip.hidden = true; };
  $("workspace-view").addEventListener("scroll", hideTip, { passive: true });

  async function load() {
    try {
      const base = "/api/orchestrations/" + encodeURIComponent(id);
      const [detail, data] = await Promise.all([api("GET", base + "?" + workspaceQuery(workspace)),
        api("GET", base + "/timeline?" + workspaceQuery(workspace) + "&stage=" + encodeURIComponent(stage()))]);
      page.detail = detail; page.data = data; page.error = null;
      if (data.bars.length && data.bars.length <= MAX_PHASE_RUNS) {
        page.phases = await api("GET", base + "/phases?" + workspaceQuery(workspace) + "&runs=" + encodeURIComponent(data.runIds.join(",")));
      } else page.phases = null;
    } catch (e) { page.error = e.message; }
    render();
  }

  function render() {
    const detail = page.detail;
    header.replaceChildren(crumbs({ text: "Runs & batches", href: "#/runs" }, { text: workspace, href: href(["runs", workspace]) },
      { text: id, href: href(["runs", workspace, "o", id]) }, { text: "timeline" }));
    if (page.error) header.append(el("p", { class: "error-text", role: "alert" }, page.error));
    if (!detail) return;
    const select = el("select", { id: "timeline-stage", "aria-label": "zoom to a stage" }, el("option", { value: "" }, "every stage"),
      ...detail.stages.map((s) => el("option", { value: s.id, selected: s.id === stage() }, "stage " + s.id)));
    select.onchange = () => replaceAddress(href(["runs", workspace, "o", id, "timeline"], { stage: select.value }));
    const runsHref = href(["runs", workspace, "o", id].concat(stage() ? ["stage", stage()] : []));
    const here = el("a", { href: "#", class: "current", onclick: (e) => e.preventDefault() }, "Timeline");
    header.append(el("h1", {}, "Orchestration " + id + " ", statusSpan(detail.status)),
      el("nav", { class: "tabs" }, el("a", { href: runsHref }, "Runs"), here),
      el("div", { class: "toolbar" }, el("label", { for: "timeline-stage" }, "Zoom to "), select));
    draw();
  }

  function draw() {
    hideTip();
    const data = page.data;
    if (!data) return;
    const bars = data.bars;
    const width = Math.max(300, canvas.parentElement.clientWidth - 2);
    const { rowH, height } = timelineRows(bars.length);
    const axisH = TIMELINE_AXIS_HEIGHT;
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
    canvas.style.height = height + "px";
    const g = canvas.getContext("2d");
    g.scale(ratio, ratio);
    g.fillStyle = "#171a22"; g.fillRect(0, 0, width, height);
    const time = timelineSpan(bars, data.now);
    if (!time) { note.textContent = "No run has been handed to the engine yet."; automation.timeline = { bars: 0, drawn: true }; return; }
    const { t0, t1 } = time;
    const x = timeScale(t0, t1, 4, width - 4);
    // Time axis: about ten ticks at a round step.
    const span = t1 - t0;
    g.fillStyle = "#8a91a0"; g.font = "11px system-ui"; g.strokeStyle = "#262b36";
    for (const t of ticks(span)) {
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
    const inside = phases ? "; each run shows its model calls and tool calls."
      : bars.length > MAX_PHASE_RUNS ? "; zoom to a stage of at most " + MAX_PHASE_RUNS + " runs to see each run's model calls and tool calls." : "";
    note.textContent = fmtInt(bars.length) + " runs over " + fmtMs(span) + inside + " Hover a bar for the run; click it to open the run.";
    page.rowH = rowH;
    automation.timeline = { bars: bars.length, phases: !!phases, drawn: true };
  }

  const barAt = (event) => {
    if (!page.rowH || !page.data) return -1;
    return rowAt(event.clientY - canvas.getBoundingClientRect().top, page.rowH, page.data.bars.length);
  };
  canvas.onmousemove = (event) => {
    const i = barAt(event);
    if (i < 0) { tip.hidden = true; return; }
    const [index, stageIndex, status, q, s, e] = page.data.bars[i];
    const runId = page.data.runIds[i];
    const times = (s != null && q != null ? "queued " + fmtMs(s - q) + ", " : "") + (s != null ? "ran " + fmtMs((e ?? page.data.now) - s) : "not started");
    tip.replaceChildren(el("b", {}, shortRun(runId, id)), " (" + page.data.stages[stageIndex] + " #" + index + ") ",
      statusSpan(page.data.statuses[status]), el("br"), times);
    tip.style.left = Math.min(event.clientX + 12, window.innerWidth - 300) + "px";
    tip.style.top = (event.clientY + 12) + "px";
    tip.hidden = false;
  };
  canvas.onmouseleave = hideTip;
  canvas.onclick = (event) => {
    const i = barAt(event);
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
