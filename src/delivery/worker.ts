import { type Job, Worker, type ConnectionOptions } from "bullmq";
import { eventNameHeader } from "../domain/channel-name.js";
import { classifyAttempt, describeAnswer, type Outcome } from "../domain/delivery-outcome.js";
import { signPayload } from "../domain/signing.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import { deliveryJob, type DeliveryJob, QUEUES } from "../queue/catalog.js";
import { WORKER_RECOVERY } from "../queue/worker-options.js";
import type { WebhookRecord, WebhookStore } from "../store/webhooks.js";
import type { WorkflowRecord, WorkflowStore } from "../store/workflows.js";
import type { AttemptLog, DeliveryBase, DeliveryRecord } from "./attempt-log.js";
import type { Sender, SendResult } from "./sender.js";

/** Thrown to ask BullMQ for another attempt after `delayMs` (read by the backoff strategy). */
export class RetryLater extends Error {
  constructor(
    readonly delayMs: number,
    reason: string,
  ) {
    super(reason);
    this.name = "RetryLater";
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
  sender: Sender;
  attemptLog: AttemptLog;
  webhooks: WebhookStore;
  /** Where attempts read webhooks (the webhook cache); default `webhooks`, a Redis read each time. */
  webhookReader?: { get(userId: string, id: string): Promise<WebhookRecord | undefined> };
  workflows: WorkflowStore;
  /** Where attempts read workflows (the listener cache); default `workflows`, a Redis read each time. */
  workflowReader?: { get(userId: string, id: string): Promise<WorkflowRecord | undefined> };
  scheduleMs: readonly number[];
  logger: Logger;
  metrics: Metrics;
  now?: () => number;
  random?: () => number;
}

/**
 * Where an attempt goes, or why it does not: `gone` when the listener was deleted (its attempt log
 * went with it, so nothing is recorded), `undeliverable` for a listener that cannot receive.
 */
type Target = { url: string; secret: string | null } | { skip: string; why: "gone" | "inactive" | "undeliverable" };

/** The attempt-log record a job's first write creates. */
function baseOf(job: DeliveryJob): DeliveryBase {
  return {
    id: job.deliveryId,
    user_id: job.userId,
    listener_id: job.listenerId,
    listener_kind: job.listenerKind,
    event_id: job.eventId,
    emitter_id: job.emitterId,
    event_name: job.channel,
    payload: job.payload,
    accepted_at_ms: job.acceptedAtMs,
  };
}

/**
 * Works the delivery queue: signs and POSTs each event, records the attempt, and acts on the one
 * classifier's verdict (delivered / retry after N ms / give up / deactivate the webhook).
 */
export class DeliveryWorker {
  private readonly worker: Worker;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly webhookReader: NonNullable<DeliveryWorkerDeps["webhookReader"]>;
  private readonly workflowReader: NonNullable<DeliveryWorkerDeps["workflowReader"]>;

  constructor(private readonly d: DeliveryWorkerDeps) {
    this.now = d.now ?? Date.now;
    this.random = d.random ?? Math.random;
    this.webhookReader = d.webhookReader ?? d.webhooks;
    this.workflowReader = d.workflowReader ?? d.workflows;
    this.worker = new Worker(QUEUES.delivery, (job) => this.process(job), {
      connection: d.connection,
      prefix: d.prefix,
      concurrency: d.concurrency,
      settings: { backoffStrategy: backoffFromError },
      autorun: false,
      ...WORKER_RECOVERY,
    });
    this.worker.on("error", (err) => d.logger.error({ err }, "delivery worker error"));
    // When BullMQ gives a job up (unexpected error on the last attempt), the attempt log must say
    // so, or the delivery would sit "pending" forever and could not be replayed.
    this.worker.on("failed", (job, err) => {
      if (!job || err instanceof RetryLater || job.attemptsMade < (job.opts.attempts ?? 1)) return;
      const parsed = deliveryJob.safeParse(job.data);
      if (!parsed.success) return;
      void this.d.attemptLog
        .upsert(baseOf(parsed.data), { status: "failed", keepDelivered: true })
        .catch((e) => d.logger.warn({ err: e }, "could not mark a given-up delivery failed"));
    });
  }

  start(): void {
    void this.worker.run();
  }

  private webhookTarget(w: WebhookRecord | undefined): Target {
    if (!w) return { skip: "webhook was deleted", why: "gone" };
    if (!w.active) return { skip: "webhook is inactive", why: "inactive" };
    return { url: w.url, secret: w.signing_secret };
  }

  private async workflowTarget(job: DeliveryJob): Promise<Target> {
    const wf = await this.workflowReader.get(job.userId, job.listenerId);
    if (!wf) return { skip: "workflow was deleted", why: "gone" };
    if (!wf.trigger_url) return { skip: "undeliverable: the workflow has no trigger_url", why: "undeliverable" };
    return { url: wf.trigger_url, secret: null };
  }

  async process(job: Job): Promise<void> {
    const data = deliveryJob.parse(job.data);
    const prior = data.priorAttempts ?? 0;
    // The attempt record can only exist when this delivery may have been attempted before: a
    // retry (of this job, or of a first attempt fan-out made directly), a job taken over after its
    // worker died (started more often than finished), a replay (a job id of its own) or a job
    // re-added by a redone fan-out. A job's first clean attempt skips the read: its record is
    // created when the attempt ends.
    const mayBeRecorded =
      job.attemptsMade > 0 || prior > 0 || (job.attemptsStarted ?? 0) > 1 || job.id !== data.deliveryId || data.redo === true;
    // A replay starts a fresh retry budget; any other job continues the delivery's schedule.
    const replay = job.id !== data.deliveryId;
    const outcome = await this.attempt(data, prior + job.attemptsMade + 1, mayBeRecorded, !replay);
    if (outcome?.kind === "retry") throw new RetryLater(outcome.delayMs, outcome.reason);
  }

