import type { Redis } from "ioredis";
import type { PageRequest } from "../domain/pagination.js";
import { epochSeconds, parseStored } from "./context.js";
import type { Keys } from "./keys.js";
import { loadJson, pageFromSortedSet, type Page } from "./listing.js";
import { defineScript, type ScriptCall } from "./script.js";
import { CREATE_DELIVERY } from "./scripts/create-delivery.js";

export type DeliveryStatus = "pending" | "delivered" | "failed";

export interface AttemptRecord {
  attempt: number;
  /** ISO 8601 time the attempt started. */
  at: string;
  status_code: number | null;
  duration_ms: number;
  error: string | null;
}

export interface DeliveryRecord {
  id: string;
  user_id: string;
  listener_id: string;
  listener_kind: "webhook" | "workflow";
  event_id: string;
  emitter_id: string;
  event_name: string;
  status: DeliveryStatus;
  attempts: AttemptRecord[];
  created_at: number;
  updated_at: number;
  /**
   * The payload, kept so a failed (or retrying) delivery can be replayed after the summary stream
   * rolled over; empty once delivered.
   */
  payload: string;
  accepted_at_ms: number;
  replays: number;
}

/**
 * Attempt-log order: by event id (ms * 1000 + sequence), so the deliveries of one batch, recorded
 * in the same millisecond, still list newest first. Stays an exact integer (< 2^53).
 */
export function eventScore(eventId: string, fallbackMs: number): number {
  const dash = eventId.indexOf("-");
  const ms = dash > 0 ? Number(eventId.slice(0, dash)) : Number.NaN;
  const seq = dash > 0 ? Number(eventId.slice(dash + 1)) : Number.NaN;
  if (!Number.isFinite(ms) || !Number.isFinite(seq)) return fallbackMs * 1000;
  return ms * 1000 + Math.min(seq, 999);
}

/** The API shape of one delivery (SPEC §6). */
export function deliveryView(d: DeliveryRecord) {
  return {
    id: d.id,
    event_id: d.event_id,
    emitter_id: d.emitter_id,
    event_name: d.event_name,
    status: d.status,
    attempts: d.attempts,
    created_at: d.created_at,
    updated_at: d.updated_at,
  };
}

/** Oldest records examined per trim. */
const TRIM_SCAN = 200;

/** What a delivery record is made of before its first attempt (all of it is in the job). */
export type DeliveryBase = Omit<DeliveryRecord, "status" | "attempts" | "created_at" | "updated_at" | "replays">;

/** What one attempt (or giving up) changes in a delivery record. */
export interface AttemptChange {
  readonly status: DeliveryStatus;
  /** The attempt to append (numbered after the recorded ones); none when only the status changes. */
  readonly attempt?: Omit<AttemptRecord, "attempt">;
  /** Leave a delivered record delivered (BullMQ giving up after a late duplicate run). */
  readonly keepDelivered?: boolean;
}

/**
 * The record after `change`, built as one object literal: spreading a record and adding fields
 * costs several microseconds per delivery in V8, this a fraction. A delivered record drops its
 * payload (only failed deliveries can be replayed; pending and failed keep it).
 */
function applyChange(base: DeliveryBase, prev: DeliveryRecord | undefined, change: AttemptChange, nowS: number): DeliveryRecord {
  const status = change.keepDelivered && prev?.status === "delivered" ? "delivered" : change.status;
  const earlier = prev?.attempts ?? [];
  const a = change.attempt;
  const attempts = a
    ? [...earlier, { attempt: earlier.length + 1, at: a.at, status_code: a.status_code, duration_ms: a.duration_ms, error: a.error }]
    : earlier;
  return {
    id: base.id,
    user_id: base.user_id,
    listener_id: base.listener_id,
    listener_kind: base.listener_kind,
    event_id: base.event_id,
    emitter_id: base.emitter_id,
    event_name: base.event_name,
    status,
    attempts,
    created_at: prev?.created_at ?? nowS,
    updated_at: nowS,
    payload: status === "delivered" ? "" : base.payload,
    accepted_at_ms: base.accepted_at_ms,
    replays: prev?.replays ?? 0,
  };
}

/**
 * The attempt log of webhook deliveries: one record per delivery, indexed newest first per
 * webhook and trimmed to the configured size. Workflow deliveries are logged under the workflow id.
 */
export class AttemptLog {
  private readonly createScript: ScriptCall;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly limit: number,
    private readonly now: () => number,
  ) {
    this.createScript = defineScript(redis, CREATE_DELIVERY);
  }

  /**
   * Writes the outcome of an attempt. The record is created by its first write (there is no
   * pending record before the first attempt ends: one round trip less per delivery), with one
   * script call (CREATE_DELIVERY: SET NX, index, trim) that never overwrites an existing record (a
   * stalled job taken over); that rare case falls back to read-modify-write. `known` is the
   * record the caller read in this attempt, if any. Undefined when the record or its listener
   * vanished meanwhile (the webhook or workflow was deleted).
   */
  async upsert(base: DeliveryBase, change: AttemptChange, known?: DeliveryRecord): Promise<DeliveryRecord | undefined> {
    const nowMs = this.now();
    const key = this.keys.delivery(base.user_id, base.id);
    if (!known) {
      const fresh = applyChange(base, undefined, change, epochSeconds(nowMs));
      const listenerKey =
        base.listener_kind === "webhook"
          ? this.keys.webhook(base.user_id, base.listener_id)
          : this.keys.workflow(base.user_id, base.listener_id);
      const created = Number(
        await this.createScript(
          [key, this.keys.deliveries(base.user_id, base.listener_id), listenerKey],
          [
            JSON.stringify(fresh),
            eventScore(base.event_id, nowMs),
            base.id,
            this.limit,
            Math.ceil(this.limit / 20),
            TRIM_SCAN,
            this.keys.delivery(base.user_id, ""),
          ],
        ),
      );
      if (created === 1) return fresh;
      if (created === -1) return undefined;
      known = await this.get(base.user_id, base.id);
      if (!known) return undefined;
    }
    const next = applyChange(known, known, change, epochSeconds(nowMs));
    const ok = await this.redis.set(key, JSON.stringify(next), "XX");
    return ok ? next : undefined;
  }

  async get(userId: string, id: string): Promise<DeliveryRecord | undefined> {
    return parseStored<DeliveryRecord>(await this.redis.get(this.keys.delivery(userId, id)));
  }

  /**
   * Read-modify-write of one record; a delivery is worked by one job at a time, so no lost update.
   * `known` is the record the caller already read in this attempt (saves a round trip).
   */
  async update(
    userId: string,
    id: string,
    change: (d: DeliveryRecord) => DeliveryRecord,
    known?: DeliveryRecord,
  ): Promise<DeliveryRecord | undefined> {
    const current = known ?? (await this.get(userId, id));
    if (!current) return undefined;
    const next = { ...change(current), updated_at: epochSeconds(this.now()) };
    await this.redis.set(this.keys.delivery(userId, id), JSON.stringify(next), "XX");
    return next;
  }

  list(userId: string, listenerId: string, page: PageRequest): Promise<Page<DeliveryRecord>> {
    return pageFromSortedSet(this.redis, this.keys.deliveries(userId, listenerId), page, (ids) =>
      loadJson<DeliveryRecord>(
        this.redis,
        ids.map((id) => this.keys.delivery(userId, id)),
      ),
    );
  }
}
