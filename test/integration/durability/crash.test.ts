import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { deliveryIdFor } from "../../../src/domain/ids.js";
import { FANOUT_GROUP } from "../../../src/events/fanout.js";
import { OutboxStream } from "../../../src/store/outbox-stream.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { type EmbeddedRedis, freePort, startEmbeddedRedis } from "../../../src/redis/embedded.js";
import { createKeys } from "../../../src/store/keys.js";
import { client } from "../../helpers/daemon.js";
import { type DaemonChild, killAll, spawnDaemon, startRedisServer, waitForReady, waitWhileRunning } from "../../helpers/process.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";

/**
 * The at-least-once promise of SPEC §6, proved with real processes: the daemon runs as separate
 * `ROLES=api` and `ROLES=worker` children against a private redis-server with an append-only file,
 * and each test SIGKILLs a worker, an api process or Redis itself in the middle of a burst. Every
 * event the api acknowledged with 202 must reach the receiver at least once; duplicates are
 * allowed and reported (`[durability]` lines in the output).
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
const TOTAL_EVENTS = 2000;
/**
 * How long the receiver may take, after a replacement worker starts, to have seen every event
 * acknowledged before a worker was SIGKILLed. What the dead worker held comes back two ways:
 * outbox entries it had read (direct first attempts in flight among them) by XAUTOCLAIM once idle
 * for 15 s, and jobs it had active through BullMQ's stalled-job check once their lock expires
 * (WORKER_RECOVERY: 15 s locks, a check every 5 s), so about 15-25 s (measured 17-18 s on a
 * 2-CPU machine). The deadline leaves room for a slow machine.
 */
const STALLED_RECOVERY_DEADLINE_MS = 95_000;
/** The receiver path that answers after 150 ms. */
const SLOW_PATH = "/crash-direct";
/** Without a crashed worker, nothing has to wait for a stalled-job check. */
const DRAIN_DEADLINE_MS = 30_000;

let redis: EmbeddedRedis;
let dataDir: string;
let rx: Receiver;
/** "<path> <event id>" of every request the receiver answered 200. */
const answeredOk = new Set<string>();
const seenOnSlowPath = new Set<string>();
const conns: Redis[] = [];
const queues: Queue[] = [];

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "tributary-crash-"));
  redis = await startEmbeddedRedis({ dir: path.join(dataDir, "shared") });
  // The direct-delivery crash test's endpoint answers slowly, and 500 to an event's first request:
  // an attempt cut by the kill has arrived but not delivered anything, so only a redo delivers.
  rx = await startReceiver(async (req) => {
    const id = String(req.headers["x-tributary-event-id"]);
    if (req.path === SLOW_PATH) {
      await new Promise((r) => setTimeout(r, 150));
      if (!seenOnSlowPath.has(id)) {
        seenOnSlowPath.add(id);
        return { status: 500 };
      }
    }
    answeredOk.add(`${req.path} ${id}`);
    return { status: 200 };
  });
});

afterEach(async () => {
  await killAll();
  for (const q of queues.splice(0)) await q.close().catch(() => {});
  for (const c of conns.splice(0)) c.disconnect();
});

afterAll(async () => {
  await killAll();
  await rx?.close();
  await redis?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// Processes and Redis

function daemonEnv(redisUrl: string, prefix: string, roles: string, port: number): Record<string, string> {
  return {
    REDIS_URL: redisUrl,
    REDIS_KEY_PREFIX: prefix,
    ADMIN_TOKEN,
    PORT: String(port),
    HOST: "127.0.0.1",
    ROLES: roles,
    ALLOW_PRIVATE_DESTINATIONS: "true",
    DELIVERY_RETRY_SCHEDULE: "100ms,200ms,400ms,800ms",
    // The slow path fails every event's first request by design: a burst of them would (rightly)
    // open its circuit and pause it for a cool-down, which is not what these tests measure.
    CIRCUIT_FAILURE_THRESHOLD: "1000000",
    LOG_LEVEL: "warn",
  };
}

async function startApi(redisUrl: string, prefix: string, name: string): Promise<DaemonChild> {
  const d = spawnDaemon(name, daemonEnv(redisUrl, prefix, "api", await freePort()));
  await waitForReady(d);
  return d;
}

/**
 * A worker has no HTTP. It is ready once a new Redis client sits in the fan-out's XREADGROUP (a
 * consumer only shows in XINFO CONSUMERS after it has read an entry, so that cannot tell an idle
 * worker from a dead one).
 */
async function startWorker(redisUrl: string, prefix: string, name: string, conn: Redis): Promise<DaemonChild> {
  const before = new Set(await outboxReaders(conn));
  const d = spawnDaemon(name, daemonEnv(redisUrl, prefix, "worker", 0));
  await waitWhileRunning(d, async () => (await outboxReaders(conn)).some((id) => !before.has(id)), `${name} reading the outbox`);
  return d;
}

/** Ids of the Redis clients whose last command was XREADGROUP (fan-out consumers). */
async function outboxReaders(conn: Redis): Promise<string[]> {
  const list = (await conn.client("LIST")) as string;
  return list
    .split("\n")
    .filter((line) => / cmd=xreadgroup( |$)/.test(line))
    .map((line) => /^id=(\d+)/.exec(line)?.[1] ?? "");
}

/** A connection of the test's own, quiet while Redis is being killed and restarted. */
function connect(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: null });
  c.on("error", () => {});
  conns.push(c);
  return c;
}

