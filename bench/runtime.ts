/**
 * Source-runtime phases of the bench (issue 4): HTTP sources (queued runs and inline custom
 * responses), sandbox run overhead (in a child process: isolated-vm needs --no-node-snapshot) and
 * timer lag. Each works against a running deployment through its API, /metrics and Redis.
 */
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { QUEUES } from "../src/queue/catalog.js";
import { DEFAULT_INLINE_RUNS_PER_SOURCE } from "../src/runtime/source-requests.js";
import { schedulerId } from "../src/runtime/timers.js";
import type { Keys } from "../src/store/keys.js";
import { spawnNode } from "./child.js";
import { api, apiData } from "./daemon-process.js";
import { hammerStatus, type StatusLoopResult, smallEvent } from "./load.js";
import { sleep, type Summary, summarize } from "./stats.js";

/** Daemon settings the runtime phases need (merged into the deployment's environment). */
export const RUNTIME_DAEMON_ENV = {
  // The per-source token bucket (default 10/s) would otherwise be all the HTTP phase measures.
  // 100,000 is the largest value the config schema accepts.
  SOURCE_HTTP_RATE_PER_SECOND: "100000",
  TIMER_MIN_INTERVAL_SECONDS: "1",
  // The live-tail phase opens more streams for its one user than the default limit (20) allows.
  SSE_MAX_STREAMS_PER_USER: "0",
};

/** A trivial HTTP source: each request (queued run) emits its body. */
export const QUEUED_COMPONENT = `module.exports = {
  name: "Bench HTTP",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(e) { this.$emit(e.body); },
};`;

const INLINE_COMPONENT = `module.exports = {
  name: "Bench HTTP inline",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(e) { this.http.respond({ status: 200, body: "ok" }); },
};`;

const TIMER_COMPONENT = `module.exports = {
  name: "Bench timer",
  version: "0.0.1",
  props: { timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
  async run(event) { this.$emit({ at: Date.now(), timestamp: event.timestamp }); },
};`;

// ---- /metrics helpers ----

type Labels = Record<string, string>;

function* samples(text: string, metric: string): Generator<{ labels: Labels; value: number }> {
  for (const line of text.split("\n")) {
    if (!line.startsWith(metric)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== metric) continue;
    const labels: Labels = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] as string] = l[2] as string;
    yield { labels, value: Number(m[3]) };
  }
}

const matches = (labels: Labels, want: Labels) => Object.entries(want).every(([k, v]) => labels[k] === v);

/** Sum of the samples of `metric` whose labels include `want`. */
export function metricValue(text: string, metric: string, want: Labels = {}): number {
  let sum = 0;
  for (const s of samples(text, metric)) if (matches(s.labels, want)) sum += s.value;
  return sum;
}

/** Cumulative bucket counts of a histogram, by upper bound (Infinity for +Inf). */
export function histogramBuckets(text: string, metric: string, want: Labels = {}): Map<number, number> {
  const out = new Map<number, number>();
  for (const s of samples(text, `${metric}_bucket`)) {
    if (!matches(s.labels, want) || s.labels.le === undefined) continue;
    const le = s.labels.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(s.labels.le);
    out.set(le, (out.get(le) ?? 0) + s.value);
  }
  return out;
}

export interface HistogramDelta {
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
}

/**
 * p50/p99 of what a histogram observed between two scrapes, interpolated linearly inside the
 * bucket as Prometheus' histogram_quantile does (so no finer than the bucket layout).
 */
export function histogramDelta(before: Map<number, number>, after: Map<number, number>): HistogramDelta {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const cum = bounds.map((b) => (after.get(b) ?? 0) - (before.get(b) ?? 0));
  const count = cum[cum.length - 1] ?? 0;
  const quantile = (q: number) => {
    if (count === 0) return Number.NaN;
    const rank = q * count;
    for (let i = 0; i < bounds.length; i++) {
      const c = cum[i] as number;
      if (c < rank) continue;
      const upper = bounds[i] as number;
      const lower = i === 0 ? 0 : (bounds[i - 1] as number);
      if (!Number.isFinite(upper)) return lower; // beyond the largest bucket: its bound is all we know
      const prev = i === 0 ? 0 : (cum[i - 1] as number);
      return c === prev ? upper : lower + ((upper - lower) * (rank - prev)) / (c - prev);
    }
    return Number.NaN;
  };
  return { count, p50: quantile(0.5), p99: quantile(0.99) };
}

export async function scrape(url: string): Promise<string> {
  const res = await fetch(`${url}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET /metrics: ${res.status}`);
  return text;
}

// ---- phases ----

