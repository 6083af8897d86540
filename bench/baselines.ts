import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { type NodeChild, spawnNode } from "./child.js";
import { type ClosedLoopResult, hammer, smallEvent } from "./load.js";
import { type Summary, summarize } from "./stats.js";
import { type Cost, startMeter } from "./meter.js";
import type { Receiver } from "./receiver.js";

const TSX = ["--import", "tsx"];
/** BENCH_CPU_PROF=<dir> profiles the Koa baselines too (one V8 CPU profile per child, written on exit). */
const PROF = process.env.BENCH_CPU_PROF ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_CPU_PROF] : [];
/** BENCH_BASELINE_NODE_FLAGS="--perf-basic-prof ...": extra node flags for the baselines (as BENCH_DAEMON_NODE_FLAGS for the daemon). */
const FLAGS = (process.env.BENCH_BASELINE_NODE_FLAGS ?? "").split(" ").filter(Boolean);
/** The node arguments of a baseline child (`bench/baseline-child.ts`): tsx, then the flags above. */
export const BASELINE_NODE_ARGS: readonly string[] = [...TSX, ...PROF, ...FLAGS];

/** (a) A bare Koa app in its own process, loaded exactly like the single-emit ingest. */
export async function koaBaseline(opts: {
  durationS: number;
  warmupS: number;
  connections: number;
}): Promise<ClosedLoopResult & { cost: Cost }> {
  return closedLoopBaseline("koa", {}, undefined, opts);
}

/**
 * The same Koa stack as the daemon's API doing one Redis EVALSHA per request (see
 * baseline-child.ts): the floor under any acknowledged emit. Its CPU is counted as "koa", Redis's
 * as "redis".
 */
export async function koaEvalshaBaseline(opts: {
  durationS: number;
  warmupS: number;
  connections: number;
  redisUrl: string;
  redisPid: number | undefined;
}): Promise<ClosedLoopResult & { cost: Cost }> {
  return closedLoopBaseline("koa-evalsha", { REDIS_URL: opts.redisUrl }, opts.redisPid, opts);
}

/** How `startBaseline` runs its child, past the defaults. */
export interface BaselineStart {
  /** The child's name in logs (default `<mode>-baseline`). */
  readonly name?: string;
  /** Node flags after BASELINE_NODE_ARGS (an inspector port, say). */
  readonly nodeArgs?: readonly string[];
  /** Runs the child under another program (bench/instructions.ts: valgrind); see `spawnNode`. */
  readonly wrapper?: readonly string[];
  /** How long it may take to listen (default 30 s; far longer under valgrind). */
  readonly startTimeoutMs?: number;
}

/**
 * Starts a Koa baseline child (`baseline-child.ts <mode>`) and waits until it listens; `url` is its
 * emit route. The caller stops the child.
 */
export async function startBaseline(
  mode: "koa" | "koa-evalsha",
  env: Record<string, string>,
  opts: BaselineStart = {},
): Promise<{ child: NodeChild; url: string }> {
  const child = spawnNode(
    opts.name ?? `${mode}-baseline`,
    [...BASELINE_NODE_ARGS, ...(opts.nodeArgs ?? [])],
    "bench/baseline-child.ts",
    [mode],
    env,
    undefined,
    opts.wrapper,
  );
  try {
    const m = await child.waitForLine(/^READY (\d+)/, opts.startTimeoutMs ?? 30_000);
    return { child, url: `http://127.0.0.1:${m[1]}/v1/workflows/p_bench/events` };
  } catch (err) {
    await child.stop();
    throw err;
  }
}

/** Closed-loop single emits against a baseline child (`baseline-child.ts <mode>`), after a warm-up. */
async function closedLoopBaseline(
  mode: "koa" | "koa-evalsha",
  env: Record<string, string>,
  redisPid: number | undefined,
  opts: { durationS: number; warmupS: number; connections: number },
): Promise<ClosedLoopResult & { cost: Cost }> {
  const { child, url } = await startBaseline(mode, env);
  try {
    const body = JSON.stringify({ event: smallEvent(1) });
    const headers = { authorization: "Bearer not-checked-by-the-baseline" };
    await hammer({ url, body, headers, durationS: opts.warmupS, connections: opts.connections });
    const meter = await startMeter({ koa: child.pid, ...(redisPid ? { redis: redisPid } : {}), bench: process.pid }, undefined);
    const r = await hammer({ url, body, headers, durationS: opts.durationS, connections: opts.connections });
    return { ...r, cost: await meter(r.ok) };
  } finally {
    await child.stop();
  }
}

