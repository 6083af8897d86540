import { randomUUID } from "node:crypto";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { Logger } from "../observability/logger.js";
import type { Keys } from "../store/keys.js";
import type { SourceRecord, SourceStore } from "../store/sources.js";

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
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  async request(userId: string, sourceId: string): Promise<void> {
    await this.redis.xadd(this.keys.timerControl(), "MAXLEN", "~", "100000", "*", "u", userId, "s", sourceId);
  }
}

const GROUP = "scheduler";
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

  constructor(private readonly d: { redis: Redis; blocking: Redis; keys: Keys; sources: SourceStore; timers: Queue; logger: Logger }) {}

  isRunning(): boolean {
    return this.running;
  }

  private async ensureGroup(): Promise<void> {
    await this.d.redis.xgroup("CREATE", this.d.keys.timerControl(), GROUP, "0", "MKSTREAM").catch((err: Error) => {
      if (!/BUSYGROUP/.test(err.message)) throw err;
    });
  }

  async start(): Promise<void> {
    await this.ensureGroup();
    this.running = true;
    this.loop = this.run();
  }

  /** Takes or renews the lock; true while this instance leads. */
  private async lead(): Promise<boolean> {
    const { redis, keys } = this.d;
    const key = keys.schedulerLock();
    if (this.leader) {
      // Renew only our own lock (compare-and-extend).
      const ok = await redis.eval(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end",
        1,
        key,
        this.owner,
        LOCK_TTL_MS,
      );
      this.leader = ok === 1;
    } else {
      this.leader = (await redis.set(key, this.owner, "PX", LOCK_TTL_MS, "NX")) === "OK";
      if (this.leader) this.d.logger.info("scheduler: leading timer scheduling");
    }
    return this.leader;
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        if (!(await this.lead())) {
          await new Promise((r) => setTimeout(r, 2000));
          continue;
        }
        // Entries a previous leader read but did not finish.
        const claimed = (await this.d.redis.xautoclaim(this.d.keys.timerControl(), GROUP, this.owner, 0, "0-0", "COUNT", 100)) as [
          string,
          [string, string[]][],
        ];
        await this.handle(claimed[1] ?? []);
        const res = (await this.d.blocking.xreadgroup(
          "GROUP",
          GROUP,
          this.owner,
          "COUNT",
          100,
          "BLOCK",
          1000,
          "STREAMS",
          this.d.keys.timerControl(),
          ">",
        )) as [string, [string, string[]][]][] | null;
        await this.handle(res?.[0]?.[1] ?? []);
      } catch (err) {
        if (!this.running) break;
        if (/NOGROUP/.test((err as Error).message)) {
          await this.ensureGroup().catch(() => {});
          continue;
        }
        this.d.logger.error({ err }, "scheduler loop error; retrying");
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  private async handle(entries: [string, string[]][]): Promise<void> {
    for (const [id, fields] of entries) {
      if (!Array.isArray(fields)) continue;
      const f: Record<string, string> = {};
      for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i] as string] = fields[i + 1] as string;
      if (f.u && f.s) await this.reconcile(f.u, f.s);
      await this.d.redis.multi().xack(this.d.keys.timerControl(), GROUP, id).xdel(this.d.keys.timerControl(), id).exec();
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
      await this.d.redis
        .eval(
          "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
          1,
          this.d.keys.schedulerLock(),
          this.owner,
        )
        .catch(() => {});
    }
  }
}
