import type { IncomingMessage } from "node:http";
import { exceedsDepth } from "../domain/json-depth.js";

/** The event an HTTP source's run() receives (SPEC §5). */
export interface HttpEvent {
  method: string;
  path: string;
  query: Record<string, unknown>;
  headers: Record<string, string>;
  bodyRaw: string;
  body: unknown;
}

/** JSON when it parses (whatever the content type claims), a form when it is one, else the raw text. */
export function parseBody(raw: string, contentType: string): unknown {
  if (raw === "") return raw;
  const type = contentType.split(";")[0]?.trim().toLowerCase() ?? "";
  if (type === "application/x-www-form-urlencoded") {
    // No prototype: fields named `constructor`, `toString` or `__proto__` are plain data, not
    // inherited members (`form.constructor` was Object, and the run failed to clone it).
    const form: Record<string, string | string[]> = Object.create(null);
    for (const [k, v] of new URLSearchParams(raw)) {
      const prev = form[k];
      form[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
    }
    return form;
  }
  if (type === "" || type.includes("json") || type.startsWith("text/")) {
    try {
      const parsed: unknown = JSON.parse(raw);
      // Too deep to serialise safely: the run gets the raw text instead.
      return exceedsDepth(parsed) ? raw : parsed;
    } catch {
      return raw;
    }
  }
  return raw;
}

export function lowerCaseHeaders(headers: IncomingMessage["headers"]): Record<string, string> {
  // No prototype, as for forms: a header named `__proto__` is a header.
  const out: Record<string, string> = Object.create(null);
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}
