import { Cluster } from "ioredis";
import type { ChainableCommander } from "ioredis";
import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { PRUNE_CONSUMERS } from "./scripts/prune-consumers.js";

/** The consumer group fan-out workers read the shard outboxes through (one group of that name per shard stream). */
export const FANOUT_GROUP = "fanout";

/** What the queue monitor samples of the outbox: the sums over every shard outbox. */
export interface OutboxStats {
  /** Entries in the streams. */
  readonly length: number;
  /** Entries read by a consumer and not yet acknowledged. */
  readonly pending: number;
  /** Milliseconds of the oldest entry's id over every shard, if any. */
  readonly oldestMs: number | undefined;
}

/**
 * Stream entries as XREADGROUP / XAUTOCLAIM return them: [id, [field, value, …]]. What OutboxStream
 * hands out carries an entry ref (`entryRef`) in place of the id: entry ids are unique per stream
 * only, and fan-out reads many streams.
 */
export type StreamEntries = [string, string[]][];

/** `<shard>/<entry id>`: one entry of one shard outbox. */
export function entryRef(shard: number, id: string): string {
  return `${shard}/${id}`;
}

function parseRef(ref: string): [number, string] {
  const at = ref.indexOf("/");
  return [Number(ref.slice(0, at)), ref.slice(at + 1)];
}

/** Entry ids by shard, from refs. */
function byShard(refs: readonly string[]): Map<number, string[]> {
  const out = new Map<number, string[]>();
  for (const ref of refs) {
    const [shard, id] = parseRef(ref);
    const list = out.get(shard);
    if (list) list.push(id);
    else out.set(shard, [id]);
  }
  return out;
}

/**
 * Shard outboxes read by one blocking XREADGROUP on one connection. On one Redis node there is one
 * read group of every shard (`STREAMS s0 … s15 > … >`); on a Redis Cluster a multi-key command
 * must stay in one slot, so each shard is a read group of its own, on its own connection
 * (docs/decisions.md "Sharded outbox").
 */
export interface ReadGroup {
  readonly shards: readonly number[];
  readonly conn: RedisClient;
}

/**
 * The shard outboxes (`keys.shardOutbox(i)`, `keys.shards` of them) as fan-out consumers use them:
 * the group, blocking reads, acknowledgements, leases and take-overs, each on the stream of the
 * entry's shard. Entries are named by refs (`entryRef`). The entries' fields are the wire format of
 * `events/outbox.ts`.
 */
export class OutboxStream {
  private readonly prune: ScriptCall;
  private readonly streams: readonly string[];
  private readonly cluster: boolean;
  private groups?: ReadGroup[];
  /** Connections this opened for read groups (closed by `close`). */
  private readonly opened: RedisClient[] = [];

  constructor(
    private readonly redis: RedisClient,
    /** A dedicated connection: XREADGROUP blocks it (the first read group's; on one node the only one). */
    private readonly blocking: RedisClient,
    keys: Keys,
    /**
     * Opens a dedicated connection for each further read group (a cluster: one per shard but the
     * first); without it, `blocking` is duplicated.
     */
    private readonly openBlocking?: (name: string) => RedisClient,
  ) {
    this.prune = defineScript(redis, PRUNE_CONSUMERS);
    this.streams = Array.from({ length: keys.shards }, (_, i) => keys.shardOutbox(i));
    this.cluster = redis instanceof Cluster;
  }

  /** Every shard number. */
  private all(): number[] {
    return this.streams.map((_, i) => i);
  }

  private stream(shard: number): string {
    const s = this.streams[shard];
    if (s === undefined) throw new Error(`outbox: no shard ${shard}`);
    return s;
  }

