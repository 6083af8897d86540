import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { LOCK_RELEASE } from "./scripts/lock-release.js";
import { LOCK_RENEW } from "./scripts/lock-renew.js";

const GROUP = "scheduler";

/** A reconcile request: which source's timer to make match its record. */
export interface TimerRequest {
  readonly id: string;
  readonly userId: string | undefined;
  readonly sourceId: string | undefined;
}

type Entries = [string, string[]][];

function parse(entries: Entries): TimerRequest[] {
  const out: TimerRequest[] = [];
  for (const [id, fields] of entries) {
    if (!Array.isArray(fields)) continue;
    const f: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i] as string] = fields[i + 1] as string;
    out.push({ id, userId: f.u, sourceId: f.s });
  }
  return out;
}

/**
 * The timer control stream (API → scheduler role: "reconcile this source's timer", durable as a
 * stream entry read through a consumer group) and the lock that elects the one scheduler leader.
 */
export class TimerControlStore {
  private readonly renew: ScriptCall;
  private readonly release: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    /** A dedicated connection for blocking reads; only the scheduler role needs one. */
    private readonly blocking?: RedisClient,
  ) {
    this.renew = defineScript(redis, LOCK_RENEW);
    this.release = defineScript(redis, LOCK_RELEASE);
  }

  async request(userId: string, sourceId: string): Promise<void> {
    await this.redis.xadd(this.keys.timerControl(), "MAXLEN", "~", "100000", "*", "u", userId, "s", sourceId);
  }

  async ensureGroup(): Promise<void> {
    await this.redis.xgroup("CREATE", this.keys.timerControl(), GROUP, "0", "MKSTREAM").catch((err: Error) => {
      if (!/BUSYGROUP/.test(err.message)) throw err;
    });
  }

  /** Takes the leader lock for `ttlMs` if nobody holds it. */
  async acquire(owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(this.keys.schedulerLock(), owner, "PX", ttlMs, "NX")) === "OK";
  }

  /** Extends the lock while `owner` holds it; false when it was lost. */
  async extend(owner: string, ttlMs: number): Promise<boolean> {
    return Number(await this.renew([this.keys.schedulerLock()], [owner, ttlMs])) === 1;
  }

  async releaseLock(owner: string): Promise<void> {
    await this.release([this.keys.schedulerLock()], [owner]);
  }

  /** Requests a previous reader took but did not acknowledge (up to `count`). */
  async takeOver(consumer: string, count: number): Promise<TimerRequest[]> {
    const res = (await this.redis.xautoclaim(this.keys.timerControl(), GROUP, consumer, 0, "0-0", "COUNT", count)) as [string, Entries];
    return parse(res[1] ?? []);
  }

  /** New requests, blocking up to `blockMs` on the blocking connection. */
  async read(consumer: string, count: number, blockMs: number): Promise<TimerRequest[]> {
    const conn = this.blocking ?? this.redis;
    const res = (await conn.xreadgroup(
      "GROUP",
      GROUP,
      consumer,
      "COUNT",
      count,
      "BLOCK",
      blockMs,
      "STREAMS",
      this.keys.timerControl(),
      ">",
    )) as [string, Entries][] | null;
    return parse(res?.[0]?.[1] ?? []);
  }

  /** Acknowledges and deletes a handled request. */
  async done(id: string): Promise<void> {
    await this.redis.multi().xack(this.keys.timerControl(), GROUP, id).xdel(this.keys.timerControl(), id).exec();
  }
}
