import type { IncomingHttpHeaders } from "node:http";
import { type Agent, request } from "undici";
import { isHttpUrl } from "../domain/url-rules.js";
import { FetchTimeoutError, RedirectError, ResponseTooLargeError } from "./errors.js";

/**
 * A small request for text resources (component_url, the sandbox's fetch): size-limited while
 * streaming, time-limited end to end, and sent through the guarded agent. Redirects are followed
 * by hand, at most `maxRedirects` times, so every hop is a fresh request through the same agent
 * and its destination is checked again at connect time; undici's redirect interceptor is not used.
 */

export interface FetchTextOptions {
  readonly agent: Agent;
  /** Deadline for the whole exchange: every hop, headers and body. */
  readonly timeoutMs: number;
  /** Largest body accepted, in bytes; more aborts the transfer with ResponseTooLargeError. */
  readonly maxBytes: number;
  /** Default GET. */
  readonly method?: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string | Uint8Array;
  /** Redirects followed before RedirectError; default 3. 0 returns the 3xx response as is. */
  readonly maxRedirects?: number;
  /** The caller's own cancellation (the sandbox run ending); rejects with its reason. */
  readonly signal?: AbortSignal;
}

export interface FetchTextResult {
  readonly status: number;
  readonly statusText: string;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
  /** The URL that answered, after redirects. */
  readonly url: string;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Credentials are meant for the origin they were given for; a redirect elsewhere drops them. */
const ORIGIN_BOUND_HEADERS = new Set(["authorization", "cookie", "proxy-authorization"]);
/** Headers describing a body, dropped when a redirect turns the request into a bodiless GET. */
const BODY_HEADERS = new Set(["content-type", "content-length", "content-encoding", "content-language", "content-location"]);

interface Hop {
  readonly url: string;
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body: string | Uint8Array | undefined;
}

export async function guardedFetchText(url: string, options: FetchTextOptions): Promise<FetchTextResult> {
  if (!isHttpUrl(url)) throw new TypeError(`not an absolute http(s) URL: ${url}`);
  const maxRedirects = options.maxRedirects ?? 3;
  const controller = new AbortController();
  const timeout = new FetchTimeoutError(options.timeoutMs);
  const timer = setTimeout(() => controller.abort(timeout), options.timeoutMs);
  const external = options.signal;
  const onExternalAbort = () => controller.abort(external?.reason);
  if (external?.aborted) onExternalAbort();
  else external?.addEventListener("abort", onExternalAbort, { once: true });
  let hop: Hop = { url, method: (options.method ?? "GET").toUpperCase(), headers: { ...options.headers }, body: options.body };
  try {
    for (let redirects = 0; ; redirects++) {
      const res = await request(hop.url, {
        dispatcher: options.agent,
        method: hop.method,
        headers: hop.headers,
        body: hop.body,
        signal: controller.signal,
        headersTimeout: options.timeoutMs,
        bodyTimeout: options.timeoutMs,
      });
      const location = headerValue(res.headers.location);
      if (REDIRECT_STATUSES.has(res.statusCode) && location !== undefined && maxRedirects > 0) {
        // Redirect bodies are tiny; reading them lets the connection go back to the pool.
        await res.body.dump({ limit: 16 * 1024 }).catch(() => undefined);
        if (redirects >= maxRedirects) throw new RedirectError(`more than ${maxRedirects} redirects`);
        hop = nextHop(hop, res.statusCode, resolveLocation(location, hop.url));
        continue;
      }
      const text = await readLimited(res.body, res.headers, options.maxBytes);
      return { status: res.statusCode, statusText: res.statusText, headers: res.headers, text, url: hop.url };
    }
  } catch (err) {
    // undici rejects with the abort reason, but it may surface as a body error instead; the
    // signal says reliably whether (and why) we aborted.
    if (controller.signal.aborted) throw controller.signal.reason === timeout ? timeout : (external?.reason ?? err);
    throw err;
  } finally {
    clearTimeout(timer);
    external?.removeEventListener("abort", onExternalAbort);
  }
}

/** The request for a redirect's target, with the method rules browsers follow (Fetch standard, 4.4). */
function nextHop(prev: Hop, status: number, url: string): Hop {
  let headers = prev.headers;
  if (new URL(url).origin !== new URL(prev.url).origin) headers = without(headers, ORIGIN_BOUND_HEADERS);
  const toGet =
    status === 303 ? prev.method !== "GET" && prev.method !== "HEAD" : (status === 301 || status === 302) && prev.method === "POST";
  if (!toGet) return { ...prev, url, headers };
  return { url, method: "GET", headers: without(headers, BODY_HEADERS), body: undefined };
}

function resolveLocation(location: string, base: string): string {
  let next: string;
  try {
    next = new URL(location, base).href;
  } catch {
    throw new RedirectError(`redirect to an invalid location: ${location.slice(0, 200)}`);
  }
  if (!isHttpUrl(next))
    throw new RedirectError(`redirect to a location that is not an http(s) URL of at most 2048 characters: ${next.slice(0, 200)}`);
  return next;
}

type Body = AsyncIterable<Buffer> & NodeJS.EventEmitter & { destroy(): void };

/** Drops the rest of a body; undici reports the destroy as an AbortError, which is expected here. */
function discard(body: Body): void {
  body.on("error", () => undefined);
  body.destroy();
}

async function readLimited(body: Body, headers: IncomingHttpHeaders, maxBytes: number): Promise<string> {
  const declared = Number(headerValue(headers["content-length"]));
  if (Number.isFinite(declared) && declared > maxBytes) {
    discard(body);
    throw new ResponseTooLargeError(maxBytes);
  }
  // The declared length can lie (or be absent with chunked encoding), so count while streaming.
  const decoder = new TextDecoder("utf-8");
  let received = 0;
  let text = "";
  for await (const chunk of body) {
    received += chunk.length;
    if (received > maxBytes) {
      discard(body);
      throw new ResponseTooLargeError(maxBytes);
    }
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function without(headers: Record<string, string>, names: ReadonlySet<string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !names.has(name.toLowerCase())));
}
