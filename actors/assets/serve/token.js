// token.js — the token's forms on the wire: read from a /#token=… address, as a Bearer
// header, as the WebSocket subprotocols. Pure functions; api.js keeps and sends the token.
// Must not: store the token, send it anywhere, or touch `location`.

// The token of a `#token=…` address (decoded when it can be), or null for any other address.
export function tokenInFragment(hash) {
  const match = hash.match(/^#token=([^&]*)$/);
  if (!match) return null;
  let token = match[1];
  try { token = decodeURIComponent(token); } catch (e) { /* kept as written */ }
  return token;
}

export function bearer(token) { return "Bearer " + token; }

// The WebSockets cannot carry headers: they offer the token as the subprotocol
// `delta.token.<hex of its UTF-8 bytes>` beside `delta.v1` (the server answers `delta.v1` only).
export function tokenSubprotocols(token) {
  const hex = Array.from(new TextEncoder().encode(token), (b) => b.toString(16).padStart(2, "0")).join("");
  return ["delta.v1", "delta.token." + hex];
}