function deliveryQueue(conn: Redis, prefix: string): Queue {
  const c = conn.duplicate();
  c.on("error", () => {});
  conns.push(c);
  const q = new Queue(QUEUES.delivery, { connection: c, prefix: createKeys(prefix).queuePrefix("delivery") });
  q.on("error", () => {});
  queues.push(q);
  return q;
}

/** What a worker leaves behind when it dies: outbox entries read but not acknowledged, and jobs. */
async function inFlight(conn: Redis, prefix: string) {
  const keys = createKeys(prefix);
  const [{ length: outboxLength, pending }, counts] = await Promise.all([
    new OutboxStream(conn, conn, keys).stats(),
    deliveryQueue(conn, prefix).getJobCounts("active", "wait", "delayed", "prioritized"),
  ]);
  return {
    outboxEntries: outboxLength,
    outboxReadNotAcked: pending,
    activeJobs: counts.active ?? 0,
    waitingJobs: (counts.wait ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0),
  };
}

// ---------------------------------------------------------------------------------------------
// The burst

interface Provisioned {
  apiKey: string;
  userId: string;
  workflowId: string;
  webhookId: string;
}

/** A user with a webhook at `rx.url(hookPath)` subscribed to workflow `p_burst`. */
async function provision(apiUrl: string, hookPath: string): Promise<Provisioned> {
  const admin = client(apiUrl, ADMIN_TOKEN);
  const tag = randomBytes(4).toString("hex");
  const user = await admin.post("/admin/users", { json: { username: `crash${tag}`, email: `crash${tag}@example.com`, plan: "paid" } });
  expect(user.status, user.text).toBe(201);
  const api = client(apiUrl, user.body.data.api_key);
  const hook = await api.post("/v1/webhooks", { json: { url: rx.url(hookPath), name: "crash" } });
  expect(hook.status, hook.text).toBe(200);
  const workflowId = "p_burst";
  const sub = await api.post("/v1/subscriptions", { json: { emitter_id: workflowId, listener_id: hook.body.data.id } });
  expect(sub.status, sub.text).toBe(200);
  return { apiKey: user.body.data.api_key, userId: user.body.data.id, workflowId, webhookId: hook.body.data.id };
}

/** Request sizes for the burst: batches of several sizes interleaved with singles. */
function burstPlan(total: number): number[] {
  const pattern = [25, 1, 1, 10, 1, 50, 1, 1, 3, 1, 100, 1, 7, 1, 1];
  const sizes: number[] = [];
  let sum = 0;
  for (let i = 0; sum < total; i++) {
    const n = Math.min(pattern[i % pattern.length] ?? 1, total - sum);
    sizes.push(n);
    sum += n;
  }
  return sizes;
}

interface BurstResult {
  /** Event ids from 202 answers. */
  acked: Set<string>;
  /** Requests without a 202 (connection cut by a kill, 5xx): the fate of their events is unknown. */
  failedRequests: number;
  failedEvents: number;
  /** Status and body of the first request without a 202, for failure messages. */
  firstFailure?: string;
}

const newResult = (): BurstResult => ({ acked: new Set(), failedRequests: 0, failedEvents: 0 });

