import type { Queue } from "bullmq";
import { type DeliverySelectors, selectorsIdentity } from "../domain/delivery-query.js";
import type { Logger } from "../observability/logger.js";
import { RetryLog } from "../observability/retry-log.js";
import type { AttemptLog } from "../store/attempt-log.js";
import { normalizeChannel } from "../store/keys.js";
import type { ReplayRef, ReplayState, ReplayStore } from "../store/replays.js";
import { type DeliveryJobQueue, replayJob, replayJobId } from "./jobs.js";
import { replayedRecord } from "./replay.js";

/**
 * Bulk replay (SPEC §12): `plan` matches the failed deliveries and stores the replay (plan first,
 * then the record: what is acknowledged with 202 is in Redis); the ReplayDriver of one worker
 * process at a time queues them progressively, at REPLAY_RATE_PER_SECOND shared between users in
 * turn, as low-priority jobs.
 *
 * Live traffic keeps its pace: BullMQ takes every job of the wait list (live deliveries, retries)
 * before any prioritized job, and replay jobs carry the lowest priority; the driver also waits
 * while a second's worth of prioritized jobs is still waiting, so the plan in Redis, not the
 * queue, holds the backlog.
 */

/** BullMQ's largest priority: replay jobs come after every other delivery job. */
export const REPLAY_PRIORITY = 2 ** 21 - 1;

export interface ReplayPlanner {
  readonly log: AttemptLog;
  readonly replays: ReplayStore;
}

/** How many deliveries of the webhook a replay with `selectors` would re-queue now (dry run). */
export function countReplayable(d: ReplayPlanner, userId: string, webhookId: string, selectors: DeliverySelectors): Promise<number> {
  return d.log.count(userId, webhookId, selectors);
}

/** Plans and records a replay (or finds the identical one still queueing). */
export async function planReplay(
  d: ReplayPlanner,
  userId: string,
  webhookId: string,
  selectors: DeliverySelectors,
): Promise<{ id: string; matched: number }> {
  const ids = await d.log.matching(userId, webhookId, selectors);
  // Oldest first: a replay re-sends in the order the events happened.
  ids.reverse();
  return d.replays.start(userId, webhookId, selectorsIdentity(selectors, normalizeChannel), selectors, ids);
}

export interface ReplayDriverDeps {
  readonly replays: ReplayStore;
  readonly log: AttemptLog;
  readonly jobs: DeliveryJobQueue;
  /** The delivery queue, read for its prioritized (replay) backlog. */
  readonly queue: Pick<Queue, "getPrioritizedCount">;
  /** Deliveries queued per second by all replays together. */
  readonly ratePerSecond: number;
  /** This process's lease owner token. */
  readonly owner: string;
  readonly logger: Logger;
  readonly tickMs?: number;
  readonly now?: () => number;
}

/** The driver lease outlives a few ticks: a process that dies hands over within this. */
const LEASE_MS = 10_000;
/** Users served per tick at most (least recently served first); the rest wait for the next tick. */
const USERS_PER_TICK = 100;
/** A user's replays looked at per turn (oldest first), past those already queued to their end. */
const REPLAYS_PER_TURN = 10;
/** Plan entries examined per round trip. */
const CHUNK = 100;

/**
 * Queues the plans of bulk replays at a bounded rate, in whichever worker process holds the lease.
 * Each delivery is claimed with a compare-and-set (failed → pending, `replay_id`), then queued
 * with a job id of its replay number, then the chunk is counted (REPLAY_ADVANCE). A driver that
 * dies between the steps leaves claimed records pending with this replay's id: the next driver
 * redoes the chunk from the same cursor and re-adds their jobs under the same ids (BullMQ adds
 * nothing twice), and finds those that settled meanwhile in the replay's outcome sets.
 */
export class ReplayDriver {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private tokens = 0;
  private lastMs: number;
  private readonly tickMs: number;
  private readonly now: () => number;
  /** A Redis outage fails every tick (five a second): the first failure and a reminder now and then. */
  private readonly retries: RetryLog;

  constructor(private readonly d: ReplayDriverDeps) {
    this.tickMs = d.tickMs ?? 200;
    this.now = d.now ?? Date.now;
    this.lastMs = this.now();
    this.retries = new RetryLog(d.logger, "bulk replay driver tick failed");
  }

