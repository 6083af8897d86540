import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import fc from "fast-check";
import type { Redis } from "ioredis";
import { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Attempter, uncachedListeners } from "../../../src/delivery/attempt.js";
import { AttemptLog } from "../../../src/store/attempt-log.js";
import { createSender } from "../../../src/delivery/sender.js";
import { DirectDelivery, type DirectDeliveryDeps } from "../../../src/delivery/direct.js";
import { DeliveryJobQueue, newDeliveryJob } from "../../../src/delivery/jobs.js";
import { DeliveryWorker } from "../../../src/delivery/worker.js";
import { JOB_STARTS } from "../../../src/domain/delivery-plan.js";
import { deliveryIdFor } from "../../../src/domain/ids.js";
import { FANOUT_GROUP, FanoutWorker } from "../../../src/events/fanout.js";
import { uniqueListeners } from "../../../src/events/fanout-plan.js";
import { EventStore } from "../../../src/store/events.js";
import { createGuardedAgent } from "../../../src/net/guarded-agent.js";
import { createLogger } from "../../../src/observability/logger.js";
import { createMetrics } from "../../../src/observability/metrics.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import type { StoreContext } from "../../../src/store/context.js";
import { createKeys, type Keys } from "../../../src/store/keys.js";
import { SubscriptionStore } from "../../../src/store/subscriptions.js";
import { WebhookStore } from "../../../src/store/webhooks.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { type AnswerFn, startReceiver, type Receiver, waitFor } from "../../helpers/receiver.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/**
 * Fan-out against real Redis and BullMQ (ARCHITECTURE "the way an event travels"): a redone
 * fan-out must not add a second job or a second delivery, entries a dead consumer left pending are
 * taken over, and subscription matching agrees with a plain reference model.
 */

const logger = createLogger("silent");
const newUserId = (): string => `u_${randomBytes(8).toString("hex")}`;

interface World {
  prefix: string;
  keys: Keys;
  redis: Redis;
  blocking: Redis;
  ctx: StoreContext;
  subscriptions: SubscriptionStore;
  attemptLog: AttemptLog;
  events: EventStore;
  deliveryQueue: Queue;
  sourceRunQueue: Queue;
  closers: (() => Promise<void>)[];
}

let w: World;

beforeEach(async () => {
  const prefix = testPrefix();
  const keys = createKeys(prefix);
  const redis = connectRedis();
  const ctx: StoreContext = { redis, keys, now: Date.now, randomBytes: (n) => randomBytes(n) };
  const queueOpts = { connection: redis.duplicate(), prefix: keys.bullPrefix };
  w = {
    prefix,
    keys,
    redis,
    blocking: connectRedis(),
    ctx,
    subscriptions: new SubscriptionStore(ctx),
    attemptLog: new AttemptLog(redis, keys, 1000, Date.now),
    events: new EventStore(redis, keys),
    deliveryQueue: new Queue(QUEUES.delivery, queueOpts),
    sourceRunQueue: new Queue(QUEUES.sourceRun, queueOpts),
    closers: [],
  };
});

afterEach(async () => {
  for (const close of w.closers.reverse()) await close();
  await w.deliveryQueue.close();
  await w.sourceRunQueue.close();
  await dropPrefix(w.redis, w.prefix);
  w.blocking.disconnect();
  w.redis.disconnect();
});

/** The registry of the last fan-out worker built by `fanout()`. */
let fanoutRegistry = new Registry();

function fanout(consumer: string, claimIdleMs = 15_000, direct?: DirectDelivery, blocking = w.blocking): FanoutWorker {
  fanoutRegistry = new Registry();
  const f = new FanoutWorker({
    blocking,
    redis: w.redis,
    keys: w.keys,
    subscriptions: w.subscriptions,
    deliveryJobs: new DeliveryJobQueue(w.deliveryQueue, 4),
    sourceRunQueue: w.sourceRunQueue,
    logger,
    metrics: createMetrics(fanoutRegistry),
    consumer,
    claimIdleMs,
    direct,
  });
  w.closers.push(() => f.close());
  return f;
}

