import type { Redis } from "ioredis";
import type { PageRequest } from "../domain/pagination.js";
import { epochSeconds, parseStored } from "../store/context.js";
import type { Keys } from "../store/keys.js";
import { loadJson, pageFromSortedSet, type Page } from "../store/listing.js";

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
 * Creates a delivery record (SET NX) and indexes it (ZADD NX) in one call; returns 0 without
 * writing when the record already exists. Then keeps about the newest `limit` deliveries of the
 * listener: once the index holds `slack` more than `limit`, the oldest excess (at most TRIM_SCAN)
 * are read with one MGET and the finished (delivered or failed) ones go with one ZREM and one
 * DEL, so trimming costs a few commands per `slack` deliveries rather than per delivery. A
 * pending record (waiting for a retry) is still needed by its job (dedupe check, attempts,
 * replay) and stays, so many retrying deliveries can hold the log above the limit. Runs inside
 * Redis so old records never travel to the worker just to read their status.
 *
 * Returns -1 without writing when the listener's own record (KEYS[3]) is gone: deleting a webhook
 * deletes its attempt log, and an attempt that was in flight must not start a new one.
 *
 * KEYS[1] the record, KEYS[2] the listener's index zset, KEYS[3] the listener's record (webhook or
 * workflow), all under the user's hash tag; ARGV[1] record JSON,
 * ARGV[2] score, ARGV[3] delivery id, ARGV[4] limit, ARGV[5] slack, ARGV[6] scan size, ARGV[7]
 * the record key prefix. A record is pending when its JSON holds `"status":"pending"` with bare
 * quotes: string values escape every quote, so only the top-level key can match.
 */
const CREATE_LUA = `
if redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[3])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if excess < tonumber(ARGV[5]) then return 1 end
local oldest = redis.call('ZRANGE', KEYS[2], 0, math.min(excess, tonumber(ARGV[6])) - 1)
local recordKeys = {}
for i, id in ipairs(oldest) do recordKeys[i] = ARGV[7] .. id end
local raws = redis.call('MGET', unpack(recordKeys))
local ids, dels = {}, {}
for i, id in ipairs(oldest) do
  local raw = raws[i]
  if not raw or not string.find(raw, '"status":"pending"', 1, true) then
    ids[#ids + 1] = id
    if raw then dels[#dels + 1] = recordKeys[i] end
  end
end
if #ids > 0 then redis.call('ZREM', KEYS[2], unpack(ids)) end
if #dels > 0 then redis.call('DEL', unpack(dels)) end
return 1
`;

/**
 * The attempt log of webhook deliveries: one record per delivery, indexed newest first per
 * webhook and trimmed to the configured size. Workflow deliveries are logged under the workflow id.
 */
export class AttemptLog {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly limit: number,
    private readonly now: () => number,
  ) {
    if (!("tribCreateDelivery" in redis)) redis.defineCommand("tribCreateDelivery", { numberOfKeys: 3, lua: CREATE_LUA });
  }

  /**
   * Writes the outcome of an attempt. The record is created by its first write (there is no
   * pending record before the first attempt ends: one round trip less per delivery), with one
   * script call (CREATE_LUA: SET NX, index, trim) that never overwrites an existing record (a
   * stalled job taken over); that rare case falls back to read-modify-write. `known` is the
   * record the caller read in this attempt, if any. Undefined when the record or its listener
   * vanished meanwhile (the webhook or workflow was deleted).
   */
  async upsert(base: DeliveryBase, change: AttemptChange, known?: DeliveryRecord): Promise<DeliveryRecord | undefined> {
    const nowMs = this.now();
    const key = this.keys.delivery(base.user_id, base.id);
    if (!known) {
      const fresh = applyChange(base, undefined, change, epochSeconds(nowMs));
      const created = await (
        this.redis as Redis & { tribCreateDelivery(...args: (string | number)[]): Promise<number> }
      ).tribCreateDelivery(
        key,
        this.keys.deliveries(base.user_id, base.listener_id),
        base.listener_kind === "webhook"
          ? this.keys.webhook(base.user_id, base.listener_id)
          : this.keys.workflow(base.user_id, base.listener_id),
        JSON.stringify(fresh),
        eventScore(base.event_id, nowMs),
        base.id,
        this.limit,
        Math.ceil(this.limit / 20),
        TRIM_SCAN,
        this.keys.delivery(base.user_id, ""),
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
