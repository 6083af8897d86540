/**
 * Interleaved single-emit ingest: the Koa + EVALSHA baseline (bench/baseline-child.ts) and one or
 * two daemons (this checkout and, with AB_ROOT, another checkout: an A/B of a change) run side by
 * side, each on an embedded Redis of its own, and the load moves between them in short slices,
 * round after round (the order rotates each round). A shared host whose speed drifts from one minute to the next
 * then slows every arm alike, which the back-to-back phases of `npm run bench` cannot promise: in
 * those the baseline alone moved between 85 and 207 µs per request from run to run.
 *
 * Reports per arm the median over rounds of CPU µs per request (the process and its children), of
 * its Redis server's CPU µs per request and of req/s, and each daemon's per-round ratio to the
 * baseline (median and range); then the script calls (EVAL/EVALSHA) each daemon's Redis ran per
 * request it answered (the record step's group commit shows as fewer than one).
 *
 *   npx tsx bench/ab-ingest.ts               # this checkout against the baseline
 *   AB_ROOT=/tmp/base npx tsx bench/ab-ingest.ts   # and another checkout (built here first)
 *
 * Knobs: AB_ROUNDS (8), AB_SLICE_S (3), AB_WARMUP_S (3), BENCH_CONNECTIONS (8), AB_DAEMON_ENV
 * ("K=V,..." for every daemon); as in `npm run bench`, BENCH_DAEMON_NODE_FLAGS and
 * BENCH_BASELINE_NODE_FLAGS (extra node flags, e.g. --perf-basic-prof) and BENCH_CPU_PROF (a
 * directory for V8 CPU profiles of every arm).
 */
import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { ROOT } from "./child.js";
import { startBaseline } from "./baselines.js";
import { type ArmSlices, interleavedSlices, roundRatios, type SliceArm } from "./interleave.js";
import { commandCalls } from "./meter.js";
import { buildDaemon, type EmitDaemon, startEmitDaemon } from "./daemon-process.js";
import { hammer, smallEvent } from "./load.js";
import { RUNTIME_DAEMON_ENV } from "./runtime.js";
import { envInt, median } from "./stats.js";

const ROUNDS = envInt("AB_ROUNDS", 8);
const SLICE_S = envInt("AB_SLICE_S", 3);
const WARMUP_S = envInt("AB_WARMUP_S", 3);
const CONNECTIONS = envInt("BENCH_CONNECTIONS", 8);
const OTHER_ROOT = process.env.AB_ROOT;

function daemonEnv(): Record<string, string> {
  const out: Record<string, string> = { ...RUNTIME_DAEMON_ENV };
  for (const pair of (process.env.AB_DAEMON_ENV ?? "").split(",")) {
    const i = pair.indexOf("=");
    if (i > 0) out[pair.slice(0, i).trim()] = pair.slice(i + 1).trim();
  }
  return out;
}

/** EVAL and EVALSHA calls a Redis has run (INFO commandstats). */
async function scriptCalls(url: string): Promise<number> {
  const redis = new Redis(url);
  try {
    const calls = await commandCalls([redis]);
    return (calls.get("eval") ?? 0) + (calls.get("evalsha") ?? 0);
  } finally {
    redis.disconnect();
  }
}

async function main(): Promise<void> {
  const log = (msg: string) => process.stderr.write(`[ab] ${msg}\n`);
  buildDaemon(ROOT);
  if (OTHER_ROOT) buildDaemon(OTHER_ROOT);
  const redis = await startEmbeddedRedis();
  const stops: (() => Promise<unknown>)[] = [() => redis.close()];
  try {
    const adminToken = `ab-admin-${randomBytes(8).toString("hex")}`;
    const daemons: { name: string; e: EmitDaemon }[] = [];
    for (const [name, root] of [["this", ROOT], ...(OTHER_ROOT ? [["other", OTHER_ROOT]] : [])] as [string, string][]) {
      const e = await startEmitDaemon({ adminToken, env: daemonEnv(), root }, `daemon(${name})`, "ab");
      stops.unshift(() => e.stop());
      daemons.push({ name, e });
    }
    const { child: baseline, url: baselineUrl } = await startBaseline("koa-evalsha", { REDIS_URL: redis.url }, { name: "koa-evalsha" });
    stops.unshift(() => baseline.stop());
    const arms: SliceArm[] = [
      {
        name: "Koa + EVALSHA",
        pid: baseline.pid,
        url: baselineUrl,
        headers: { authorization: "Bearer x" },
        redisPid: redis.pid,
      },
      ...daemons.map(({ name, e }) => ({
        name: `daemon (${name})`,
        pid: e.daemon.child.pid as number,
        url: `${e.daemon.url}/v1/workflows/p_ab_ingest/events`,
        headers: { authorization: `Bearer ${e.key}` },
        redisPid: e.redis.pid,
      })),
    ];
    const body = JSON.stringify({ event: smallEvent(1) });
    const warmed: number[] = [];
    for (const a of arms)
      warmed.push((await hammer({ url: a.url, body, headers: a.headers, durationS: WARMUP_S, connections: CONNECTIONS })).ok);
    log(`${arms.length} arms, ${ROUNDS} rounds of ${SLICE_S} s slices, ${CONNECTIONS} connections`);
    const { slices, otherPeakPct } = await interleavedSlices(arms, {
      rounds: ROUNDS,
      sliceS: SLICE_S,
      connections: CONNECTIONS,
      body,
      onRound: log,
    });
    const base = slices[0] as ArmSlices;
    /** Requests each arm answered, warm-up included (to divide a process's own totals by). */
    const answered = slices.map((s, i) => s.requests + (warmed[i] ?? 0));
    const out: string[] = [
      `| arm | CPU µs/request (median) | its Redis's CPU µs/request | req/s (median) | req/s ÷ baseline, per round: median (range) | CPU ÷ baseline's: median | requests (pid) |`,
      `|---|---|---|---|---|---|---|`,
    ];
    for (const [i, a] of arms.entries()) {
      const s = slices[i] as ArmSlices;
      const ratios = roundRatios(s.rps, base.rps);
      const cpu = roundRatios(base.us, s.us);
      out.push(
        `| ${a.name} | ${median(s.us).toFixed(0)} | ${median(s.redisUs).toFixed(1)} | ${median(s.rps).toFixed(0)} | ${median(ratios).toFixed(2)}× (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}) | ${median(cpu).toFixed(2)}× | ${answered[i]} (${a.pid}) |`,
      );
    }
    // Script calls (EVAL and EVALSHA) each daemon's Redis ran per request it answered (warm-up and
    // start-up included): the record step's group commit shows as fewer than one.
    const calls: string[] = [];
    for (const [i, { name, e }] of daemons.entries()) {
      calls.push(`daemon (${name}) ${((await scriptCalls(e.redis.url)) / (answered[i + 1] as number)).toFixed(2)}`);
    }
    process.stdout.write(
      `${out.join("\n")}\n(other CPU peaked at ${Math.round(otherPeakPct)} % of a core; Redis script calls per request: ${calls.join(", ")})\n`,
    );
  } finally {
    for (const s of stops) await s().catch(() => undefined);
  }
}

await main();
process.exit(0);
