import { EventEmitter } from "node:events";
import type { IncomingHttpHeaders } from "node:http";
import type { Agent } from "undici";
import type { AttemptErrorKind } from "../domain/delivery-outcome.js";
import { isDestinationRefused, someInChain } from "../net/errors.js";

/**
 * One delivery attempt: POST a body to a URL and report what happened, never throwing. What the
 * result means (delivered, retry, give up, deactivate) is decided by `domain/delivery-outcome.ts`;
 * this module only talks HTTP. Redirects are not followed (undici's `request` does not follow
 * them without the redirect interceptor, which is deliberately not installed).
 */

export type SendResult =
  | {
      readonly statusCode: number;
      readonly retryAfter: string | null;
      /** The `webhook-delivery` response header (receiver-driven control), when present. */
      readonly deliveryControl: string | null;
      readonly durationMs: number;
      readonly responseSnippet: string;
    }
  | { readonly errorKind: AttemptErrorKind; readonly error: string; readonly durationMs: number };

export interface SendRequest {
  readonly url: string;
  readonly body: string;
  /** Sent as given; `content-type: application/json` is added when absent. */
  readonly headers: Readonly<Record<string, string>>;
  /** This attempt's deadline (a webhook's `timeout_ms`); the sender's `timeoutMs` when absent. */
  readonly timeoutMs?: number;
}

export interface Sender {
  send(req: SendRequest): Promise<SendResult>;
  /**
   * Aborts attempts in flight and refuses new ones. Idempotent. The agent is shared with other
   * features and is closed by its owner, not here.
   */
  close(): Promise<void>;
}

export interface SenderOptions {
  /** The guarded agent (`net/guarded-agent.ts`); it enforces the SSRF rule at connect time. */
  readonly agent: Agent;
  /** DELIVERY_TIMEOUT_MS: deadline for the whole attempt, connect to last body byte. */
  readonly timeoutMs: number;
  /** Monotonic clock for `durationMs`; injectable for tests. */
  readonly now?: () => number;
}

/** Bytes of the response body kept for the attempt log. */
export const RESPONSE_SNIPPET_BYTES = 1024;
/**
 * Bytes read (and thrown away) past the snippet so the connection can return to the keep-alive
 * pool; past this, closing the socket is cheaper than draining it.
 */
const DRAIN_LIMIT_BYTES = 64 * 1024;

export function createSender(options: SenderOptions): Sender {
  const now = options.now ?? (() => performance.now());
  const inFlight = new Set<EventEmitter>();
  const targets = new ParsedTargets();
  let closed = false;

  async function send(req: SendRequest): Promise<SendResult> {
    const started = now();
    const timeoutMs = req.timeoutMs ?? options.timeoutMs;
    if (closed) return { errorKind: "other", error: "sender is closed", durationMs: 0 };
    // undici takes an EventEmitter as the abort signal; an AbortController (an EventTarget) cost
    // about 15 µs more per attempt, measured.
    const abort = new EventEmitter();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      abort.emit("abort");
    }, timeoutMs);
    inFlight.add(abort);
    try {
      const target = targets.of(req.url);
      // The dispatcher's own request API: the URL is parsed once per distinct URL, not per attempt.
      const res = await options.agent.request({
        origin: target.origin,
        path: target.path,
        method: "POST",
        body: req.body,
        headers: withContentType(req.headers),
        signal: abort,
        // Belt and braces with the abort timer: undici's own timers also bound each phase.
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      // Once the status line is in, the receiver has answered; a body that stalls or breaks
      // afterwards only shortens the snippet, it does not turn the answer into a failure. A 2xx
      // body is drained unread; only a failure's body is worth keeping.
      let responseSnippet = "";
      if (res.statusCode >= 200 && res.statusCode < 300) await res.body.dump({ limit: DRAIN_LIMIT_BYTES }).catch(() => undefined);
      else responseSnippet = await readSnippet(res.body);
      return {
        statusCode: res.statusCode,
        retryAfter: headerValue(res.headers["retry-after"]) ?? null,
        deliveryControl: headerValue(res.headers["webhook-delivery"]) ?? null,
        durationMs: elapsed(started),
        responseSnippet,
      };
    } catch (err) {
      const errorKind: AttemptErrorKind = timedOut ? "timeout" : classifySendError(err);
      const error = timedOut ? `no complete response within ${timeoutMs} ms` : closed ? "sender closed during the attempt" : describe(err);
      return { errorKind, error, durationMs: elapsed(started) };
    } finally {
      clearTimeout(timer);
      inFlight.delete(abort);
    }
  }

  function elapsed(started: number): number {
    return Math.max(0, Math.round(now() - started));
  }

  async function close(): Promise<void> {
    closed = true;
    for (const abort of inFlight) abort.emit("abort");
    inFlight.clear();
  }

  return { send, close };
}

