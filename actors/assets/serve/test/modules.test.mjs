// The page's module layout, checked from its source: each file imports what it uses from
// another (no name crosses files without an import), the imports resolve and form no cycle,
// the pure modules touch no DOM, the page defines no global but its automation hook, and each
// file has its header and no line over 160 characters.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";

const folder = new URL("../", import.meta.url);
const files = readdirSync(folder).filter((f) => f.endsWith(".js")).sort();
const sources = Object.fromEntries(files.map((f) => [f, readFileSync(new URL(f, folder), "utf8")]));
const ENTRY = "main.js";
// The modules the unit tests import: no DOM, no browser API, no module that has them.
const PURE = ["address.js", "format.js", "geometry.js", "poll.js", "state.js", "token.js"];
const BROWSER_GLOBALS = ["document", "window", "location", "history", "localStorage", "fetch", "WebSocket", "performance", "navigator",
  "Terminal", "FitAddon"];

// `text` with its comments, strings and regular expressions blanked, so a name found in what
// is left is code.
function codeOnly(text) {
  let out = "";
  let last = "";
  for (let i = 0; i < text.length;) {
    const c = text[i], next = text[i + 1];
    if (c === "/" && next === "/") { while (i < text.length && text[i] !== "\n") i++; continue; }
    if (c === "/" && next === "*") { const end = text.indexOf("*/", i + 2); i = end < 0 ? text.length : end + 2; out += " "; continue; }
    if (c === '"' || c === "'" || c === "`") {
      for (i++; i < text.length && text[i] !== c; i++) if (text[i] === "\\") i++;
      i++;
      out += '""';
      last = '"';
      continue;
    }
    if (c === "/" && (last === "" || "(,=:[!&|?{};".includes(last) || /\breturn\s*$/.test(out))) {
      let inClass = false;
      for (i++; i < text.length && (text[i] !== "/" || inClass); i++) {
        if (text[i] === "\\") i++;
        else if (text[i] === "[") inClass = true;
        else if (text[i] === "]") inClass = false;
      }
      for (i++; /[a-z]/.test(text[i] || ""); i++);
      out += "/r/";
      last = "/";
      continue;
    }
    out += c;
    if (!/\s/.test(c)) last = c;
    i++;
  }
  return out;
}

const IMPORT = /^import\s*\{([^}]*)\}\s*from\s*"\.\/([\w-]+\.js)";$/gm;

// Each file's imports: [{names, from}] ("./x.js" only: the page has no package).
function importsOf(text) {
  return [...text.matchAll(IMPORT)].map((m) => ({ names: m[1].split(",").map((n) => n.trim()).filter(Boolean), from: m[2] }));
}

const STATEMENTS = new Set(["if", "for", "while", "switch", "catch", "with", "function"]);

// The names `code` declares itself: variables, functions, classes, parameters, caught errors.
function declaredIn(code) {
  const names = new Set();
  const add = (list) => { for (const n of list.match(/[A-Za-z_$][\w$]*/g) || []) names.add(n); };
  for (const m of code.matchAll(/\b(?:function|class|const|let|var)\s+([A-Za-z_$][\w$]*)/g)) names.add(m[1]);
  for (const m of code.matchAll(/\b(?:const|let|var)\s*[[{]([^=]*?)[\]}]\s*(?:=|of\b|in\b)/g)) add(m[1]);
  for (const m of code.matchAll(/\bfunction\s*[\w$]*\s*\(([^)]*)\)/g)) add(m[1]);
  for (const m of code.matchAll(/\(([^()]*)\)\s*=>/g)) add(m[1]);
  for (const m of code.matchAll(/([A-Za-z_$][\w$]*)\s*=>/g)) names.add(m[1]);
  for (const m of code.matchAll(/\bcatch\s*\(([^)]*)\)/g)) add(m[1]);
  // A method's parameters (`name(a, b) {`), not a statement's condition (`if (a) {`).
  for (const m of code.matchAll(/([A-Za-z_$][\w$]*)\s*\(([^()]*)\)\s*\{/g)) if (!STATEMENTS.has(m[1])) add(m[2]);
  return names;
}

// The names `code` reads or calls: not a property (`.x`), not an object key (`x:`).
function usedIn(code) {
  return new Set([...code.matchAll(/(?<![\w$])(?<![^.]\.)([A-Za-z_$][\w$]*)(?!\s*:(?!:))/g)].map((m) => m[1]));
}

