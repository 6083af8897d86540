import { JOB_STARTS, NOT_QUEUED } from "../domain/delivery-plan.js";
import type { Logger } from "../observability/logger.js";
import type { DeliveryJob } from "../queue/catalog.js";
import type { Attempter } from "./attempt.js";
import type { FairGate, Ticket } from "./fair-gate.js";
import { continueDelivery, type DeliveryJobQueue } from "./jobs.js";

export interface DirectDeliveryDeps {
  /** Makes a delivery's first attempt and acts on its verdict, as for a queued job. */
  attempter: Pick<Attempter, "attempt">;
  /** The delivery queue, where retries (and deliveries that could not go direct) continue. */
  jobs: Pick<DeliveryJobQueue, "add">;
  /**
   * The process's gate (delivery/fair-gate.ts), shared with the queue worker: its "direct" pool
   * holds DELIVERY_DIRECT_CONCURRENCY slots, and every attempt counts against its user's and its
   * destination's caps.
   */
  gate: Pick<FairGate, "enter">;
  logger: Logger;
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
 * Bounded: at most DELIVERY_DIRECT_CONCURRENCY attempts in flight, and each within its user's and
 * its destination's caps (docs/decisions.md "Delivery fairness"). When every direct slot is
 * taken, fan-out waits for one only while the oldest attempt in flight is quick (the clog rule,
 * fair-slots.ts slotWaitMs), else it queues the delivery; a delivery over its user's or its
 * destination's cap is queued at once, and the worker puts it off while the cap holds. So slow
 * destinations holding slots stall neither fan-out nor anyone else's deliveries.
 */
export class DirectDelivery {
  constructor(private readonly d: DirectDeliveryDeps) {}

  /**
   * Starts `job`'s first attempt if a slot is (or soon becomes) free. Resolves undefined when there
   * is none (the caller queues the job), else to the attempt's settlement: true once the delivery
   * is in hand (delivered, given up, skipped, or its retries queued), false when it is not
   * (Redis failed us; the outbox entry must stay pending to be redone).
   */
  async start(job: DeliveryJob): Promise<{ settled: Promise<boolean> } | undefined> {
    const entry = await this.d.gate.enter(job, "direct");
    return "ticket" in entry ? { settled: this.run(job, entry.ticket) } : undefined;
  }

  private async run(job: DeliveryJob, ticket: Ticket): Promise<boolean> {
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
      ticket.release();
    }
  }
}
