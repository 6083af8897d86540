import { createHash } from "node:crypto";
import type { RedisClient } from "./context.js";
import { encodeCursor, decodeCursor } from "../domain/cursors.js";
import { type DeliverySelectors, scoreRange, selectsAnything } from "../domain/delivery-query.js";
import { ValidationError } from "../domain/errors.js";
import { pageInfo, type PageRequest } from "../domain/pagination.js";
import { epochSeconds, parseStored } from "./context.js";
import { type Keys, normalizeChannel } from "./keys.js";
import { loadJson, pageFromSortedSet, type Page } from "./listing.js";
import { defineScript, type ScriptCall } from "./script.js";
import { CLAIM_DELIVERY } from "./scripts/claim-delivery.js";
import { CREATE_DELIVERY } from "./scripts/create-delivery.js";
import { QUERY_DELIVERIES } from "./scripts/query-deliveries.js";
import { SETTLE_REPLAYED } from "./scripts/settle-replayed.js";

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
   * rolled over; empty once delivered, and empty when the record refers to its event's stored
   * payload (`payload_key`) instead.
   */
  payload: string;
  /**
   * The key of the event's stored payload (store/payloads.ts) this delivery holds while it is not
   * delivered: a large payload is kept there once for all of the event's deliveries. Dropped once
   * delivered; when the record leaves the log (trimmed, or its listener deleted) its hold goes too.
   */
  payload_key?: string | undefined;
  accepted_at_ms: number;
  replays: number;
  /**
   * The bulk replay (`rpl_…`) that re-queued this delivery, while its attempts go on: the write
   * that settles it (delivered or failed) counts the outcome in that replay and drops the field.
   */
  replay_id?: string | undefined;
}

/** A record as read, with the exact stored text a compare-and-set (`claim`) compares against. */
export interface ReadRecord {
  readonly raw: string;
  readonly record: DeliveryRecord;
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

/**
 * What a delivery record is made of before its first attempt (all of it is in the job);
 * `shared_payload`: the record refers to its event's stored payload (its key is the event's).
 */
export type DeliveryBase = Omit<DeliveryRecord, "status" | "attempts" | "created_at" | "updated_at" | "replays"> & {
  readonly shared_payload?: boolean;
};

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
function applyChange(
  base: DeliveryBase,
  prev: DeliveryRecord | undefined,
  change: AttemptChange,
  nowS: number,
  payloadKey: string | undefined,
): DeliveryRecord {
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
    payload_key: status === "delivered" ? undefined : payloadKey,
    accepted_at_ms: base.accepted_at_ms,
    replays: prev?.replays ?? 0,
    replay_id: status === "pending" ? prev?.replay_id : undefined,
  };
}

/** Entries of the index a query walks at most: far above any trimmed log (see QUERY_DELIVERIES). */
function walkBound(limit: number): number {
  return Math.max(10_000, limit * 4);
}

/**
 * The attempt log of webhook deliveries: one record per delivery, indexed newest first per
 * webhook and trimmed to the configured size. Workflow deliveries are logged under the workflow id.
 */