  /**
   * A delivery's first attempt, made by fan-out without a queue round (delivery/direct.ts): the
   * same lookups, signing, attempt log, metrics and verdict as a job's. Returns the verdict
   * (undefined when nothing was sent: listener gone or inactive); on "retry" the caller queues
   * the rest of the schedule.
   */
  attemptFirst(data: DeliveryJob): Promise<Outcome | undefined> {
    return this.attempt(data, 1, false, true);
  }

  /**
   * One attempt: `attempt` is its number in the retry schedule (1 = first), as the job counts it.
   * When `continues`, the attempt record counts too: a job redone after a crash, or taken over
   * after an attempt was recorded but before BullMQ counted it, goes on with the schedule where
   * the log says the delivery is. Records the attempt, counts it and acts on the verdict; "retry"
   * is left to the caller (BullMQ's backoff or a queued job).
   */
  private async attempt(data: DeliveryJob, attempt: number, mayBeRecorded: boolean, continues: boolean): Promise<Outcome | undefined> {
    const kind = data.listenerKind;
    const [record, target] = await Promise.all([
      mayBeRecorded ? this.d.attemptLog.get(data.userId, data.deliveryId) : undefined,
      kind === "webhook"
        ? this.webhookReader.get(data.userId, data.listenerId).then((w) => this.webhookTarget(w))
        : this.workflowTarget(data),
    ]);
    // A redone fan-out or a duplicate job finds the delivery already done: nothing to send. For a
    // redone fan-out, "failed" is done too: the first fan-out's attempt gave up (a job would have
    // lingered as failed and kept the redo from being added; a direct attempt leaves no job).
    if (record?.status === "delivered" || (data.redo === true && record?.status === "failed")) return undefined;
    if ("skip" in target) {
      this.d.metrics.deliveries.inc({
        listener_kind: kind,
        outcome: target.why === "undeliverable" ? "undeliverable" : "skipped",
      });
      this.d.logger.debug({ deliveryId: data.deliveryId, reason: target.skip }, "delivery skipped");
      // A deleted listener took its attempt log with it: nothing to record (or to resurrect).
      if (target.why === "gone") return undefined;
      await this.d.attemptLog.upsert(
        baseOf(data),
        {
          status: "failed",
          attempt: { at: new Date(this.now()).toISOString(), status_code: null, duration_ms: 0, error: target.skip },
        },
        record,
      );
      return undefined;
    }
    // The header is numbered like the attempt log, so it matches the log across stalls and
    // replays (a replay starts a fresh retry budget but keeps counting in the log).
    const logged = record ? record.attempts.length + 1 : attempt;
    const position = continues ? Math.max(attempt, logged) : attempt;
    const nowMs = this.now();
    const timestamp = Math.floor(nowMs / 1000);
    // One literal (no spreads or Object.assign): this runs once per attempt.
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": "Tributary-Webhooks/1",
      "x-tributary-emitter-id": data.emitterId,
      "x-tributary-event-id": data.eventId,
      "x-tributary-event-name": eventNameHeader(data.channel),
      "x-tributary-attempt": String(logged),
      "x-tributary-delivery-id": data.deliveryId,
      "webhook-id": data.deliveryId,
      "webhook-timestamp": String(timestamp),
    };
    // Workflow deliveries are not signed (a workflow has no signing secret).
    if (target.secret) headers["webhook-signature"] = signPayload(target.secret, data.deliveryId, timestamp, data.payload);

    const result = await this.d.sender.send({ url: target.url, body: data.payload, headers });
    this.d.metrics.deliveryAttemptDuration.observe({ listener_kind: kind }, result.durationMs / 1000);
    const outcome = classifyAttempt({
      statusCode: "statusCode" in result ? result.statusCode : undefined,
      errorKind: "errorKind" in result ? result.errorKind : undefined,
      retryAfter: "retryAfter" in result ? result.retryAfter : null,
      attemptsMade: position,
      scheduleMs: this.d.scheduleMs,
      nowMs,
      random: this.random,
    });
    await this.log(data, nowMs, result, outcome, record);
    await this.act(data, outcome);
    return outcome;
  }

  private async log(
    data: DeliveryJob,
    startedMs: number,
    result: SendResult,
    outcome: Outcome,
    known: DeliveryRecord | undefined,
  ): Promise<void> {
    const status = outcome.kind === "delivered" ? "delivered" : outcome.kind === "retry" ? "pending" : "failed";
    await this.d.attemptLog.upsert(
      baseOf(data),
      {
        status,
        attempt: {
          at: new Date(startedMs).toISOString(),
          status_code: "statusCode" in result ? result.statusCode : null,
          duration_ms: Math.round(result.durationMs),
          error:
            "error" in result ? result.error : outcome.kind === "delivered" ? null : describeAnswer(outcome.reason, result.responseSnippet),
        },
      },
      known,
    );
  }

  private async act(data: DeliveryJob, outcome: Outcome): Promise<void> {
    const kind = data.listenerKind;
    switch (outcome.kind) {
      case "delivered":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "delivered" });
        this.d.metrics.emitToDelivered.observe({ listener_kind: kind }, Math.max(0, this.now() - data.acceptedAtMs) / 1000);
        return;
      case "retry":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "retry" });
        return;
      case "give_up":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "failed" });
        return;
      case "deactivate":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "deactivated" });
        if (kind === "webhook") await this.d.webhooks.update(data.userId, data.listenerId, { active: false });
        return;
      default: {
        const never: never = outcome;
        throw new Error(`unknown outcome ${JSON.stringify(never)}`);
      }
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
