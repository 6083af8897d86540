import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { byShard, type ReadGroup, ShardStreams, type ShardStats, type StreamEntries } from "./shard-streams.js";

export { entryRef, type ReadGroup, type StreamEntries } from "./shard-streams.js";

/** The consumer group fan-out workers read the shard outboxes through (one group of that name per shard stream). */
export const FANOUT_GROUP = "fanout";

/** What the queue monitor samples of the outbox: the sums over every shard outbox. */
export type OutboxStats = ShardStats;

/**
 * The shard outboxes (`keys.shardOutbox(i)`, `keys.shards` of them) as fan-out consumers use them
 * (store/shard-streams.ts: the group, read groups, leases, take-overs), plus what fan-out does
 * with its entries: acknowledge and read in one round trip. The entries' fields are the wire format
 * of `events/outbox.ts`.
 */
export class OutboxStream extends ShardStreams {
  constructor(
    redis: RedisClient,
    /** A dedicated connection: XREADGROUP blocks it (the first read group's; on one node the only one). */
    blocking: RedisClient,
    keys: Keys,
    /**
     * Opens a dedicated connection for each further read group (a cluster: one per shard but the
     * first); without it, `blocking` is duplicated.
     */
    openBlocking?: (name: string) => RedisClient,
  ) {
    super(
      redis,
      blocking,
      Array.from({ length: keys.shards }, (_, i) => keys.shardOutbox(i)),
      FANOUT_GROUP,
      "fanout-reads",
      openBlocking,
    );
  }

  /**
   * Acknowledges and deletes `toAck` (refs of the group's shards), then reads up to `count` new
   * entries per shard of the group, blocking up to `blockMs`: one round trip on the group's
   * connection. Redis runs them in order, so an entry is acknowledged only after what the caller
   * did for it. Returns entries named by refs, shard after shard (each shard's in stream order).
   */
  ackAndRead(group: ReadGroup, toAck: readonly string[], consumer: string, count: number, blockMs: number): Promise<StreamEntries> {
    return this.readGroup(group, consumer, count, blockMs, (pipe) => {
      for (const [shard, ids] of byShard(toAck)) {
        const key = this.stream(shard);
        pipe.xack(key, FANOUT_GROUP, ...ids).xdel(key, ...ids);
      }
    });
  }

  /**
   * Acknowledges and deletes entries (refs): XACK then XDEL on each entry's shard outbox, issued
   * together (the daemon's tick-batched client writes them at once, like `ackAndRead`'s pipeline,
   * so Redis runs both).
   */
  async ack(refs: readonly string[]): Promise<void> {
    if (refs.length === 0) return;
    const ids = byShard(refs);
    await this.perShard([...ids.keys()], (key, shard) => {
      const list = ids.get(shard) ?? [];
      return [this.redis.xack(key, FANOUT_GROUP, ...list), this.redis.xdel(key, ...list)];
    });
  }
}

/** Entries in every shard outbox, with or without a consumer group (tests, the bench, tools: one XLEN per shard). */
export async function outboxLength(redis: RedisClient, keys: Keys): Promise<number> {
  const lengths = await Promise.all(Array.from({ length: keys.shards }, (_, i) => redis.xlen(keys.shardOutbox(i))));
  return lengths.reduce((sum, n) => sum + n, 0);
}
