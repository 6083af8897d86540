import type { DeliveryRecord } from "../store/attempt-log.js";

/**
 * What the Attempter tells about a webhook's health (SPEC §12 health events). The delivery layer
 * only reports; events/health.ts (`HealthEvents`) records the events, wired in app/. Every method
 * resolves, never rejects: a health event that cannot be recorded is logged and counted by the
 * implementation and never fails or retries the attempt that caused it.
 */
export interface HealthReporter {
  /**
   * A webhook delivery ended failed: `record` is its attempt-log record after the last write,
   * `hops` those of the delivered event's chain (the health event carries them on).
   */
  deliveryFailed(record: DeliveryRecord, hops: number): Promise<void>;
  /** A delivery deactivated the webhook (410 Gone or `webhook-delivery: disable`); `why` is the verdict's reason. */
  webhookDeactivated(userId: string, webhookId: string, why: string, deliveryId: string): Promise<void>;
  /**
   * A webhook's circuit changed, told once per transition by the process whose attempt made it:
   * "opened" when a closed circuit opens (not when a failed probe reopens it), "closed" when it
   * closes. Returns at once and never throws.
   */
  onCircuitChange(userId: string, webhookId: string, change: "opened" | "closed"): void;
}
