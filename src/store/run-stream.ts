import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import type { StreamEntries } from "./outbox-stream.js";
import { defineScript, type ScriptCall } from "./script.js";
import { PRUNE_CONSUMERS } from "./scripts/prune-consumers.js";
import { RUN_STREAM_ACK } from "./scripts/run-stream-ack.js";
import { RUN_STREAM_ADD } from "./scripts/run-stream-add.js";
import { RUN_STREAM_HEAL } from "./scripts/run-stream-heal.js";

/** The consumer group run consumers read the run stream through. */
export const RUN_GROUP = "runs";

/** How long, and how many, ids of runs put in the stream are remembered (a redone fan-out adds none twice). */
const ONCE_TTL_MS = 10 * 60_000;
const ONCE_KEEP = 100_000;

/** A run to put in the stream: its user, its job (JSON of a queue/catalog.ts sourceRunJob) and, for dedupe, an id. */
export interface RunStreamInput {
  readonly userId: string;
  readonly json: string;
  readonly id?: string;
}

/** What became of a run offered to the stream. */
export type RunStreamStatus = "added" | "duplicate" | "parked";
const STATUS: Record<number, RunStreamStatus> = { 0: "duplicate", 1: "added", 2: "parked" };

/** A run read from the stream. */
export interface RunStreamEntry {
  readonly entryId: string;
  readonly userId: string;
  readonly json: string;
}

/**
 * The run stream (docs/decisions.md "Source runs from a stream"): source runs accepted and not
 * yet settled, one entry each (`u` user id, `j` job JSON), read by run consumers through one
 * consumer group. An entry is deleted when its run settles; nothing trims it otherwise. Each user
 * has at most `perUser` entries in it (the counts hash), so another user's run waits behind a
 * bounded number of them; the user's further runs are parked in order (a hash) and move into the
 * stream one by one as the user's entries settle, in the same atomic step as the acknowledgement.
 */
