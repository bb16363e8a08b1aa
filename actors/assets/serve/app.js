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
const TOKEN_KEY = "delta-serve-token";
let tokenProblem = false;

function takeTokenFromUrl() {
  const match = location.hash.match(/^#token=([^&]*)$/);
  if (!match) return;
  let token = match[1];
  try { token = decodeURIComponent(token); } catch (e) { /* kept as written */ }
  localStorage.setItem(TOKEN_KEY, token);
  history.replaceState(null, "", location.pathname + location.search);
}

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

function authHeaders() { return { Authorization: "Bearer " + token() }; }

function wsProtocols() {
  const hex = Array.from(new TextEncoder().encode(token()), (b) => b.toString(16).padStart(2, "0")).join("");
  return ["delta.v1", "delta.token." + hex];
}

function showTokenProblem() {
  tokenProblem = true;
  const why = token()
    ? "This page's token is not this server's: delta serve makes a new one each time it starts (unless DELTA_SERVE_TOKEN sets it)."
    : "This page has no token yet.";
  const box = $("token-problem");
  box.textContent = why + " Open the URL that `delta serve` printed (http://" + location.host +
    "/#token=…) once in this browser; reloads and new tabs then keep working.";
  box.hidden = false;
  $("connection").textContent = "no valid token";
  $("connection").classList.remove("live");
}

// Opening the printed URL in another tab stores a new token: pick it up here too.
window.addEventListener("storage", (event) => { if (event.key === TOKEN_KEY && tokenProblem) location.reload(); });

async function tokenRejected() {
  try { return (await fetch("/api/agents", { headers: authHeaders() })).status === 401; }
  catch (e) { return false; }
}

class ApiError extends Error {
  constructor(message, status, code) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  const options = { method, headers: authHeaders() };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
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
function connectDashboard() {
  if (tokenProblem) return;
  const socket = new WebSocket(wsUrl("/ws/dashboard"), wsProtocols());
  socket.onopen = () => { dashboardRetry = 500; $("connection").textContent = "live"; $("connection").classList.add("live"); };
  socket.onmessage = (event) => applyDashboard(JSON.parse(event.data));
  socket.onclose = async () => {
    $("connection").textContent = "reconnecting…";
    $("connection").classList.remove("live");
    // A browser does not say why an upgrade failed: ask, so a stale token is said, not retried.
    if (await tokenRejected()) { showTokenProblem(); return; }
    setTimeout(connectDashboard, dashboardRetry);
    dashboardRetry = Math.min(dashboardRetry * 2, 8000);
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
const terminal = { term: null, fit: null, socket: null, key: null, epoch: null, next: 0, retry: 300, timer: null };

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
  if (terminal.key === key && terminal.socket) return;
  detachTerminal();
  $("terminal").hidden = false;
  terminal.key = key;
  openSocket(sessionId, workerId);
}

function openSocket(sessionId, workerId) {
  const key = sessionId + "/" + workerId;
  if (tokenProblem) return;
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
  takeTokenFromUrl();
  const saved = localStorage.getItem(SIDEBAR_KEY);
  setSidebar(saved ? saved === "shown" : window.innerWidth >= 1000);
  if (!token()) showTokenProblem();
  try {
    state.agents = await api("GET", "/api/agents");
    for (const agent of state.agents) $("new-session-agent").append(el("option", { value: agent.id }, agent.name || agent.id));
  } catch (e) { status(e.message); }
  window.addEventListener("hashchange", route);
  window.addEventListener("resize", () => { if (state.view === "runs") runsResized(); });
  route();
  if (!tokenProblem) connectDashboard();
})();