/**
 * Sends `plan` through 4 concurrent request loops. A gate is a step (kill a process, start
 * another) that runs once `atEvents` events have been handed out; no lane hands out more until it
 * has finished. `apiUrl()` is read per request, so a gate can move the lanes to another process.
 */
async function burst(opts: {
  plan: number[];
  apiKey: string;
  apiUrl: () => string;
  workflowId: string;
  gates: { atEvents: number; step: () => Promise<void> }[];
  result?: BurstResult;
  /** Characters of padding per event (default 64); past 1,024 a payload is stored once per event. */
  padBytes?: number;
}): Promise<BurstResult> {
  const result = opts.result ?? newResult();
  const gates = opts.gates.map((g) => ({ ...g, done: undefined as Promise<void> | undefined }));
  let next = 0;
  let handedOut = 0;
  let seq = 0;
  const lane = async () => {
    for (;;) {
      for (const g of gates) {
        if (handedOut >= g.atEvents) {
          g.done ??= g.step();
          await g.done;
        }
      }
      const size = opts.plan[next++];
      if (size === undefined) return;
      handedOut += size;
      const events = Array.from({ length: size }, () => ({ event: { seq: seq++, pad: "x".repeat(opts.padBytes ?? 64) } }));
      const res = await client(opts.apiUrl(), opts.apiKey)
        .post(`/v1/workflows/${opts.workflowId}/events`, { json: size === 1 ? events[0] : { events } })
        .catch(() => undefined);
      if (res?.status !== 202) {
        result.firstFailure ??= res ? `${res.status} ${res.text.slice(0, 200)}` : "no answer";
        result.failedRequests++;
        result.failedEvents += size;
        continue;
      }
      const data = res.body.data as { id: string } | { id: string }[];
      for (const d of Array.isArray(data) ? data : [data]) result.acked.add(d.id);
    }
  };
  await Promise.all(Array.from({ length: 4 }, lane));
  // A gate past the last event still runs (nothing may be skipped silently).
  for (const g of gates) {
    g.done ??= g.step();
    await g.done;
  }
  return result;
}

interface Tally {
  /** Events the receiver answered 200 on the path. */
  unique: Set<string>;
  received: number;
}

function tally(hookPath: string): Tally {
  const reqs = rx.to(hookPath);
  const unique = new Set<string>();
  for (const r of reqs) {
    const id = r.headers["x-tributary-event-id"];
    if (typeof id === "string" && answeredOk.has(`${hookPath} ${id}`)) unique.add(id);
  }
  return { unique, received: reqs.length };
}

/** Where missing events are stuck: outbox, fan-out pending list, delivery job state, attempt log. */
async function whereAre(ids: string[], conn: Redis, prefix: string, p: Provisioned): Promise<string> {
  const keys = createKeys(prefix);
  const q = deliveryQueue(conn, prefix);
  const outbox: [string, string[]][] = [];
  const pending: [string, string, number, number][] = [];
  for (let shard = 0; shard < keys.shards; shard++) {
    outbox.push(...((await conn.xrange(keys.shardOutbox(shard), "-", "+")) as [string, string[]][]));
    pending.push(...((await conn.xpending(keys.shardOutbox(shard), FANOUT_GROUP, "-", "+", 10_000)) as [string, string, number, number][]));
  }
  const lines = [
    `now ${new Date().toISOString()}; outbox ${outbox.length} entries, ${pending.length} read but not acked; jobs ${JSON.stringify(await q.getJobCounts())}`,
  ];
  for (const id of ids.slice(0, 5)) {
    const deliveryId = deliveryIdFor({ userId: p.userId, emitterId: p.workflowId, channel: "", eventId: id }, p.webhookId);
    const job = await q.getJob(deliveryId);
    const inOutbox = outbox.some(([, f]) => f[f.indexOf("i") + 1] === id);
    lines.push(
      `${id}: in outbox ${inOutbox}; job ${deliveryId} ${await q.getJobState(deliveryId)} attemptsMade=${job?.attemptsMade}` +
        ` stalledCounter=${(job as { stalledCounter?: number } | undefined)?.stalledCounter} processedOn=${job?.processedOn ? new Date(job.processedOn).toISOString() : "-"}` +
        ` failedReason=${job?.failedReason}; attempt log ${(await conn.get(keys.delivery(p.userId, deliveryId)))?.slice(0, 200) ?? "-"}`,
    );
  }
  return lines.join("\n");
}