/** The attempter every delivery attempt goes through (queued or direct), on its own sender. */
function attempter(timeoutMs = 2_000): Attempter {
  const agent = createGuardedAgent({ allowPrivate: true });
  const sender = createSender({ agent, timeoutMs });
  const webhooks = new WebhookStore(w.ctx);
  w.closers.push(async () => {
    await sender.close();
    await agent.close();
  });
  return new Attempter({
    sender,
    attemptLog: w.attemptLog,
    listeners: uncachedListeners(webhooks, new WorkflowStore(w.ctx)),
    webhooks,
    scheduleMs: [100, 200, 400],
    logger,
    metrics: createMetrics(new Registry()),
  });
}

/** The BullMQ delivery worker, not started. */
function deliveryWorker(through = attempter()): DeliveryWorker {
  const connection = w.redis.duplicate();
  const worker = new DeliveryWorker({ connection, prefix: w.keys.bullPrefix, concurrency: 4, attempter: through, logger });
  w.closers.push(async () => {
    await worker.close();
    connection.disconnect();
  });
  return worker;
}

async function createGroup(): Promise<void> {
  await w.redis.xgroup("CREATE", w.keys.outbox(), FANOUT_GROUP, "0", "MKSTREAM");
}

async function recordEvents(userId: string, emitterId: string, n: number): Promise<string[]> {
  return w.events.record({
    userId,
    emitterId,
    emitterKind: "workflow",
    channel: "",
    events: Array.from({ length: n }, (_, i) => ({ payload: { i }, meta: {}, emitId: `emit_${i}` })),
    acceptedAtMs: Date.now(),
  });
}

async function outboxEntries(): Promise<[string, string[]][]> {
  return (await w.redis.xrange(w.keys.outbox(), "-", "+")) as [string, string[]][];
}

async function jobIds(queue: Queue): Promise<string[]> {
  const jobs = await queue.getJobs(["wait", "active", "delayed", "completed", "failed", "prioritized"]);
  return jobs.map((j) => j.id ?? "").sort();
}

let rx: Receiver;
/** How the receiver answers, per path (default 200); each test's paths are its own. */
const answers = new Map<string, AnswerFn>();
beforeAll(async () => {
  rx = await startReceiver((req) => (answers.get(req.path.split("?")[0] ?? "") ?? (() => ({ status: 200 })))(req));
});
afterAll(async () => {
  await rx.close();
});

describe("fan-out redo", () => {
  it("adds one job and one delivery per event and listener, however often an entry is fanned out", async () => {
    const userId = newUserId();
    const path = `/redo-${randomBytes(4).toString("hex")}`;
    const hook = await newWebhook(userId, path);
    const emitter = "p_redo";
    await w.subscriptions.create(userId, emitter, hook.id, "");
    await w.subscriptions.create(userId, "p_*", hook.id, "default"); // the same listener again, through a glob
    await w.subscriptions.create(userId, emitter, "dc_listener0001", "");
    await createGroup();
    const ids = await recordEvents(userId, emitter, 3);
    const entries = await outboxEntries();
    expect(entries).toHaveLength(3);

    const f = fanout("redo");
    await f.process(entries);
    const counted = async (kind: string) =>
      (await fanoutRegistry.getSingleMetric("tributary_fanout_deliveries_total")?.get())?.values.find(
        (v) => v.labels.listener_kind === kind,
      )?.value;
    expect(await counted("webhook")).toBe(3); // exact and glob subscription: one job per event
    expect(await counted("source")).toBe(3);
    await f.process(entries); // a crash between the jobs and the XACK makes the entry come back
    const expectedDeliveries = ids.map((eventId) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, hook.id)).sort();
    expect(await jobIds(w.deliveryQueue)).toEqual(expectedDeliveries);
    expect(await jobIds(w.sourceRunQueue)).toHaveLength(3);
    // The attempt log gets a record when the first attempt ends, not at fan-out.
    expect(await w.redis.zcard(w.keys.deliveries(userId, hook.id))).toBe(0);
    expect(await w.redis.xlen(w.keys.outbox())).toBe(0);

    // Delivered once each...
    deliveryWorker().start();
    await rx.waitFor((r) => r.to(path).length >= 3, { what: "3 deliveries" });
    const delivered = async () => {
      const page = await w.attemptLog.list(userId, hook.id, { limit: 10 });
      return page.data.length === 3 && page.data.every((d) => d.status === "delivered");
    };
    await waitFor(delivered, { what: "3 delivered records" });

    // ...and a redo after delivery finds the completed jobs and adds nothing.
    await f.process(entries);
    expect(await jobIds(w.deliveryQueue)).toEqual(expectedDeliveries);
    expect((await w.deliveryQueue.getJobCounts("wait", "active", "delayed")).wait).toBe(0);

    // Once the completed jobs are gone (removeOnComplete), a redo adds jobs again; the worker
    // finds the deliveries done in the attempt log and sends nothing.
    for (const job of await w.deliveryQueue.getJobs(["completed"])) await job.remove();
    await f.process(entries);
    await waitFor(async () => (await w.deliveryQueue.getJobCounts("completed")).completed === 3, {
      what: "the redone jobs to complete",
    });
    expect(
      rx
        .to(path)
        .map((r) => r.headers["x-tributary-event-id"])
        .sort(),
    ).toEqual([...ids].sort());
  });
});

