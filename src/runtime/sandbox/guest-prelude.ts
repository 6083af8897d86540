import { MAX_CHANNEL_NAME_LENGTH, MAX_EMIT_ID_LENGTH, MAX_SUMMARY_LENGTH } from "../../domain/emit-rules.js";
import { GUEST_COMPONENT_SOURCE } from "./guest-component.js";
import { GUEST_FORMAT_SOURCE } from "./guest-format.js";
import { GUEST_LENGTHS_SOURCE } from "./guest-lengths.js";
import { GUEST_MEMORY_SOURCE } from "./guest-memory.js";
import { GUEST_TIMERS_SOURCE } from "./guest-timers.js";
import { CROSSING_LIMITS, DB_WRITE_BUDGET_STATES, DEFAULT_LIMITS, EMIT_BUDGET_EVENTS } from "./types.js";

/**
 * Guest code run first in every fresh context, as the body of a function `($0, $1) => dispatch`
 * (compiled once per isolate, see IsolatePool.install) whose `$0` is the host's synchronous
 * `Callback` (host-bridge.ts), which arrives as a plain function, and `$1` the longest array the
 * isolate's built-ins accept (guest-lengths.ts). It installs the globals component code may use (`console`, `fetch`, timers, `process`,
 * `btoa`/`atob`) and returns `dispatch(op, ...)`, which the host holds as a Reference:
 *
 * - `dispatch("load", factory)` evaluates the component module and describes it (metadata read);
 * - `dispatch("run", factory, payload)` runs `run(event)` or a hook; resolves with null or an error;
 * - `dispatch("settle", id, ok, value)` completes a pending `fetch`;
 * - `dispatch("tick")` fires the timers that are due (guest-timers.ts).
 *
 * `$0` and `dispatch` live only in this closure: no isolated-vm object and no host function is
 * ever reachable from component code, which sees only guest functions that call into them.
 * Host calls answer `["ok", value]` or `["err", message]`, so a host exception (and its host
 * stack trace) never crosses into the guest.
 *
 * Everything this code passes to the host is cut to its limit here first: the host receives a
 * copy of every argument before it can look at it. The checks use intrinsics captured below,
 * before any component code runs, and string lengths (which no component can redefine), so a
 * component that replaces `String.prototype.slice` or `JSON.stringify` cannot get past them.
 */

/** Constants the guest needs, from the host's own definitions. */
const GUEST_CONSTANTS = {
  ...CROSSING_LIMITS,
  // Only a bound on what crosses: the host applies the rules (domain/emit-rules.ts) and refuses.
  maxChannelName: MAX_CHANNEL_NAME_LENGTH,
  maxSummary: MAX_SUMMARY_LENGTH,
  maxEmitId: MAX_EMIT_ID_LENGTH,
  emitBudgetEvents: EMIT_BUDGET_EVENTS,
  dbWriteBudgetStates: DB_WRITE_BUDGET_STATES,
};

