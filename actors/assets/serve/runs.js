// runs.js — the runs & batches view: which page an address (#/runs/…) shows (every workspace,
// one workspace, an orchestration, its timeline, a run), kept while only its filters change,
// stopped when another replaces it.
// Must not: draw a page itself (batch.js, timeline.js, inspector.js do).

import { $ } from "./dom.js";
import { runsPageKey } from "./address.js";
import { homePage, orchestrationPage, workspacePage } from "./batch.js";
import { inspectorPage } from "./inspector.js";
import { timelinePage } from "./timeline.js";

// The page shown: {key, update(route)?, stop()?, dashboard()?, resized()?}.
let current = null;

// The address says which runs page to show.
export function runsPage(route, changedPage) {
  const [, workspace, kind, id, sub] = route.parts;
  const key = runsPageKey(route.parts);
  if (current && current.key === key && current.update) {
    current.update(route);
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
  current = page;
  if (changedPage) $("workspace-view").focus({ preventScroll: true });
}

export function runsLeave() {
  if (current && current.stop) current.stop();
  current = null;
}

export function runsDashboardChanged() { if (current && current.dashboard) current.dashboard(); }

export function runsResized() { if (current && current.resized) current.resized(); }