/** Direct delivery through `through`. */
function direct(through: DirectDeliveryDeps["attempter"], opts: { concurrency?: number; clogMs?: number } = {}) {
  return new DirectDelivery({
    attempter: through,
    jobs: new DeliveryJobQueue(w.deliveryQueue, 4),
    concurrency: opts.concurrency ?? 8,
    clogMs: opts.clogMs ?? 100,
    logger,
  });
}

/** A signed webhook of `userId` at `path` on the receiver. */
function newWebhook(userId: string, path: string) {
  return new WebhookStore(w.ctx).create(userId, {
    url: rx.url(path),
    name: null,
    description: null,
    signingSecret: `whsec_${randomBytes(24).toString("base64")}`,
  });
}

/** A user with a signed webhook at `path` on the receiver, subscribed to `emitter`. */
async function hookedUser(path: string, emitter: string, userId = newUserId()) {
  const hook = await newWebhook(userId, path);
  await w.subscriptions.create(userId, emitter, hook.id, "");
  await createGroup();
  const deliveryOf = (eventId: string) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, hook.id);
  return { userId, hook, deliveryOf };
}

const outboxPending = async () => Number(((await w.redis.xpending(w.keys.outbox(), FANOUT_GROUP)) as unknown[])[0] ?? 0);

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
    await waitFor(async () => (await w.redis.xlen(w.keys.outbox())) === 0 && (await outboxPending()) === 0, {
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
      await waitFor(async () => (await w.redis.xlen(w.keys.outbox())) === 1, { what: "only the held entry left" });
      expect(await outboxPending()).toBe(1);
      release();
      await waitFor(async () => (await outboxPending()) === 0 && (await w.redis.xlen(w.keys.outbox())) === 0, {
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
          payload,
          accepted_at_ms: rest.acceptedAtMs,
        },
        { status: "delivered", attempt: { at: new Date().toISOString(), status_code: 200, duration_ms: 1, error: null } },
      );
    }
    // The one BullMQ saw start before (attemptsStarted > 0 once it runs again) is checked against the
    // log; a job on its first clean attempt is not (its record cannot exist but for this contrived case).
    await w.deliveryQueue.add("webhook", job(started, "1-1"), { jobId: started });
    await w.redis.hset(`${w.keys.bullPrefix}:${QUEUES.delivery}:${started}`, "ats", 1);
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

describe("record without listeners", () => {
  it("writes the summary but no outbox entry for an emitter nobody subscribes to, on any channel", async () => {
    const userId = newUserId();
    const channelOf = async (emitterId: string, channel: string) =>
      w.events.record({
        userId,
        emitterId,
        emitterKind: "workflow",
        channel,
        events: [{ payload: { channel }, meta: {}, emitId: "emit_x" }],
        acceptedAtMs: Date.now(),
      });
    await channelOf("p_quiet", "");
    expect(await w.redis.xlen(w.keys.outbox())).toBe(0);
    expect(await w.redis.xlen(w.keys.events(userId, "p_quiet", ""))).toBe(1);

    // An exact subscription on another channel does not count; one on this channel does.
    await w.subscriptions.create(userId, "p_quiet", "wh_listener0001", "other");
    await channelOf("p_quiet", "");
    expect(await w.redis.xlen(w.keys.outbox())).toBe(0);
    await channelOf("p_quiet", "other");
    expect(await w.redis.xlen(w.keys.outbox())).toBe(1);

    // A glob subscription covers every emitter of its kind ("default" and "" are one channel)...
    await w.subscriptions.create(userId, "p_*", "wh_listener0001", "default");
    await channelOf("p_another", "");
    expect(await w.redis.xlen(w.keys.outbox())).toBe(2);
    // ...but not the other kind, nor another user.
    await channelOf("dc_source000001", "");
    await w.events.record({
      userId: newUserId(),
      emitterId: "p_quiet",
      emitterKind: "workflow",
      channel: "",
      events: [{ payload: {}, meta: {}, emitId: "emit_y" }],
      acceptedAtMs: Date.now(),
    });
    expect(await w.redis.xlen(w.keys.outbox())).toBe(2);
  });
});

describe("fan-out takeover", () => {
  it("takes over entries a dead consumer read but never acknowledged, once they are idle", async () => {
    const userId = newUserId();
    const emitter = "p_takeover";
    await w.subscriptions.create(userId, emitter, "wh_listener0001", "");
    await createGroup();
    const ids = await recordEvents(userId, emitter, 5);
    // A consumer reads the entries and dies before fanning them out.
    await w.redis.xreadgroup("GROUP", FANOUT_GROUP, "dead-consumer", "COUNT", 100, "STREAMS", w.keys.outbox(), ">");
    const readAt = Date.now();
    const pendingSummary = (await w.redis.xpending(w.keys.outbox(), FANOUT_GROUP)) as [number, string, string, [string, string][]];
    expect(pendingSummary[0]).toBe(5);
    expect(pendingSummary[3]).toEqual([["dead-consumer", "5"]]);

    const claimIdleMs = 300;
    await fanout("live-consumer", claimIdleMs).start();
    const expected = ids.map((eventId) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, "wh_listener0001")).sort();
    await waitFor(async () => (await jobIds(w.deliveryQueue)).length === 5, { what: "5 delivery jobs", timeoutMs: 10_000 });
    expect(await jobIds(w.deliveryQueue)).toEqual(expected);
    const jobs = await w.deliveryQueue.getJobs(["wait"]);
    // Not taken before the entries had been idle for claimIdleMs.
    expect(Math.min(...jobs.map((j) => j.timestamp)) - readAt).toBeGreaterThanOrEqual(claimIdleMs - 20);
    await waitFor(async () => Number(((await w.redis.xpending(w.keys.outbox(), FANOUT_GROUP)) as [number])[0]) === 0, {
      what: "the pending list to empty",
    });
    expect(await w.redis.xlen(w.keys.outbox())).toBe(0);

    // The live consumer also reads new entries the normal way.
    const [late] = await recordEvents(userId, emitter, 1);
    const lateId = deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId: late! }, "wh_listener0001");
    await waitFor(async () => (await jobIds(w.deliveryQueue)).includes(lateId), { what: "the job of a new entry" });
  });
});

