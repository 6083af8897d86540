import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FANOUT_GROUP } from "../../../src/events/fanout.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { freePort, startEmbeddedRedis, type EmbeddedRedis } from "../../../src/redis/embedded.js";
import { createKeys } from "../../../src/store/keys.js";
import { client, type Client } from "../../helpers/daemon.js";
import { type DaemonChild, killAll, spawnDaemon, startRedisServer, waitForReady, waitWhileRunning } from "../../helpers/process.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";

/**
 * The at-least-once promise of SPEC §6, proved with real processes: the daemon runs as separate
 * `ROLES=api` and `ROLES=worker` children against a private redis-server with an append-only file,
 * and the tests SIGKILL a worker, an api process, or Redis itself in the middle of a burst. Every
 * event the api acknowledged with 202 must reach the receiver at least once; duplicates are
 * allowed and reported.
 */

const ADMIN_TOKEN = `admin-${randomBytes(8).toString("hex")}`;
const TOTAL_EVENTS = 2000;
/** How long the receiver may take to see every acknowledged event once workers are back. */
const DRAIN_DEADLINE_MS = 60_000;

let redis: EmbeddedRedis;
let dataDir: string;
let rx: Receiver;
const conns: Redis[] = [];
const queues: Queue[] = [];

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "tributary-crash-"));
  redis = await startEmbeddedRedis({ dir: path.join(dataDir, "shared") });
  rx = await startReceiver(() => ({ status: 200 }));
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
// Daemon processes

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
    LOG_LEVEL: "warn",
  };
}

async function startApi(redisUrl: string, prefix: string, name: string): Promise<DaemonChild> {
  const d = spawnDaemon(name, daemonEnv(redisUrl, prefix, "api", await freePort()));
  await waitForReady(d);
  return d;
}

/**
 * A worker has no HTTP. It is ready once a new Redis client of its own sits in the fan-out's
 * XREADGROUP (a consumer only shows in XINFO CONSUMERS after it has read an entry, so that
 * cannot tell an idle worker apart from a dead one).
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

function connect(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: null });
  c.on("error", () => {});
  conns.push(c);
  return c;
}

/** What a worker leaves behind when it dies: outbox entries read but not acknowledged, and jobs. */
async function inFlight(conn: Redis, prefix: string) {
  const keys = createKeys(prefix);
  const q = new Queue(QUEUES.delivery, { connection: conn.duplicate(), prefix: keys.bullPrefix });
  queues.push(q);
  const [outboxLength, pending, counts] = await Promise.all([
    conn.xlen(keys.outbox()),
    conn.xpending(keys.outbox(), FANOUT_GROUP).then((r) => Number((r as unknown[])[0] ?? 0)),
    q.getJobCounts("active", "wait", "delayed", "prioritized"),
  ]);
  return { outboxLength, outboxPending: pending, activeJobs: counts.active ?? 0, waitingJobs: (counts.wait ?? 0) + (counts.prioritized ?? 0) };
}

// ---------------------------------------------------------------------------------------------
// The burst

/** A user with a webhook at `rx.url(hookPath)` subscribed to workflow `p_burst`. */
async function provision(apiUrl: string, hookPath: string): Promise<{ apiKey: string; workflowId: string; webhookId: string }> {
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
  return { apiKey: user.body.data.api_key, workflowId, webhookId: hook.body.data.id };
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
  /** Requests that got no 202 (connection reset by a kill, 5xx): their events' fate is unknown. */
  failedRequests: number;
  failedEvents: number;
}

/**
 * Sends `plan` through `lanes` concurrent request loops. `gates` maps a count of events handed
 * out to a step that must finish before any lane hands out more (kill a process, start another).
 * `apiUrl()` is read per request, so a gate can switch the lanes to another api process.
 */
async function burst(opts: {
  plan: number[];
  lanes: number;
  apiKeyClient: (url: string) => Client;
  apiUrl: () => string;
  workflowId: string;
  gates: { atEvents: number; step: () => Promise<void> }[];
  /** Filled as answers arrive, so a gate can read the progress so far. */
  result?: BurstResult;
}): Promise<BurstResult> {
  const result: BurstResult = opts.result ?? { acked: new Set(), failedRequests: 0, failedEvents: 0 };
  const gates = [...opts.gates].sort((a, b) => a.atEvents - b.atEvents).map((g) => ({ ...g, done: undefined as Promise<void> | undefined }));
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
      const i = next++;
      const size = opts.plan[i];
      if (size === undefined) return;
      handedOut += size;
      const events = Array.from({ length: size }, () => ({ event: { seq: seq++, pad: "x".repeat(64) } }));
      const body = size === 1 ? events[0] : { events };
      const api = opts.apiKeyClient(opts.apiUrl());
      const res = await api.post(`/v1/workflows/${opts.workflowId}/events`, { json: body }).catch(() => undefined);
      if (res?.status !== 202) {
        result.failedRequests++;
        result.failedEvents += size;
        continue;
      }
      const data = res.body.data as { id: string } | { id: string }[];
      for (const d of Array.isArray(data) ? data : [data]) result.acked.add(d.id);
    }
  };
  await Promise.all(Array.from({ length: opts.lanes }, lane));
  // A gate past the last event still runs (e.g. start the replacement worker).
  for (const g of gates) {
    g.done ??= g.step();
    await g.done;
  }
  return result;
}

