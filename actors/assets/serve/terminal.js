// terminal.js — a worker's terminal: xterm.js attached to /ws/session/<sid>/worker/<wid>
// (history first, then output in order; a gap or a restart reattaches), the status line under
// the tabs, and the terminal's visible text for the browser tests.
// The vendored xterm.js and its fit addon are classic scripts index.html loads before the
// page's modules; their globals (`Terminal`, `FitAddon`) are read here and nowhere else.
// Must not: send anything to a server not proven to be this page's (api.js decides).

import { $ } from "./dom.js";
import { connectionLost, server, serverVerified, tokenProblem, wsProtocols, wsUrl } from "./api.js";

const terminal = { term: null, fit: null, socket: null, connecting: false, key: null, epoch: null, next: 0, retry: 300, timer: null };

// The line under the worker tabs.
export function status(text) { $("terminal-status").textContent = text; }

function ensureTerm() {
  if (terminal.term) return;
  const { Terminal, FitAddon } = window;
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

// Fits the terminal to its box again (the sidebar folded or unfolded), when it is shown.
export function refitTerminal() {
  if (terminal.fit && !$("terminal").hidden) terminal.fit.fit();
}

function send(message) {
  if (terminal.socket && terminal.socket.readyState === WebSocket.OPEN) terminal.socket.send(JSON.stringify(message));
}

export function detachTerminal() {
  terminal.key = null;
  clearTimeout(terminal.timer);
  if (terminal.socket) { terminal.socket.onclose = null; terminal.socket.close(); terminal.socket = null; }
  $("terminal").hidden = true;
}

export function attachTerminal(sessionId, workerId) {
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

// The terminal's visible text, line by line ("" before any terminal was opened).
export function screenText() {
  if (!terminal.term) return "";
  const buffer = terminal.term.buffer.active;
  const lines = [];
  for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
  return lines.join("\n");
}
