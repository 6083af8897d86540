import type { RedisClient } from "./context.js";
import { ValidationError } from "../domain/errors.js";
import { isEventId } from "../domain/ids.js";
import { pageInfo, type PageInfo } from "../domain/pagination.js";
import type { Keys } from "./keys.js";
import { normalizeChannel } from "./keys.js";
import {
  type ChargedRecord,
  DEFAULT_RECORD_GROUP_LIMITS,
  type RecordGroupLimits,
  RecordGroups,
  type StorageRefusal,
} from "./record-groups.js";
import { type GuardKeyOf, RecordTargets, type StorageLimits } from "./record-targets.js";
import { defineScript, writeTogether } from "./script.js";
import { RECORD_EVENTS } from "./scripts/record-events.js";
import { StreamDrops } from "./stream-drops.js";

/** Who emits: sources, workflows, and webhooks (their health events, SPEC §12). */
export type EmitterKind = "source" | "workflow" | "webhook";

/** Metadata of an emit, as the caller gave it. */
export interface EmitMeta {
  id?: string | number;
  summary?: string;
  ts?: number;
}

/** One event to record: the payload as emitted and its metadata. */
export interface NewEvent {
  payload: unknown;
  meta: EmitMeta;
  emitId: string;
}

/** What the summary stream holds per event. */
interface StoredSummary {
  /** The payload as emitted. */
  p: unknown;
  /** emit_id */
  x: string;
  m: EmitMeta;
  /** Wrap the payload as {raw_event} in summaries (workflow emits, per the API document). */
  w?: 1;
}

export interface EventSummary {
  id: string;
  indexed_at_ms: number;
  event: unknown;
  metadata: { emitter_id: string; emit_id: string; name: string; summary?: string; id?: string | number; ts?: number };
  truncated?: true;
}

export interface RecordInput {
  userId: string;
  emitterId: string;
  emitterKind: EmitterKind;
  channel: string;
  events: readonly NewEvent[];
  hops?: number;
  acceptedAtMs: number;
}

/** Tokens a record charges to the user's ingress bucket in its own step (store/scripts/record-events.ts). */
export interface IngressCharge {
  /** The bucket (`keys.ingressRate`). */
  readonly key: string;
  /** Tokens: every event of the request. */
  readonly cost: number;
  readonly perSecond: number;
  readonly burst: number;
}

export type { ChargedRecord, GuardKeyOf, StorageLimits, StorageRefusal };

const TRUNCATE_BYTES = 1024;

/** Cuts a string to at most `max` UTF-8 bytes without splitting a character. */
export function truncateUtf8(text: string, max: number): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= max) return text;
  let end = max;
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString("utf8");
}

/** Characters a JSON string holds as they are (no escape): an id's. */
const PLAIN_JSON = /^[A-Za-z0-9_.-]*$/;

/** `JSON.stringify(text)`, without its call for an id's plain characters (every emit id; 70 ns of an emit's). */
function jsonString(text: string): string {
  return PLAIN_JSON.test(text) ? `"${text}"` : JSON.stringify(text);
}

/** `JSON.stringify(meta)`, without its call for the usual empty metadata. */
function metaJson(meta: EmitMeta): string {
  for (const _ in meta) return JSON.stringify(meta);
  return "{}";
}

/** Summary streams (latest 100 per emitter and channel) and the user's shard outbox. */
export class EventStore {
  /** The record step's group commit (store/record-groups.ts). */
  private readonly groups: RecordGroups;
  /** The record script's keys and shared arguments per user, emitter and channel (store/record-targets.ts). */
  private readonly targets: RecordTargets;

