import type { Redis } from "ioredis";
import { billingPeriod, utcDay } from "../services/users.js";
import type { Keys } from "../store/keys.js";
import type { UserStore } from "../store/users.js";

export type QuotaVerdict = { ok: true; plan: "free" | "paid" } | { ok: false; reason: string; retryAfterSeconds: number };

/**
 * Free users' daily invocations and compute time (ms of sandbox time), reset at 00:00 UTC; paid
 * users' billing-period invocations (SPEC §5). Counters live in per-day hashes that expire.
 */
export class Quotas {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly users: UserStore,
    private readonly limits: { dailyInvocations: number; dailyComputeMs: number },
    private readonly now: () => number = Date.now,
  ) {}

  private secondsToMidnight(): number {
    const n = this.now();
    const d = new Date(n);
    return Math.ceil((Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1) - n) / 1000);
  }

  async check(userId: string): Promise<QuotaVerdict> {
    const user = await this.users.get(userId);
    if (!user) return { ok: false, reason: "user no longer exists", retryAfterSeconds: 3600 };
    if (user.plan === "paid") return { ok: true, plan: "paid" };
    const [inv, ms] = await this.redis.hmget(this.keys.usage(userId, utcDay(this.now())), "invocations", "compute_ms");
    if (Number(inv ?? 0) >= this.limits.dailyInvocations) {
      return {
        ok: false,
        reason: `daily invocations quota (${this.limits.dailyInvocations}) reached`,
        retryAfterSeconds: this.secondsToMidnight(),
      };
    }
    if (Number(ms ?? 0) >= this.limits.dailyComputeMs) {
      return {
        ok: false,
        reason: `daily compute time quota (${this.limits.dailyComputeMs} ms) reached`,
        retryAfterSeconds: this.secondsToMidnight(),
      };
    }
    return { ok: true, plan: "free" };
  }

  /** Counts one run and its sandbox time. */
  async record(userId: string, plan: "free" | "paid", computeMs: number): Promise<void> {
    const nowMs = this.now();
    if (plan === "paid") {
      const key = this.keys.billingUsage(userId, billingPeriod(nowMs).start);
      await this.redis
        .multi()
        .hincrby(key, "invocations", 1)
        .expire(key, 40 * 86_400)
        .exec();
      return;
    }
    const key = this.keys.usage(userId, utcDay(nowMs));
    await this.redis
      .multi()
      .hincrby(key, "invocations", 1)
      .hincrbyfloat(key, "compute_ms", Math.max(0, computeMs))
      .expire(key, 2 * 86_400)
      .exec();
  }
}
