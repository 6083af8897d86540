import type { HealthReporter } from "../delivery/health-reporter.js";
import { HEALTH_CHANNELS, type HealthChannel, type HealthReason } from "../domain/health-events.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import { type DeliveryRecord, deliveryView } from "../store/attempt-log.js";
import type { EmitMeta } from "../store/events.js";
import type { Ingest, RecordGuard } from "./ingest.js";

/** How the circuit breaker reports a change of a webhook's circuit (`HealthReporter.onCircuitChange`). */
export type CircuitChange = "opened" | "closed";

export interface HealthEventsDeps {
  readonly ingest: Pick<Ingest, "recordFor">;
  /** The key of a webhook's record: an event is recorded only while it exists (no streams outlive a deleted webhook). */
  readonly webhookKey: (userId: string, webhookId: string) => string;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly now?: () => number;
}

/** Thrown inside a record whose webhook is gone; caught below, never seen by callers. */
class WebhookGone extends Error {}

/**
 * Records the health events of SPEC §12 as ordinary events of the webhook (emitter kind
 * `webhook`): into the webhook's summary stream of the latest 100 and, when a subscription listens
 * (`emitter_id=wh_...` or `wh_*`), into the outbox, from where fan-out routes them like any emit.
 *
 * Payloads (the `event` of each summary, and the body a listener receives):
 * - `$delivery_failed`: `{webhook_id, ...the delivery as GET /v1/webhooks/{id}/deliveries shows it}`;
 * - `$webhook_disabled` / `$webhook_recovered`: `{webhook_id, reason: "receiver"|"api"|"circuit",
 *   message, delivery_id?, at}`.
 *
 * Never throws and never rejects: a health event that cannot be recorded (Redis failing) is logged
 * and counted (`tributary_health_events_total{outcome="failed"}`) and the delivery, PUT or circuit
 * change that caused it goes on (docs/decisions.md "Health events": at most once).
 */
export class HealthEvents implements HealthReporter {
  private readonly now: () => number;
  /** A health event's guard: its webhook's record; a deleted webhook's event is skipped, never recreated. */
  private readonly webhookGuard: RecordGuard = {
    keyOf: (userId, webhookId) => this.d.webhookKey(userId, webhookId),
    ensure: () => Promise.reject(new WebhookGone()),
  };

  constructor(private readonly d: HealthEventsDeps) {
    this.now = d.now ?? Date.now;
  }

  deliveryFailed(record: DeliveryRecord, hops = 0): Promise<void> {
    const n = record.attempts.length;
    return this.emit(
      record.user_id,
      record.listener_id,
      HEALTH_CHANNELS.deliveryFailed,
      { webhook_id: record.listener_id, ...deliveryView(record) },
      { id: record.id, summary: `delivery ${record.id} failed after ${n} attempt${n === 1 ? "" : "s"}` },
      hops,
    );
  }

  webhookDeactivated(userId: string, webhookId: string, why: string, deliveryId: string): Promise<void> {
    return this.webhookDisabled(userId, webhookId, "receiver", why, deliveryId);
  }

  webhookDisabled(userId: string, webhookId: string, reason: HealthReason, message: string, deliveryId?: string): Promise<void> {
    return this.change(userId, webhookId, HEALTH_CHANNELS.webhookDisabled, reason, message, deliveryId);
  }

  webhookRecovered(userId: string, webhookId: string, reason: HealthReason, message: string): Promise<void> {
    return this.change(userId, webhookId, HEALTH_CHANNELS.webhookRecovered, reason, message);
  }

  /**
   * `PUT /v1/webhooks/{id}` changed `active` (services/webhooks.ts calls this only on a change):
   * deactivating reports `$webhook_disabled`, reactivating `$webhook_recovered`, so a listener that
   * follows both channels always knows whether the webhook receives.
   */
  activeChanged(userId: string, webhookId: string, active: boolean): Promise<void> {
    return active
      ? this.webhookRecovered(userId, webhookId, "api", "webhook reactivated through the API")
      : this.webhookDisabled(userId, webhookId, "api", "webhook deactivated through the API");
  }

  /**
   * The circuit breaker's report, `HealthReporter.onCircuitChange`:
   * `opened` is `$webhook_disabled`, `closed` `$webhook_recovered`. Returns at once; the record
   * runs on its own (it cannot fail the caller).
   */
  readonly onCircuitChange = (userId: string, webhookId: string, change: CircuitChange): void => {
    void (change === "opened"
      ? this.webhookDisabled(
          userId,
          webhookId,
          "circuit",
          "circuit opened: too many consecutive failed attempts; attempts wait for the probe",
        )
      : this.webhookRecovered(userId, webhookId, "circuit", "circuit closed: a probe attempt succeeded"));
  };

  private change(
    userId: string,
    webhookId: string,
    channel: HealthChannel,
    reason: HealthReason,
    message: string,
    deliveryId?: string,
  ): Promise<void> {
    const at = new Date(this.now()).toISOString();
    const payload = { webhook_id: webhookId, reason, message, ...(deliveryId ? { delivery_id: deliveryId } : {}), at };
    return this.emit(userId, webhookId, channel, payload, { summary: `${webhookId}: ${message}` });
  }

  private async emit(userId: string, webhookId: string, channel: HealthChannel, payload: unknown, meta: EmitMeta, hops = 0): Promise<void> {
    try {
      await this.d.ingest.recordFor(
        userId,
        webhookId,
        "webhook",
        [{ event: payload, name: channel, meta: { ...meta, ts: this.now() } }],
        hops,
        this.webhookGuard,
      );
      this.d.metrics.healthEvents.inc({ event_name: channel, outcome: "recorded" });
    } catch (err) {
      if (err instanceof WebhookGone) {
        this.d.metrics.healthEvents.inc({ event_name: channel, outcome: "skipped" });
        return;
      }
      this.d.metrics.healthEvents.inc({ event_name: channel, outcome: "failed" });
      this.d.logger.warn(
        { err: err instanceof Error ? err.message : String(err), userId, webhookId, channel },
        "health event not recorded",
      );
    }
  }
}
