import { randomUUID } from "node:crypto";
import type { Queue } from "bullmq";
import type { RedisClient } from "../store/context.js";
import type { Logger } from "../observability/logger.js";
import { RetryLog } from "../observability/retry-log.js";
import type { Keys } from "../store/keys.js";
import type { SourceRecord, SourceStore } from "../store/sources.js";
import { type TimerRequest, TimerControlStore } from "../store/timer-control.js";

/** The BullMQ job scheduler id of a source's timer. */
export const schedulerId = (sourceId: string): string => `tick-${sourceId}`;

/** The timer of a source as stored: `{cron, interval_seconds}` under its timer prop, if any. */
export function timerOf(source: SourceRecord): { cron: string | null; intervalSeconds: number | null } | undefined {
  for (const value of Object.values(source.configured_props)) {
    if (value && typeof value === "object" && "interval_seconds" in value && "cron" in value) {
      const t = value as { cron: string | null; interval_seconds: number | null };
      return { cron: t.cron, intervalSeconds: t.interval_seconds };
    }
  }
  return undefined;
}

/** API side: asks the scheduler role to reconcile a source's timer (durable: a stream entry). */
export class TimerControl {
  private readonly store: TimerControlStore;

  constructor(redis: RedisClient, keys: Keys) {
    this.store = new TimerControlStore(redis, keys);
  }

  request(userId: string, sourceId: string): Promise<void> {
    return this.store.request(userId, sourceId);
  }
}
const LOCK_TTL_MS = 10_000;

/**
 * The scheduler role: the single owner of BullMQ job schedulers for timer sources. A Redis lock
 * elects one leader among instances; the leader reads reconcile requests through a consumer group
 * and acknowledges them only after the scheduler is upserted or removed, so a crash loses none.
 * Schedulers live in Redis, so ticks survive restarts.
 */
export class TimerScheduler {
  private running = false;
  private loop?: Promise<void>;
  private readonly owner = randomUUID();
  private leader = false;

  private readonly control: TimerControlStore;

  constructor(
    private readonly d: { redis: RedisClient; blocking: RedisClient; keys: Keys; sources: SourceStore; timers: Queue; logger: Logger },
  ) {
    this.control = new TimerControlStore(d.redis, d.keys, d.blocking);
  }

  isRunning(): boolean {
    return this.running;
  }

  private ensureGroup(): Promise<void> {
    return this.control.ensureGroup();
  }

  async start(): Promise<void> {
    await this.ensureGroup();
    this.running = true;
    this.loop = this.run();
  }

  /** Takes or renews the lock; true while this instance leads. */
  private async lead(): Promise<boolean> {
    if (this.leader) {
      // Renew only our own lock (compare-and-extend).
      this.leader = await this.control.extend(this.owner, LOCK_TTL_MS);
    } else {
      this.leader = await this.control.acquire(this.owner, LOCK_TTL_MS);
      if (this.leader) this.d.logger.info("scheduler: leading timer scheduling");
    }
    return this.leader;
  }

  private async run(): Promise<void> {
    const retries = new RetryLog(this.d.logger, "scheduler loop error; retrying", { level: "error" });
    while (this.running) {
      try {
        if (!(await this.lead())) {
          await new Promise((r) => setTimeout(r, 2000));
          continue;
        }
        // Entries a previous leader read but did not finish.
        await this.handle(await this.control.takeOver(this.owner, 100));
        await this.handle(await this.control.read(this.owner, 100, 1000));
        retries.succeeded();
      } catch (err) {
        if (!this.running) break;
        if (/NOGROUP/.test((err as Error).message)) {
          await this.ensureGroup().catch(() => {});
          continue;
        }
        retries.failed(err);
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  private async handle(requests: readonly TimerRequest[]): Promise<void> {
    for (const r of requests) {
      if (r.userId && r.sourceId) await this.reconcile(r.userId, r.sourceId);
      await this.control.done(r.id);
    }
  }

  /** Makes the job scheduler match the source: present while active with a timer, absent otherwise. */
  async reconcile(userId: string, sourceId: string): Promise<void> {
    const source = await this.d.sources.get(userId, sourceId);
    const timer = source?.active ? timerOf(source) : undefined;
    const id = schedulerId(sourceId);
    if (!timer || (!timer.cron && !timer.intervalSeconds)) {
      await this.d.timers.removeJobScheduler(id);
      return;
    }
    const repeat = timer.cron ? { pattern: timer.cron, tz: "UTC" } : { every: (timer.intervalSeconds as number) * 1000 };
    await this.d.timers.upsertJobScheduler(id, repeat, {
      name: "tick",
      data: { userId, sourceId, intervalSeconds: timer.intervalSeconds },
      opts: { removeOnComplete: { age: 600, count: 1000 }, removeOnFail: { age: 86_400, count: 1000 } },
    });
  }

  async close(): Promise<void> {
    this.running = false;
    await this.loop;
    if (this.leader) {
      await this.control.releaseLock(this.owner).catch(() => {});
    }
  }
}
