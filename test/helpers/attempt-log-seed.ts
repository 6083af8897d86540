import type { Redis } from "ioredis";
import { AttemptLog, type DeliveryStatus } from "../../src/store/attempt-log.js";
import { createKeys } from "../../src/store/keys.js";

/** One delivery to write straight into a webhook's attempt log (as the attempter would). */
export interface SeedDelivery {
  readonly id: string;
  /** Event time in ms (the log's order; `since`/`until` select on it). */
  readonly atMs: number;
  readonly status: DeliveryStatus;
  readonly eventName?: string;
  readonly payload?: unknown;
}

/**
 * Writes deliveries of `webhookId` (which must exist) into a daemon's attempt log, each with one
 * attempt of its status, so attempt-log queries and replays have a known log without waiting for
 * real failures. Returns the log bound to the daemon's key prefix.
 */
export async function seedDeliveries(
  redis: Redis,
  prefix: string,
  userId: string,
  webhookId: string,
  list: readonly SeedDelivery[],
  logLimit = 100_000,
): Promise<AttemptLog> {
  const log = new AttemptLog(redis, createKeys(prefix), logLimit, Date.now);
  const batch = 200;
  for (let i = 0; i < list.length; i += batch) {
    await Promise.all(
      list.slice(i, i + batch).map((d) =>
        log.upsert(
          {
            id: d.id,
            user_id: userId,
            listener_id: webhookId,
            listener_kind: "webhook",
            event_id: `${d.atMs}-0`,
            emitter_id: "p_seed",
            event_name: d.eventName ?? "",
            payload: JSON.stringify(d.payload ?? { id: d.id }),
            accepted_at_ms: d.atMs,
          },
          {
            status: d.status,
            attempt: {
              at: new Date(d.atMs).toISOString(),
              status_code: d.status === "delivered" ? 200 : 500,
              duration_ms: 1,
              error: d.status === "delivered" ? null : "HTTP 500",
            },
          },
        ),
      ),
    );
  }
  return log;
}