interface Tally {
  unique: Set<string>;
  received: number;
}

function tally(hookPath: string): Tally {
  const reqs = rx.to(hookPath);
  const unique = new Set<string>();
  for (const r of reqs) {
    const id = r.headers["x-tributary-event-id"];
    if (typeof id === "string") unique.add(id);
  }
  return { unique, received: reqs.length };
}

/** Waits until every acknowledged id has reached the receiver; fails with the missing ones and the logs. */
async function expectAllDelivered(hookPath: string, acked: Set<string>, logs: () => string): Promise<{ drainMs: number; tally: Tally }> {
  const started = Date.now();
  try {
    await waitFor(
      () => {
        const t = tally(hookPath);
        for (const id of acked) if (!t.unique.has(id)) return false;
        return true;
      },
      { timeoutMs: DRAIN_DEADLINE_MS, intervalMs: 100, what: `all ${acked.size} acknowledged events at ${hookPath}` },
    );
  } catch (err) {
    const t = tally(hookPath);
    const missing = [...acked].filter((id) => !t.unique.has(id));
    throw new Error(
      `${(err as Error).message}\n${missing.length} of ${acked.size} acknowledged events never arrived, e.g. ${missing.slice(0, 10).join(", ")}\n--- logs ---\n${logs()}`,
    );
  }
  const t = tally(hookPath);
  return { drainMs: Date.now() - started, tally: t };
}

function report(name: string, numbers: Record<string, unknown>): void {
  // The measured numbers are part of what this file proves; keep them in the test output.
  console.info(`[durability] ${name}: ${JSON.stringify(numbers)}`);
}

// ---------------------------------------------------------------------------------------------

