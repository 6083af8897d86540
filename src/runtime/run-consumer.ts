import type { RedisClient } from "../store/context.js";
import type { Logger } from "../observability/logger.js";
import { RetryLog } from "../observability/retry-log.js";
import { type SourceRunJob, sourceRunJob } from "../queue/catalog.js";
import type { RunStream, RunStreamEntry } from "../store/run-stream.js";
import type { RunSlots } from "./run-slots.js";

/** How often a consumer prunes, and how long a consumer must have been idle to go. */
const PRUNE_EVERY_MS = 10 * 60_000;
const PRUNE_IDLE_MS = 60 * 60_000;
/** How long a read waits for new entries. */
const READ_BLOCK_MS = 1000;

export interface RunConsumerDeps {
  stream: RunStream;
  /** A dedicated connection: XREADGROUP blocks it. Closed by close(). */
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
 * Reads the run stream through its consumer group and runs each entry, at most as many at once
 * as the process has run slots (shared with the BullMQ overflow worker); it holds no more entries
 * than that, so the rest stay in the stream for other processes. An entry is acknowledged once its
 * run settled; the leases of entries in hand are renewed, so only a dead (or stuck) consumer's
 * entries go idle, and those are taken over (XAUTOCLAIM) and run again: at least once.
 */
export class RunConsumer {
  private running = false;
  private loop?: Promise<void>;
  private readonly inHand = new Map<string, Promise<void>>();
  private lastClaim = 0;
  private lastLease = 0;
  private lastPrune = 0;
  private claimCursor = "0-0";
  /** Resolves the loop's wait for room once a run settles. */
  private roomFreed?: () => void;

  constructor(private readonly d: RunConsumerDeps) {}

  async start(): Promise<void> {
    await this.d.stream.ensureGroup();
    await this.d.stream.createConsumer(this.d.consumer);
    this.running = true;
    this.loop = this.run();
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

  private async run(): Promise<void> {
    const { d } = this;
    const retries = new RetryLog(d.logger, "source run consumer error; retrying", { level: "error" });
    while (this.running) {
      try {
        const now = Date.now();
        if (now - this.lastClaim > Math.min(d.claimIdleMs / 2, 5000)) {
          this.lastClaim = now;
          await this.reclaim();
          // An empty stream with runs still parked or counted: drift, healed (store/scripts/run-stream-heal.ts).
          const healed = await d.stream.heal();
          if (healed > 0) d.logger.warn({ healed }, "source runs: moved parked runs into an empty run stream (counts had drifted)");
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
        const room = this.room();
        if (room <= 0) {
          await this.waitForRoom();
          continue;
        }
        for (const e of await d.stream.read(d.blocking, d.consumer, room, READ_BLOCK_MS)) this.take(e);
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

  /** Waits until a run in hand settles (or a second passes: the claim and lease timers go on). */
  private waitForRoom(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, READ_BLOCK_MS);
      this.roomFreed = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** One XAUTOCLAIM round, no more entries than there is room for; the cursor goes on next time. */
  private async reclaim(): Promise<void> {
    const room = this.room();
    if (room <= 0) return;
    const { entries, next } = await this.d.stream.takeOver(this.d.consumer, this.d.claimIdleMs, this.claimCursor, room);
    this.claimCursor = next;
    if (entries.length > 0) this.d.logger.info({ count: entries.length }, "source runs: took over runs of a stopped consumer");
    for (const e of entries) this.take(e);
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
        this.roomFreed = undefined;
        wake?.();
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
    await this.loop;
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
