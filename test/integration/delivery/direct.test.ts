import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { waitFor } from "../../helpers/receiver.js";
import { connectRedis } from "../../helpers/redis.js";
import {
  answers,
  attempter,
  deliveryWorker,
  direct,
  fanout,
  fanoutRegistry,
  hookedUser,
  installPipeline,
  jobIds,
  outboxLength,
  outboxPending,
  recordEvents,
  rx,
  w,
} from "../../helpers/pipeline.js";

/**
 * Direct first attempts (delivery/direct.ts) inside fan-out: made without a job while a slot is
 * free, handed to the queue when they fail or when slots are taken, leases renewed.
 */

installPipeline();

describe("direct first attempts (delivery/direct.ts)", () => {
  it("makes the first attempt itself: delivered without a job, recorded, counted, and the entry acknowledged", async () => {
    const path = `/direct-${randomBytes(4).toString("hex")}`;
    const { userId, hook } = await hookedUser(path, "p_direct");
    await fanout("direct", 15_000, direct(attempter())).start();
    await recordEvents(userId, "p_direct", 3);
    await rx.waitFor((r) => r.to(path).length === 3, { what: "3 deliveries" });
    expect(rx.to(path).map((r) => r.headers["x-tributary-attempt"])).toEqual(["1", "1", "1"]);
    await waitFor(async () => (await w.attemptLog.list(userId, hook.id, { limit: 10 })).data.every((d) => d.status === "delivered"), {
      what: "3 delivered records",
    });
    const records = (await w.attemptLog.list(userId, hook.id, { limit: 10 })).data;
    expect(records.map((d) => d.attempts.map((a) => a.status_code))).toEqual([[200], [200], [200]]);
    // The BullMQ worker of deliveryWorker() never started: no job was needed.
    expect(await jobIds(w.deliveryQueue)).toEqual([]);
    await waitFor(async () => (await outboxLength()) === 0 && (await outboxPending()) === 0, {
      what: "the outbox entries acknowledged and deleted",
    });
    const counted = (await fanoutRegistry.getSingleMetric("tributary_fanout_direct_deliveries_total")?.get())?.values;
    expect(counted?.find((v) => v.labels.listener_kind === "webhook")?.value).toBe(3);
  });

  it("hands a failed first attempt to the queue, which goes on with attempt 2 of the schedule", async () => {
    const path = `/direct-retry-${randomBytes(4).toString("hex")}`;
    const { userId, hook, deliveryOf } = await hookedUser(path, "p_direct_retry");
    answers.set(path, (req) => (req.nthOnPath === 1 ? { status: 500, body: "try later" } : { status: 200 }));
    const through = attempter();
    deliveryWorker(through).start();
    await fanout("direct-retry", 15_000, direct(through)).start();
    const [eventId] = await recordEvents(userId, "p_direct_retry", 1);
    await rx.waitFor((r) => r.to(path).length === 2, { what: "2 attempts" });
    const [first, second] = rx.to(path);
    expect([first?.headers["x-tributary-attempt"], second?.headers["x-tributary-attempt"]]).toEqual(["1", "2"]);
    expect(second?.headers["webhook-id"]).toBe(first?.headers["webhook-id"]);
    const job = await w.deliveryQueue.getJob(deliveryOf(eventId as string));
    expect(job?.data).toMatchObject({ origin: "direct-retry", priorAttempts: 1 });
    expect(job?.opts.attempts).toBe(3); // the schedule's 4 attempts, less the direct one
    await waitFor(async () => (await w.attemptLog.get(userId, deliveryOf(eventId as string)))?.status === "delivered", {
      what: "the delivery recorded as delivered",
    });
    const record = await w.attemptLog.get(userId, deliveryOf(eventId as string));
    expect(record?.attempts.map((a) => [a.attempt, a.status_code, a.error])).toEqual([
      [1, 500, "HTTP 500; response: try later"],
      [2, 200, null],
    ]);
    expect(record?.listener_id).toBe(hook.id);
  });

  it("queues deliveries while every slot is taken, and acknowledges a held entry only once its attempt settles", async () => {
    const path = `/direct-full-${randomBytes(4).toString("hex")}`;
    const { userId, deliveryOf } = await hookedUser(path, "p_direct_full");
    let release: () => void = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    answers.set(path, async (req) => {
      if (req.nthOnPath === 1) await released;
      return { status: 200 };
    });
    try {
      await fanout("direct-full", 15_000, direct(attempter(), { concurrency: 1, clogMs: 20 })).start();
      const [held] = await recordEvents(userId, "p_direct_full", 1);
      await rx.waitFor((r) => r.to(path).length === 1, { what: "the first attempt" });
      const more = await recordEvents(userId, "p_direct_full", 3);
      // No slot frees: the three become jobs (the delivery worker is not running, so they wait).
      await waitFor(async () => (await jobIds(w.deliveryQueue)).length === 3, { what: "3 queued jobs" });
      expect(await jobIds(w.deliveryQueue)).toEqual(more.map(deliveryOf).sort());
      expect(await w.deliveryQueue.getJob(deliveryOf(held as string))).toBeUndefined();
      // The held entry is still pending; the others are acknowledged and gone.
      await waitFor(async () => (await outboxLength()) === 1, { what: "only the held entry left" });
      expect(await outboxPending()).toBe(1);
      release();
      await waitFor(async () => (await outboxPending()) === 0 && (await outboxLength()) === 0, {
        what: "the held entry acknowledged once its attempt settled",
      });
    } finally {
      release();
    }
  });

  it("waits for a slot held by a quick attempt instead of queueing the delivery", async () => {
    const path = `/direct-wait-${randomBytes(4).toString("hex")}`;
    const { userId, hook } = await hookedUser(path, "p_direct_wait");
    answers.set(path, async () => {
      await new Promise((r) => setTimeout(r, 100));
      return { status: 200 };
    });
    // One slot, and attempts count as slow only after 5 s: each event waits for the one before.
    await fanout("direct-wait", 15_000, direct(attempter(), { concurrency: 1, clogMs: 5_000 })).start();
    await recordEvents(userId, "p_direct_wait", 3);
    const delivered = async () => (await w.attemptLog.list(userId, hook.id, { limit: 10 })).data.filter((d) => d.status === "delivered");
    await waitFor(async () => (await delivered()).length === 3, { what: "3 delivered records" });
    expect(await jobIds(w.deliveryQueue)).toEqual([]);
    // One at a time: each request arrived after the previous one was answered.
    const at = rx.to(path).map((r) => r.at);
    expect(at).toHaveLength(3);
    for (let i = 1; i < at.length; i++) expect((at[i] as number) - (at[i - 1] as number)).toBeGreaterThanOrEqual(90);
  });

  it("renews the lease of an entry whose attempt outlasts the take-over idle time, so no other consumer redoes it", async () => {
    const path = `/direct-lease-${randomBytes(4).toString("hex")}`;
    const { userId, deliveryOf } = await hookedUser(path, "p_direct_lease");
    answers.set(path, async () => {
      await new Promise((r) => setTimeout(r, 5_000));
      return { status: 200 };
    });
    // Entries idle for 2.5 s are taken over (well above the 1 s the loop may block reading).
    await fanout("lease-a", 2_500, direct(attempter(7_000))).start();
    const [eventId] = await recordEvents(userId, "p_direct_lease", 1);
    await rx.waitFor((r) => r.to(path).length === 1, { what: "the first attempt" });
    // A second consumer (another process: its own blocking connection) that takes over entries
    // idle for 2.5 s, while the attempt takes 5 s.
    const ownBlocking = connectRedis();
    w.closers.push(async () => ownBlocking.disconnect());
    const other = fanout("lease-b", 2_500, undefined, ownBlocking);
    await other.start();
    await waitFor(async () => (await w.attemptLog.get(userId, deliveryOf(eventId as string)))?.status === "delivered", {
      timeoutMs: 10_000,
      what: "the slow attempt recorded as delivered",
    });
    await waitFor(async () => (await outboxPending()) === 0, { what: "the entry acknowledged" });
    // Taken over, the entry would have become a redo job (the delivery worker is not running).
    expect(await jobIds(w.deliveryQueue)).toEqual([]);
    expect(rx.to(path)).toHaveLength(1);
  });

  it("queues a delivery as a redo when its direct attempt fails unexpectedly", async () => {
    const path = `/direct-broken-${randomBytes(4).toString("hex")}`;
    const { userId, deliveryOf } = await hookedUser(path, "p_direct_broken");
    const broken = direct({
      attempt: async () => {
        throw new Error("the attempt log is unwritable");
      },
    });
    await fanout("direct-broken", 15_000, broken).start();
    const [eventId] = await recordEvents(userId, "p_direct_broken", 1);
    const job = await waitFor(() => w.deliveryQueue.getJob(deliveryOf(eventId as string)), { what: "the redo job" });
    // `redo: true` too, for a worker of the previous version during a rolling upgrade.
    expect(job.data).toMatchObject({ origin: "redo", priorAttempts: 0, redo: true });
    expect(job.opts.attempts).toBe(4);
    await waitFor(async () => (await outboxPending()) === 0, { what: "the entry acknowledged once the job exists" });
  });
});
