/**
 * What fan-out lets the subscription filters of one event spend, in visits (domain/subscription-filter.ts
 * `VisitMeter`): at most `perEvent` for all of the event's listeners together, and at most what
 * the emitting user's allowance holds. The allowance is a bucket per user refilled at
 * `perSecondPerUser` visits a second and holding one second's worth, so a user whose events need
 * costly filters spends their own share of the event loop and no one else's: past it their
 * filters answer TOO_COSTLY until it refills. `perSecondPerUser` 0 leaves only the per-event bound.
 *
 * Per process, like the event loop it protects (each fan-out process has its own buckets). Pure:
 * the caller gives the time.
 */

export interface FilterBudgetLimits {
  readonly perEvent: number;
  /** 0: no per-user bound. */
  readonly perSecondPerUser: number;
}

/**
 * The operator settings' defaults (FILTER_VISITS_PER_EVENT, FILTER_VISITS_PER_SECOND_PER_USER): far
 * above what ordinary filters spend (a few visits per condition; a 64-condition filter of
 * `$contains` over 1,000-element arrays spends 64,000), and an event's worth costs milliseconds.
 */
export const FILTER_BUDGET_DEFAULTS: FilterBudgetLimits = { perEvent: 1_000_000, perSecondPerUser: 5_000_000 };

/** Which bound an event's allowance came from: the event's own, or what its user had left. */
export type FilterBudgetLimit = "event" | "user";

export interface FilterAllowance {
  readonly visits: number;
  readonly limit: FilterBudgetLimit;
}

interface Bucket {
  level: number;
  atMs: number;
}

/** Users whose buckets are kept; full buckets are dropped first, then those tracked longest. */
const DEFAULT_MAX_USERS = 10_000;

export class FilterBudgets {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    readonly limits: FilterBudgetLimits,
    private readonly maxUsers = DEFAULT_MAX_USERS,
  ) {}

  /** What the next event of `userId` may spend on its listeners' filters (0: nothing, do not even read it). */
  allowance(userId: string, nowMs: number): FilterAllowance {
    const { perEvent, perSecondPerUser } = this.limits;
    if (perSecondPerUser === 0) return { visits: perEvent, limit: "event" };
    const level = this.level(userId, nowMs);
    return level < perEvent ? { visits: Math.max(0, Math.floor(level)), limit: "user" } : { visits: perEvent, limit: "event" };
  }

  /** Charges `visits` spent by an event of `userId` (more than its allowance when the last step overran it). */
  spend(userId: string, visits: number, nowMs: number): void {
    if (this.limits.perSecondPerUser === 0 || visits <= 0) return;
    const level = this.level(userId, nowMs) - visits;
    const bucket = this.buckets.get(userId);
    if (bucket) {
      // In place (every filtered event comes here): the map's order stays the order users were first charged in.
      bucket.level = level;
      bucket.atMs = nowMs;
      return;
    }
    this.buckets.set(userId, { level, atMs: nowMs });
    if (this.buckets.size > this.maxUsers) this.prune(nowMs);
  }

  /** Users with a bucket below full (the others need no entry). */
  get size(): number {
    return this.buckets.size;
  }

  private level(userId: string, nowMs: number): number {
    const capacity = this.limits.perSecondPerUser;
    const bucket = this.buckets.get(userId);
    if (!bucket) return capacity;
    return Math.min(capacity, bucket.level + (Math.max(0, nowMs - bucket.atMs) * capacity) / 1000);
  }

  /**
   * Drops the full buckets, then, if still past the bound, those tracked longest down to 90 % of it
   * (so a crowd of users does not make every charge a sweep). A dropped user starts full again.
   */
  private prune(nowMs: number): void {
    const capacity = this.limits.perSecondPerUser;
    for (const [userId] of this.buckets) if (this.level(userId, nowMs) >= capacity) this.buckets.delete(userId);
    const keep = Math.floor(this.maxUsers * 0.9);
    for (const [userId] of this.buckets) {
      if (this.buckets.size <= keep) break;
      this.buckets.delete(userId);
    }
  }
}
