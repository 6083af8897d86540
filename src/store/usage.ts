import type { RedisClient } from "./context.js";
import { billingPeriod, utcDay } from "../domain/billing-period.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { QUOTA_CHECK } from "./scripts/quota-gate.js";
import { USAGE_COUNT } from "./scripts/usage-count.js";

/** A free user's daily limits (runtime/quotas.ts). */
export interface DailyLimits {
  readonly invocations: number;
  readonly computeMs: number;
}

/** What the quota check finds: under both limits (0), the invocations reached (1), the compute time reached (2). */
export type QuotaReached = 0 | 1 | 2;

/**
 * Usage counters of source runs (SPEC §5): per UTC day for free users (invocations and compute ms,
 * in hashes kept two days) and per billing period for paid users (invocations, kept 40 days).
 * Written by the source runtime, read by its quota check and by `/users/me`.
 */
export class UsageCounters {
  private readonly count: ScriptCall;
  private readonly check: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {
    this.count = defineScript(redis, USAGE_COUNT);
    this.check = defineScript(redis, QUOTA_CHECK);
  }

  /** The hash of a user's counters of the day at `nowMs` (`quota` reads it; a request's accept script too). */
  dayKey(userId: string, nowMs: number): string {
    return this.keys.usage(userId, utcDay(nowMs));
  }

  /** Which of a free user's daily limits the day's counters (`dayKey`) reached (store/scripts/quota-gate.ts). */
  async reached(dayKey: string, limits: DailyLimits): Promise<QuotaReached> {
    const n = Number(await this.check([dayKey], [limits.invocations, limits.computeMs]));
    return n === 1 || n === 2 ? n : 0;
  }

  /** The day's counters at `nowMs`. */
  async today(userId: string, nowMs: number): Promise<{ invocations: number; computeMs: number }> {
    const [inv, ms] = await this.redis.hmget(this.keys.usage(userId, utcDay(nowMs)), "invocations", "compute_ms");
    return { invocations: Number(inv ?? 0), computeMs: Number(ms ?? 0) };
  }

  /** Invocations in the billing period starting at `periodStart` (seconds). */
  async billing(userId: string, periodStart: number): Promise<number> {
    return Number((await this.redis.hget(this.keys.billingUsage(userId, periodStart), "invocations")) ?? 0);
  }

  /** Counts one run: in the billing period for paid users, else in the day with its sandbox time. */
  async countRun(userId: string, plan: "free" | "paid", computeMs: number, nowMs: number): Promise<void> {
    // One script call rather than a MULTI: it goes out in the same write as the run's other commands.
    if (plan === "paid") {
      await this.count([this.keys.billingUsage(userId, billingPeriod(nowMs).start)], [1, "", 40 * 86_400]);
      return;
    }
    await this.count([this.keys.usage(userId, utcDay(nowMs))], [1, Math.max(0, computeMs), 2 * 86_400]);
  }

  /** Adds sandbox time without an invocation (lifecycle hooks): free users' daily compute time. */
  async countCompute(userId: string, computeMs: number, nowMs: number): Promise<void> {
    await this.count([this.keys.usage(userId, utcDay(nowMs))], [0, Math.max(0, computeMs), 2 * 86_400]);
  }
}
