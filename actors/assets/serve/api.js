// api.js — the token and the server: the login, the check that the server answering is the
// one this page logged in to, the REST helper `api` and the WebSocket address and
// subprotocols, and the banners that say why the page stopped talking to the server.
//
// `delta serve` prints http://HOST/#token=…: a fragment is never sent to a server nor logged.
// The page keeps the token in localStorage, which is scoped to this scheme, host *and port*
// (unlike a cookie, other servers on 127.0.0.1 never see it), so reloads and new tabs find it,
// and removes it from the address bar. REST calls send it as `Authorization: Bearer`; the
// WebSockets, which cannot carry headers, offer it as a subprotocol (token.js).
//
// Login: a token from the fragment is stored only once the server confirms it
// (GET /api/identity answers 200 to it): any site can link to /#token=x, and an unconfirmed
// token never replaces one that works. The login's answer is this server start's identity
// (a probe and its proof). After any connection loss (a socket closed, a request that got no
// answer) the page asks GET /api/identity/check with the probe and *without* the token, and
// sends the token again only to a server that answers the proof: a program that took the
// port after delta serve stopped knows neither, and is sent nothing.
//
// Must not: send the token to a server not proven to be this page's since a loss; keep a
// token the server did not confirm; put the token in a URL, a cookie or the DOM.

import { $ } from "./dom.js";
import { bearer, tokenInFragment, tokenSubprotocols } from "./token.js";

const TOKEN_KEY = "delta-serve-token";

// True once the server refused this page's token (or it has none): the page stops asking.
export let tokenProblem = false;

// This server start's identity and whether the token may go out now; `changed` once another
// program answered at this address; `startView`: the view a bare address opens on.
export const server = { probe: null, proof: null, verified: false, checking: null, changed: false, startView: "sessions" };

// The token of a /#token=… address, taken out of the address bar (null without one).
function tokenFromUrl() {
  const token = tokenInFragment(location.hash);
  if (token !== null) history.replaceState(null, "", location.pathname + location.search);
  return token;
}

function storedToken() { return localStorage.getItem(TOKEN_KEY) || ""; }

function authHeaders() { return { Authorization: bearer(storedToken()) }; }

export function wsProtocols() { return tokenSubprotocols(storedToken()); }

export function wsUrl(path) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
}

// This server's identity for `candidate`, or null when it refuses the token (throws when
// nobody answers). The one request that sends a token not yet known to work.
async function identityFor(candidate) {
  const response = await fetch("/api/identity", { headers: { Authorization: bearer(candidate) }, cache: "no-store", redirect: "error" });
  if (response.status === 401) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok || !data || !data.probe || !data.proof) throw new Error("unexpected answer to the login (HTTP " + response.status + ")");
  return data;
}

function adopt(identity) {
  Object.assign(server, { probe: identity.probe, proof: identity.proof, verified: true, changed: false, startView: identity.startView || "sessions" });
}

// At start: the link's token if the server confirms it, else the stored one if it works.
export async function login() {
  const offered = tokenFromUrl();
  const stored = storedToken();
  if (offered !== null && offered !== stored) {
    const identity = await identityFor(offered);
    if (identity) { localStorage.setItem(TOKEN_KEY, offered); adopt(identity); return; }
    notice("The link's token was refused by this server, so it was not kept" + (stored ? ": this page goes on with the token it had." : "."));
  }
  if (!stored) { showTokenProblem(); return; }
  const identity = await identityFor(stored);
  if (identity) adopt(identity);
  else showTokenProblem();
}

export function connectionLost() { server.verified = false; }

// Whether the token may go out now: at once while nothing was lost since the last check;
// otherwise after the server proved it is the one this page logged in to. False while no
// one answers (try again later) and for good once another program answered.
export function serverVerified() {
  if (server.verified) return Promise.resolve(true);
  if (server.changed || !server.probe) return Promise.resolve(false);
  if (!server.checking) server.checking = checkServer().finally(() => { server.checking = null; });
  return server.checking;
}

async function checkServer() {
  let response;
  try { response = await fetch("/api/identity/check", { headers: { "X-Delta-Probe": server.probe }, cache: "no-store", redirect: "error" }); }
  catch (e) { return false; } // nobody answers (yet)
  const data = await response.json().catch(() => null);
  if (response.ok && data && data.proof === server.proof) { server.verified = true; return true; }
  showServerChanged();
  return false;
}

function banner(text) {
  const box = $("token-problem");
  box.textContent = text;
  box.hidden = false;
  $("connection").classList.remove("live");
}

function notice(text) {
  const box = $("token-notice");
  box.textContent = text;
  box.hidden = false;
}

export function showTokenProblem() {
  tokenProblem = true;
  const why = storedToken()
    ? "This page's token is not this server's: delta serve makes a new one each time it starts (unless DELTA_SERVE_TOKEN sets it)."
    : "This page has no token yet.";
  banner(why + " Open the URL that `delta serve` printed (http://" + location.host +
    "/#token=…) once in this browser; reloads and new tabs then keep working.");
  $("connection").textContent = "no valid token";
}

function showServerChanged() {
  server.changed = true;
  server.verified = false;
  banner("This page stopped talking to http://" + location.host + ": the server answering there now is not the delta serve this page " +
    "was opened from (that one stopped or restarted, and another program may hold its port), so the page did not send it its token. " +
    "Start delta serve again and open the URL it prints.");
  $("connection").textContent = "server changed";
}

// Opening the printed URL in another tab stores a new token: a page that lost its own (or
// its server) picks it up by reloading.
export function reloadOnNewToken() {
  window.addEventListener("storage", (event) => { if (event.key === TOKEN_KEY && (tokenProblem || server.changed)) location.reload(); });
}

// Whether the server refuses the token (asked only of a verified server).
export async function tokenRejected() {
  if (!(await serverVerified())) return false;
  try { return (await fetch("/api/agents", { headers: authHeaders() })).status === 401; }
  catch (e) { connectionLost(); return false; }
}

export class ApiError extends Error {
  constructor(message, status, code) { super(message); this.status = status; this.code = code; }
}

// A REST call: the parsed JSON answer, or an ApiError (status 0 when nothing was sent or
// nothing answered).
export async function api(method, path, body) {
  if (!(await serverVerified())) {
    throw server.changed ? new ApiError("not sent: the server at this address is not the delta serve this page was opened from", 0, "server_changed")
      : new ApiError("delta serve does not answer; retrying", 0, "offline");
  }
  const options = { method, headers: authHeaders() };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try { response = await fetch(path, options); }
  catch (e) { connectionLost(); throw new ApiError("delta serve does not answer (" + e.message + ")", 0, "offline"); }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (response.status === 401) showTokenProblem();
  if (!response.ok) throw new ApiError((data && data.error) || response.statusText, response.status, data && data.code);
  return data;
}