export const GUEST_PRELUDE_SOURCE =
  `"use strict";
const hostCallback = $0;
const K = ${JSON.stringify(GUEST_CONSTANTS)};
// The run's limits (types.ts); runComponent replaces them with the sandbox's own.
let limits = ${JSON.stringify(DEFAULT_LIMITS)};
function host(op, a, b, c, d, e) {
  const r = hostCallback(op, a, b, c, d, e);
  if (r[0] === "err") throw new Error(r[1]);
  return r[1];
}
const uncurry = (f) => Function.prototype.call.bind(f);
const stringSlice = uncurry(String.prototype.slice);
const stringify = JSON.stringify;
const parse = JSON.parse;
const dateNow = Date.now;
const dateParse = Date.parse;
const isFiniteNumber = Number.isFinite;
const mapGet = uncurry(Map.prototype.get);
const mapSet = uncurry(Map.prototype.set);
const mapHas = uncurry(Map.prototype.has);
const mapDelete = uncurry(Map.prototype.delete);
/** At most max characters of text (a string), with a note of what was cut. */
function cut(text, max) {
  if (text.length <= max) return text;
  return stringSlice(text, 0, max) + "… [" + (text.length - max) + " more characters]";
}
/** A string of at most max characters: longer ones are refused with message. */
function bounded(text, max, message) {
  if (typeof text !== "string") throw new TypeError(message);
  if (text.length > max) throw new RangeError(message);
  return text;
}
` +
  GUEST_FORMAT_SOURCE +
  GUEST_MEMORY_SOURCE +
  GUEST_LENGTHS_SOURCE +
  String.raw`
globalThis.global = globalThis;
globalThis.process = { env: {} };

// Console output is discarded while a component is only loaded (metadata read); runComponent
// turns it on. Past the line limit nothing crosses: the host only learns how many were dropped.
let consoleOn = false;
let logLines = 0;
let droppedLogs = 0;
function log(kind, args) {
  if (!consoleOn) return;
  if (logLines >= limits.maxLogLinesPerRun) {
    // The count so far, now and then: a run that times out never reports its final count.
    if (++droppedLogs === 1 || droppedLogs % 100 === 0) host("logsDropped", droppedLogs);
    return;
  }
  logLines++;
  const text = formatArgs(args);
  host("log", kind, cut(typeof text === "string" ? text : "[unprintable console arguments]", limits.maxLogLineBytes));
}
/** Tells the host the final count of dropped console lines (called when the run ends). */
function reportDroppedLogs() {
  if (droppedLogs > 1) host("logsDropped", droppedLogs);
}
const consoleObject = {};
for (const kind of ["log", "info", "warn", "error", "debug"]) {
  consoleObject[kind] = function () { log("console." + kind, arguments); };
}
consoleObject.trace = consoleObject.debug;
consoleObject.dir = consoleObject.log;
consoleObject.table = consoleObject.log;
consoleObject.assert = function (ok, ...rest) { if (!ok) log("console.error", ["Assertion failed" + (rest.length ? ": " + formatArgs(rest) : "")]); };
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

// Fetch results are settled by the host, keyed by ids the guest chooses.
let nextId = 1;
const pendingFetches = new Map();
let failRun = () => {};

function headerPairs(h) {
  const pairs = [];
  if (h === undefined || h === null) return pairs;
  if (Array.isArray(h)) { for (const p of h) pairs.push([String(p[0]), String(p[1])]); }
  else if (typeof h.forEach === "function" && typeof h.get === "function") h.forEach((v, k) => pairs.push([String(k), String(v)]));
  else for (const k of Object.keys(h)) if (h[k] !== undefined) pairs.push([k, String(h[k])]);
  return pairs;
}
function headersJson(h, what) {
  return bounded(stringify(headerPairs(h)), K.maxHeadersLength, what + ": the headers are larger than " + K.maxHeadersLength + " characters");
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
    const url = bounded(typeof input === "string" ? input : input && typeof input.url === "string" ? input.url : String(input),
      K.maxUrlLength, "fetch: the URL is too long");
    const method = bounded(String(init.method || (input && typeof input === "object" && input.method) || "GET").toUpperCase(),
      64, "fetch: the method is too long");
    const body = init.body === undefined || init.body === null ? undefined : typeof init.body === "string" ? init.body : bytesOf(init.body) || String(init.body);
    const id = nextId++;
    host("fetch", id, url, method, headersJson(init.headers, "fetch"), body);
    return new Promise((resolve, reject) => {
      pendingFetches.set(id, { resolve: (r) => resolve(makeResponse(url, r)), reject: (msg) => reject(new TypeError("fetch failed: " + msg)) });
    });
  } catch (e) {
    return Promise.reject(e);
  }
};

function settle(id, ok, value) {
  const f = pendingFetches.get(id);
  if (!f) return;
  pendingFetches.delete(id);
  if (ok) f.resolve(value); else f.reject(value);
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
  GUEST_TIMERS_SOURCE +
  GUEST_COMPONENT_SOURCE;
