import { circuitSignal } from "../domain/circuit.js";
import { planAttempt, readsRecord, type RunCounts } from "../domain/delivery-plan.js";
import { classifyAttempt, describeAnswer, type Outcome } from "../domain/delivery-outcome.js";
import { reportsDeliveryFailure } from "../domain/health-events.js";
import { previousSecretInEffect } from "../domain/signing.js";
import { retryScheduleMs } from "../domain/webhook-settings.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { DeliveryJob } from "../queue/catalog.js";
import type { WebhookRecord, WebhookStore } from "../store/webhooks.js";
import type { ListenerCache } from "../store/listener-cache.js";
import type { WorkflowRecord, WorkflowStore } from "../store/workflows.js";
import type { AttemptLog, DeliveryRecord } from "../store/attempt-log.js";
import { type PayloadStore, sharesPayload } from "../store/payloads.js";
import type { WebhookRateLimiter } from "../store/rate-limit.js";
import type { CircuitBreaker } from "./circuit.js";
import { recordBaseOf } from "./jobs.js";
import type { HealthReporter } from "./health-reporter.js";
import { type Destination, prepareRequest } from "./prepare.js";
import type { Sender, SendResult } from "./sender.js";

export interface AttempterDeps {
  sender: Sender;
  attemptLog: AttemptLog;
  /**
   * Where attempts read webhooks (`get`) and workflows: the daemon's listener cache, so an attempt
   * costs no Redis read for them; `uncachedListeners` in tests.
   */
  listeners: Pick<ListenerCache, "get" | "workflow">;
  /** Where a 410 Gone deactivates a webhook. */
  webhooks: Pick<WebhookStore, "setActive">;
  /** DELIVERY_RETRY_SCHEDULE: the delays of every listener without a `retry_schedule` of its own. */
  scheduleMs: readonly number[];
  /**
   * A webhook's `rate_limit_per_second`, shared by every worker process (store/rate-limit.ts
   * WebhookRateLimiter): `take` answers 0 when the attempt may start, else the wait in ms until the
   * start slot reserved for the job that carries the attempt, which the attempt then finds when it
   * comes back. Without it, rate limits are not applied.
   */
  rateLimit?: Pick<WebhookRateLimiter, "take" | "drop">;
  /** Health events (SPEC §12): `$delivery_failed` and `$webhook_disabled` (events/health.ts). None: not reported. */
  health?: HealthReporter;
  /**
   * Large payloads stored once per event (store/payloads.ts): a job without a payload reads its
   * event's here, and a delivered one releases it. Without it, a job must carry its payload.
   */
  payloads?: Pick<PayloadStore, "get" | "hold" | "release">;
  /** Webhook circuit breakers (delivery/circuit.ts), shared by every worker process. Without it, none. */
  circuit?: Pick<CircuitBreaker, "admit" | "record">;
  logger: Logger;
  metrics: Metrics;
  now?: () => number;
  random?: () => number;
}

/**
 * The "resolve target" phase's answer: where the attempt goes, or why it does not: `gone` when
 * the listener was deleted (its attempt log went with it, so nothing is recorded), `undeliverable`
 * for a listener that cannot receive.
 */
type Target = Resolved | { readonly skip: string; readonly why: "gone" | "inactive" | "undeliverable" };

/** A destination with the webhook's settings that are not the request's own (SPEC §12). */
interface Resolved extends Destination {
  /** The webhook's `retry_schedule`, when it has one. */
  readonly scheduleMs?: readonly number[] | undefined;
  readonly ratePerSecond?: number | null | undefined;
}

/**
 * An attempt not made because its webhook's rate limit was reached: the caller makes it again in
 * `delayMs` (a delayed job, due at the start slot reserved for it), without counting an attempt of
 * the schedule or a failure.
 */
export interface RateLimited {
  readonly kind: "rate_limited";
  readonly delayMs: number;
}

/**
 * An attempt not made because its webhook's circuit is open (SPEC §12): the caller makes it again
 * in `delayMs` (a delayed job), without counting an attempt of the schedule or a failure. The job
 * is parked with the circuit, so closing it releases the job early (delivery/circuit.ts).
 */
export interface CircuitOpen {
  readonly kind: "circuit_open";
  readonly delayMs: number;
}

/** The spread of the waits on an open circuit, so the waiting deliveries do not all come back at once. */
const CIRCUIT_WAIT_SPREAD_MS = 1000;

