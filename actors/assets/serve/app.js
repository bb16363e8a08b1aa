// delta serve page: the token, the REST and WebSocket helpers, the addresses (#/...), the
// dashboard feed (/ws/dashboard), sessions and workers (xterm.js over
// /ws/session/.../worker/...), the new-session form and the layout. The runs & batches pages
// are batch.js (workspaces, orchestrations, batch timeline) and inspector.js (a run).
// Plain JS, no build step.
"use strict";

const state = {
  sessions: [],
  workspaces: [],
  agents: [],
  selectedSession: null,
  selectedWorker: null,
  view: "sessions",
  route: null,
};

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "onclick" || key === "oninput" || key === "onchange" || key === "onkeydown" || key === "onsubmit") node[key] = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
};
const SVG_NS = "http://www.w3.org/2000/svg";
const svg = (tag, attrs = {}, ...children) => {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "onclick") node.onclick = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
};
// A cell cut to its width shows its whole text as a tooltip.
const cell = (text, attrs = {}) => el("td", Object.assign({ title: String(text ?? "") }, attrs), String(text ?? ""));

// ---------- the token ----------
// `delta serve` prints http://HOST/#token=…: a fragment is never sent to a server nor logged.
// The page keeps the token in localStorage, which is scoped to this scheme, host *and port*
// (unlike a cookie, other servers on 127.0.0.1 never see it), so reloads and new tabs find it,
// and removes it from the address bar. REST calls send it as `Authorization: Bearer`; the
// WebSockets, which cannot carry headers, offer it as the subprotocol `delta.token.<hex>`
// beside `delta.v1` (the server answers `delta.v1` only).
//
// Login: a token from the fragment is stored only once the server confirms it
// (GET /api/identity answers 200 to it): any site can link to /#token=x, and an unconfirmed
// token never replaces one that works. The login's answer is this server start's identity
// (a probe and its proof). After any connection loss (a socket closed, a request that got no
// answer) the page asks GET /api/identity/check with the probe and *without* the token, and
// sends the token again only to a server that answers the proof: a program that took the
// port after delta serve stopped knows neither, and is sent nothing.
const TOKEN_KEY = "delta-serve-token";
let tokenProblem = false;
const server = { probe: null, proof: null, verified: false, checking: null, changed: false, startView: "sessions" };

// The token of a /#token=… address, taken out of the address bar (null without one).
function tokenFromUrl() {
  const match = location.hash.match(/^#token=([^&]*)$/);
  if (!match) return null;
  let token = match[1];
  try { token = decodeURIComponent(token); } catch (e) { /* kept as written */ }
  history.replaceState(null, "", location.pathname + location.search);
  return token;
}

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

function authHeaders() { return { Authorization: "Bearer " + token() }; }

function wsProtocols() {
  const hex = Array.from(new TextEncoder().encode(token()), (b) => b.toString(16).padStart(2, "0")).join("");
  return ["delta.v1", "delta.token." + hex];
}

// This server's identity for `candidate`, or null when it refuses the token (throws when
// nobody answers). The one request that sends a token not yet known to work.
async function identityFor(candidate) {
  const response = await fetch("/api/identity", { headers: { Authorization: "Bearer " + candidate }, cache: "no-store", redirect: "error" });
  if (response.status === 401) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok || !data || !data.probe || !data.proof) throw new Error("unexpected answer to the login (HTTP " + response.status + ")");
  return data;
}

function adopt(identity) {
  Object.assign(server, { probe: identity.probe, proof: identity.proof, verified: true, changed: false, startView: identity.startView || "sessions" });
}

// At start: the link's token if the server confirms it, else the stored one if it works.
async function login() {
  const offered = tokenFromUrl();
  const stored = token();
  if (offered !== null && offered !== stored) {
    const identity = await identityFor(offered);
    if (identity) { localStorage.setItem(TOKEN_KEY, offered); adopt(identity); return; }
    notice("The link's token was refused by this server, so it was not kept" + (stored ? ": this page goes on with the token it had." : "."));
  }
  if (!stored) { showTokenProblem(); return; }
  const identity = await identityFor(stored);
  if (identity) adopt(identity);
  else showTokenProblem();
}

