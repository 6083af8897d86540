import { channelNameProblem } from "./channel-name.js";
import { ValidationError } from "./errors.js";

/**
 * The selectors of attempt-log queries and bulk replays (SPEC §12): which deliveries of one
 * webhook a `GET .../deliveries` lists or a `POST .../deliveries/replay` re-queues. Pure.
 *
 * `since` and `until` are epoch seconds compared with the time of the delivery's event (its id's
 * milliseconds, the order of the log): `since` is inclusive, `until` exclusive, so consecutive
 * windows `[a, b)`, `[b, c)` never count a delivery twice.
 */
export const DELIVERY_STATUSES = ["pending", "delivered", "failed"] as const;
export type DeliveryStatusSelector = (typeof DELIVERY_STATUSES)[number];

export interface DeliverySelectors {
  readonly status?: DeliveryStatusSelector;
  /** Epoch seconds, inclusive. */
  readonly since?: number;
  /** Epoch seconds, exclusive. */
  readonly until?: number;
  /** A channel name as given ("" and "default" name the default channel). */
  readonly event_name?: string;
}

/** Largest accepted epoch second (year 5138): keeps scores exact integers. */
const MAX_EPOCH_SECONDS = 99_999_999_999;

function absent(raw: unknown): boolean {
  return raw === undefined || raw === null || raw === "";
}

function epochSeconds(raw: unknown, name: string): number | undefined {
  if (absent(raw)) return undefined;
  const text = typeof raw === "number" ? String(raw) : raw;
  if (typeof text !== "string" || !/^\d{1,11}$/.test(text.trim()) || Number(text) > MAX_EPOCH_SECONDS) {
    throw new ValidationError(`${name} must be a time in epoch seconds (a non-negative integer)`);
  }
  return Number(text);
}

function statusParam(raw: unknown): DeliveryStatusSelector | undefined {
  if (absent(raw)) return undefined;
  if (typeof raw !== "string" || !(DELIVERY_STATUSES as readonly string[]).includes(raw)) {
    throw new ValidationError(`status must be one of ${DELIVERY_STATUSES.join(", ")}`);
  }
  return raw as DeliveryStatusSelector;
}

function eventNameParam(raw: unknown): string | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== "string") throw new ValidationError("event_name must be a string");
  const problem = channelNameProblem(raw);
  if (problem) throw new ValidationError(`event_name ${problem}`);
  return raw;
}

/** The selectors of a request's parameters; a bad value is a 400 naming its parameter. */
export function parseDeliverySelectors(params: Readonly<Record<string, unknown>>): DeliverySelectors {
  const status = statusParam(params.status);
  const since = epochSeconds(params.since, "since");
  const until = epochSeconds(params.until, "until");
  const event_name = eventNameParam(params.event_name);
  if (since !== undefined && until !== undefined && since >= until) {
    throw new ValidationError("since must be earlier than until (since is inclusive, until exclusive)");
  }
  return {
    ...(status === undefined ? {} : { status }),
    ...(since === undefined ? {} : { since }),
    ...(until === undefined ? {} : { until }),
    ...(event_name === undefined ? {} : { event_name }),
  };
}

/** True when the selectors narrow the log at all (otherwise a plain page of the index serves). */
export function selectsAnything(s: DeliverySelectors): boolean {
  return s.status !== undefined || s.since !== undefined || s.until !== undefined || s.event_name !== undefined;
}

/**
 * The selectors of a bulk replay: those of the query, `status` defaulting to `failed`. Only
 * failed deliveries can be replayed (a delivered one no longer holds its payload, a pending one
 * is queued already), so any other status is refused rather than matching nothing.
 */
export function parseReplaySelectors(params: Readonly<Record<string, unknown>>): DeliverySelectors & { status: "failed" } {
  const s = parseDeliverySelectors(params);
  if (s.status !== undefined && s.status !== "failed") {
    throw new ValidationError("status must be failed for a replay: only failed deliveries can be replayed");
  }
  return { ...s, status: "failed" };
}

/** `dry_run`: true or false (as JSON booleans or the strings), false when absent. */
export function parseDryRun(raw: unknown): boolean {
  if (absent(raw)) return false;
  if (raw === true || raw === "true") return true;
  if (raw === false || raw === "false") return false;
  throw new ValidationError("dry_run must be true or false");
}

/**
 * One string per distinct selection (the same selectors in any spelling give the same string):
 * what makes a second identical replay request find the first one.
 */
export function selectorsIdentity(s: DeliverySelectors, normalizeChannel: (name: string) => string): string {
  return JSON.stringify([s.status ?? "", s.since ?? "", s.until ?? "", s.event_name === undefined ? null : normalizeChannel(s.event_name)]);
}

/** The score range of the attempt-log index (event ms * 1000 + sequence) the time selectors cover. */
export function scoreRange(s: DeliverySelectors): { readonly max: string; readonly min: string } {
  return {
    max: s.until === undefined ? "+inf" : `(${s.until * 1_000_000}`,
    min: s.since === undefined ? "-inf" : String(s.since * 1_000_000),
  };
}
