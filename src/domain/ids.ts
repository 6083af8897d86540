import { hash } from "node:crypto";

/**
 * Resource ids: a prefix and random base62 (SPEC §2). Randomness is injected so tests can pin it;
 * 16 base62 characters carry ~95 bits, far past guessable.
 */
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
export const ID_PREFIXES = ["u_", "sc_", "dc_", "sub_", "asub_", "wh_", "d_", "emit_", "rpl_"] as const;
export type IdPrefix = (typeof ID_PREFIXES)[number];

export type RandomBytes = (n: number) => Uint8Array;

/** The alphabet's character codes. */
const CODES = Array.from(ALPHABET, (c) => c.charCodeAt(0));

/**
 * `prefix`, then `length` random base62 characters (rejection sampling keeps the distribution
 * uniform), as one flat string made from character codes: concatenating the characters made a
 * rope of strings, which the first regular expression or hash to read the id had to copy flat
 * again (an emit id and its JSON check: 366 -> 215 ns in a loop).
 */
function randomChars(prefix: string, length: number, randomBytes: RandomBytes): string {
  const end = prefix.length + length;
  const codes: number[] = new Array(end);
  for (let i = 0; i < prefix.length; i++) codes[i] = prefix.charCodeAt(i);
  let n = prefix.length;
  while (n < end) {
    const bytes = randomBytes(length * 2);
    for (let i = 0; i < bytes.length && n < end; i++) {
      const b = bytes[i] as number;
      if (b < 248) codes[n++] = CODES[b % 62] as number;
    }
  }
  return String.fromCharCode.apply(null, codes);
}

/** base62 string of `length` characters. */
export function randomBase62(length: number, randomBytes: RandomBytes): string {
  return randomChars("", length, randomBytes);
}

export function newId(prefix: IdPrefix, randomBytes: RandomBytes, length = 16): string {
  return randomChars(prefix, length, randomBytes);
}

/** True when `id` has the prefix followed by base62 characters. */
export function hasIdShape(id: unknown, prefix: IdPrefix): id is string {
  return (
    typeof id === "string" &&
    id.length > prefix.length &&
    id.length <= 64 &&
    id.startsWith(prefix) &&
    /^[A-Za-z0-9]+$/.test(id.slice(prefix.length))
  );
}

/** Workflow ids are chosen by the caller: `p_` + 1..64 of [A-Za-z0-9_-] (SPEC §3). */
export function isWorkflowId(id: unknown): id is string {
  return typeof id === "string" && /^p_[A-Za-z0-9_-]{1,64}$/.test(id);
}

/** Event ids are Redis stream ids `<ms>-<seq>`. */
export function isEventId(id: unknown): id is string {
  return typeof id === "string" && /^\d{1,16}-\d{1,16}$/.test(id);
}

/**
 * The glob subscription pattern an emitter id falls under (`dc_*`, `p_*`, and `wh_*` for the
 * health events webhooks emit), if any.
 */
export function emitterGlob(emitterId: string): string | undefined {
  if (emitterId.startsWith("dc_")) return "dc_*";
  if (emitterId.startsWith("p_")) return "p_*";
  return emitterId.startsWith("wh_") ? "wh_*" : undefined;
}

/** What a listener id names, from its prefix (the one place that dispatches on listener prefixes). */
export type ListenerKind = "webhook" | "workflow" | "source";

/** Listener kind from its id prefix; undefined for an id no listener can have. */
export function listenerKindOf(id: string): ListenerKind | undefined {
  if (id.startsWith("wh_")) return "webhook";
  if (id.startsWith("p_")) return "workflow";
  if (id.startsWith("dc_")) return "source";
  return undefined;
}

/** What identifies one event for its deliveries: a redone fan-out of the same event yields the same ids. */
export interface EventRef {
  readonly userId: string;
  readonly emitterId: string;
  readonly channel: string;
  readonly eventId: string;
}

function eventListenerHash(e: EventRef, listenerId: string): string {
  return hash("sha256", `${e.userId}|${e.emitterId}|${e.channel}|${e.eventId}|${listenerId}`, "hex").slice(0, 24);
}

/**
 * Deterministic id of the delivery of one event to one webhook or workflow (`d_…`): the BullMQ
 * job id, the attempt-log record id and the Standard Webhooks `webhook-id`.
 */
export function deliveryIdFor(e: EventRef, listenerId: string): string {
  return `d_${eventListenerHash(e, listenerId)}`;
}

/** Deterministic BullMQ job id of the run of a source listener for one event (`run_…`, same hash). */
export function sourceRunIdFor(e: EventRef, listenerId: string): string {
  return `run_${eventListenerHash(e, listenerId)}`;
}

/** Orders two event ids (`<ms>-<seq>`, leading zeros allowed) as Redis orders stream ids: <0, 0 or >0. */
export function compareEventIds(a: string, b: string): number {
  const [am = "0", as = "0"] = a.split("-");
  const [bm = "0", bs = "0"] = b.split("-");
  const ms = BigInt(am) - BigInt(bm);
  const d = ms !== 0n ? ms : BigInt(as) - BigInt(bs);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}
