import type { RedisClient } from "../store/context.js";
import type { Keys } from "../store/keys.js";
import { type DailyLimits, type QuotaReached, UsageCounters } from "../store/usage.js";
import type { Plan } from "../store/users.js";

/** Where the quota check reads a user's plan (a UserStore, or the source cache in front of one). */
export interface UserPlans {
  /** The user's plan; undefined for a user who does not exist. */
  plan(userId: string): Promise<Plan | undefined>;
}

export type QuotaVerdict = { ok: true; plan: "free" | "paid" } | { ok: false; reason: string; retryAfterSeconds: number };

/**
 * What a step that checks the quota inside Redis needs (a queued request's accept script): the
 * verdict already, for a paid or missing user, or a free user's day counters and limits.
 */
export type QuotaGate = { decided: QuotaVerdict } | { usageKey: string; invocations: number; computeMs: number };

const MISSING: QuotaVerdict = { ok: false, reason: "user no longer exists", retryAfterSeconds: 3600 };
const PAID: QuotaVerdict = { ok: true, plan: "paid" };
const FREE: QuotaVerdict = { ok: true, plan: "free" };

/**
 * Free users' daily invocations and compute time (ms of sandbox time), reset at 00:00 UTC; paid
 * users' billing-period invocations (SPEC §5). Counters live in per-day hashes that expire.
 */
export class Quotas {
  private readonly usage: UsageCounters;

  constructor(
    redis: RedisClient,
    keys: Keys,
    private readonly users: UserPlans,
    private readonly limits: { dailyInvocations: number; dailyComputeMs: number },
    private readonly now: () => number = Date.now,
  ) {
    this.usage = new UsageCounters(redis, keys);
  }

  private secondsToMidnight(): number {
    const n = this.now();
    const d = new Date(n);
    return Math.ceil((Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1) - n) / 1000);
  }

  async check(userId: string): Promise<QuotaVerdict> {
    const gate = await this.gate(userId);
    if ("decided" in gate) return gate.decided;
    return this.verdict(await this.usage.reached(gate.usageKey, gate));
  }

  /** The quota as a script checks it (store/scripts/quota-gate.ts), for `verdict` to read its answer. */
  async gate(userId: string): Promise<QuotaGate> {
    const plan = await this.users.plan(userId);
    if (!plan) return { decided: MISSING };
    if (plan === "paid") return { decided: PAID };
    return { usageKey: this.usage.dayKey(userId, this.now()), ...this.daily() };
  }

  /** The verdict for what the quota gate found (0: under both limits). */
  verdict(reached: QuotaReached): QuotaVerdict {
    if (reached === 1) {
      return {
        ok: false,
        reason: `daily invocations quota (${this.limits.dailyInvocations}) reached`,
        retryAfterSeconds: this.secondsToMidnight(),
      };
    }
    if (reached === 2) {
      return {
        ok: false,
        reason: `daily compute time quota (${this.limits.dailyComputeMs} ms) reached`,
        retryAfterSeconds: this.secondsToMidnight(),
      };
    }
    return FREE;
  }

  private daily(): DailyLimits {
    return { invocations: this.limits.dailyInvocations, computeMs: this.limits.dailyComputeMs };
  }

  /** Counts one run and its sandbox time. */
  async record(userId: string, plan: "free" | "paid", computeMs: number): Promise<void> {
    await this.usage.countRun(userId, plan, computeMs, this.now());
  }

  /** Counts sandbox time that is not a run (lifecycle hooks) against a free user's daily compute time. */
  async recordCompute(userId: string, plan: "free" | "paid", computeMs: number): Promise<void> {
    if (plan === "free") await this.usage.countCompute(userId, computeMs, this.now());
  }
}
