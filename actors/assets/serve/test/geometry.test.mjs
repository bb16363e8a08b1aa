// Where the page's pictures put things (geometry.js): the stage graph's boxes, the waterfall's
// folded time axis and its "resumed" labels, the batch timeline's axis, ticks and rows.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  foldPauses, PAUSE_WIDTH_MS, RESUMED_LABEL_WIDTH, resumedLabels, rowAt, STAGE_BOX, stageLayout, tickStep, ticks, TIMELINE_AXIS_HEIGHT,
  timelineRows, timelineSpan, timeScale, waterfallScale,
} from "../geometry.js";

// A small deterministic generator, so a property test fails the same way every time.
function numbers(seed) {
  let s = seed;
  return () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648; };
}

test("stages stand in columns by depth, each column centred on the tallest", () => {
  const stages = [{ id: "split", needs: [] }, { id: "map", needs: ["split"] }, { id: "side", needs: ["split"] },
    { id: "reduce", needs: ["map", "side"] }];
  const { width, height, position } = stageLayout(stages);
  const { width: W, height: H, gapX: GX, gapY: GY, pad: PAD } = STAGE_BOX;
  assert.equal(width, PAD * 2 + 3 * W + 2 * GX);
  assert.equal(height, PAD * 2 + 2 * H + GY);
  assert.deepEqual(position.get("map"), { x: PAD + W + GX, y: PAD });
  assert.deepEqual(position.get("side"), { x: PAD + W + GX, y: PAD + H + GY });
  assert.deepEqual(position.get("split"), { x: PAD, y: PAD + (H + GY) / 2 });
  assert.deepEqual(position.get("reduce"), { x: PAD + 2 * (W + GX), y: PAD + (H + GY) / 2 });
});

test("a needs cycle or an unknown stage does not loop, and every stage gets a box", () => {
  const stages = [{ id: "a", needs: ["b"] }, { id: "b", needs: ["a"] }, { id: "c", needs: ["ghost"] }];
  const { position } = stageLayout(stages);
  assert.deepEqual([...position.keys()].sort(), ["a", "b", "c"]);
  assert.deepEqual(stageLayout([]).position.size, 0);
});

test("a pause is folded to its fixed width; time stays in order around and inside it", () => {
  const fold = foldPauses([{ from: 1000, to: 11000 }]);
  assert.equal(fold(500), 500);
  assert.equal(fold(1000), 1000);
  assert.equal(fold(11000), 1000 + PAUSE_WIDTH_MS);
  assert.equal(fold(12000), 2000 + PAUSE_WIDTH_MS);
  assert.equal(fold(6000), 1000 + PAUSE_WIDTH_MS / 2, "the middle of the pause is the middle of its folded width");
  const two = foldPauses([{ from: 100, to: 200 }, { from: 1000, to: 61000 }]);
  let previous = -Infinity;
  for (let t = 0; t <= 70000; t += 50) {
    assert.ok(two(t) >= previous, "folded time went back at " + t);
    previous = two(t);
  }
  assert.equal(two(70000), 70000 - (100 - PAUSE_WIDTH_MS) - (60000 - PAUSE_WIDTH_MS));
});

test("the waterfall spans its bars from the label column to 60 px before the edge, pauses folded", () => {
  const spans = [{ start: 0, end: 1000 }, { start: 11000, end: null }];
  const { t0, t1, labelW, x, pauses } = waterfallScale(spans, [{ from: 1000, to: 11000 }], 12000, 800);
  assert.equal(labelW, 220);
  assert.equal(t0, 0);
  assert.equal(t1, 2000 + PAUSE_WIDTH_MS, "a running span ends now");
  assert.equal(x(0), 220);
  assert.equal(x(12000), 800 - 60);
  assert.equal(pauses.length, 1);
  assert.equal(waterfallScale([{ start: 5, end: 50 }], [], 99, 320).labelW, 96, "labels take at most 30 % of a narrow picture");
});

test("the waterfall sorts its pauses and never divides by a zero span", () => {
  const pauses = [{ from: 5000, to: 6000 }, { from: 1000, to: 2000 }];
  const { pauses: sorted } = waterfallScale([{ start: 0, end: 7000 }], pauses, 7000, 800);
  assert.deepEqual(sorted.map((p) => p.from), [1000, 5000]);
  assert.equal(pauses[0].from, 5000, "the trace's own list is left as it was");
  const instant = waterfallScale([{ start: 5, end: 5 }], [], 5, 800);
  assert.equal(instant.t1, instant.t0 + 1);
  assert.ok(Number.isFinite(instant.x(5)));
});