export interface DrainResult {
  readonly delivered: number;
  readonly expected: number;
  readonly perSec: number;
  readonly spanMs: number;
  readonly duplicates: number;
  readonly complete: boolean;
  readonly cost?: Cost;
  /** Where the time went (Tributary: fan-out vs delivery). */
  readonly detail?: string;
  /** Plain BullMQ only: CPU the producer spent creating each job (`addBulk`, before the timed window). */
  readonly producerUsPerJob?: number;
}

/** Deliveries per second between the first and the last arrival at the receiver. */
export function drainResult(receiver: Receiver, expected: number, complete: boolean, cost?: Cost): DrainResult {
  const w = receiver.window();
  const delivered = receiver.count();
  const spanMs = w ? w.last - w.first : 0;
  return {
    delivered,
    expected,
    spanMs,
    perSec: spanMs > 0 ? ((delivered - 1) * 1000) / spanMs : Number.NaN,
    duplicates: receiver.duplicates(),
    complete,
    ...(cost ? { cost } : {}),
  };
}

/** Same job shape and retention as Tributary's delivery jobs, so Redis does comparable work. */
const BASELINE_JOB_OPTS = {
  attempts: 3,
  backoff: { type: "fixed", delay: 1000 },
  removeOnComplete: { age: 600, count: 50_000 },
  removeOnFail: { age: 3600, count: 50_000 },
};

/** The plain BullMQ worker child (baseline-child.ts) on a queue of its own. */
function startBullWorker(label: string, opts: { redisUrl: string; prefix: string; concurrency: number; receiver: Receiver }) {
  return spawnNode(label, TSX, "bench/baseline-child.ts", ["bullmq"], {
    REDIS_URL: opts.redisUrl,
    QUEUE: BASELINE_QUEUE,
    PREFIX: opts.prefix,
    CONCURRENCY: String(opts.concurrency),
    TARGET_URL: opts.receiver.url,
  });
}
const BASELINE_QUEUE = "delivery";

/**
 * (b) A plain BullMQ Queue + Worker (in its own process) posting each job's payload with undici:
 * the backlog is added first, then the worker starts and drains it.
 */