/**
 * Waits until every acknowledged id has reached the receiver, at most `deadlineMs` after `since`;
 * fails naming the missing events, where they are stuck, and the processes' logs.
 */
async function expectAllDelivered(
  hookPath: string,
  acked: Set<string>,
  { since, deadlineMs }: { since: number; deadlineMs: number },
  diagnose: (missing: string[]) => Promise<string>,
  logs: () => string,
): Promise<{ drainMs: number; tally: Tally }> {
  const missingNow = () => {
    const t = tally(hookPath);
    return [...acked].filter((id) => !t.unique.has(id));
  };
  try {
    await waitFor(() => missingNow().length === 0, {
      timeoutMs: Math.max(1, since + deadlineMs - Date.now()),
      intervalMs: 100,
      what: `all ${acked.size} acknowledged events at ${hookPath}`,
    });
  } catch (err) {
    const missing = missingNow();
    const where = await diagnose(missing).catch((e: Error) => `(could not inspect Redis: ${e.message})`);
    throw new Error(
      `${(err as Error).message}\n${missing.length} of ${acked.size} acknowledged events never arrived, e.g. ${missing.slice(0, 10).join(", ")}\n${where}\n--- logs ---\n${logs()}`,
    );
  }
  return { drainMs: Date.now() - since, tally: tally(hookPath) };
}

function report(name: string, numbers: Record<string, unknown>): void {
  // The measured numbers are part of what this file shows; keep them in the test output.
  console.info(`[durability] ${name}: ${JSON.stringify(numbers)}`);
}

/** SIGKILLs the worker while direct first attempts to SLOW_PATH are in flight; every acknowledged event must arrive. */
async function killWithDirectAttemptsInFlight(label: string, tag: string, total: number, padBytes: number): Promise<void> {
  const prefix = `${tag}${randomBytes(3).toString("hex")}`;
  const conn = connect(redis.url);
  const [api, oldWorker] = await Promise.all([startApi(redis.url, prefix, "api"), startWorker(redis.url, prefix, "worker-1", conn)]);
  let newWorker: DaemonChild | undefined;
  let newWorkerAt = 0;
  const p = await provision(api.url, SLOW_PATH);
  let atKill: Awaited<ReturnType<typeof inFlight>> | undefined;
  const res = await burst({
    plan: burstPlan(total),
    apiKey: p.apiKey,
    apiUrl: () => api.url,
    workflowId: p.workflowId,
    padBytes,
    gates: [
      {
        atEvents: total / 2,
        step: async () => {
          await waitFor(() => tally(SLOW_PATH).received >= 50, { timeoutMs: 20_000, what: "the first 50 deliveries" });
          atKill = await inFlight(conn, prefix);
          await oldWorker.kill("SIGKILL");
          newWorkerAt = Date.now();
          newWorker = await startWorker(redis.url, prefix, "worker-2", conn);
        },
      },
    ],
  });
  expect(res.failedRequests, res.firstFailure).toBe(0);
  // The kill landed while outbox entries were read and not yet acknowledged: attempts in flight.
  expect(atKill?.outboxReadNotAcked).toBeGreaterThan(0);
  const { drainMs, tally: t } = await expectAllDelivered(
    SLOW_PATH,
    res.acked,
    { since: newWorkerAt, deadlineMs: STALLED_RECOVERY_DEADLINE_MS },
    (missing) => whereAre(missing, conn, prefix, p),
    () => [api.logs(), oldWorker.logs(), newWorker?.logs()].join("\n"),
  );
  report(label, {
    acknowledged: res.acked.size,
    deliveredUnique: t.unique.size,
    received: t.received,
    // Every event is answered 500 once: requests beyond two per event are the kill's duplicates.
    duplicates: t.received - 2 * t.unique.size,
    atKill,
    drainMsFromReplacementStart: drainMs,
  });
}

// ---------------------------------------------------------------------------------------------

