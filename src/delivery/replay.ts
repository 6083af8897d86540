import type { Queue } from "bullmq";
import { ConflictError, NotFoundError } from "../domain/errors.js";
import { deliveryJobOpts } from "../queue/job-options.js";
import type { DeliveryJob } from "../queue/catalog.js";
import type { AttemptLog } from "./attempt-log.js";

/** Re-queues a failed delivery with a fresh attempt budget (SPEC §6 replay). */
export async function replayDelivery(
  log: AttemptLog,
  queue: Queue,
  attempts: number,
  userId: string,
  listenerId: string,
  deliveryId: string,
): Promise<void> {
  const record = await log.get(userId, deliveryId);
  if (!record || record.listener_id !== listenerId) throw new NotFoundError(`delivery ${deliveryId.slice(0, 64)} not found`);
  if (record.status !== "failed")
    throw new ConflictError(`delivery is ${record.status}; only failed deliveries can be retried`, "delivery_not_failed");
  const updated = await log.update(userId, deliveryId, (d) => ({ ...d, status: "pending", replays: d.replays + 1 }));
  const data: DeliveryJob = {
    userId,
    deliveryId,
    listenerKind: record.listener_kind,
    listenerId,
    emitterId: record.emitter_id,
    channel: record.event_name,
    eventId: record.event_id,
    payload: record.payload,
    acceptedAtMs: record.accepted_at_ms,
  };
  try {
    await queue.add(record.listener_kind, data, deliveryJobOpts(attempts, `${deliveryId}-r${updated?.replays ?? 1}`));
  } catch (err) {
    // Not queued: put the record back so a later retry is possible.
    await log.update(userId, deliveryId, (d) => ({ ...d, status: "failed" })).catch(() => {});
    throw err;
  }
}
