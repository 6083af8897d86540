import type { Queue } from "bullmq";
import { type JobLifecycle, JOB_STARTS, jobBudget, legacyOrigin } from "../domain/delivery-plan.js";
import { deliveryJob, type DeliveryJob, type DeliveryJobData } from "../queue/catalog.js";
import { deliveryJobOpts } from "../queue/job-options.js";
import type { DeliveryBase, DeliveryRecord } from "../store/attempt-log.js";
import { type PayloadStore, sharesPayload } from "../store/payloads.js";

/**
 * Every delivery job is built, read and queued here: fan-out's first attempts, the retries after a
 * direct first attempt, redos and replays. Their lifecycle rules are domain/delivery-plan.ts.
 */

/** What a delivery is made of, as fan-out reads it from the outbox (an OutboxEntry is one). */
export interface EventToDeliver {
  readonly userId: string;
  readonly emitterId: string;
  readonly channel: string;
  readonly eventId: string;
  /** Absent for a delivery whose payload is stored once for its event (store/payloads.ts). */
  readonly payload?: string | undefined;
  readonly acceptedAtMs: number;
  /** Source-to-source (and health-event) hops of the event's chain; absent or 0 for most. */
  readonly hops?: number | undefined;
}

/**
 * A delivery of `event` to a webhook or workflow, starting at `start` (JOB_STARTS). One literal
 * and plain arguments (no spreads, no listener object): fan-out builds one per delivery.
 */
export function newDeliveryJob(
  event: EventToDeliver,
  listenerId: string,
  listenerKind: "webhook" | "workflow",
  deliveryId: string,
  start: JobLifecycle,
): DeliveryJob {
  const job: DeliveryJob = {
    userId: event.userId,
    deliveryId,
    listenerKind,
    listenerId,
    emitterId: event.emitterId,
    channel: event.channel,
    eventId: event.eventId,
    payload: event.payload,
    acceptedAtMs: event.acceptedAtMs,
    origin: start.origin,
    priorAttempts: start.priorAttempts,
  };
  // For workers of the previous version during a rolling upgrade (see the catalog).
  if (start.origin === "redo") job.redo = true;
  if (event.hops) job.hops = event.hops;
  return job;
}

/** The job that goes on with `job`'s delivery from `start` (after a direct attempt: retry or redo). */
export function continueDelivery(job: DeliveryJob, start: JobLifecycle): DeliveryJob {
  return newDeliveryJob(job, job.listenerId, job.listenerKind, job.deliveryId, start);
}

/**
 * The replay of a delivery the attempt log holds (its payload is kept while it is not delivered:
 * in the record, or, when the record refers to its event's stored payload, there).
 */
export function replayJob(record: DeliveryRecord): DeliveryJob {
  return newDeliveryJob(
    {
      userId: record.user_id,
      emitterId: record.emitter_id,
      channel: record.event_name,
      eventId: record.event_id,
      payload: record.payload_key === undefined ? record.payload : undefined,
      acceptedAtMs: record.accepted_at_ms,
    },
    record.listener_id,
    record.listener_kind,
    record.id,
    JOB_STARTS.replay,
  );
}

/** A replay's BullMQ job id: its own, so it never collides with the delivery's earlier jobs. */
export function replayJobId(deliveryId: string, replays: number): string {
  return `${deliveryId}-r${replays}`;
}

function hasOrigin(data: DeliveryJobData): data is DeliveryJob {
  return data.origin !== undefined;
}

/**
 * A delivery job as a worker takes it from the queue. Throws (zod) on a malformed job. A job
 * queued by a version before `origin` gets the origin that version would have inferred.
 */
export function readDeliveryJob(data: unknown, jobId: string | undefined): DeliveryJob {
  const parsed = deliveryJob.parse(data);
  if (hasOrigin(parsed)) return parsed;
  return { ...parsed, origin: legacyOrigin(parsed, jobId !== parsed.deliveryId) };
}

