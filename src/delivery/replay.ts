import type { Queue } from "bullmq";
import { ConflictError, NotFoundError } from "../domain/errors.js";
import type { AttemptLog, DeliveryRecord } from "../store/attempt-log.js";
import { DeliveryJobQueue, replayJob, replayJobId } from "./jobs.js";

/**
 * The record of a failed delivery once a replay took it: pending again, one more replay (its job
 * id's number), and the bulk replay that took it, if any (which counts its outcome).
 */
export function replayedRecord(d: DeliveryRecord, nowS: number, replayId?: string): DeliveryRecord {
  return { ...d, status: "pending", replays: d.replays + 1, updated_at: nowS, replay_id: replayId };
}

/**
 * Re-queues a failed delivery with a fresh attempt budget (SPEC §6 replay). The record is claimed
 * with a compare-and-set, so a bulk replay racing for the same delivery queues it only once.
 */
export async function replayDelivery(
  log: AttemptLog,
  queue: Queue,
  attempts: number,
  userId: string,
  listenerId: string,
  deliveryId: string,
): Promise<void> {
  const [read] = await log.readForClaim(userId, [deliveryId]);
  const record = read?.record;
  if (!read || !record || record.listener_id !== listenerId) throw new NotFoundError(`delivery ${deliveryId.slice(0, 64)} not found`);
  if (record.status !== "failed")
    throw new ConflictError(`delivery is ${record.status}; only failed deliveries can be retried`, "delivery_not_failed");
  const next = replayedRecord(record, Math.floor(Date.now() / 1000));
  if (!(await log.claim(read, next))) throw new ConflictError("delivery changed meanwhile; read it again", "delivery_not_failed");
  try {
    await new DeliveryJobQueue(queue, attempts).add(replayJob(next), { jobId: replayJobId(deliveryId, next.replays) });
  } catch (err) {
    // Not queued: put the record back so a later retry is possible.
    await log.update(userId, deliveryId, (d) => ({ ...d, status: "failed" })).catch(() => {});
    throw err;
  }
}
