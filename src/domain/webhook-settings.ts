import { ValidationError } from "./errors.js";
import { CONNECTION_HEADERS } from "./custom-response.js";
import { parseDurationList } from "./duration.js";

/**
 * Per-webhook delivery settings (SPEC §12 "Per-webhook settings"): static request headers, the
 * attempt timeout, the retry schedule and the rate limit. Pure: the API validates them here, the
 * webhook record stores them, and the Attempter (delivery/attempt.ts) applies them to every attempt.
 * `null` (or absent) means the daemon's default.
 */
export interface WebhookSettings {
  headers: Record<string, string> | null;
  timeout_ms: number | null;
  /** As given (normalized: no blanks), in the syntax of DELIVERY_RETRY_SCHEDULE. */
  retry_schedule: string | null;
  rate_limit_per_second: number | null;
}

export const WEBHOOK_SETTING_NAMES = ["headers", "timeout_ms", "retry_schedule", "rate_limit_per_second"] as const;

export const TIMEOUT_MS_RANGE = { min: 100, max: 60_000 } as const;
export const RATE_LIMIT_RANGE = { min: 1, max: 10_000 } as const;
/**
 * Delays a webhook's retry_schedule may list: the delivery queue gives every job a BullMQ budget
 * of at least this many attempts plus one (app/core.ts), so a webhook's longer schedule is never
 * cut short by the queue.
 */
export const MAX_RETRY_DELAYS = 20;
/**
 * MAX_RETRY_SPAN_HOURS by default: how long the delays of one retry schedule may add up to. The
 * default schedule spans about 28 h (33 h with its jitter); three days leave room for a longer one
 * while a failing delivery still gives up within days, not years.
 */
export const DEFAULT_MAX_RETRY_SPAN_HOURS = 72;
/** What the operator decides about webhooks' settings. */
export interface WebhookSettingRules {
  /** MAX_RETRY_SPAN_HOURS: the longest a retry schedule's delays may add up to. */
  readonly maxRetrySpanHours: number;
}
const DEFAULT_RULES: WebhookSettingRules = { maxRetrySpanHours: DEFAULT_MAX_RETRY_SPAN_HOURS };

/** Hours, as a message shows them (one decimal at most). */
const hours = (ms: number): string => `${Number((ms / 3_600_000).toFixed(1))}h`;

/**
 * Why a schedule's delays are too long in all (undefined: they are not), measured on the delays as
 * written: each attempt's jitter (±20 %) may move the last one by a fifth either way.
 */
export function retrySpanProblem(delaysMs: readonly number[], maxHours: number): string | undefined {
  let span = 0;
  for (const d of delaysMs) span += d;
  if (span <= maxHours * 3_600_000) return undefined;
  return `its delays add up to ${hours(span)}, more than the ${maxHours}h a failing delivery may be retried for (MAX_RETRY_SPAN_HOURS)`;
}
const MAX_HEADERS = 20;
const MAX_HEADER_VALUE = 1000;

/** RFC 9110 token characters. */
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$/;
/** Visible ASCII, space and tab (no CR/LF: header injection). */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

/** The User-Agent every delivery carries (delivery/prepare.ts); a webhook's own would be replaced. */
export const DELIVERY_USER_AGENT = "Tributary-Webhooks/1";

/**
 * Why a webhook may not set this header (undefined: it may): the signature's and Tributary's own
 * headers, the body's type, the User-Agent every delivery sets, and the transport's headers. The
 * last are hop-by-hop or framing headers (RFC 9110 §7.6.1, the same set a custom response may not
 * carry) plus `Host` and `Expect`: the HTTP client either refuses a request carrying them or decides
 * them itself, so every attempt would fail or the value would not be what the receiver gets.
 */
export function headerRefusal(name: string): string | undefined {
  const n = name.toLowerCase();
  if (n.startsWith("webhook-") || n.startsWith("x-tributary-") || n === "content-type") return "reserved for the delivery itself";
  if (n === "user-agent") return `every delivery sends User-Agent: ${DELIVERY_USER_AGENT}`;
  if (CONNECTION_HEADERS.has(n) || n.startsWith("proxy-") || n === "host" || n === "expect")
    return "a header of the HTTP connection, which the client sets from the URL and the body; a delivery cannot carry it";
  return undefined;
}

