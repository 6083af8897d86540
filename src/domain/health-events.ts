/**
 * Health events (SPEC §12): what Tributary itself emits about its webhooks, with the webhook id as
 * emitter, on three channels. They are ordinary events (recorded, listed at
 * `GET /v1/webhooks/{id}/event_summaries`, routed by subscriptions to `wh_...` or `wh_*`); this
 * module holds the names and the one rule that keeps them from feeding themselves.
 */

export const HEALTH_CHANNELS = {
  /** A delivery to the webhook used its last attempt (or the queue gave up on it). */
  deliveryFailed: "$delivery_failed",
  /** The webhook stopped receiving: deactivated (410, `webhook-delivery: disable`, PUT) or its circuit opened. */
  webhookDisabled: "$webhook_disabled",
  /** The webhook receives again: reactivated by PUT, or its circuit closed. */
  webhookRecovered: "$webhook_recovered",
} as const;

export type HealthChannel = (typeof HEALTH_CHANNELS)[keyof typeof HEALTH_CHANNELS];

/** Why a webhook was disabled or recovered (the `reason` field of those two events). */
export type HealthReason =
  /** The receiver asked: 410 Gone, or a `webhook-delivery: disable` header. */
  | "receiver"
  /** `PUT /v1/webhooks/{id}` changed `active`. */
  | "api"
  /** The circuit breaker opened (disabled) or closed after a successful probe (recovered). */
  | "circuit";

/**
 * Only webhooks emit under a `wh_` id (workflows emit as `p_`, sources as `dc_`), so an event of a
 * `wh_` emitter is a health event.
 */
export function isHealthEvent(emitterId: string): boolean {
  return emitterId.startsWith("wh_");
}

/**
 * Whether a webhook delivery that gave up reports `$delivery_failed`: never for the delivery of a
 * health event itself. Without this rule a failing webhook subscribed to `wh_*` (or to its own
 * id) would turn each failure into another delivery to itself, which fails too, forever; and two
 * failing webhooks subscribed to each other would do the same between them. The failure is still
 * in the attempt log and in `tributary_deliveries_total{outcome="failed"}`.
 */
export function reportsDeliveryFailure(listenerKind: string, emitterId: string): boolean {
  return listenerKind === "webhook" && !isHealthEvent(emitterId);
}
