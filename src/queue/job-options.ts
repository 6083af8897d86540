/**
 * BullMQ options of the jobs fan-out, direct delivery, replays and HTTP endpoints add, declared
 * once.
 */

/** BullMQ options of a delivery job (one literal: this runs once per delivery). */
export function deliveryJobOpts(attempts: number, jobId: string) {
  return {
    jobId,
    attempts,
    backoff: DELIVERY_BACKOFF,
    // Completed ids linger a while so a redone fan-out finds them and adds nothing twice.
    removeOnComplete: DELIVERY_REMOVE_ON_COMPLETE,
    removeOnFail: DELIVERY_REMOVE_ON_FAIL,
  };
}
const DELIVERY_BACKOFF = { type: "tributary" } as const;
const DELIVERY_REMOVE_ON_COMPLETE = { age: 600, count: 50_000 } as const;
const DELIVERY_REMOVE_ON_FAIL = { age: 7 * 24 * 3600, count: 50_000 } as const;

export const SOURCE_RUN_JOB_OPTS = {
  attempts: 1,
  removeOnComplete: { age: 600, count: 10_000 },
  removeOnFail: { age: 24 * 3600, count: 10_000 },
};