function connectionLost() { server.verified = false; }

// Whether the token may go out now: at once while nothing was lost since the last check;
// otherwise after the server proved it is the one this page logged in to. False while no
// one answers (try again later) and for good once another program answered.
function serverVerified() {
  if (server.verified) return Promise.resolve(true);
  if (server.changed || !server.probe) return Promise.resolve(false);
  if (!server.checking) server.checking = checkServer().finally(() => { server.checking = null; });
  return server.checking;
}

async function checkServer() {
  let response;
  try { response = await fetch("/api/identity/check", { headers: { "X-Delta-Probe": server.probe }, cache: "no-store", redirect: "error" }); }
  catch (e) { return false; } // nobody answers (yet)
  const data = await response.json().catch(() => null);
  if (response.ok && data && data.proof === server.proof) { server.verified = true; return true; }
  showServerChanged();
  return false;
}

function banner(text) {
  const box = $("token-problem");
  box.textContent = text;
  box.hidden = false;
  $("connection").classList.remove("live");
}

function notice(text) {
  const box = $("token-notice");
  box.textContent = text;
  box.hidden = false;
}

function showTokenProblem() {
  tokenProblem = true;
  const why = token()
    ? "This page's token is not this server's: delta serve makes a new one each time it starts (unless DELTA_SERVE_TOKEN sets it)."
    : "This page has no token yet.";
  banner(why + " Open the URL that `delta serve` printed (http://" + location.host +
    "/#token=…) once in this browser; reloads and new tabs then keep working.");
  $("connection").textContent = "no valid token";
}

function showServerChanged() {
  server.changed = true;
  server.verified = false;
  banner("This page stopped talking to http://" + location.host + ": the server answering there now is not the delta serve this page " +
    "was opened from (that one stopped or restarted, and another program may hold its port), so the page did not send it its token. " +
    "Start delta serve again and open the URL it prints.");
  $("connection").textContent = "server changed";
}

// Opening the printed URL in another tab stores a new token: pick it up here too.
window.addEventListener("storage", (event) => { if (event.key === TOKEN_KEY && (tokenProblem || server.changed)) location.reload(); });

// Whether the server refuses the token (asked only of a verified server).
async function tokenRejected() {
  if (!(await serverVerified())) return false;
  try { return (await fetch("/api/agents", { headers: authHeaders() })).status === 401; }
  catch (e) { connectionLost(); return false; }
}

class ApiError extends Error {
  constructor(message, status, code) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  if (!(await serverVerified())) {
    throw server.changed ? new ApiError("not sent: the server at this address is not the delta serve this page was opened from", 0, "server_changed")
      : new ApiError("delta serve does not answer; retrying", 0, "offline");
  }
  const options = { method, headers: authHeaders() };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try { response = await fetch(path, options); }
  catch (e) { connectionLost(); throw new ApiError("delta serve does not answer (" + e.message + ")", 0, "offline"); }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (response.status === 401) showTokenProblem();
  if (!response.ok) throw new ApiError((data && data.error) || response.statusText, response.status, data && data.code);
  return data;
}

function wsUrl(path) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
}

// ---------- addresses ----------
// #/                                  sessions
// #/session/<sid>[/worker/<wid>]      a session, a worker's terminal
// #/runs                              every workspace's runs and orchestrations
// #/runs/<ws>                         one workspace (<ws>: its path, URL-encoded)
// #/runs/<ws>/o/<id>[/stage/<s>|/timeline][?status=&q=&sort=&order=&page=]   an orchestration
// #/runs/<ws>/r/<run>[/call/<n>|/tool/<id>]                                 a run, a model or tool call
// Every view is an address: reload, share or open it in a new tab (the token is in
// localStorage); the back button goes back. Filters replace the address, pages push it.
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const cut = raw.indexOf("?");
  const path = cut < 0 ? raw : raw.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : raw.slice(cut + 1));
  const parts = path.split("/").filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  return { parts, params, hash: location.hash };
}

