// format.js — how the page writes numbers, token counts, durations, ages, statuses, run ids
// and shell arguments: pure functions of their arguments.
// Must not: touch the DOM, the clock (a caller passes `now`) or the network.

// 12345 → "12,345"; a missing count is 0.
export function fmtInt(n) { return (n || 0).toLocaleString("en-US"); }

// A token count, or a usage record ({total_tokens} or {input_tokens, output_tokens}).
export function fmtTokens(tokens) {
  if (tokens === null || tokens === undefined) return "0";
  if (typeof tokens === "number") return fmtInt(tokens);
  return fmtInt(tokens.total_tokens || (tokens.input_tokens || 0) + (tokens.output_tokens || 0));
}

// Dollars as `delta list-runs` writes them: "$1.25", "$0.000051" under a cent, "—" when
// unknown (null: a model had no price).
export function fmtUsd(usd) {
  if (usd === null || usd === undefined || !isFinite(usd)) return "—";
  return "$" + (usd !== 0 && Math.abs(usd) < 0.01 ? usd.toFixed(6) : usd.toFixed(2));
}

// A duration in milliseconds, in the largest unit that keeps it readable ("" when unknown).
export function fmtMs(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 90) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 5400) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
}

// How long before `now` (ms since the epoch) the ISO time `iso` was ("" when unreadable).
export function age(iso, now) {
  const seconds = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (!isFinite(seconds)) return "";
  if (seconds < 90) return Math.round(seconds) + "s ago";
  if (seconds < 5400) return Math.round(seconds / 60) + "m ago";
  if (seconds < 129600) return Math.round(seconds / 3600) + "h ago";
  return Math.round(seconds / 86400) + "d ago";
}

// A status as words: "WAITING_FOR_INPUT" → "WAITING FOR INPUT".
export function statusWords(status) { return String(status).replace(/_/g, " "); }

// A run id without its orchestration's prefix: `map-00042` reads better than the whole id.
export function shortRun(runId, orchestrationId) {
  return orchestrationId && runId.startsWith(orchestrationId + "-") ? runId.slice(orchestrationId.length + 1) : runId;
}

// The last part of a path ("/a/b/" → "b"); the path itself when it has none.
export function baseName(path) { return String(path).replace(/\/+$/, "").split("/").pop() || path; }

// `text` cut to at most `max` characters, the last one an ellipsis when cut.
export function clip(text, max) { return text.length > max ? text.slice(0, max - 1) + "…" : text; }

// One argument as a shell would need it: bare when it is safe, else single-quoted.
export function shellQuote(arg) { return /^[\w@%+=:,./-]+$/.test(arg) ? arg : "'" + arg.replace(/'/g, "'\\''") + "'"; }

// An orchestration's stages in one line: "map 3/4 (1 failed) · reduce 0/1".
export function stagesSummary(stages) {
  return stages.map((s) => s.id + " " + s.completed + "/" + s.total + (s.failed ? " (" + s.failed + " failed)" : "")).join(" · ");
}

// What a stage's box in the stage graph says of its runs.
export function stageProgress(stage) {
  const c = stage.counts;
  const done = c.completed, failed = c.failed, running = c.running + c.waiting;
  if (c.planned) {
    return fmtInt(done) + "/" + fmtInt(c.planned) + " done" + (failed ? ", " + fmtInt(failed) + " failed" : "") +
      (running ? ", " + fmtInt(running) + " running" : "");
  }
  return isIdle(stage) ? "waits for " + (stage.needs.join(", ") || "its start") : "no runs";
}

// A stage that has not started (or will not): drawn dashed.
export function isIdle(stage) { return ["PENDING", "NOT_STARTED", "SKIPPED"].includes(stage.status); }

// Which rows of how many a page of the batch table shows: "101–200 of 1,000 (filtered from 10,000)".
export function rowsShown(rows) {
  if (!rows.matched) return "0 runs";
  return fmtInt(rows.offset + 1) + "–" + fmtInt(rows.offset + rows.rows.length) + " of " + fmtInt(rows.matched) +
    (rows.matched !== rows.total ? " (filtered from " + fmtInt(rows.total) + ")" : "");
}
