/**
 * BullMQ options of the jobs fan-out, direct delivery, replays and HTTP endpoints add, declared
 * once.
 */

/**
 * BullMQ options of a delivery job (one literal: this runs once per delivery). How long finished
 * jobs are kept is the delivery worker's (DELIVERY_KEEP), not each job's: the options are stored
 * in every job's hash for as long as it waits, and an outage's backlog holds many.
 */
export function deliveryJobOpts(attempts: number, jobId: string) {
  return { jobId, attempts, backoff: DELIVERY_BACKOFF };
}
const DELIVERY_BACKOFF = { type: "tributary" } as const;

/**
 * The delivery worker's removal of finished jobs. Completed ids linger a while so a redone fan-out
 * finds them and adds nothing twice. Jobs queued by versions that set these per job keep theirs.
 */
export const DELIVERY_KEEP = {
  removeOnComplete: { age: 600, count: 50_000 },
  removeOnFail: { age: 7 * 24 * 3600, count: 50_000 },
} as const;

export const SOURCE_RUN_JOB_OPTS = {
  attempts: 1,
  removeOnComplete: { age: 600, count: 10_000 },
  removeOnFail: { age: 24 * 3600, count: 10_000 },
};
