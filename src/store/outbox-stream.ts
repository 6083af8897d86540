import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { PRUNE_CONSUMERS } from "./scripts/prune-consumers.js";

/** The consumer group fan-out workers read the outbox through. */
export const FANOUT_GROUP = "fanout";

/** What the queue monitor samples of the outbox. */
export interface OutboxStats {
  /** Entries in the stream. */
  readonly length: number;
  /** Entries read by a consumer and not yet acknowledged. */
  readonly pending: number;
  /** Milliseconds of the oldest entry's id, if any. */
  readonly oldestMs: number | undefined;
}

/** Stream entries as XREADGROUP / XAUTOCLAIM return them: [id, [field, value, …]]. */
export type StreamEntries = [string, string[]][];

/**
 * The outbox stream as fan-out consumers use it: the group, blocking reads, acknowledgements,
 * leases and take-overs. The entries' fields are the wire format of `events/outbox.ts`.
 */
export class OutboxStream {
  private readonly prune: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    /** A dedicated connection: XREADGROUP blocks it. */
    private readonly blocking: RedisClient,
    private readonly keys: Keys,
  ) {
    this.prune = defineScript(redis, PRUNE_CONSUMERS);
  }

  /** Creates the consumer group (from the start of the outbox, so nothing added earlier is missed). */
  async ensureGroup(): Promise<void> {
    await this.redis.xgroup("CREATE", this.keys.outbox(), FANOUT_GROUP, "0", "MKSTREAM").catch((err: Error) => {
      if (!/BUSYGROUP/.test(err.message)) throw err;
    });
  }

  /** Lists the consumer in XINFO CONSUMERS before its first read. */
  async createConsumer(consumer: string): Promise<void> {
    await this.redis.xgroup("CREATECONSUMER", this.keys.outbox(), FANOUT_GROUP, consumer);
  }

  /** Removes consumers other than `keep` idle for `minIdleMs` with nothing pending; returns how many. */
  async pruneConsumers(keep: string, minIdleMs: number): Promise<number> {
    return Number(await this.prune([this.keys.outbox()], [FANOUT_GROUP, minIdleMs, keep]));
  }

  /**
   * Acknowledges and deletes `toAck`, then reads up to `count` new entries, blocking up to
   * `blockMs`: one round trip on the blocking connection. Redis runs them in order, so an entry
   * is acknowledged only after what the caller did for it.
   */
  async ackAndRead(toAck: readonly string[], consumer: string, count: number, blockMs: number): Promise<StreamEntries> {
    const outbox = this.keys.outbox();
    const pipe = this.blocking.pipeline();
    if (toAck.length > 0) pipe.xack(outbox, FANOUT_GROUP, ...toAck).xdel(outbox, ...toAck);
    pipe.xreadgroup("GROUP", FANOUT_GROUP, consumer, "COUNT", count, "BLOCK", blockMs, "STREAMS", outbox, ">");
    const replies = (await pipe.exec()) ?? [];
    const failed = replies.find(([err]) => err);
    if (failed) throw failed[0];
    const res = replies.at(-1)?.[1] as [string, StreamEntries][] | null;
    return res?.[0]?.[1] ?? [];
  }

  /** Acknowledges and deletes entries in one transaction. */
  async ack(ids: readonly string[]): Promise<void> {
    const outbox = this.keys.outbox();
    await this.redis
      .multi()
      .xack(outbox, FANOUT_GROUP, ...ids)
      .xdel(outbox, ...ids)
      .exec();
  }

  /** Resets the idle time of pending entries (XCLAIM to the consumer itself, JUSTID: no delivery count). */
  async renewLease(consumer: string, ids: readonly string[]): Promise<void> {
    for (let i = 0; i < ids.length; i += 500) {
      await this.redis.xclaim(this.keys.outbox(), FANOUT_GROUP, consumer, 0, ...ids.slice(i, i + 500), "JUSTID");
    }
  }

  /** One XAUTOCLAIM round: entries idle for `minIdleMs`, from `cursor`; returns them and the next cursor. */
  async takeOver(consumer: string, minIdleMs: number, cursor: string, count: number): Promise<{ entries: StreamEntries; next: string }> {
    const res = (await this.redis.xautoclaim(this.keys.outbox(), FANOUT_GROUP, consumer, minIdleMs, cursor, "COUNT", count)) as [
      string,
      StreamEntries,
      string[]?,
    ];
    return { entries: (res[1] ?? []).filter((e) => e && Array.isArray(e[1])), next: res[0] };
  }

  /** Length, pending count and oldest entry time, in one round trip. */
  async stats(): Promise<OutboxStats> {
    const key = this.keys.outbox();
    const replies = await this.redis.pipeline().xlen(key).xpending(key, FANOUT_GROUP).xrange(key, "-", "+", "COUNT", 1).exec();
    const failed = (replies ?? []).find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error("outbox stats: no reply");
    const [first] = (replies[2]?.[1] as StreamEntries | undefined) ?? [];
    return {
      length: Number(replies[0]?.[1] ?? 0),
      pending: Number((replies[1]?.[1] as unknown[] | undefined)?.[0] ?? 0),
      oldestMs: first ? Number(first[0].slice(0, first[0].indexOf("-"))) : undefined,
    };
  }
}
