import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest";
import { Attempter, uncachedListeners } from "../../src/delivery/attempt.js";
import { AttemptLog } from "../../src/store/attempt-log.js";
import { createSender } from "../../src/delivery/sender.js";
import { DirectDelivery, type DirectDeliveryDeps } from "../../src/delivery/direct.js";
import { FairGate } from "../../src/delivery/fair-gate.js";
import { DeliveryJobQueue } from "../../src/delivery/jobs.js";
import { DeliveryWorker } from "../../src/delivery/worker.js";
import { deliveryIdFor } from "../../src/domain/ids.js";
import { type FanoutDeps, FanoutWorker } from "../../src/events/fanout.js";
import { entryRef, OutboxStream, outboxLength as lengthOf } from "../../src/store/outbox-stream.js";
import { EventStore } from "../../src/store/events.js";
import { createGuardedAgent } from "../../src/net/guarded-agent.js";
import { createLogger } from "../../src/observability/logger.js";
import { createMetrics } from "../../src/observability/metrics.js";
import { QUEUES } from "../../src/queue/catalog.js";
import { SourceRunIntake } from "../../src/runtime/run-intake.js";
import { RunStream } from "../../src/store/run-stream.js";
import type { StoreContext } from "../../src/store/context.js";
import { createKeys, type Keys } from "../../src/store/keys.js";
import { SubscriptionStore } from "../../src/store/subscriptions.js";
import { WebhookStore } from "../../src/store/webhooks.js";
import { WorkflowStore } from "../../src/store/workflows.js";
import { type AnswerFn, startReceiver, type Receiver } from "./receiver.js";
import { connectRedis, dropPrefix, testPrefix } from "./redis.js";

/**
 * The shared harness of the pipeline tests (fan-out, direct first attempts, the delivery worker)
 * against real Redis, BullMQ and a loopback receiver: the stores, queues and workers built the way
 * the daemon builds them, under a fresh key prefix per test. A test file calls `installPipeline()`
 * once at its top and uses the live bindings `w` (this test's world) and `rx` (the receiver).
 */
export const logger = createLogger("silent");
export const newUserId = (): string => `u_${randomBytes(8).toString("hex")}`;