/**
 * Makes one delivery attempt, for the queue's worker (delivery/worker.ts) and for fan-out's direct
 * first attempts (delivery/direct.ts) alike, in phases:
 *
 *   plan (domain/delivery-plan.ts) → resolve target ∥ read the record → (webhooks) circuit
 *   admission (delivery/circuit.ts), rate limit → prepare headers and signature
 *   (delivery/prepare.ts) → send → classify (domain/delivery-outcome.ts) → record in the attempt
 *   log ∥ the circuit → act on the verdict.
 *
 * Returns the verdict, or undefined when nothing was sent (done already, listener gone, inactive
 * or undeliverable). "retry" is left to the caller: BullMQ's backoff, or a queued job.
 */
export class Attempter {
  private readonly now: () => number;
  private readonly random: () => number;
  /** Read once: the per-attempt line costs nothing unless the process logs at debug. */
  private readonly logOutcomes: boolean;

  constructor(private readonly d: AttempterDeps) {
    this.now = d.now ?? Date.now;
    this.random = d.random ?? Math.random;
    this.logOutcomes = d.logger.isLevelEnabled("debug");
  }

  async attempt(job: DeliveryJob, run: RunCounts): Promise<Outcome | RateLimited | CircuitOpen | undefined> {
    const [record, target, stored] = await Promise.all([
      readsRecord(job, run) ? this.d.attemptLog.get(job.userId, job.deliveryId) : undefined,
      this.resolveTarget(job),
      job.payload === undefined ? this.d.payloads?.get(job) : undefined,
    ]);
    const plan = planAttempt(job, run, record);
    // Delivered before (a redone step): the hold of a delivery whose release was lost goes now.
    if (plan.kind === "skip") return record?.status === "delivered" ? this.release(job).then(() => undefined) : undefined;
    if ("skip" in target) {
      await this.recordSkipped(job, run, target, record);
      return undefined;
    }
    const body = job.payload ?? stored;
    if (body === undefined) {
      // No stored payload any more: its event was deleted (DELETE /sources/{id}/events) or its user.
      await this.recordSkipped(job, run, { skip: "the event was deleted", why: "undeliverable" }, record);
      return undefined;
    }
    // Before the rate limit, so deliveries turned away by an open circuit take no rate-limit slot.
    const circuit = job.listenerKind === "webhook" ? this.d.circuit : undefined;
    // The job's id, where the circuit parks the attempt and the rate limit reserves its slot. A
    // direct first attempt has no job yet: the one it adds to wait carries the delivery id.
    const token = run.id ?? job.deliveryId;
    let probe = false;
    if (circuit) {
      const admission = await circuit.admit(job.userId, job.listenerId, job.deliveryId, token, target.timeoutMs);
      if (admission.kind === "wait") {
        this.d.metrics.deliveries.inc({ listener_kind: job.listenerKind, outcome: "circuit_open" });
        // A slot reserved before the circuit opened would hold the webhook's schedule: given back.
        if (target.ratePerSecond && this.d.rateLimit) await this.d.rateLimit.drop(job.userId, job.listenerId, token);
        const spreadMs = admission.prober ? 0 : Math.floor(this.random() * CIRCUIT_WAIT_SPREAD_MS);
        const delayMs = Math.max(0, admission.untilMs - this.now()) + spreadMs;
        return { kind: "circuit_open", delayMs };
      }
      probe = admission.kind === "probe";
      if (probe) this.d.metrics.circuitTransitions.inc({ to: "half_open" });
    }
    if (target.ratePerSecond && this.d.rateLimit) {
      const waitMs = await this.d.rateLimit.take(job.userId, job.listenerId, target.ratePerSecond, token, probe);
      if (waitMs > 0) {
        this.d.metrics.deliveries.inc({ listener_kind: job.listenerKind, outcome: "rate_limited" });
        // No spread: the wait ends at the slot reserved for this attempt, distinct from every other's.
        return { kind: "rate_limited", delayMs: waitMs };
      }
    }
    const nowMs = this.now();
    const result = await this.d.sender.send(prepareRequest(job, target, plan.headerAttempt, nowMs, body));
    this.d.metrics.deliveryAttemptDuration.observe({ listener_kind: job.listenerKind }, result.durationMs / 1000);
    const outcome = classifyAttempt({
      statusCode: "statusCode" in result ? result.statusCode : undefined,
      errorKind: "errorKind" in result ? result.errorKind : undefined,
      retryAfter: "retryAfter" in result ? result.retryAfter : null,
      deliveryControl: "deliveryControl" in result ? result.deliveryControl : null,
      attemptsMade: plan.position,
      scheduleMs: target.scheduleMs ?? this.d.scheduleMs,
      nowMs,
      random: this.random,
    });
    // A failed direct first attempt of a large payload ends replayable: its record refers to the
    // event's stored payload, held first. (A retry's job holds it when it is added.)
    if (outcome.kind === "give_up" || outcome.kind === "deactivate") await this.holdForRecord(job, run);
    // The circuit's step goes out with the attempt log's write (one round trip on the auto-pipeline).
    const [recorded] = await Promise.all([
      this.record(job, run, nowMs, result, outcome, record),
      circuit && this.recordCircuit(circuit, job, outcome),
    ]);
    if (outcome.kind === "delivered") await this.release(job);
    await this.act(job, outcome, recorded);
    if (this.logOutcomes) logOutcome(this.d.logger, job, result, outcome);
    return outcome;
  }