  /**
   * The read groups, their connections opened on first call: one group of every shard on one
   * node, one group per shard on a cluster.
   */
  readGroups(): readonly ReadGroup[] {
    if (!this.groups) {
      if (!this.cluster) this.groups = [{ shards: this.all(), conn: this.blocking }];
      else {
        this.groups = this.all().map((shard) => {
          if (shard === 0) return { shards: [0], conn: this.blocking };
          const conn = this.openBlocking?.(`fanout-reads-${shard}`) ?? this.blocking.duplicate();
          this.opened.push(conn);
          return { shards: [shard], conn };
        });
      }
    }
    return this.groups;
  }

  /**
   * Runs `add` for each of `shards` in one pipeline (one node) or one per shard, in parallel (a
   * cluster: a pipeline must stay on one node). Returns each shard's replies, in order; throws
   * the first error.
   */
  private async perShard(
    shards: readonly number[],
    add: (pipe: ChainableCommander, key: string, shard: number) => void,
  ): Promise<unknown[][]> {
    const run = async (conn: RedisClient, part: readonly number[]): Promise<unknown[][]> => {
      const pipe = conn.pipeline();
      const counts: number[] = [];
      for (const shard of part) {
        const before = pipe.length;
        add(pipe, this.stream(shard), shard);
        counts.push(pipe.length - before);
      }
      const replies = (await pipe.exec()) ?? [];
      const failed = replies.find(([err]) => err);
      if (failed) throw failed[0];
      const out: unknown[][] = [];
      let at = 0;
      for (const n of counts) {
        out.push(replies.slice(at, at + n).map(([, v]) => v));
        at += n;
      }
      return out;
    };
    if (shards.length === 0) return [];
    if (!this.cluster) return run(this.redis, shards);
    return (await Promise.all(shards.map((s) => run(this.redis, [s])))).flat();
  }

  /** Creates the consumer group on every shard outbox (from its start, so nothing added earlier is missed). */
  async ensureGroup(): Promise<void> {
    await Promise.all(
      this.streams.map((key) =>
        this.redis.xgroup("CREATE", key, FANOUT_GROUP, "0", "MKSTREAM").catch((err: Error) => {
          if (!/BUSYGROUP/.test(err.message)) throw err;
        }),
      ),
    );
  }

  /** Lists the consumer in XINFO CONSUMERS of every shard before its first read. */
  async createConsumer(consumer: string): Promise<void> {
    await this.perShard(this.all(), (pipe, key) => pipe.xgroup("CREATECONSUMER", key, FANOUT_GROUP, consumer));
  }

  /** Removes consumers other than `keep` idle for `minIdleMs` with nothing pending, on every shard; returns how many (summed). */
  async pruneConsumers(keep: string, minIdleMs: number): Promise<number> {
    const removed = await Promise.all(this.streams.map((key) => this.prune([key], [FANOUT_GROUP, minIdleMs, keep])));
    return removed.reduce<number>((sum, n) => sum + Number(n), 0);
  }

  /**
   * Acknowledges and deletes `toAck` (refs of the group's shards), then reads up to `count` new
   * entries per shard of the group, blocking up to `blockMs`: one round trip on the group's
   * connection. Redis runs them in order, so an entry is acknowledged only after what the caller
   * did for it. Returns entries named by refs, shard after shard (each shard's in stream order).
   */
  async ackAndRead(group: ReadGroup, toAck: readonly string[], consumer: string, count: number, blockMs: number): Promise<StreamEntries> {
    const pipe = group.conn.pipeline();
    for (const [shard, ids] of byShard(toAck)) {
      const key = this.stream(shard);
      pipe.xack(key, FANOUT_GROUP, ...ids).xdel(key, ...ids);
    }
    const keys = group.shards.map((s) => this.stream(s));
    pipe.xreadgroup("GROUP", FANOUT_GROUP, consumer, "COUNT", count, "BLOCK", blockMs, "STREAMS", ...keys, ...keys.map(() => ">"));
    const replies = (await pipe.exec()) ?? [];
    const failed = replies.find(([err]) => err);
    if (failed) throw failed[0];
    const res = replies.at(-1)?.[1] as [string, StreamEntries][] | null;
    if (!res) return [];
    const out: StreamEntries = [];
    for (const [key, entries] of res) {
      const shard = group.shards[keys.indexOf(key)] ?? 0;
      for (const [id, fields] of entries) out.push([entryRef(shard, id), fields]);
    }
    return out;
  }

