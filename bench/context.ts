/**
 * The bench's shared set-up, built once for the phases of bench/run.ts: the daemon build, the
 * embedded redis-server, the webhook receiver, the bench user and its subscriptions (and, for the
 * drain, the backlog pre-loaded through an API-only daemon), the deployment under test, quiesce and
 * meters. Phases receive it and return their fragment of the report's Results.
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { FANOUT_GROUP } from "../src/events/fanout.js";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { createKeys, type Keys } from "../src/store/keys.js";
import { RunStream } from "../src/store/run-stream.js";
import { outboxLength } from "../src/store/outbox-stream.js";
import {
  apiData,
  buildDaemon,
  createPaidUser,
  type DaemonProcess,
  type Deployment,
  startDaemonProcess,
  startDeployment,
} from "./daemon-process.js";
import { smallEvent } from "./load.js";
import { type Cost, startMeter } from "./meter.js";
import { type Receiver, startReceiver } from "./receiver.js";
import type { Results } from "./report.js";
import { RUNTIME_DAEMON_ENV, type RuntimeContext } from "./runtime.js";
import { fmt, sleep } from "./stats.js";

/** The report's settings, plus the live-tail phase's (which the report reads from its result). */
export type BenchSettings = Results["settings"] & {
  readonly liveTail: { readonly streams: number; readonly rate: number; readonly durationS: number };
};

/**
 * What a phase needs before it runs; the runner (bench/run.ts) provides it. The embedded Redis and
 * the receiver are always there (the meters read Redis's command counts).
 * - `backlog`: BENCH_BACKLOG events pre-loaded into the drain workflow by an API-only daemon during
 *   set-up, before any worker runs (no deployment is started by the set-up then).
 * - `daemon`: the deployment under test, running and quiet (outbox empty, no job waiting) the
 *   first time a phase uses it; started here if none runs.
 * - `worker`: the deployment runs fan-out and delivery (not BENCH_DAEMON_ENV=ROLES=api); the phase
 *   is skipped otherwise.
 * - `alone`: no daemon runs beside it (the deployment is stopped first).
 */
export type Need = "backlog" | "daemon" | "worker" | "alone";

export interface Phase {
  /** Its BENCH_PHASES name. */
  readonly name: string;
  readonly needs: readonly Need[];
  /** Measures, logs its figures and returns its part of the report. */
  run(ctx: BenchContext): Promise<Partial<Results>>;
}

/** Cleanup steps, run last-in first-out, each failure logged. */
export class Cleanups {
  private readonly steps: (() => Promise<unknown>)[] = [];
  constructor(private readonly log: (msg: string) => void) {}
  push(step: () => Promise<unknown>): void {
    this.steps.push(step);
  }
  async run(): Promise<void> {
    while (this.steps.length > 0) {
      const c = this.steps.pop() as () => Promise<unknown>;
      await c().catch((err: unknown) => this.log(`cleanup step failed: ${(err as Error)?.message ?? String(err)}`));
    }
  }
}

export interface BenchContext {
  readonly settings: BenchSettings;
  /** BENCH_SPLIT=1: the deployment is an api process plus a worker+scheduler process. */
  readonly split: boolean;
  /** BENCH_LATENCY_RUNS, parsed: these latency runs instead of the standard ones. */
  readonly latencyRuns: readonly { rate: number; batch: number }[] | undefined;
  /** BENCH_TRACE=1: the drain logs where its backlog sits once a second. */
  readonly trace: boolean;
  readonly redisServer: { readonly url: string; readonly pid: number | undefined };
  /** A bench connection to the embedded Redis. */
  readonly redis: Redis;
  /** The daemon's key layout (its default REDIS_KEY_PREFIX). */
  readonly keys: Keys;
  readonly receiver: Receiver;
  /** The bench user's API key ("" when no phase needs a daemon). */
  readonly key: string;
  log(msg: string): void;
  readonly cleanups: Cleanups;
  /**
   * Starts a new deployment; it becomes `deployment()`. `env`: daemon settings for this deployment
   * only, over the runtime phases' (BENCH_DAEMON_ENV still wins).
   */
  deploy(env?: Record<string, string>): Promise<Deployment>;
  /** The running deployment (started if none runs). */
  deployment(): Promise<Deployment>;
  /** The running deployment; throws if none runs. */
  readonly dep: Deployment;
  /** Waits until the outbox is empty and no delivery waits or runs (a no-op without a worker). */
  quiesce(label: string): Promise<void>;
  /** Starts the CPU and Redis-command meter over the deployment, redis-server and this process. */
  meter(): Promise<(units: number) => Promise<Cost>>;
  /** The source-runtime phases' view of the running deployment (bench/runtime.ts). */
  runtime(): RuntimeContext;
  /** Stops the deployment (if one runs) and keeps its peak RSS for the report. */
  stopDeployment(): Promise<void>;
  /** Peak RSS of the deployments stopped so far, per process (the largest of each). */
  readonly peakRssKb: Record<string, number | undefined> | undefined;
}

