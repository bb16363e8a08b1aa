// inspector.js — the run inspector (#/runs/<ws>/r/<run>[/call/<n>|/tool/<id>]): the run's
// iterations as a waterfall (each model call, tool call and wait for an answer a bar with its
// duration; the time a run was not driven is folded, with a "resumed" mark), the details of
// the model call or tool call clicked, one entry per event, the answer box of a run that waits
// for one, and, while the run runs, its current model reply growing as it streams.
// Must not: show a sensitive answer (the server sends it redacted; this page shows the mark),
// or start a run's continuation itself (the server's /answer does).

import { api } from "./api.js";
import { href, runSelection, workspaceQuery } from "./address.js";
import { crumbs, el, statusSpan, svg } from "./dom.js";
import { age, clip, fmtInt, fmtMs, fmtTokens, fmtUsd, shellQuote } from "./format.js";
import { resumedLabels, waterfallScale } from "./geometry.js";
import { poller } from "./poll.js";

const LIVE_POLL_MS = 1000;

export function inspectorPage(view, workspace, runId, route) {
  const page = { trace: null, route, error: null, detail: null, detailKey: null, detailError: null, answerStatus: null };
  const header = el("div", { id: "run-header" });
  const partialBox = el("div", { id: "partial-reply", class: "partial", "aria-live": "polite", hidden: true });
  const waterfallBox = el("div", { class: "waterfall", id: "waterfall" });
  const detailBox = el("div", { id: "call-detail", class: "detail", hidden: true, tabindex: "-1" });
  const answerBox = el("div", { class: "answer-box" });
  const entriesBox = el("div", { id: "run-entries" });
  view.append(el("div", { class: "inspector-grid" }, header, partialBox, waterfallBox, detailBox, answerBox, el("h2", {}, "Events"), entriesBox));
  const base = "/api/runs/" + encodeURIComponent(runId);
  const runHref = (...more) => href(["runs", workspace, "r", runId].concat(more));
  const selection = () => runSelection(page.route.parts);

  async function load() {
    try {
      const known = page.trace ? "&known=" + page.trace.journalBytes : "";
      const data = await api("GET", base + "/trace?" + workspaceQuery(workspace) + known);
      if (data.unchanged && page.trace) {
        page.trace.partial = data.partial || null;
        page.trace.now = data.now;
        if (data.status) page.trace.status = data.status;
        renderPartial();
        renderWaterfall();
        renderHeader();
        return;
      }
      page.trace = data;
      page.error = null;
    } catch (e) { page.error = e.message; }
    renderAll();
  }

  function renderAll() {
    renderHeader();
    renderPartial();
    renderWaterfall();
    renderEntries();
    renderAnswer();
    loadDetail();
  }

  function renderHeader() {
    const t = page.trace;
    const trail = [{ text: "Runs & batches", href: "#/runs" }, { text: workspace, href: href(["runs", workspace]) }];
    if (t && t.orchestrationId) trail.push({ text: t.orchestrationId, href: href(["runs", workspace, "o", t.orchestrationId]) });
    trail.push({ text: runId });
    header.replaceChildren(crumbs(...trail));
    if (page.error) header.append(el("p", { class: "error-text", role: "alert" }, page.error));
    if (!t) { if (!page.error) header.append(el("p", { class: "hint" }, "loading…")); return; }
    const duration = t.durationMs != null ? t.durationMs : null;
    header.append(el("h1", { id: "run-title" }, "Run " + runId + " ", statusSpan(t.status || "UNKNOWN")),
      el("div", { class: "meta" },
        el("span", {}, "agent ", el("b", {}, t.agent || "?")),
        el("span", {}, el("b", {}, String(t.iterations)), " iterations"),
        el("span", {}, el("b", {}, fmtTokens(t.tokens)), " tokens"),
        el("span", { title: t.costNote || "" }, "cost ", el("b", { id: "run-cost" }, fmtUsd(t.costUsd))),
        duration != null ? el("span", {}, "last driven ", el("b", {}, fmtMs(duration))) : null,
        t.createdAt ? el("span", { title: t.createdAt }, "started " + age(t.createdAt, Date.now())) : null,
        t.pauses.length ? el("span", {}, "resumed " + t.pauses.length + "×") : null),
      t.error ? el("p", { class: "error-text", id: "run-error" }, el("b", {}, t.error[0] || "error"), ": " + t.error[1]) : "",
      t.unreadable ? el("p", { class: "error-text" }, t.unreadable) : "",
      t.truncated ? el("p", { class: "hint" }, "This journal is long: only its last 32 MiB are shown.") : "");
  }

  function renderPartial() {
    const partial = page.trace && page.trace.partial;
    partialBox.hidden = !partial;
    if (!partial) return;
    partialBox.replaceChildren(el("div", { class: "title" }, "The model is replying (model call " + partial.iteration + ")"),
      partial.reasoning ? el("details", {}, el("summary", {}, "reasoning"), el("pre", {}, partial.reasoning)) : "",
      el("pre", { id: "partial-text" }, partial.content));
  }

  // The waterfall: one row per span; the x axis is the run's time with each pause between a
  // stop and its continuation folded (geometry.js).
  function renderWaterfall() {
    const t = page.trace;
    waterfallBox.replaceChildren();
    if (!t) return;
    const spans = t.spans;
    if (!spans.length) { waterfallBox.append(el("p", { class: "hint" }, "No model call yet.")); return; }
    const now = t.now;
    const width = Math.max(320, waterfallBox.clientWidth || 800);
    const { pauses, t0, t1, labelW, x } = waterfallScale(spans, t.pauses, now, width);
    const rowH = 18, top = 18;
    // The "resumed" marks are labelled on a row of their own below the bars, so a label
    // never runs into the axis's texts, the bars or the picture's edge.
    const rowsBottom = top + spans.length * rowH;
    const marksH = pauses.length ? 16 : 0;
    const picture = svg("svg", { width: String(width), height: String(rowsBottom + marksH + 4), role: "img", "aria-label": "waterfall of the run's calls" });
    const total = fmtMs(Math.round(t1 - t0)) + (pauses.length ? " (pauses folded)" : "");
    picture.append(svg("text", { class: "dim", x: "0", y: "12" }, "calls over time"),
      svg("text", { class: "dim", x: String(labelW), y: "12" }, "0"),
      svg("text", { class: "dim", x: String(width - 60), y: "12", "text-anchor": "end" }, total));
    const marks = pauses.map((p) => x(p.to));
    resumedLabels(marks, width).forEach((place, i) => {
      const px = marks[i];
      const when = "resumed after " + fmtMs(pauses[i].to - pauses[i].from) + " without being driven";
      const mark = svg("g", { class: "resumed-mark" }, svg("title", {}, when),
        svg("line", { class: "resumed", x1: String(px), x2: String(px), y1: "14", y2: String(rowsBottom + 4) }));
      picture.append(mark);
      if (!place) return;
      mark.append(svg("text", { class: "dim resumed-label", x: String(place.x), y: String(rowsBottom + marksH), "text-anchor": place.anchor }, "resumed"));
    });
    const selected = selection();
    spans.forEach((span, i) => picture.append(waterfallRow(span, top + i * rowH, rowH, { x, width, now, selected })));
    waterfallBox.append(picture);
  }

  // One span of the waterfall at `y`: its label, its bar, its duration; a model or tool call is
  // a link to its details.
  function waterfallRow(span, y, rowH, { x, width, now, selected }) {
    const key = span.kind === "model" ? "call/" + span.iteration : span.actionId ? "tool/" + span.actionId : null;
    const isSelected = selected && key === selected.kind + "/" + selected.key;
    const end = span.end ?? now;
    const failed = span.status === "FAILED" || span.status === "ERROR";
    const bx = x(span.start), bw = Math.max(2, x(end) - bx);
    const label = (span.kind === "model" ? "" : span.kind === "human" ? "? " : "▸ ") + span.label;
    const title = span.label + ": " + (span.startUnknown ? "start not recorded, " : "") + (span.end == null ? "running for " : "") +
      fmtMs(end - span.start) + (span.status ? " (" + span.status + ")" : "");
    const barClass = "bar-" + (failed ? "failed" : span.kind) + (span.end == null ? " live" : "");
    return svg(key ? "a" : "g", { class: "row" + (isSelected ? " selected" : ""), href: key ? runHref(...key.split("/")) : null, "data-span": key || "",
      "data-kind": span.kind },
      svg("title", {}, title),
      svg("rect", { class: "hit", x: "0", y: String(y), width: String(width), height: String(rowH), fill: "transparent" }),
      svg("text", { x: "4", y: String(y + 13) }, clip(label, 30)),
      svg("rect", { class: barClass, x: String(bx), y: String(y + 4), width: String(bw), height: String(rowH - 8), rx: "2" }),
      svg("text", { class: "dim", x: String(Math.min(bx + bw + 4, width - 56)), y: String(y + 13) }, span.end == null ? "…" : fmtMs(end - span.start)));
  }

  function renderEntries() {
    const t = page.trace;
    entriesBox.replaceChildren();
    if (!t) return;
    if (!t.entries.length) entriesBox.append(el("p", { class: "hint" }, "The journal is empty."));
    for (const entry of t.entries) entriesBox.append(entryView(entry, runHref));
  }

  function renderAnswer() {
    const t = page.trace;
    answerBox.replaceChildren();
    if (!t || t.status !== "WAITING_FOR_INPUT") return;
    const answer = el("textarea", { id: "answer-text", rows: "3", "aria-label": "your answer" });
    const outcome = el("p", { id: "answer-outcome", class: "error-text" }, page.answerStatus || "");
    const send = async () => {
      outcome.textContent = "";
      try {
        // The server hands the answer to `delta continue` on its stdin, never in its arguments.
        const sent = await api("POST", base + "/answer", { workspace, message: answer.value });
        page.trace.status = sent.status || "RUNNING";
        answerBox.replaceChildren(el("p", { class: "hint" }, "Answer sent; the run continues."));
        polling.kick();
      } catch (e) { outcome.textContent = e.message; }
    };
    answerBox.append(el("h2", {}, "Answer the run"), answer,
      el("div", { class: "toolbar" }, el("button", { id: "answer-send", onclick: send }, "Send (like delta continue)")), outcome);
  }

  // ---------- the call clicked ----------
  async function loadDetail() {
    const selected = selection();
    if (!selected) { detailBox.hidden = true; page.detailKey = null; return; }
    const key = selected.kind + "/" + selected.key;
    if (page.detailKey === key && page.detail) { renderDetail(); return; }
    page.detailKey = key;
    page.detail = null;
    page.detailError = null;
    detailBox.hidden = false;
    detailBox.replaceChildren(el("p", { class: "hint" }, "loading…"));
    const path = selected.kind === "call" ? "/calls/" + encodeURIComponent(selected.key) : "/tools/" + encodeURIComponent(selected.key);
    try {
      const detail = await api("GET", base + path + "?" + workspaceQuery(workspace));
      if (page.detailKey !== key) return;
      page.detail = detail;
    } catch (e) { page.detailError = e.message; }
    renderDetail();
    detailBox.scrollIntoView({ block: "nearest" });
  }

  function renderDetail() {
    const selected = selection();
    detailBox.hidden = !selected;
    if (!selected) return;
    const close = el("a", { href: runHref(), style: "float:right" }, "close");
    if (page.detailError) { detailBox.replaceChildren(close, el("p", { class: "error-text" }, page.detailError)); return; }
    const d = page.detail;
    if (!d) return;
    detailBox.replaceChildren(close, ...(selected.kind === "call" ? modelCallView(d) : toolCallView(d)));
  }

  const polling = poller(load, LIVE_POLL_MS, () => !page.trace || page.trace.status === "RUNNING");
  polling.start();
  return {
    update(next) { page.route = next; renderWaterfall(); loadDetail(); },
    stop() { polling.stop(); },
    resized() { renderWaterfall(); },
  };
}

