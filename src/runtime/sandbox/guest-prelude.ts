import { GUEST_COMPONENT_SOURCE } from "./guest-component.js";
import { GUEST_FORMAT_SOURCE } from "./guest-format.js";

/**
 * Guest code run first in every fresh context, as the body of a function `($0) => dispatch`
 * (compiled once per isolate, see IsolatePool.install) whose `$0` is the host's synchronous
 * `Callback` (host-bridge.ts), which arrives as a plain function. It installs the globals component code may use (`console`, `fetch`, timers, `process`,
 * `btoa`/`atob`) and returns `dispatch(op, ...)`, which the host holds as a Reference:
 *
 * - `dispatch("load", factory)` evaluates the component module and describes it (metadata read);
 * - `dispatch("run", factory, payload)` runs `run(event)` or a hook; resolves with null or an error;
 * - `dispatch("settle", id, ok, value)` completes a pending `fetch` or fires a timer.
 *
 * `$0` and `dispatch` live only in this closure: no isolated-vm object and no host function is
 * ever reachable from component code, which sees only guest functions that call into them.
 * Host calls answer `["ok", value]` or `["err", message]`, so a host exception (and its host
 * stack trace) never crosses into the guest.
 */
export const GUEST_PRELUDE_SOURCE =
  `"use strict";
const hostCallback = $0;
function host(op, a, b, c, d, e) {
  const r = hostCallback(op, a, b, c, d, e);
  if (r[0] === "err") throw new Error(r[1]);
  return r[1];
}
const stringify = JSON.stringify;
const parse = JSON.parse;
` +
  GUEST_FORMAT_SOURCE +
  String.raw`
// Memory outside the V8 heap (wasm memories, shared buffers) escapes the isolate's accounting, and
// Atomics.wait could park the isolate's thread; no component needs them.
delete globalThis.WebAssembly;
delete globalThis.SharedArrayBuffer;
delete globalThis.Atomics;
globalThis.global = globalThis;
globalThis.process = { env: {} };

const consoleObject = {};
for (const kind of ["log", "info", "warn", "error", "debug"]) {
  consoleObject[kind] = function () { host("log", "console." + kind, formatArgs(arguments)); };
}
consoleObject.trace = consoleObject.debug;
consoleObject.dir = consoleObject.log;
consoleObject.table = consoleObject.log;
consoleObject.assert = function (ok, ...rest) { if (!ok) host("log", "console.error", "Assertion failed" + (rest.length ? ": " + formatArgs(rest) : "")); };
const counts = new Map();
const timings = new Map();
consoleObject.count = (label = "default") => { const n = (counts.get(label) || 0) + 1; counts.set(label, n); consoleObject.info(label + ": " + n); };
consoleObject.countReset = (label = "default") => { counts.delete(label); };
consoleObject.time = (label = "default") => { timings.set(label, Date.now()); };
consoleObject.timeLog = consoleObject.timeEnd = function (label = "default") {
  if (timings.has(label)) consoleObject.info(label + ": " + (Date.now() - timings.get(label)) + "ms");
};
consoleObject.group = consoleObject.groupCollapsed = consoleObject.groupEnd = () => {};
globalThis.console = consoleObject;

// Settled by the host: fetch results and timer firings, keyed by ids the guest chooses.
let nextId = 1;
const pendingFetches = new Map();
const timers = new Map();
let failRun = () => {};

function headerPairs(h) {
  const pairs = [];
  if (h === undefined || h === null) return pairs;
  if (Array.isArray(h)) { for (const p of h) pairs.push([String(p[0]), String(p[1])]); }
  else if (typeof h.forEach === "function" && typeof h.get === "function") h.forEach((v, k) => pairs.push([String(k), String(v)]));
  else for (const k of Object.keys(h)) if (h[k] !== undefined) pairs.push([k, String(h[k])]);
  return pairs;
}

function bytesOf(body) {
  if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength));
  return undefined;
}

function makeResponse(url, r) {
  const map = new Map(r.headers.map((p) => [p[0].toLowerCase(), p[1]]));
  const headers = {
    get: (name) => { const v = map.get(String(name).toLowerCase()); return v === undefined ? null : v; },
    has: (name) => map.has(String(name).toLowerCase()),
    forEach: (cb) => map.forEach((v, k) => cb(v, k, headers)),
    entries: () => map.entries(),
    keys: () => map.keys(),
    values: () => map.values(),
    [Symbol.iterator]: () => map.entries(),
  };
  let used = false;
  const take = () => {
    if (used) throw new TypeError("Body is unusable: Body has already been read");
    used = true;
    return r.body;
  };
  return {
    url, status: r.status, statusText: r.statusText, ok: r.status >= 200 && r.status < 300, redirected: false, headers,
    get bodyUsed() { return used; },
    text: async () => take(),
    json: async () => parse(take()),
    clone: () => makeResponse(url, r),
  };
}

globalThis.fetch = function fetch(input, init) {
  try {
    init = init || {};
    const url = typeof input === "string" ? input : input && typeof input.url === "string" ? input.url : String(input);
    const method = String(init.method || (input && typeof input === "object" && input.method) || "GET").toUpperCase();
    const body = init.body === undefined || init.body === null ? undefined : typeof init.body === "string" ? init.body : bytesOf(init.body) || String(init.body);
    const id = nextId++;
    host("fetch", id, url, method, stringify(headerPairs(init.headers)), body);
    return new Promise((resolve, reject) => {
      pendingFetches.set(id, { resolve: (r) => resolve(makeResponse(url, r)), reject: (msg) => reject(new TypeError("fetch failed: " + msg)) });
    });
  } catch (e) {
    return Promise.reject(e);
  }
};

function startTimer(fn, ms, args, repeat) {
  if (typeof fn !== "function") throw new TypeError("the callback must be a function");
  const delay = Math.max(repeat ? 1 : 0, Number(ms) || 0);
  const id = nextId++;
  timers.set(id, { fn, args, repeat, delay });
  host("timer", id, delay);
  return id;
}
function clearTimer(id) {
  if (timers.delete(id)) host("clearTimer", id);
}
globalThis.setTimeout = (fn, ms, ...args) => startTimer(fn, ms, args, false);
globalThis.setInterval = (fn, ms, ...args) => startTimer(fn, ms, args, true);
globalThis.setImmediate = (fn, ...args) => startTimer(fn, 0, args, false);
globalThis.clearTimeout = clearTimer;
globalThis.clearInterval = clearTimer;
globalThis.clearImmediate = clearTimer;
globalThis.queueMicrotask = (fn) => { Promise.resolve().then(fn).catch((e) => failRun(e)); };

function settle(id, ok, value) {
  const f = pendingFetches.get(id);
  if (f) {
    pendingFetches.delete(id);
    if (ok) f.resolve(value); else f.reject(value);
    return;
  }
  const t = timers.get(id);
  if (!t) return;
  if (t.repeat) host("timer", id, t.delay); else timers.delete(id);
  // An exception in a timer callback fails the run, as it would crash a Node process.
  try { t.fn.apply(undefined, t.args); } catch (e) { failRun(e); }
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
globalThis.btoa = function btoa(s) {
  s = String(s);
  let out = "";
  for (let i = 0; i < s.length; i += 3) {
    const a = s.charCodeAt(i), b = s.charCodeAt(i + 1), c = s.charCodeAt(i + 2);
    if (a > 255 || b > 255 || c > 255) throw new Error("btoa: the string contains characters outside of Latin1");
    const n = (a << 16) | ((b || 0) << 8) | (c || 0);
    out += B64[(n >> 18) & 63] + B64[(n >> 12) & 63] + (i + 1 < s.length ? B64[(n >> 6) & 63] : "=") + (i + 2 < s.length ? B64[n & 63] : "=");
  }
  return out;
};
globalThis.atob = function atob(s) {
  s = String(s).replace(/[\t\n\f\r ]/g, "").replace(/=+$/, "");
  if (/[^A-Za-z0-9+/]/.test(s) || s.length % 4 === 1) throw new Error("atob: the string is not valid base64");
  let out = "";
  let bits = 0, acc = 0;
  for (const ch of s) {
    acc = (acc << 6) | B64.indexOf(ch);
    bits += 6;
    if (bits >= 8) { bits -= 8; out += String.fromCharCode((acc >> bits) & 255); }
  }
  return out;
};
` +
  GUEST_COMPONENT_SOURCE;
