import type { Cluster, Redis } from "ioredis";
import type { RedisClient } from "./context.js";
import type { EmitterKind } from "./events.js";
import { expandedSummaryJson } from "./events.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { slotOf } from "./shard-layout.js";
import { TAIL_STREAM_OPEN } from "./scripts/tail-stream-open.js";

/** One event as the live tail sends it: its id and the expanded summary item as JSON. */
export interface TailEntry {
  readonly id: string;
  readonly json: string;
}

/** Who a browser token was issued to: the user, the one source it opens, the digest of the API key that asked. */
export interface TokenOwner {
  readonly userId: string;
  readonly sourceId: string;
  readonly keyDigest: string;
}

/** One stream of events (an emitter's channel) as the live tail reads it. */
export interface TailStream {
  readonly userId: string;
  readonly emitterId: string;
  readonly channel: string;
}

type RawEntries = [string, string[]][];

function entriesOf(raw: RawEntries, s: TailStream): TailEntry[] {
  return raw.map(([id, fields]) => ({ id, json: expandedSummaryJson(id, fields, s.emitterId, s.channel) }));
}

const isCluster = (redis: RedisClient): redis is Cluster => redis.isCluster;
const nodeKey = (node: Redis): string => `${node.options.host}:${node.options.port}`;

/**
 * A dedicated connection that blocks in XREAD over the streams of one user (their keys share the
 * user's hash tag, so one XREAD stays on one slot, also on Redis Cluster). Its client id lets
 * another connection wake it when the set of streams changes.
 *
 * On a Redis Cluster the connection is a Cluster client of its own: the XREAD is sent on its
 * connection to the master of the streams' slot, and the client id is that connection's (asked
 * on it, just before the read), so that the waking CLIENT UNBLOCK can go to the same node
 * (`address`). Until the client knows the slot's node, the read goes through the Cluster client and
 * cannot be woken (it ends at its block time).
 */
export class TailReader {
  private clientId: Promise<number | undefined> = Promise.resolve(undefined);
  /** On a Cluster: the node connection the last read went to, and its `host:port`. */
  private node: Redis | undefined;

  constructor(
    private readonly conn: RedisClient,
    private readonly keys: Keys,
  ) {
    if (isCluster(conn)) return;
    const learnId = () => {
      this.clientId = (this.conn.client("ID") as Promise<number>).catch(() => undefined);
    };
    conn.on("ready", learnId);
    if (conn.status === "ready") learnId();
  }

  /** This connection's id on the server, once known (it changes after a reconnect). */
  id(): Promise<number | undefined> {
    return this.clientId;
  }

  /** On a Cluster, the `host:port` of the node this reader blocks on; undefined on one node. */
  address(): string | undefined {
    return this.node === undefined ? undefined : nodeKey(this.node);
  }

  /** The connection a read of `key` is sent on (see the class comment). */
  private readerFor(key: string | undefined): RedisClient {
    const conn = this.conn;
    if (!isCluster(conn) || key === undefined) return conn;
    const addr = conn.slots[slotOf(key)]?.[0];
    const node = addr === undefined ? undefined : conn.nodes("master").find((n) => nodeKey(n) === addr);
    if (node === undefined) {
      this.node = undefined;
      this.clientId = Promise.resolve(undefined);
      return conn;
    }
    if (node !== this.node || node.status !== "ready") {
      this.node = node;
      this.clientId = (node.client("ID") as Promise<number>).catch(() => undefined);
    }
    return node;
  }

  /**
   * Waits up to `blockMs` for entries after `after[i]` in `streams[i]`; returns each stream's new
   * entries (an empty map on timeout or when woken).
   */
  async read(streams: readonly TailStream[], after: readonly string[], blockMs: number, count: number): Promise<Map<number, TailEntry[]>> {
    const keys = streams.map((s) => this.keys.events(s.userId, s.emitterId, s.channel));
    const reply = (await this.readerFor(keys[0]).xread("COUNT", count, "BLOCK", blockMs, "STREAMS", ...keys, ...after)) as
      | [string, RawEntries][]
      | null;
    const out = new Map<number, TailEntry[]>();
    for (const [key, raw] of reply ?? []) {
      const i = keys.indexOf(key);
      const s = streams[i];
      if (s) out.set(i, entriesOf(raw, s));
    }
    return out;
  }