describe("at-least-once delivery across crashes (SPEC §6)", () => {
  it(
    "delivers every acknowledged event when the worker is SIGKILLed mid-burst and a new one takes over",
    async () => {
      const prefix = `crashw${randomBytes(3).toString("hex")}`;
      const conn = connect(redis.url);
      const hookPath = "/crash-worker";
      const api = await startApi(redis.url, prefix, "api");
      let worker = await startWorker(redis.url, prefix, "worker-1", conn);
      const { workflowId, apiKey } = await provision(api.url, hookPath);
      const plan = burstPlan(TOTAL_EVENTS);
      let atKill: Record<string, unknown> = {};
      const oldWorker = worker;
      const t0 = Date.now();
      const res = await burst({
        plan,
        lanes: 4,
        apiKeyClient: (url) => client(url, apiKey),
        apiUrl: () => api.url,
        workflowId,
        gates: [
          {
            // Kill once the receiver has seen deliveries, while half the burst is still to come.
            atEvents: TOTAL_EVENTS / 2,
            step: async () => {
              await waitFor(() => tally(hookPath).received >= 100, { timeoutMs: 20_000, what: "first 100 deliveries" });
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
              worker = await startWorker(redis.url, prefix, "worker-2", conn);
            },
          },
        ],
      });
      const burstMs = Date.now() - t0;
      expect(oldWorker.hasExited()).toBe(true);
      expect(res.failedRequests).toBe(0);
      expect(res.acked.size).toBe(TOTAL_EVENTS);
      const { drainMs, tally: t } = await expectAllDelivered(hookPath, res.acked, () => [api.logs(), oldWorker.logs(), worker.logs()].join("\n"));
      report("worker SIGKILL", {
        acknowledged: res.acked.size,
        deliveredUnique: t.unique.size,
        received: t.received,
        duplicates: t.received - t.unique.size,
        atKill,
        burstMs,
        drainMsAfterBurst: drainMs,
      });
      expect(t.unique.size).toBeGreaterThanOrEqual(res.acked.size);
    },
    90_000,
  );

  it(
    "delivers every event acknowledged before the api process was SIGKILLed mid-burst",
    async () => {
      const prefix = `crasha${randomBytes(3).toString("hex")}`;
      const conn = connect(redis.url);
      const hookPath = "/crash-api";
      let api = await startApi(redis.url, prefix, "api-1");
      const first = api;
      const worker = await startWorker(redis.url, prefix, "worker", conn);
      const { workflowId, apiKey } = await provision(api.url, hookPath);
      let ackedBeforeKill = 0;
      const result: BurstResult = { acked: new Set(), failedRequests: 0, failedEvents: 0 };
      const t0 = Date.now();
      await burst({
        result,
        plan: burstPlan(TOTAL_EVENTS),
        lanes: 4,
        apiKeyClient: (url) => client(url, apiKey),
        apiUrl: () => api.url,
        workflowId,
        gates: [
          {
            // Requests of the other lanes are in flight when the kill lands: those are not acknowledged.
            atEvents: TOTAL_EVENTS / 2,
            step: async () => {
              ackedBeforeKill = result.acked.size;
              await first.kill("SIGKILL");
              api = await startApi(redis.url, prefix, "api-2");
            },
          },
        ],
      });
      const burstMs = Date.now() - t0;
      expect(first.hasExited()).toBe(true);
      // Everything after the restart is acknowledged; only requests caught by the kill may fail.
      expect(result.acked.size + result.failedEvents).toBe(TOTAL_EVENTS);
      expect(result.failedRequests).toBeLessThanOrEqual(4);
      const { drainMs, tally: t } = await expectAllDelivered(hookPath, result.acked, () => [first.logs(), api.logs(), worker.logs()].join("\n"));
      report("api SIGKILL", {
        acknowledged: result.acked.size,
        ackedBeforeKill,
        requestsCutByKill: result.failedRequests,
        eventsWithUnknownFate: result.failedEvents,
        deliveredUnique: t.unique.size,
        received: t.received,
        duplicates: t.received - t.unique.size,
        burstMs,
        drainMsAfterBurst: drainMs,
      });
    },
    90_000,
  );

  it(
    "delivers every acknowledged event after Redis is SIGKILLed and restarted from its append-only file",
    async () => {
      const prefix = `crashr${randomBytes(3).toString("hex")}`;
      const dir = path.join(dataDir, "restart");
      const port = await freePort();
      let server = await startRedisServer({ dir, port, appendfsync: "always", name: "redis-1" });
      const conn = connect(server.url);
      const hookPath = "/crash-redis";
      const api = await startApi(server.url, prefix, "api");
      const worker1 = await startWorker(server.url, prefix, "worker-1", conn);
      const { workflowId, apiKey } = await provision(api.url, hookPath);
      let atKill: Record<string, unknown> = {};
      const res = await burst({
        plan: burstPlan(TOTAL_EVENTS),
        lanes: 4,
        apiKeyClient: (url) => client(url, apiKey),
        apiUrl: () => api.url,
        workflowId,
        gates: [
          {
            // Workers stop mid-burst; the second half is accepted with no worker running.
            atEvents: TOTAL_EVENTS / 2,
            step: async () => {
              await waitFor(() => tally(hookPath).received >= 100, { timeoutMs: 20_000, what: "first 100 deliveries" });
              await worker1.kill("SIGKILL");
              atKill = await inFlight(conn, prefix);
            },
          },
        ],
      });
      expect(res.failedRequests).toBe(0);
      expect(res.acked.size).toBe(TOTAL_EVENTS);
      const undeliveredAtRedisKill = [...res.acked].filter((id) => !tally(hookPath).unique.has(id)).length;
      // At least the half accepted without a worker is still waiting.
      expect(undeliveredAtRedisKill).toBeGreaterThanOrEqual(TOTAL_EVENTS / 2);

      const redisKill = await server.kill("SIGKILL");
      expect(redisKill.signal).toBe("SIGKILL");
      server = await startRedisServer({ dir, port, appendfsync: "always", name: "redis-2" });
      const afterRestart = await inFlight(conn, prefix);
      // The api reconnects on its own.
      await waitForReady(api);
      const worker2 = await startWorker(server.url, prefix, "worker-2", conn);
      const { drainMs, tally: t } = await expectAllDelivered(hookPath, res.acked, () =>
        [server.logs(), api.logs(), worker1.logs(), worker2.logs()].join("\n"),
      );
      report("redis SIGKILL + restart", {
        acknowledged: res.acked.size,
        undeliveredAtRedisKill,
        atWorkerKill: atKill,
        afterRedisRestart: afterRestart,
        deliveredUnique: t.unique.size,
        received: t.received,
        duplicates: t.received - t.unique.size,
        drainMsAfterWorkerStart: drainMs,
      });
    },
    90_000,
  );
});
