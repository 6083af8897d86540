import { Cluster } from "ioredis";
import type { ChainableCommander } from "ioredis";
import type { RedisClient } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { PRUNE_CONSUMERS } from "./scripts/prune-consumers.js";

/**
 * Stream entries as XREADGROUP / XAUTOCLAIM return them: [id, [field, value, …]]. What a
 * `ShardStreams` hands out carries an entry ref (`entryRef`) in place of the id: entry ids are
 * unique per stream only, and its consumers read many streams.
 */
export type StreamEntries = [string, string[]][];

/** `<shard>/<entry id>`: one entry of one shard's stream. */
export function entryRef(shard: number, id: string): string {
  return `${shard}/${id}`;
}

/** The shard an entry ref names. */
export function shardOfRef(ref: string): number {
  return Number(ref.slice(0, ref.indexOf("/")));
}

function parseRef(ref: string): [number, string] {
  const at = ref.indexOf("/");
  return [Number(ref.slice(0, at)), ref.slice(at + 1)];
}

/** Entry ids by shard, from refs. */
export function byShard(refs: readonly string[]): Map<number, string[]> {
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
 * Shard streams read by one blocking XREADGROUP on one connection. On one Redis node there is one
 * read group of every shard (`STREAMS s0 … s15 > … >`); on a Redis Cluster a multi-key command
 * must stay in one slot, so each shard is a read group of its own, on its own connection
 * (docs/decisions.md "Sharded outbox").
 */
export interface ReadGroup {
  readonly shards: readonly number[];
  readonly conn: RedisClient;
}

/** What the queue monitor samples of a sharded stream: length, pending, oldest entry (ms of its id). */
export interface ShardStats {
  readonly length: number;
  readonly pending: number;
  readonly oldestMs: number | undefined;
}

/**
 * One stream per shard (the outbox, the run stream), each in its shard's slot, read by consumers
 * through a consumer group of the same name on every one: the group, read groups, leases,
 * take-overs and stats, each on the stream of the entry's shard. Entries are named by refs
 * (`entryRef`). The subclasses add what their entries mean.
 */
export class ShardStreams {
  private readonly prune: ScriptCall;
  protected readonly cluster: boolean;
  private groups?: ReadGroup[];
  /** Connections this opened for read groups (closed by `close`). */
  private readonly opened: RedisClient[] = [];

  constructor(
    protected readonly redis: RedisClient,
    /** A dedicated connection: XREADGROUP blocks it (the first read group's; on one node the only one). */
    private readonly blocking: RedisClient,
    /** The stream of each shard, by shard number. */
    protected readonly streams: readonly string[],
    /** The consumer group's name (the same on every shard's stream). */
    protected readonly group: string,
    /** Names the connections of further read groups (`<label>-<shard>`). */
    private readonly label: string,
    /**
     * Opens a dedicated connection for each further read group (a cluster: one per shard but the
     * first); without it, `blocking` is duplicated.
     */
    private readonly openBlocking?: (name: string) => RedisClient,
  ) {
    this.prune = defineScript(redis, PRUNE_CONSUMERS);
    this.cluster = redis instanceof Cluster;
  }

  /** Every shard number. */
  all(): number[] {
    return this.streams.map((_, i) => i);
  }

  protected stream(shard: number): string {
    const s = this.streams[shard];
    if (s === undefined) throw new Error(`${this.label}: no shard ${shard}`);
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
          const conn = this.openBlocking?.(`${this.label}-${shard}`) ?? this.blocking.duplicate();
          this.opened.push(conn);
          return { shards: [shard], conn };
        });
      }
    }
    return this.groups;
  }

  /**
   * Runs the commands `add` issues on each of `shards` (it returns their replies' promises) and
   * returns each shard's replies, in order; throws the first error. They are plain commands on the
   * connection, not an ioredis pipeline: the daemon's clients write the commands of one tick in one
   * socket write (per master on a cluster: app/redis-client.ts), and an explicit `Pipeline` per call
   * was one of the relay's objects that outlived young-generation collections (docs/decisions.md
   * "Plain commands for the shard streams' per-shard steps").
   */
  protected perShard(shards: readonly number[], add: (key: string, shard: number) => readonly Promise<unknown>[]): Promise<unknown[][]> {
    return Promise.all(shards.map((shard) => Promise.all(add(this.stream(shard), shard))));
  }

  /** Creates the consumer group on every shard's stream (from its start, so nothing added earlier is missed). */
  async ensureGroup(): Promise<void> {
    await Promise.all(
      this.streams.map((key) =>
        this.redis.xgroup("CREATE", key, this.group, "0", "MKSTREAM").catch((err: Error) => {
          if (!/BUSYGROUP/.test(err.message)) throw err;
        }),
      ),
    );
  }

  /** Lists the consumer in XINFO CONSUMERS of every shard before its first read. */
  async createConsumer(consumer: string): Promise<void> {
    await this.perShard(this.all(), (key) => [this.redis.xgroup("CREATECONSUMER", key, this.group, consumer)]);
  }

  /** Removes consumers other than `keep` idle for `minIdleMs` with nothing pending, on every shard; returns how many (summed). */
  async pruneConsumers(keep: string, minIdleMs: number): Promise<number> {
    const removed = await Promise.all(this.streams.map((key) => this.prune([key], [this.group, minIdleMs, keep])));
    return removed.reduce<number>((sum, n) => sum + Number(n), 0);
  }

  /**
   * Reads up to `count` new entries per shard of `group`, blocking up to `blockMs`, after the
   * commands `before` adds to the same pipeline (Redis runs them first): one round trip on the
   * group's connection. Returns entries named by refs, shard after shard (each shard's in stream order).
   */
  protected async readGroup(
    group: ReadGroup,
    consumer: string,
    count: number,
    blockMs: number,
    before?: (pipe: ChainableCommander) => void,
  ): Promise<StreamEntries> {
    const pipe = group.conn.pipeline();
    before?.(pipe);
    const keys = group.shards.map((s) => this.stream(s));
    pipe.xreadgroup("GROUP", this.group, consumer, "COUNT", count, "BLOCK", blockMs, "STREAMS", ...keys, ...keys.map(() => ">"));
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

  /** Resets the idle time of pending entries (refs; XCLAIM to the consumer itself, JUSTID: no delivery count). */
  async renewLease(consumer: string, refs: readonly string[]): Promise<void> {
    const ids = byShard(refs);
    await this.perShard([...ids.keys()], (key, shard) => {
      const list = ids.get(shard) ?? [];
      const claims: Promise<unknown>[] = [];
      for (let i = 0; i < list.length; i += 500)
        claims.push(this.redis.xclaim(key, this.group, consumer, 0, ...list.slice(i, i + 500), "JUSTID"));
      return claims;
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
    const res = (await this.redis.xautoclaim(this.stream(shard), this.group, consumer, minIdleMs, cursor, "COUNT", count)) as [
      string,
      StreamEntries,
      string[]?,
    ];
    const entries = (res[1] ?? [])
      .filter((e) => e && Array.isArray(e[1]))
      .map(([id, fields]): [string, string[]] => [entryRef(shard, id), fields]);
    return { entries, next: res[0] };
  }

  /**
   * A hash per shard whose entries wait too (the run streams' parked runs): its HLEN counts in the
   * shard's length. None by default.
   */
  protected waitingBeside(_shard: number): string | undefined {
    return undefined;
  }

  /** Length, pending count and oldest entry time of each shard (by shard number). */
  async shardStats(): Promise<ShardStats[]> {
    const replies = await this.perShard(this.all(), (key, shard) => {
      const r = this.redis;
      const beside = this.waitingBeside(shard);
      const commands = [r.xlen(key), r.xpending(key, this.group), r.xrange(key, "-", "+", "COUNT", 1)];
      return beside === undefined ? commands : [...commands, r.hlen(beside)];
    });
    return replies.map(([length, pending, range, beside]) => {
      const [first] = (range as StreamEntries | undefined) ?? [];
      return {
        length: Number(length ?? 0) + Number(beside ?? 0),
        pending: Number((pending as unknown[] | undefined)?.[0] ?? 0),
        oldestMs: first ? Number(first[0].slice(0, first[0].indexOf("-"))) : undefined,
      };
    });
  }

  /** Length, pending count and oldest entry time summed over the shards, in one round trip on one node. */
  async stats(): Promise<ShardStats> {
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
