// app.js — the page's frame: which view the address shows (sessions or runs & batches), the
// navigation, the tab's title, the folding sidebar, and what a dashboard message or a resize
// redraws.
// Must not: reach the server, or know how a view draws itself (sessions.js, runs.js).

import { $ } from "./dom.js";
import { runsDashboardChanged, runsLeave, runsPage, runsResized } from "./runs.js";
import { renderSessions, renderSessionView } from "./sessions.js";
import { askingCount, state } from "./state.js";
import { detachTerminal, refitTerminal } from "./terminal.js";

// The tab's title says when an agent waits for an answer.
function renderTitle() {
  const asking = askingCount(state.sessions);
  document.title = asking ? "(" + asking + " asking) delta serve" : "delta serve";
}

export function render() {
  renderTitle();
  $("nav-sessions").classList.toggle("current", state.view === "sessions");
  $("nav-runs").classList.toggle("current", state.view === "runs");
  $("session-view").hidden = state.view !== "sessions";
  $("runs-view").hidden = state.view !== "runs";
  renderSessions();
  if (state.view === "sessions") { runsLeave(); renderSessionView(); }
  else detachTerminal();
}

// What router.js calls for each address.
export function showAddress(route, changedPage) {
  render();
  if (state.view === "runs") runsPage(route, changedPage);
}

// What a dashboard message redraws.
export function dashboardChanged(workspacesChanged) {
  render();
  if (state.view === "runs" && workspacesChanged) runsDashboardChanged();
}

export function windowResized() { if (state.view === "runs") runsResized(); }

// ---------- the sidebar ----------
// It folds away (remembered per browser); on a narrow window it starts folded.
const SIDEBAR_KEY = "delta-serve-sidebar";

function setSidebar(shown) {
  document.body.classList.toggle("sidebar-hidden", !shown);
  $("toggle-sidebar").setAttribute("aria-expanded", shown ? "true" : "false");
  refitTerminal();
}

export function setUpSidebar() {
  $("toggle-sidebar").onclick = () => {
    const shown = document.body.classList.contains("sidebar-hidden");
    localStorage.setItem(SIDEBAR_KEY, shown ? "shown" : "hidden");
    setSidebar(shown);
    if (state.view === "runs") runsResized();
  };
}

// The sidebar as this browser last left it, else shown on a wide window.
export function restoreSidebar() {
  const saved = localStorage.getItem(SIDEBAR_KEY);
  setSidebar(saved ? saved === "shown" : window.innerWidth >= 1000);
}
