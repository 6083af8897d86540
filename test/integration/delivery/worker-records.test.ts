import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { newDeliveryJob } from "../../../src/delivery/jobs.js";
import { JOB_STARTS } from "../../../src/domain/delivery-plan.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { waitFor } from "../../helpers/receiver.js";
import { answers, deliveryWorker, hookedUser, installPipeline, newUserId, newWebhook, rx, w } from "../../helpers/pipeline.js";

/**
 * The BullMQ delivery worker reads the attempt record where a job may repeat work (a takeover, a
 * redone fan-out) and goes on where the record stands (delivery/worker.ts, delivery/attempt.ts).
 */

installPipeline();

describe("delivery worker: attempt record reads", () => {
  it("reads the record of a job taken over from a dead worker, and sends nothing when it was delivered", async () => {
    const userId = newUserId();
    const path = `/takeover-${randomBytes(4).toString("hex")}`;
    const hook = await newWebhook(userId, path);
    const job = (deliveryId: string, eventId: string) =>
      newDeliveryJob(
        { userId, emitterId: "p_takeover", channel: "", eventId, payload: JSON.stringify({ deliveryId }), acceptedAtMs: Date.now() },
        hook.id,
        "webhook",
        deliveryId,
        JOB_STARTS.fanout,
      );
    // Two deliveries the log already holds as delivered (their worker died before finishing the job).
    const [started, fresh] = ["d_takeoverstarted0001", "d_takeoverfresh000001"];
    for (const [id, eventId] of [
      [started, "1-1"],
      [fresh, "1-2"],
    ] as const) {
      const { payload, ...rest } = job(id, eventId);
      await w.attemptLog.upsert(
        {
          id,
          user_id: userId,
          listener_id: hook.id,
          listener_kind: "webhook",
          event_id: eventId,
          emitter_id: rest.emitterId,
          event_name: "",
          payload: payload ?? "",
          accepted_at_ms: rest.acceptedAtMs,
        },
        { status: "delivered", attempt: { at: new Date().toISOString(), status_code: 200, duration_ms: 1, error: null } },
      );
    }
    // The one BullMQ saw start before (attemptsStarted > 0 once it runs again) is checked against the
    // log; a job on its first clean attempt is not (its record cannot exist but for this contrived case).
    await w.deliveryQueue.add("webhook", job(started, "1-1"), { jobId: started });
    await w.redis.hset(`${w.keys.queuePrefix("delivery")}:${QUEUES.delivery}:${started}`, "ats", 1);
    await w.deliveryQueue.add("webhook", job(fresh, "1-2"), { jobId: fresh });
    deliveryWorker().start();
    await waitFor(async () => (await w.deliveryQueue.getJobCounts("completed")).completed === 2, { what: "both jobs to complete" });
    expect(rx.to(path).map((r) => r.headers["webhook-id"])).toEqual([fresh]);
  });

  it("sends nothing for a redone fan-out whose first attempt already gave up (a direct attempt leaves no job behind)", async () => {
    const userId = newUserId();
    const path = `/redo-failed-${randomBytes(4).toString("hex")}`;
    const { hook, deliveryOf } = await hookedUser(path, "p_redo_failed", userId);
    const deliveryId = deliveryOf("1-1");
    const data = newDeliveryJob(
      { userId, emitterId: "p_redo_failed", channel: "", eventId: "1-1", payload: "{}", acceptedAtMs: Date.now() },
      hook.id,
      "webhook",
      deliveryId,
      JOB_STARTS.redo,
    );
    await w.attemptLog.upsert(
      {
        id: deliveryId,
        user_id: userId,
        listener_id: hook.id,
        listener_kind: "webhook",
        event_id: "1-1",
        emitter_id: data.emitterId,
        event_name: "",
        payload: "{}",
        accepted_at_ms: data.acceptedAtMs,
      },
      { status: "failed", attempt: { at: new Date().toISOString(), status_code: 400, duration_ms: 1, error: "HTTP 400" } },
    );
    await w.deliveryQueue.add("webhook", data, { jobId: deliveryId });
    deliveryWorker().start();
    await waitFor(async () => (await w.deliveryQueue.getJobCounts("completed")).completed === 1, { what: "the redo job to complete" });
    expect(rx.to(path)).toHaveLength(0);
    expect((await w.attemptLog.get(userId, deliveryId))?.attempts).toHaveLength(1);
  });

  it("goes on with the schedule where the attempt log stands when a redone fan-out's job finds a pending record", async () => {
    const userId = newUserId();
    const path = `/redo-pending-${randomBytes(4).toString("hex")}`;
    const { hook, deliveryOf } = await hookedUser(path, "p_redo_pending", userId);
    answers.set(path, () => ({ status: 500 }));
    const deliveryId = deliveryOf("1-1");
    const base = {
      id: deliveryId,
      user_id: userId,
      listener_id: hook.id,
      listener_kind: "webhook" as const,
      event_id: "1-1",
      emitter_id: "p_redo_pending",
      event_name: "",
      payload: "{}",
      accepted_at_ms: Date.now(),
    };
    // Three of the schedule's four attempts are recorded (a process died before queueing the next).
    for (let i = 0; i < 3; i++) {
      await w.attemptLog.upsert(base, {
        status: "pending",
        attempt: { at: new Date().toISOString(), status_code: 500, duration_ms: 1, error: "HTTP 500" },
      });
    }
    const data = newDeliveryJob(
      { userId, emitterId: base.emitter_id, channel: "", eventId: "1-1", payload: "{}", acceptedAtMs: base.accepted_at_ms },
      hook.id,
      "webhook",
      deliveryId,
      JOB_STARTS.redo,
    );
    await w.deliveryQueue.add("webhook", data, { jobId: deliveryId, attempts: 4 });
    deliveryWorker().start();
    // The fourth attempt is the schedule's last: it gives up instead of starting the schedule over.
    await waitFor(async () => (await w.attemptLog.get(userId, deliveryId))?.status === "failed", { what: "the delivery to fail" });
    expect(rx.to(path).map((r) => r.headers["x-tributary-attempt"])).toEqual(["4"]);
    expect((await w.attemptLog.get(userId, deliveryId))?.attempts).toHaveLength(4);
  });
});