export interface RuntimeContext {
  /** The API origin. */
  readonly url: string;
  /** A user API key. */
  readonly key: string;
  readonly redis: Redis;
  /** BullMQ prefix of a queue (each queue has its own tag). */
  readonly queuePrefix: Keys["queuePrefix"];
  /** Queued runs not yet settled: entries of the run streams (read or not) and parked runs. */
  readonly queuedRuns: () => Promise<number>;
  /** Whether /metrics at `url` is the worker's too (one daemon process), so it counts runs. */
  readonly metricsSeeWorker: boolean;
  readonly connections: number;
  readonly durationS: number;
  readonly warmupS: number;
  ensureAlive(): void;
  log(msg: string): void;
}

export async function createSource(
  c: RuntimeContext,
  name: string,
  code: string,
  props: Record<string, unknown> = {},
): Promise<{ id: string; configured_props: Record<string, unknown> }> {
  return apiData(c.url, c.key, "POST", "/v1/sources", { name, component_code: code, configured_props: props }, 200);
}

export async function deleteSource(c: RuntimeContext, id: string): Promise<void> {
  const r = await api(c.url, c.key, "DELETE", `/v1/sources/${id}`);
  if (r.status >= 300) c.log(`  note: DELETE /v1/sources/${id} answered ${r.status}`);
}

export const endpointOf = (s: { configured_props: Record<string, unknown> }) => {
  const url = (s.configured_props.http as { endpoint_url?: unknown } | undefined)?.endpoint_url;
  if (typeof url !== "string") throw new Error(`source has no configured_props.http.endpoint_url: ${JSON.stringify(s.configured_props)}`);
  return url;
};

export interface SourceHttpResult {
  readonly load: StatusLoopResult;
  /** Runs the workers finished between the load's start and the end of the drain (or the deadline). */
  readonly runs: number;
  /** runs / (load + drain) seconds: the workers were busy all along. */
  readonly runsPerSec: number;
  /** Runs/s while the endpoint was under load (API and workers share the machine). */
  readonly runsPerSecUnderLoad: number;
  /** Runs/s after the load stopped (workers alone on the backlog), NaN when nothing was left. */
  readonly runsPerSecDraining: number;
  readonly backlogAtLoadEnd: number;
  readonly drainS: number;
  readonly complete: boolean;
  /** Runs that ended in an error or time-out (should be 0). */
  readonly runErrors: number;
  readonly countedBy: "metrics" | "queue";
  /** Daemon-side sandbox time of those runs (tributary_sandbox_run_duration_seconds, whole ms). */
  readonly sandboxHist?: HistogramDelta;
  readonly concurrency: number;
}

/**
 * (1) A trivial HTTP source under closed-loop load: the endpoint queues a run per request and
 * answers 200 {"success":true}; the workers then run them. Reports the endpoint's answers and how
 * fast the workers completed runs, waiting (bounded) for the backlog to drain.
 */