export interface ContextOptions {
  readonly settings: BenchSettings;
  readonly split: boolean;
  readonly latencyRuns: readonly { rate: number; batch: number }[] | undefined;
  readonly trace: boolean;
  /** The phases that will run, in order. */
  readonly phases: readonly Phase[];
  readonly log: (msg: string) => void;
  readonly cleanups: Cleanups;
}

const KEY_PREFIX = "trib"; // the daemon's default REDIS_KEY_PREFIX
/** Workflows the bench user's webhook (the receiver) is subscribed to. */
const DRAIN_WORKFLOW = "p_bench_drain";
export const LATENCY_WORKFLOW = "p_bench_lat";

export async function buildContext(o: ContextOptions): Promise<BenchContext> {
  const { settings: S, log, cleanups } = o;
  const needs = new Set(o.phases.flatMap((p) => p.needs));
  const tributary = needs.has("daemon") || needs.has("backlog");
  if (tributary) {
    log("building the daemon (npm run build)");
    buildDaemon();
  }
  const redisServer = await startEmbeddedRedis();
  cleanups.push(() => redisServer.close());
  const redis = new Redis(redisServer.url, { maxRetriesPerRequest: null });
  cleanups.push(async () => redis.disconnect());
  const receiver = await startReceiver();
  cleanups.push(() => receiver.close());
  log(
    `redis ${redisServer.url}, receiver ${receiver.url}, phases ${o.phases.map((p) => p.name).join(",")}${o.split ? ", split api/worker processes" : ""}`,
  );

  const adminToken = `bench-admin-${randomBytes(8).toString("hex")}`;
  const keys = createKeys(KEY_PREFIX);
  /** A worker-only process is ready once its fan-out consumer (named `<pid>-...`) reads the outbox. */
  const workerReady = async (pid: number) => {
    const consumers = (await redis.xinfo("CONSUMERS", keys.shardOutbox(0), FANOUT_GROUP)) as string[][];
    return consumers.some((c) => String(c[1]).startsWith(`${pid}-`));
  };
  let key = "";
  let dep: Deployment | undefined;
  let settled = false;
  let runtimeCtx: RuntimeContext | undefined;
  let peakRssKb: Record<string, number | undefined> | undefined;
  let deliveryQueue: Queue | undefined;

  const ctx: BenchContext = {
    settings: S,
    split: o.split,
    latencyRuns: o.latencyRuns,
    trace: o.trace,
    redisServer,
    redis,
    keys,
    receiver,
    get key() {
      return key;
    },
    log,
    cleanups,
    async deploy(env) {
      const d = await startDeployment({
        redisUrl: redisServer.url,
        adminToken,
        split: o.split,
        workerReady,
        env: { ...RUNTIME_DAEMON_ENV, ...env },
      });
      cleanups.push(() => d.stop());
      dep = d;
      settled = false;
      runtimeCtx = undefined;
      return d;
    },
    async deployment() {
      const d = dep ?? (await ctx.deploy());
      if (!settled) {
        await ctx.quiesce("before ingest");
        settled = true;
      }
      return d;
    },
    get dep() {
      if (!dep) throw new Error("no deployment runs");
      return dep;
    },
    async quiesce(label) {
      const dm = ctx.dep;
      if (!dm.hasWorker) return; // nothing drains the outbox (BENCH_DAEMON_ENV=ROLES=api)
      if (!deliveryQueue) {
        const q = new Queue("delivery", { connection: redis, prefix: keys.queuePrefix("delivery") });
        cleanups.push(() => q.close());
        deliveryQueue = q;
      }
      const start = performance.now();
      for (;;) {
        dm.ensureAlive();
        const outbox = await outboxLength(redis, keys);
        const c = await deliveryQueue.getJobCounts("wait", "active", "delayed", "prioritized");
        const busy = (c.wait ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0);
        if (outbox === 0 && busy === 0) break;
        if (performance.now() - start > 90_000) throw new Error(`${label}: daemon still busy after 90 s (outbox ${outbox}, jobs ${busy})`);
        await sleep(100);
      }
      log(`  ${label}: quiet after ${fmt(performance.now() - start)} ms`);
    },
    meter: () => startMeter({ ...ctx.dep.pids, redis: redisServer.pid, bench: process.pid }, redis),
    runtime() {
      const dm = ctx.dep;
      runtimeCtx ??= {
        url: dm.url,
        key: ctx.key,
        redis,
        queuePrefix: keys.queuePrefix,
        queuedRuns: async () => (await new RunStream(redis, keys, 1).stats()).length,
        metricsSeeWorker: !o.split && dm.hasWorker,
        connections: S.connections,
        durationS: S.runtime.durationS,
        warmupS: S.warmupS,
        ensureAlive: () => dm.ensureAlive(),
        log,
      };
      return runtimeCtx;
    },
    async stopDeployment() {
      if (!dep) return;
      const d = dep;
      dep = undefined;
      runtimeCtx = undefined;
      // The largest of each process over the deployments (the relay phase runs one of its own).
      const peak: Record<string, number | undefined> = { ...peakRssKb };
      for (const [n, kb] of Object.entries(d.peakRssKb())) peak[n] = Math.max(kb ?? 0, peak[n] ?? 0) || undefined;
      peakRssKb = peak;
      await d.stop();
    },
    get peakRssKb() {
      return peakRssKb;
    },
  };

  // ---- Tributary set-up. With the drain phase, an API-only daemon (no workers) takes the backlog first. ----
  if (tributary) {
    let setupUrl: string;
    let apiOnly: DaemonProcess | undefined;
    if (needs.has("backlog")) {
      apiOnly = await startDaemonProcess({ redisUrl: redisServer.url, adminToken, roles: "api" }, "daemon(api, pre-load)");
      const a = apiOnly;
      cleanups.push(() => a.stop());
      setupUrl = a.url;
    } else {
      setupUrl = (await ctx.deploy()).url;
    }
    key = await createPaidUser(setupUrl, adminToken, "bench");
    const hook = await apiData<{ id: string }>(setupUrl, key, "POST", "/v1/webhooks", { url: receiver.url, name: "bench" }, 200);
    for (const emitter of [DRAIN_WORKFLOW, LATENCY_WORKFLOW]) {
      await apiData(setupUrl, key, "POST", "/v1/subscriptions", { emitter_id: emitter, listener_id: hook.id }, 200);
    }
    if (apiOnly) {
      await preloadBacklog({ url: setupUrl, key, redis, keys, log }, DRAIN_WORKFLOW, S.backlog);
      await apiOnly.stop();
    }
  }
  return ctx;
}

