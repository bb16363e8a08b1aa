// delta serve page: sessions and workers (xterm.js over /ws/session/.../worker/...), the
// dashboard feed (/ws/dashboard), and the runs & batches view. Plain JS, no build step.
"use strict";

const state = {
  sessions: [],
  workspaces: [],
  agents: [],
  selectedSession: null,
  selectedWorker: null,
  view: "sessions",
  timeline: null,
};

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "onclick") node.onclick = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
};

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
  if (!response.ok) throw new Error((data && data.error) || response.statusText);
  return data;
}

function wsUrl(path) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
}

// ---------- routing: #/session/<sid>/worker/<wid> | #/runs ----------
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  if (parts[0] === "runs") {
    state.view = "runs";
  } else {
    state.view = "sessions";
    state.selectedSession = parts[0] === "session" ? parts[1] || null : state.selectedSession;
    state.selectedWorker = parts[2] === "worker" ? parts[3] || null : null;
  }
  render();
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
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
  switch (message.type) {
    case "sync":
      state.sessions = message.sessions;
      state.workspaces = message.workspaces;
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
      if (worker && message.type === "worker-exited") worker.exitCode = message.exitCode ?? -1;
      if (worker && message.type === "worker-activity") worker.activity = message.state;
      break;
    }
    case "workspace":
      state.workspaces = state.workspaces.filter((w) => w.path !== message.workspace.path).concat([message.workspace]);
      break;
  }
  render();
}

// ---------- sessions ----------
function workerBadge(worker) {
  if (worker.exitCode !== undefined && worker.exitCode !== null) return el("span", { class: "badge exited" }, "exited " + worker.exitCode);
  if (worker.type !== "agent") return el("span", { class: "badge" }, "terminal");
  return el("span", { class: "badge " + (worker.activity || "unknown") }, worker.activity || "unknown");
}

function renderSessions() {
  const list = $("session-list");
  list.replaceChildren();
  for (const session of state.sessions) {
    const box = el("div", { class: "session" + (session.id === state.selectedSession ? " selected" : ""), "data-session": session.id },
      el("div", { class: "session-title", onclick: () => go("#/session/" + session.id) }, session.locationPath),
      el("div", { class: "session-meta" }, session.type + " · " + session.workers.length + " worker(s)"));
    for (const worker of session.workers) {
      box.append(el("div", { class: "worker-row", onclick: () => go("#/session/" + session.id + "/worker/" + worker.id) },
        el("span", {}, worker.name), workerBadge(worker)));
    }
    list.append(box);
  }
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
    tabs.append(el("div", { class: "tab" + (worker.id === state.selectedWorker ? " current" : ""),
      onclick: () => go("#/session/" + session.id + "/worker/" + worker.id) }, worker.name, " ", workerBadge(worker)));
  }
  actions.append(el("button", { id: "add-terminal", onclick: () => addWorker(session.id, { type: "terminal" }) }, "+ Terminal"));
  const agentSelect = el("select", { id: "add-agent-id" });
  for (const agent of state.agents) agentSelect.append(el("option", { value: agent.id }, agent.name || agent.id));
  actions.append(agentSelect, el("button", { id: "add-agent", onclick: () => addWorker(session.id, { type: "agent", agentId: agentSelect.value }) }, "+ Agent"));
  const worker = session.workers.find((w) => w.id === state.selectedWorker);
  if (worker) {
    actions.append(
      el("button", { onclick: () => restartWorker(session.id, worker.id, false) }, "Restart"),
      el("button", { onclick: () => restartWorker(session.id, worker.id, true) }, "Restart & continue"),
      el("button", { onclick: () => deleteWorker(session.id, worker.id) }, "Delete worker"));
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
    go("#/session/" + sessionId + "/worker/" + worker.id);
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

// ---------- terminal ----------
const terminal = { term: null, fit: null, socket: null, key: null, epoch: null, next: 0, retry: 300, timer: null };

function ensureTerm() {
  if (terminal.term) return;
  terminal.term = new Terminal({ convertEol: false, scrollback: 5000, fontSize: 13,
    theme: { background: "#000000" } });
  terminal.fit = new FitAddon.FitAddon();
  terminal.term.loadAddon(terminal.fit);
  terminal.term.open($("terminal"));
  terminal.term.onData((data) => send({ type: "input", data }));
  terminal.term.onResize(({ cols, rows }) => send({ type: "resize", cols, rows }));
  window.addEventListener("resize", () => terminal.fit && terminal.fit.fit());
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
      status("the program exited (code " + message.exitCode + ")");
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

// ---------- runs & batches ----------
function fmtTokens(tokens) { return tokens ? (tokens.input_tokens + tokens.output_tokens).toLocaleString() : "0"; }
function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 90) return Math.round(seconds) + "s";
  if (seconds < 5400) return Math.round(seconds / 60) + "m";
  if (seconds < 129600) return Math.round(seconds / 3600) + "h";
  return Math.round(seconds / 86400) + "d";
}

