import type { Queue } from "bullmq";
import { ConflictError, NotFoundError } from "../domain/errors.js";
import type { AttemptLog } from "../store/attempt-log.js";
import { DeliveryJobQueue, replayJob, replayJobId } from "./jobs.js";

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
  try {
    await new DeliveryJobQueue(queue, attempts).add(replayJob(record), { jobId: replayJobId(deliveryId, updated?.replays ?? 1) });
  } catch (err) {
    // Not queued: put the record back so a later retry is possible.
    await log.update(userId, deliveryId, (d) => ({ ...d, status: "failed" })).catch(() => {});
    throw err;
  }
}
