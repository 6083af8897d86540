import { FUNCTION_MARKER } from "../../domain/props.js";

/**
 * Guest code, second half of the prelude (see guest-prelude.ts, whose scope it shares): loading a
 * component module, describing it for the metadata read, and running `run(event)` or a hook with
 * `this` set up as Pipedream does (props, `$emit`, `db`, `http.respond`, bound `methods`).
 * Everything returned to the host is plain data built here, never a component-made object.
 */
export const GUEST_COMPONENT_SOURCE =
  `
const race = Promise.race.bind(Promise);
const FUNCTION_MARKER = ` +
  JSON.stringify(FUNCTION_MARKER) +
  `;

function guestRequire(name) {
  throw new Error("require(" + stringify(String(name)) + ") is not available: import allowed packages at the top of the component");
}

function load(factory) {
  const module = { exports: {} };
  factory.call(module.exports, module.exports, guestRequire, module, "/component.js", "/");
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

// db: values the run has read or written are kept here too, so reading one key in a loop does
// not copy it out of the host again each time (the host's state changes only through this run).
const dbCache = new Map();
let dbWriteBudget = Infinity;
function dbKey(key) {
  return bounded(String(key), limits.maxDbBytes, "db: the key is longer than the state limit of " + limits.maxDbBytes + " bytes");
}
const db = Object.freeze({
  get(key) {
    const k = dbKey(key);
    let json;
    if (mapHas(dbCache, k)) json = mapGet(dbCache, k);
    else { json = host("dbGet", k); mapSet(dbCache, k, json); }
    return json === undefined ? undefined : parse(json);
  },
  set(key, value) {
    const k = dbKey(key);
    const json = value === undefined ? undefined : stringify(value);
    const size = k.length + (json === undefined ? 0 : json.length);
    if (size > limits.maxDbBytes) throw new Error("db.set: the state would exceed " + limits.maxDbBytes + " bytes");
    if (size > dbWriteBudget) throw new Error("db.set: a run may write at most " + limits.maxDbBytes * K.dbWriteBudgetStates + " bytes (keys and values as JSON)");
    dbWriteBudget = host("dbSet", k, json);
    mapSet(dbCache, k, json);
  },
});

// $emit: the event and its metadata are checked against the run's limits here, before they are
// copied out; the host checks them again (bytes, not characters) and answers how much of the
// run's budget is left.
let emitsLeft = Infinity;
let emitBudget = Infinity;
function $emit(event, meta) {
  if (emitsLeft <= 0) throw new Error("$emit: at most " + limits.maxEmitsPerRun + " events per run");
  const json = stringify(event === undefined ? null : event);
  const text = json === undefined ? "null" : json;
  if (text.length > limits.maxEventBytes) {
    throw new Error("$emit: the event is at least " + text.length + " bytes as JSON; the limit is " + limits.maxEventBytes);
  }
  // Bounded although its fields are: a component can give Object.prototype a toJSON.
  const metaJson = bounded(stringify(emitMeta(meta)), K.maxEmitMetaLength, "$emit: the metadata is too large");
  if (text.length + metaJson.length > emitBudget) {
    throw new Error("$emit: a run may emit at most " + limits.maxEventBytes * K.emitBudgetEvents + " bytes (events and metadata as JSON)");
  }
  emitBudget = host("emit", text, metaJson);
  emitsLeft--;
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
// status still throws).
let responded = false;
function makeHttp(value) {
  const http = Object.assign({}, value !== null && typeof value === "object" ? value : {});
  if (http.endpoint === undefined && typeof http.endpoint_url === "string") http.endpoint = http.endpoint_url;
  http.respond = function respond(r) {
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

function makeThis(component, values) {
  const self = {};
  for (const k of Object.keys(values)) self[k] = values[k];
  const defs = component.props !== null && typeof component.props === "object" ? component.props : {};
  for (const name of Object.keys(defs)) {
    const d = defs[name];
    const type = typeof d === "string" ? d : d !== null && typeof d === "object" ? d.type : undefined;
    if (type === "$.interface.http") self[name] = makeHttp(self[name]);
    else if (type === "$.service.db") self[name] = db;
  }
  if (!("db" in self)) self.db = db;
  self.$emit = $emit;
  const methods = component.methods !== null && typeof component.methods === "object" ? component.methods : {};
  for (const name of Object.keys(methods)) {
    if (typeof methods[name] === "function" && !(name in self)) self[name] = methods[name].bind(self);
  }
  return self;
}

async function runComponent(factory, payload) {
  globalThis.process.env.PD_COMPONENT = payload.sourceId;
  limits = payload.limits;
  emitsLeft = limits.maxEmitsPerRun;
  consoleOn = true;
  // Rejected by an exception in a timer callback or microtask, which would crash a Node process.
  const failed = new Promise((resolve, reject) => { failRun = reject; });
  failed.catch(() => {});
  try {
    const component = load(factory);
    const problem = checkComponent(component);
    if (problem) return { code: "InvalidComponent", msg: problem, stack: "" };
    const self = makeThis(component, payload.props);
    const fn = payload.method === "run" ? component.run : component.hooks && component.hooks[payload.method];
    if (typeof fn !== "function") return null; // a hook the component does not have
    await race([fn.call(self, payload.method === "run" ? payload.event : undefined), failed]);
    return null;
  } catch (e) {
    return errorInfo(e);
  } finally {
    reportDroppedLogs();
  }
}

return function dispatch(op, a, b, c) {
  if (op === "tick") return tick();
  if (op === "settle") return settle(a, b, c);
  if (op === "load") return describe(a);
  if (op === "run") return runComponent(a, b);
  throw new Error("unknown sandbox operation");
};
`;