  /**
   * Marks a delivery failed that the queue gave up on without a verdict (an unexpected error on
   * its last attempt), so it does not sit "pending" forever and can be replayed. A delivered
   * record stays delivered (a late duplicate run).
   */
  async giveUp(job: DeliveryJob): Promise<void> {
    const recorded = await this.d.attemptLog.upsert(recordBaseOf(job), { status: "failed", keepDelivered: true });
    if (recorded?.status === "delivered") await this.release(job);
    if (recorded?.status === "failed") await this.reportFailed(job, recorded);
  }

  /** `$delivery_failed`, except for a delivery of a health event (domain/health-events.ts: no loops). */
  private async reportFailed(job: DeliveryJob, recorded: DeliveryRecord | undefined): Promise<void> {
    if (recorded && this.d.health && reportsDeliveryFailure(job.listenerKind, job.emitterId))
      await this.d.health.deliveryFailed(recorded, job.hops ?? 0);
  }

  /**
   * Applies the attempt's result to the webhook's circuit. Fails open: bookkeeping that Redis
   * refused costs the circuit one result, never the delivery (its attempt is made and recorded).
   */
  private async recordCircuit(circuit: NonNullable<AttempterDeps["circuit"]>, job: DeliveryJob, outcome: Outcome): Promise<void> {
    const signal = circuitSignal(outcome.kind, "byReceiver" in outcome && outcome.byReceiver === true);
    if (signal === "none") return;
    try {
      const change = await circuit.record(job.userId, job.listenerId, signal === "success", job.deliveryId);
      if (change === undefined) return;
      this.d.metrics.circuitTransitions.inc({ to: change === "closed" ? "closed" : "open" });
      this.d.logger.info({ userId: job.userId, webhookId: job.listenerId, change }, "webhook circuit changed");
      if (change !== "reopened") this.d.health?.onCircuitChange(job.userId, job.listenerId, change);
    } catch (err) {
      this.d.logger.warn({ err, deliveryId: job.deliveryId }, "could not apply an attempt to its webhook's circuit");
    }
  }

  private resolveTarget(job: DeliveryJob): Promise<Target> {
    return job.listenerKind === "webhook"
      ? this.d.listeners.get(job.userId, job.listenerId).then((w) => webhookTarget(w, this.now()))
      : this.d.listeners.workflow(job.userId, job.listenerId).then(workflowTarget);
  }

  /**
   * Whether the delivery's record refers to its event's stored payload: its job does, or it is a
   * direct first attempt (no job yet: `attemptsStarted` 0) of a payload large enough to be stored.
   */
  private sharedRecord(job: DeliveryJob, run: RunCounts): boolean {
    if (job.payload === undefined) return true;
    return this.d.payloads !== undefined && (run.attemptsStarted ?? 0) === 0 && sharesPayload(job.payload);
  }

  /** Before a direct first attempt's record ends failed and refers to its event's stored payload: holds it. */
  private async holdForRecord(job: DeliveryJob, run: RunCounts): Promise<void> {
    if (job.payload !== undefined && this.sharedRecord(job, run)) await this.d.payloads?.hold(job, job.payload, [job.deliveryId]);
  }

  /** A delivery by reference that no longer needs its event's stored payload (delivered, or its listener gone). */
  private async release(job: DeliveryJob): Promise<void> {
    if (job.payload === undefined) await this.d.payloads?.release(job, [job.deliveryId]);
  }

