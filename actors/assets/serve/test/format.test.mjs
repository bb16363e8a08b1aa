// The page's formatting (format.js): counts, tokens, durations, ages, ids, shell arguments and
// the lines the stage graph and the batch table write.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  age, baseName, clip, fmtInt, fmtMs, fmtTokens, fmtUsd, isIdle, rowsShown, shellQuote, shortRun, stageProgress, stagesSummary, statusWords,
} from "../format.js";

test("counts are grouped by thousands and a missing count is 0", () => {
  assert.equal(fmtInt(0), "0");
  assert.equal(fmtInt(999), "999");
  assert.equal(fmtInt(10000), "10,000");
  assert.equal(fmtInt(1234567), "1,234,567");
  assert.equal(fmtInt(undefined), "0");
  assert.equal(fmtInt(null), "0");
});

test("tokens are a number or a usage record, its total first", () => {
  assert.equal(fmtTokens(null), "0");
  assert.equal(fmtTokens(undefined), "0");
  assert.equal(fmtTokens(12345), "12,345");
  assert.equal(fmtTokens({ total_tokens: 1500, input_tokens: 1, output_tokens: 2 }), "1,500");
  assert.equal(fmtTokens({ input_tokens: 1000, output_tokens: 234 }), "1,234");
  assert.equal(fmtTokens({ output_tokens: 7 }), "7");
  assert.equal(fmtTokens({}), "0");
});

test("durations use the largest readable unit, with each unit's boundary", () => {
  assert.equal(fmtMs(null), "");
  assert.equal(fmtMs(undefined), "");
  assert.equal(fmtMs(0), "0 ms");
  assert.equal(fmtMs(999), "999 ms");
  assert.equal(fmtMs(1000), "1.00 s");
  assert.equal(fmtMs(9994), "9.99 s");
  assert.equal(fmtMs(10000), "10.0 s");
  assert.equal(fmtMs(89900), "89.9 s");
  assert.equal(fmtMs(90000), "1 min 30 s");
  assert.equal(fmtMs(5399000), "89 min 59 s");
  assert.equal(fmtMs(5400000), "1 h 30 min");
  assert.equal(fmtMs(36000000), "10 h 0 min");
});

test("ages count back from the given now and say nothing of an unreadable time", () => {
  const now = Date.parse("2026-01-02T00:00:00Z");
  assert.equal(age("2026-01-01T23:59:30Z", now), "30s ago");
  assert.equal(age("2026-01-01T23:58:31Z", now), "89s ago");
  assert.equal(age("2026-01-01T23:58:30Z", now), "2m ago");
  assert.equal(age("2026-01-01T22:00:00Z", now), "2h ago");
  assert.equal(age("2025-12-30T00:00:00Z", now), "3d ago");
  assert.equal(age("2026-01-02T00:00:05Z", now), "0s ago", "a clock a little ahead is now, not the future");
  assert.equal(age("not a time", now), "");
});

test("a run id loses its orchestration's prefix only where it has it", () => {
  assert.equal(shortRun("o1-map-00042", "o1"), "map-00042");
  assert.equal(shortRun("o10-map-1", "o1"), "o10-map-1");
  assert.equal(shortRun("run-7", null), "run-7");
  assert.equal(shortRun("o1", "o1"), "o1");
});

test("names, statuses and cut labels", () => {
  assert.equal(baseName("/home/me/project/"), "project");
  assert.equal(baseName("/home/me/project"), "project");
  assert.equal(baseName("/"), "/");
  assert.equal(statusWords("WAITING_FOR_INPUT"), "WAITING FOR INPUT");
  assert.equal(clip("short", 30), "short");
  assert.equal(clip("a".repeat(30), 30), "a".repeat(30));
  assert.equal(clip("a".repeat(31), 30), "a".repeat(29) + "…");
});

test("shell arguments are quoted only when a shell would need it, quotes included", () => {
  assert.equal(shellQuote("ls"), "ls");
  assert.equal(shellQuote("/tmp/a-b_c.txt"), "/tmp/a-b_c.txt");
  assert.equal(shellQuote("two words"), "'two words'");
  assert.equal(shellQuote("$(rm -rf ~)"), "'$(rm -rf ~)'");
  assert.equal(shellQuote("it's"), "'it'\\''s'");
  assert.equal(shellQuote(""), "''");
});

test("an orchestration's stages in one line", () => {
  const stages = [{ id: "map", completed: 3, total: 4, failed: 1 }, { id: "reduce", completed: 0, total: 1, failed: 0 }];
  assert.equal(stagesSummary(stages), "map 3/4 (1 failed) · reduce 0/1");
  assert.equal(stagesSummary([]), "");
});

test("a stage box says its progress, or what it waits for", () => {
  const counts = (c) => Object.assign({ planned: 0, completed: 0, failed: 0, running: 0, waiting: 0 }, c);
  assert.equal(stageProgress({ status: "RUNNING", needs: [], counts: counts({ planned: 1200, completed: 1000, failed: 3, running: 5, waiting: 2 }) }),
    "1,000/1,200 done, 3 failed, 7 running");
  assert.equal(stageProgress({ status: "COMPLETED", needs: [], counts: counts({ planned: 4, completed: 4 }) }), "4/4 done");
  assert.equal(stageProgress({ status: "PENDING", needs: ["map", "split"], counts: counts({}) }), "waits for map, split");
  assert.equal(stageProgress({ status: "NOT_STARTED", needs: [], counts: counts({}) }), "waits for its start");
  assert.equal(stageProgress({ status: "COMPLETED", needs: [], counts: counts({}) }), "no runs");
  assert.equal(isIdle({ status: "SKIPPED" }), true);
  assert.equal(isIdle({ status: "RUNNING" }), false);
});

test("the batch table's pager says which rows of how many", () => {
  assert.equal(rowsShown({ matched: 0, total: 10, offset: 0, rows: [] }), "0 runs");
  assert.equal(rowsShown({ matched: 10000, total: 10000, offset: 100, rows: new Array(100) }), "101–200 of 10,000");
  assert.equal(rowsShown({ matched: 3, total: 10000, offset: 0, rows: new Array(3) }), "1–3 of 3 (filtered from 10,000)");
});

test("dollars are written as delta list-runs writes them, and unknown as a dash", () => {
  assert.equal(fmtUsd(null), "—");
  assert.equal(fmtUsd(undefined), "—");
  assert.equal(fmtUsd(0), "$0.00");
  assert.equal(fmtUsd(1.254), "$1.25");
  assert.equal(fmtUsd(0.000051), "$0.000051");
  assert.equal(fmtUsd(0.01), "$0.01");
});
