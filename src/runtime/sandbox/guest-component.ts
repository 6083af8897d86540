import { FUNCTION_MARKER } from "../../domain/props.js";

/**
 * Guest code, second half of the prelude (see guest-prelude.ts, whose scope it shares): loading a
 * component module, describing it for the metadata read, and running `run(event)` or a hook with
 * `this` set up as Pipedream does (props, `$emit`, `db`, `http.respond`, bound `methods`).
 * Everything returned to the host is plain data built here, never a component-made object.
 */
export const GUEST_COMPONENT_SOURCE =
  `
// What the run's function returned, settled, or the run's failure (failRun), whichever comes
// first: one promise, without the methods a component can replace (Promise.resolve, .then).
function settled(value) {
  return new Promise((resolve, reject) => {
    failRun = reject;
    try { promiseThen(value, resolve, reject); } catch (e) { resolve(value); } // not a native promise
  });
}
function ignoreFailure() {}
const FUNCTION_MARKER = ` +
  JSON.stringify(FUNCTION_MARKER) +
  `;

function guestRequire(name) {
  throw new Error("require(" + stringify(String(name)) + ") is not available: import allowed packages at the top of the component");
}

function load(factory) {
  const module = { exports: {} };
  reflectApply(factory, module.exports, [module.exports, guestRequire, module, "/component.js", "/"]);
  let c = module.exports;
  // ESM compiled to CommonJS: export default lands on .default of an __esModule namespace.
  if (c !== null && typeof c === "object" && c.__esModule === true && "default" in c) c = c.default;
  return c;
}

function checkComponent(c) {
  const what = c === null ? "null" : Array.isArray(c) ? "an array" : typeof c;
  if (c === null || typeof c !== "object" || Array.isArray(c)) {
    return "the code does not export a component object (module.exports or export default is " + what + ")";
  }
  if (typeof c.run !== "function") return "the component has no run() method";
  return null;
}

function errorText(e) {
  try { return e !== null && typeof e === "object" && "message" in e ? String(e.message) : String(e); } catch (x) { return "unprintable error"; }
}

// What the host gets of a failed run: three strings, cut here (a message can be any size).
function errorInfo(e) {
  let info;
  try {
    if (e !== null && typeof e === "object") {
      const code = e.code !== undefined && e.code !== null ? String(e.code) : e.name ? String(e.name) : "Error";
      info = { code, msg: errorText(e), stack: e.stack === undefined ? "" : String(e.stack) };
    } else {
      info = { code: "Error", msg: String(e), stack: "" };
    }
  } catch (x) {
    info = { code: "Error", msg: "unprintable error", stack: "" };
  }
  const text = (v) => (typeof v === "string" ? v : "unprintable error");
  return {
    code: cut(text(info.code), K.maxErrorCodeLength),
    msg: cut(text(info.msg), K.maxErrorMessageLength),
    stack: cut(text(info.stack), K.maxErrorStackLength),
  };
}

// Copies component data as JSON-able values: functions become FUNCTION_MARKER; cycles, deep
// nesting and oversized structures are cut so a hostile props object cannot exhaust the host.
// Every string is counted each time it is used: 50 props sharing one 4 MB string are 200 MB of
// metadata, which is refused rather than copied out.
function toData(v, depth, budget) {
  if (--budget.n < 0) return null;
  if (typeof v === "string") return countChars(v, budget);
  if (v === null || typeof v === "boolean") return v;
  if (typeof v === "number") return Number.isFinite(v) ? v : null;
  if (typeof v === "function") return FUNCTION_MARKER;
  if (typeof v !== "object") return undefined;
  if (depth <= 0 || budget.path.indexOf(v) !== -1) return null;
  if (v instanceof Date) return isNaN(v.getTime()) ? null : v.toISOString();
  budget.path.push(v);
  let out;
  if (Array.isArray(v)) {
    out = [];
    for (let i = 0; i < v.length && budget.n > 0; i++) { const d = toData(v[i], depth - 1, budget); out.push(d === undefined ? null : d); }
  } else {
    out = {};
    for (const k of Object.keys(v)) {
      const d = toData(v[k], depth - 1, budget);
      if (d !== undefined) Object.defineProperty(out, countChars(k, budget), { value: d, enumerable: true, writable: true, configurable: true });
    }
  }
  budget.path.pop();
  return out;
}

function countChars(s, budget) {
  if (s.length > K.maxMetadataString) {
    throw new MetadataTooLarge("it holds a string of " + s.length + " characters (at most " + K.maxMetadataString + ")");
  }
  budget.chars += s.length;
  if (budget.chars > K.maxMetadataChars) {
    throw new MetadataTooLarge("its strings add up to more than " + K.maxMetadataChars + " characters (each use of a shared string counts)");
  }
  return s;
}

class MetadataTooLarge extends Error {}

// The description as JSON, bounded: whatever the component did to the built-ins, no more than
// this crosses to the host.
function describe(factory) {
  const result = describeComponent(factory);
  const json = stringify(result);
  if (typeof json !== "string" || json.length > K.maxMetadataChars * 8) {
    return stringify({ ok: false, reason: "the component's metadata is too large" });
  }
  return json;
}

function describeComponent(factory) {
  let c;
  try { c = load(factory); } catch (e) { return { ok: false, reason: cut("the code threw while loading: " + errorText(e), K.maxErrorMessageLength) }; }
  const problem = checkComponent(c);
  if (problem) return { ok: false, reason: problem };
  try {
    const hooks = [];
    if (c.hooks !== null && typeof c.hooks === "object") {
      for (const h of ["deploy", "activate", "deactivate"]) if (typeof c.hooks[h] === "function") hooks.push(h);
    }
    const budget = { n: 20000, chars: 0, path: [] };
    const field = (name) => toData(c[name], 3, budget);
    return { ok: true, component: { key: field("key"), name: field("name"), version: field("version"), description: field("description"),
      dedupe: field("dedupe"), props: toData(c.props, 12, budget), hooks, hasRun: true } };
  } catch (e) {
    if (e instanceof MetadataTooLarge) return { ok: false, reason: "the component's metadata is too large: " + e.message };
    return { ok: false, reason: cut("reading the component threw: " + errorText(e), K.maxErrorMessageLength) };
  }
}

// The run's outputs, kept here and handed to the host with its result (one crossing per run).
// The limits are checked here, so a refused $emit or db.set throws inside the run as before; the
// host checks everything again when the run ends.
//
// db: the source's state arrives with the run as JSON strings by key; reads parse a fresh copy,
// writes are checked and kept (the last write of each key is what the host receives).
const dbState = new Map();
let dbStateBytes = 0;
const dbWrites = new Map();
let dbWritten = 0;
function dbKey(key) {
  return bounded(String(key), limits.maxDbBytes, "db: the key is longer than the state limit of " + limits.maxDbBytes + " bytes");
}
function dbGet(key) {
  const json = mapGet(dbState, dbKey(key));
  return json === undefined ? undefined : parse(json);
}
function dbSet(key, value) {
  const k = dbKey(key);
  const json = value === undefined ? undefined : stringify(value);
  if (json !== undefined && typeof json !== "string") throw new TypeError("db.set: the value cannot be stored as JSON");
  const max = limits.maxDbBytes;
  const old = mapGet(dbState, k);
  const oldBytes = old === undefined ? 0 : k.length + old.length;
  const newBytes = json === undefined ? 0 : k.length + json.length;
  if (newBytes > max || dbStateBytes - oldBytes + newBytes > max) throw new Error("db.set: the state would exceed " + max + " bytes");
  const budget = max * K.dbWriteBudgetStates;
  const written = newBytes > k.length ? newBytes : k.length;
  if (dbWritten + written > budget) throw new Error("db.set: a run may write at most " + budget + " bytes (keys and values as JSON)");
  if (json !== undefined && jsonTooDeep(json)) throw new Error("db.set: the value nests deeper than " + K.maxJsonDepth + " levels");
  if (json === undefined) mapDelete(dbState, k); else mapSet(dbState, k, json);
  dbStateBytes += newBytes - oldBytes;
  dbWritten += written;
  mapSet(dbWrites, k, json === undefined ? null : json);
}

// UTF-8 bytes of a string, as the host's Buffer.byteLength counts them (a lone surrogate is 3).
function utf8Length(s) {
  const n = s.length;
  let bytes = n;
  for (let i = 0; i < n; i++) {
    const c = charCodeAt(s, i);
    if (c < 0x80) continue;
    if (c < 0x800) { bytes += 1; continue; }
    bytes += 2;
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) {
      const d = charCodeAt(s, i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++; // a pair: 4 bytes for 2 characters
    }
  }
  return bytes;
}

// Whether JSON text nests arrays and objects deeper than the ingress accepts (domain/json-depth.ts).
function jsonTooDeep(text) {
  const max = K.maxJsonDepth;
  let opens = 0;
  for (let i = stringIndexOf(text, "["); i !== -1 && opens <= max; i = stringIndexOf(text, "[", i + 1)) opens++;
  for (let i = stringIndexOf(text, "{"); i !== -1 && opens <= max; i = stringIndexOf(text, "{", i + 1)) opens++;
  if (opens <= max) return false;
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = charCodeAt(text, i);
    if (c === 34) {
      // Skip the string: to the next quote not escaped by an odd number of backslashes.
      for (;;) {
        i = stringIndexOf(text, '"', i + 1);
        if (i === -1) return false;
        let k = i - 1;
        while (charCodeAt(text, k) === 92) k--;
        if ((i - 1 - k) % 2 === 0) break;
      }
    } else if (c === 91 || c === 123) {
      if (++depth > max) return true;
    } else if (c === 93 || c === 125) depth--;
  }
  return false;
}

const EMPTY = /(?:)/;
const CONTROL = /[\u0000-\u001f\u007f]/;
const LONE_SURROGATE = /\\p{Cs}/u;

// $emit: the event and its metadata are checked against the run's limits and the ingress's rules
// here (domain/emit-rules.ts, with the host's messages), then kept as JSON.
let runEmits = [];
let emitsLeft = Infinity;
let emittedBytes = 0;
function emit(event, meta) {
  if (emitsLeft <= 0) throw new Error("$emit: at most " + limits.maxEmitsPerRun + " events per run");
  const json = stringify(event === undefined ? null : event);
  const text = typeof json === "string" ? json : "null";
  if (text.length > limits.maxEventBytes) {
    throw new Error("$emit: the event is at least " + text.length + " bytes as JSON; the limit is " + limits.maxEventBytes);
  }
  const bytes = utf8Length(text);
  if (bytes > limits.maxEventBytes) throw new Error("$emit: the event is " + bytes + " bytes as JSON; the limit is " + limits.maxEventBytes);
  // Bounded although its fields are: a component can give Object.prototype a toJSON.
  const m = emitMeta(meta);
  checkMeta(m);
  const metaJson = bounded(stringify(m), K.maxEmitMetaLength, "$emit: the metadata is too large");
  const budget = limits.maxEventBytes * K.emitBudgetEvents;
  const total = bytes + utf8Length(metaJson);
  if (emittedBytes + total > budget) {
    throw new Error("$emit: a run may emit at most " + budget + " bytes (events and metadata as JSON)");
  }
  if (jsonTooDeep(text)) throw new Error("$emit: the event nests deeper than " + K.maxJsonDepth + " levels");
  emittedBytes += total;
  emitsLeft--;
  arrayPush(runEmits, [text, metaJson]);
}

// The ingress's rules for the metadata (domain/emit-rules.ts, checkEmitMeta in emit-check.ts).
function checkMeta(m) {
  if (typeof m.id === "string" && m.id.length > K.maxEmitId) throw new Error("$emit: meta.id must be at most " + K.maxEmitId + " characters");
  if (typeof m.name === "string") {
    let problem;
    if (m.name.length > K.maxChannelName) problem = "must be at most " + K.maxChannelName + " characters";
    else if (regExpTest(CONTROL, m.name)) problem = "must not contain control characters";
    else if (regExpTest(LONE_SURROGATE, m.name)) problem = "must not contain unpaired UTF-16 surrogates";
    if (problem) throw new Error("$emit: meta.name " + problem);
  }
  if (typeof m.summary === "string" && m.summary.length > K.maxSummary) {
    throw new Error("$emit: meta.summary must be at most " + K.maxSummary + " characters");
  }
}

// Each field read once (a getter could answer differently twice). Strings are cut one character
// past their rule's limit: enough for the host to refuse them with the rule's own message
// (domain/emit-rules.ts), never more.
function emitMeta(meta) {
  const m = {};
  if (meta === undefined || meta === null) return m;
  if (typeof meta !== "object") throw new TypeError("$emit: the metadata must be an object");
  const id = meta.id, name = meta.name, summary = meta.summary, ts = meta.ts;
  if (id !== undefined && id !== null) {
    const v = typeof id === "string" || (typeof id === "number" && isFiniteNumber(id)) ? id : stringify(id);
    if (v !== undefined) m.id = typeof v === "string" ? stringSlice(v, 0, K.maxEmitId + 1) : v;
  }
  if (name !== undefined && name !== null && name !== "") m.name = stringSlice(String(name), 0, K.maxChannelName + 1);
  if (summary !== undefined && summary !== null) {
    const s = typeof summary === "string" ? summary : stringify(summary);
    if (s !== undefined) m.summary = stringSlice(s, 0, K.maxSummary + 1);
  }
  if (typeof ts === "number" && isFiniteNumber(ts)) m.ts = ts;
  else if (typeof ts === "string" && isFiniteNumber(dateParse(ts))) m.ts = dateParse(ts);
  return m;
}

// After the first response only the status crosses (a later respond() is ignored, but a bad
// status still throws). respond() crosses at once: the caller is waiting for the answer.
let responded = false;
function makeHttp(value, live) {
  const http = objectAssign({}, value !== null && typeof value === "object" ? value : {});
  if (http.endpoint === undefined && typeof http.endpoint_url === "string") http.endpoint = http.endpoint_url;
  http.respond = function respond(r) {
    live("http.respond");
    r = r || {};
    const status = r.status === undefined || r.status === null ? 200 : Number(r.status);
    if (responded) { host("respond", status, "[]", "text", ""); return; }
    let kind = "text";
    let data = "";
    const b = r.body;
    if (typeof b === "string") data = b;
    else if (b !== undefined && b !== null) {
      const bytes = bytesOf(b);
      if (bytes) { kind = "bytes"; data = bytes; }
      else { const json = stringify(b); if (json !== undefined) { kind = "json"; data = json; } }
    }
    host("respond", status, headersJson(r.headers, "http.respond"), kind, data);
    responded = true;
  };
  return http;
}

// Each run gets its own this: props, $emit, db, http and methods bound to it. A this kept from an
// earlier run (in module scope) refuses to act: its run is over.
let epoch = 0;
function makeThis(component, values) {
  const runEpoch = epoch;
  const live = (what) => {
    if (epoch !== runEpoch) throw new Error(what + ": the run this belongs to has ended");
  };
  const db = objectFreeze({
    get(key) { live("db"); return dbGet(key); },
    set(key, value) { live("db"); dbSet(key, value); },
  });
  const self = {};
  const keys = objectKeys(values);
  for (let i = 0; i < keys.length; i++) self[keys[i]] = values[keys[i]];
  const defs = component.props !== null && typeof component.props === "object" ? component.props : {};
  const names = objectKeys(defs);
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    const d = defs[name];
    const type = typeof d === "string" ? d : d !== null && typeof d === "object" ? d.type : undefined;
    if (type === "$.interface.http") self[name] = makeHttp(self[name], live);
    else if (type === "$.service.db") self[name] = db;
  }
  if (!("db" in self)) self.db = db;
  self.$emit = function $emit(event, meta) { live("$emit"); emit(event, meta); };
  const methods = component.methods !== null && typeof component.methods === "object" ? component.methods : {};
  const methodNames = objectKeys(methods);
  for (let i = 0; i < methodNames.length; i++) {
    const name = methodNames[i];
    if (typeof methods[name] === "function" && !(name in self)) self[name] = bind(methods[name], self);
  }
  return self;
}

// The component module, evaluated by the first run of the context and kept for the next ones.
let component;

/** Forgets everything of the previous run: its outputs, timers, fetches and this. */
function resetRun(payload) {
  epoch++;
  if (payload.limits) limits = payload.limits;
  consoleOn = true;
  logLines = 0;
  droppedLogs = 0;
  runLogs = [];
  runEmits = [];
  emitsLeft = limits.maxEmitsPerRun;
  emittedBytes = 0;
  mapClearAll(dbState);
  dbStateBytes = 0;
  const db = payload.db;
  for (let i = 0; i < db.length; i++) {
    mapSet(dbState, db[i][0], db[i][1]);
    dbStateBytes += db[i][0].length + db[i][1].length;
  }
  mapClearAll(dbWrites);
  dbWritten = 0;
  responded = false;
  mapClearAll(pendingFetches);
  mapClearAll(counts);
  mapClearAll(timings);
  resetTimers();
}

/** What the host receives of a run: plain data built here. */
function outputs(error) {
  const writes = [];
  mapForEach(dbWrites, (json, key) => { arrayPush(writes, [key, json]); });
  return { error, logs: runLogs, droppedLogs, emits: runEmits, db: writes, discard: component === undefined };
}

/** Ends the run in the guest (time-out): nothing more is recorded, and what it did is handed over. */
function collect() {
  consoleOn = false;
  epoch++;
  return outputs(null);
}

async function runComponent(factory, payload) {
  resetRun(payload);
  // An exception in a timer callback or microtask (which would crash a Node process) fails the
  // run while it is awaited (settled), and is ignored otherwise.
  failRun = ignoreFailure;
  let error = null;
  try {
    try { globalThis.process.env.PD_COMPONENT = payload.sourceId; } catch (e) { /* the component's own process object */ }
    if (component === undefined) {
      if (factory === undefined) throw new Error("the component is not loaded");
      const c = load(factory);
      const problem = checkComponent(c);
      if (problem) return outputs({ code: "InvalidComponent", msg: problem, stack: "" });
      component = c;
    }
    const self = makeThis(component, payload.props);
    const fn = payload.method === "run" ? component.run : component.hooks && component.hooks[payload.method];
    if (typeof fn === "function") await settled(reflectApply(fn, self, [payload.method === "run" ? payload.event : undefined]));
  } catch (e) {
    error = errorInfo(e);
  } finally {
    failRun = ignoreFailure;
    consoleOn = false;
    epoch++;
    // RegExp.input and friends hold the last string a regexp searched, for the context's life:
    // a run's huge string would stay in the heap until the source's next regexp.
    try { regExpTest(EMPTY, ""); } catch (e) { /* the component's own exec */ }
  }
  return outputs(error);
}

// A run started on the host's own thread ("start"): its outputs once settled, else how to wait.
let started;

/** Starts a warm run; its microtasks run before the host's synchronous call returns. */
function start(payload) {
  const run = { done: false, value: null, promise: runComponent(undefined, payload) };
  started = run;
  promiseThen(run.promise, (value) => { run.done = true; run.value = value; });
}

/** The started run's outputs if it has settled, else null (it awaits a fetch or a timer). */
function take() {
  const run = started;
  if (run === undefined || !run.done) return null;
  started = undefined;
  return run.value;
}

/** The started run's outputs, once it settles. */
function wait() {
  const run = started;
  started = undefined;
  return run === undefined ? outputs({ code: "SandboxError", msg: "no run in progress", stack: "" }) : run.promise;
}

return function dispatch(op, a, b, c) {
  if (op === "start") return start(a);
  if (op === "take") return take();
  if (op === "wait") return wait();
  if (op === "tick") return tick();
  if (op === "settle") return settle(a, b, c);
  if (op === "load") return describe(a);
  if (op === "run") return runComponent(a, b);
  if (op === "collect") return collect();
  throw new Error("unknown sandbox operation");
};
`;