describe("fan-out consumers", () => {
  const consumers = async () =>
    ((await w.redis.xinfo("CONSUMERS", w.keys.outbox(), FANOUT_GROUP)) as string[][]).map((c) => ({ name: c[1], pending: Number(c[3]) }));

  it("registers itself at start and prunes idle consumers of stopped processes, never one with pending entries", async () => {
    await createGroup();
    // A stopped process that read nothing, and a dead one that left an entry pending.
    await w.redis.xgroup("CREATECONSUMER", w.keys.outbox(), FANOUT_GROUP, "stopped-consumer");
    const userId = newUserId();
    await w.subscriptions.create(userId, "p_prune", "wh_listener0001", "");
    await recordEvents(userId, "p_prune", 1);
    await w.redis.xreadgroup("GROUP", FANOUT_GROUP, "dead-consumer", "COUNT", 10, "STREAMS", w.keys.outbox(), ">");

    const f = fanout("live-consumer", 60_000);
    await f.start();
    expect((await consumers()).map((c) => c.name).sort()).toEqual(["dead-consumer", "live-consumer", "stopped-consumer"]);
    // Idle for an hour: none yet.
    expect(await f.pruneConsumers()).toBe(0);
    // Idle at all: the stopped one goes; the dead one keeps its pending entry for takeover, and the caller stays.
    expect(await f.pruneConsumers(0)).toBe(1);
    expect(await consumers()).toEqual([
      { name: "dead-consumer", pending: 1 },
      { name: "live-consumer", pending: 0 },
    ]);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: subscription matching equals a reference model

interface SubTriple {
  emitter: string;
  listener: string;
  channel: string;
}

/**
 * The reference model of SPEC §2 subscription matching: a subscription matches an event when its
 * emitter is the event's emitter or the glob of its kind (dc_*, p_*), and its channel equals the
 * event's channel, "" and "default" being the same. The result is a set of listeners: an exact
 * and a glob subscription to the same listener make one delivery. Subscriptions of one user never
 * see another user's events (the model keeps one list per user).
 */
function referenceListeners(subs: readonly SubTriple[], event: { emitter: string; channel: string }): Set<string> {
  const channel = (c: string) => (c === "default" ? "" : c);
  const emitterMatches = (pattern: string) =>
    pattern === event.emitter ||
    (pattern === "dc_*" && event.emitter.startsWith("dc_")) ||
    (pattern === "p_*" && event.emitter.startsWith("p_"));
  return new Set(subs.filter((s) => emitterMatches(s.emitter) && channel(s.channel) === channel(event.channel)).map((s) => s.listener));
}

const EMITTERS = ["dc_aaaaaaaaaaaa", "dc_bbbbbbbbbbbb", "p_alpha", "p_beta"];
const LISTENERS = ["wh_111111111111", "wh_222222222222", "p_listener", "dc_listener00001"];
const channelArb = fc.oneof(
  fc.constantFrom("", "default", "Default", "$errors", "$logs", "orders", "a:b", "%3A"),
  fc.string({ minLength: 1, maxLength: 12 }),
);

describe("subscription matching (property)", () => {
  it("finds exactly the listeners the reference model finds, per user, with creates and deletes", async () => {
    const opArb = fc.record({
      kind: fc.constantFrom("create", "create", "create", "delete"),
      user: fc.constantFrom(0, 1),
      emitter: fc.constantFrom(...EMITTERS, "dc_*", "p_*"),
      listener: fc.constantFrom(...LISTENERS),
      channel: channelArb,
    });
    const eventArb = fc.record({
      user: fc.constantFrom(0, 1),
      emitter: fc.constantFrom(...EMITTERS, "p_nosubs", "dc_nosubs000000"),
      channel: channelArb,
    });
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 25 }), fc.array(eventArb, { minLength: 1, maxLength: 12 }), async (ops, events) => {
        const users = [newUserId(), newUserId()] as const;
        const model: Map<string, SubTriple>[] = [new Map(), new Map()];
        const tripleKey = (s: SubTriple) => `${s.emitter}\n${s.listener}\n${s.channel === "default" ? "" : s.channel}`;
        for (const op of ops) {
          const triple = { emitter: op.emitter, listener: op.listener, channel: op.channel };
          const userModel = model[op.user]!;
          if (op.kind === "create") {
            const rec = await w.subscriptions.create(users[op.user], op.emitter, op.listener, op.channel);
            expect(rec).toMatchObject({ emitter_id: op.emitter, listener_id: op.listener });
            if (!userModel.has(tripleKey(triple))) userModel.set(tripleKey(triple), triple);
          } else {
            const existed = await w.subscriptions.deleteTriple(users[op.user], op.emitter, op.listener, op.channel);
            expect(existed).toBe(userModel.has(tripleKey(triple)));
            userModel.delete(tripleKey(triple));
          }
        }
        for (const ev of events) {
          const expected = [...referenceListeners([...model[ev.user]!.values()], ev)].sort();
          // Fan-out passes the stored (normalised) channel; the raw name must give the same answer.
          for (const channel of [ev.channel, ev.channel === "default" ? "" : ev.channel]) {
            const listeners = uniqueListeners(await w.subscriptions.matching(users[ev.user], ev.emitter, channel));
            expect(listeners.length).toBe(new Set(listeners).size);
            expect([...listeners].sort()).toEqual(expected);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});