/** True when a webhook may not set the header (`headerRefusal` says why). */
export function isReservedHeader(name: string): boolean {
  return headerRefusal(name) !== undefined;
}

/**
 * Reads the settings present in `params` (query string or JSON body): a key absent stays
 * undefined (PUT leaves it as it is), `null` or "" clears it (back to the default).
 */
export function parseWebhookSettings(
  params: Record<string, unknown>,
  rules: WebhookSettingRules = DEFAULT_RULES,
): Partial<WebhookSettings> {
  const out: Partial<WebhookSettings> = {};
  if (params.headers !== undefined) out.headers = parseHeaders(params.headers);
  if (params.timeout_ms !== undefined) out.timeout_ms = parseIntIn(params.timeout_ms, "timeout_ms", TIMEOUT_MS_RANGE);
  if (params.retry_schedule !== undefined) out.retry_schedule = parseRetrySchedule(params.retry_schedule, rules.maxRetrySpanHours);
  if (params.rate_limit_per_second !== undefined)
    out.rate_limit_per_second = parseIntIn(params.rate_limit_per_second, "rate_limit_per_second", RATE_LIMIT_RANGE);
  return out;
}

function cleared(raw: unknown): boolean {
  return raw === null || raw === "";
}

function parseHeaders(raw: unknown): Record<string, string> | null {
  if (cleared(raw)) return null;
  let value = raw;
  if (typeof raw === "string") {
    // From the query string: a JSON object in text.
    try {
      value = JSON.parse(raw);
    } catch {
      throw new ValidationError("headers must be a JSON object of header names to string values");
    }
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ValidationError("headers must be a JSON object of header names to string values");
  const entries = Object.entries(value);
  if (entries.length > MAX_HEADERS) throw new ValidationError(`headers may set at most ${MAX_HEADERS} headers`);
  if (entries.length === 0) return null;
  const out: Record<string, string> = {};
  const seen = new Set<string>();
  for (const [name, v] of entries) {
    if (!HEADER_NAME.test(name)) throw new ValidationError(`headers: ${JSON.stringify(name.slice(0, 100))} is not a valid header name`);
    const refused = headerRefusal(name);
    if (refused) throw new ValidationError(`headers: ${name} cannot be set (${refused})`);
    const lower = name.toLowerCase();
    if (seen.has(lower)) throw new ValidationError(`headers: ${name} is given twice`);
    seen.add(lower);
    if (typeof v !== "string") throw new ValidationError(`headers: the value of ${name} must be a string`);
    if (v.length > MAX_HEADER_VALUE || !HEADER_VALUE.test(v))
      throw new ValidationError(`headers: the value of ${name} must be at most ${MAX_HEADER_VALUE} printable ASCII characters`);
    out[lower] = v;
  }
  return out;
}

function parseIntIn(raw: unknown, name: string, range: { readonly min: number; readonly max: number }): number | null {
  if (cleared(raw)) return null;
  const n = typeof raw === "number" ? raw : typeof raw === "string" && /^\s*\d{1,9}\s*$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isInteger(n) || n < range.min || n > range.max)
    throw new ValidationError(`${name} must be an integer from ${range.min} to ${range.max}`);
  return n;
}

function parseRetrySchedule(raw: unknown, maxSpanHours: number): string | null {
  if (cleared(raw)) return null;
  const problem = `retry_schedule must be a comma list of at most ${MAX_RETRY_DELAYS} durations such as 5s,5m,30m (units ms, s, m, h), adding up to at most ${maxSpanHours}h`;
  if (typeof raw !== "string") throw new ValidationError(problem);
  const list = parseDurationList(raw);
  if (!list || list.length > MAX_RETRY_DELAYS) throw new ValidationError(problem);
  const tooLong = retrySpanProblem(list, maxSpanHours);
  if (tooLong) throw new ValidationError(`retry_schedule is too long: ${tooLong}`);
  return raw.replace(/\s+/g, "");
}

/** The delays of a stored retry_schedule (validated when stored), or undefined for the default. */
export function retryScheduleMs(schedule: string | null | undefined): number[] | undefined {
  return schedule ? parseDurationList(schedule) : undefined;
}