export interface World {
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

export let w: World;

/** The registry of the last fan-out worker built by `fanout()`. */
export let fanoutRegistry = new Registry();

export function fanout(
  consumer: string,
  claimIdleMs = 15_000,
  direct?: DirectDelivery,
  blocking = w.blocking,
  replicas?: FanoutDeps["replicas"],
): FanoutWorker {
  fanoutRegistry = new Registry();
  const f = new FanoutWorker({
    blocking,
    redis: w.redis,
    keys: w.keys,
    subscriptions: w.subscriptions,
    deliveryJobs: new DeliveryJobQueue(w.deliveryQueue, 4),
    sourceRuns: new SourceRunIntake(new RunStream(w.redis, w.keys, 32)),
    logger,
    metrics: createMetrics(fanoutRegistry),
    consumer,
    claimIdleMs,
    direct,
    replicas,
  });
  w.closers.push(() => f.close());
  return f;
}

/** The attempter every delivery attempt goes through (queued or direct), on its own sender. */
export function attempter(timeoutMs = 2_000): Attempter {
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
export function deliveryWorker(through = attempter()): DeliveryWorker {
  const connection = w.redis.duplicate();
  const worker = new DeliveryWorker({ connection, prefix: w.keys.queuePrefix("delivery"), concurrency: 4, attempter: through, logger });
  w.closers.push(async () => {
    await worker.close();
    connection.disconnect();
  });
  return worker;
}

/** Creates the fan-out group on every shard outbox (as a fan-out worker's start does). */
export async function createGroup(): Promise<void> {
  await new OutboxStream(w.redis, w.redis, w.keys).ensureGroup();
}

export async function recordEvents(userId: string, emitterId: string, n: number): Promise<string[]> {
  return w.events.record({
    userId,
    emitterId,
    emitterKind: "workflow",
    channel: "",
    events: Array.from({ length: n }, (_, i) => ({ payload: { i }, meta: {}, emitId: `emit_${i}` })),
    acceptedAtMs: Date.now(),
  });
}

/** Every shard outbox's entries, named by refs (`<shard>/<id>`, as FanoutWorker.process takes them), shard after shard. */
export async function outboxEntries(): Promise<[string, string[]][]> {
  const out: [string, string[]][] = [];
  for (let shard = 0; shard < w.keys.shards; shard++) {
    const entries = (await w.redis.xrange(w.keys.shardOutbox(shard), "-", "+")) as [string, string[]][];
    for (const [id, fields] of entries) out.push([entryRef(shard, id), fields]);
  }
  return out;
}

/** Entries in every shard outbox. */
export const outboxLength = (): Promise<number> => lengthOf(w.redis, w.keys);

export async function jobIds(queue: Queue): Promise<string[]> {
  const jobs = await queue.getJobs(["wait", "active", "delayed", "completed", "failed", "prioritized"]);
  return jobs.map((j) => j.id ?? "").sort();
}

export let rx: Receiver;
/** How the receiver answers, per path (default 200); each test's paths are its own. */
export const answers = new Map<string, AnswerFn>();

/** Direct delivery through `through`, with no per-user or per-destination cap unless `opts` sets them. */
export function direct(
  through: DirectDeliveryDeps["attempter"],
  opts: { concurrency?: number; clogMs?: number; perUser?: number; perDestination?: number } = {},
) {
  const gate = new FairGate({
    directSlots: opts.concurrency ?? 8,
    perUser: opts.perUser ?? 0,
    perDestination: opts.perDestination ?? 0,
    clogMs: opts.clogMs ?? 100,
    destinationOf: (job) => job.listenerId,
    metrics: createMetrics(new Registry()),
  });
  return new DirectDelivery({ attempter: through, jobs: new DeliveryJobQueue(w.deliveryQueue, 4), gate, logger });
}

/** A signed webhook of `userId` at `path` on the receiver. */
export function newWebhook(userId: string, path: string) {
  return new WebhookStore(w.ctx).create(userId, {
    url: rx.url(path),
    name: null,
    description: null,
    signingSecret: `whsec_${randomBytes(24).toString("base64")}`,
  });
}

/** A user with a signed webhook at `path` on the receiver, subscribed to `emitter`. */
export async function hookedUser(path: string, emitter: string, userId = newUserId()) {
  const hook = await newWebhook(userId, path);
  await w.subscriptions.create(userId, emitter, hook.id, "");
  await createGroup();
  const deliveryOf = (eventId: string) => deliveryIdFor({ userId, emitterId: emitter, channel: "", eventId }, hook.id);
  return { userId, hook, deliveryOf };
}

/** Entries read and not acknowledged, over every shard outbox. */
export const outboxPending = async () => (await new OutboxStream(w.redis, w.redis, w.keys).stats()).pending;

/**
 * Registers the hooks of a pipeline test file: a fresh key space, connections, queues and stores
 * per test (`w`), and one loopback receiver per file (`rx`, answering per path from `answers`).
 */
export function installPipeline(): void {
  beforeEach(async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const redis = connectRedis();
    const ctx: StoreContext = { redis, keys, now: Date.now, randomBytes: (n) => randomBytes(n) };
    const connection = redis.duplicate();
    w = {
      prefix,
      keys,
      redis,
      blocking: connectRedis(),
      ctx,
      subscriptions: new SubscriptionStore(ctx),
      attemptLog: new AttemptLog(redis, keys, 1000, Date.now),
      events: new EventStore(redis, keys),
      deliveryQueue: new Queue(QUEUES.delivery, { connection, prefix: keys.queuePrefix("delivery") }),
      sourceRunQueue: new Queue(QUEUES.sourceRun, { connection, prefix: keys.queuePrefix("source-run") }),
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
  beforeAll(async () => {
    rx = await startReceiver((req) => (answers.get(req.path.split("?")[0] ?? "") ?? (() => ({ status: 200 })))(req));
  });
  afterAll(async () => {
    await rx.close();
  });
}