export async function bullmqBaseline(opts: {
  redisUrl: string;
  redisPid: number | undefined;
  receiver: Receiver;
  backlog: number;
  concurrency: number;
  seqBase: number;
  deadlineMs: number;
}): Promise<DrainResult> {
  const prefix = "benchbase:{bull}";
  const connection = new Redis(opts.redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue(BASELINE_QUEUE, { connection, prefix });
  try {
    const addStart = performance.now();
    const addCpu = process.cpuUsage();
    for (let i = 0; i < opts.backlog; i += 1000) {
      const jobs = [];
      for (let k = i; k < Math.min(opts.backlog, i + 1000); k++) {
        const seq = opts.seqBase + k;
        const data = {
          userId: "u_bench",
          deliveryId: `d_base${seq}`,
          listenerKind: "webhook",
          listenerId: "wh_bench",
          emitterId: "p_bench",
          channel: "",
          eventId: `0-${seq}`,
          payload: JSON.stringify(smallEvent(seq)),
          acceptedAtMs: Date.now(),
        };
        jobs.push({ name: "webhook", data, opts: { jobId: `d_base${seq}`, ...BASELINE_JOB_OPTS } });
      }
      await queue.addBulk(jobs);
    }
    const used = process.cpuUsage(addCpu);
    const producerUsPerJob = (used.user + used.system) / opts.backlog;
    const addDetail = `pre-load: addBulk of ${opts.backlog} jobs took ${Math.round(performance.now() - addStart)} ms, ${Math.round(producerUsPerJob)} µs producer CPU per job (not counted above)`;
    opts.receiver.reset();
    const child = startBullWorker("bullmq-baseline", { ...opts, prefix });
    try {
      await child.waitForLine(/^READY/, 30_000);
      const meter = await startMeter({ worker: child.pid, redis: opts.redisPid, bench: process.pid }, connection);
      const complete = await opts.receiver.waitFor(opts.backlog, opts.deadlineMs);
      const cost = await meter(opts.receiver.count());
      const gone = child.exited();
      if (gone) throw new Error(`bullmq baseline worker crashed (${JSON.stringify(gone)}):\n${child.tail()}`);
      return { ...drainResult(opts.receiver, opts.backlog, complete, cost), detail: addDetail, producerUsPerJob };
    } finally {
      await child.stop();
    }
  } finally {
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    connection.disconnect();
  }
}

export interface BullLatencyResult {
  readonly rate: number;
  readonly sent: number;
  readonly delivered: number;
  /** Queue.add called -> arrival at the receiver, ms. */
  readonly e2e: Summary;
  readonly cost: Cost;
}

/**
 * (c) Plain BullMQ at a steady rate: the bench process adds one job per event on a 1 ms pacer
 * (`Queue.add`, the producer side of a BullMQ design) and the same worker child as (b) POSTs each
 * to the receiver. Latency = arrival − the moment the job was handed to `Queue.add`. This is what
 * BullMQ plus undici alone achieve on this machine at the rate of the latency target, with no
 * HTTP ingest and no fan-out in front.
 */
export async function bullmqLatencyBaseline(opts: {
  redisUrl: string;
  redisPid: number | undefined;
  receiver: Receiver;
  rate: number;
  durationMs: number;
  /** Paced the same way first, not measured (as Tributary's latency runs are). */
  warmupMs: number;
  concurrency: number;
  seqBase: number;
}): Promise<BullLatencyResult> {
  const prefix = "benchlat:{bull}";
  const connection = new Redis(opts.redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue(BASELINE_QUEUE, { connection, prefix });
  const child = startBullWorker("bullmq-latency", { ...opts, prefix });
  try {
    await child.waitForLine(/^READY/, 30_000);
    /** Adds `rate` jobs/s for `durationMs` on a 1 ms pacer; resolves with each seq's send time. */
    const pace = async (durationMs: number, seqBase: number) => {
      const total = Math.floor((opts.rate * durationMs) / 1000);
      const sentAt = new Map<number, number>();
      const start = performance.now();
      let issued = 0;
      await new Promise<void>((resolve) => {
        const timer = setInterval(() => {
          const due = Math.min(total, Math.floor(((performance.now() - start) * opts.rate) / 1000));
          while (issued < due) {
            const seq = seqBase + issued++;
            sentAt.set(seq, performance.now());
            void queue
              .add("webhook", { payload: JSON.stringify(smallEvent(seq)) }, { jobId: `l${seq}`, ...BASELINE_JOB_OPTS })
              .catch(() => sentAt.delete(seq));
          }
          if (issued >= total) {
            clearInterval(timer);
            resolve();
          }
        }, 1);
      });
      return sentAt;
    };
    opts.receiver.reset();
    const warm = await pace(opts.warmupMs, opts.seqBase + 5_000_000);
    await opts.receiver.waitFor(warm.size, 60_000);
    opts.receiver.reset();
    const meter = await startMeter({ worker: child.pid, redis: opts.redisPid, bench: process.pid }, connection);
    const sentAt = await pace(opts.durationMs, opts.seqBase);
    await opts.receiver.waitFor(sentAt.size, 60_000);
    const cost = await meter(opts.receiver.count());
    const gone = child.exited();
    if (gone) throw new Error(`bullmq latency worker crashed (${JSON.stringify(gone)}):\n${child.tail()}`);
    const e2e: number[] = [];
    for (const [seq, sent] of sentAt) {
      const at = opts.receiver.arrivals.get(seq);
      if (at !== undefined) e2e.push(at - sent);
    }
    return { rate: opts.rate, sent: sentAt.size, delivered: e2e.length, e2e: summarize(e2e), cost };
  } finally {
    await child.stop();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    connection.disconnect();
  }
}