function href(parts, params) {
  const path = "#/" + parts.map((p) => encodeURIComponent(p)).join("/");
  const query = params ? new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString() : "";
  return query ? path + "?" + query : path;
}

const scrollMemory = new Map();
let lastPath = null;

function route() {
  const current = parseHash();
  const path = current.hash.split("?")[0];
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
  render();
  if (state.view === "runs") {
    runsPage(current, changedPage);
    if (changedPage) $("workspace-view").scrollTop = scrollMemory.get(path) || 0;
  }
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// Same page, other filters: the address changes without a new history entry.
function replaceAddress(hash) {
  history.replaceState(null, "", location.pathname + location.search + hash);
  route();
}

// ---------- dashboard ----------
let dashboardRetry = 500;
function retryDashboard() {
  setTimeout(connectDashboard, dashboardRetry);
  dashboardRetry = Math.min(dashboardRetry * 2, 8000);
}

async function connectDashboard() {
  if (tokenProblem || server.changed) return;
  // The token goes out only to the server this page logged in to (checked after a loss).
  if (!(await serverVerified())) { if (!server.changed) retryDashboard(); return; }
  const socket = new WebSocket(wsUrl("/ws/dashboard"), wsProtocols());
  socket.onopen = () => { dashboardRetry = 500; $("connection").textContent = "live"; $("connection").classList.add("live"); };
  socket.onmessage = (event) => applyDashboard(JSON.parse(event.data));
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

function findSession(id) { return state.sessions.find((s) => s.id === id); }

function applyDashboard(message) {
  let workspacesChanged = false;
  switch (message.type) {
    case "sync":
      state.sessions = message.sessions;
      state.workspaces = message.workspaces;
      workspacesChanged = true;
      break;
    case "session-created":
      state.sessions = state.sessions.filter((s) => s.id !== message.session.id).concat([message.session]);
      break;
    case "session-deleted":
      state.sessions = state.sessions.filter((s) => s.id !== message.sessionId);
      break;
    case "worker-created":
    case "worker-restarted": {
      const session = findSession(message.sessionId);
      if (session) session.workers = session.workers.filter((w) => w.id !== message.worker.id).concat([message.worker]);
      break;
    }
    case "worker-deleted": {
      const session = findSession(message.sessionId);
      if (session) session.workers = session.workers.filter((w) => w.id !== message.workerId);
      break;
    }
    case "worker-exited":
    case "worker-activity": {
      const session = findSession(message.sessionId);
      const worker = session && session.workers.find((w) => w.id === message.workerId);
      if (worker && message.type === "worker-exited") {
        worker.exitCode = message.exitCode ?? -1;
        worker.activity = "unknown"; // an exited program asks nothing
      }
      if (worker && message.type === "worker-activity" && worker.exitCode == null) worker.activity = message.state;
      break;
    }
    case "workspace":
      state.workspaces = state.workspaces.filter((w) => w.path !== message.workspace.path).concat([message.workspace]);
      workspacesChanged = true;
      break;
  }
  render();
  if (state.view === "runs" && workspacesChanged) runsDashboardChanged();
}

// ---------- sessions ----------
function agentOf(id) { return state.agents.find((a) => a.id === id); }

// A worker's state in a word: a program that exited 0 is done, not failed.
function workerBadge(worker) {
  if (worker.exitCode !== undefined && worker.exitCode !== null) {
    return worker.exitCode === 0
      ? el("span", { class: "badge done", title: "the program exited with code 0" }, "done")
      : el("span", { class: "badge failed", title: "the program exited with code " + worker.exitCode }, "exited " + worker.exitCode);
  }
  if (worker.type !== "agent") return el("span", { class: "badge" }, "terminal");
  return el("span", { class: "badge " + (worker.activity || "unknown") }, worker.activity || "unknown");
}

function baseName(path) { return String(path).replace(/\/+$/, "").split("/").pop() || path; }

function workerHash(sessionId, workerId) { return "#/session/" + sessionId + "/worker/" + workerId; }

function renderSessions() {
  const list = $("session-list");
  list.replaceChildren();
  for (const session of state.sessions) {
    const box = el("div", { class: "session" + (session.id === state.selectedSession ? " selected" : ""), "data-session": session.id },
      el("a", { class: "session-title", href: "#/session/" + session.id, title: session.locationPath }, baseName(session.locationPath)),
      el("div", { class: "session-meta", title: session.locationPath }, session.workers.length + " worker(s) · " + session.locationPath));
    for (const worker of session.workers) {
      box.append(el("a", { class: "worker-row", href: workerHash(session.id, worker.id), "data-worker": worker.id },
        el("span", { title: worker.name }, worker.name), workerBadge(worker)));
    }
    list.append(box);
  }
}

// "Restart & continue" only where the agent has continue args to add.
function canContinue(worker) {
  if (worker.type !== "agent") return false;
  const agent = agentOf(worker.agentId);
  return !!(agent && agent.continueArgs && agent.continueArgs.length);
}

function renderSessionView() {
  const session = findSession(state.selectedSession);
  const tabs = $("worker-tabs");
  const actions = $("worker-actions");
  tabs.replaceChildren();
  actions.replaceChildren();
  $("empty-hint").hidden = !!session;
  if (!session) { detachTerminal(); return; }
  for (const worker of session.workers) {
    tabs.append(el("button", { class: "tab" + (worker.id === state.selectedWorker ? " current" : ""), role: "tab",
      "aria-selected": worker.id === state.selectedWorker ? "true" : "false",
      onclick: () => go(workerHash(session.id, worker.id)) }, worker.name, " ", workerBadge(worker)));
  }
  actions.append(el("button", { id: "add-terminal", onclick: () => addWorker(session.id, { type: "terminal" }) }, "+ Terminal"));
  const agentSelect = el("select", { id: "add-agent-id", "aria-label": "Agent" });
  for (const agent of state.agents) agentSelect.append(el("option", { value: agent.id }, agent.name || agent.id));
  actions.append(agentSelect, el("button", { id: "add-agent", onclick: () => addWorker(session.id, { type: "agent", agentId: agentSelect.value }) }, "+ Agent"));
  const worker = session.workers.find((w) => w.id === state.selectedWorker);
  if (worker) {
    actions.append(el("button", { id: "restart-worker", onclick: () => restartWorker(session.id, worker.id, false) }, "Restart"));
    if (canContinue(worker)) {
      actions.append(el("button", { id: "restart-continue", title: "restart with: " + agentOf(worker.agentId).continueArgs.join(" "),
        onclick: () => restartWorker(session.id, worker.id, true) }, "Restart & continue"));
    }
    actions.append(el("button", { onclick: () => deleteWorker(session.id, worker.id) }, "Delete worker"));
  }
  actions.append(el("button", { onclick: () => deleteSession(session.id) }, "Delete session"));
  if (worker) attachTerminal(session.id, worker.id);
  else detachTerminal();
}

async function addWorker(sessionId, request) {
  try {
    const { worker } = await api("POST", "/api/sessions/" + sessionId + "/workers", request);
    const session = findSession(sessionId);
    if (session && !session.workers.find((w) => w.id === worker.id)) session.workers.push(worker);
    go(workerHash(sessionId, worker.id));
  } catch (e) { status(e.message); }
}

async function restartWorker(sessionId, workerId, continueConversation) {
  try { await api("POST", "/api/sessions/" + sessionId + "/workers/" + workerId + "/restart", { continueConversation }); }
  catch (e) { status(e.message); }
}

async function deleteWorker(sessionId, workerId) {
  try { await api("DELETE", "/api/sessions/" + sessionId + "/workers/" + workerId); go("#/session/" + sessionId); }
  catch (e) { status(e.message); }
}

async function deleteSession(sessionId) {
  try { await api("DELETE", "/api/sessions/" + sessionId); go("#/"); }
  catch (e) { status(e.message); }
}

function status(text) { $("terminal-status").textContent = text; }

// ---------- new session ----------
function formError(message, retry) {
  const box = $("new-session-error");
  box.replaceChildren(message);
  if (retry) box.append(el("div", {}, el("button", { type: "button", id: "new-session-again", onclick: retry.run }, retry.label)));
  box.hidden = !message;
}

async function createSession(allowDuplicate) {
  const request = { type: "quick", locationPath: $("new-session-path").value.trim() };
  const agent = $("new-session-agent").value;
  if (agent) request.agentId = agent;
  if (allowDuplicate) request.allowDuplicate = true;
  formError("");
  try {
    const { session } = await api("POST", "/api/sessions", request);
    if (!findSession(session.id)) state.sessions.push(session);
    $("new-session-path").value = "";
    const first = session.workers[0];
    go("#/session/" + session.id + (first ? "/worker/" + first.id : ""));
  } catch (e) {
    // Said beside the form, not in a blocking alert; a folder already open is asked about.
    if (e.code === "duplicate_folder") formError(e.message, { label: "Open another session on it", run: () => createSession(true) });
    else formError(e.message);
  }
}

$("new-session-form").onsubmit = (event) => { event.preventDefault(); createSession(false); };

// ---------- terminal ----------
const terminal = { term: null, fit: null, socket: null, connecting: false, key: null, epoch: null, next: 0, retry: 300, timer: null };

function ensureTerm() {
  if (terminal.term) return;
  // A monospace font first, then the emoji fonts systems have, for the emoji programs print.
  terminal.term = new Terminal({ convertEol: false, scrollback: 5000, fontSize: 13,
    fontFamily: '"DejaVu Sans Mono", Menlo, Consolas, monospace, "Noto Color Emoji", "Apple Color Emoji", "Segoe UI Emoji"',
    theme: { background: "#000000" } });
  terminal.fit = new FitAddon.FitAddon();
  terminal.term.loadAddon(terminal.fit);
  terminal.term.open($("terminal"));
  terminal.term.onData((data) => send({ type: "input", data }));
  terminal.term.onResize(({ cols, rows }) => send({ type: "resize", cols, rows }));
  window.addEventListener("resize", () => terminal.fit && !$("terminal").hidden && terminal.fit.fit());
}

function send(message) {
  if (terminal.socket && terminal.socket.readyState === WebSocket.OPEN) terminal.socket.send(JSON.stringify(message));
}

function detachTerminal() {
  terminal.key = null;
  clearTimeout(terminal.timer);
  if (terminal.socket) { terminal.socket.onclose = null; terminal.socket.close(); terminal.socket = null; }
  $("terminal").hidden = true;
}

function attachTerminal(sessionId, workerId) {
  const key = sessionId + "/" + workerId;
  $("terminal").hidden = false;
  ensureTerm();
  if (terminal.key === key && (terminal.socket || terminal.connecting)) return;
  detachTerminal();
  $("terminal").hidden = false;
  terminal.key = key;
  openSocket(sessionId, workerId);
}

async function openSocket(sessionId, workerId) {
  const key = sessionId + "/" + workerId;
  if (tokenProblem || server.changed) return;
  terminal.connecting = true;
  const verified = await serverVerified();
  terminal.connecting = false;
  if (terminal.key !== key || terminal.socket) return;
  if (!verified) {
    if (server.changed) { status("not reconnected: the server at this address is not the delta serve this page was opened from"); return; }
    status("delta serve does not answer; reconnecting…");
    terminal.timer = setTimeout(() => { if (terminal.key === key) openSocket(sessionId, workerId); }, terminal.retry);
    terminal.retry = Math.min(terminal.retry * 2, 8000);
    return;
  }
  const socket = new WebSocket(wsUrl("/ws/session/" + sessionId + "/worker/" + workerId), wsProtocols());
  terminal.socket = socket;
  socket.onopen = () => {
    terminal.retry = 300;
    status("attached");
    terminal.fit.fit();
    send({ type: "resize", cols: terminal.term.cols, rows: terminal.term.rows });
  };
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "history") {
      terminal.term.reset();
      terminal.term.write(message.data);
      terminal.epoch = message.epoch;
      terminal.next = message.offset;
    } else if (message.type === "output") {
      if (message.epoch !== terminal.epoch || message.offset !== terminal.next) {
        socket.close(); // a gap: reconnect for a fresh snapshot
        return;
      }
      terminal.term.write(message.data);
      terminal.next = message.end;
    } else if (message.type === "exit") {
      status(message.exitCode === 0 ? "the program finished (exit code 0)" : "the program exited (code " + message.exitCode + ")");
    } else if (message.type === "activity") {
      status("agent is " + message.state + " (" + message.source + ")");
    } else if (message.type === "error") {
      status(message.error);
    }
  };
  socket.onclose = (event) => {
    if (terminal.key !== key) return;
    terminal.socket = null;
    connectionLost();
    if (event.code === 1000) { status("stopped: " + (event.reason || "closed")); return; }
    const wait = event.code === 4001 ? 50 : terminal.retry;
    terminal.retry = Math.min(terminal.retry * 2, 8000);
    status(event.code === 4001 ? "restarted; reattaching…" : "disconnected; reconnecting…");
    terminal.timer = setTimeout(() => { if (terminal.key === key) openSocket(sessionId, workerId); }, wait);
  };
}