test("resumed labels sit right of their mark, left of it at the edge, and never overlap", () => {
  assert.deepEqual(resumedLabels([100, 130, 200, 790], 800),
    [{ x: 103, anchor: "start" }, null, { x: 203, anchor: "start" }, { x: 787, anchor: "end" }]);
  assert.deepEqual(resumedLabels([760, 790], 800), [{ x: 757, anchor: "end" }, null]);
  const random = numbers(35);
  for (let round = 0; round < 200; round++) {
    const width = 320 + Math.floor(random() * 900);
    const marks = Array.from({ length: 1 + Math.floor(random() * 12) }, () => RESUMED_LABEL_WIDTH + 3 + random() * (width - RESUMED_LABEL_WIDTH - 3))
      .sort((a, b) => a - b);
    const extents = resumedLabels(marks, width).filter(Boolean)
      .map((l) => (l.anchor === "start" ? [l.x, l.x + RESUMED_LABEL_WIDTH] : [l.x - RESUMED_LABEL_WIDTH, l.x]));
    assert.ok(extents.length >= 1, "the first mark is always labelled");
    for (const [from, to] of extents) assert.ok(from >= 0 && to <= width, `a label at ${from}…${to} leaves a ${width} px picture`);
    for (let i = 1; i < extents.length; i++) assert.ok(extents[i][0] >= extents[i - 1][1], "two labels overlap");
  }
});

test("the timeline's rows shrink to keep the picture about 560 px tall, down to half a pixel", () => {
  assert.deepEqual(timelineRows(0), { rowH: 14, height: 80 });
  assert.deepEqual(timelineRows(10), { rowH: 14, height: 140 + TIMELINE_AXIS_HEIGHT + 6 });
  assert.deepEqual(timelineRows(100), { rowH: 5.6, height: 560 + TIMELINE_AXIS_HEIGHT + 6 });
  assert.deepEqual(timelineRows(10000), { rowH: 0.5, height: 5000 + TIMELINE_AXIS_HEIGHT + 6 });
});

test("the timeline spans every queued, started and ended time, a bar not ended reaching now", () => {
  const bars = [[0, 0, 0, 100, 200, 300], [1, 0, 1, 150, null, null], [2, 0, 0, null, null, null]];
  assert.deepEqual(timelineSpan(bars, 1000), { t0: 100, t1: 1000 });
  assert.deepEqual(timelineSpan([[0, 0, 0, 100, 200, 300]], 1000), { t0: 100, t1: 300 }, "a finished batch ends at its last run");
  assert.deepEqual(timelineSpan([[0, 0, 0, 100, 100, 100]], 1000), { t0: 100, t1: 101 });
  assert.equal(timelineSpan([], 1000), null);
  assert.equal(timelineSpan([[0, 0, 0, null, null, null]], 1000), null, "no run handed to the engine yet");
  const x = timeScale(100, 1000, 4, 296);
  assert.equal(x(100), 4);
  assert.equal(x(1000), 296);
  assert.equal(x(550), 150);
});

test("ticks fall at a round step, about ten of them", () => {
  assert.equal(tickStep(80), 10);
  assert.equal(tickStep(101), 50);
  assert.equal(tickStep(10000), 1000);
  assert.equal(tickStep(10 * 3600000), 3600000);
  assert.equal(tickStep(3 * 86400000), 3600000, "beyond ten hours the step stays an hour");
  assert.deepEqual(ticks(1000), [0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]);
  for (const span of [1, 9, 10, 11, 99, 1234, 59999, 60001, 3599999, 36000000]) {
    const t = ticks(span);
    assert.ok(t.length >= 1 && t.length <= 11, span + " ms: " + t.length + " ticks");
    assert.equal(t[0], 0);
    assert.ok(t[t.length - 1] <= span);
  }
});

test("the row under the pointer, none on the axis or below the last row", () => {
  assert.equal(rowAt(TIMELINE_AXIS_HEIGHT - 1, 14, 10), -1);
  assert.equal(rowAt(TIMELINE_AXIS_HEIGHT, 14, 10), 0);
  assert.equal(rowAt(TIMELINE_AXIS_HEIGHT + 14 * 10 - 1, 14, 10), 9);
  assert.equal(rowAt(TIMELINE_AXIS_HEIGHT + 14 * 10, 14, 10), -1);
  assert.equal(rowAt(TIMELINE_AXIS_HEIGHT + 4999.9, 0.5, 10000), 9999);
  assert.equal(rowAt(500, 14, 0), -1);
});
