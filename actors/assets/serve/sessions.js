// sessions.js — the sessions view: the sidebar's sessions and their workers, a session's worker
// tabs and actions (add a terminal or an agent, restart, delete), and the new-session form.
// Must not: decide what the server does with a session (it only asks, and says the answer).

import { $, el } from "./dom.js";
import { api } from "./api.js";
import { sessionHash, workerHash } from "./address.js";
import { baseName } from "./format.js";
import { go } from "./router.js";
import { agentOf, findSession, state } from "./state.js";
import { attachTerminal, detachTerminal, status } from "./terminal.js";

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

export function renderSessions() {
  const list = $("session-list");
  list.replaceChildren();
  for (const session of state.sessions) {
    const box = el("div", { class: "session" + (session.id === state.selectedSession ? " selected" : ""), "data-session": session.id },
      el("a", { class: "session-title", href: sessionHash(session.id), title: session.locationPath }, baseName(session.locationPath)),
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

export function renderSessionView() {
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
  const addAgent = () => addWorker(session.id, { type: "agent", agentId: agentSelect.value });
  actions.append(agentSelect, el("button", { id: "add-agent", onclick: addAgent }, "+ Agent"));
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
  try { await api("DELETE", "/api/sessions/" + sessionId + "/workers/" + workerId); go(sessionHash(sessionId)); }
  catch (e) { status(e.message); }
}

async function deleteSession(sessionId) {
  try { await api("DELETE", "/api/sessions/" + sessionId); go("#/"); }
  catch (e) { status(e.message); }
}

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
    go(first ? workerHash(session.id, first.id) : sessionHash(session.id));
  } catch (e) {
    // Said beside the form, not in a blocking alert; a folder already open is asked about.
    if (e.code === "duplicate_folder") formError(e.message, { label: "Open another session on it", run: () => createSession(true) });
    else formError(e.message);
  }
}

// The new-session form creates a session on submit.
export function setUpNewSessionForm() {
  $("new-session-form").onsubmit = (event) => { event.preventDefault(); createSession(false); };
}

// The agents this server offers, as the new-session form's choices.
export function offerAgents(agents) {
  for (const agent of agents) $("new-session-agent").append(el("option", { value: agent.id }, agent.name || agent.id));
}