export async function sourceHttpPhase(c: RuntimeContext, drainDeadlineMs: number, concurrency: number): Promise<SourceHttpResult> {
  const queue = new Queue(QUEUES.sourceRun, { connection: c.redis, prefix: c.queuePrefix("source-run") });
  const source = await createSource(c, "bench-http", QUEUED_COMPONENT);
  const queuedRuns = c.queuedRuns;
  try {
    const url = endpointOf(source);
    const body = JSON.stringify(smallEvent(1));
    // Runs queued: run stream entries not yet settled, parked runs, and jobs (of earlier versions).
    const pending = async () => {
      const n = await queue.getJobCounts("wait", "active", "delayed", "prioritized", "waiting-children");
      return Object.values(n).reduce((a, b) => a + (b ?? 0), 0) + (await queuedRuns());
    };
    const failedNow = async () => (await queue.getJobCounts("failed")).failed ?? 0;
    // Warm-up: compiles the component and warms the isolates, then let it drain.
    for (let i = 0; i < 20; i++) {
      const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`HTTP source endpoint answered ${r.status} during warm-up`);
    }
    for (const start = performance.now(); (await pending()) > 0; await sleep(50)) {
      if (performance.now() - start > 15_000) throw new Error("HTTP source warm-up runs did not finish within 15 s");
    }

    const runsOk = async () =>
      c.metricsSeeWorker ? metricValue(await scrape(c.url), "tributary_source_runs_total", { trigger: "http", outcome: "ok" }) : 0;
    const before = c.metricsSeeWorker ? await scrape(c.url) : "";
    const failedBefore = await failedNow();
    const okBefore = metricValue(before, "tributary_source_runs_total", { trigger: "http", outcome: "ok" });
    const t0 = performance.now();
    const load = await hammerStatus({ url, body, durationS: c.durationS, connections: c.connections, expect: 200 });
    const tLoad = performance.now();
    const backlogAtLoadEnd = await pending();
    // Runs done so far: by the counter, or (split processes, no worker metrics) accepted minus pending.
    const doneAt = async (p: number) => (c.metricsSeeWorker ? (await runsOk()) - okBefore : load.ok - p);
    const doneAtLoad = await doneAt(backlogAtLoadEnd);
    c.log(`  ${load.ok} requests accepted; ${backlogAtLoadEnd} runs still queued; draining (deadline ${drainDeadlineMs / 1000} s)`);
    let left = backlogAtLoadEnd;
    while (left > 0 && performance.now() - tLoad < drainDeadlineMs) {
      c.ensureAlive();
      await sleep(100);
      left = await pending();
    }
    const tEnd = performance.now();
    const done = await doneAt(left);
    const after = c.metricsSeeWorker ? await scrape(c.url) : "";
    // Runs that did not end "ok" (error, timeout, skipped): every http run minus the ok ones.
    const allRuns = (text: string) => metricValue(text, "tributary_source_runs_total", { trigger: "http" });
    const runErrors = c.metricsSeeWorker ? allRuns(after) - allRuns(before) - done : (await failedNow()) - failedBefore;
    const drainS = (tEnd - tLoad) / 1000;
    return {
      load,
      runs: done,
      runsPerSec: done / ((tEnd - t0) / 1000),
      runsPerSecUnderLoad: doneAtLoad / ((tLoad - t0) / 1000),
      runsPerSecDraining: drainS > 0.2 ? (done - doneAtLoad) / drainS : Number.NaN,
      backlogAtLoadEnd,
      drainS,
      complete: left === 0,
      runErrors,
      countedBy: c.metricsSeeWorker ? "metrics" : "queue",
      ...(c.metricsSeeWorker
        ? {
            sandboxHist: histogramDelta(
              histogramBuckets(before, "tributary_sandbox_run_duration_seconds", { trigger: "http" }),
              histogramBuckets(after, "tributary_sandbox_run_duration_seconds", { trigger: "http" }),
            ),
          }
        : {}),
      concurrency,
    };
  } finally {
    // Deleting the source turns any queued leftovers into quick no-op runs; then wait for them.
    await deleteSource(c, source.id).catch(() => {});
    for (const start = performance.now(); performance.now() - start < 30_000; await sleep(100)) {
      const n = await queue.getJobCounts("wait", "active", "delayed", "prioritized").catch(() => ({}) as Record<string, number>);
      const inStream = await queuedRuns().catch(() => 0);
      if (Object.values(n).reduce((a, b) => a + (b ?? 0), 0) + inStream === 0) break;
    }
    await queue.close();
  }
}

export interface InlineResult {
  readonly load: StatusLoopResult;
  readonly connections: number;
}

/**
 * (1b) An HTTP source with a custom response: each request runs the component inline (in the API
 * process) and answers with its `this.http.respond()`. A source allows SOURCE_INLINE_CONCURRENCY
 * such runs at once (its default unless BENCH_DAEMON_ENV sets it), so the load uses that many
 * connections; refused requests (429) are counted.
 */
export async function sourceInlinePhase(c: RuntimeContext): Promise<InlineResult> {
  const source = await createSource(c, "bench-http-inline", INLINE_COMPONENT);
  try {
    const url = endpointOf(source);
    const body = JSON.stringify(smallEvent(1));
    const connections = Number(
      /(?:^|,)SOURCE_INLINE_CONCURRENCY=(\d+)/.exec(process.env.BENCH_DAEMON_ENV ?? "")?.[1] ?? DEFAULT_INLINE_RUNS_PER_SOURCE,
    );
    if (c.warmupS > 0) await hammerStatus({ url, body, durationS: Math.min(c.warmupS, 1), connections, expect: 200 });
    const load = await hammerStatus({ url, body, durationS: c.durationS, connections, expect: 200 });
    c.ensureAlive();
    return { load, connections };
  } finally {
    await deleteSource(c, source.id).catch(() => {});
  }
}

export interface TimerResult {
  readonly ticks: number;
  readonly expectedTicks: number;
  readonly durationS: number;
  /** Scheduled slot → the component's Date.now(), ms (includes job pick-up, source load and isolate set-up). */
  readonly toRun: Summary;
  /** The daemon's tributary_timer_lag_seconds over the phase (scheduled → worker picks the job), ms; bucket-interpolated. */
  readonly hist?: HistogramDelta;
}