  start(): void {
    this.stopped = false;
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.tick()
        .then(
          () => this.retries.succeeded(),
          (err: unknown) => this.retries.failed(err),
        )
        .finally(() => {
          this.running = undefined;
          this.schedule();
        });
    }, this.tickMs);
    this.timer.unref?.();
  }

  /**
   * One round: refill the rate budget, then share it between the users with replays queueing, in
   * turn: each gets an equal part (at least one delivery), taken from its oldest replay, and goes
   * behind the others; users the budget did not reach come first next round. So a user's replay
   * waits for one part of every other user's, never for their whole replays.
   */
  async tick(): Promise<void> {
    const nowMs = this.now();
    const rate = this.d.ratePerSecond;
    this.tokens = Math.min(rate, this.tokens + ((nowMs - this.lastMs) * rate) / 1000);
    this.lastMs = nowMs;
    if (this.tokens < 1) return;
    const users = await this.d.replays.turns(Math.min(USERS_PER_TICK, Math.floor(this.tokens)));
    if (users.length === 0) return;
    if (!(await this.d.replays.lease(this.d.owner, LEASE_MS))) return;
    // Workers behind on earlier replay jobs: let them catch up (live jobs never wait for these).
    if ((await this.d.queue.getPrioritizedCount()) >= rate) return;
    const share = Math.max(1, Math.floor(this.tokens / users.length));
    for (const userId of users) {
      if (this.stopped || this.tokens < 1) break;
      this.tokens -= await this.turn(userId, Math.min(share, Math.floor(this.tokens)));
      await this.d.replays.served(userId, this.now());
    }
  }

  /** A user's turn: up to `budget` entries of its oldest replay that has any left; returns how many it examined. */
  private async turn(userId: string, budget: number): Promise<number> {
    const refs = await this.d.replays.queueingOf(userId, REPLAYS_PER_TURN);
    if (refs.length === 0) await this.d.replays.retire(userId);
    for (const ref of refs) {
      if (this.stopped) break;
      const examined = await this.drive(ref, budget);
      if (examined > 0) return examined;
    }
    return 0;
  }

  /** Queues up to `budget` plan entries of one replay; returns how many it examined. */
  private async drive(ref: ReplayRef, budget: number): Promise<number> {
    const r = await this.d.replays.get(ref.userId, ref.id);
    if (!r || r.cursor >= r.matched) {
      await this.d.replays.done(ref);
      return 0;
    }
    const ids = await this.d.replays.planChunk(r.userId, r.id, r.cursor, Math.min(budget, CHUNK));
    if (ids.length === 0) {
      await this.d.replays.done(ref);
      return 0;
    }
    const queued = await this.queueChunk(r, ids);
    if (!(await this.d.replays.advance(r, ids.length, queued))) this.d.logger.debug({ replay: r.id }, "replay chunk counted elsewhere");
    return ids.length;
  }

  /** Claims and queues the chunk's deliveries that are still failed; returns how many count as queued. */
  private async queueChunk(r: ReplayState, ids: readonly string[]): Promise<number> {
    const [reads, settled] = await Promise.all([this.d.log.readForClaim(r.userId, ids), this.d.replays.settledAmong(r.userId, r.id, ids)]);
    const nowS = Math.floor(this.now() / 1000);
    let queued = settled.size;
    const claims = await Promise.all(
      reads.map(async (read) => {
        const d = read.record;
        // Queued by this replay before a restart, and settled since: counted, never claimed again.
        if (settled.has(d.id) || d.listener_id !== r.webhookId) return undefined;
        // Claimed by this replay before a restart, maybe not queued: queued again under the same job id.
        if (d.status === "pending" && d.replay_id === r.id) return d;
        if (d.status !== "failed") return undefined;
        const next = replayedRecord(d, nowS, r.id);
        return (await this.d.log.claim(read, next)) ? next : undefined;
      }),
    );
    const jobs = claims.filter((c) => c !== undefined);
    await Promise.all(jobs.map((c) => this.d.jobs.add(replayJob(c), { jobId: replayJobId(c.id, c.replays), priority: REPLAY_PRIORITY })));
    queued += jobs.length;
    return queued;
  }

  /** Stops ticking, waits for a tick in progress and hands the lease over. Idempotent. */
  async close(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    await this.d.replays.releaseLease(this.d.owner).catch(() => {});
  }
}