  /**
   * Acknowledges and deletes entries (refs): XACK then XDEL on each entry's shard outbox, one
   * pipeline on one node (written at once, like `ackAndRead`'s, so Redis runs both).
   */
  async ack(refs: readonly string[]): Promise<void> {
    if (refs.length === 0) return;
    const ids = byShard(refs);
    await this.perShard([...ids.keys()], (pipe, key, shard) => {
      const list = ids.get(shard) ?? [];
      pipe.xack(key, FANOUT_GROUP, ...list).xdel(key, ...list);
    });
  }

  /** Resets the idle time of pending entries (refs; XCLAIM to the consumer itself, JUSTID: no delivery count). */
  async renewLease(consumer: string, refs: readonly string[]): Promise<void> {
    const ids = byShard(refs);
    await this.perShard([...ids.keys()], (pipe, key, shard) => {
      const list = ids.get(shard) ?? [];
      for (let i = 0; i < list.length; i += 500) pipe.xclaim(key, FANOUT_GROUP, consumer, 0, ...list.slice(i, i + 500), "JUSTID");
    });
  }

  /**
   * One XAUTOCLAIM round on one shard: entries idle for `minIdleMs`, from `cursor`; returns them
   * (named by refs) and the next cursor.
   */
  async takeOver(
    shard: number,
    consumer: string,
    minIdleMs: number,
    cursor: string,
    count: number,
  ): Promise<{ entries: StreamEntries; next: string }> {
    const res = (await this.redis.xautoclaim(this.stream(shard), FANOUT_GROUP, consumer, minIdleMs, cursor, "COUNT", count)) as [
      string,
      StreamEntries,
      string[]?,
    ];
    const entries = (res[1] ?? [])
      .filter((e) => e && Array.isArray(e[1]))
      .map(([id, fields]): [string, string[]] => [entryRef(shard, id), fields]);
    return { entries, next: res[0] };
  }

  /** Length, pending count and oldest entry time of each shard (by shard number). */
  async shardStats(): Promise<OutboxStats[]> {
    const replies = await this.perShard(this.all(), (pipe, key) =>
      pipe.xlen(key).xpending(key, FANOUT_GROUP).xrange(key, "-", "+", "COUNT", 1),
    );
    return replies.map(([length, pending, range]) => {
      const [first] = (range as StreamEntries | undefined) ?? [];
      return {
        length: Number(length ?? 0),
        pending: Number((pending as unknown[] | undefined)?.[0] ?? 0),
        oldestMs: first ? Number(first[0].slice(0, first[0].indexOf("-"))) : undefined,
      };
    });
  }

  /** Length, pending count and oldest entry time summed over the shards, in one round trip on one node. */
  async stats(): Promise<OutboxStats> {
    let length = 0;
    let pending = 0;
    let oldestMs: number | undefined;
    for (const s of await this.shardStats()) {
      length += s.length;
      pending += s.pending;
      if (s.oldestMs !== undefined && (oldestMs === undefined || s.oldestMs < oldestMs)) oldestMs = s.oldestMs;
    }
    return { length, pending, oldestMs };
  }

  /** Closes the connections opened for read groups (call once their reads returned). */
  close(): void {
    for (const c of this.opened.splice(0)) c.disconnect();
    this.groups = undefined;
  }
}

/** Entries in every shard outbox, with or without a consumer group (tests, the bench, tools: one XLEN per shard). */
export async function outboxLength(redis: RedisClient, keys: Keys): Promise<number> {
  const lengths = await Promise.all(Array.from({ length: keys.shards }, (_, i) => redis.xlen(keys.shardOutbox(i))));
  return lengths.reduce((sum, n) => sum + n, 0);
}