/** Posts `n` small events (seq 0..n-1) to `workflow` in batches of 500, four at a time. */
export async function postSmallEvents(o: { url: string; key: string }, workflow: string, n: number): Promise<void> {
  const chunk = 500;
  for (let i = 0; i < n; i += chunk * 4) {
    await Promise.all(
      [0, 1, 2, 3].map(async (j) => {
        const from = i + j * chunk;
        const to = Math.min(n, from + chunk);
        if (from >= to) return;
        const events = [];
        for (let s = from; s < to; s++) events.push({ event: smallEvent(s) });
        await apiData(o.url, o.key, "POST", `/v1/workflows/${workflow}/events`, { events }, 202);
      }),
    );
  }
}

/** Posts `n` small events to `workflow` (postSmallEvents); checks the outbox then holds `n`. */
export async function preloadBacklog(
  o: { url: string; key: string; redis: Redis; keys: Keys; log: (msg: string) => void },
  workflow: string,
  n: number,
): Promise<void> {
  o.log(`pre-loading ${n} events into ${workflow} (API-only daemon)`);
  const preloadStart = performance.now();
  await postSmallEvents(o, workflow, n);
  const outboxLen = await outboxLength(o.redis, o.keys);
  o.log(`  pre-loaded in ${fmt(performance.now() - preloadStart)} ms; outbox holds ${outboxLen}`);
  if (outboxLen !== n) throw new Error(`outbox holds ${outboxLen} entries, expected ${n}: did the key layout change?`);
}
