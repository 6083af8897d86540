/**
 * `npm run bench`: one loopback run measuring Tributary against two baselines, printed as one
 * markdown table. Starts a private redis-server (no persistence), a webhook receiver in this
 * process, and the daemon and baselines as child processes; cleans all of them up on every path.
 * Exit 0 when every phase ran (targets missed or not); 1 when something crashed.
 *
 * Knobs (environment): BENCH_DURATION_S (10), BENCH_BACKLOG (20000), BENCH_CONNECTIONS (8),
 * BENCH_PHASES (comma list of koa,koaredis,bullmq,drain,single,batch,latency,sse,timer,srcinline,srchttp,sandbox; default
 * all), BENCH_SOURCE_DURATION_S (5: load per HTTP-source phase), BENCH_SANDBOX_RUNS (2000),
 * BENCH_TIMER_S (10: how long the 1 s timer source ticks), BENCH_SSE_STREAMS (100), BENCH_SSE_RATE (200 emits/s)
 * and BENCH_SSE_DURATION_S (5) for the live-tail phase,
 * BENCH_CPU_PROF (directory for V8 CPU profiles of the daemon), BENCH_TRACE=1 (drain progress),
 * BENCH_DAEMON_ROOT (run the daemon from another checkout),
 * BENCH_DAEMON_TSX=1 (run the daemon's TypeScript through tsx instead of the compiled dist/ that `npm start` runs), BENCH_DAEMON_ENV ("K=V,K2=V2" extra
 * daemon settings, e.g. ROLES=api or DELIVERY_CONCURRENCY=128), BENCH_SPLIT=1 (an api process
 * plus a worker+scheduler process instead of one daemon), BENCH_LATENCY_RUNS ("1000x1,200x1": these
 * latency runs instead of the standard four; events/s x events per request), BENCH_E2E_DUMP=<path
 * prefix> (each latency run's send time and emit-to-delivered latency per event, one line each).
 */
import { randomBytes } from "node:crypto";
import { availableParallelism } from "node:os";
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { FANOUT_GROUP } from "../src/events/fanout.js";
import { createKeys } from "../src/store/keys.js";
import { bullmqBaseline, bullmqLatencyBaseline, drainResult, koaBaseline, koaEvalshaBaseline } from "./baselines.js";
import { cpuMsOf } from "./cpu.js";
import { apiData, buildDaemon, type DaemonProcess, type Deployment, startDaemonProcess, startDeployment } from "./daemon-process.js";
import { type ClosedLoopResult, hammer, openLoop, smallEvent } from "./load.js";
import { liveTailPhase } from "./live-tail.js";
import { type Cost, startMeter } from "./meter.js";
import { startReceiver } from "./receiver.js";
import { type Results, printReport } from "./report.js";
import {
  metricValue,
  RUNTIME_DAEMON_ENV,
  type RuntimeContext,
  sandboxPhase,
  scrape,
  sourceHttpPhase,
  sourceInlinePhase,
  timerPhase,
} from "./runtime.js";
import { fmt, sleep, summarize } from "./stats.js";

const envInt = (k: string, d: number) => {
  const v = Number(process.env[k]);
  return Number.isInteger(v) && v > 0 ? v : d;
};
const ALL_PHASES = [
  "koa",
  "koaredis",
  "bullmq",
  "drain",
  "single",
  "batch",
  "latency",
  "sse",
  "timer",
  "srcinline",
  "srchttp",
  "sandbox",
] as const;
const PHASES = new Set((process.env.BENCH_PHASES ?? ALL_PHASES.join(",")).split(",").map((p) => p.trim()));
const want = (p: (typeof ALL_PHASES)[number]) => PHASES.has(p);
for (const p of PHASES) {
  if (!(ALL_PHASES as readonly string[]).includes(p)) {
    process.stderr.write(`bench: unknown phase "${p}" in BENCH_PHASES (known: ${ALL_PHASES.join(",")})\n`);
    process.exit(2);
  }
}

