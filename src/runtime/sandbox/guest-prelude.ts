import { MAX_CHANNEL_NAME_LENGTH, MAX_EMIT_ID_LENGTH, MAX_SUMMARY_LENGTH } from "../../domain/emit-rules.js";
import { MAX_JSON_DEPTH } from "../../domain/json-depth.js";
import { GUEST_COMPONENT_SOURCE } from "./guest-component.js";
import { GUEST_FORMAT_SOURCE } from "./guest-format.js";
import { GUEST_LENGTHS_SOURCE } from "./guest-lengths.js";
import { GUEST_MEMORY_SOURCE } from "./guest-memory.js";
import { GUEST_TIMERS_SOURCE } from "./guest-timers.js";
import { CROSSING_LIMITS, DB_WRITE_BUDGET_STATES, DEFAULT_LIMITS, EMIT_BUDGET_EVENTS } from "./types.js";

/**
 * Guest code run first in every fresh context, as the body of a function `($0, $1, $2) => dispatch`
 * (compiled once per isolate, see IsolatePool.install) whose `$0` is the host's synchronous
 * `Callback` (host-bridge.ts), which arrives as a plain function, `$1` the longest array the
 * isolate's built-ins accept (guest-lengths.ts) and `$2` the run limits (a copy; absent for
 * metadata reads). It installs the globals component code may use (`console`, `fetch`, timers, `process`,
 * `btoa`/`atob`) and returns `dispatch(op, ...)`, which the host holds as a Reference:
 *
 * - `dispatch("load", factory)` evaluates the component module and describes it (metadata read);
 * - `dispatch("run", factory, payload)` runs `run(event)` or a hook; resolves with null or an error;
 * - `dispatch("start", payload)`, then `dispatch("take")`: the same warm run, entered by a
 *   synchronous call (its microtasks run before that call returns); `take` answers its outputs, or
 *   null while it awaits a fetch or a timer, and then `dispatch("wait")` answers them once settled;
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
  maxJsonDepth: MAX_JSON_DEPTH,
  emitBudgetEvents: EMIT_BUDGET_EVENTS,
  dbWriteBudgetStates: DB_WRITE_BUDGET_STATES,
};

export const GUEST_PRELUDE_SOURCE =
  `"use strict";
const hostCallback = $0;
const K = ${JSON.stringify(GUEST_CONSTANTS)};
// The run's limits (types.ts): the sandbox's own, given once when a source context is made ($2),
// or these defaults (metadata reads); a run's payload may still carry its own.
let limits = $2 || ${JSON.stringify(DEFAULT_LIMITS)};
// The context lives as long as its source's code (sandbox.ts): component code may replace any
// global or built-in method between runs. What the prelude uses on every run is captured here,
// before component code exists; the constructors are shadowed so a replaced global is never used.
const { Error, TypeError, RangeError, Promise, Map, String, Number, Object, Array, JSON, Date, Function, Reflect, RegExp } = globalThis;
const uncurry = (f) => Function.prototype.call.bind(f);
const stringSlice = uncurry(String.prototype.slice);
const stringIndexOf = uncurry(String.prototype.indexOf);
const charCodeAt = uncurry(String.prototype.charCodeAt);
const stringToLowerCase = uncurry(String.prototype.toLowerCase);
const arrayPush = uncurry(Array.prototype.push);
const bind = uncurry(Function.prototype.bind);
const promiseThen = uncurry(Promise.prototype.then);
const objectKeys = Object.keys;
const objectAssign = Object.assign;
const objectFreeze = Object.freeze;
const isArray = Array.isArray;
const stringify = JSON.stringify;
const parse = JSON.parse;
const dateNow = Date.now;
const dateParse = Date.parse;
const isFiniteNumber = Number.isFinite;
const mapGet = uncurry(Map.prototype.get);
const mapSet = uncurry(Map.prototype.set);
const mapHas = uncurry(Map.prototype.has);
const mapDelete = uncurry(Map.prototype.delete);
const mapClearAll = uncurry(Map.prototype.clear);
// (A regular expression with an exec of its own would do without RegExp.prototype.exec, but one
// such object takes V8's regexps off their fast paths in the whole context. A replaced exec only
// misleads the checks of the component's own outputs, which the host checks again.)
const regExpTest = uncurry(RegExp.prototype.test);
function host(op, a, b, c, d, e) {
  const r = hostCallback(op, a, b, c, d, e);
  if (r[0] === "err") throw new Error(r[1]);
  return r[1];
}
/** At most max characters of text (a string), with a note of what was cut. */
function cut(text, max) {
  if (text.length <= max) return text;
  // A copy, not a slice: a slice would keep all of text alive for as long as the run's buffers.
  return parse(stringify(stringSlice(text, 0, max))) + "… [" + (text.length - max) + " more characters]";
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
// turns it on. Lines are kept here and handed to the host with the run's result (one crossing
// per run); past the line limit only a count is kept.
let consoleOn = false;
let logLines = 0;
let droppedLogs = 0;
let runLogs = [];
function log(kind, args) {
  if (!consoleOn) return;
  if (logLines >= limits.maxLogLinesPerRun) {
    droppedLogs++;
    return;
  }
  logLines++;
  const text = formatArgs(args);
  arrayPush(runLogs, [dateNow(), kind, cut(typeof text === "string" ? text : "[unprintable console arguments]", limits.maxLogLineBytes)]);
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
consoleObject.count = (label = "default") => { const n = (mapGet(counts, label) || 0) + 1; mapSet(counts, label, n); log("console.info", [label + ": " + n]); };
consoleObject.countReset = (label = "default") => { mapDelete(counts, label); };
consoleObject.time = (label = "default") => { mapSet(timings, label, dateNow()); };
consoleObject.timeLog = consoleObject.timeEnd = function (label = "default") {
  if (mapHas(timings, label)) log("console.info", [label + ": " + (dateNow() - mapGet(timings, label)) + "ms"]);
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
  if (isArray(h)) { for (let i = 0; i < h.length; i++) { const p = h[i]; arrayPush(pairs, [String(p[0]), String(p[1])]); } }
  else if (typeof h.forEach === "function" && typeof h.get === "function") h.forEach((v, k) => arrayPush(pairs, [String(k), String(v)]));
  else { const keys = objectKeys(h); for (let i = 0; i < keys.length; i++) { const k = keys[i]; if (h[k] !== undefined) arrayPush(pairs, [k, String(h[k])]); } }
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
  const map = new Map();
  for (let i = 0; i < r.headers.length; i++) mapSet(map, stringToLowerCase(r.headers[i][0]), r.headers[i][1]);
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
