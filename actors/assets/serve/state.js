// state.js — what the page knows: the sessions, workspaces and agents the server sent, the
// view and selection the address chose, how a dashboard message changes them, and the
// automation hooks the page shows as `window.deltaServe` (main.js). Pure data and functions.
// Must not: touch the DOM, the address or the network; draw anything.

export const state = {
  sessions: [],
  workspaces: [],
  agents: [],
  selectedSession: null,
  selectedWorker: null,
  view: "sessions",
  route: null,
};

// What tests and `delta bench serve-batch` use of the page (the terminal's text, the REST
// helper, when the batch table and timeline were drawn): filled in by the modules that know.
export const automation = {};

export function findSession(id, sessions = state.sessions) { return sessions.find((s) => s.id === id); }

export function agentOf(id, agents = state.agents) { return agents.find((a) => a.id === id); }

// How many workers wait for an answer (a program that exited asks nothing).
export function askingCount(sessions) {
  return sessions.flatMap((s) => s.workers).filter((w) => w.activity === "asking" && w.exitCode == null).length;
}

// Applies one /ws/dashboard message to `known` (the state); true when the workspaces changed.
export function applyDashboardMessage(known, message) {
  switch (message.type) {
    case "sync":
      known.sessions = message.sessions;
      known.workspaces = message.workspaces;
      return true;
    case "session-created":
      known.sessions = known.sessions.filter((s) => s.id !== message.session.id).concat([message.session]);
      return false;
    case "session-deleted":
      known.sessions = known.sessions.filter((s) => s.id !== message.sessionId);
      return false;
    case "worker-created":
    case "worker-restarted": {
      const session = findSession(message.sessionId, known.sessions);
      if (session) session.workers = session.workers.filter((w) => w.id !== message.worker.id).concat([message.worker]);
      return false;
    }
    case "worker-deleted": {
      const session = findSession(message.sessionId, known.sessions);
      if (session) session.workers = session.workers.filter((w) => w.id !== message.workerId);
      return false;
    }
    case "worker-exited":
    case "worker-activity": {
      const session = findSession(message.sessionId, known.sessions);
      const worker = session && session.workers.find((w) => w.id === message.workerId);
      if (worker && message.type === "worker-exited") {
        worker.exitCode = message.exitCode ?? -1;
        worker.activity = "unknown"; // an exited program asks nothing
      }
      if (worker && message.type === "worker-activity" && worker.exitCode == null) worker.activity = message.state;
      return false;
    }
    case "workspace":
      known.workspaces = known.workspaces.filter((w) => w.path !== message.workspace.path).concat([message.workspace]);
      return true;
    default:
      return false;
  }
}