describe("at-least-once delivery across crashes (SPEC §6)", () => {
  it("delivers every acknowledged event when the worker is SIGKILLed mid-burst and a new one takes over", async () => {
    const prefix = `crw${randomBytes(3).toString("hex")}`;
    const conn = connect(redis.url);
    const hookPath = "/crash-worker";
    const [api, oldWorker] = await Promise.all([startApi(redis.url, prefix, "api"), startWorker(redis.url, prefix, "worker-1", conn)]);
    let newWorker: DaemonChild | undefined;
    let newWorkerAt = 0;
    const p = await provision(api.url, hookPath);
    let atKill: Record<string, unknown> = {};
    const started = Date.now();
    const res = await burst({
      plan: burstPlan(TOTAL_EVENTS),
      apiKey: p.apiKey,
      apiUrl: () => api.url,
      workflowId: p.workflowId,
      gates: [
        {
          // Killed once deliveries flow, with half of the burst still to come.
          atEvents: TOTAL_EVENTS / 2,
          step: async () => {
            await waitFor(() => tally(hookPath).received >= 100, { timeoutMs: 20_000, what: "the first 100 deliveries" });
            const before = await inFlight(conn, prefix);
            const delivered = tally(hookPath).unique.size;
            await oldWorker.kill("SIGKILL");
            atKill = { ...before, deliveredBeforeKill: delivered };
          },
        },
        {
          // The replacement starts while the burst is still going.
          atEvents: (TOTAL_EVENTS * 3) / 4,
          step: async () => {
            newWorkerAt = Date.now();
            newWorker = await startWorker(redis.url, prefix, "worker-2", conn);
          },
        },
      ],
    });
    const burstMs = Date.now() - started;
    expect(oldWorker.hasExited()).toBe(true);
    expect(res.failedRequests, res.firstFailure).toBe(0);
    expect(res.acked.size).toBe(TOTAL_EVENTS);
    const { drainMs, tally: t } = await expectAllDelivered(
      hookPath,
      res.acked,
      { since: newWorkerAt, deadlineMs: STALLED_RECOVERY_DEADLINE_MS },
      async (missing) => `worker-2 started ${new Date(newWorkerAt).toISOString()}\n${await whereAre(missing, conn, prefix, p)}`,
      () => [api.logs(), oldWorker.logs(), newWorker?.logs()].join("\n"),
    );
    report("worker SIGKILL", {
      acknowledged: res.acked.size,
      deliveredUnique: t.unique.size,
      received: t.received,
      duplicates: t.received - t.unique.size,
      atKill,
      burstMs,
      drainMsFromReplacementStart: drainMs,
    });
  }, 120_000);

  it("delivers every acknowledged event when the worker is SIGKILLed with direct first attempts in flight", async () => {
    // Fan-out makes first attempts itself (DELIVERY_DIRECT_CONCURRENCY): the outbox entry of an
    // attempt in flight stays pending until the attempt settles, so a worker killed mid-attempt
    // leaves it to be taken over (XAUTOCLAIM after 15 s idle) and redone through the queue.
    await killWithDirectAttemptsInFlight("worker SIGKILL, direct attempts in flight", "crd", 1000, 64);
  }, 150_000);

  it("delivers every acknowledged large event when the worker is SIGKILLed while their retries take the stored payload", async () => {
    // Each event's first attempt fails, so its retry job refers to the event's stored payload,
    // held just before the job is added: a kill between the two, or before the entry is
    // acknowledged, is redone from the outbox entry, which still carries the payload.
    await killWithDirectAttemptsInFlight("worker SIGKILL, large payloads stored once", "crl", 300, 2000);
  }, 150_000);

  it("delivers every event acknowledged before the api process was SIGKILLed mid-burst", async () => {
    const prefix = `cra${randomBytes(3).toString("hex")}`;
    const conn = connect(redis.url);
    const hookPath = "/crash-api";
    const [first, worker] = await Promise.all([startApi(redis.url, prefix, "api-1"), startWorker(redis.url, prefix, "worker", conn)]);
    let api = first;
    const p = await provision(api.url, hookPath);
    const result = newResult();
    let ackedBeforeKill = 0;
    const started = Date.now();
    await burst({
      result,
      plan: burstPlan(TOTAL_EVENTS),
      apiKey: p.apiKey,
      apiUrl: () => api.url,
      workflowId: p.workflowId,
      gates: [
        {
          // The other lanes' requests are in flight when the kill lands; they get no 202.
          atEvents: TOTAL_EVENTS / 2,
          step: async () => {
            ackedBeforeKill = result.acked.size;
            await first.kill("SIGKILL");
            api = await startApi(redis.url, prefix, "api-2");
          },
        },
      ],
    });
    const burstMs = Date.now() - started;
    expect(first.hasExited()).toBe(true);
    expect(ackedBeforeKill).toBeGreaterThan(0);
    // Only requests cut by the kill (at most one per other lane) may lack a 202.
    expect(result.failedRequests, result.firstFailure).toBeLessThanOrEqual(3);
    expect(result.acked.size + result.failedEvents).toBe(TOTAL_EVENTS);
    const { drainMs, tally: t } = await expectAllDelivered(
      hookPath,
      result.acked,
      { since: started, deadlineMs: DRAIN_DEADLINE_MS },
      (missing) => whereAre(missing, conn, prefix, p),
      () => [first.logs(), api.logs(), worker.logs()].join("\n"),
    );
    const unknownDelivered = [...t.unique].filter((id) => !result.acked.has(id)).length;
    report("api SIGKILL", {
      acknowledged: result.acked.size,
      ackedBeforeKill,
      requestsCutByKill: result.failedRequests,
      eventsOfCutRequests: result.failedEvents,
      deliveredThoughNotAcknowledged: unknownDelivered,
      deliveredUnique: t.unique.size,
      received: t.received,
      duplicates: t.received - t.unique.size,
      burstMs,
      drainMsFromBurstStart: drainMs,
    });
  }, 90_000);

  it("delivers every acknowledged event after Redis is SIGKILLed and restarted from its append-only file", async () => {
    const prefix = `crr${randomBytes(3).toString("hex")}`;
    const dir = path.join(dataDir, "restart");
    const port = await freePort();
    let server = await startRedisServer({ dir, port, appendfsync: "always", name: "redis-1" });
    const conn = connect(server.url);
    const hookPath = "/crash-redis";
    const [api, worker1] = await Promise.all([startApi(server.url, prefix, "api"), startWorker(server.url, prefix, "worker-1", conn)]);
    const p = await provision(api.url, hookPath);
    let atWorkerStop: Awaited<ReturnType<typeof inFlight>> | undefined;
    const res = await burst({
      plan: burstPlan(TOTAL_EVENTS),
      apiKey: p.apiKey,
      apiUrl: () => api.url,
      workflowId: p.workflowId,
      gates: [
        {
          // Workers stop mid-burst (SIGTERM: the crash of a worker is the first test's subject);
          // the second half is accepted with no worker running.
          atEvents: TOTAL_EVENTS / 2,
          step: async () => {
            await waitFor(() => tally(hookPath).received >= 100, { timeoutMs: 20_000, what: "the first 100 deliveries" });
            expect((await worker1.kill("SIGTERM")).code, worker1.logs()).toBe(0);
            atWorkerStop = await inFlight(conn, prefix);
          },
        },
      ],
    });
    expect(res.failedRequests, res.firstFailure).toBe(0);
    expect(res.acked.size).toBe(TOTAL_EVENTS);
    // A worker stopped in order finishes its attempts in flight: no job waits for a stalled-job
    // check, and no outbox entry it read is left unacknowledged (its direct attempts settled).
    expect(atWorkerStop?.activeJobs).toBe(0);
    expect(atWorkerStop?.outboxReadNotAcked).toBe(0);
    const undeliveredAtRedisKill = [...res.acked].filter((id) => !tally(hookPath).unique.has(id)).length;
    // At least the half accepted while no worker ran is waiting between acceptance and delivery.
    expect(undeliveredAtRedisKill).toBeGreaterThanOrEqual(TOTAL_EVENTS / 2);

    expect((await server.kill("SIGKILL")).signal).toBe("SIGKILL");
    server = await startRedisServer({ dir, port, appendfsync: "always", name: "redis-2" });
    const afterRestart = await inFlight(conn, prefix);
    await waitForReady(api); // the api reconnects on its own
    const worker2At = Date.now();
    const worker2 = await startWorker(server.url, prefix, "worker-2", conn);
    const { drainMs, tally: t } = await expectAllDelivered(
      hookPath,
      res.acked,
      { since: worker2At, deadlineMs: DRAIN_DEADLINE_MS },
      (missing) => whereAre(missing, conn, prefix, p),
      () => [server.logs(), api.logs(), worker1.logs(), worker2.logs()].join("\n"),
    );
    report("redis SIGKILL + restart", {
      acknowledged: res.acked.size,
      undeliveredAtRedisKill,
      atWorkerStop,
      afterRedisRestart: afterRestart,
      deliveredUnique: t.unique.size,
      received: t.received,
      duplicates: t.received - t.unique.size,
      drainMsFromWorkerStart: drainMs,
    });
  }, 90_000);
});
