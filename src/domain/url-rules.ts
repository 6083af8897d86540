import { ValidationError } from "./errors.js";

/**
 * Which URLs may be stored as delivery destinations or fetched as components. Pure: this checks
 * the text only; whether the host resolves to an allowed address is decided at connect time by
 * the SSRF guard (`net/guarded-agent.ts`), because DNS can change after validation.
 */

export const MAX_URL_LENGTH = 2048;

/**
 * `scheme://authority` must be spelled out. The WHATWG parser is lenient for http(s): it reads
 * `https:///path` as host `path` and `http:\\x` as host `x`; requiring the two slashes and a
 * non-empty authority in the raw text rejects what a user most likely mistyped.
 */
const EXPLICIT_AUTHORITY = /^https?:\/\/[^/?#\\]+/i;

/** True when `s` is an absolute http(s) URL with a host that `validateWebhookUrl` would accept. */
export function isHttpUrl(s: string): boolean {
  if (s.length === 0 || s.length > MAX_URL_LENGTH) return false;
  // Whitespace or control characters would be silently stripped or escaped by the parser, so the
  // stored text would not be the URL that is called.
  if (/[\s\u0000-\u001f\u007f]/.test(s)) return false;
  if (!EXPLICIT_AUTHORITY.test(s)) return false;
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    return false;
  }
  return (url.protocol === "http:" || url.protocol === "https:") && url.hostname.length > 0;
}

/**
 * Returns `input` unchanged (not re-serialised, so what the user stored is what they read back)
 * when it is an http(s) URL with a host; throws a ValidationError naming `name` otherwise.
 */
export function validateWebhookUrl(input: unknown, name = "url"): string {
  if (typeof input !== "string") throw new ValidationError(`${name} must be a string`);
  if (input.length > MAX_URL_LENGTH) throw new ValidationError(`${name} must be at most ${MAX_URL_LENGTH} characters`);
  if (!isHttpUrl(input)) throw new ValidationError(`${name} must be an absolute http:// or https:// URL with a host`);
  return input;
}

/** A host the URL parser wrote as an IPv4 address (it canonicalises 127.1, 0x7f.0.0.1 and 2130706433 to dotted quads). */
const IPV4_HOST = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

/**
 * Why a destination URL (valid for `validateWebhookUrl`) is refused while private destinations
 * are not allowed, or undefined: its host is `localhost` or a name under `.localhost` (loopback
 * by RFC 6761, whatever DNS says), or an IP literal that `isPrivateIp` (net/private-address.ts:
 * loopback, private, link-local, ...) refuses. Names are not resolved here: one that resolves to
 * such an address, now or later, is refused by the connect-time guard on each attempt.
 */
export function privateDestinationProblem(url: string, isPrivateIp: (ip: string) => boolean): string | undefined {
  const host = new URL(url).hostname.toLowerCase().replace(/\.$/, "");
  const rule = "this daemon does not deliver to loopback, private or link-local destinations (ALLOW_PRIVATE_DESTINATIONS is off)";
  if (host === "localhost" || host.endsWith(".localhost")) return `names ${host}, a loopback name; ${rule}`;
  const ip = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : IPV4_HOST.test(host) ? host : undefined;
  if (ip !== undefined && isPrivateIp(ip)) return `names ${ip}, a loopback, private or link-local address; ${rule}`;
  return undefined;
}

/**
 * GitHub `blob` pages are HTML; the component code is served raw from raw.githubusercontent.com.
 * `https://github.com/o/r/blob/ref/path` → `https://raw.githubusercontent.com/o/r/ref/path`; any
 * other URL is returned unchanged. Ref and path are carried over verbatim (query and fragment
 * dropped), which is exactly the shape of GitHub's own "Raw" link.
 */
export function rawComponentUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url;
  }
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") return url;
  if (parsed.hostname !== "github.com" && parsed.hostname !== "www.github.com") return url;
  const m = /^\/([^/]+)\/([^/]+)\/blob\/(.+)$/.exec(parsed.pathname);
  if (!m) return url;
  const [, owner, repo, rest] = m;
  return `https://raw.githubusercontent.com/${owner}/${repo}/${rest}`;
}
