// address.js — the page's addresses (the #/… part of its URL) and the API query strings
// built from them: pure functions from text to parts and back.
//
// #/                                  sessions
// #/session/<sid>[/worker/<wid>]      a session, a worker's terminal
// #/runs                              every workspace's runs and orchestrations
// #/runs/<ws>                         one workspace (<ws>: its path, URL-encoded)
// #/runs/<ws>/o/<id>[/stage/<s>|/timeline][?status=&q=&sort=&order=&page=]   an orchestration
// #/runs/<ws>/r/<run>[/call/<n>|/tool/<id>]                                 a run, a model or tool call
// Every view is an address: reload, share or open it in a new tab; the back button goes back.
//
// Must not: read or change `location` or the history (router.js does), touch the DOM.

// The address `hash` ("#/runs/a%2Fb?q=x") as its decoded parts and its query.
export function parseAddress(hash) {
  const raw = hash.replace(/^#\/?/, "");
  const cut = raw.indexOf("?");
  const path = cut < 0 ? raw : raw.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : raw.slice(cut + 1));
  const parts = path.split("/").filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  return { parts, params, hash };
}

// The address of `parts` (each encoded whole, so a path with slashes is one part) and of the
// query `params` (empty values left out): parseAddress(href(parts, params)) gives them back.
export function href(parts, params) {
  const path = "#/" + parts.map((p) => encodeURIComponent(p)).join("/");
  const kept = params ? Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined) : [];
  const query = new URLSearchParams(kept).toString();
  return query ? path + "?" + query : path;
}

// The address without its query: what the scroll position is remembered by.
export function pagePath(hash) { return hash.split("?")[0]; }

// Whether `hash` names no view (the page opened at its bare URL).
export function isBareAddress(hash) { return /^#?\/?$/.test(hash); }

export function sessionHash(sessionId) { return "#/session/" + sessionId; }

export function workerHash(sessionId, workerId) { return "#/session/" + sessionId + "/worker/" + workerId; }

// Which runs page an address shows: two addresses of one key are one page with other filters.
export function runsPageKey(parts) {
  const [, workspace, kind, id, sub] = parts;
  return [workspace, kind, id, sub === "timeline" ? "timeline" : ""].join("\u0000");
}

// An orchestration's stage in its address (#/runs/<ws>/o/<id>/stage/<s>), or "".
export function stageOf(parts) { return parts[4] === "stage" ? parts[5] || "" : ""; }

// The model call or tool call a run's address selects ({kind: "call"|"tool", key}), or null.
export function runSelection(parts) {
  const [, , , , kind, key] = parts;
  return kind === "call" || kind === "tool" ? { kind, key } : null;
}

// The address of an orchestration's runs with `params` changed by `changes`, at `stage` ("" for
// every stage).
export function orchestrationHref(workspace, id, params, changes, stage) {
  const current = Object.fromEntries(params.entries());
  Object.assign(current, changes);
  const parts = ["runs", workspace, "o", id];
  if (stage) parts.push("stage", stage);
  return href(parts, current);
}

// `workspace=<path>`, the query every runs request names its workspace with.
export function workspaceQuery(workspace) { return "workspace=" + encodeURIComponent(workspace); }

// The query of one page of an orchestration's runs (GET /api/orchestrations/<id>/runs), from
// the filters of its address; a page number that is not one reads as the first page.
export function runsQuery(workspace, stage, params, pageSize) {
  const pageNo = Math.max(0, (Number(params.get("page")) || 1) - 1);
  return new URLSearchParams({
    workspace, stage, status: params.get("status") || "", q: params.get("q") || "",
    sort: params.get("sort") || "index", order: params.get("order") || "asc",
    offset: String(pageNo * pageSize), limit: String(pageSize),
  }).toString();
}
