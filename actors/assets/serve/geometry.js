// geometry.js — where things go in the page's pictures, as pure arithmetic: the stage graph's
// columns and boxes, the run waterfall's time axis (pauses folded) and its "resumed" labels,
// the batch timeline's time axis, ticks and rows.
// Must not: touch the DOM or a canvas (the views draw what these functions place).

// ---------- the stage graph ----------
// A box per stage, in columns by depth (a stage one column right of the deepest it needs).
export const STAGE_BOX = { width: 220, height: 94, gapX: 60, gapY: 18, pad: 8 };

// Each stage's box position ({x, y} by stage id) and the picture's size. A `needs` cycle or an
// unknown stage cannot make it loop: such a need counts as depth 0.
export function stageLayout(stages) {
  const { width: W, height: H, gapX: GX, gapY: GY, pad: PAD } = STAGE_BOX;
  const depth = new Map();
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const stage = stages.find((s) => s.id === id);
    const d = stage && stage.needs.length ? 1 + Math.max(...stage.needs.map((n) => depthOf(n, seen))) : 0;
    depth.set(id, d);
    return d;
  };
  stages.forEach((s) => depthOf(s.id));
  const columns = [];
  for (const s of stages) (columns[depth.get(s.id)] = columns[depth.get(s.id)] || []).push(s);
  const tallest = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
  const width = PAD * 2 + columns.length * W + (columns.length - 1) * GX;
  const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
  const position = new Map();
  columns.forEach((column, x) => (column || []).forEach((s, y) => {
    const offset = (tallest - column.length) * (H + GY) / 2;
    position.set(s.id, { x: PAD + x * (W + GX), y: PAD + offset + y * (H + GY) });
  }));
  return { width, height, position };
}

// ---------- the run waterfall ----------
export const PAUSE_WIDTH_MS = 400; // how wide a folded pause is drawn, in the waterfall's time

// The waterfall's time with each pause ({from, to}, sorted by `from`) folded to `pauseWidth`:
// time after a pause moves left by what the pause had beyond it; time inside one is squeezed.
export function foldPauses(pauses, pauseWidth = PAUSE_WIDTH_MS) {
  return (time) => {
    let folded = time;
    for (const p of pauses) {
      if (time >= p.to) folded -= (p.to - p.from) - pauseWidth;
      else if (time > p.from) folded -= (time - p.from) * (1 - pauseWidth / Math.max(p.to - p.from, 1));
    }
    return folded;
  };
}

// The waterfall's x axis for `spans` ({start, end|null}; a running one ends `now`) over a picture
// `width` wide: `x(time)` in pixels, bars starting right of the labels (`labelW`) and ending
// 60 px before the right edge; `t0`, `t1` the folded first and last instants; `pauses` sorted.
export function waterfallScale(spans, pauses, now, width) {
  const sorted = pauses.slice().sort((a, b) => a.from - b.from);
  const fold = foldPauses(sorted);
  const starts = spans.map((s) => s.start);
  const ends = spans.map((s) => s.end ?? now);
  const t0 = fold(Math.min(...starts)), t1 = Math.max(fold(Math.max(...ends)), t0 + 1);
  const labelW = Math.min(220, width * 0.3);
  const x = (time) => labelW + (width - labelW - 60) * (fold(time) - t0) / (t1 - t0);
  return { pauses: sorted, t0, t1, labelW, x };
}

export const RESUMED_LABEL_WIDTH = 56; // "resumed" at 11 px, with room to spare

// Where each "resumed" mark (at x `marks[i]`, left to right) puts its label: {x, anchor} right
// of the mark, left of it where the right edge is too near, or null where it would overlap the
// label before.
export function resumedLabels(marks, width) {
  let labelledUpTo = -Infinity;
  return marks.map((px) => {
    const atEnd = px + 3 + RESUMED_LABEL_WIDTH > width;
    const from = atEnd ? px - 3 - RESUMED_LABEL_WIDTH : px + 3;
    if (from < labelledUpTo) return null;
    labelledUpTo = from + RESUMED_LABEL_WIDTH;
    return { x: atEnd ? px - 3 : px + 3, anchor: atEnd ? "end" : "start" };
  });
}

// ---------- the batch timeline ----------
export const TIMELINE_AXIS_HEIGHT = 22;

// Row height and picture height for `count` runs: rows shrink (down to half a pixel) so the
// picture stays about 560 px tall, whatever the batch's size.
export function timelineRows(count) {
  const rowH = count ? Math.max(0.5, Math.min(14, 560 / count)) : 14;
  return { rowH, height: Math.max(80, Math.ceil(count * rowH) + TIMELINE_AXIS_HEIGHT + 6) };
}

// The first and last instants of the bars ([index, stage, status, queued, started, ended]; a
// bar queued or started but not ended reaches `now`), at least 1 ms apart; null before any run.
export function timelineSpan(bars, now) {
  let t0 = Infinity, t1 = -Infinity;
  for (const [, , , q, s, e] of bars) {
    for (const t of [q, s, e]) if (t != null) { t0 = Math.min(t0, t); t1 = Math.max(t1, t); }
    if (e == null && (q != null || s != null)) t1 = Math.max(t1, now);
  }
  if (!isFinite(t0)) return null;
  return { t0, t1: t1 <= t0 ? t0 + 1 : t1 };
}

// Time `t0`…`t1` onto pixels `left`…`right`.
export function timeScale(t0, t1, left, right) { return (t) => left + (right - left) * (t - t0) / (t1 - t0); }

// A round tick step giving at most about ten ticks over `span` ms.
export function tickStep(span) {
  const steps = [10, 50, 100, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000];
  return steps.find((s) => span / s <= 10) || 3600000;
}

// The ticks over `span` ms, as offsets from its start (0 first).
export function ticks(span) {
  const step = tickStep(span);
  const offsets = [];
  for (let t = 0; t <= span; t += step) offsets.push(t);
  return offsets;
}

// The row of `count` under a point `y` px below the picture's top, or -1 outside the rows.
export function rowAt(y, rowH, count) {
  const i = Math.floor((y - TIMELINE_AXIS_HEIGHT) / rowH);
  return i >= 0 && i < count ? i : -1;
}