// One journal entry of the run; `runHref(...)` the address of a call of this run.
function entryView(entry, runHref) {
  const when = el("span", { class: "when" }, entry.timestamp);
  if (entry.kind === "resumed") return el("div", { class: "entry resumed", "data-kind": "resumed" }, entry.title, when);
  const box = el("div", { class: "entry " + entry.kind + (entry.status ? " " + entry.status : ""), "data-kind": entry.kind, "data-seq": String(entry.seq) },
    el("span", { class: "title" }, entry.title), when);
  if (entry.kind === "reply") box.append(el("a", { class: "open", href: runHref("call", String(entry.iteration)) }, "request & reply"));
  if (entry.kind === "tool" && entry.actionId) box.append(el("a", { class: "open", href: runHref("tool", entry.actionId) }, "argv & output"));
  if (entry.text) box.append(el("pre", {}, entry.text));
  if (entry.calls && entry.calls.length) box.append(el("div", { class: "calls" }, entry.calls.map((c) => c.name + "(" + c.arguments + ")").join("\n")));
  if (entry.kind === "question") {
    const answered = entry.answer !== undefined && entry.answer !== null;
    const why = "a sensitive answer is kept only in the run's secrets/ (0600) and never shown";
    box.append(el("div", {}, el("b", {}, "Answer: "),
      !answered ? el("span", { class: "hint" }, "not answered yet")
        : entry.redacted ? el("span", { class: "redacted", "data-redacted": "true", title: why }, entry.answer)
          : el("span", {}, entry.answer),
      entry.sensitive ? el("span", { class: "hint" }, " (sensitive)") : ""));
  }
  return box;
}

