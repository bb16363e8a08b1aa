// What the page knows (state.js): each /ws/dashboard message applied, and the polling of a
// runs page (poll.js) under a clock the test moves.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyDashboardMessage, askingCount } from "../state.js";
import { poller } from "../poll.js";

const fresh = () => ({
  sessions: [{ id: "s1", workers: [{ id: "w1", type: "agent", activity: "working" }, { id: "w2", type: "terminal" }] }],
  workspaces: [{ path: "/a", runs: [] }],
});

test("a sync replaces everything and says the workspaces changed", () => {
  const known = fresh();
  const changed = applyDashboardMessage(known, { type: "sync", sessions: [], workspaces: [{ path: "/b" }] });
  assert.equal(changed, true);
  assert.deepEqual(known, { sessions: [], workspaces: [{ path: "/b" }] });
});

test("sessions and workers come and go by id, a repeated message changing nothing twice", () => {
  const known = fresh();
  const session = { id: "s2", workers: [] };
  assert.equal(applyDashboardMessage(known, { type: "session-created", session }), false);
  applyDashboardMessage(known, { type: "session-created", session });
  assert.deepEqual(known.sessions.map((s) => s.id), ["s1", "s2"]);
  const worker = { id: "w3", type: "terminal" };
  applyDashboardMessage(known, { type: "worker-created", sessionId: "s2", worker });
  applyDashboardMessage(known, { type: "worker-restarted", sessionId: "s2", worker: { id: "w3", type: "terminal", restarted: true } });
  assert.deepEqual(known.sessions[1].workers, [{ id: "w3", type: "terminal", restarted: true }]);
  applyDashboardMessage(known, { type: "worker-deleted", sessionId: "s2", workerId: "w3" });
  assert.deepEqual(known.sessions[1].workers, []);
  applyDashboardMessage(known, { type: "session-deleted", sessionId: "s2" });
  assert.deepEqual(known.sessions.map((s) => s.id), ["s1"]);
  applyDashboardMessage(known, { type: "worker-created", sessionId: "gone", worker });
  applyDashboardMessage(known, { type: "worker-exited", sessionId: "s1", workerId: "gone", exitCode: 1 });
  assert.deepEqual(known, fresh(), "a message about a session or worker not known changes nothing");
});

test("an exited worker asks nothing, whatever activity comes after", () => {
  const known = fresh();
  applyDashboardMessage(known, { type: "worker-activity", sessionId: "s1", workerId: "w1", state: "asking" });
  assert.equal(askingCount(known.sessions), 1);
  applyDashboardMessage(known, { type: "worker-exited", sessionId: "s1", workerId: "w1" });
  assert.deepEqual(known.sessions[0].workers[0], { id: "w1", type: "agent", activity: "unknown", exitCode: -1 });
  applyDashboardMessage(known, { type: "worker-activity", sessionId: "s1", workerId: "w1", state: "asking" });
  assert.equal(known.sessions[0].workers[0].activity, "unknown");
  assert.equal(askingCount(known.sessions), 0);
  applyDashboardMessage(known, { type: "worker-exited", sessionId: "s1", workerId: "w2", exitCode: 0 });
  assert.equal(known.sessions[0].workers[1].exitCode, 0, "exit code 0 is kept, not read as missing");
});

test("a workspace message replaces that workspace only; an unknown message changes nothing", () => {
  const known = fresh();
  assert.equal(applyDashboardMessage(known, { type: "workspace", workspace: { path: "/a", runs: [1] } }), true);
  assert.equal(applyDashboardMessage(known, { type: "workspace", workspace: { path: "/c" } }), true);
  assert.deepEqual(known.workspaces, [{ path: "/a", runs: [1] }, { path: "/c" }]);
  const before = structuredClone(known);
  assert.equal(applyDashboardMessage(known, { type: "from-a-newer-server" }), false);
  assert.deepEqual(known, before);
});

// A clock the test moves by hand: poll.js's setTimeout and clearTimeout while `run` runs.
async function withFakeTimers(run) {
  const saved = { setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout };
  let now = 0;
  let nextId = 1;
  const pending = new Map();
  globalThis.setTimeout = (fn, ms) => { pending.set(nextId, { fn, at: now + ms }); return nextId++; };
  globalThis.clearTimeout = (id) => { pending.delete(id); };
  // Moves the clock by `ms`, firing what falls due, then lets the loads it started settle.
  const tick = async (ms) => {
    now += ms;
    for (const [id, timer] of [...pending].sort((a, b) => a[1].at - b[1].at)) {
      if (timer.at <= now && pending.delete(id)) timer.fn();
    }
    await new Promise((resolve) => saved.setTimeout(resolve, 0));
  };
  try { await run(tick, () => pending.size); } finally { Object.assign(globalThis, saved); }
}

test("a poller loads at once, again after each wait while the page says so, and never after stop", async () => {
  await withFakeTimers(async (tick, waiting) => {
    let loads = 0;
    let running = true;
    const polling = poller(async () => { loads++; }, 1000, () => running);
    await polling.start();
    assert.equal(loads, 1);
    assert.equal(waiting(), 1);
    await tick(999);
    assert.equal(loads, 1, "no load before the wait is over");
    await tick(1);
    assert.equal(loads, 2);
    polling.kick();
    await tick(0);
    assert.equal(loads, 3, "a kick loads at once");
    assert.equal(waiting(), 1, "and its wait replaces the one before");
    await tick(1000);
    assert.equal(loads, 4, "one load a wait, not two");
    running = false;
    await tick(1000);
    assert.equal(loads, 5, "the last load runs, and says the page is done");
    assert.equal(waiting(), 0, "nothing follows once the page is done");
    running = true;
    polling.kick();
    await tick(0);
    assert.equal(loads, 6, "a kick wakes a page that was done");
    polling.stop();
    assert.equal(waiting(), 0, "stop cancels the wait");
    polling.kick();
    await tick(10000);
    assert.equal(loads, 6, "nothing after stop, not even a kick");
  });
});