/**
 * (3) Timer lag: a 1 s interval timer source ticks for `durationS`. Each tick emits the time its
 * code ran; the scheduled slots come from the BullMQ job scheduler (next run − k × interval).
 */
export async function timerPhase(c: RuntimeContext, durationS: number): Promise<TimerResult> {
  const timers = new Queue(QUEUES.timers, { connection: c.redis, prefix: c.queuePrefix("timers") });
  const before = c.metricsSeeWorker ? await scrape(c.url) : "";
  const source = await createSource(c, "bench-timer", TIMER_COMPONENT, { timer: { intervalSeconds: 1 } });
  try {
    const started = performance.now();
    // The scheduler role picks up the source asynchronously; find its schedule.
    let schedule: { next: number; every: number } | undefined;
    while (!schedule && performance.now() - started < 10_000) {
      const s = await timers.getJobScheduler(schedulerId(source.id));
      if (s?.next !== undefined && s.every !== undefined && s.every !== null) schedule = { next: Number(s.next), every: Number(s.every) };
      else await sleep(50);
    }
    if (!schedule) throw new Error("the timer source's job scheduler did not appear within 10 s");
    await sleep(durationS * 1000);
    c.ensureAlive();
    const after = c.metricsSeeWorker ? await scrape(c.url) : "";
    const s = await timers.getJobScheduler(schedulerId(source.id));
    const next = s?.next !== undefined ? Number(s.next) : schedule.next;
    const every = schedule.every;
    const page = await apiData<{ event: { at?: number } }[]>(
      c.url,
      c.key,
      "GET",
      `/v1/sources/${source.id}/event_summaries?limit=100&expand=event`,
      undefined,
      200,
    );
    /** The latest scheduled slot at or before `t`. */
    const slotOf = (t: number) => next - Math.ceil((next - t) / every) * every;
    const lags: number[] = [];
    for (const e of page) {
      const at = e.event?.at;
      if (typeof at === "number") lags.push(at - slotOf(at));
    }
    // Slots from the first tick seen to the last one that should have run 0.5 s ago.
    const firstSlot = Math.min(
      ...page
        .map((e) => e.event?.at)
        .filter((a): a is number => typeof a === "number")
        .map(slotOf),
    );
    const lastSlot = slotOf(Date.now() - 500);
    return {
      ticks: lags.length,
      expectedTicks: Number.isFinite(firstSlot) ? Math.max(0, Math.floor((lastSlot - firstSlot) / every) + 1) : Number.NaN,
      durationS,
      toRun: summarize(lags),
      ...(c.metricsSeeWorker
        ? {
            hist: histogramDelta(
              histogramBuckets(before, "tributary_timer_lag_seconds"),
              histogramBuckets(after, "tributary_timer_lag_seconds"),
            ),
          }
        : {}),
    };
  } finally {
    await deleteSource(c, source.id).catch(() => {});
    await timers.close();
  }
}

export interface SandboxResult extends Summary {
  readonly runs: number;
  readonly warmup: number;
  readonly wallMs: number;
  readonly cpuUsPerRun: number;
  /** The isolate's own CPU per warm run (the guest's share), and other processes' CPU meanwhile (% of one core). */
  readonly isolateCpuUsPerRun?: number;
  readonly otherPct?: number;
  /** Failed runs by error code (warm-up included), and the 1-based run index of the first of each. */
  readonly errors: Record<string, number>;
  readonly firstError: Record<string, number>;
  /** First runs of new sources of a warm user (a new context), and of new users (a new isolate too). */
  readonly coldSource?: Summary & { readonly cpuUsPerRun: number };
  readonly coldUser?: Summary & { readonly cpuUsPerRun: number };
  /** Live contexts of a few users (sandbox-child.ts memoryPhase); MiB unless named KiB. */
  readonly memory?: {
    readonly sources: number;
    readonly users: number;
    readonly rssBeforeMiB: number;
    readonly rssMiB: number;
    readonly rssTotalMiB: number;
    readonly rssPerIsolateMiB: number;
    readonly rssPerContextKiB: number;
    readonly isolateHeapUsedMiB: number;
  };
}

/** (2) Sandbox run overhead, timed directly around Sandbox.run in a child process. */
export async function sandboxPhase(runs: number, warmup: number): Promise<SandboxResult> {
  const child = spawnNode(
    "sandbox",
    ["--no-node-snapshot", "--expose-gc", "--import", "tsx"],
    "bench/sandbox-child.ts",
    [String(runs), String(warmup)],
    {},
  );
  try {
    const m = await child.waitForLine(/^RESULT (.*)$/, 120_000);
    return JSON.parse(m[1] as string) as SandboxResult;
  } finally {
    await child.stop(2000);
  }
}
