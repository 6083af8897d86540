/**
 * `npm run bench:delivery`: the delivery worker alone against a plain BullMQ worker, on the same jobs.
 *
 * The daemon's own graph (src/app: createConnections, createCore, createDeliveryFeature; the
 * worker role with DELIVERY_DIRECT_CONCURRENCY=0) fans N events of one workflow out to N delivery
 * jobs (one webhook subscribed) while the delivery queue is paused. Then either that graph's
 * DeliveryWorker (signing, webhook cache, attempt log, metrics) or a plain BullMQ Worker POSTing
 * with undici drains them, from the moment the queue resumes, to a receiver in a child process.
 * Prints this process's CPU per delivery, which is only the worker's: the comparison `npm run
 * bench`'s drain row mixes with fan-out. This file runs through tsx like the rest of the bench;
 * the daemon's modules are the compiled dist/ (DELIVERY_ONLY_TSX=1: src/ through tsx). REDIS_URL (default redis://127.0.0.1:6379) and a private key prefix, removed afterwards.
 * DELIVERY_ONLY_RUNS (default 3) pairs, alternating; DELIVERY_ONLY_PROF=<file> writes a CPU profile
 * of the last Tributary run's delivery phase.
 */
import { fork } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Session } from "node:inspector/promises";
import { fileURLToPath } from "node:url";
import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import { Agent, request } from "undici";
import type * as Connections from "../src/app/connections.js";
import type * as Core from "../src/app/core.js";
import type * as DeliveryFeature from "../src/app/delivery-feature.js";
import type * as RedisClient from "../src/app/redis-client.js";
import type * as ShutdownModule from "../src/app/shutdown.js";
import type * as ConfigLoad from "../src/config/load.js";
import type * as Logger from "../src/observability/logger.js";
import { QUEUES } from "../src/queue/catalog.js";
import { median } from "./stats.js";

const N = 20_000;
/** The plain worker's concurrency: Tributary's DELIVERY_CONCURRENCY default, which its worker runs with here. */
const CONCURRENCY = 64;
const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const EMITTER = "p_deliveryonly";
const REGISTRY_DIR = fileURLToPath(new URL("../registry", import.meta.url));

/**
 * The daemon's modules, typed by their source: the compiled dist/ that `npm start` runs (the npm
 * script builds it first), or with DELIVERY_ONLY_TSX=1 the TypeScript through tsx, whose wrappers
 * make the delivery path measurably slower (docs/decisions.md).
 */
async function daemonModules() {
  const root = process.env.DELIVERY_ONLY_TSX === "1" ? "../src/" : "../dist/src/";
  const load = <M>(path: string) => import(new URL(root + path, import.meta.url).href) as Promise<M>;
  return {
    ...(await load<typeof Connections>("app/connections.js")),
    ...(await load<typeof Core>("app/core.js")),
    ...(await load<typeof DeliveryFeature>("app/delivery-feature.js")),
    ...(await load<typeof RedisClient>("app/redis-client.js")),
    ...(await load<typeof ShutdownModule>("app/shutdown.js")),
    ...(await load<typeof ConfigLoad>("config/load.js")),
    ...(await load<typeof Logger>("observability/logger.js")),
  };
}
type DaemonModules = Awaited<ReturnType<typeof daemonModules>>;

