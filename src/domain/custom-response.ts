/**
 * What a source's `this.http.respond()` may put on the wire (customResponse sources). The answer
 * goes out on a connection the daemon owns, often behind a reverse proxy, so component code
 * chooses the content of a response, never its framing:
 *
 * - the status is a final one, 200..599. A 1xx (above all `101 Switching Protocols` to a request
 *   that carried `Upgrade:`) would tell a front proxy that the connection changed protocol, and
 *   the proxy would tunnel the client's following bytes past its own rules; 100..199 are refused.
 * - hop-by-hop and framing headers are dropped (RFC 9110 §7.6.1 and §6): they describe the
 *   connection or the body's transfer, which only the server may decide. That includes every name
 *   the component lists in its own `Connection` header.
 * - header names must be tokens and values must not hold CR, LF or NUL (response splitting);
 *   such headers are dropped.
 * - the headers that keep one tenant's page from acting as the daemon's origin are the daemon's
 *   own (`ENDPOINT_ANSWER_HEADERS`, on every answer of an endpoint path) and `Set-Cookie` is not
 *   the component's to send: a component's values for these names are dropped.
 */

/** Lowest and highest status a component may answer with. */
export const MIN_CUSTOM_STATUS = 200;
export const MAX_CUSTOM_STATUS = 599;

/** Headers a component may not set (lower-case). `proxy-*` names are dropped as well. */
export const CONNECTION_HEADERS: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "content-length",
  "upgrade",
  "te",
  "trailer",
  "http2-settings",
]);

/**
 * What every answer of an endpoint path carries, whoever wrote it (a component, the default
 * `{success: true}`, an error). Endpoints share one origin with each other, and on one host with
 * the queue dashboard; a tenant's HTML and scripts must not run as that origin:
 * - `sandbox` gives the page an opaque origin: its scripts and forms work, but every request they
 *   make is cross-origin (`Origin: null`, `Sec-Fetch-Site: cross-site`, no SameSite cookie, no
 *   answer it can read without CORS), and `document.cookie` and storage throw. It never grants
 *   `allow-same-origin` (which would give the origin back) nor popups.
 * - `nosniff`: a body is what its Content-Type says, so no plain-text answer becomes a page or a
 *   script another page loads.
 * - `no-referrer`: the endpoint URL is a bearer capability; links and loads of its page must not
 *   send it to other sites.
 */
export const ENDPOINT_ANSWER_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  "content-security-policy": "sandbox allow-scripts allow-forms",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
});

/**
 * Names a component may not set beyond the connection headers: the daemon's own above, and
 * cookies. A cookie set by one endpoint's answer belongs to the whole host: it would reach every
 * other tenant's endpoint and, as cookies ignore ports, could replace the dashboard's session.
 */
export const DAEMON_OWNED_HEADERS: ReadonlySet<string> = new Set([...Object.keys(ENDPOINT_ANSWER_HEADERS), "set-cookie"]);

export type CustomResponseCheck =
  | { readonly ok: true; readonly status: number; readonly headers: Record<string, string>; readonly dropped: readonly string[] }
  | { readonly ok: false; readonly problem: string };

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** CR and LF would start a new header line (response splitting); NUL is refused by every parser. */
const BAD_VALUE = /[\r\n\u0000]/;

/**
 * Checks a respond() call. A status outside 200..599 makes the whole answer unusable (`ok:
 * false`, the caller answers 502 and records the problem); headers that may not be set are left
 * out and named in `dropped`.
 */
export function checkCustomResponse(status: number, headers: Readonly<Record<string, string>>): CustomResponseCheck {
  if (!Number.isInteger(status) || status < MIN_CUSTOM_STATUS || status > MAX_CUSTOM_STATUS) {
    return {
      ok: false,
      problem: `http.respond: status ${String(status)} is not allowed; use a final status from ${MIN_CUSTOM_STATUS} to ${MAX_CUSTOM_STATUS}`,
    };
  }
  const listed = connectionOptions(headers);
  const kept: Record<string, string> = {};
  const dropped: string[] = [];
  for (const [rawName, value] of Object.entries(headers)) {
    const name = rawName.toLowerCase();
    const refused = CONNECTION_HEADERS.has(name) || DAEMON_OWNED_HEADERS.has(name) || name.startsWith("proxy-") || listed.has(name);
    if (refused || !TOKEN.test(name) || typeof value !== "string" || BAD_VALUE.test(value)) dropped.push(name);
    else kept[name] = value;
  }
  return { ok: true, status, headers: kept, dropped };
}

/** The header names a `Connection` header lists: they are hop-by-hop too. */
function connectionOptions(headers: Readonly<Record<string, string>>): Set<string> {
  const out = new Set<string>();
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() !== "connection" || typeof value !== "string") continue;
    for (const option of value.split(",")) {
      const o = option.trim().toLowerCase();
      if (o !== "") out.add(o);
    }
  }
  return out;
}