  /** Deletions that give back what they held (store/stream-drops.ts). */
  private readonly drops: StreamDrops;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /** How large one record call may grow (store/record-groups.ts). */
    groupLimits: RecordGroupLimits = DEFAULT_RECORD_GROUP_LIMITS,
    /** What one user's streams may hold (MAX_STREAMS_PER_USER, MAX_STORED_MB_PER_USER); none = no limit. */
    storage?: StorageLimits,
  ) {
    this.targets = new RecordTargets(keys, storage);
    this.groups = new RecordGroups(defineScript(redis, RECORD_EVENTS), (send) => writeTogether(redis, send), groupLimits);
    this.drops = new StreamDrops(redis, keys);
  }

  /** Records events atomically (summary + the user's shard outbox, one slot); returns their ids in order. */
  async record(input: RecordInput): Promise<string[]> {
    const r = await this.recordGuarded(input, undefined);
    if (r === null || !("ids" in r)) throw new Error("record: an unguarded, uncharged record within the storage limits always writes");
    return r.ids;
  }

  /**
   * Like `record`, but only when the key `guard` names for the record's user and emitter exists
   * (checked in the same script; null, nothing written, when it does not), and after `charge` tokens are taken from the user's ingress bucket
   * in the same step (`waitMs`, nothing written, when the bucket cannot pay).
   */
  recordGuarded(input: RecordInput, guard: GuardKeyOf | undefined, charge?: IngressCharge): Promise<ChargedRecord | null> {
    // Not async (an emit's hot path): the group's promise; a throw here reaches the caller, which awaits this.
    const channel = normalizeChannel(input.channel);
    const target = this.targets.get(input.userId, input.emitterId, channel, input.emitterKind, guard, charge);
    const pairs: string[] = [];
    const wrap = input.emitterKind === "workflow" && channel !== "$errors" ? ',"w":1' : "";
    for (const e of input.events) {
      const payload = JSON.stringify(e.payload ?? null);
      // The StoredSummary JSON, built around the payload text instead of stringifying it twice
      // (same bytes as JSON.stringify({p, x, m, w?})).
      pairs.push(`{"p":${payload},"x":${jsonString(e.emitId)},"m":${metaJson(e.meta)}${wrap}}`, payload);
    }
    const request = { acceptedAtMs: input.acceptedAtMs, hops: input.hops ?? 0, cost: charge?.cost ?? 0, pairs };
    return this.groups.add(target, request);
  }

  /** Record requests taken and record script calls sent by this store (store/record-groups.ts). */
  recordCounts(): { readonly requests: number; readonly calls: number } {
    return { ...this.groups.counts };
  }

  /** Summaries newest first; `after`/`before` are event ids; events over 1 KB truncated unless expanded. */
  async summaries(
    userId: string,
    emitterId: string,
    channel: string,
    opts: { limit: number; after?: string; before?: string; expand: boolean },
  ): Promise<{ data: EventSummary[]; page_info: PageInfo }> {
    const key = this.keys.events(userId, emitterId, channel);
    for (const [name, v] of [
      ["after", opts.after],
      ["before", opts.before],
    ] as const) {
      if (v !== undefined && !isEventId(v)) throw new ValidationError(`${name} must be an event id (<ms>-<seq>)`, "invalid_cursor");
    }
    let entries: [string, string[]][];
    if (opts.after !== undefined && /^0+-0+$/.test(opts.after)) {
      // Nothing precedes the zero id; Redis refuses the exclusive range "(0-0".
      entries = [];
    } else if (opts.before !== undefined) {
      entries = ((await this.redis.xrange(key, `(${opts.before}`, "+", "COUNT", opts.limit)) as [string, string[]][]).reverse();
    } else {
      const end = opts.after !== undefined ? `(${opts.after}` : "+";
      entries = (await this.redis.xrevrange(key, end, "-", "COUNT", opts.limit)) as [string, string[]][];
    }
    const total = await this.redis.xlen(key);
    const data = entries.map(([id, fields]) => toSummary(id, fields, emitterId, normalizeChannel(channel), opts.expand));
    return { data, page_info: pageInfo(data, total, (s) => s.id) };
  }

  /**
   * Deletes events of one stream by inclusive id range (both absent = the whole stream, which then
   * no longer counts against MAX_STREAMS_PER_USER); their bytes are given back either way.
   */
  deleteRange(userId: string, emitterId: string, channel: string, startId: string | null, endId: string | null): Promise<number> {
    if (startId === null && endId === null) return this.drops.drop(userId, emitterId, channel, "", "");
    return this.drops.drop(userId, emitterId, channel, startId ?? "-", endId ?? "+");
  }

  /** Channels with a stream for the emitter. */
  channels(userId: string, emitterId: string): Promise<string[]> {
    return this.redis.smembers(this.keys.eventChannels(userId, emitterId));
  }

  /** Drops every stream of an emitter (workflow or webhook deletion) and gives back what they held (store/stream-drops.ts). */
  dropEmitter(userId: string, emitterId: string): Promise<void> {
    return this.drops.dropEmitter(userId, emitterId);
  }
}

/** The item `event_summaries?expand=event` returns for a stream entry, as JSON (the live tail's data line). */
export function expandedSummaryJson(id: string, fields: string[], emitterId: string, channel: string): string {
  return JSON.stringify(toSummary(id, fields, emitterId, normalizeChannel(channel), true));
}

function toSummary(id: string, fields: string[], emitterId: string, channel: string, expand: boolean): EventSummary {
  const raw = fields[1] ?? "null";
  let stored: StoredSummary;
  try {
    stored = JSON.parse(raw) as StoredSummary;
  } catch {
    stored = { p: null, x: "", m: {} };
  }
  const event = stored.w ? { raw_event: stored.p } : stored.p;
  const metadata: EventSummary["metadata"] = { emitter_id: emitterId, emit_id: stored.x, name: channel };
  if (stored.m.summary !== undefined) metadata.summary = stored.m.summary;
  if (stored.m.id !== undefined) metadata.id = stored.m.id;
  if (stored.m.ts !== undefined) metadata.ts = stored.m.ts;
  const summary: EventSummary = { id, indexed_at_ms: Number(id.split("-")[0]), event, metadata };
  if (!expand) {
    const json = JSON.stringify(event) ?? "null";
    if (Buffer.byteLength(json, "utf8") > TRUNCATE_BYTES) {
      summary.event = truncateUtf8(json, TRUNCATE_BYTES);
      summary.truncated = true;
    }
  }
  return summary;
}
