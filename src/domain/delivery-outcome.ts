import { maxAttempts, retryDelayMs } from "./retry-policy.js";

/**
 * The one place that decides what happens after a delivery attempt (SPEC §6). The worker only
 * acts on the answer. Pure: the clock (`nowMs`, for HTTP-date Retry-After) and randomness (jitter)
 * are inputs.
 */

export type AttemptErrorKind = "timeout" | "connect" | "refused_destination" | "other";

export interface AttemptInput {
  /** HTTP status of the response; absent when no response arrived. */
  readonly statusCode?: number;
  /** Why no response arrived; takes precedence over `statusCode`. */
  readonly errorKind?: AttemptErrorKind;
  /** Raw `Retry-After` response header, if any. */
  readonly retryAfter?: string | null;
  /** Raw `webhook-delivery` response header, if any (receiver-driven control, SPEC §12). */
  readonly deliveryControl?: string | null;
  /** Attempts made so far, including the one being classified (1-based). */
  readonly attemptsMade: number;
  readonly scheduleMs: readonly number[];
  readonly nowMs: number;
  readonly random: () => number;
}

export type Outcome =
  | { readonly kind: "delivered" }
  | { readonly kind: "retry"; readonly delayMs: number; readonly reason: string }
  | { readonly kind: "give_up"; readonly reason: string; readonly byReceiver?: true }
  | { readonly kind: "deactivate"; readonly reason: string; readonly byReceiver?: true };

/** The longest a receiver's Retry-After can push the next attempt out. */
export const MAX_RETRY_AFTER_MS = 3_600_000;

/** What an attempt's result means, before the schedule is consulted. */
type Verdict =
  | { readonly kind: "success" }
  | { readonly kind: "gone" }
  | { readonly kind: "control"; readonly control: ReceiverControl }
  | { readonly kind: "throttled"; readonly reason: string }
  | { readonly kind: "failure"; readonly reason: string }
  | { readonly kind: "never_deliverable"; readonly reason: string };

export function classifyAttempt(input: AttemptInput): Outcome {
  const verdict = judge(input);
  switch (verdict.kind) {
    case "success":
      return { kind: "delivered" };
    case "gone":
      return { kind: "deactivate", reason: "HTTP 410 Gone: the receiver asked to stop; webhook deactivated", byReceiver: true };
    case "control":
      return verdict.control === "disable"
        ? { kind: "deactivate", reason: "the receiver asked to stop (webhook-delivery: disable); webhook deactivated", byReceiver: true }
        : { kind: "give_up", reason: "the receiver asked to abort this message (webhook-delivery: abort-message)", byReceiver: true };
    case "never_deliverable":
      return { kind: "give_up", reason: verdict.reason };
    case "failure":
      return scheduleRetry(input, verdict.reason, 0);
    case "throttled":
      return scheduleRetry(input, verdict.reason, parseRetryAfterMs(input.retryAfter, input.nowMs) ?? 0);
    default:
      return assertNever(verdict);
  }
}

function judge(input: AttemptInput): Verdict {
  if (input.errorKind !== undefined) return judgeError(input.errorKind);
  const status = input.statusCode;
  // Neither a response nor an error is a caller bug; treating it as a retryable failure keeps the
  // delivery alive rather than losing it.
  if (status === undefined) return { kind: "failure", reason: "no response" };
  if (status >= 200 && status <= 299) return { kind: "success" };
  const control = receiverControl(input.deliveryControl);
  if (control) return { kind: "control", control };
  if (status === 410) return { kind: "gone" };
  if (status === 429 || status === 503) return { kind: "throttled", reason: `HTTP ${status}` };
  if (status >= 300 && status <= 399) return { kind: "failure", reason: `HTTP ${status} (redirects are not followed)` };
  return { kind: "failure", reason: `HTTP ${status}` };
}

/**
 * Receiver-driven control (the Standard Webhooks proposal): `webhook-delivery: disable` stops
 * every delivery to the webhook (as a 410), `abort-message` this delivery. Read on answers that
 * are not a 2xx (a 2xx delivered the message, whatever else it says); case and spaces do not
 * matter; another value is ignored.
 */
export type ReceiverControl = "disable" | "abort-message";

export function receiverControl(header: string | null | undefined): ReceiverControl | undefined {
  const value = header?.trim().toLowerCase();
  return value === "disable" || value === "abort-message" ? value : undefined;
}

function judgeError(kind: AttemptErrorKind): Verdict {
  switch (kind) {
    case "timeout":
      return { kind: "failure", reason: "timed out" };
    case "connect":
      return { kind: "failure", reason: "connection failed" };
    case "other":
      return { kind: "failure", reason: "request failed" };
    case "refused_destination":
      // Retrying cannot help: the address is refused by configuration, not by a transient fault.
      return {
        kind: "never_deliverable",
        reason:
          "destination refused: it resolves to a private, loopback, link-local or metadata address (ALLOW_PRIVATE_DESTINATIONS is off)",
      };
    default:
      return assertNever(kind);
  }
}

/**
 * Next attempt on the schedule, or give up when it is exhausted. `minDelayMs` (from Retry-After)
 * can lengthen the scheduled delay up to one hour, never shorten it: the schedule is a floor.
 */
function scheduleRetry(input: AttemptInput, reason: string, minDelayMs: number): Outcome {
  const scheduled = retryDelayMs(input.scheduleMs, input.attemptsMade, input.random);
  if (scheduled === undefined) {
    return { kind: "give_up", reason: `${reason}; gave up after ${maxAttempts(input.scheduleMs)} attempts` };
  }
  return { kind: "retry", delayMs: Math.max(scheduled, Math.min(minDelayMs, MAX_RETRY_AFTER_MS)), reason };
}

/**
 * `Retry-After` as ms from now: delta-seconds or an HTTP-date. Undefined when absent or
 * malformed, so a bad header falls back to the schedule instead of failing the delivery.
 */
export function parseRetryAfterMs(header: string | null | undefined, nowMs: number): number | undefined {
  if (header === null || header === undefined) return undefined;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // HTTP-dates always name a weekday or month in letters; requiring one keeps Date.parse from
  // accepting bare numbers or ISO fragments as dates.
  if (!/[A-Za-z]/.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}

function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}

/** Characters of a failed answer's body kept in the attempt log's `error`. */
export const ANSWER_EXCERPT_CHARS = 200;

/**
 * The attempt log's `error` for an answer that was not a success: the verdict, then the start of
 * the response body (control characters folded to spaces), as webhook services show it so the
 * owner can see what their endpoint said.
 */
export function describeAnswer(reason: string, body: string): string {
  const excerpt = body
    .replace(/[\u0000-\u001f\u007f]+/g, " ")
    .trim()
    .slice(0, ANSWER_EXCERPT_CHARS);
  return excerpt ? `${reason}; response: ${excerpt}` : reason;
}
