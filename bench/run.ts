/**
 * `npm run bench`: one loopback run measuring Tributary against its baselines, printed as one
 * markdown table (bench/report.ts). Starts a private redis-server (no persistence), a webhook
 * receiver in this process, and the daemon and baselines as child processes; cleans all of them up
 * on every path. Exit 0 when every phase ran (targets missed or not); 1 when something crashed; 2 on
 * an unknown phase name.
 *
 * The bench is a table of phases (PHASES below), run in table order: each names what it needs (a
 * pre-loaded backlog, a running daemon, its worker, no daemon at all: bench/context.ts) and returns
 * its part of the report. The shared set-up (build, Redis, receiver, bench user, deployment,
 * quiesce, meters) is built once in bench/context.ts. Phase bodies live in bench/phases/, grouped by
 * what they measure, rather than here: each is 20–100 lines of glue around the measurements
 * (baselines.ts, load.ts, runtime.ts, live-tail.ts), and a file per group lets a phase change
 * without touching the runner or the others.
 *
 * Knobs (environment): BENCH_DURATION_S (10), BENCH_BACKLOG (20000), BENCH_CONNECTIONS (8),
 * BENCH_PHASES (comma list of bullmq,drain,filters,recovery,koa,koaredis,single,interleaved,batch,latency,sse,timer,srcinline,srchttp,relay,sandbox,cluster;
 * default all but `cluster`, which runs only when named (about a minute: a local 3-master Redis
 * Cluster against the single redis-server; BENCH_CLUSTER_ROUNDS (1) times each of its loads on both
 * sides); they run in that order whatever the list's order), BENCH_RECOVERY_N (100000: deliveries the `recovery` phase queues
 * while its receiver is down, then drains), BENCH_INGEST_ROUNDS (6) and
 * BENCH_INGEST_SLICE_S (3): the `interleaved` phase's rounds of single emits against Koa + EVALSHA, BENCH_SOURCE_DURATION_S (5: load
 * per HTTP-source phase), BENCH_SANDBOX_RUNS (10000) after BENCH_SANDBOX_WARMUP (2000) warm-up runs, BENCH_TIMER_S (10: how long the 1 s timer
 * source ticks), BENCH_SSE_STREAMS (100), BENCH_SSE_RATE (200 emits/s) and BENCH_SSE_DURATION_S (5)
 * for the live-tail phase, BENCH_CPU_PROF (directory for V8 CPU profiles of the daemon),
 * BENCH_TRACE=1 (drain progress), BENCH_DAEMON_ROOT (run the daemon from another checkout),
 * BENCH_DAEMON_TSX=1 (run the daemon's TypeScript through tsx instead of the compiled dist/ that
 * `npm start` runs), BENCH_DAEMON_ENV ("K=V,K2=V2" extra daemon settings, e.g. ROLES=api or
 * DELIVERY_CONCURRENCY=128), BENCH_DAEMON_NODE_FLAGS (extra node flags of the daemon), BENCH_BASELINE_NODE_FLAGS (of the Koa baselines),
 * BENCH_CHILD_LOG=<dir> (each child process's output, one file each), BENCH_SPLIT=1 (an api process plus a worker+scheduler process instead of
 * one daemon), BENCH_LATENCY_RUNS ("1000x1,200x1": these latency runs instead of the standard four;
 * events/s x events per request), BENCH_E2E_DUMP=<path prefix> (each latency run's send time and
 * emit-to-delivered latency per event, one line each).
 */
import { availableParallelism } from "node:os";
import { performance } from "node:perf_hooks";
import { type BenchContext, type BenchSettings, buildContext, Cleanups, type Phase } from "./context.js";
import { bullmq, koa, koaredis } from "./phases/baselines.js";
import { drain } from "./phases/drain.js";
import { filters } from "./phases/filters.js";
import { recovery } from "./phases/recovery.js";
import { cluster } from "./phases/cluster.js";
import { batch, interleaved, single } from "./phases/ingest.js";
import { latency } from "./phases/latency.js";
import { relay } from "./phases/relay.js";
import { sandbox } from "./phases/sandbox.js";
import { srchttp, srcinline, timer } from "./phases/sources.js";
import { sse } from "./phases/sse.js";
import { type Results, printReport } from "./report.js";

