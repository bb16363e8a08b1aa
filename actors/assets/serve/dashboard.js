// dashboard.js — the live feed (/ws/dashboard): sessions, workers and workspaces as the server
// sees them, applied to the state as they come; reconnects with a growing wait, and says
// "no valid token" rather than retrying a token the server refuses.
// Must not: draw (the caller's `changed` does) or send the token to a server not proven to be
// this page's (api.js decides).

import { $ } from "./dom.js";
import { connectionLost, server, serverVerified, showTokenProblem, tokenProblem, tokenRejected, wsProtocols, wsUrl } from "./api.js";
import { applyDashboardMessage, state } from "./state.js";

let retryMs = 500;
let changed = () => {};

function retryDashboard() {
  setTimeout(() => connectDashboard(changed), retryMs);
  retryMs = Math.min(retryMs * 2, 8000);
}

// Follows the feed; `onChange(workspacesChanged)` after each message is applied.
export async function connectDashboard(onChange) {
  changed = onChange;
  if (tokenProblem || server.changed) return;
  // The token goes out only to the server this page logged in to (checked after a loss).
  if (!(await serverVerified())) { if (!server.changed) retryDashboard(); return; }
  const socket = new WebSocket(wsUrl("/ws/dashboard"), wsProtocols());
  socket.onopen = () => { retryMs = 500; $("connection").textContent = "live"; $("connection").classList.add("live"); };
  socket.onmessage = (event) => changed(applyDashboardMessage(state, JSON.parse(event.data)));
  socket.onclose = async () => {
    connectionLost();
    if (server.changed || tokenProblem) return;
    $("connection").textContent = "reconnecting…";
    $("connection").classList.remove("live");
    // A browser does not say why an upgrade failed: ask, so a stale token is said, not retried.
    if (await tokenRejected()) { showTokenProblem(); return; }
    if (!server.changed) retryDashboard();
  };
}