/** origin + path of a delivery URL, parsed once per distinct URL (a webhook's URL rarely changes). */
class ParsedTargets {
  private readonly parsed = new Map<string, { origin: string; path: string }>();

  constructor(private readonly max = 10_000) {}

  of(url: string): { origin: string; path: string } {
    let t = this.parsed.get(url);
    if (t === undefined) {
      const u = new URL(url);
      t = { origin: u.origin, path: `${u.pathname}${u.search}` };
      if (this.parsed.size >= this.max) this.parsed.clear();
      this.parsed.set(url, t);
    }
    return t;
  }
}

/** Why an attempt got no response, for `classifyAttempt`. */
export function classifySendError(err: unknown): AttemptErrorKind {
  // Checked first: a refused destination also surfaces as a connect failure, but must not retry.
  if (isDestinationRefused(err)) return "refused_destination";
  if (someInChain(err, (e) => TIMEOUT_CODES.has(codeOf(e)))) return "timeout";
  if (someInChain(err, (e) => isConnectCode(codeOf(e)))) return "connect";
  return "other";
}

const TIMEOUT_CODES = new Set(["UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ETIMEDOUT"]);
const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EAI_FAIL",
  "EADDRNOTAVAIL",
  "EPIPE",
  "UND_ERR_SOCKET",
]);

/** Connection-level failures, TLS handshake and certificate errors included. */
function isConnectCode(code: string): boolean {
  return CONNECT_CODES.has(code) || code.startsWith("ERR_TLS_") || code.startsWith("ERR_SSL_") || CERT_CODE.test(code);
}
/** OpenSSL verification codes as node:tls reports them (CERT_HAS_EXPIRED, DEPTH_ZERO_SELF_SIGNED_CERT…). */
const CERT_CODE = /CERT|UNABLE_TO_(GET|VERIFY)/;

function codeOf(e: unknown): string {
  if (typeof e === "object" && e !== null && "code" in e && typeof e.code === "string") return e.code;
  return "";
}

function describe(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) {
    // Happy Eyeballs: one error per address tried; their messages say more than the wrapper's.
    return err.errors.map(describe).join("; ");
  }
  const message = err instanceof Error ? err.message || err.name : String(err);
  return message.slice(0, 500);
}

/** The headers as given (undici does not change them) when they name a content type. */
function withContentType(headers: Readonly<Record<string, string>>): Readonly<Record<string, string>> {
  if (headers["content-type"] !== undefined) return headers;
  const hasContentType = Object.keys(headers).some((name) => name.toLowerCase() === "content-type");
  return hasContentType ? headers : { ...headers, "content-type": "application/json" };
}

function headerValue(value: IncomingHttpHeaders[string]): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The first RESPONSE_SNIPPET_BYTES of the body as text; the rest is drained or the socket dropped. */
function readSnippet(body: NodeJS.ReadableStream & { destroy(): void }): Promise<string> {
  return new Promise((resolve) => {
    const kept: Buffer[] = [];
    let keptBytes = 0;
    let seen = 0;
    body.on("data", (chunk: Buffer) => {
      seen += chunk.length;
      if (keptBytes < RESPONSE_SNIPPET_BYTES) {
        const part = chunk.subarray(0, RESPONSE_SNIPPET_BYTES - keptBytes);
        kept.push(part);
        keptBytes += part.length;
      }
      if (seen > DRAIN_LIMIT_BYTES) body.destroy();
    });
    // Errors after the status only cut the snippet short (see send); 'close' always follows.
    body.on("error", () => undefined);
    body.on("close", () => resolve(Buffer.concat(kept).toString("utf8")));
  });
}