  close(): void {
    this.conn.disconnect();
  }
}

/**
 * The live tail's Redis side (SPEC §9): reading a stream after an id, browser tokens, and the
 * per-user count of open streams shared by every process.
 */
export class LiveTailStore {
  private readonly openScript: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /** Opens a dedicated (blocking) connection. */
    private readonly connect: (name: string) => RedisClient,
  ) {
    this.openScript = defineScript(redis, TAIL_STREAM_OPEN);
  }

  reader(name: string): TailReader {
    return new TailReader(this.connect(name), this.keys);
  }

  /**
   * Ends a reader's blocking read now (CLIENT UNBLOCK); a reader not blocked is unaffected. On a
   * Cluster, sent on this client's connection to the reader's node (a client id is per node).
   */
  async unblock(reader: TailReader): Promise<void> {
    const id = await reader.id();
    if (id === undefined) return;
    const redis = this.redis;
    if (!isCluster(redis)) {
      await redis.client("UNBLOCK", id);
      return;
    }
    const addr = reader.address();
    const node = addr === undefined ? undefined : redis.nodes("all").find((n) => nodeKey(n) === addr);
    await node?.client("UNBLOCK", id);
  }

  /** The id of the stream's newest entry ("0-0" when it is empty or absent). */
  async lastId(s: TailStream): Promise<string> {
    const raw = (await this.redis.xrevrange(this.keys.events(s.userId, s.emitterId, s.channel), "+", "-", "COUNT", 1)) as RawEntries;
    return raw[0]?.[0] ?? "0-0";
  }

  /** Up to `count` entries after `afterId`, oldest first. */
  async after(s: TailStream, afterId: string, count: number): Promise<TailEntry[]> {
    const raw = (await this.redis.xrange(
      this.keys.events(s.userId, s.emitterId, s.channel),
      `(${afterId}`,
      "+",
      "COUNT",
      count,
    )) as RawEntries;
    return entriesOf(raw, s);
  }

  /** Whether the emitter's record still exists (a deleted one ends its streams). */
  async emitterExists(userId: string, kind: EmitterKind, emitterId: string): Promise<boolean> {
    const key =
      kind === "source"
        ? this.keys.source(userId, emitterId)
        : kind === "webhook"
          ? this.keys.webhook(userId, emitterId)
          : this.keys.workflow(userId, emitterId);
    return (await this.redis.exists(key)) === 1;
  }

  /**
   * Stores a browser token (by its hash) for one source's streams, with the digest of the API key
   * it was issued with (the live tail checks that key is still the user's on every use).
   */
  async saveToken(tokenHash: string, grant: TokenOwner, ttlMs: number): Promise<void> {
    await this.redis.set(this.keys.tailToken(tokenHash), `${grant.userId} ${grant.sourceId} ${grant.keyDigest}`, "PX", ttlMs);
  }

  /**
   * The user, source and key digest a token was issued with, while it is unexpired. A token stored
   * without a key digest (issued before tokens were bound to keys) is not honoured.
   */
  async tokenOwner(tokenHash: string): Promise<TokenOwner | undefined> {
    const v = await this.redis.get(this.keys.tailToken(tokenHash));
    const [userId, sourceId, keyDigest] = v?.split(" ") ?? [];
    return userId && sourceId && keyDigest ? { userId, sourceId, keyDigest } : undefined;
  }

  /** Takes a slot for a new stream of the user; false when the user is at `max` (0 = unlimited). */
  async openStream(userId: string, streamId: string, nowMs: number, staleMs: number, max: number): Promise<boolean> {
    return (await this.openScript([this.keys.tailStreams(userId)], [streamId, nowMs, staleMs, max])) === 1;
  }

  /** Vouches for streams this process still serves (their slots are not freed as stale). */
  async refreshStreams(userId: string, streamIds: readonly string[], nowMs: number, staleMs: number): Promise<void> {
    if (streamIds.length === 0) return;
    const key = this.keys.tailStreams(userId);
    const args: (string | number)[] = [];
    for (const id of streamIds) args.push(nowMs, id);
    await this.redis
      .multi()
      .zadd(key, "XX", ...args)
      .pexpire(key, staleMs)
      .exec();
  }

  async closeStream(userId: string, streamId: string): Promise<void> {
    await this.redis.zrem(this.keys.tailStreams(userId), streamId);
  }
}