const SETTINGS = {
  durationS: envInt("BENCH_DURATION_S", 10),
  warmupS: 2,
  backlog: envInt("BENCH_BACKLOG", 20_000),
  connections: envInt("BENCH_CONNECTIONS", 8),
  batchSize: 100,
  deliveryConcurrency: 64, // Tributary's DELIVERY_CONCURRENCY default
  /** Open-loop latency runs: events/s and events per request (1 = single emits). */
  latency: [
    { rate: 1000, batch: 1 },
    { rate: 2000, batch: 1 },
    { rate: 1000, batch: 10 },
    { rate: 2000, batch: 10 },
  ],
  /** The live-tail phase: open SSE streams on one workflow, single emits/s, seconds. */
  liveTail: {
    streams: envInt("BENCH_SSE_STREAMS", 100),
    rate: envInt("BENCH_SSE_RATE", 200),
    durationS: envInt("BENCH_SSE_DURATION_S", 5),
  },
  /** Source runtime phases (issue 4). */
  runtime: {
    /** Closed-loop load on each HTTP-source endpoint, s (plus a 1 s warm-up for the inline one). */
    durationS: envInt("BENCH_SOURCE_DURATION_S", 5),
    /** How long the queued HTTP-source backlog may take to drain after the load. */
    drainDeadlineS: 40,
    sandboxRuns: envInt("BENCH_SANDBOX_RUNS", 2000),
    sandboxWarmup: 200,
    timerS: envInt("BENCH_TIMER_S", 10),
    sourceRunConcurrency: 4, // Tributary's SOURCE_RUN_CONCURRENCY default
  },
};
/** BENCH_LATENCY_RUNS="1000x1,200x1": these latency runs instead of the standard four (events/s x events per request). */
const LATENCY_RUNS = process.env.BENCH_LATENCY_RUNS ? new Set(process.env.BENCH_LATENCY_RUNS.split(",").map((r) => r.trim())) : undefined;
const KEY_PREFIX = "trib"; // the daemon's default REDIS_KEY_PREFIX
/** BENCH_SPLIT=1: run the daemon as two processes (ROLES=api and ROLES=worker,scheduler). */
const SPLIT = process.env.BENCH_SPLIT === "1";

