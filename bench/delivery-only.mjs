// npm run bench:delivery — the delivery worker alone against a plain BullMQ worker, on the same jobs.
//
// Fan-out queues N delivery jobs (one webhook subscribed), then either Tributary's DeliveryWorker
// (signing, webhook cache, attempt log, metrics) or a plain BullMQ Worker POSTing with undici drains
// them to a receiver in a child process. Prints this process's CPU per delivery, which is only the
// worker's: the comparison `npm run bench`'s drain row mixes with fan-out. Runs the compiled dist/
// (the npm script builds first). REDIS_URL (default redis://127.0.0.1:6379) and a private key
// prefix, removed afterwards. DELIVERY_ONLY_RUNS (default 3) pairs, alternating;
// DELIVERY_ONLY_PROF=<file> writes a CPU profile of the last Tributary run's delivery phase.
import { fork } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { Session } from "node:inspector/promises";
import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import { Registry } from "prom-client";
import { Agent, request } from "undici";
import { Attempter } from "../dist/src/delivery/attempt.js";
import { AttemptLog } from "../dist/src/store/attempt-log.js";
import { DeliveryJobQueue } from "../dist/src/delivery/jobs.js";
import { createSender } from "../dist/src/delivery/sender.js";
import { DeliveryWorker } from "../dist/src/delivery/worker.js";
import { FanoutWorker } from "../dist/src/events/fanout.js";
import { EventStore } from "../dist/src/store/events.js";
import { createGuardedAgent } from "../dist/src/net/guarded-agent.js";
import { createLogger } from "../dist/src/observability/logger.js";
import { createMetrics } from "../dist/src/observability/metrics.js";
import { QUEUES } from "../dist/src/queue/catalog.js";
import { createKeys } from "../dist/src/store/keys.js";
import { SubscriptionStore } from "../dist/src/store/subscriptions.js";
import { ListenerCache } from "../dist/src/store/listener-cache.js";
import { WebhookStore } from "../dist/src/store/webhooks.js";
import { WorkflowStore } from "../dist/src/store/workflows.js";

const N = 20_000;
const CONCURRENCY = 64;
const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";

