import { PayloadTooLargeError, TooManyRequestsError } from "./errors.js";

/**
 * Per-user resource limits (SPEC §2 "429 quota"): how many of each thing one user may keep, how
 * many bytes their components may take, how many listeners one emitter's event may reach, and how
 * fast events may come in. Every value is a whole number; 0 means unlimited.
 */
export interface UserLimits {
  readonly workflows: number;
  readonly sources: number;
  readonly components: number;
  readonly webhooks: number;
  readonly subscriptions: number;
  readonly autoSubscriptions: number;
  /** Bytes of the user's stored components: each one's record (code and metadata) plus its compiled bundle. */
  readonly componentBytes: number;
  /** Event streams one user may have: one per emitter and event name (channel), `$errors` and `$logs` included. */
  readonly streams: number;
  /** Bytes the user's event streams may hold: each kept event's summary record (payload, emit id, metadata). */
  readonly storedBytes: number;
  /** Subscriptions one event of an emitter may match on one channel (exact emitter + its glob). */
  readonly listenersPerEmitter: number;
  /** Workflow emits and HTTP source requests, per second, per user. */
  readonly ingressEventsPerSecond: number;
  /** How many events may arrive at once before the per-second rate applies (the bucket size). */
  readonly ingressBurstEvents: number;
}

/** The limits counted by how many things the user keeps, as named in `GET /users/me` and in errors. */
export type CountedLimit = "workflows" | "sources" | "components" | "webhooks" | "subscriptions" | "auto_subscriptions" | "streams";

/** What the user keeps now, for `GET /users/me`. */
export interface ResourceUsageCounts {
  readonly workflows: number;
  readonly sources: number;
  readonly components: number;
  readonly webhooks: number;
  readonly subscriptions: number;
  readonly auto_subscriptions: number;
  readonly component_bytes: number;
  readonly streams: number;
  readonly stored_bytes: number;
}

/**
 * A count or byte limit frees only when the user deletes something, so Retry-After (which SPEC §2
 * requires on every 429) is nominal: long enough that a client retrying blindly does not hammer.
 */
export const LIMIT_RETRY_AFTER_SECONDS = 60;

const NOUNS: Record<CountedLimit, string> = {
  workflows: "workflows",
  sources: "sources",
  components: "components",
  webhooks: "webhooks",
  subscriptions: "subscriptions",
  auto_subscriptions: "auto-subscriptions",
  streams: "event streams (one per emitter and event name)",
};

/** The limit as `GET /users/me` shows it: null for unlimited (configured 0). */
export const shownLimit = (limit: number): number | null => (limit > 0 ? limit : null);

/** True when one more would go over the limit (0 = unlimited). */
export const atLimit = (used: number, limit: number): boolean => limit > 0 && used >= limit;

/** 429 `limit_exceeded` naming the limit, what is in use, and how to make room. */
export function limitReached(name: CountedLimit, used: number, limit: number): TooManyRequestsError {
  return new TooManyRequestsError(
    `${name} limit reached: this user has ${used} ${NOUNS[name]}, at most ${limit} are allowed; delete some to make room (limits and usage: GET /v1/users/me)`,
    LIMIT_RETRY_AFTER_SECONDS,
    "limit_exceeded",
  );
}

/** 429 `limit_exceeded`: the emitter's event on this channel already reaches the most listeners allowed. */
export function listenerLimitReached(emitterId: string, channel: string, used: number, limit: number): TooManyRequestsError {
  return new TooManyRequestsError(
    `listeners_per_emitter limit reached: an event of ${emitterId} on channel "${channel || "default"}" already reaches ${used} subscriptions (counting glob subscriptions that match it), at most ${limit} are allowed`,
    LIMIT_RETRY_AFTER_SECONDS,
    "limit_exceeded",
  );
}

