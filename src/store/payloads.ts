import type { RedisClient } from "./context.js";
import { scanMatching } from "./key-scan.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { PAYLOAD_HOLD } from "./scripts/payload-hold.js";
import { PAYLOAD_RELEASE } from "./scripts/payload-release.js";

/**
 * Payloads longer than this (UTF-16 code units) are stored once per event while its deliveries
 * wait (PayloadStore), and delivery jobs and attempt records refer to them; shorter ones travel in
 * each job and record, where a reference and its holder would cost about as much as the copy.
 */
export const INLINE_PAYLOAD_MAX = 1024;

/** Whether a delivery of `payload` keeps it in the event's payload key rather than in its job and record. */
export function sharesPayload(payload: string): boolean {
  return payload.length > INLINE_PAYLOAD_MAX;
}

/** The event whose payload a delivery sends: user, emitter, channel, event id. */
export interface PayloadRef {
  readonly userId: string;
  readonly emitterId: string;
  readonly channel: string;
  readonly eventId: string;
}

/** An event id `<ms>-<seq>` as numbers, for range comparisons; undefined when it is not one. */
function eventIdParts(id: string): [number, number] | undefined {
  const m = /^(\d+)-(\d+)$/.exec(id);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

function compareIds(a: [number, number], b: [number, number]): number {
  return a[0] - b[0] || a[1] - b[1];
}

/**
 * The payloads of events with deliveries still waiting to send them: one hash per event (the
 * payload, and one field per delivery id that may still need it: queued, retrying, or failed and
 * replayable), in the user's slot. A delivery holds the payload before any job referring to it is
 * added (on a Redis Cluster the queue is on another node: the hold is acknowledged first), and
 * releases it once delivered, or when its record leaves the attempt log; the last release deletes
 * it. Holding and releasing are idempotent, so a step redone after a crash (a taken-over outbox
 * entry, a stalled job) neither frees a payload early nor counts a holder twice. A crash between a
 * delivery settling and its release leaves the payload held until the user, the listener or the
 * event is deleted: an extra copy, never a missing one.
 */
export class PayloadStore {
  private readonly holdScript: ScriptCall;
  private readonly releaseScript: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {
    this.holdScript = defineScript(redis, PAYLOAD_HOLD);
    this.releaseScript = defineScript(redis, PAYLOAD_RELEASE);
  }

  keyOf(ref: PayloadRef): string {
    return this.keys.payload(ref.userId, ref.emitterId, ref.channel, ref.eventId);
  }

  /** Stores `payload` for the event (if not there yet) and names `deliveryIds` among its holders. */
  async hold(ref: PayloadRef, payload: string, deliveryIds: readonly string[]): Promise<void> {
    if (deliveryIds.length === 0) return;
    await this.holdScript([this.keyOf(ref)], [payload, ...deliveryIds]);
  }

  /** Drops `deliveryIds` from the holders of the payload at `key`; the last one deletes it. */
  async releaseKey(key: string, deliveryIds: readonly string[]): Promise<void> {
    if (deliveryIds.length === 0) return;
    await this.releaseScript([key], deliveryIds);
  }

  release(ref: PayloadRef, deliveryIds: readonly string[]): Promise<void> {
    return this.releaseKey(this.keyOf(ref), deliveryIds);
  }

  /** The event's payload, or undefined when no delivery holds it any more (or the event was deleted). */
  async get(ref: PayloadRef): Promise<string | undefined> {
    return (await this.redis.hget(this.keyOf(ref), "p")) ?? undefined;
  }

  /**
   * Deletes the stored payloads of one (emitter, channel)'s events in an inclusive id range (both
   * absent: all), with the events themselves (DELETE /sources/{id}/events): deliveries still
   * waiting to send them end as failed. Scans the user's slot (a maintenance job, never a request).
   */
  async deleteRange(userId: string, emitterId: string, channel: string, startId: string | null, endId: string | null): Promise<number> {
    const prefix = this.keys.payload(userId, emitterId, channel, "");
    const from = startId === null ? undefined : eventIdParts(startId);
    const to = endId === null ? undefined : eventIdParts(endId);
    let removed = 0;
    await scanMatching(this.redis, this.keys.payloadPattern(userId, emitterId, channel), this.keys.user(userId), async (found) => {
      const doomed = found.filter((key) => {
        const id = eventIdParts(key.slice(prefix.length));
        return id !== undefined && (from === undefined || compareIds(id, from) >= 0) && (to === undefined || compareIds(id, to) <= 0);
      });
      if (doomed.length > 0) removed += await this.redis.unlink(...doomed);
    });
    return removed;
  }
}
