import type { RedisClient } from "../store/context.js";
import type { Logger } from "../observability/logger.js";
import { RetryLog } from "../observability/retry-log.js";
import { type SourceRunJob, sourceRunJob } from "../queue/catalog.js";
import type { RunStream, RunStreamEntry } from "../store/run-stream.js";
import { type ReadGroup, shardOfRef } from "../store/shard-streams.js";
import type { RunSlots } from "./run-slots.js";

/** How often a consumer prunes, and how long a consumer must have been idle to go. */
const PRUNE_EVERY_MS = 10 * 60_000;
const PRUNE_IDLE_MS = 60 * 60_000;
/** How long a read waits for new entries. */
const READ_BLOCK_MS = 1000;

export interface RunConsumerDeps {
  /** The run streams, made with this consumer's blocking connection (`reads`): its read groups. */
  stream: RunStream;
  /** The dedicated connection the stream's first read group blocks on. Closed by close(). */
  blocking: RedisClient;
  consumer: string;
  slots: RunSlots;
  /** Pending entries idle longer than this are taken over from a dead consumer (the run time limit plus a margin). */
  claimIdleMs: number;
  /** Runs one job to its end (SourceRunner.run: a run's own failure is recorded on $errors, not thrown). */
  execute(job: SourceRunJob): Promise<void>;
  logger: Logger;
}

/**
 * Reads the run streams (one per shard) through their consumer group and runs each entry, at most
 * as many at once as the process has run slots (shared with the BullMQ overflow worker); it reads
 * only while it has room, and about as many entries as it has room for, so the rest stay in the
 * streams for other processes. An entry is acknowledged once its run settled; the
 * leases of entries in hand are renewed, so only a dead (or stuck) consumer's entries go idle,
 * and those are taken over (XAUTOCLAIM, shard by shard) and run again: at least once. On one node
 * one loop reads every shard; on a cluster there is a loop per shard (store/shard-streams.ts read
 * groups), and the first one also keeps house (take-overs, leases, heals, pruning).
 */
export class RunConsumer {
  private running = false;
  private loops: Promise<void>[] = [];
  private readonly inHand = new Map<string, Promise<void>>();
  private lastClaim = 0;
  private lastLease = 0;
  private lastPrune = 0;
  /** Each shard's XAUTOCLAIM cursor. */
  private readonly claimCursors = new Map<number, string>();
  /** Resolve the loops' waits for room once a run settles. */
  private roomFreed: (() => void)[] = [];

  constructor(private readonly d: RunConsumerDeps) {}

  async start(): Promise<void> {
    await this.d.stream.ensureGroup();
    await this.d.stream.createConsumer(this.d.consumer);
    // The first loop's first housekeeping, before its first read, adopts runs of the old single stream.
    this.running = true;
    this.loops = this.d.stream.readGroups().map((group, i) => this.run(group, i === 0));
  }

  /** Moves runs left in the one run stream of earlier versions into the shard streams (RunStream.adoptLegacy). */
  private async adoptLegacy(): Promise<void> {
    const moved = await this.d.stream.adoptLegacy();
    if (moved > 0) this.d.logger.info({ moved }, "source runs: moved runs of the earlier single run stream into the shard streams");
  }

  isRunning(): boolean {
    return this.running;
  }

  /** Runs in hand (read or taken over, not yet acknowledged). */
  inFlight(): number {
    return this.inHand.size;
  }

  private room(): number {
    return this.d.slots.size - this.inHand.size;
  }