/** 413 when one component alone is over the byte limit (no deletion can make room), else 429. */
export function componentBytesExceeded(used: number, size: number, limit: number): PayloadTooLargeError | TooManyRequestsError {
  if (size > limit) {
    return new PayloadTooLargeError(
      `component_bytes limit: this component needs ${size} bytes of storage (code, metadata and compiled bundle), more than the ${limit} bytes a user's components may take in all`,
    );
  }
  return new TooManyRequestsError(
    `component_bytes limit reached: this user's components take ${used} bytes and this one needs ${size} more, at most ${limit} are allowed; GET /v1/users/me shows usage`,
    LIMIT_RETRY_AFTER_SECONDS,
    "limit_exceeded",
  );
}

/**
 * 429 `limit_exceeded`: the event names a stream the user does not have yet, and they have as many
 * as they may. Their existing streams keep taking events.
 */
export function streamLimitReached(used: number, limit: number): TooManyRequestsError {
  return new TooManyRequestsError(
    `streams limit reached: this user has ${used} event streams (one per emitter and event name), at most ${limit} are allowed; emit onto the names in use, or delete events, workflows or sources to make room (limits and usage: GET /v1/users/me)`,
    LIMIT_RETRY_AFTER_SECONDS,
    "limit_exceeded",
  );
}

/** 429 `limit_exceeded`: recording these events would take the user's streams past the bytes they may hold. */
export function storedBytesLimitReached(used: number, adding: number, limit: number): TooManyRequestsError {
  return new TooManyRequestsError(
    `stored_bytes limit reached: this user's event streams hold ${used} bytes and these events need ${adding} more, at most ${limit} are allowed; delete events, or emit onto streams whose oldest events they replace (limits and usage: GET /v1/users/me)`,
    LIMIT_RETRY_AFTER_SECONDS,
    "limit_exceeded",
  );
}

/** 413 when a batch is larger than the bucket can ever hold; retrying it would never succeed. */
export function ingressBatchTooLarge(events: number, burst: number): PayloadTooLargeError {
  return new PayloadTooLargeError(
    `ingress limit: a request of ${events} events is more than this user's ingress burst of ${burst} events; send smaller batches`,
  );
}

/** 429 `rate_limited` with Retry-After: the user's events are coming in faster than the configured rate. */
export function ingressRateLimited(waitMs: number, perSecond: number, burst: number): TooManyRequestsError {
  return new TooManyRequestsError(
    `ingress rate limit: at most ${perSecond} events per second per user (bursts of ${burst}); retry after ${Math.max(1, Math.ceil(waitMs / 1000))} s`,
    waitMs / 1000,
    "rate_limited",
  );
}

/** The `limits` object of `GET /users/me`: each limit (null = unlimited) with what is in use. */
export function limitsView(limits: UserLimits, used: ResourceUsageCounts) {
  const counted = (limit: number, n: number) => ({ limit: shownLimit(limit), used: n });
  return {
    workflows: counted(limits.workflows, used.workflows),
    sources: counted(limits.sources, used.sources),
    components: counted(limits.components, used.components),
    webhooks: counted(limits.webhooks, used.webhooks),
    subscriptions: counted(limits.subscriptions, used.subscriptions),
    auto_subscriptions: counted(limits.autoSubscriptions, used.auto_subscriptions),
    component_bytes: counted(limits.componentBytes, used.component_bytes),
    streams: counted(limits.streams, used.streams),
    stored_bytes: counted(limits.storedBytes, used.stored_bytes),
    listeners_per_emitter: { limit: shownLimit(limits.listenersPerEmitter) },
    ingress_events_per_second: {
      limit: shownLimit(limits.ingressEventsPerSecond),
      burst: limits.ingressEventsPerSecond > 0 ? limits.ingressBurstEvents : null,
    },
  };
}

/** No limit at all: what stores use when a caller passes none (tests, tools). */
export const UNLIMITED: UserLimits = Object.freeze({
  workflows: 0,
  sources: 0,
  components: 0,
  webhooks: 0,
  subscriptions: 0,
  autoSubscriptions: 0,
  componentBytes: 0,
  streams: 0,
  storedBytes: 0,
  listenersPerEmitter: 0,
  ingressEventsPerSecond: 0,
  ingressBurstEvents: 0,
});
