import { randomBytes } from "node:crypto";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { FairGate } from "../../../src/delivery/fair-gate.js";
import { DeliveryJobQueue } from "../../../src/delivery/jobs.js";
import { DeliveryWorker } from "../../../src/delivery/worker.js";
import { JOB_STARTS } from "../../../src/domain/delivery-plan.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import type { DeliveryJob } from "../../../src/queue/catalog.js";
import { waitFor } from "../../helpers/receiver.js";
import {
  answers,
  attempter,
  deliveryWorker,
  direct,
  fanout,
  hookedUser,
  installPipeline,
  logger,
  recordEvents,
  rx,
  w,
} from "../../helpers/pipeline.js";

/**
 * The caps of delivery/fair-gate.ts on each path, against real Redis, BullMQ and a loopback
 * receiver: a direct first attempt over its destination's cap is queued instead of made; a queued
 * job over its user's cap is put off (delayed) without spending an attempt.
 */

installPipeline();

describe("delivery caps", () => {
  it("direct: queues a delivery over its destination's cap instead of attempting it, though direct slots are free", async () => {
    const path = `/capped-${randomBytes(4).toString("hex")}`;
    const { userId } = await hookedUser(path, "p_capped");
    let release: () => void = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    answers.set(path, async (req) => {
      if (req.nthOnPath === 1) await released;
      return { status: 200 };
    });
    try {
      // Slots to spare, but one attempt at a time to the destination; attempts count as slow after 20 ms.
      await fanout("capped", 15_000, direct(attempter(), { concurrency: 8, clogMs: 20, perDestination: 1 })).start();
      await recordEvents(userId, "p_capped", 1);
      await rx.waitFor((r) => r.to(path).length === 1, { what: "the first attempt" });
      await new Promise((r) => setTimeout(r, 50)); // the attempt in flight now counts as slow
      await recordEvents(userId, "p_capped", 2);
      // Queued, not attempted: nothing more reaches the receiver while the first attempt hangs.
      await waitFor(async () => (await w.deliveryQueue.getJobCounts("wait")).wait === 2, { what: "2 queued jobs" });
      expect(rx.to(path)).toHaveLength(1);
      release();
      deliveryWorker().start();
      await rx.waitFor((r) => r.to(path).length === 3, { what: "the queued deliveries" });
      expect(rx.to(path).map((r) => r.headers["x-tributary-attempt"])).toEqual(["1", "1", "1"]);
    } finally {
      release();
    }
  });

  it("worker: moves a job over its user's cap to delayed without spending an attempt, and delivers it as attempt 1 later", async () => {
    const path = `/capped-worker-${randomBytes(4).toString("hex")}`;
    const { userId, hook, deliveryOf } = await hookedUser(path, "p_capped_worker");
    const registry = new Registry();
    const metrics = createMetrics(registry);
    const gate = new FairGate({ directSlots: 0, perUser: 1, perDestination: 0, clogMs: 20, destinationOf: (j) => j.listenerId, metrics });
    const connection = w.redis.duplicate();
    const worker = new DeliveryWorker({
      connection,
      prefix: w.keys.queuePrefix("delivery"),
      concurrency: 4,
      attempter: attempter(),
      gate,
      logger,
    });
    w.closers.push(async () => {
      await worker.close();
      connection.disconnect();
    });
    // Another attempt of the user holds its only slot, long enough to count as slow.
    const other = { userId, listenerId: "wh_elsewhere", listenerKind: "webhook" } as DeliveryJob;
    const entry = await gate.enter(other, "queue");
    if (!("ticket" in entry)) throw new Error("the first entry should get a slot");
    await new Promise((r) => setTimeout(r, 50));

    const deliveryId = deliveryOf("evt_capped");
    const job: DeliveryJob = {
      ...JOB_STARTS.fanout,
      userId,
      listenerId: hook.id,
      listenerKind: "webhook",
      deliveryId,
      emitterId: "p_capped_worker",
      channel: "",
      eventId: "evt_capped",
      payload: JSON.stringify({ capped: true }),
      acceptedAtMs: Date.now(),
    };
    await new DeliveryJobQueue(w.deliveryQueue, 4).add(job);
    worker.start();
    await waitFor(
      async () =>
        (await w.deliveryQueue.getJob(deliveryId))?.attemptsStarted === 1 && (await w.deliveryQueue.getJobState(deliveryId)) === "delayed",
      {
        what: "the job put off",
      },
    );
    const putOff = await w.deliveryQueue.getJob(deliveryId);
    expect(putOff?.attemptsMade).toBe(0);
    expect(rx.to(path)).toHaveLength(0);
    const capped = (await registry.getSingleMetric("tributary_deliveries_total")?.get())?.values.find((v) => v.labels.outcome === "capped");
    expect(capped?.value).toBeGreaterThanOrEqual(1);

    entry.ticket.release();
    await rx.waitFor((r) => r.to(path).length === 1, { timeoutMs: 15_000, what: "the put-off delivery" });
    expect(rx.to(path)[0]?.headers["x-tributary-attempt"]).toBe("1");
    await waitFor(async () => (await w.attemptLog.get(userId, deliveryId))?.status === "delivered", { what: "the delivery recorded" });
  });
});