if (process.argv[2] === "receiver") {
  let n = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-length": "0" });
      res.end();
      if (++n % 500 === 0) process.send?.(n);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, "127.0.0.1", () => process.send?.({ port: server.address().port }));
} else {
  const results = { tributary: [], plain: [] };
  const runs = Number(process.env.DELIVERY_ONLY_RUNS ?? 3);
  for (let i = 0; i < runs; i++) {
    for (const kind of ["plain", "tributary"]) {
      const prof = kind === "tributary" && i === runs - 1 ? process.env.DELIVERY_ONLY_PROF : undefined;
      const r = await once(kind, prof);
      results[kind].push(r);
      console.log(
        `${kind.padEnd(9)} ${N} deliveries in ${r.ms.toFixed(0)} ms = ${((N * 1000) / r.ms).toFixed(0)}/s, ${r.us.toFixed(1)} µs worker CPU per delivery`,
      );
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const t = median(results.tributary.map((r) => r.us));
  const p = median(results.plain.map((r) => r.us));
  console.log(`median CPU per delivery: Tributary ${t.toFixed(1)} µs, plain BullMQ ${p.toFixed(1)} µs (${(p / t).toFixed(2)}×)`);
  process.exit(0);
}

async function once(kind, profFile) {
  const rx = fork(new URL(import.meta.url).pathname, ["receiver"]);
  const port = await new Promise((resolve) => rx.on("message", (m) => typeof m === "object" && resolve(m.port)));
  let received = 0;
  rx.on("message", (m) => {
    if (typeof m === "number") received = m;
  });
  const keys = createKeys(`delivonly${randomBytes(3).toString("hex")}`);
  const redis = new Redis(REDIS_URL, { enableAutoPipelining: true, maxRetriesPerRequest: 2 });
  const queueConnection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const blocking = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const workerConnection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const subscriber = new Redis(REDIS_URL);
  const ctx = { redis, keys, now: Date.now, randomBytes: (n) => randomBytes(n) };
  const userId = "u_deliveryonly01";
  const target = `http://127.0.0.1:${port}/hook`;
  const webhooks = new WebhookStore(ctx);
  const hook = await webhooks.create(userId, {
    url: target,
    name: null,
    description: null,
    signingSecret: `whsec_${randomBytes(24).toString("base64")}`,
  });
  const subscriptions = new SubscriptionStore(ctx);
  await subscriptions.create(userId, "p_deliveryonly", hook.id, "");
  const events = new EventStore(redis, keys);
  for (let i = 0; i < N; i += 500) {
    const batch = Array.from({ length: 500 }, (_, k) => ({
      payload: { seq: i + k, kind: "bench", msg: "hello from the bench", n: 42, ok: true },
      meta: {},
      emitId: `emit_${i + k}`,
    }));
    await events.record({
      userId,
      emitterId: "p_deliveryonly",
      emitterKind: "workflow",
      channel: "",
      events: batch,
      acceptedAtMs: Date.now(),
    });
  }
  const deliveryQueue = new Queue(QUEUES.delivery, { connection: queueConnection, prefix: keys.bullPrefix });
  const sourceRunQueue = new Queue(QUEUES.sourceRun, { connection: queueConnection, prefix: keys.bullPrefix });
  const logger = createLogger("silent");
  const metrics = createMetrics(new Registry());
  const fanout = new FanoutWorker({
    blocking,
    redis,
    keys,
    subscriptions,
    deliveryJobs: new DeliveryJobQueue(deliveryQueue, 3),
    sourceRunQueue,
    logger,
    metrics,
    consumer: "delivery-only",
    claimIdleMs: 15_000,
  });
  await fanout.start();
  while ((await redis.xlen(keys.outbox())) > 0) await new Promise((r) => setTimeout(r, 20));
  await fanout.close();

  const agent = kind === "plain" ? new Agent({ keepAliveTimeout: 4_000 }) : createGuardedAgent({ allowPrivate: true });
  const sender = createSender({ agent, timeoutMs: 15_000 });
  const workflows = new WorkflowStore(ctx);
  const cache = new ListenerCache(webhooks, workflows, { subscriber, channel: keys.listenerChanges(), logger });
  await cache.start();
  const worker =
    kind === "plain"
      ? new Worker(
          QUEUES.delivery,
          async (job) => {
            const res = await request(target, {
              dispatcher: agent,
              method: "POST",
              body: job.data.payload,
              headers: { "content-type": "application/json" },
            });
            await res.body.dump();
          },
          { connection: workerConnection, prefix: keys.bullPrefix, concurrency: CONCURRENCY, autorun: false },
        )
      : new DeliveryWorker({
          connection: workerConnection,
          prefix: keys.bullPrefix,
          concurrency: CONCURRENCY,
          attempter: new Attempter({
            sender,
            attemptLog: new AttemptLog(redis, keys, 1000, Date.now),
            listeners: cache,
            webhooks,
            scheduleMs: [1000, 2000],
            logger,
            metrics,
          }),
          logger,
        });
  let session;
  if (profFile) {
    session = new Session();
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.start");
  }
  const cpu = process.cpuUsage();
  const started = performance.now();
  if (kind === "plain") void worker.run();
  else worker.start();
  while (received < N) await new Promise((r) => setTimeout(r, 10));
  const used = process.cpuUsage(cpu);
  const ms = performance.now() - started;
  if (session) {
    const { profile } = await session.post("Profiler.stop");
    writeFileSync(profFile, JSON.stringify(profile));
  }
  await worker.close();
  await sender.close();
  await agent.close();
  await cache.stop();
  await deliveryQueue.obliterate({ force: true });
  await deliveryQueue.close();
  await sourceRunQueue.close();
  let cursor = "0";
  do {
    const [next, found] = await redis.scan(cursor, "MATCH", `${keys.prefix}*`, "COUNT", 1000);
    cursor = next;
    if (found.length > 0) await redis.unlink(...found);
  } while (cursor !== "0");
  for (const c of [redis, queueConnection, blocking, workerConnection]) c.disconnect();
  rx.kill();
  return { ms, us: (used.user + used.system) / N };
}