function renderRuns() {
  const list = $("runs-list");
  list.replaceChildren();
  if (!state.workspaces.length) list.append(el("p", { class: "hint" }, "No workspace yet: start with `delta serve -w DIR`, or create a session."));
  for (const workspace of state.workspaces) {
    const section = el("div", { class: "workspace", "data-workspace": workspace.path }, el("h2", {}, workspace.path));
    if (workspace.error) section.append(el("p", { class: "status-FAILED" }, workspace.error));
    for (const orchestration of workspace.orchestrations) {
      section.append(el("h3", {}, "Orchestration " + orchestration.id + " · ", el("span", { class: "status-" + orchestration.status }, orchestration.status), " · " + orchestration.plan));
      const stages = el("div", { class: "stages" });
      for (const stage of orchestration.stages) {
        const done = stage.total ? Math.round(100 * (stage.completed + stage.failed) / stage.total) : 0;
        const bar = el("div", { class: "bar" }, el("span", { style: "width:" + done + "%" }));
        stages.append(el("div", { class: "stage", "data-stage": stage.id }, el("b", {}, stage.id), " ",
          el("span", { class: "status-" + stage.status }, stage.status), el("div", {}, stage.completed + "/" + stage.total + " done, " + stage.failed + " failed"), bar));
      }
      section.append(stages);
    }
    if (workspace.runs.length) {
      const table = el("table", {}, el("tr", {}, ...["Run", "Status", "Agent", "Iterations", "Tokens", "Age", "Task"].map((h) => el("th", {}, h))));
      for (const run of workspace.runs) {
        table.append(el("tr", { class: "clickable", onclick: () => openTimeline(workspace.path, run.runId) },
          el("td", {}, run.runId), el("td", { class: "status-" + run.status }, run.status), el("td", {}, run.agent),
          el("td", {}, String(run.iterations)), el("td", {}, fmtTokens(run.tokens)), el("td", {}, age(run.createdAt)), el("td", {}, run.task)));
      }
      section.append(table);
    }
    list.append(section);
  }
}

async function openTimeline(workspace, runId) {
  state.timeline = { workspace, runId, next: 0, entries: [], status: null };
  $("timeline").hidden = false;
  await pollTimeline();
}

async function pollTimeline() {
  const current = state.timeline;
  if (!current) return;
  try {
    const data = await api("GET", "/api/runs/" + encodeURIComponent(current.runId) + "/timeline?workspace=" +
      encodeURIComponent(current.workspace) + "&from=" + current.next);
    if (state.timeline !== current) return;
    current.entries = current.entries.concat(data.entries);
    current.next = data.next;
    current.status = data.status;
    renderTimeline();
    if (current.status === "RUNNING") setTimeout(pollTimeline, 1000);
  } catch (e) { $("timeline").textContent = e.message; }
}

function renderTimeline() {
  const current = state.timeline;
  const box = $("timeline");
  box.replaceChildren(el("h2", {}, "Run " + current.runId + " · ", el("span", { class: "status-" + current.status }, current.status || "")),
    el("button", { onclick: () => { state.timeline = null; box.hidden = true; } }, "Close"));
  for (const entry of current.entries) {
    box.append(el("div", { class: "entry " + entry.kind }, el("span", { class: "title" }, entry.title),
      el("span", { class: "when" }, entry.timestamp), el("pre", {}, entry.text)));
  }
  if (current.status === "WAITING_FOR_INPUT") {
    const answer = el("textarea", { id: "answer-text", rows: "3", cols: "60" });
    const outcome = el("p", { id: "answer-outcome", class: "status-FAILED" });
    box.append(el("h3", {}, "Answer the run"), answer, el("button", { id: "answer-send", onclick: async () => {
      outcome.textContent = "";
      try {
        // The server hands the answer to `delta continue` on its stdin, never in its arguments.
        const sent = await api("POST", "/api/runs/" + encodeURIComponent(current.runId) + "/answer", { workspace: current.workspace, message: answer.value });
        current.status = sent.status || "RUNNING";
        setTimeout(pollTimeline, 1000);
      } catch (e) { outcome.textContent = e.message; }
    } }, "Send (like delta continue)"), outcome);
  }
}

// ---------- render ----------
// The tab's title says when an agent waits for an answer.
function renderTitle() {
  const asking = state.sessions.flatMap((s) => s.workers).filter((w) => w.activity === "asking").length;
  document.title = asking ? "(" + asking + " asking) delta serve" : "delta serve";
}

function render() {
  renderTitle();
  $("nav-sessions").classList.toggle("current", state.view === "sessions");
  $("nav-runs").classList.toggle("current", state.view === "runs");
  $("session-view").hidden = state.view !== "sessions";
  $("runs-view").hidden = state.view !== "runs";
  renderSessions();
  if (state.view === "sessions") renderSessionView();
  else { detachTerminal(); renderRuns(); }
}

$("new-session-form").onsubmit = async (event) => {
  event.preventDefault();
  const request = { type: "quick", locationPath: $("new-session-path").value.trim() };
  const agent = $("new-session-agent").value;
  if (agent) request.agentId = agent;
  try {
    const { session } = await api("POST", "/api/sessions", request);
    if (!findSession(session.id)) state.sessions.push(session);
    const first = session.workers[0];
    go("#/session/" + session.id + (first ? "/worker/" + first.id : ""));
  } catch (e) { status(e.message); alert(e.message); }
};

// Test and automation hook: the terminal's visible text.
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
  if (!token()) showTokenProblem();
  try {
    state.agents = await api("GET", "/api/agents");
    for (const agent of state.agents) $("new-session-agent").append(el("option", { value: agent.id }, agent.name || agent.id));
  } catch (e) { status(e.message); }
  window.addEventListener("hashchange", route);
  route();
  if (!tokenProblem) connectDashboard();
})();
