// poll.js — a page's polling: `load` again every `ms` while the page says so, one load at a
// time, stopped with the page.
// Must not: touch the DOM or decide what is loaded.

// Polls `load` every `ms` while `keepGoing()` says so: `start` loads now, `kick` loads now
// and goes on from there, `stop` ends it (a load under way finishes, none follows).
export function poller(load, ms, keepGoing) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    await load();
    if (!stopped && keepGoing()) timer = setTimeout(tick, ms);
  };
  return { start: tick, stop() { stopped = true; clearTimeout(timer); }, kick() { clearTimeout(timer); if (!stopped) tick(); } };
}
