import { signatureHeader, signPayload } from "../domain/signing.js";
import type { DeliveryJob } from "../queue/catalog.js";
import type { SendRequest } from "./sender.js";
import { eventNameHeader } from "../domain/channel-name.js";
import { DELIVERY_USER_AGENT, isReservedHeader } from "../domain/webhook-settings.js";

/** Where an attempt goes: a webhook's URL and signing secret, or a workflow's trigger_url (no secret). */
export interface Destination {
  readonly url: string;
  readonly secret: string | null;
  /**
   * A webhook's rotated-out secret while its overlap lasts: the attempt carries both signatures,
   * newest first, so receivers holding either secret verify it.
   */
  readonly previousSecret?: string | null;
  /** A webhook's static headers (its `headers` setting); they never replace the delivery's own. */
  readonly headers?: Readonly<Record<string, string>> | null;
  /** A webhook's `timeout_ms`, else the sender's default. */
  readonly timeoutMs?: number | null;
}

/**
 * The "prepare" phase of an attempt: the request it sends, with the Tributary and Standard
 * Webhooks headers and, for a webhook, the signature. Pure but for the HMAC (deterministic).
 * `headerAttempt` is the attempt's number as the attempt log counts it (AttemptPlan); `nowMs`
 * dates the signature; `body` is the payload sent (the job's, or its event's stored one).
 */
export function prepareRequest(
  job: DeliveryJob,
  to: Destination,
  headerAttempt: number,
  nowMs: number,
  body = job.payload ?? "",
): SendRequest {
  const timestamp = Math.floor(nowMs / 1000);
  // One literal (no spreads or Object.assign): this runs once per attempt.
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "user-agent": DELIVERY_USER_AGENT,
    "x-tributary-emitter-id": job.emitterId,
    "x-tributary-event-id": job.eventId,
    "x-tributary-event-name": eventNameHeader(job.channel),
    "x-tributary-attempt": String(headerAttempt),
    "x-tributary-delivery-id": job.deliveryId,
    "webhook-id": job.deliveryId,
    "webhook-timestamp": String(timestamp),
  };
  // Workflow deliveries are not signed (a workflow has no signing secret).
  if (to.secret)
    headers["webhook-signature"] = to.previousSecret
      ? signatureHeader([to.secret, to.previousSecret], job.deliveryId, timestamp, body)
      : signPayload(to.secret, job.deliveryId, timestamp, body);
  if (to.headers) {
    // A header the API refuses today may be stored from before that rule: it is left out rather
    // than failing every attempt.
    for (const name in to.headers) if (!(name in headers) && !isReservedHeader(name)) headers[name] = to.headers[name] as string;
  }
  return to.timeoutMs ? { url: to.url, body, headers, timeoutMs: to.timeoutMs } : { url: to.url, body, headers };
}