// ---------- layout ----------
// The sidebar folds away (remembered per browser); on a narrow window it starts folded.
const SIDEBAR_KEY = "delta-serve-sidebar";
function setSidebar(shown) {
  document.body.classList.toggle("sidebar-hidden", !shown);
  $("toggle-sidebar").setAttribute("aria-expanded", shown ? "true" : "false");
  if (terminal.fit && !$("terminal").hidden) terminal.fit.fit();
}
$("toggle-sidebar").onclick = () => {
  const shown = document.body.classList.contains("sidebar-hidden");
  localStorage.setItem(SIDEBAR_KEY, shown ? "shown" : "hidden");
  setSidebar(shown);
  if (state.view === "runs") runsResized();
};

// ---------- render ----------
// The tab's title says when an agent waits for an answer.
function renderTitle() {
  const asking = state.sessions.flatMap((s) => s.workers).filter((w) => w.activity === "asking" && w.exitCode == null).length;
  document.title = asking ? "(" + asking + " asking) delta serve" : "delta serve";
}

function render() {
  renderTitle();
  $("nav-sessions").classList.toggle("current", state.view === "sessions");
  $("nav-runs").classList.toggle("current", state.view === "runs");
  $("session-view").hidden = state.view !== "sessions";
  $("runs-view").hidden = state.view !== "runs";
  renderSessions();
  if (state.view === "sessions") { runsLeave(); renderSessionView(); }
  else detachTerminal();
}

// Test and automation hooks: the terminal's visible text; the runs pages add theirs.
window.deltaServe = {
  screenText() {
    if (!terminal.term) return "";
    const buffer = terminal.term.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
    return lines.join("\n");
  },
};

(async function start() {
  const saved = localStorage.getItem(SIDEBAR_KEY);
  setSidebar(saved ? saved === "shown" : window.innerWidth >= 1000);
  try { await login(); } catch (e) { status("cannot log in: " + e.message); }
  // A server started with -w is about runs: a page opened without an address opens there.
  if (server.startView === "runs" && /^#?\/?$/.test(location.hash)) history.replaceState(null, "", location.pathname + location.search + "#/runs");
  if (!tokenProblem && server.probe) {
    try {
      state.agents = await api("GET", "/api/agents");
      for (const agent of state.agents) $("new-session-agent").append(el("option", { value: agent.id }, agent.name || agent.id));
    } catch (e) { status(e.message); }
  }
  window.addEventListener("hashchange", route);
  window.addEventListener("resize", () => { if (state.view === "runs") runsResized(); });
  route();
  if (!tokenProblem && server.probe) connectDashboard();
})();