/**
 * The attempt-log record a delivery's first write creates (all of it is in the job). `shared`: the
 * record refers to the event's stored payload (store/payloads.ts) instead of keeping a copy.
 */
export function recordBaseOf(job: DeliveryJob, shared = job.payload === undefined): DeliveryBase {
  return {
    id: job.deliveryId,
    user_id: job.userId,
    listener_id: job.listenerId,
    listener_kind: job.listenerKind,
    event_id: job.eventId,
    emitter_id: job.emitterId,
    event_name: job.channel,
    payload: shared ? "" : (job.payload ?? ""),
    shared_payload: shared,
    accepted_at_ms: job.acceptedAtMs,
  };
}

/** `job` without its payload, which its event's stored payload holds now. */
function byReference(job: DeliveryJob): DeliveryJob {
  const { payload: _stored, ...rest } = job;
  return rest;
}

/**
 * The delivery queue as producers use it: each job gets the budget its lifecycle leaves it
 * (jobBudget) and, but for replays, the delivery id as its job id, so a redone fan-out finds the
 * job it added before and adds nothing twice. A job whose payload is large (sharesPayload) is
 * queued without it, once its delivery holds the event's stored payload: the hold is acknowledged
 * before the job is added (on a Redis Cluster the queue is on another node), and every delivery of
 * one event added together shares one hold.
 */
export class DeliveryJobQueue {
  constructor(
    private readonly queue: Queue,
    /** Attempts in the whole retry schedule (the first one included). */
    private readonly maxAttempts: number,
    /** Where large payloads are stored once per event; without it, every job carries its payload. */
    private readonly payloads?: Pick<PayloadStore, "hold">,
  ) {}

  private opts(job: DeliveryJob, jobId: string) {
    return deliveryJobOpts(jobBudget(job, this.maxAttempts), jobId);
  }

  async add(job: DeliveryJob, how: { readonly delayMs?: number; readonly jobId?: string; readonly priority?: number } = {}): Promise<void> {
    if (this.payloads && job.payload !== undefined && sharesPayload(job.payload)) {
      await this.payloads.hold(job, job.payload, [job.deliveryId]);
      job = byReference(job);
    }
    const opts = this.opts(job, how.jobId ?? job.deliveryId);
    const withDelay = how.delayMs === undefined ? opts : { ...opts, delay: how.delayMs };
    await this.queue.add(job.listenerKind, job, how.priority === undefined ? withDelay : { ...withDelay, priority: how.priority });
  }

  async addAll(jobs: readonly DeliveryJob[]): Promise<void> {
    if (jobs.length === 0) return;
    // One job: a single script call (addBulk wraps even one job in a MULTI pipeline).
    if (jobs.length === 1) return this.add(jobs[0] as DeliveryJob);
    const queued = this.payloads ? await this.holdShared(this.payloads, jobs) : jobs;
    await this.queue.addBulk(queued.map((job) => ({ name: job.listenerKind, data: job, opts: this.opts(job, job.deliveryId) })));
  }

  /** Holds the stored payload of each large-payload event for its deliveries among `jobs`; returns the jobs as queued. */
  private async holdShared(payloads: Pick<PayloadStore, "hold">, jobs: readonly DeliveryJob[]): Promise<readonly DeliveryJob[]> {
    let events: Map<string, { job: DeliveryJob; payload: string; ids: string[] }> | undefined;
    for (const job of jobs) {
      if (job.payload === undefined || !sharesPayload(job.payload)) continue;
      events ??= new Map();
      const event = `${job.userId} ${job.emitterId} ${job.channel} ${job.eventId}`;
      const held = events.get(event);
      if (held) held.ids.push(job.deliveryId);
      else events.set(event, { job, payload: job.payload, ids: [job.deliveryId] });
    }
    if (events === undefined) return jobs;
    await Promise.all([...events.values()].map((e) => payloads.hold(e.job, e.payload, e.ids)));
    return jobs.map((job) => (job.payload !== undefined && sharesPayload(job.payload) ? byReference(job) : job));
  }
}
