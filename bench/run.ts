/**
 * `npm run bench`: one loopback run measuring Tributary against two baselines, printed as one
 * markdown table. Starts a private redis-server (no persistence), a webhook receiver in this
 * process, and the daemon and baselines as child processes; cleans all of them up on every path.
 * Exit 0 when every phase ran (targets missed or not); non-zero when something crashed.
 *
 * Knobs (environment): BENCH_DURATION_S (10), BENCH_BACKLOG (20000), BENCH_CONNECTIONS (8),
 * BENCH_LAT_BATCH (events per request in the latency phases, 1).
 */
import { randomBytes } from "node:crypto";
import { availableParallelism } from "node:os";
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { createKeys } from "../src/store/keys.js";
import { bullmqBaseline, type DrainResult, drainResult, koaBaseline } from "./baselines.js";
import { apiData, type DaemonProcess, startDaemonProcess } from "./daemon-process.js";
import { type ClosedLoopResult, hammer, openLoop, smallEvent } from "./load.js";
import { startReceiver } from "./receiver.js";
import { fmt, sleep, summarize, type Summary } from "./stats.js";

const envInt = (k: string, d: number) => {
  const v = Number(process.env[k]);
  return Number.isInteger(v) && v > 0 ? v : d;
};
const DURATION_S = envInt("BENCH_DURATION_S", 10);
const WARMUP_S = 2;
const BACKLOG = envInt("BENCH_BACKLOG", 20_000);
const CONNECTIONS = envInt("BENCH_CONNECTIONS", 8);
const LAT_BATCH = envInt("BENCH_LAT_BATCH", 1);
const BATCH_SIZE = 100;
const DELIVERY_CONCURRENCY = 64; // Tributary's DELIVERY_CONCURRENCY default
const KEY_PREFIX = "trib"; // the daemon's default REDIS_KEY_PREFIX

