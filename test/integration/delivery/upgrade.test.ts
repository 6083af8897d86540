import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Attempter, uncachedListeners } from "../../../src/delivery/attempt.js";
import { AttemptLog, type DeliveryBase } from "../../../src/store/attempt-log.js";
import { createSender } from "../../../src/delivery/sender.js";
import { DeliveryWorker } from "../../../src/delivery/worker.js";
import { createGuardedAgent } from "../../../src/net/guarded-agent.js";
import { createLogger } from "../../../src/observability/logger.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { deliveryJobOpts } from "../../../src/queue/job-options.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { type AnswerFn, type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * A daemon upgraded while delivery jobs of the previous version wait in Redis: those jobs carry no
 * `origin`, and the new worker must deliver them as the previous version would have (same attempt
 * numbers, same reads of the attempt log, same budgets), not drop or redo them. Each job below is
 * added exactly as that version's fan-out, direct delivery and replay added it.
 */

const logger = createLogger("silent");
const SCHEDULE_MS = [100, 200, 400];
const ATTEMPTS = SCHEDULE_MS.length + 1;
const space = keySpacePerTest();

let rx: Receiver;
const answers = new Map<string, AnswerFn>();
beforeAll(async () => {
  rx = await startReceiver((req) => (answers.get(req.path) ?? (() => ({ status: 200 })))(req));
});
afterAll(async () => {
  await rx.close();
});

let queue: Queue;
let log: AttemptLog;
const closers: (() => Promise<void>)[] = [];
beforeEach(() => {
  queue = new Queue(QUEUES.delivery, { connection: space.redis.duplicate(), prefix: space.keys.queuePrefix("delivery") });
  log = new AttemptLog(space.redis, space.keys, 1000, Date.now);
});
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await queue.close();
});

/** Starts the new version's delivery worker. */
function startWorker(): void {
  const ctx = { redis: space.redis, keys: space.keys, now: Date.now, randomBytes: (n: number) => randomBytes(n) };
  const agent = createGuardedAgent({ allowPrivate: true });
  const sender = createSender({ agent, timeoutMs: 2_000 });
  const webhooks = new WebhookStore(ctx);
  const attempter = new Attempter({
    sender,
    attemptLog: log,
    listeners: uncachedListeners(webhooks, new WorkflowStore(ctx)),
    webhooks,
    scheduleMs: SCHEDULE_MS,
    logger,
    metrics: createMetrics(new Registry()),
  });
  const connection = space.redis.duplicate();
  const worker = new DeliveryWorker({ connection, prefix: space.keys.queuePrefix("delivery"), concurrency: 4, attempter, logger });
  worker.start();
  closers.push(async () => {
    await worker.close();
    await sender.close();
    await agent.close();
    connection.disconnect();
  });
}

/** A webhook on the receiver and the data of a delivery job to it, in the previous version's shape. */
async function legacyDelivery(name: string) {
  const userId = `u_${randomBytes(6).toString("hex")}`;
  const path = `/${name}-${randomBytes(3).toString("hex")}`;
  const ctx = { redis: space.redis, keys: space.keys, now: Date.now, randomBytes: (n: number) => randomBytes(n) };
  const hook = await new WebhookStore(ctx).create(userId, {
    url: rx.url(path),
    name: null,
    description: null,
    signingSecret: `whsec_${randomBytes(24).toString("base64")}`,
  });
  const deliveryId = `d_${randomBytes(12).toString("hex")}`;
  const data = {
    userId,
    deliveryId,
    listenerKind: "webhook" as const,
    listenerId: hook.id,
    emitterId: "p_upgrade",
    channel: "",
    eventId: "1700000000000-0",
    payload: JSON.stringify({ name }),
    acceptedAtMs: Date.now(),
  };
  const base: DeliveryBase = {
    id: deliveryId,
    user_id: userId,
    listener_id: hook.id,
    listener_kind: "webhook",
    event_id: data.eventId,
    emitter_id: data.emitterId,
    event_name: "",
    payload: data.payload,
    accepted_at_ms: data.acceptedAtMs,
  };
  /** Records `n` failed attempts with `status`, as earlier attempts would have. */
  const recordAttempts = async (n: number, status: "pending" | "failed" | "delivered") => {
    for (let i = 0; i < n; i++) {
      await log.upsert(base, { status, attempt: { at: new Date().toISOString(), status_code: 500, duration_ms: 1, error: "HTTP 500" } });
    }
  };
  const attemptHeaders = () => rx.to(path).map((r) => r.headers["x-tributary-attempt"]);
  return { path, data, deliveryId, userId, recordAttempts, attemptHeaders };
}