type Kind = "plain" | "tributary";
interface RunResult {
  /** Wall time from the queue's resume to the last delivery. */
  readonly ms: number;
  /** This process's CPU per delivery, µs. */
  readonly us: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The receiver child: answers 200 at once and reports its count every 500 requests. */
function receiver(): void {
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
  server.listen(0, "127.0.0.1", () => process.send?.({ port: (server.address() as AddressInfo).port }));
}

async function once(m: DaemonModules, kind: Kind, profFile: string | undefined): Promise<RunResult> {
  const { createConnections, createCore, createDeliveryFeature, requestCommandTimeoutMs, Shutdown, loadConfig, createLogger } = m;
  const rx = fork(fileURLToPath(import.meta.url), ["receiver"]);
  const port = await new Promise<number>((resolve) =>
    rx.on("message", (m) => {
      if (typeof m === "object" && m !== null && "port" in m) resolve(Number(m.port));
    }),
  );
  let received = 0;
  rx.on("message", (m) => {
    if (typeof m === "number") received = m;
  });
  const target = `http://127.0.0.1:${port}/hook`;

  // The daemon's worker role, as src/daemon.ts builds it, under a private key prefix.
  const config = loadConfig({
    REDIS_URL,
    REDIS_KEY_PREFIX: `delivonly${randomBytes(3).toString("hex")}`,
    ROLES: "worker",
    ALLOW_PRIVATE_DESTINATIONS: "true", // the receiver is on loopback
    DELIVERY_DIRECT_CONCURRENCY: "0", // every delivery becomes a job: the worker is what is measured
    LOG_LEVEL: "silent",
  });
  const logger = createLogger("silent");
  const shutdown = new Shutdown(config.shutdownTimeoutMs, logger);
  const conns = createConnections(REDIS_URL, { commandTimeoutMs: requestCommandTimeoutMs(config), logger });
  shutdown.on("redis", "connections", () => conns.closeAll());
  const core = createCore({ config, logger, conns, registryDir: REGISTRY_DIR, shutdown });
  const { keys } = core;

  // The bench's own connection and handle on the delivery queue: pause, resume, clean up.
  const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const control = new Queue(QUEUES.delivery, { connection: admin, prefix: keys.queuePrefix("delivery") });

  const { user } = await core.stores.users.create({ username: "deliveryonly", email: "deliveryonly@example.com", plan: "paid" });
  const hook = await core.services.webhooks.create(user.id, { url: target });
  await core.services.subscriptions.create(user.id, { emitter_id: EMITTER, listener_id: hook.id });
  for (let i = 0; i < N; i += 500) {
    await core.stores.events.record({
      userId: user.id,
      emitterId: EMITTER,
      emitterKind: "workflow",
      channel: "",
      events: Array.from({ length: 500 }, (_, k) => ({
        payload: { seq: i + k, kind: "bench", msg: "hello from the bench", n: 42, ok: true },
        meta: {},
        emitId: `emit_${i + k}`,
      })),
      acceptedAtMs: Date.now(),
    });
  }

  // Fan-out queues the N jobs while no worker may take one.
  await control.pause();
  const delivery = createDeliveryFeature(core, conns, shutdown);
  await delivery.start();
  const outboxLength = async () =>
    (await Promise.all(Array.from({ length: keys.shards }, (_, i) => admin.xlen(keys.shardOutbox(i))))).reduce((a, b) => a + b, 0);
  while ((await outboxLength()) > 0) await sleep(20);
  const queued = await control.getJobCountByTypes("wait");
  if (queued !== N) throw new Error(`fan-out queued ${queued} delivery jobs, expected ${N}`);

  // The plain worker replaces the daemon's graph; Tributary's worker already waits on the paused queue.
  let plain: { worker: Worker; agent: Agent; connection: Redis } | undefined;
  if (kind === "plain") {
    await shutdown.run();
    const agent = new Agent({ keepAliveTimeout: 4_000 });
    const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const worker = new Worker(
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
      { connection, prefix: keys.queuePrefix("delivery"), concurrency: CONCURRENCY },
    );
    await worker.waitUntilReady();
    plain = { worker, agent, connection };
  }

  let session: Session | undefined;
  if (profFile) {
    session = new Session();
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.start");
  }
  const cpu = process.cpuUsage();
  const started = performance.now();
  await control.resume();
  while (received < N) await sleep(10);
  const used = process.cpuUsage(cpu);
  const ms = performance.now() - started;
  if (session && profFile) {
    const { profile } = await session.post("Profiler.stop");
    writeFileSync(profFile, JSON.stringify(profile));
  }

  if (plain) {
    await plain.worker.close();
    await plain.agent.close();
    plain.connection.disconnect();
  } else {
    await shutdown.run();
  }
  await control.obliterate({ force: true });
  await control.close();
  let cursor = "0";
  do {
    const [next, found] = await admin.scan(cursor, "MATCH", `${keys.prefix}*`, "COUNT", 1000);
    cursor = next;
    if (found.length > 0) await admin.unlink(...found);
  } while (cursor !== "0");
  admin.disconnect();
  rx.kill();
  return { ms, us: (used.user + used.system) / N };
}

if (process.argv[2] === "receiver") {
  receiver();
} else {
  const modules = await daemonModules();
  const results: Record<Kind, RunResult[]> = { tributary: [], plain: [] };
  const runs = Number(process.env.DELIVERY_ONLY_RUNS ?? 3);
  for (let i = 0; i < runs; i++) {
    for (const kind of ["plain", "tributary"] as const) {
      const prof = kind === "tributary" && i === runs - 1 ? process.env.DELIVERY_ONLY_PROF : undefined;
      const r = await once(modules, kind, prof);
      results[kind].push(r);
      console.log(
        `${kind.padEnd(9)} ${N} deliveries in ${r.ms.toFixed(0)} ms = ${((N * 1000) / r.ms).toFixed(0)}/s, ${r.us.toFixed(1)} µs worker CPU per delivery`,
      );
    }
  }
  const t = median(results.tributary.map((r) => r.us));
  const p = median(results.plain.map((r) => r.us));
  console.log(`median CPU per delivery: Tributary ${t.toFixed(1)} µs, plain BullMQ ${p.toFixed(1)} µs (${(p / t).toFixed(2)}×)`);
  process.exit(0);
}