const log = (msg: string) => process.stderr.write(`[bench +${((performance.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
const t0 = performance.now();

const cleanups: (() => Promise<unknown>)[] = [];
async function cleanup(): Promise<void> {
  while (cleanups.length > 0) {
    const c = cleanups.pop() as () => Promise<unknown>;
    await c().catch((err: unknown) => log(`cleanup step failed: ${(err as Error)?.message ?? String(err)}`));
  }
}
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.once(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

interface LatencyResult {
  readonly rate: number;
  readonly sent: number;
  readonly delivered: number;
  readonly e2e: Summary;
  readonly ack: Summary;
  readonly failures: number;
  readonly maxLagMs: number;
}

function ensureAlive(d: DaemonProcess): void {
  const gone = d.child.exited();
  if (gone) throw new Error(`daemon crashed (${JSON.stringify(gone)}):\n${d.child.tail()}`);
}

async function main(): Promise<void> {
  const redisServer = await startEmbeddedRedis();
  cleanups.push(() => redisServer.close());
  const redis = new Redis(redisServer.url, { maxRetriesPerRequest: null });
  cleanups.push(async () => redis.disconnect());
  const receiver = await startReceiver();
  cleanups.push(() => receiver.close());
  log(`redis ${redisServer.url}, receiver ${receiver.url}`);

  // ---- 5a. Bare Koa ----
  log(`bare Koa baseline: ${DURATION_S}s, ${CONNECTIONS} connections`);
  const koa = await koaBaseline({ durationS: DURATION_S, warmupS: WARMUP_S, connections: CONNECTIONS });

  // ---- 5b. Plain BullMQ ----
  log(`plain BullMQ baseline: ${BACKLOG} jobs, concurrency ${DELIVERY_CONCURRENCY}`);
  const bull = await bullmqBaseline({
    redisUrl: redisServer.url,
    receiver,
    backlog: BACKLOG,
    concurrency: DELIVERY_CONCURRENCY,
    seqBase: 0,
    deadlineMs: 90_000,
  });
  log(`  ${fmt(bull.perSec)} deliveries/s (${bull.delivered}/${bull.expected})`);

  // ---- Tributary set-up and backlog, with an API-only daemon (no workers: the backlog stays put) ----
  const adminToken = `bench-admin-${randomBytes(8).toString("hex")}`;
  const keys = createKeys(KEY_PREFIX);
  let daemon = await startDaemonProcess({ redisUrl: redisServer.url, adminToken, roles: "api" }, "daemon(api)");
  cleanups.push(() => daemon.stop());
  const user = await apiData<{ api_key: string }>(
    daemon.url,
    adminToken,
    "POST",
    "/admin/users",
    { username: "bench", email: "bench@example.com", plan: "paid" },
    201,
  );
  const key = user.api_key;
  const hook = await apiData<{ id: string }>(daemon.url, key, "POST", "/v1/webhooks", { url: receiver.url, name: "bench" }, 200);
  for (const emitter of ["p_bench_drain", "p_bench_lat"]) {
    await apiData(daemon.url, key, "POST", "/v1/subscriptions", { emitter_id: emitter, listener_id: hook.id }, 200);
  }
  log(`pre-loading ${BACKLOG} events into p_bench_drain (API-only daemon)`);
  const preloadStart = performance.now();
  const chunk = 500;
  for (let i = 0; i < BACKLOG; i += chunk * 4) {
    await Promise.all(
      [0, 1, 2, 3].map(async (j) => {
        const from = i + j * chunk;
        const to = Math.min(BACKLOG, from + chunk);
        if (from >= to) return;
        const events = [];
        for (let s = from; s < to; s++) events.push({ event: smallEvent(s) });
        await apiData(daemon.url, key, "POST", "/v1/workflows/p_bench_drain/events", { events }, 202);
      }),
    );
  }
  const outboxLen = await redis.xlen(keys.outbox());
  log(`  pre-loaded in ${fmt(performance.now() - preloadStart)} ms; outbox holds ${outboxLen}`);
  if (outboxLen !== BACKLOG) throw new Error(`outbox holds ${outboxLen} entries, expected ${BACKLOG}: is the key layout different?`);
  await daemon.stop();
  cleanups.pop();

  // ---- 3. Draining: a full daemon starts on the backlog ----
  receiver.reset();
  log("starting the full daemon (api,worker,scheduler) on the backlog");
  daemon = await startDaemonProcess({ redisUrl: redisServer.url, adminToken }, "daemon");
  cleanups.push(() => daemon.stop());
  const drainComplete = await receiver.waitFor(BACKLOG, 120_000);
  ensureAlive(daemon);
  const drain: DrainResult = drainResult(receiver, BACKLOG, drainComplete);
  log(`  ${fmt(drain.perSec)} deliveries/s (${drain.delivered}/${drain.expected})`);

  const deliveryQueue = new Queue("delivery", { connection: redis, prefix: keys.bullPrefix });
  cleanups.push(() => deliveryQueue.close());
  /** Waits until the outbox is empty and no delivery is waiting or running. */
  const quiesce = async (label: string) => {
    const start = performance.now();
    for (;;) {
      ensureAlive(daemon);
      const outbox = await redis.xlen(keys.outbox());
      const c = await deliveryQueue.getJobCounts("wait", "active", "delayed", "prioritized");
      const busy = (c.wait ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0);
      if (outbox === 0 && busy === 0) break;
      if (performance.now() - start > 90_000) throw new Error(`${label}: daemon still busy after 90 s (outbox ${outbox}, jobs ${busy})`);
      await sleep(100);
    }
    log(`  ${label}: quiet after ${fmt(performance.now() - start)} ms`);
  };
  await quiesce("after draining");

  // ---- 1. Single-emit ingest ----
  const ingestUrl = `${daemon.url}/v1/workflows/p_bench_ingest/events`;
  const auth = { authorization: `Bearer ${key}` };
  log(`single-emit ingest: ${DURATION_S}s, ${CONNECTIONS} connections`);
  const singleBody = JSON.stringify({ event: smallEvent(1) });
  await hammer({ url: ingestUrl, body: singleBody, headers: auth, durationS: WARMUP_S, connections: CONNECTIONS });
  const single = await hammer({ url: ingestUrl, body: singleBody, headers: auth, durationS: DURATION_S, connections: CONNECTIONS });
  ensureAlive(daemon);
  await quiesce("after single ingest");

  // ---- 2. Batch ingest ----
  log(`batch ingest (${BATCH_SIZE} events/request): ${DURATION_S}s, ${CONNECTIONS} connections`);
  const batchBody = JSON.stringify({ events: Array.from({ length: BATCH_SIZE }, (_, i) => ({ event: smallEvent(i) })) });
  const batch = await hammer({ url: ingestUrl, body: batchBody, headers: auth, durationS: DURATION_S, connections: CONNECTIONS });
  ensureAlive(daemon);
  await quiesce("after batch ingest");

  // ---- 4. Emit-to-delivered latency, open loop ----
  const latency: LatencyResult[] = [];
  for (const [rate, seqBase] of [
    [1000, 1_000_000],
    [2000, 2_000_000],
  ] as const) {
    log(`emit-to-delivered at ${rate} events/s for ${DURATION_S}s (${LAT_BATCH} event(s)/request)`);
    receiver.reset();
    const r = await openLoop({
      origin: daemon.url,
      path: "/v1/workflows/p_bench_lat/events",
      token: key,
      rate,
      durationMs: DURATION_S * 1000,
      batch: LAT_BATCH,
      seqBase,
    });
    const expected = r.sentAt.size - r.failures * LAT_BATCH;
    await receiver.waitFor(expected, 60_000);
    ensureAlive(daemon);
    const e2e: number[] = [];
    for (const [seq, sent] of r.sentAt) {
      const at = receiver.arrivals.get(seq);
      if (at !== undefined) e2e.push(at - sent);
    }
    latency.push({
      rate,
      sent: r.sentAt.size,
      delivered: e2e.length,
      e2e: summarize(e2e),
      ack: summarize(r.ackMs),
      failures: r.failures,
      maxLagMs: r.maxLagMs,
    });
    const s = latency[latency.length - 1] as LatencyResult;
    log(`  p50 ${fmt(s.e2e.p50, 1)} ms, p99 ${fmt(s.e2e.p99, 1)} ms, delivered ${s.delivered}/${s.sent}`);
    await quiesce(`after ${rate}/s`);
  }

  const peakRssKb = daemon.child.peakRssKb();
  await daemon.stop();
  cleanups.pop();
  const gone = daemon.child.exited();
  if (gone && gone.code !== 0) log(`note: daemon exited with ${JSON.stringify(gone)} on SIGTERM:\n${daemon.child.tail()}`);

  report({ koa, bull, single, batch, drain, latency, peakRssKb });
}

function report(r: {
  koa: ClosedLoopResult;
  bull: DrainResult;
  single: ClosedLoopResult;
  batch: ClosedLoopResult;
  drain: DrainResult;
  latency: LatencyResult[];
  peakRssKb: number | undefined;
}): void {
  const yes = (ok: boolean) => (ok ? "✅ met" : "❌ missed");
  const ratio = (a: number, b: number) => (b > 0 ? a / b : Number.NaN);
  const ingestRatio = ratio(r.single.reqPerSec, r.koa.reqPerSec);
  const drainRatio = ratio(r.drain.perSec, r.bull.perSec);
  const rows: string[][] = [];
  rows.push([
    "1. Emit ingest, single event",
    `${fmt(r.single.reqPerSec)} req/s · p50 ${fmt(r.single.p50)} ms · p99 ${fmt(r.single.p99)} ms${r.single.bad ? ` · ${r.single.bad} errors/non-2xx` : ""}`,
    `bare Koa: ${fmt(r.koa.reqPerSec)} req/s · p50 ${fmt(r.koa.p50)} ms · p99 ${fmt(r.koa.p99)} ms`,
    `${fmt(ingestRatio, 2)}×`,
    "≥ 0.6× bare Koa",
    yes(ingestRatio >= 0.6),
  ]);
  rows.push([
    `2. Emit ingest, batch of ${BATCH_SIZE}`,
    `${fmt(r.batch.reqPerSec)} req/s = ${fmt(r.batch.reqPerSec * BATCH_SIZE)} events/s · p50 ${fmt(r.batch.p50)} ms · p99 ${fmt(r.batch.p99)} ms${r.batch.bad ? ` · ${r.batch.bad} errors/non-2xx` : ""}`,
    "—",
    `${fmt(ratio(r.batch.reqPerSec * BATCH_SIZE, r.single.reqPerSec), 1)}× single (events/s)`,
    "—",
    "—",
  ]);
  const drainCell = (d: DrainResult) =>
    `${fmt(d.perSec)} deliveries/s (${fmt(d.delivered)}/${fmt(d.expected)} in ${fmt(d.spanMs / 1000, 1)} s${d.complete ? "" : ", DEADLINE HIT"}${d.duplicates ? `, ${d.duplicates} duplicates` : ""})`;
  rows.push([
    `3. Draining a ${fmt(BACKLOG)}-event backlog`,
    drainCell(r.drain),
    `plain BullMQ: ${drainCell(r.bull)}`,
    `${fmt(drainRatio, 2)}×`,
    "≥ 0.8× plain BullMQ",
    yes(drainRatio >= 0.8 && r.drain.complete),
  ]);
  for (const l of r.latency) {
    const complete = l.delivered === l.sent;
    rows.push([
      `4. Emit→delivered at ${fmt(l.rate)} events/s`,
      `p50 ${fmt(l.e2e.p50, 1)} ms · p99 ${fmt(l.e2e.p99, 1)} ms · max ${fmt(l.e2e.max, 1)} ms (${fmt(l.delivered)}/${fmt(l.sent)} delivered${l.failures ? `, ${l.failures} emit failures` : ""})`,
      `emit→202: p50 ${fmt(l.ack.p50, 1)} ms · p99 ${fmt(l.ack.p99, 1)} ms`,
      "—",
      l.rate === 1000 ? "p99 < 50 ms" : "—",
      l.rate === 1000 ? yes(l.e2e.p99 < 50 && complete) : complete ? "(info)" : "incomplete",
    ]);
  }
  rows.push(["Daemon peak RSS (VmHWM)", r.peakRssKb === undefined ? "n/a" : `${fmt(r.peakRssKb / 1024, 0)} MiB`, "—", "—", "—", "—"]);

  const header = ["Measurement", "Tributary", "Baseline / detail", "Ratio", "Target", "Result"];
  const out = [
    "",
    `## Tributary bench — ${new Date().toISOString()} — node ${process.version}, ${availableParallelism()} CPUs, loopback`,
    "",
    `| ${header.join(" | ")} |`,
    `|${header.map(() => "---").join("|")}|`,
    ...rows.map((row) => `| ${row.join(" | ")} |`),
    "",
    `Settings: closed-loop ingest with autocannon, ${CONNECTIONS} connections, ${DURATION_S} s (after ${WARMUP_S} s warm-up for single/Koa); ` +
      `backlog ${fmt(BACKLOG)} events pre-loaded through an API-only daemon, then drained by a full daemon (DELIVERY_CONCURRENCY ${DELIVERY_CONCURRENCY}) ` +
      `vs BullMQ Worker concurrency ${DELIVERY_CONCURRENCY}; latency phases are open-loop, ${LAT_BATCH === 1 ? "single emits (1 event per request)" : `${LAT_BATCH} events per request`}, ` +
      `${DURATION_S} s each, pacer max lag ${r.latency.map((l) => `${fmt(l.maxLagMs, 1)} ms`).join(" / ")}. ` +
      `Daemon, baselines and redis-server are separate processes; load generator and webhook receiver share the bench process. Total bench time ${fmt((performance.now() - t0) / 1000, 0)} s.`,
    "",
  ];
  process.stdout.write(out.join("\n"));
}

let exitCode = 0;
try {
  await main();
} catch (err) {
  exitCode = 1;
  process.stderr.write(`\nbench failed: ${(err as Error)?.stack ?? String(err)}\n`);
} finally {
  await cleanup();
}
process.exit(exitCode);