export class RunStream {
  private readonly addScript: ScriptCall;
  private readonly ackScript: ScriptCall;
  private readonly prune: ScriptCall;
  private readonly healScript: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly perUser: number,
    private readonly now: () => number = Date.now,
  ) {
    this.addScript = defineScript(redis, RUN_STREAM_ADD);
    this.ackScript = defineScript(redis, RUN_STREAM_ACK);
    this.prune = defineScript(redis, PRUNE_CONSUMERS);
    this.healScript = defineScript(redis, RUN_STREAM_HEAL);
  }

  /** Offers runs to the stream in one atomic step; returns what became of each, in order. */
  async add(runs: readonly RunStreamInput[]): Promise<RunStreamStatus[]> {
    if (runs.length === 0) return [];
    const args: (string | number)[] = [this.perUser, this.now(), ONCE_TTL_MS, ONCE_KEEP];
    for (const r of runs) args.push(r.id ?? "", r.userId, r.json);
    const k = this.keys;
    const res = (await this.addScript(
      [k.runStream(), k.runStreamCounts(), k.runStreamOnce(), k.runParked(), k.runParkedEnds()],
      args,
    )) as number[];
    return res.map((n) => STATUS[n] ?? "added");
  }

  /** Creates the consumer group (from the start of the stream, so nothing added earlier is missed). */
  async ensureGroup(): Promise<void> {
    await this.redis.xgroup("CREATE", this.keys.runStream(), RUN_GROUP, "0", "MKSTREAM").catch((err: Error) => {
      if (!/BUSYGROUP/.test(err.message)) throw err;
    });
  }

  /** Lists the consumer in XINFO CONSUMERS before its first read. */
  async createConsumer(consumer: string): Promise<void> {
    await this.redis.xgroup("CREATECONSUMER", this.keys.runStream(), RUN_GROUP, consumer);
  }

  /** Removes consumers other than `keep` idle for `minIdleMs` with nothing pending; returns how many. */
  async pruneConsumers(keep: string, minIdleMs: number): Promise<number> {
    return Number(await this.prune([this.keys.runStream()], [RUN_GROUP, minIdleMs, keep]));
  }

  /** Reads up to `count` new entries on `blocking` (a dedicated connection), waiting up to `blockMs`. */
  async read(blocking: RedisClient, consumer: string, count: number, blockMs: number): Promise<RunStreamEntry[]> {
    const res = (await blocking.xreadgroup(
      "GROUP",
      RUN_GROUP,
      consumer,
      "COUNT",
      count,
      "BLOCK",
      blockMs,
      "STREAMS",
      this.keys.runStream(),
      ">",
    )) as [string, StreamEntries][] | null;
    return parse(res?.[0]?.[1] ?? []);
  }

  /** Acknowledges and deletes settled runs; each user's oldest parked run takes the place of one of theirs. */
  async ack(entries: readonly RunStreamEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const args: string[] = [RUN_GROUP];
    for (const e of entries) args.push(e.entryId, e.userId);
    const k = this.keys;
    await this.ackScript([k.runStream(), k.runStreamCounts(), k.runParked(), k.runParkedEnds()], args);
  }

  /**
   * Once the stream is empty, clears counts left by drift and moves parked runs in (up to each
   * user's share); returns how many moved, -1 while the stream holds entries.
   */
  async heal(): Promise<number> {
    const k = this.keys;
    return Number(await this.healScript([k.runStream(), k.runStreamCounts(), k.runParked(), k.runParkedEnds()], [this.perUser]));
  }

  /** Resets the idle time of entries in hand (XCLAIM to the consumer itself, JUSTID: no delivery count). */
  async renewLease(consumer: string, ids: readonly string[]): Promise<void> {
    for (let i = 0; i < ids.length; i += 500) {
      await this.redis.xclaim(this.keys.runStream(), RUN_GROUP, consumer, 0, ...ids.slice(i, i + 500), "JUSTID");
    }
  }

  /** One XAUTOCLAIM round: entries idle for `minIdleMs`, from `cursor`; returns them and the next cursor. */
  async takeOver(consumer: string, minIdleMs: number, cursor: string, count: number): Promise<{ entries: RunStreamEntry[]; next: string }> {
    const res = (await this.redis.xautoclaim(this.keys.runStream(), RUN_GROUP, consumer, minIdleMs, cursor, "COUNT", count)) as [
      string,
      StreamEntries,
      string[]?,
    ];
    return { entries: parse((res[1] ?? []).filter((e) => e && Array.isArray(e[1]))), next: res[0] };
  }

  /**
   * What the queue monitor samples: runs waiting (in the stream and not read, or parked), runs read
   * and not yet acknowledged, and the time of the oldest entry, in one round trip.
   */
  async stats(): Promise<{ length: number; pending: number; oldestMs: number | undefined }> {
    const key = this.keys.runStream();
    const replies = await this.redis
      .pipeline()
      .xlen(key)
      .xpending(key, RUN_GROUP)
      .hlen(this.keys.runParked())
      .xrange(key, "-", "+", "COUNT", 1)
      .exec();
    const failed = (replies ?? []).find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error("run stream stats: no reply");
    const [first] = (replies[3]?.[1] as StreamEntries | undefined) ?? [];
    return {
      // Parked runs wait too: counted with the entries not yet read.
      length: Number(replies[0]?.[1] ?? 0) + Number(replies[2]?.[1] ?? 0),
      pending: Number((replies[1]?.[1] as unknown[] | undefined)?.[0] ?? 0),
      oldestMs: first ? Number(first[0].slice(0, first[0].indexOf("-"))) : undefined,
    };
  }
}

/** Entries as XREADGROUP / XAUTOCLAIM return them; one without a user or job is kept with empty fields (the caller acknowledges it). */
function parse(raw: StreamEntries): RunStreamEntry[] {
  return raw.map(([entryId, fields]) => {
    let userId = "";
    let json = "";
    for (let at = 0; at + 1 < fields.length; at += 2) {
      if (fields[at] === "u") userId = fields[at + 1] ?? "";
      else if (fields[at] === "j") json = fields[at + 1] ?? "";
    }
    return { entryId, userId, json };
  });
}
