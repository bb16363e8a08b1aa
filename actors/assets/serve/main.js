// main.js — the page's entry (index.html's one module script): wires the handlers, logs in,
// shows the address and follows the dashboard. Plain ES modules, no build step: each file
// imports what it uses (see docs/serve.md, "The page's scripts").
// Must not: hold logic of its own beyond the start's order; define globals other than the
// automation hook `window.deltaServe` (state.js's `automation`).

import { dashboardChanged, restoreSidebar, setUpSidebar, showAddress, windowResized } from "./app.js";
import { api, login, reloadOnNewToken, server, tokenProblem } from "./api.js";
import { isBareAddress } from "./address.js";
import { connectDashboard } from "./dashboard.js";
import { onAddress, route } from "./router.js";
import { offerAgents, setUpNewSessionForm } from "./sessions.js";
import { automation, state } from "./state.js";
import { screenText, status } from "./terminal.js";

reloadOnNewToken();
setUpNewSessionForm();
setUpSidebar();
onAddress(showAddress);

// Test and automation hooks: the terminal's visible text, the page's REST helper (a test
// calls the API exactly as the page does); the runs pages add theirs.
automation.screenText = screenText;
automation.api = api;
window.deltaServe = automation;

async function start() {
  restoreSidebar();
  try { await login(); } catch (e) { status("cannot log in: " + e.message); }
  // A server started with -w is about runs: a page opened without an address opens there.
  if (server.startView === "runs" && isBareAddress(location.hash)) history.replaceState(null, "", location.pathname + location.search + "#/runs");
  if (!tokenProblem && server.probe) {
    try {
      state.agents = await api("GET", "/api/agents");
      offerAgents(state.agents);
    } catch (e) { status(e.message); }
  }
  window.addEventListener("hashchange", route);
  window.addEventListener("resize", windowResized);
  route();
  if (!tokenProblem && server.probe) connectDashboard(dashboardChanged);
}

start();
