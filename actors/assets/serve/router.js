// router.js — the address bar: which view and selection the current address (#/…) means, the
// scroll position each page had, and moving to another address (a new history entry, or the
// same entry with other filters).
// Must not: draw a view itself (the view shown for an address is the handler main.js gives).

import { $ } from "./dom.js";
import { pagePath, parseAddress } from "./address.js";
import { state } from "./state.js";

let showAddress = () => {};

// Sets what shows an address: handler(route, changedPage), called on every address change.
export function onAddress(handler) { showAddress = handler; }

const scrollMemory = new Map();
let lastPath = null;

export function route() {
  const current = parseAddress(location.hash);
  const path = pagePath(current.hash);
  // A new page opens at its top; going back restores where it was.
  if (lastPath !== null && lastPath !== path) scrollMemory.set(lastPath, $("workspace-view").scrollTop);
  const changedPage = lastPath !== path;
  lastPath = path;
  state.route = current;
  if (current.parts[0] === "runs") {
    state.view = "runs";
  } else {
    state.view = "sessions";
    state.selectedSession = current.parts[0] === "session" ? current.parts[1] || null : state.selectedSession;
    state.selectedWorker = current.parts[2] === "worker" ? current.parts[3] || null : null;
  }
  showAddress(current, changedPage);
  if (state.view === "runs" && changedPage) $("workspace-view").scrollTop = scrollMemory.get(path) || 0;
}

// Another page: a new history entry (the back button comes back here).
export function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// Same page, other filters: the address changes without a new history entry.
export function replaceAddress(hash) {
  history.replaceState(null, "", location.pathname + location.search + hash);
  route();
}