/**
 * Every phase, in the order it runs. Plain BullMQ drains before the daemon's workers start (the
 * drain compares with it); the filters phase (two drains of its own, without and with filtered
 * subscriptions) follows it; the Koa baselines run next to the single-emit ingest they judge; the
 * relay (single emits against HTTP sources, end to end to a webhook) follows the source phases, on
 * a deployment of its own; the sandbox runs alone; the cluster phase (opt-in: OPT_IN) runs last,
 * with daemons of its own on the single redis-server and on a local Redis Cluster.
 */
const PHASES: readonly Phase[] = [
  bullmq,
  drain,
  filters,
  recovery,
  koa,
  koaredis,
  single,
  interleaved,
  batch,
  latency,
  sse,
  timer,
  srcinline,
  srchttp,
  relay,
  sandbox,
  cluster,
];

/** Phases left out of the default set: they run only when BENCH_PHASES names them. */
const OPT_IN = new Set(["cluster"]);

const envInt = (k: string, d: number) => {
  const v = Number(process.env[k]);
  return Number.isInteger(v) && v > 0 ? v : d;
};

const SETTINGS: BenchSettings = {
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
    // A daemon's run path is shared by every source, so it is warm (V8-optimised) after its first
    // few thousand runs: 200 warm-up runs measured V8's warm-up, not the run (docs/performance.md).
    sandboxRuns: envInt("BENCH_SANDBOX_RUNS", 10_000),
    sandboxWarmup: envInt("BENCH_SANDBOX_WARMUP", 2000),
    timerS: envInt("BENCH_TIMER_S", 10),
    sourceRunConcurrency: 8, // Tributary's SOURCE_RUN_CONCURRENCY default
  },
};

const requested = new Set(
  (
    process.env.BENCH_PHASES ??
    PHASES.filter((p) => !OPT_IN.has(p.name))
      .map((p) => p.name)
      .join(",")
  )
    .split(",")
    .map((p) => p.trim()),
);
for (const p of requested) {
  if (!PHASES.some((phase) => phase.name === p)) {
    process.stderr.write(`bench: unknown phase "${p}" in BENCH_PHASES (known: ${PHASES.map((phase) => phase.name).join(",")})\n`);
    process.exit(2);
  }
}
const selected = PHASES.filter((p) => requested.has(p.name));

const t0 = performance.now();
const log = (msg: string) => process.stderr.write(`[bench +${((performance.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);

const cleanups = new Cleanups(log);
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.once(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanups.run().finally(() => process.exit(130));
  });
}

/** Gives a phase what it needs (context.ts `Need`); false when it cannot run on this deployment. */
async function prepare(ctx: BenchContext, phase: Phase): Promise<boolean> {
  if (phase.needs.includes("alone")) await ctx.stopDeployment();
  if (phase.needs.includes("daemon")) {
    const d = await ctx.deployment();
    if (phase.needs.includes("worker") && !d.hasWorker) {
      log(`${phase.name}: skipped (the deployment runs no worker)`);
      return false;
    }
  }
  return true;
}

async function main(): Promise<Results> {
  const ctx = await buildContext({
    settings: SETTINGS,
    split: process.env.BENCH_SPLIT === "1",
    latencyRuns: process.env.BENCH_LATENCY_RUNS?.split(",").map((r) => {
      const [rate, batch] = r.trim().split("x");
      return { rate: Number(rate), batch: Number(batch ?? 1) };
    }),
    trace: process.env.BENCH_TRACE === "1",
    phases: selected,
    log,
    cleanups,
  });
  const results: Results = { settings: SETTINGS, split: ctx.split, latency: [] };
  for (const phase of selected) {
    if (await prepare(ctx, phase)) Object.assign(results, await phase.run(ctx));
  }
  await ctx.stopDeployment();
  if (ctx.peakRssKb) results.peakRssKb = ctx.peakRssKb;
  return results;
}

let exitCode = 0;
try {
  const results = await main();
  await cleanups.run();
  printReport(results, {
    title: `Tributary bench — ${new Date().toISOString()} — node ${process.version}, ${availableParallelism()} CPUs, loopback`,
    totalS: (performance.now() - t0) / 1000,
  });
} catch (err) {
  exitCode = 1;
  process.stderr.write(`\nbench failed: ${(err as Error)?.stack ?? String(err)}\n`);
} finally {
  await cleanups.run();
}
process.exit(exitCode);
