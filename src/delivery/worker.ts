import { type ConnectionOptions, DelayedError, type Job, Worker } from "bullmq";
import { putOffDelayMs } from "../domain/fair-slots.js";
import type { Logger } from "../observability/logger.js";
import { QUEUES } from "../queue/catalog.js";
import { DELIVERY_KEEP } from "../queue/job-options.js";
import { WORKER_RECOVERY } from "../queue/worker-options.js";
import type { Attempter } from "./attempt.js";
import type { FairGate } from "./fair-gate.js";
import { readDeliveryJob } from "./jobs.js";

/** Thrown to ask BullMQ for another attempt after `delayMs` (read by the backoff strategy). */
export class RetryLater extends Error {
  constructor(
    readonly delayMs: number,
    reason: string,
  ) {
    super(reason);
    this.name = "RetryLater";
    // BullMQ keeps the stack of every failed attempt in the job's hash while it waits: a verdict,
    // not a fault, needs no frames (every retrying delivery would carry a few hundred bytes each).
    this.stack = `RetryLater: ${reason}`;
  }
}

/** BullMQ custom backoff: the delay our classifier chose travels on the error. */
export function backoffFromError(_attemptsMade: number, _type?: string, err?: Error): number {
  return err instanceof RetryLater ? err.delayMs : 1000;
}

export interface DeliveryWorkerDeps {
  connection: ConnectionOptions;
  prefix: string;
  concurrency: number;
  attempter: Pick<Attempter, "attempt" | "giveUp">;
  /**
   * The process's gate (delivery/fair-gate.ts), shared with fan-out's direct attempts: each job's
   * attempt counts against its user's and its destination's caps. Without it, none apply.
   */
  gate?: Pick<FairGate, "enter">;
  logger: Logger;
  random?: () => number;
}

/**
 * Works the delivery queue: the BullMQ adapter of the Attempter (delivery/attempt.ts). Each job
 * is one attempt, counted by BullMQ (`attemptsMade`, `attemptsStarted`); a "retry" verdict becomes
 * BullMQ's next attempt after the classifier's delay.
 */
export class DeliveryWorker {
  private readonly worker: Worker;

  constructor(private readonly d: DeliveryWorkerDeps) {
    this.worker = new Worker(QUEUES.delivery, (job, token) => this.process(job, token), {
      connection: d.connection,
      prefix: d.prefix,
      concurrency: d.concurrency,
      settings: { backoffStrategy: backoffFromError },
      autorun: false,
      ...WORKER_RECOVERY,
      ...DELIVERY_KEEP,
    });
    this.worker.on("error", (err) => d.logger.error({ err }, "delivery worker error"));
    // BullMQ gives a job up without a verdict when an unexpected error ends its last attempt: the
    // attempt log must say so, or the delivery would sit "pending" forever and could not be replayed.
    this.worker.on("failed", (bullJob, err) => {
      if (!bullJob || err instanceof RetryLater || bullJob.attemptsMade < (bullJob.opts.attempts ?? 1)) return;
      let job: ReturnType<typeof readDeliveryJob>;
      try {
        job = readDeliveryJob(bullJob.data, bullJob.id);
      } catch {
        return;
      }
      void this.d.attempter.giveUp(job).catch((e) => d.logger.warn({ err: e }, "could not mark a given-up delivery failed"));
    });
  }

  start(): void {
    void this.worker.run();
  }

  private async process(bullJob: Job, token: string | undefined): Promise<void> {
    const job = readDeliveryJob(bullJob.data, bullJob.id);
    const entry = this.d.gate ? await this.d.gate.enter(job, "queue") : undefined;
    if (entry && !("ticket" in entry)) {
      // Over its user's or destination's cap (docs/decisions.md "Delivery fairness"): the job
      // gives its worker slot back and comes back later, its attempt count untouched. Each
      // put-off of the same job (started more often than finished) doubles the delay.
      const putOffs = Math.max(0, (bullJob.attemptsStarted ?? 1) - bullJob.attemptsMade - 1);
      await bullJob.moveToDelayed(Date.now() + putOffDelayMs(putOffs, this.d.random ?? Math.random), token);
      throw new DelayedError();
    }
    try {
      await this.attempt(bullJob, job, token);
    } finally {
      entry?.ticket.release();
    }
  }

  private async attempt(bullJob: Job, job: ReturnType<typeof readDeliveryJob>, token: string | undefined): Promise<void> {
    const outcome = await this.d.attempter.attempt(job, bullJob);
    if (outcome?.kind === "retry") throw new RetryLater(outcome.delayMs, outcome.reason);
    if (outcome?.kind === "rate_limited" || outcome?.kind === "circuit_open") {
      // Over the webhook's rate limit, or its circuit is open: the same attempt later. Moved to
      // delayed, the job keeps its attempt count (attemptsMade): the wait spends nothing of the
      // retry schedule.
      await bullJob.moveToDelayed(Date.now() + outcome.delayMs, token);
      throw new DelayedError();
    }
  }

  isRunning(): boolean {
    return this.worker.isRunning();
  }

  /** Waits for attempts in flight (up to the caller's deadline) and stops. Idempotent. */
  async close(force = false): Promise<void> {
    await this.worker.close(force);
  }
}