const t0 = performance.now();
const log = (msg: string) => process.stderr.write(`[bench +${((performance.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);

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

/** BENCH_TRACE=1: once a second, where the drain's backlog sits (outbox, delivery queue, delivered). */
const TRACE = process.env.BENCH_TRACE === "1";
function trace(redis: Redis, keys: ReturnType<typeof createKeys>, receiver: { count(): number }): () => void {
  const q = new Queue("delivery", { connection: redis, prefix: keys.bullPrefix });
  const timer = setInterval(() => {
    void (async () => {
      const outbox = await redis.xlen(keys.outbox());
      const c = await q.getJobCounts("wait", "active", "completed");
      log(`  trace: outbox ${outbox} · queue wait ${c.wait} active ${c.active} completed ${c.completed} · delivered ${receiver.count()}`);
    })().catch(() => {});
  }, 1000);
  return () => {
    clearInterval(timer);
    void q.close();
  };
}

/** Phases that run the source runtime, and phases that need a Tributary daemon at all. */
const RUNTIME_PHASES = want("timer") || want("srcinline") || want("srchttp");
const TRIBUTARY_PHASES = want("drain") || want("single") || want("batch") || want("latency") || want("sse") || RUNTIME_PHASES;

async function main(): Promise<Results> {
  const S = SETTINGS;
  const results: Results = { settings: S, split: SPLIT, latency: [] };
  if (TRIBUTARY_PHASES) {
    log("building the daemon (npm run build)");
    buildDaemon();
  }
  const redisServer = await startEmbeddedRedis();
  cleanups.push(() => redisServer.close());
  const redis = new Redis(redisServer.url, { maxRetriesPerRequest: null });
  cleanups.push(async () => redis.disconnect());
  const receiver = await startReceiver();
  cleanups.push(() => receiver.close());
  log(`redis ${redisServer.url}, receiver ${receiver.url}, phases ${[...PHASES].join(",")}${SPLIT ? ", split api/worker processes" : ""}`);

  const adminToken = `bench-admin-${randomBytes(8).toString("hex")}`;
  const keys = createKeys(KEY_PREFIX);
  /** A worker-only process is ready once its fan-out consumer (named `<pid>-...`) reads the outbox. */
  const workerReady = async (pid: number) => {
    const consumers = (await redis.xinfo("CONSUMERS", keys.outbox(), FANOUT_GROUP)) as string[][];
    return consumers.some((c) => String(c[1]).startsWith(`${pid}-`));
  };
  const deploy = async (): Promise<Deployment> => {
    const d = await startDeployment({ redisUrl: redisServer.url, adminToken, split: SPLIT, workerReady, env: RUNTIME_DAEMON_ENV });
    cleanups.push(() => d.stop());
    return d;
  };
  let dep: Deployment | undefined;
  let key = "";

  // ---- Tributary set-up. With the drain phase, an API-only daemon (no workers) takes the backlog first. ----
  if (TRIBUTARY_PHASES) {
    let setupUrl: string;
    let apiOnly: DaemonProcess | undefined;
    if (want("drain")) {
      apiOnly = await startDaemonProcess({ redisUrl: redisServer.url, adminToken, roles: "api" }, "daemon(api, pre-load)");
      const a = apiOnly;
      cleanups.push(() => a.stop());
      setupUrl = a.url;
    } else {
      dep = await deploy();
      setupUrl = dep.url;
    }
    const user = await apiData<{ api_key: string }>(
      setupUrl,
      adminToken,
      "POST",
      "/admin/users",
      { username: "bench", email: "bench@example.com", plan: "paid" },
      201,
    );
    key = user.api_key;
    const hook = await apiData<{ id: string }>(setupUrl, key, "POST", "/v1/webhooks", { url: receiver.url, name: "bench" }, 200);
    for (const emitter of ["p_bench_drain", "p_bench_lat"]) {
      await apiData(setupUrl, key, "POST", "/v1/subscriptions", { emitter_id: emitter, listener_id: hook.id }, 200);
    }
    if (apiOnly) {
      log(`pre-loading ${S.backlog} events into p_bench_drain (API-only daemon)`);
      const preloadStart = performance.now();
      const chunk = 500;
      for (let i = 0; i < S.backlog; i += chunk * 4) {
        await Promise.all(
          [0, 1, 2, 3].map(async (j) => {
            const from = i + j * chunk;
            const to = Math.min(S.backlog, from + chunk);
            if (from >= to) return;
            const events = [];
            for (let s = from; s < to; s++) events.push({ event: smallEvent(s) });
            await apiData(setupUrl, key, "POST", "/v1/workflows/p_bench_drain/events", { events }, 202);
          }),
        );
      }
      const outboxLen = await redis.xlen(keys.outbox());
      log(`  pre-loaded in ${fmt(performance.now() - preloadStart)} ms; outbox holds ${outboxLen}`);
      if (outboxLen !== S.backlog) throw new Error(`outbox holds ${outboxLen} entries, expected ${S.backlog}: did the key layout change?`);
      await apiOnly.stop();
    }
  }

  // ---- 5b. Plain BullMQ, next to the drain it is compared with (no Tributary worker runs meanwhile) ----
  if (want("bullmq")) {
    log(`plain BullMQ baseline: ${S.backlog} jobs, concurrency ${S.deliveryConcurrency}`);
    results.bull = await bullmqBaseline({
      redisUrl: redisServer.url,
      redisPid: redisServer.pid,
      receiver,
      backlog: S.backlog,
      concurrency: S.deliveryConcurrency,
      seqBase: 0,
      deadlineMs: 90_000,
    });
    log(`  ${fmt(results.bull.perSec)} deliveries/s (${results.bull.delivered}/${results.bull.expected})`);
  }

  // ---- 3. Draining: the daemon starts on the backlog ----
  if (want("drain")) {
    receiver.reset();
    log(`starting ${SPLIT ? "an api and a worker process" : "the full daemon (api,worker,scheduler)"} on the backlog`);
    const d = await deploy();
    dep = d;
    const workerPid = d.workerPid as number;
    const meter = await startMeter({ ...d.pids, redis: redisServer.pid, bench: process.pid }, redis);
    const deliveredBeforeMeter = receiver.count();
    const outboxAtMeter = await redis.xlen(keys.outbox());
    const cpuAtMeter = cpuMsOf(workerPid) ?? 0;
    // Where the backlog sits over time: when the outbox empties, fan-out is done and only delivery remains.
    let fanoutDone: { at: number; delivered: number; cpuMs: number } | undefined;
    const watch = setInterval(() => {
      void redis
        .xlen(keys.outbox())
        .then((n) => {
          if (n === 0 && !fanoutDone) fanoutDone = { at: performance.now(), delivered: receiver.count(), cpuMs: cpuMsOf(workerPid) ?? 0 };
        })
        .catch(() => {});
    }, 100);
    const stopTrace = TRACE ? trace(redis, keys, receiver) : () => {};
    const complete = await receiver.waitFor(S.backlog, 120_000);
    const cpuAtEnd = cpuMsOf(workerPid) ?? 0;
    clearInterval(watch);
    stopTrace();
    d.ensureAlive();
    const base = drainResult(receiver, S.backlog, complete, await meter(receiver.count() - deliveredBeforeMeter));
    const w = receiver.window();
    let detail = "";
    const tail = fanoutDone ? S.backlog - fanoutDone.delivered : 0;
    if (fanoutDone && w && tail > 500 && outboxAtMeter > 0) {
      // Split the worker process's CPU: after the outbox emptied it only delivers, which prices a
      // delivery; the rest of its CPU before that moment is the fan-out's.
      const tailMs = w.last - fanoutDone.at;
      const usPerDelivery = ((cpuAtEnd - fanoutDone.cpuMs) * 1000) / tail;
      const fanoutUs =
        ((fanoutDone.cpuMs - cpuAtMeter) * 1000 - usPerDelivery * (fanoutDone.delivered - deliveredBeforeMeter)) / outboxAtMeter;
      detail =
        `fan-out finished ${fmt((fanoutDone.at - w.first) / 1000, 1)} s in, with ${fmt(fanoutDone.delivered)} delivered; ` +
        `delivery alone afterwards ${fmt((tail * 1000) / tailMs)}/s. Worker CPU split: ≈${fmt(fanoutUs)} µs fan-out per event + ≈${fmt(usPerDelivery)} µs per delivery`;
    } else if (fanoutDone && w) {
      detail = `fan-out finished ${fmt((fanoutDone.at - w.first) / 1000, 1)} s in, with ${fmt(fanoutDone.delivered)} delivered`;
    }
    if (!SPLIT) {
      // A fresh daemon: its counters cover the drain alone.
      const text = await scrape(d.url);
      const all = metricValue(text, "tributary_fanout_deliveries_total");
      if (all > 0) {
        const share = metricValue(text, "tributary_fanout_direct_deliveries_total") / all;
        detail = `${detail ? `${detail}; ` : ""}${fmt(share * 100, 1)} % of first attempts direct, the rest queued`;
      }
    }
    results.drain = { ...base, detail };
    log(`  ${fmt(results.drain.perSec)} deliveries/s (${results.drain.delivered}/${results.drain.expected}); ${detail}`);
  }

  // ---- 5a. Bare Koa, next to the single-emit ingest it is compared with ----
  if (want("koa")) {
    log(`bare Koa baseline: ${S.durationS}s, ${S.connections} connections`);
    results.koa = await koaBaseline({ durationS: S.durationS, warmupS: S.warmupS, connections: S.connections });
    log(`  ${fmt(results.koa.reqPerSec)} req/s`);
  }
  // ---- 5b. The same Koa stack doing one EVALSHA per request: the floor under an acknowledged emit ----
  if (want("koaredis")) {
    log(`Koa + one EVALSHA per request baseline: ${S.durationS}s, ${S.connections} connections`);
    results.koaRedis = await koaEvalshaBaseline({
      durationS: S.durationS,
      warmupS: S.warmupS,
      connections: S.connections,
      redisUrl: redisServer.url,
      redisPid: redisServer.pid,
    });
    log(`  ${fmt(results.koaRedis.reqPerSec)} req/s`);
  }

  if (!(want("single") || want("batch") || want("latency") || want("sse") || RUNTIME_PHASES)) {
    if (dep) results.peakRssKb = dep.peakRssKb();
    await sandbox();
    return results;
  }
  dep ??= await deploy();
  const dm: Deployment = dep;

  const deliveryQueue = new Queue("delivery", { connection: redis, prefix: keys.bullPrefix });
  cleanups.push(() => deliveryQueue.close());
  /** Waits until the outbox is empty and no delivery is waiting or running. */
  const quiesce = async (label: string) => {
    if (!dm.hasWorker) return; // nothing drains the outbox (BENCH_DAEMON_ENV=ROLES=api)
    const start = performance.now();
    for (;;) {
      dm.ensureAlive();
      const outbox = await redis.xlen(keys.outbox());
      const c = await deliveryQueue.getJobCounts("wait", "active", "delayed", "prioritized");
      const busy = (c.wait ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0);
      if (outbox === 0 && busy === 0) break;
      if (performance.now() - start > 90_000) throw new Error(`${label}: daemon still busy after 90 s (outbox ${outbox}, jobs ${busy})`);
      await sleep(100);
    }
    log(`  ${label}: quiet after ${fmt(performance.now() - start)} ms`);
  };
  await quiesce("before ingest");

  const ingestUrl = `${dm.url}/v1/workflows/p_bench_ingest/events`;
  const auth = { authorization: `Bearer ${key}` };
  const closedLoop = async (body: string, warmupS: number, eventsPerRequest: number): Promise<ClosedLoopResult & { cost: Cost }> => {
    if (warmupS > 0) await hammer({ url: ingestUrl, body, headers: auth, durationS: warmupS, connections: S.connections });
    const meter = await startMeter({ ...dm.pids, redis: redisServer.pid, bench: process.pid }, redis);
    const r = await hammer({ url: ingestUrl, body, headers: auth, durationS: S.durationS, connections: S.connections });
    // Fan-out of what was just ingested is part of the price of an emit: wait for it before reading the meter.
    await quiesce("fan-out of the ingested events");
    const cost = await meter(r.ok * eventsPerRequest);
    dm.ensureAlive();
    return { ...r, cost };
  };

  if (want("single")) {
    log(`single-emit ingest: ${S.durationS}s, ${S.connections} connections`);
    results.single = await closedLoop(JSON.stringify({ event: smallEvent(1) }), S.warmupS, 1);
    log(`  ${fmt(results.single.reqPerSec)} req/s`);
  }

  if (want("batch")) {
    log(`batch ingest (${S.batchSize} events/request): ${S.durationS}s, ${S.connections} connections`);
    const body = JSON.stringify({ events: Array.from({ length: S.batchSize }, (_, i) => ({ event: smallEvent(i) })) });
    results.batch = await closedLoop(body, 0, S.batchSize);
    log(`  ${fmt(results.batch.reqPerSec)} req/s`);
  }

  if (want("latency")) {
    const runs = LATENCY_RUNS
      ? [...LATENCY_RUNS].map((r) => ({ rate: Number(r.split("x")[0]), batch: Number(r.split("x")[1] ?? 1) }))
      : S.latency;
    // The judged rate, once more with plain BullMQ alone (the Tributary daemon idles meanwhile).
    const judgedRun = runs.find((r) => r.rate === 1000 && r.batch === 1);
    if (judgedRun) {
      log(`plain BullMQ at ${judgedRun.rate} jobs/s for ${S.durationS}s (Queue.add one by one -> worker -> undici)`);
      results.bullLatency = await bullmqLatencyBaseline({
        redisUrl: redisServer.url,
        redisPid: redisServer.pid,
        receiver,
        rate: judgedRun.rate,
        durationMs: S.durationS * 1000,
        warmupMs: S.warmupS * 1000,
        concurrency: S.deliveryConcurrency,
        seqBase: 90_000_000,
      });
      const b = results.bullLatency;
      log(`  p50 ${fmt(b.e2e.p50, 1)} ms, p99 ${fmt(b.e2e.p99, 1)} ms, delivered ${b.delivered}/${b.sent}`);
    }
    for (const [index, { rate, batch }] of runs.entries()) {
      log(`emit-to-delivered at ${rate} events/s for ${S.durationS}s (${batch} event(s)/request), after a ${S.warmupS} s warm-up`);
      // Warm-up at the same rate, not measured: a steady rate is what the row reports, and a
      // daemon's first second of load runs on cold code and connections (BENCH_E2E_DUMP shows it).
      receiver.reset();
      await openLoop({
        origin: dm.url,
        path: "/v1/workflows/p_bench_lat/events",
        token: key,
        rate,
        durationMs: S.warmupS * 1000,
        batch,
        seqBase: (index + 1) * 10_000_000 + 5_000_000,
      });
      await quiesce(`after the warm-up at ${rate}/s`);
      receiver.reset();
      // How many first attempts went direct rather than through the queue (one daemon: its /metrics sees fan-out).
      const fanoutCounts = async () => {
        if (SPLIT || !dm.hasWorker) return undefined;
        const text = await scrape(dm.url);
        return {
          all: metricValue(text, "tributary_fanout_deliveries_total"),
          direct: metricValue(text, "tributary_fanout_direct_deliveries_total"),
        };
      };
      const countsBefore = await fanoutCounts();
      const meter = await startMeter({ ...dm.pids, redis: redisServer.pid, bench: process.pid }, redis);
      const r = await openLoop({
        origin: dm.url,
        path: "/v1/workflows/p_bench_lat/events",
        token: key,
        rate,
        durationMs: S.durationS * 1000,
        batch,
        seqBase: (index + 1) * 10_000_000,
      });
      const expected = r.sentAt.size - r.failures * batch;
      await receiver.waitFor(expected, 60_000);
      const cost = await meter(receiver.count());
      dm.ensureAlive();
      const countsAfter = await fanoutCounts();
      const fannedOut = countsAfter && countsBefore ? countsAfter.all - countsBefore.all : 0;
      const directShare = countsAfter && countsBefore && fannedOut > 0 ? (countsAfter.direct - countsBefore.direct) / fannedOut : undefined;
      const e2e: number[] = [];
      if (process.env.BENCH_E2E_DUMP) {
        const rows: string[] = [];
        for (const [seq, sent] of r.sentAt)
          rows.push(`${(sent / 1000).toFixed(3)} ${((receiver.arrivals.get(seq) ?? Number.NaN) - sent).toFixed(2)}`);
        (await import("node:fs")).writeFileSync(`${process.env.BENCH_E2E_DUMP}-${rate}x${batch}.txt`, rows.join("\n"));
      }
      for (const [seq, sent] of r.sentAt) {
        const at = receiver.arrivals.get(seq);
        if (at !== undefined) e2e.push(at - sent);
      }
      const res = {
        rate,
        batch,
        sent: r.sentAt.size,
        delivered: e2e.length,
        e2e: summarize(e2e),
        ack: summarize(r.ackMs),
        failures: r.failures,
        maxLagMs: r.maxLagMs,
        cost,
        directShare,
      };
      results.latency.push(res);
      log(`  p50 ${fmt(res.e2e.p50, 1)} ms, p99 ${fmt(res.e2e.p99, 1)} ms, delivered ${res.delivered}/${res.sent}`);
      await quiesce(`after ${rate}/s`);
    }
  }

  // ---- Live tail (SPEC §9): events fanned out to open SSE streams ----
  if (want("sse")) {
    const L = S.liveTail;
    log(`live tail: ${L.streams} streams on one workflow, ${L.rate} single emits/s for ${L.durationS} s`);
    const meter = await startMeter({ ...dm.pids, redis: redisServer.pid, bench: process.pid }, redis);
    const wf = "p_bench_live_tail";
    const r = await liveTailPhase({
      url: dm.url,
      key,
      workflowId: wf,
      streams: L.streams,
      rate: L.rate,
      durationS: L.durationS,
      emitOne: async () => {
        const res = await fetch(`${dm.url}/v1/workflows/${wf}/events`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ event: smallEvent(0) }),
        });
        if (res.status !== 202) throw new Error(`live tail set-up emit: ${res.status}`);
      },
    });
    results.liveTail = { ...r, cost: await meter(r.emitted) };
    log(
      `  ${fmt(r.framesPerSec)} frames/s to ${r.streams} streams (${r.frames}/${r.emitted * r.streams}); record → stream p50 ${fmt(r.latency.p50, 1)} ms, p99 ${fmt(r.latency.p99, 1)} ms`,
    );
    await quiesce("after the live tail");
  }

  // ---- Source runtime (issue 4): timer lag first, on an otherwise idle daemon; then HTTP sources ----
  if (RUNTIME_PHASES) {
    const R = S.runtime;
    const ctx: RuntimeContext = {
      url: dm.url,
      key,
      redis,
      bullPrefix: keys.bullPrefix,
      metricsSeeWorker: !SPLIT && dm.hasWorker,
      connections: S.connections,
      durationS: R.durationS,
      warmupS: S.warmupS,
      ensureAlive: () => dm.ensureAlive(),
      log,
    };
    const pids = { ...dm.pids, redis: redisServer.pid, bench: process.pid };
    if (want("timer") && dm.hasWorker) {
      log(`timer source, 1 s interval, ticking for ${R.timerS} s`);
      results.timer = await timerPhase(ctx, R.timerS);
      const t = results.timer;
      log(
        `  ${t.ticks}/${t.expectedTicks} ticks; lag to run p50 ${fmt(t.toRun.p50, 1)} ms, p99 ${fmt(t.toRun.p99, 1)} ms, max ${fmt(t.toRun.max, 1)} ms; histogram p50 ${fmt((t.hist?.p50 ?? Number.NaN) * 1000, 1)} ms`,
      );
    }
    if (want("srcinline")) {
      log(`HTTP source with a custom response (inline runs): ${R.durationS}s`);
      const meter = await startMeter(pids, redis);
      const r = await sourceInlinePhase(ctx);
      results.srcInline = { ...r, cost: await meter(r.load.ok) };
      log(
        `  ${fmt(r.load.reqPerSec)} req/s answered 200, p50 ${fmt(r.load.p50, 1)} ms, p99 ${fmt(r.load.p99, 1)} ms; statuses ${JSON.stringify(r.load.statuses)}`,
      );
    }
    if (want("srchttp") && dm.hasWorker) {
      log(`HTTP source, queued runs: ${R.durationS}s, ${S.connections} connections`);
      const meter = await startMeter(pids, redis);
      const r = await sourceHttpPhase(ctx, R.drainDeadlineS * 1000, R.sourceRunConcurrency);
      results.srcHttp = { ...r, cost: await meter(r.runs) };
      log(
        `  ${fmt(r.load.reqPerSec)} req/s accepted; workers ${fmt(r.runsPerSec)} runs/s (${r.runs} runs, backlog ${r.backlogAtLoadEnd} at load end, ` +
          `${r.complete ? "drained" : "NOT drained"} after ${fmt(r.drainS, 1)} s, ${r.runErrors} not ok)`,
      );
    }
    await quiesce("after the source phases");
  }

  results.peakRssKb = dm.peakRssKb();
  await dm.stop();
  await sandbox();
  return results;

  /** (Issue 4) Sandbox overhead, in a child process, once the daemon is gone and the machine quiet. */
  async function sandbox(): Promise<void> {
    if (!want("sandbox")) return;
    log(
      `sandbox run overhead: ${S.runtime.sandboxRuns} sequential runs of a trivial component (after ${S.runtime.sandboxWarmup} warm-up runs)`,
    );
    results.sandbox = await sandboxPhase(S.runtime.sandboxRuns, S.runtime.sandboxWarmup);
    const x = results.sandbox;
    log(`  p50 ${fmt(x.p50, 3)} ms, p99 ${fmt(x.p99, 3)} ms, mean ${fmt(x.mean, 3)} ms per run; failed runs ${JSON.stringify(x.errors)}`);
    log(`  CPU ${fmt(x.cpuUsPerRun)} µs per warm run`);
    for (const [what, c] of [
      ["first run of a new source (warm user)", x.coldSource],
      ["first run of a new user", x.coldUser],
    ] as const) {
      if (c) log(`  ${what}: p50 ${fmt(c.p50, 3)} ms, p99 ${fmt(c.p99, 3)} ms, CPU ${fmt(c.cpuUsPerRun)} µs per run (${c.count} runs)`);
    }
    const m = x.memory;
    if (m) {
      log(
        `  memory: ${m.sources} live contexts of ${m.users} users: ${fmt(m.rssTotalMiB, 0)} MiB RSS (process ${fmt(m.rssMiB, 0)} MiB); ${fmt(m.rssPerIsolateMiB, 2)} MiB per isolate, ${fmt(m.rssPerContextKiB, 0)} KiB per context`,
      );
    }
  }
}

let exitCode = 0;
try {
  const results = await main();
  await cleanup();
  printReport(results, {
    title: `Tributary bench — ${new Date().toISOString()} — node ${process.version}, ${availableParallelism()} CPUs, loopback`,
    totalS: (performance.now() - t0) / 1000,
  });
} catch (err) {
  exitCode = 1;
  process.stderr.write(`\nbench failed: ${(err as Error)?.stack ?? String(err)}\n`);
} finally {
  await cleanup();
}
process.exit(exitCode);
