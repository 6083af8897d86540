import type { Redis } from "ioredis";
import type { PageRequest } from "../domain/pagination.js";
import { epochSeconds, parseStored } from "../store/context.js";
import type { Keys } from "../store/keys.js";
import { loadJson, pageFromSortedSet, type Page } from "../store/listing.js";
import type { WebhookRecord } from "../store/webhooks.js";

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
  const [ms, seq] = eventId.split("-").map(Number);
  if (!Number.isFinite(ms) || !Number.isFinite(seq)) return fallbackMs * 1000;
  return (ms as number) * 1000 + Math.min(seq as number, 999);
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

/**
 * The attempt log of webhook deliveries: one record per delivery, indexed newest first per
 * webhook and trimmed to the configured size. Workflow deliveries are logged under the workflow id.
 */
/** Oldest records examined per trim. */
const TRIM_SCAN = 200;
/** New records per listener (and process) between two trims. */
const TRIM_EVERY = 16;

/** What a delivery record is made of before its first attempt (all of it is in the job). */
export type DeliveryBase = Omit<DeliveryRecord, "status" | "attempts" | "created_at" | "updated_at" | "replays">;

/**
 * Keeps about the newest `limit` deliveries per listener. Only finished (delivered or failed)
 * records go: a pending one (waiting for a retry) is still needed by its job (dedupe check,
 * attempts, replay), so many retrying deliveries can hold the log above the limit. At most TRIM_SCAN of the
 * oldest are looked at per call, which bounds the cost while a backlog is pending. Runs inside
 * Redis so the records (payload included) never travel to the worker just to read their status.
 *
 * KEYS[1] the listener's index zset; ARGV[1] limit, ARGV[2] scan size, ARGV[3] the record key
 * prefix (same hash tag as KEYS[1]). A record is pending when its JSON holds `"status":"pending"`
 * with bare quotes: string values escape every quote, so only the top-level key can match.
 */
const TRIM_LUA = `
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
if excess <= 0 then return 0 end
local oldest = redis.call('ZRANGE', KEYS[1], 0, math.min(excess, tonumber(ARGV[2])) - 1)
local removed = 0
for _, id in ipairs(oldest) do
  local k = ARGV[3] .. id
  local raw = redis.call('GET', k)
  if not raw or not string.find(raw, '"status":"pending"', 1, true) then
    redis.call('ZREM', KEYS[1], id)
    if raw then redis.call('DEL', k) end
    removed = removed + 1
  end
end
return removed
`;

export class AttemptLog {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly limit: number,
    private readonly now: () => number,
  ) {
    if (!("tribTrimAttemptLog" in redis)) redis.defineCommand("tribTrimAttemptLog", { numberOfKeys: 1, lua: TRIM_LUA });
  }

  /**
   * Trims the listener's index once every TRIM_EVERY new records (per process), so the common
   * write is one SET NX and one ZADD; TRIM_SCAN per call keeps up with that pace.
   */
  private readonly sinceTrim = new Map<string, number>();

  private dueForTrim(indexKey: string): boolean {
    const n = this.sinceTrim.get(indexKey) ?? 0;
    if (this.sinceTrim.size > 10_000) this.sinceTrim.clear();
    this.sinceTrim.set(indexKey, (n + 1) % TRIM_EVERY);
    return n === 0;
  }

  /**
   * Writes the outcome of an attempt. The record is created by its first write (there is no
   * pending record before the first attempt ends: one round trip less per delivery), with SET NX
   * so a second runner of the same delivery (a stalled job taken over) never overwrites it; that
   * rare case falls back to read-modify-write. `known` is the record the caller read in this
   * attempt, if any. A delivered record drops its payload (only failed ones can be replayed).
   * Undefined when the record vanished meanwhile (its webhook was deleted).
   */
  async upsert(
    base: DeliveryBase,
    change: (d: DeliveryRecord) => DeliveryRecord,
    known?: DeliveryRecord,
  ): Promise<DeliveryRecord | undefined> {
    const nowMs = this.now();
    const finish = (d: DeliveryRecord): DeliveryRecord => {
      const next = { ...change(d), updated_at: epochSeconds(nowMs) };
      return next.status === "delivered" ? { ...next, payload: "" } : next;
    };
    const key = this.keys.delivery(base.user_id, base.id);
    if (!known) {
      const fresh = finish({
        ...base,
        status: "pending",
        attempts: [],
        created_at: epochSeconds(nowMs),
        updated_at: epochSeconds(nowMs),
        replays: 0,
      });
      const indexKey = this.keys.deliveries(base.user_id, base.listener_id);
      // Plain commands, not a pipeline: the connection auto-pipelines, so the writes of every
      // delivery finishing in the same tick share one socket write.
      const writes: Promise<unknown>[] = [
        this.redis.set(key, JSON.stringify(fresh), "NX"),
        this.redis.zadd(indexKey, "NX", eventScore(base.event_id, nowMs), base.id),
      ];
      if (this.dueForTrim(indexKey)) {
        // biome-ignore lint/suspicious/noExplicitAny: defineCommand adds the method at run time.
        writes.push((this.redis as any).tribTrimAttemptLog(indexKey, this.limit, TRIM_SCAN, this.keys.delivery(base.user_id, "")));
      }
      const [created] = await Promise.all(writes);
      if (created === "OK") return fresh;
      known = await this.get(base.user_id, base.id);
      if (!known) return undefined;
    }
    const next = finish(known);
    const ok = await this.redis.set(key, JSON.stringify(next), "XX");
    return ok ? next : undefined;
  }

  async get(userId: string, id: string): Promise<DeliveryRecord | undefined> {
    return parseStored<DeliveryRecord>(await this.redis.get(this.keys.delivery(userId, id)));
  }

  /**
   * The delivery record and the webhook it goes to, read with one MGET (same user hash tag) instead
   * of two GETs. The webhook is read fresh on every attempt: a deleted or deactivated one is seen.
   */
  async getWithWebhook(userId: string, id: string, webhookId: string): Promise<[DeliveryRecord | undefined, WebhookRecord | undefined]> {
    const [record, webhook] = await this.redis.mget(this.keys.delivery(userId, id), this.keys.webhook(userId, webhookId));
    return [parseStored<DeliveryRecord>(record), parseStored<WebhookRecord>(webhook)];
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
