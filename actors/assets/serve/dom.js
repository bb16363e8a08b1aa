// dom.js — the page's element builders: `$` (an element by id), `el` (an HTML element), `svg`
// (an SVG element), `cell` (a table cell), `crumbs` (the trail above a runs page) and
// `statusSpan`. Every node is made with createElement and its text set as text.
// Must not: build HTML from text (parse markup: a future XSS would come in there),
// keep state or reach the server.

import { statusWords } from "./format.js";

export const $ = (id) => document.getElementById(id);

// The handler properties `el` sets as properties; every other key is an attribute.
const HANDLERS = new Set(["onclick", "oninput", "onchange", "onkeydown", "onsubmit"]);

export const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (HANDLERS.has(key)) node[key] = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
};

const SVG_NS = "http://www.w3.org/2000/svg";
export const svg = (tag, attrs = {}, ...children) => {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "onclick") node.onclick = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
};

// A cell cut to its width shows its whole text as a tooltip.
export const cell = (text, attrs = {}) => el("td", Object.assign({ title: String(text ?? "") }, attrs), String(text ?? ""));

export function statusSpan(status, text) { return el("span", { class: "status-" + status }, text || statusWords(status)); }

// "Runs & batches › workspace › …": items with an href are links.
export function crumbs(...items) {
  const box = el("div", { class: "crumbs" });
  items.forEach((item, i) => {
    if (i) box.append(" › ");
    const title = item.title || item.text;
    box.append(item.href ? el("a", { href: item.href, title }, item.text) : el("span", { title }, item.text));
  });
  return box;
}