const withoutImports = (text) => codeOnly(text.replace(IMPORT, ""));

test("every module but the entry imports in Node, without a DOM", async () => {
  for (const file of files.filter((f) => f !== ENTRY)) {
    await assert.doesNotReject(import(new URL(file, folder).href), file);
  }
});

test("every import names a module of the page and a name that module exports", async () => {
  for (const file of files) {
    const text = sources[file];
    const statements = text.split("\n").filter((line) => /^\s*(import|export\s.*\bfrom\b)/.test(line));
    assert.equal(statements.length, importsOf(text).length, `${file}: an import not of the form import { names } from "./file.js";`);
    for (const { names, from } of importsOf(text)) {
      assert.ok(files.includes(from), `${file} imports ${from}, which is not a file of the page`);
      const exported = Object.keys(await import(new URL(from, folder).href));
      for (const name of names) assert.ok(exported.includes(name), `${file} imports ${name} from ${from}, which does not export it`);
    }
  }
});

test("no name crosses files without an import, and no import goes unused", async () => {
  const exportsOf = {};
  for (const file of files.filter((f) => f !== ENTRY)) exportsOf[file] = Object.keys(await import(new URL(file, folder).href));
  for (const file of files) {
    const code = withoutImports(sources[file]);
    const used = usedIn(code);
    const imported = new Set(importsOf(sources[file]).flatMap((i) => i.names));
    const declared = declaredIn(code);
    for (const [other, names] of Object.entries(exportsOf)) {
      if (other === file) continue;
      for (const name of names) {
        if (used.has(name) && !imported.has(name) && !declared.has(name)) {
          assert.fail(`${file} uses ${name}, which ${other} exports, without importing it`);
        }
      }
    }
    for (const name of imported) assert.ok(used.has(name), `${file} imports ${name} and does not use it`);
  }
});

test("the imports form no cycle", () => {
  const edges = Object.fromEntries(files.map((f) => [f, importsOf(sources[f]).map((i) => i.from)]));
  const done = new Set();
  const visit = (file, path) => {
    if (path.includes(file)) assert.fail("an import cycle: " + path.slice(path.indexOf(file)).concat(file).join(" → "));
    if (done.has(file)) return;
    for (const next of edges[file]) visit(next, path.concat(file));
    done.add(file);
  };
  for (const file of files) visit(file, []);
});

test("the pure modules touch no DOM and import only pure modules", () => {
  for (const file of PURE) {
    assert.ok(files.includes(file), file + " is gone: update PURE");
    const used = usedIn(withoutImports(sources[file]));
    for (const name of BROWSER_GLOBALS) assert.ok(!used.has(name), `${file} uses ${name}`);
    for (const { from } of importsOf(sources[file])) assert.ok(PURE.includes(from), `${file} imports ${from}, which is not pure`);
  }
});

test("no global but the vendored Terminal and FitAddon, read in terminal.js, and main.js's window.deltaServe", () => {
  for (const file of files) {
    const code = codeOnly(sources[file]);
    for (const m of code.matchAll(/\b(?:window|globalThis|self)\s*(?:\.\s*([\w$]+)|\[)\s*=(?!=)/g)) {
      assert.ok(file === ENTRY && m[1] === "deltaServe", `${file} sets the global ${m[1] || "[…]"}`);
    }
    assert.ok(!/\bglobalThis\b/.test(code), `${file} uses globalThis`);
    const used = usedIn(code);
    if (file !== "terminal.js") for (const name of ["Terminal", "FitAddon"]) assert.ok(!used.has(name), `${file} uses the vendored ${name}`);
  }
});

test("every module says what it owns and what it must not do, in lines of at most 160 characters", () => {
  for (const file of files) {
    const lines = sources[file].split("\n");
    assert.match(lines[0], new RegExp("^// " + file.replace(".", "\\.") + " — "), `${file}: the header names the file first`);
    const header = lines.slice(0, lines.findIndex((l) => !l.startsWith("//"))).join("\n");
    assert.match(header, /Must not: /, `${file}: the header says what the module must not do`);
    lines.forEach((line, i) => assert.ok([...line].length <= 160, `${file}:${i + 1} is ${[...line].length} characters long`));
  }
});