describe("delivery jobs queued by the previous version (no origin)", () => {
  it("delivers a fan-out job as a first attempt", async () => {
    const d = await legacyDelivery("plain");
    await queue.add("webhook", d.data, deliveryJobOpts(ATTEMPTS, d.deliveryId));
    startWorker();
    await waitFor(async () => (await log.get(d.userId, d.deliveryId))?.status === "delivered", { what: "the delivery" });
    expect(d.attemptHeaders()).toEqual(["1"]);
  });

  it("goes on with attempt 2 for a retry job a direct first attempt left (priorAttempts: 1)", async () => {
    const d = await legacyDelivery("direct-retry");
    await d.recordAttempts(1, "pending");
    // As direct.ts added it: the schedule's remaining budget, after the first delay.
    await queue.add("webhook", { ...d.data, priorAttempts: 1 }, { ...deliveryJobOpts(ATTEMPTS - 1, d.deliveryId), delay: 50 });
    // The second attempt fails too, the third succeeds: the schedule goes on, not over.
    answers.set(d.path, (req) => (req.nthOnPath === 1 ? { status: 500 } : { status: 200 }));
    startWorker();
    await waitFor(async () => (await log.get(d.userId, d.deliveryId))?.status === "delivered", { what: "the delivery" });
    expect(d.attemptHeaders()).toEqual(["2", "3"]);
    expect((await log.get(d.userId, d.deliveryId))?.attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
  });

  it("gives up a direct-retry job at the end of the schedule, not after a budget started over", async () => {
    const d = await legacyDelivery("direct-retry-exhausted");
    await d.recordAttempts(1, "pending");
    await queue.add("webhook", { ...d.data, priorAttempts: 1 }, deliveryJobOpts(ATTEMPTS - 1, d.deliveryId));
    answers.set(d.path, () => ({ status: 500 }));
    startWorker();
    await waitFor(async () => (await log.get(d.userId, d.deliveryId))?.status === "failed", { what: "the delivery to fail" });
    expect(d.attemptHeaders()).toEqual(["2", "3", "4"]);
  });

  it.each(["delivered", "failed"] as const)("sends nothing for a redo job whose record says %s", async (status) => {
    const d = await legacyDelivery(`redo-${status}`);
    await d.recordAttempts(1, status);
    await queue.add("webhook", { ...d.data, redo: true }, deliveryJobOpts(ATTEMPTS, d.deliveryId));
    startWorker();
    await waitFor(async () => (await queue.getJobCounts("completed")).completed === 1, { what: "the redo job to complete" });
    expect(d.attemptHeaders()).toEqual([]);
    expect((await log.get(d.userId, d.deliveryId))?.attempts).toHaveLength(1);
  });

  it("goes on where the attempt log stands for a redo job whose record is pending", async () => {
    const d = await legacyDelivery("redo-pending");
    await d.recordAttempts(2, "pending");
    await queue.add("webhook", { ...d.data, redo: true }, deliveryJobOpts(ATTEMPTS, d.deliveryId));
    startWorker();
    await waitFor(async () => (await log.get(d.userId, d.deliveryId))?.status === "delivered", { what: "the delivery" });
    expect(d.attemptHeaders()).toEqual(["3"]);
  });

  it("gives a replay job (a job id of its own) a fresh budget, numbered on from the log", async () => {
    const d = await legacyDelivery("replay");
    await d.recordAttempts(ATTEMPTS, "failed");
    // As replay.ts did: the record set pending, then a job under `<delivery id>-r1`.
    await log.update(d.userId, d.deliveryId, (r) => ({ ...r, status: "pending", replays: 1 }));
    await queue.add("webhook", d.data, deliveryJobOpts(ATTEMPTS, `${d.deliveryId}-r1`));
    // Its first attempt fails: a fresh budget retries (continuing the old schedule would give up).
    answers.set(d.path, (req) => (req.nthOnPath === 1 ? { status: 500 } : { status: 200 }));
    startWorker();
    await waitFor(async () => (await log.get(d.userId, d.deliveryId))?.status === "delivered", { what: "the replayed delivery" });
    expect(d.attemptHeaders()).toEqual(["5", "6"]);
  });
});