export class AttemptLog {
  private readonly createScript: ScriptCall;
  private readonly queryScript: ScriptCall;
  private readonly claimScript: ScriptCall;
  private readonly settleScript: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly limit: number,
    private readonly now: () => number,
  ) {
    this.createScript = defineScript(redis, CREATE_DELIVERY);
    this.queryScript = defineScript(redis, QUERY_DELIVERIES);
    this.claimScript = defineScript(redis, CLAIM_DELIVERY);
    this.settleScript = defineScript(redis, SETTLE_REPLAYED);
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
    const payloadKey = base.shared_payload ? this.keys.payload(base.user_id, base.emitter_id, base.event_name, base.event_id) : undefined;
    if (!known) {
      const fresh = applyChange(base, undefined, change, epochSeconds(nowMs), payloadKey);
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
    const next = applyChange(known, known, change, epochSeconds(nowMs), known.payload_key ?? payloadKey);
    if (known.replay_id !== undefined && next.status !== "pending") return this.settleReplayed(known.replay_id, next);
    const ok = await this.redis.set(key, JSON.stringify(next), "XX");
    return ok ? next : undefined;
  }

  /** Writes the record of a replayed delivery that settled and counts it in its replay (SETTLE_REPLAYED). */
  private async settleReplayed(replayId: string, next: DeliveryRecord): Promise<DeliveryRecord | undefined> {
    const outcome = next.status === "delivered" ? "delivered" : "failed";
    const other = outcome === "delivered" ? "failed" : "delivered";
    const k = this.keys;
    const written = await this.settleScript(
      [
        k.delivery(next.user_id, next.id),
        k.replay(next.user_id, replayId),
        k.replayOutcome(next.user_id, replayId, outcome),
        k.replayOutcome(next.user_id, replayId, other),
      ],
      [JSON.stringify(next), next.id],
    );
    return Number(written) === 1 ? next : undefined;
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

  /** Records with the stored text they were read from (for `claim`), in the order of `ids`; missing ones left out. */
  async readForClaim(userId: string, ids: readonly string[]): Promise<ReadRecord[]> {
    if (ids.length === 0) return [];
    const raws = await this.redis.mget(...ids.map((id) => this.keys.delivery(userId, id)));
    const out: ReadRecord[] = [];
    for (const raw of raws) {
      const record = parseStored<DeliveryRecord>(raw);
      if (raw !== null && record) out.push({ raw, record });
    }
    return out;
  }

  /**
   * Replaces `read` by `next` only if the record still is what was read (CLAIM_DELIVERY): a
   * replay claims a failed delivery this way, so two replays racing for it queue it once.
   */
  async claim(read: ReadRecord, next: DeliveryRecord): Promise<boolean> {
    const sha = createHash("sha1").update(read.raw, "utf8").digest("hex");
    const done = await this.claimScript([this.keys.delivery(next.user_id, next.id)], [sha, JSON.stringify(next)]);
    return Number(done) === 1;
  }

  /**
   * The ids of the listener's deliveries that match `selectors`, newest first, optionally paged
   * from an anchor (QUERY_DELIVERIES), with the number of matches in the whole log.
   */
  private async select(
    userId: string,
    listenerId: string,
    s: DeliverySelectors,
    page: { limit: number; anchor?: string; direction?: "after" | "before" },
  ): Promise<{ total: number; ids: string[] } | undefined> {
    const { max, min } = scoreRange(s);
    const res = (await this.queryScript(
      [this.keys.deliveries(userId, listenerId)],
      [
        max,
        min,
        s.status === undefined ? "" : `"status":${JSON.stringify(s.status)}`,
        s.event_name === undefined ? "" : `"event_name":${JSON.stringify(normalizeChannel(s.event_name))}`,
        this.keys.delivery(userId, ""),
        page.anchor ?? "",
        page.direction ?? "",
        page.limit,
        walkBound(this.limit),
      ],
    )) as (number | string)[];
    const total = Number(res[0]);
    if (total < 0) return undefined;
    return { total, ids: res.slice(1).map(String) };
  }

  /** Every delivery id of the listener that `selectors` match, newest first (what a bulk replay plans). */
  async matching(userId: string, listenerId: string, selectors: DeliverySelectors): Promise<string[]> {
    return (await this.select(userId, listenerId, selectors, { limit: 0 }))?.ids ?? [];
  }

  /** How many of the listener's deliveries `selectors` match. */
  async count(userId: string, listenerId: string, selectors: DeliverySelectors): Promise<number> {
    return (await this.select(userId, listenerId, selectors, { limit: 1 }))?.total ?? 0;
  }

  /**
   * One page of the listener's deliveries that match `selectors`, newest first. Cursors are
   * delivery ids as in `list`; a cursor anchors by its place in the log, so pages stay exact
   * under filters (and when the cursor's own delivery no longer matches).
   */
  async query(userId: string, listenerId: string, selectors: DeliverySelectors, page: PageRequest): Promise<Page<DeliveryRecord>> {
    if (!selectsAnything(selectors)) return this.list(userId, listenerId, page);
    const raw = page.after ?? page.before;
    const name = page.after !== undefined ? "after" : "before";
    const anchor = raw === undefined ? undefined : decodeCursor(raw);
    if (raw !== undefined && anchor === undefined) throw new ValidationError(`${name} is not a cursor of this list`, "invalid_cursor");
    const found = await this.select(userId, listenerId, selectors, {
      limit: page.limit,
      ...(anchor === undefined ? {} : { anchor, direction: name }),
    });
    if (!found) throw new ValidationError(`${name} is not a cursor of this list`, "invalid_cursor");
    const records = await loadJson<DeliveryRecord>(
      this.redis,
      found.ids.map((id) => this.keys.delivery(userId, id)),
    );
    const data = records.filter((x): x is DeliveryRecord => x !== undefined);
    return { data, page_info: pageInfo(found.ids, found.total, encodeCursor) };
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
