import { ValidationError } from "../domain/errors.js";
import { billingPeriod } from "../domain/billing-period.js";
import { limitsView, type ResourceUsageCounts, type UserLimits } from "../domain/limits.js";
import type { UserRecord, UserStore, Plan } from "../store/users.js";

export function maskKey(last4: string, length = 45): string {
  return "*".repeat(Math.max(0, length - last4.length)) + last4;
}

/** Reads usage counters written by the source runtime (store/usage.ts). */
export interface UsageReader {
  today(userId: string, nowMs: number): Promise<{ invocations: number; computeMs: number }>;
  billing(userId: string, periodStart: number): Promise<number>;
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
      daily_compute_time_used: Math.round(used.computeMs),
      daily_invocations_quota: this.quotas.dailyInvocations,
      daily_invocations_used: used.invocations,
      limits,
    };
  }
}
