import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";

/** BullMQ's largest job priority (2^21 - 1). */
export const MAX_PRIORITY = 2_097_151;

/** How long a user's backlog count outlives its last queued run (heals a count a crash left high). */
const BACKLOG_TTL_SECONDS = 3600;

/**
 * Fair scheduling of source runs between users (docs/decisions.md "Runtime", fair share): each
 * queued run's BullMQ priority is its position in its user's backlog (1 for a user with nothing
 * queued, 1,000 for the last of a burst of 1,000). BullMQ takes the lowest priority first, FIFO
 * among equals, so the workers interleave users round-robin: another user's next run waits behind
 * at most one run of each backlogged user, never behind the whole backlog.
 *
 * The count goes up when runs are queued and down when their job ends. It only steers order: a
 * count off by a few (a fan-out redone after a crash adds jobs BullMQ already holds; a worker
 * killed between its run and its job's end) costs that user a little priority, and it expires an
 * hour after the user's last queued run.
 */
export class RunBacklog {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {}

  /** Counts `n` runs of `userId` about to be queued; returns their priorities, in order. */
  async reserve(userId: string, n: number): Promise<number[]> {
    if (n <= 0) return [];
    const key = this.keys.runBacklog(userId);
    const res = await this.redis.multi().incrby(key, n).expire(key, BACKLOG_TTL_SECONDS).exec();
    const last = Number(res?.[0]?.[1] ?? n);
    return Array.from({ length: n }, (_, i) => Math.min(MAX_PRIORITY, Math.max(1, last - n + 1 + i)));
  }

  /** Priorities for runs of several users queued together (a fan-out), by each run's user, in order. */
  async reserveAll(userIds: readonly string[]): Promise<number[]> {
    const byUser = new Map<string, number>();
    for (const u of userIds) byUser.set(u, (byUser.get(u) ?? 0) + 1);
    const given = new Map<string, number[]>();
    await Promise.all([...byUser].map(async ([u, n]) => given.set(u, await this.reserve(u, n))));
    return userIds.map((u) => given.get(u)?.shift() ?? 1);
  }

  /** One run of `userId` has ended (its job completes or fails now). */
  async done(userId: string): Promise<void> {
    const key = this.keys.runBacklog(userId);
    const left = await this.redis.decr(key);
    if (left < 0) await this.redis.set(key, 0, "EX", BACKLOG_TTL_SECONDS);
  }
}
