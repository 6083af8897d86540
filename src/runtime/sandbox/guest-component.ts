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

function errorInfo(e) {
  try {
    if (e !== null && typeof e === "object") {
      const code = e.code !== undefined && e.code !== null ? String(e.code) : e.name ? String(e.name) : "Error";
      return { code, msg: errorText(e), stack: e.stack === undefined ? "" : String(e.stack) };
    }
    return { code: "Error", msg: String(e), stack: "" };
  } catch (x) {
    return { code: "Error", msg: "unprintable error", stack: "" };
  }
}

// Copies component data as JSON-able values: functions become FUNCTION_MARKER; cycles, deep
// nesting and oversized structures are cut so a hostile props object cannot exhaust the host.
function toData(v, depth, budget) {
  if (--budget.n < 0) return null;
  if (v === null || typeof v === "string" || typeof v === "boolean") return v;
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
      if (d !== undefined) Object.defineProperty(out, k, { value: d, enumerable: true, writable: true, configurable: true });
    }
  }
  budget.path.pop();
  return out;
}

function describe(factory) {
  let c;
  try { c = load(factory); } catch (e) { return { ok: false, reason: "the code threw while loading: " + errorText(e) }; }
  const problem = checkComponent(c);
  if (problem) return { ok: false, reason: problem };
  try {
    const hooks = [];
    if (c.hooks !== null && typeof c.hooks === "object") {
      for (const h of ["deploy", "activate", "deactivate"]) if (typeof c.hooks[h] === "function") hooks.push(h);
    }
    const budget = { n: 20000, path: [] };
    const field = (name) => toData(c[name], 3, budget);
    return { ok: true, component: { key: field("key"), name: field("name"), version: field("version"), description: field("description"),
      dedupe: field("dedupe"), props: toData(c.props, 12, budget), hooks, hasRun: true } };
  } catch (e) {
    return { ok: false, reason: "reading the component threw: " + errorText(e) };
  }
}

const db = Object.freeze({
  get(key) { const json = host("dbGet", String(key)); return json === undefined ? undefined : parse(json); },
  set(key, value) { host("dbSet", String(key), value === undefined ? undefined : stringify(value)); },
});

function $emit(event, meta) {
  const json = stringify(event === undefined ? null : event);
  const m = {};
  if (meta !== undefined && meta !== null) {
    if (typeof meta !== "object") throw new TypeError("$emit: the metadata must be an object");
    for (const k of ["id", "name", "summary", "ts"]) if (meta[k] !== undefined && meta[k] !== null) m[k] = meta[k];
  }
  host("emit", json === undefined ? "null" : json, stringify(m));
}

function makeHttp(value) {
  const http = Object.assign({}, value !== null && typeof value === "object" ? value : {});
  if (http.endpoint === undefined && typeof http.endpoint_url === "string") http.endpoint = http.endpoint_url;
  http.respond = function respond(r) {
    r = r || {};
    const status = r.status === undefined || r.status === null ? 200 : Number(r.status);
    let kind = "text";
    let data = "";
    const b = r.body;
    if (typeof b === "string") data = b;
    else if (b !== undefined && b !== null) {
      const bytes = bytesOf(b);
      if (bytes) { kind = "bytes"; data = bytes; }
      else { const json = stringify(b); if (json !== undefined) { kind = "json"; data = json; } }
    }
    host("respond", status, stringify(headerPairs(r.headers)), kind, data);
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
  }
}

return function dispatch(op, a, b, c) {
  if (op === "settle") return settle(a, b, c);
  if (op === "load") return describe(a);
  if (op === "run") return runComponent(a, b);
  throw new Error("unknown sandbox operation");
};
`;