function kv(label, value) { return value === undefined || value === null || value === "" ? null : el("span", {}, label + " ", el("b", {}, String(value))); }

function modelCallView(d) {
  const usage = d.usage || {};
  const parts = [el("h2", { id: "detail-title" }, "Model call " + d.iteration + (d.model ? " · " + d.model : "")),
    el("div", { class: "meta" }, kv("duration", fmtMs(d.durationMs)), kv("waited for the endpoint's limits", d.waitedMs ? fmtMs(d.waitedMs) : null),
      kv("attempts", d.attempts), kv("streamed", d.stream === undefined ? null : d.stream ? "yes" : "no"),
      kv("prompt tokens", usage.prompt_tokens), kv("completion tokens", usage.completion_tokens), kv("finish", d.finishReason), kv("record", d.record))];
  if (d.error) parts.push(el("p", { class: "error-text" }, "Failed: " + d.error));
  if (d.failedAttempts && d.failedAttempts.length) {
    const attempt = (a) => (a.attempt ? "attempt " + a.attempt + ": " : "") + a.error +
      (a.retryInMs != null ? " (retried after " + fmtMs(a.retryInMs) + ")" : "");
    parts.push(el("h3", {}, "Failed attempts"), el("ol", { id: "failed-attempts" }, ...d.failedAttempts.map((a) => el("li", {}, attempt(a)))));
  }
  parts.push(el("h3", {}, "Request: " + d.messages.length + " messages" + (d.tools.length ? ", tools " + d.tools.join(", ") : "")));
  const messages = el("div", { id: "request-messages" });
  for (const m of d.messages) {
    m.toolCalls = m.toolCalls || [];
    const title = m.role + (m.source ? " · context " + m.source : "") + (m.toolCallId ? " · result of " + m.toolCallId : "");
    const body = [el("pre", {}, m.content || (m.toolCalls.length ? "" : "(empty)"))];
    if (m.toolCalls.length) body.push(el("div", { class: "calls mono" }, m.toolCalls.join("\n")));
    const summary = el("summary", {}, title + " — " + (m.content || m.toolCalls.join(" ")).slice(0, 120));
    messages.append(el("details", { open: !m.collapsed, "data-role": m.role }, summary, ...body));
  }
  parts.push(messages, el("h3", {}, "Reply"));
  const reply = el("div", { id: "reply" });
  if (d.reasoning) reply.append(el("details", {}, el("summary", {}, "reasoning"), el("pre", {}, d.reasoning)));
  reply.append(el("pre", {}, d.reply || (d.replyToolCalls.length ? "" : "(no text)")));
  if (d.replyToolCalls.length) reply.append(el("div", { class: "calls mono" }, "tool calls:\n" + d.replyToolCalls.join("\n")));
  parts.push(reply);
  return parts;
}