  private async run(group: ReadGroup, keepsHouse: boolean): Promise<void> {
    const { d } = this;
    const retries = new RetryLog(d.logger, "source run consumer error; retrying", { level: "error" });
    // A read's COUNT applies to each stream: each shard is asked for the free slots shared among
    // the shards that had runs at the last read (every shard of the group at first), so a read
    // brings about as many runs as there are free slots, and one busy shard alone still fills them.
    let spread = group.shards.length;
    while (this.running) {
      try {
        if (keepsHouse) await this.keepHouse();
        const room = this.room();
        if (room <= 0) {
          await this.waitForRoom();
          continue;
        }
        const entries = await d.stream.read(group, d.consumer, Math.ceil(room / spread), READ_BLOCK_MS);
        if (entries.length > 0) spread = new Set(entries.map((e) => shardOfRef(e.entryId))).size;
        for (const e of entries) this.take(e);
        retries.succeeded();
      } catch (err) {
        if (!this.running) break;
        if (/NOGROUP/.test((err as Error).message)) {
          await d.stream.ensureGroup().catch(() => {});
          continue;
        }
        retries.failed(err);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // Stopping: let the runs in hand settle and acknowledge them (if this fails, they are taken over and redone).
    await Promise.all(this.inHand.values());
  }

  /** Take-overs, heals and the adoption of old runs every few seconds; lease renewals; pruning now and then. */
  private async keepHouse(): Promise<void> {
    const { d } = this;
    const now = Date.now();
    if (now - this.lastClaim > Math.min(d.claimIdleMs / 2, 5000)) {
      this.lastClaim = now;
      await this.reclaim();
      // An empty stream with runs still parked or counted: drift, healed (store/scripts/run-stream-heal.ts).
      const healed = await d.stream.heal();
      if (healed > 0) d.logger.warn({ healed }, "source runs: moved parked runs into an empty run stream (counts had drifted)");
      // A process of an earlier version may still have added to the old single stream (a rolling upgrade).
      await this.adoptLegacy();
    }
    if (this.inHand.size > 0 && now - this.lastLease > d.claimIdleMs / 3) {
      this.lastLease = now;
      await d.stream.renewLease(d.consumer, [...this.inHand.keys()]);
    }
    if (now - this.lastPrune > PRUNE_EVERY_MS) {
      this.lastPrune = now;
      const removed = await d.stream.pruneConsumers(d.consumer, PRUNE_IDLE_MS);
      if (removed > 0) d.logger.info({ removed }, "source runs: removed consumers of stopped processes");
    }
  }

  /** Waits until a run in hand settles (or a second passes: the claim and lease timers go on). */
  private waitForRoom(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, READ_BLOCK_MS);
      this.roomFreed.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** One XAUTOCLAIM round on each shard, no more entries than there is room for; each shard's cursor goes on next time. */
  private async reclaim(): Promise<void> {
    for (const shard of this.d.stream.all()) {
      const room = this.room();
      if (room <= 0) return;
      const cursor = this.claimCursors.get(shard) ?? "0-0";
      const { entries, next } = await this.d.stream.takeOverRuns(shard, this.d.consumer, this.d.claimIdleMs, cursor, room);
      this.claimCursors.set(shard, next);
      if (entries.length > 0) this.d.logger.info({ count: entries.length, shard }, "source runs: took over runs of a stopped consumer");
      for (const e of entries) this.take(e);
    }
  }

  /** Runs an entry once a slot is free, then acknowledges it; a failure leaves it pending, to be taken over. */
  private take(e: RunStreamEntry): void {
    if (this.inHand.has(e.entryId)) return;
    const { d } = this;
    const settled = this.execute(e)
      .then(() => d.stream.ack([e]))
      .catch((err) => d.logger.error({ err, entryId: e.entryId }, "source run from the stream failed; it will be redone"))
      .finally(() => {
        this.inHand.delete(e.entryId);
        const wake = this.roomFreed;
        this.roomFreed = [];
        for (const w of wake) w();
      });
    this.inHand.set(e.entryId, settled);
  }

  private async execute(e: RunStreamEntry): Promise<void> {
    const job = parseJob(e.json);
    if (!job) {
      this.d.logger.warn({ entryId: e.entryId }, "source runs: dropping malformed run stream entry");
      return;
    }
    await this.d.slots.take("stream");
    try {
      await this.d.execute(job);
    } finally {
      this.d.slots.release();
    }
  }

  /** Stops reading, lets the runs in hand settle, closes the blocking connection. Idempotent. */
  async close(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    this.d.stream.close();
    await this.d.blocking.quit().catch(() => this.d.blocking.disconnect());
  }
}

function parseJob(json: string): SourceRunJob | undefined {
  try {
    const r = sourceRunJob.safeParse(JSON.parse(json));
    return r.success ? r.data : undefined;
  } catch {
    return undefined;
  }
}
