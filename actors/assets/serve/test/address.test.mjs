// The page's addresses (address.js) and the token's forms (token.js): every view's address
// read back to the view it names, hostile and malformed addresses included.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  href, isBareAddress, orchestrationHref, pagePath, parseAddress, runSelection, runsPageKey, runsQuery, sessionHash, stageOf,
  workerHash, workspaceQuery,
} from "../address.js";
import { bearer, tokenInFragment, tokenSubprotocols } from "../token.js";

const query = (params) => Object.fromEntries(params.entries());

test("every view's address reads back to its parts and filters", () => {
  const views = [
    [["runs"], undefined],
    [["runs", "/home/me/ws"], undefined],
    [["runs", "/home/me/ws", "o", "o-1", "stage", "map"], { status: "FAILED", q: "timeout", sort: "duration", order: "desc", page: "3" }],
    [["runs", "/home/me/ws", "o", "o-1", "timeline"], { stage: "combine" }],
    [["runs", "/home/me/ws", "r", "o-1-map-00042", "call", "3"], undefined],
    [["runs", "/home/me/ws", "r", "run-7", "tool", "call_abc"], undefined],
  ];
  for (const [parts, params] of views) {
    const address = href(parts, params);
    const back = parseAddress(address);
    assert.deepEqual(back.parts, parts, address);
    assert.deepEqual(query(back.params), params || {}, address);
    assert.equal(back.hash, address);
  }
});

