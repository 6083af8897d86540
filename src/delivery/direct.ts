import { JOB_STARTS, NOT_QUEUED } from "../domain/delivery-plan.js";
import type { Logger } from "../observability/logger.js";
import type { DeliveryJob } from "../queue/catalog.js";
import type { Attempter } from "./attempt.js";
import { continueDelivery, type DeliveryJobQueue } from "./jobs.js";

/**
 * A counting semaphore whose waits are bounded: `acquire` resolves false when no slot freed within
 * the wait. Released slots go to the oldest waiter first.
 */
export class Slots {
  private used = 0;
  private readonly waiters: ((ok: boolean) => void)[] = [];

  constructor(readonly size: number) {}

  get inUse(): number {
    return this.used;
  }

  tryAcquire(): boolean {
    if (this.used >= this.size) return false;
    this.used++;
    return true;
  }

  /** A slot, waiting at most `waitMs` for one; false when none freed in time. */
  acquire(waitMs: number): Promise<boolean> {
    if (this.tryAcquire()) return Promise.resolve(true);
    if (waitMs <= 0) return Promise.resolve(false);
    return new Promise((resolve) => {
      const waiter = (ok: boolean) => {
        clearTimeout(timer);
        resolve(ok);
      };
      const timer = setTimeout(() => {
        const at = this.waiters.indexOf(waiter);
        if (at >= 0) this.waiters.splice(at, 1);
        resolve(false);
      }, waitMs);
      this.waiters.push(waiter);
    });
  }

  release(): void {
    const next = this.waiters.shift();
    // The slot passes straight to the oldest waiter (the count stays as it is).
    if (next) next(true);
    else if (this.used > 0) this.used--;
  }
}

export interface DirectDeliveryDeps {
  /** Makes a delivery's first attempt and acts on its verdict, as for a queued job. */
  attempter: Pick<Attempter, "attempt">;
  /** The delivery queue, where retries (and deliveries that could not go direct) continue. */
  jobs: Pick<DeliveryJobQueue, "add">;
  /** First attempts in flight at once (DELIVERY_DIRECT_CONCURRENCY). */
  concurrency: number;
  /**
   * An attempt in flight for this long means the slots are held by slow destinations: fan-out
   * then queues deliveries that find no free slot instead of waiting for one.
   */
  clogMs: number;
  logger: Logger;
  now?: () => number;
}

/**
 * How long fan-out may wait for a slot when all are taken, given when the oldest attempt in flight
 * started: until that attempt would count as slow (`clogMs`), and not at all once it does. Slots
 * held by quick attempts free up in moments, so waiting costs less than a queued job; slots held
 * by a slow destination would stall fan-out for everyone, so the delivery is queued at once.
 */
export function slotWaitMs(oldestStartMs: number, nowMs: number, clogMs: number): number {
  return Math.max(0, clogMs - Math.max(0, nowMs - oldestStartMs));
}

/**
 * Direct delivery (docs/decisions.md "Direct first attempts"): fan-out makes a delivery's first
 * attempt itself, in the worker process that read the event, instead of adding a BullMQ job and
 * waiting for a worker to take it. The first attempt of a healthy destination is most of the
 * traffic, and a queue round costs more CPU than the HTTP request it carries. Retries go to the
 * delivery queue as jobs that carry the attempts already made, so the schedule, the attempt log
 * and the headers continue where the first attempt stopped.
 *
 * The outbox entry stays pending in the consumer group until every direct attempt of its event
 * settles (see FanoutWorker), so a process that dies mid-attempt leaves the entry to be taken over
 * and redone through the queue: at least once, as before.
 *
 * Bounded: at most `concurrency` attempts in flight. When every slot is taken, fan-out waits for
 * one only while the oldest attempt in flight is younger than `clogMs` (see slotWaitMs), else it
 * queues the delivery, so slow destinations holding the slots cannot stall fan-out for everyone.
 */
export class DirectDelivery {
  private readonly slots: Slots;
  private readonly now: () => number;
  /** Start times of the attempts in flight; a Map keeps insertion order, so the first is the oldest. */
  private readonly started = new Map<number, number>();
  private nextToken = 0;

  constructor(private readonly d: DirectDeliveryDeps) {
    this.slots = new Slots(d.concurrency);
    this.now = d.now ?? Date.now;
  }

  /**
   * Starts `job`'s first attempt if a slot is (or soon becomes) free. Resolves undefined when there
   * is none (the caller queues the job), else to the attempt's settlement: true once the delivery
   * is in hand (delivered, given up, skipped, or its retries queued), false when it is not (Redis
   * failed us; the outbox entry must stay pending to be redone).
   */
  async start(job: DeliveryJob): Promise<{ settled: Promise<boolean> } | undefined> {
    if (!this.slots.tryAcquire()) {
      const oldest = this.started.values().next().value;
      const waitMs = oldest === undefined ? this.d.clogMs : slotWaitMs(oldest, this.now(), this.d.clogMs);
      if (!(await this.slots.acquire(waitMs))) return undefined;
    }
    return { settled: this.run(job) };
  }

  private async run(job: DeliveryJob): Promise<boolean> {
    const token = this.nextToken++;
    this.started.set(token, this.now());
    try {
      const outcome = await this.d.attempter.attempt(job, NOT_QUEUED);
      if (outcome?.kind === "retry") await this.d.jobs.add(continueDelivery(job, JOB_STARTS.directRetry), { delayMs: outcome.delayMs });
      // Over the webhook's rate limit, or its circuit is open: the first attempt, not made, goes to
      // the queue for later (a job whose id is the delivery id, as the circuit parked it).
      else if (outcome?.kind === "rate_limited" || outcome?.kind === "circuit_open")
        await this.d.jobs.add(job, { delayMs: outcome.delayMs });
      return true;
    } catch (err) {
      // The attempt may or may not have been made and recorded: the queue redoes it, reading the
      // attempt record first.
      this.d.logger.warn({ err, deliveryId: job.deliveryId }, "direct delivery failed; queueing it");
      try {
        await this.d.jobs.add(continueDelivery(job, JOB_STARTS.redo));
        return true;
      } catch (queueErr) {
        this.d.logger.warn({ err: queueErr, deliveryId: job.deliveryId }, "could not queue a direct delivery; its event will be redone");
        return false;
      }
    } finally {
      this.started.delete(token);
      this.slots.release();
    }
  }
}
