import { ValidationError } from "../domain/errors.js";
import { limitsView, type ResourceUsageCounts, type UserLimits } from "../domain/limits.js";
import type { UserRecord, UserStore, Plan } from "../store/users.js";
import type { Redis } from "ioredis";
import type { Keys } from "../store/keys.js";

/** UTC day used for daily quotas, e.g. "2026-11-22". */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The paid billing period: the current UTC calendar month. */
export function billingPeriod(ms: number): { start: number; end: number } {
  const d = new Date(ms);
  const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  const end = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return { start: Math.floor(start / 1000), end: Math.floor(end / 1000) };
}

export function maskKey(last4: string, length = 45): string {
  return "*".repeat(Math.max(0, length - last4.length)) + last4;
}

/** Reads usage counters written by the source runtime. */
export class UsageReader {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  async today(userId: string, nowMs: number): Promise<{ invocations: number; computeMs: number }> {
    const [inv, ms] = await this.redis.hmget(this.keys.usage(userId, utcDay(nowMs)), "invocations", "compute_ms");
    return { invocations: Number(inv ?? 0), computeMs: Math.round(Number(ms ?? 0)) };
  }

  async billing(userId: string, periodStart: number): Promise<number> {
    return Number((await this.redis.hget(this.keys.billingUsage(userId, periodStart), "invocations")) ?? 0);
  }
}

const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}\.[^\s@]{1,63}$/;

export function parseNewUser(params: Record<string, unknown>): { username: string; email: string; plan: Plan } {
  const { username, email, plan } = params;
  if (typeof username !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(username)) {
    throw new ValidationError("username must be 1-64 characters of [A-Za-z0-9_.-]");
  }
  if (typeof email !== "string" || !EMAIL.test(email)) throw new ValidationError("email must be an email address");
  const p = plan ?? "free";
  if (p !== "free" && p !== "paid") throw new ValidationError('plan must be "free" or "paid"');
  return { username, email, plan: p };
}

export class UserService {
  constructor(
    readonly store: UserStore,
    private readonly usage: UsageReader,
    private readonly quotas: { dailyInvocations: number; dailyComputeMs: number },
    private readonly now: () => number,
    /** The per-user limits and what the user keeps, shown as `limits` in GET /users/me. */
    private readonly resources: { readonly limits: UserLimits; of(userId: string): Promise<ResourceUsageCounts> },
  ) {}

  /** GET /users/me: the free or paid shape by plan, plus `limits`; the key is masked. */
  async me(user: UserRecord) {
    const base = { id: user.id, username: user.username, email: user.email };
    const nowMs = this.now();
    const limits = limitsView(this.resources.limits, await this.resources.of(user.id));
    if (user.plan === "paid") {
      const period = billingPeriod(nowMs);
      return {
        ...base,
        billing_period_start_ts: period.start,
        billing_period_end_ts: period.end,
        billing_period_invocations: await this.usage.billing(user.id, period.start),
        limits,
      };
    }
    const used = await this.usage.today(user.id, nowMs);
    return {
      ...base,
      api_key: maskKey(user.api_key_last4),
      daily_compute_time_quota: this.quotas.dailyComputeMs,
      daily_compute_time_used: used.computeMs,
      daily_invocations_quota: this.quotas.dailyInvocations,
      daily_invocations_used: used.invocations,
      limits,
    };
  }
}