test("a part with slashes, spaces, ? # % & and non-ASCII stays one part", () => {
  const hostile = ["/tmp/a b/c?d#e%f&g=h", "../../etc", "ω/日本/😀", "a%2Fb", "%E0%A4%A", " "];
  for (const part of hostile) {
    const address = href(["runs", part, "r", part], { q: part });
    assert.match(address, /^#\/runs\/[^/?#]+\/r\/[^/?#]+\?q=[^#]*$/, address);
    const back = parseAddress(address);
    assert.deepEqual(back.parts, ["runs", part, "r", part], address);
    assert.equal(back.params.get("q"), part, address);
  }
});

test("empty filters are left out of an address", () => {
  assert.equal(href(["runs", "w", "o", "o1"], { status: "", q: null, sort: undefined, page: "2" }), "#/runs/w/o/o1?page=2");
  assert.equal(href(["runs"], {}), "#/runs");
  assert.equal(href([], undefined), "#/");
});

test("addresses typed by hand: bare, without the slash, with empty parts, badly encoded", () => {
  assert.deepEqual(parseAddress("").parts, []);
  assert.deepEqual(parseAddress("#").parts, []);
  assert.deepEqual(parseAddress("#/").parts, []);
  assert.deepEqual(parseAddress("#runs//w///o/x").parts, ["runs", "w", "o", "x"]);
  assert.deepEqual(parseAddress("#/runs/%E0%A4%A").parts, ["runs", "%E0%A4%A"], "kept as written when it does not decode");
  assert.deepEqual(query(parseAddress("#/runs/w?status=FAILED&q=a%20b").params), { status: "FAILED", q: "a b" });
  for (const bare of ["", "#", "#/", "/"]) assert.equal(isBareAddress(bare), true, bare);
  for (const view of ["#/runs", "#/session/s1", "#token=abc"]) assert.equal(isBareAddress(view), false, view);
});

test("the sessions view's addresses", () => {
  assert.equal(sessionHash("s1"), "#/session/s1");
  assert.equal(workerHash("s1", "w2"), "#/session/s1/worker/w2");
  assert.deepEqual(parseAddress(workerHash("s1", "w2")).parts, ["session", "s1", "worker", "w2"]);
});

test("a page is kept while only its filters change, and not across pages", () => {
  const key = (hash) => runsPageKey(parseAddress(hash).parts);
  assert.equal(key("#/runs/w/o/o1?status=FAILED"), key("#/runs/w/o/o1?page=2"));
  assert.equal(key("#/runs/w/o/o1/stage/map"), key("#/runs/w/o/o1"), "a stage is a filter of the runs page");
  assert.equal(key("#/runs/w/r/r1/call/2"), key("#/runs/w/r/r1"), "a call opens inside its run's page");
  assert.notEqual(key("#/runs/w/o/o1/timeline"), key("#/runs/w/o/o1"));
  assert.notEqual(key("#/runs/w/o/o1"), key("#/runs/w/r/o1"));
  assert.notEqual(key("#/runs/w1/o/o1"), key("#/runs/w2/o/o1"));
  assert.equal(pagePath("#/runs/w/o/o1?page=2"), "#/runs/w/o/o1");
});

test("a stage and a selected call are read from their addresses", () => {
  assert.equal(stageOf(parseAddress("#/runs/w/o/o1/stage/map").parts), "map");
  assert.equal(stageOf(parseAddress("#/runs/w/o/o1").parts), "");
  assert.equal(stageOf(parseAddress("#/runs/w/o/o1/stage").parts), "", "a stage without its name is every stage");
  assert.deepEqual(runSelection(parseAddress("#/runs/w/r/r1/call/3").parts), { kind: "call", key: "3" });
  assert.deepEqual(runSelection(parseAddress("#/runs/w/r/r1/tool/a%2Fb").parts), { kind: "tool", key: "a/b" });
  assert.equal(runSelection(parseAddress("#/runs/w/r/r1").parts), null);
  assert.equal(runSelection(parseAddress("#/runs/w/r/r1/other/3").parts), null);
});

test("an orchestration's filters change one at a time and keep the others", () => {
  const params = parseAddress("#/runs/w/o/o1/stage/map?status=FAILED&q=x&page=4").params;
  const moved = orchestrationHref("w", "o1", params, { page: "5" }, "map");
  assert.equal(moved, "#/runs/w/o/o1/stage/map?status=FAILED&q=x&page=5");
  const filtered = orchestrationHref("w", "o1", params, { status: "RUNNING", page: "" }, "map");
  assert.equal(filtered, "#/runs/w/o/o1/stage/map?status=RUNNING&q=x", "a new filter starts at the first page");
  assert.equal(orchestrationHref("w", "o1", params, {}, ""), "#/runs/w/o/o1?status=FAILED&q=x&page=4");
  assert.equal(params.get("page"), "4", "the address's own filters are not changed");
});

test("a page of an orchestration's runs asks the server for its rows", () => {
  const ask = (hash) => query(new URLSearchParams(runsQuery("/w s", "map", parseAddress(hash).params, 100)));
  assert.deepEqual(ask("#/runs/x/o/o1"),
    { workspace: "/w s", stage: "map", status: "", q: "", sort: "index", order: "asc", offset: "0", limit: "100" });
  assert.deepEqual(ask("#/runs/x/o/o1?status=FAILED&q=t&sort=duration&order=desc&page=3"),
    { workspace: "/w s", stage: "map", status: "FAILED", q: "t", sort: "duration", order: "desc", offset: "200", limit: "100" });
  for (const page of ["0", "-2", "x", ""]) assert.equal(ask("#/runs/x/o/o1?page=" + page).offset, "0", "page=" + page);
  assert.equal(workspaceQuery("/tmp/a b&c"), "workspace=%2Ftmp%2Fa%20b%26c");
});

test("a token is read only from a #token= address, decoded when it can be", () => {
  assert.equal(tokenInFragment("#token=abc123"), "abc123");
  assert.equal(tokenInFragment("#token=a%20b"), "a b");
  assert.equal(tokenInFragment("#token=%E0%A4%A"), "%E0%A4%A");
  assert.equal(tokenInFragment("#token="), "");
  assert.equal(tokenInFragment("#/runs"), null);
  assert.equal(tokenInFragment("#token=a&b=c"), null, "a token followed by more is not a token");
  assert.equal(tokenInFragment("#/token=abc"), null);
  assert.equal(tokenInFragment(""), null);
});

test("the token goes out as a Bearer header and as a hex subprotocol a header cannot break", () => {
  assert.equal(bearer("t0k"), "Bearer t0k");
  assert.deepEqual(tokenSubprotocols("ab"), ["delta.v1", "delta.token.6162"]);
  assert.deepEqual(tokenSubprotocols(""), ["delta.v1", "delta.token."]);
  const [, hostile] = tokenSubprotocols("a, b\r\nX: é");
  assert.match(hostile, /^delta\.token\.[0-9a-f]+$/);
  assert.equal(Buffer.from(hostile.slice("delta.token.".length), "hex").toString("utf8"), "a, b\r\nX: é");
});
