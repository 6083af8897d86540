import { describe, expect, it } from "vitest";
import { DELIVERY_KEEP, deliveryJobOpts, SOURCE_RUN_JOB_OPTS } from "../../../src/queue/job-options.js";
import { WORKER_RECOVERY } from "../../../src/queue/worker-options.js";

describe("job options", () => {
  it("gives a delivery job its deterministic id, its attempts and the retry schedule's backoff", () => {
    const opts = deliveryJobOpts(4, "dlv_abc");
    expect(opts.jobId).toBe("dlv_abc");
    expect(opts.attempts).toBe(4);
    expect(opts.backoff).toEqual({ type: "tributary" });
    // Completed ids linger (the worker's setting, not stored in every waiting job), so a fan-out
    // entry redone after a crash adds no job twice.
    expect(opts).not.toHaveProperty("removeOnComplete");
    expect(DELIVERY_KEEP.removeOnComplete.age).toBeGreaterThanOrEqual(60);
  });

  it("runs a source-run job once (a run is not retried) and keeps bounded histories", () => {
    expect(SOURCE_RUN_JOB_OPTS.attempts).toBe(1);
    expect(SOURCE_RUN_JOB_OPTS.removeOnComplete.count).toBeGreaterThan(0);
    expect(SOURCE_RUN_JOB_OPTS.removeOnFail.count).toBeGreaterThan(0);
  });

  it("takes a dead worker's jobs back within seconds, without ever failing them for stalling", () => {
    expect(WORKER_RECOVERY.stalledInterval).toBeLessThanOrEqual(10_000);
    expect(WORKER_RECOVERY.lockDuration).toBeGreaterThan(WORKER_RECOVERY.stalledInterval);
    expect(WORKER_RECOVERY.maxStalledCount).toBeGreaterThanOrEqual(1_000_000);
  });
});