  private async recordSkipped(
    job: DeliveryJob,
    run: RunCounts,
    target: Exclude<Target, Resolved>,
    record: DeliveryRecord | undefined,
  ): Promise<void> {
    this.d.metrics.deliveries.inc({
      listener_kind: job.listenerKind,
      outcome: target.why === "undeliverable" ? "undeliverable" : "skipped",
    });
    this.d.logger.debug({ deliveryId: job.deliveryId, reason: target.skip }, "delivery skipped");
    // A deleted listener took its attempt log with it: nothing to record (or to resurrect).
    if (target.why === "gone") return this.release(job);
    await this.holdForRecord(job, run);
    await this.d.attemptLog.upsert(
      recordBaseOf(job, this.sharedRecord(job, run)),
      { status: "failed", attempt: { at: new Date(this.now()).toISOString(), status_code: null, duration_ms: 0, error: target.skip } },
      record,
    );
  }

  private async record(
    job: DeliveryJob,
    run: RunCounts,
    startedMs: number,
    result: SendResult,
    outcome: Outcome,
    known: DeliveryRecord | undefined,
  ) {
    const status = outcome.kind === "delivered" ? "delivered" : outcome.kind === "retry" ? "pending" : "failed";
    return this.d.attemptLog.upsert(
      recordBaseOf(job, this.sharedRecord(job, run)),
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

  /** `recorded`: the attempt-log record this attempt wrote (undefined when its listener vanished meanwhile). */
  private async act(job: DeliveryJob, outcome: Outcome, recorded: DeliveryRecord | undefined): Promise<void> {
    const kind = job.listenerKind;
    switch (outcome.kind) {
      case "delivered":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "delivered" });
        this.d.metrics.emitToDelivered.observe({ listener_kind: kind }, Math.max(0, this.now() - job.acceptedAtMs) / 1000);
        return;
      case "retry":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "retry" });
        return;
      case "give_up":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "failed" });
        await this.reportFailed(job, recorded);
        return;
      case "deactivate":
        this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "deactivated" });
        if (kind === "webhook") {
          const set = await this.d.webhooks.setActive(job.userId, job.listenerId, false);
          // Only the delivery that made the change reports it (several may meet the same 410).
          if (set?.changed) await this.d.health?.webhookDeactivated(job.userId, job.listenerId, outcome.reason, job.deliveryId);
        }
        return;
      default: {
        const never: never = outcome;
        throw new Error(`unknown outcome ${JSON.stringify(never)}`);
      }
    }
  }
}

/** An attempt's debug line: where it went and what came of it, in words. */
function logOutcome(logger: Logger, job: DeliveryJob, result: SendResult, outcome: Outcome): void {
  const answer = "statusCode" in result ? `HTTP ${result.statusCode}` : result.error;
  const why = outcome.kind === "delivered" ? "" : `: ${outcome.reason}`;
  logger.debug(
    {
      deliveryId: job.deliveryId,
      listenerId: job.listenerId,
      eventId: job.eventId,
      outcome: outcome.kind,
      statusCode: "statusCode" in result ? result.statusCode : null,
      ms: Math.round(result.durationMs),
    },
    `delivery ${job.deliveryId} to ${job.listenerId}: ${outcome.kind} (${answer})${why}`,
  );
}

/** A webhook's previous secret is read from the record at `nowMs`: its overlap ends without a write. */
function webhookTarget(w: WebhookRecord | undefined, nowMs: number): Target {
  if (!w) return { skip: "webhook was deleted", why: "gone" };
  if (!w.active) return { skip: "webhook is inactive", why: "inactive" };
  return {
    url: w.url,
    secret: w.signing_secret,
    previousSecret: previousSecretInEffect(w, nowMs),
    headers: w.headers,
    timeoutMs: w.timeout_ms,
    scheduleMs: retryScheduleMs(w.retry_schedule),
    ratePerSecond: w.rate_limit_per_second,
  };
}

function workflowTarget(wf: WorkflowRecord | undefined): Target {
  if (!wf) return { skip: "workflow was deleted", why: "gone" };
  if (!wf.trigger_url) return { skip: "undeliverable: the workflow has no trigger_url", why: "undeliverable" };
  return { url: wf.trigger_url, secret: null };
}

/** Listener reads straight from the stores (a Redis read per attempt), where no cache runs. */
export function uncachedListeners(webhooks: Pick<WebhookStore, "get">, workflows: Pick<WorkflowStore, "get">): AttempterDeps["listeners"] {
  return { get: (userId, id) => webhooks.get(userId, id), workflow: (userId, id) => workflows.get(userId, id) };
}
