/**
 * Guest code (runs inside the isolate): `console.*` formatting in the manner of Node's
 * util.format / util.inspect, on one line. Formatting happens in the guest so that only a string
 * crosses to the host, and a hostile object (getters, proxies, cycles) can only waste its own run's
 * time. Defines `formatArgs(args)` in the prelude's scope.
 */
export const GUEST_FORMAT_SOURCE = String.raw`
const MAX_ITEMS = 100;
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function quote(s) {
  return "'" + s.replace(/\\/g, "\\\\").replace(/'/g, "\\'").replace(/\n/g, "\\n") + "'";
}

function inspect(v, depth, seen) {
  if (v === null) return "null";
  switch (typeof v) {
    case "string": return quote(v);
    case "number": return Object.is(v, -0) ? "-0" : String(v);
    case "bigint": return String(v) + "n";
    case "undefined":
    case "boolean": return String(v);
    case "symbol": return v.toString();
    case "function": return "[Function: " + (v.name || "(anonymous)") + "]";
  }
  if (seen.indexOf(v) !== -1) return "[Circular]";
  if (v instanceof Error) return String(v.stack || v.name + ": " + v.message);
  if (v instanceof Date) return isNaN(v.getTime()) ? "Invalid Date" : v.toISOString();
  if (v instanceof RegExp) return String(v);
  if (v instanceof Promise) return "Promise {}";
  if (depth < 0) return Array.isArray(v) ? "[Array]" : "[Object]";
  const next = seen.concat([v]);
  const list = (items, total) => {
    const shown = items.slice(0, MAX_ITEMS);
    if (total > MAX_ITEMS) shown.push("... " + (total - MAX_ITEMS) + " more items");
    return shown;
  };
  if (Array.isArray(v)) {
    const items = list(v.slice(0, MAX_ITEMS).map((x) => inspect(x, depth - 1, next)), v.length);
    return items.length ? "[ " + items.join(", ") + " ]" : "[]";
  }
  if (ArrayBuffer.isView(v) && typeof v.length === "number") {
    const items = list(Array.prototype.slice.call(v, 0, MAX_ITEMS).map(String), v.length);
    return v.constructor.name + "(" + v.length + ") [ " + items.join(", ") + " ]";
  }
  if (v instanceof Map) {
    const items = [];
    v.forEach((val, key) => { if (items.length <= MAX_ITEMS) items.push(inspect(key, depth - 1, next) + " => " + inspect(val, depth - 1, next)); });
    return "Map(" + v.size + ") {" + (items.length ? " " + list(items, v.size).join(", ") + " " : "") + "}";
  }
  if (v instanceof Set) {
    const items = [];
    v.forEach((val) => { if (items.length <= MAX_ITEMS) items.push(inspect(val, depth - 1, next)); });
    return "Set(" + v.size + ") {" + (items.length ? " " + list(items, v.size).join(", ") + " " : "") + "}";
  }
  const keys = Object.keys(v);
  const items = list(keys.slice(0, MAX_ITEMS).map((k) => {
    let shown;
    try { shown = inspect(v[k], depth - 1, next); } catch (e) { shown = "[Getter threw]"; }
    return (IDENTIFIER.test(k) ? k : quote(k)) + ": " + shown;
  }), keys.length);
  const proto = Object.getPrototypeOf(v);
  const name = proto === null ? "[Object: null prototype] " : proto !== Object.prototype && proto.constructor && proto.constructor.name ? proto.constructor.name + " " : "";
  return name + (items.length ? "{ " + items.join(", ") + " }" : "{}");
}

function formatOne(a) {
  return typeof a === "string" ? a : inspect(a, 2, []);
}

function formatArgs(args) {
  try {
    let first = 0;
    let head = "";
    if (typeof args[0] === "string" && args.length > 1 && args[0].indexOf("%") !== -1) {
      let i = 1;
      head = args[0].replace(/%([sdifjoOc%])/g, (m, c) => {
        if (c === "%") return "%";
        if (i >= args.length) return m;
        const a = args[i++];
        switch (c) {
          case "s": return typeof a === "string" ? a : typeof a === "bigint" ? a + "n" : typeof a === "object" && a !== null ? inspect(a, 1, []) : String(a);
          case "d": return typeof a === "bigint" ? a + "n" : typeof a === "object" && a !== null ? "NaN" : String(Number(a));
          case "i": return typeof a === "bigint" ? a + "n" : String(parseInt(a, 10));
          case "f": return String(parseFloat(a));
          case "j": try { return JSON.stringify(a); } catch (e) { return "[Circular]"; }
          case "c": return "";
          default: return inspect(a, 4, []);
        }
      });
      first = i;
    } else if (args.length > 0) {
      head = formatOne(args[0]);
      first = 1;
    }
    const rest = Array.prototype.slice.call(args, first).map(formatOne);
    return rest.length ? head + " " + rest.join(" ") : head;
  } catch (e) {
    return "[unprintable console arguments]";
  }
}
`;