function outputView(name, output) {
  if (!output) return [el("h3", {}, name), el("p", { class: "hint" }, "(nothing)")];
  const parts = [el("h3", {}, name + " · " + fmtInt(output.bytes) + " bytes")];
  const pre = el("pre", { class: "output", id: "tool-" + name }, output.head);
  parts.push(pre);
  if (output.omitted) {
    parts.push(el("div", { class: "omitted" }, "… " + fmtInt(output.omitted) + " bytes not shown …"), el("pre", { class: "output" }, output.tail));
  }
  return parts;
}

function toolCallView(d) {
  const parts = [el("h2", { id: "detail-title" }, "Tool call " + d.tool + " · " + d.actionId),
    el("div", { class: "meta" }, kv("status", d.status), kv("exit code", d.exitCode), kv("signal", d.signal), kv("duration", fmtMs(d.durationMs)),
      kv("timed out", d.timedOut ? "yes" : null), kv("iteration", d.iteration), kv("record", d.record))];
  if (d.spawnError) parts.push(el("p", { class: "error-text" }, "Could not start: " + d.spawnError));
  parts.push(el("h3", {}, "argv"), el("pre", { id: "tool-argv" }, d.argv.length ? d.argv.map(shellQuote).join(" ") : d.command || "(none)"));
  parts.push(el("details", {}, el("summary", {}, "arguments the model gave"), el("pre", {}, JSON.stringify(d.arguments, null, 2))));
  if (d.outputTruncated) parts.push(el("p", { class: "omitted" }, "The stored output was cut at the engine's cap when it was written."));
  if (d.stdout || d.stderr) parts.push(...outputView("stdout", d.stdout), ...outputView("stderr", d.stderr));
  const shown = el("pre", { id: "tool-observation" }, d.observation);
  parts.push(el("details", { open: !(d.stdout || d.stderr) }, el("summary", {}, "what the model was shown"), shown));
  return parts;
}
