import type { BullLatencyResult, DrainResult } from "./baselines.js";
import type { CpuShares } from "./cpu.js";
import type { InterleavedIngest } from "./interleave.js";
import type { LiveTailResult } from "./live-tail.js";
import type { ClosedLoopResult } from "./load.js";
import type { Cost } from "./meter.js";
import type { RecoveryResult } from "./phases/recovery.js";
import type { RelayRun } from "./relay.js";
import type { HistogramDelta, InlineResult, SandboxResult, SourceHttpResult, TimerResult } from "./runtime.js";
import { fmt, median, type Summary } from "./stats.js";

export interface LatencyResult {
  readonly rate: number;
  readonly batch: number;
  readonly sent: number;
  readonly delivered: number;
  readonly e2e: Summary;
  readonly ack: Summary;
  readonly failures: number;
  readonly maxLagMs: number;
  readonly cost: Cost;
  /** Share of the run's deliveries whose first attempt went direct (undefined when /metrics cannot tell). */
  readonly directShare?: number;
}

/** Filtered subscriptions per event in the filters phase (bench/phases/filters.ts). */
export const FILTERED_SUBSCRIPTIONS = 10;

/** The filters phase: the same drain without and with filtered subscriptions. */
export interface FilterDrainResult {
  readonly plain: DrainResult;
  readonly filtered: DrainResult;
  /** tributary_deliveries_total{outcome="filtered"} after the filtered drain (undefined when /metrics cannot tell). */
  readonly filteredCount?: number;
}

/** The relay phase: the same load on three ingresses, delivered to one webhook (bench/relay.ts). */
export interface RelayResult {
  readonly single: RelayRun;
  readonly queued: RelayRun;
  readonly inline: RelayRun;
  /** How long the deliveries of a load could take after it stopped, s. */
  readonly deadlineS: number;
  /** SOURCE_INLINE_CONCURRENCY of the phase's deployment (its load's connections). */
  readonly inlineConcurrency: number;
}

/** Issue 12's target for HTTP-source relay, as a ratio of single-emit relay. */
export const RELAY_TARGET = 0.5;

/** One side of the cluster phase (bench/phases/cluster.ts): a one-process daemon on one Redis shape. */
export interface ClusterSide {
  /** Closed-loop single emits to a workflow nothing subscribes to (the `single` phase's load). */
  readonly ingest: ClosedLoopResult & { cost: Cost };
  /** Single emits relayed to the receiver (row 9's load), per delivered event. */
  readonly relay: RelayRun;
}

/** The cluster phase: the same daemon and loads on the single redis-server and on a local Redis Cluster. */
export interface ClusterResult {
  readonly masters: number;
  /** How long starting the local cluster took, s. */
  readonly clusterStartS: number;
  /** How long the relay's deliveries could take after its load stopped, s. */
  readonly deadlineS: number;
  /** BENCH_CLUSTER_ROUNDS: each load ran this many times on both sides. */
  readonly rounds: number;
  /** Daemon CPU per event, cluster ÷ one node, of each round, per load. */
  readonly cpuRatios: { readonly ingest: readonly number[]; readonly relay: readonly number[] };
  /** The figures of the round of the median ratio, per load. */
  readonly single: ClusterSide;
  readonly cluster: ClusterSide;
}

/** Issue 13's target (reported, not asserted): daemon CPU per event on a cluster ≤ this × on one node. */
export const CLUSTER_CPU_TARGET = 1.3;

export interface Results {
  settings: {
    durationS: number;
    warmupS: number;
    backlog: number;
    connections: number;
    latency: readonly { rate: number; batch: number }[];
    batchSize: number;
    deliveryConcurrency: number;
    runtime: {
      durationS: number;
      drainDeadlineS: number;
      sandboxRuns: number;
      sandboxWarmup: number;
      timerS: number;
      sourceRunConcurrency: number;
    };
  };
  /** The daemon ran as an api process plus a worker process. */
  split: boolean;
  koa?: ClosedLoopResult & { cost: Cost };
  /** Koa + @koa/router + bodyparser with one Redis EVALSHA per request (the ingest target). */
  koaRedis?: ClosedLoopResult & { cost: Cost };
  bull?: DrainResult;
  /** Plain BullMQ at the judged latency rate (Queue.add -> worker -> undici). */
  bullLatency?: BullLatencyResult;
  drain?: DrainResult;
  filterDrain?: FilterDrainResult;
  recovery?: RecoveryResult;
  single?: ClosedLoopResult & { cost: Cost };
  /** Row 1 interleaved with Koa + EVALSHA (the `interleaved` phase): its verdict when present. */
  interleaved?: InterleavedIngest;
  batch?: ClosedLoopResult & { cost: Cost };
  latency: LatencyResult[];
  peakRssKb?: Record<string, number | undefined>;
  timer?: TimerResult;
  liveTail?: LiveTailResult & { cost: Cost };
  srcInline?: InlineResult & { cost: Cost };
  srcHttp?: SourceHttpResult & { cost: Cost };
  relay?: RelayResult;
  sandbox?: SandboxResult;
  cluster?: ClusterResult;
}

const verdict = (ok: boolean | undefined) => (ok === undefined ? "not run" : ok ? "✅ met" : "❌ missed");
/** CPU (% of one core) that unrelated processes used during a phase above which its timings are suspect. */
const NOISY_OTHER_PCT = 25;
const noise = (...costs: (Cost | undefined)[]) => Math.max(0, ...costs.map((c) => c?.pct.other ?? 0));
/** The verdict, flagged when background load makes the throughput comparison unreliable; `cpuOk` judges on CPU cost instead. */
const judged = (ok: boolean | undefined, other: number, cpu?: { ok: boolean; ratio: number }) => {
  if (ok === undefined || other <= NOISY_OTHER_PCT) return verdict(ok);
  const byCpu = cpu && Number.isFinite(cpu.ratio) ? `; by CPU cost per unit ${fmt(cpu.ratio, 2)}×: ${verdict(cpu.ok)}` : "";
  return `⚠️ unreliable: other processes took ${Math.round(other)} % CPU (throughput says ${verdict(ok)}${byCpu})`;
};
const ratio = (a: number | undefined, b: number | undefined) => (a !== undefined && b !== undefined && b > 0 ? a / b : Number.NaN);
const errs = (r: ClosedLoopResult) => (r.bad ? ` · ${fmt(r.bad)} errors/non-2xx` : "");
const closed = (r: ClosedLoopResult | undefined) =>
  r ? `${fmt(r.reqPerSec)} req/s · p50 ${fmt(r.p50)} ms · p99 ${fmt(r.p99)} ms${errs(r)}` : "not run";
const pct = (s: CpuShares | undefined) =>
  s
    ? Object.entries(s)
        .map(([k, v]) => `${k} ${Math.round(v)}`)
        .join(" · ")
    : "—";
/** "450 µs daemon + 60 µs redis CPU, 9.0 Redis cmds per emit" (every measured process but the bench's) */
const unitCost = (c: Cost | undefined, unit: string) => {
  if (!c) return "";
  const keys = Object.keys(c.usPerUnit).filter((k) => k !== "bench" && k !== "redis");
  const cpu = [...keys, "redis"]
    .filter((k) => c.usPerUnit[k] !== undefined)
    .map((k) => `${fmt(c.usPerUnit[k] as number)} µs ${k}`)
    .join(" + ");
  const cmds = Number.isNaN(c.redisPerUnit) || c.redisPerUnit === 0 ? "" : `, ${fmt(c.redisPerUnit, 1)} Redis cmds`;
  return ` · **${cpu} CPU${cmds} per ${unit}**`;
};
const drained = (d: DrainResult | undefined) =>
  d
    ? `${fmt(d.perSec)} deliveries/s (${fmt(d.delivered)}/${fmt(d.expected)} in ${fmt(d.spanMs / 1000, 1)} s${d.complete ? "" : ", DEADLINE HIT"}${d.duplicates ? `, ${d.duplicates} duplicates` : ""})${unitCost(d.cost, "delivery")}${d.detail ? `; ${d.detail}` : ""}`
    : "not run";
/** "p50 1.2 ms · p99 4.8 ms (n runs)" from a histogram given in seconds. */
const hist = (h: HistogramDelta | undefined, unit: string) =>
  h && h.count > 0
    ? `p50 ${fmt(h.p50 * 1000, 1)} ms · p99 ${fmt(h.p99 * 1000, 1)} ms (${fmt(h.count)} ${unit}, bucket-interpolated)`
    : "n/a";
const statuses = (s: Record<string, number>) =>
  Object.entries(s)
    .map(([code, n]) => `${code === "0" ? "errors" : code} × ${fmt(n)}`)
    .join(", ");
const top = (c: Cost | undefined) => (c ? c.redisTop.map(([cmd, n]) => `${cmd} ${fmt(n, 2)}`).join(", ") : "n/a");

/** The plain-BullMQ reference for a latency row at its rate (single emits only). */
const bullAt = (l: LatencyResult, b?: BullLatencyResult) =>
  b && b.rate === l.rate && l.batch === 1
    ? `; **plain BullMQ at ${fmt(b.rate)} jobs/s** (Queue.add one by one → worker → undici, no ingest or fan-out): p50 ${fmt(b.e2e.p50, 1)} ms · p99 ${fmt(b.e2e.p99, 1)} ms (${fmt(b.delivered)}/${fmt(b.sent)})${unitCost(b.cost, "job")}`
    : "";

/** Prints the one markdown table (and the settings and Redis-command details) to stdout. */
export function printReport(r: Results, meta: { title: string; totalS: number }): void {
  const S = r.settings;
  const ingestRatio = ratio(r.single?.reqPerSec, r.koaRedis?.reqPerSec);
  const bareKoaRatio = ratio(r.single?.reqPerSec, r.koa?.reqPerSec);
  const daemonUs = (c: Cost | undefined) =>
    c ? (c.usPerUnit.daemon ?? 0) + (c.usPerUnit.api ?? 0) + (c.usPerUnit.worker ?? 0) : undefined;
  const ingestCpuRatio = ratio(r.koaRedis?.cost.usPerUnit.koa, daemonUs(r.single?.cost));
  const drainRatio = ratio(r.drain?.perSec, r.bull?.perSec);
  const drainCpuRatio = ratio(r.bull?.cost?.usPerUnit.worker, daemonUs(r.drain?.cost));
  // What plain BullMQ itself would score against its worker-only figure if the job creation it
  // does before the timed window were counted, as Tributary's fan-out is: the ceiling of any
  // design that creates one BullMQ job per delivery (Tributary makes first attempts directly, with
  // no job, so it is not bound by it).
  const bullWorkerUs = r.bull?.cost?.usPerUnit.worker;
  const bullCeiling =
    bullWorkerUs !== undefined && r.bull?.producerUsPerJob !== undefined
      ? ratio(bullWorkerUs, bullWorkerUs + r.bull.producerUsPerJob)
      : Number.NaN;
  const rows: string[][] = [];
  // Row 1's verdict: the median of per-round ratios when the `interleaved` phase ran (one slice
  // per arm leaves the ratio to whichever arm met the host's slower minute), else the one slice.
  const il = r.interleaved;
  const ilRatio = il ? median(il.ratios) : Number.NaN;
  const ilCpuRatio = il ? median(il.cpuRatios) : Number.NaN;
  const judgedRatio = il ? ilRatio : ingestRatio;
  const judgedCpuRatio = il ? ilCpuRatio : ingestCpuRatio;
  const interleavedNote = il
    ? `; **interleaved** (${il.rounds} rounds of ${il.sliceS} s per arm, order rotating): median **${fmt(ilRatio, 2)}×** req/s (range ${fmt(Math.min(...il.ratios), 2)}–${fmt(Math.max(...il.ratios), 2)}), CPU/req ${fmt(ilCpuRatio, 2)}× (Tributary ${fmt(median(il.daemon.us))} µs, Koa + EVALSHA ${fmt(median(il.baseline.us))} µs)`
    : "";
  rows.push([
    "1. Emit ingest, single event",
    `${closed(r.single)}${unitCost(r.single?.cost, "emit")}`,
    `Koa + @koa/router + bodyparser + one EVALSHA per request: ${closed(r.koaRedis)}${unitCost(r.koaRedis?.cost, "request")}; bare Koa (no router, no Redis): ${closed(r.koa)}${unitCost(r.koa?.cost, "request")} (Tributary = ${fmt(bareKoaRatio, 2)}× of bare Koa)`,
    `${il ? "one slice each: " : ""}**${fmt(ingestRatio, 2)}×** (CPU/req: ${fmt(ingestCpuRatio, 2)}×)${interleavedNote}`,
    `≥ 0.9× Koa + EVALSHA${il ? " (interleaved median)" : ""}`,
    judged(Number.isNaN(judgedRatio) ? undefined : judgedRatio >= 0.9, il ? il.otherMedianPct : noise(r.single?.cost, r.koaRedis?.cost), {
      ok: judgedCpuRatio >= 0.9,
      ratio: judgedCpuRatio,
    }),
    `${pct(r.single?.cost.pct)}; Koa + EVALSHA: ${pct(r.koaRedis?.cost.pct)}; bare Koa: ${pct(r.koa?.cost.pct)}${il ? `; interleaved: other ${Math.round(il.otherMedianPct)} (median of its slices; peak ${Math.round(il.otherPeakPct)})` : ""}`,
  ]);
  rows.push([
    `2. Emit ingest, batch of ${S.batchSize}`,
    r.batch ? `${closed(r.batch)} = **${fmt(r.batch.reqPerSec * S.batchSize)} events/s**${unitCost(r.batch.cost, "event")}` : "not run",
    "—",
    `${fmt(ratio(r.batch ? r.batch.reqPerSec * S.batchSize : undefined, r.single?.reqPerSec), 1)}× single (events/s)`,
    "—",
    "—",
    pct(r.batch?.cost.pct),
  ]);
  rows.push([
    `3. Draining a ${fmt(S.backlog)}-event backlog`,
    drained(r.drain),
    `plain BullMQ: ${drained(r.bull)}`,
    `**${fmt(drainRatio, 2)}×** (CPU/delivery: ${fmt(drainCpuRatio, 2)}×; plain BullMQ with its job creation counted: ${fmt(bullCeiling, 2)}×)`,
    "≥ 0.8× plain BullMQ",
    judged(Number.isNaN(drainRatio) ? undefined : drainRatio >= 0.8 && r.drain?.complete === true, noise(r.drain?.cost, r.bull?.cost), {
      ok: drainCpuRatio >= 0.8,
      ratio: drainCpuRatio,
    }),
    `${pct(r.drain?.cost?.pct)}; BullMQ: ${pct(r.bull?.cost?.pct)}`,
  ]);
  if (r.filterDrain) {
    const f = r.filterDrain;
    const filterRatio = ratio(f.filtered.perSec, f.plain.perSec);
    const filterCpuRatio = ratio(daemonUs(f.plain.cost), daemonUs(f.filtered.cost));
    const counted = f.filteredCount === undefined ? "" : `; ${fmt(f.filteredCount)} counted filtered`;
    rows.push([
      `3b. Draining with ${FILTERED_SUBSCRIPTIONS} filtered subscriptions per event`,
      `${drained(f.filtered)}${counted}`,
      `the same drain without filters: ${drained(f.plain)}`,
      `**${fmt(filterRatio, 2)}×** (CPU/delivery: ${fmt(filterCpuRatio, 2)}×)`,
      "≥ 0.9× without filters",
      judged(
        Number.isNaN(filterRatio) ? undefined : filterRatio >= 0.9 && f.filtered.complete && f.plain.complete,
        noise(f.filtered.cost, f.plain.cost),
        { ok: filterCpuRatio >= 0.9, ratio: filterCpuRatio },
      ),
      `${pct(f.filtered.cost?.pct)}; without: ${pct(f.plain.cost?.pct)}`,
    ]);
  }
  if (r.recovery) {
    const v = r.recovery;
    const recoveryUs = daemonUs(v.cost) ?? Number.NaN;
    const freshUs = daemonUs(r.drain?.cost);
    const cpuRatio = ratio(recoveryUs + (v.cost.usPerUnit.redis ?? 0), (freshUs ?? Number.NaN) + (r.drain?.cost?.usPerUnit.redis ?? 0));
    const steady = ratio(v.lastFifthPerSec, v.firstFifthPerSec);
    rows.push([
      `3c. Recovery: ${fmt(v.n)} deliveries, receiver down then back`,
      `**${fmt(v.perSec)} deliveries/s** (${fmt(v.delivered)}/${fmt(v.n)}${v.complete ? "" : ", DEADLINE HIT"}; first fifth ${fmt(v.firstFifthPerSec)}/s, last fifth ${fmt(v.lastFifthPerSec)}/s)${unitCost(v.cost, "delivery")}; **${fmt(v.bytesPerPending)} B of Redis per pending delivery**; Redis time per delivery: ${v.redisTime.map(([c, us]) => `${c} ${fmt(us, 1)} µs`).join(", ")}`,
      `the fresh drain (row 3): ${r.drain ? `${fmt(r.drain.perSec)} deliveries/s${unitCost(r.drain.cost, "delivery")}` : "not run"}`,
      `CPU/delivery (daemon + Redis) **${fmt(cpuRatio, 2)}×** the fresh drain; last fifth ÷ first fifth ${fmt(steady, 2)}×`,
      "≤ 2× the fresh drain's CPU per delivery; rate independent of the backlog",
      judged(Number.isNaN(cpuRatio) ? undefined : cpuRatio <= 2 && v.complete && steady < 1.5, noise(v.cost)),
      pct(v.cost.pct),
    ]);
  }
  for (const l of r.latency) {
    const complete = l.delivered === l.sent;
    rows.push([
      `4. Emit→delivered at ${fmt(l.rate)} events/s, ${l.batch === 1 ? "single emits" : `${l.batch} events per request`}`,
      `p50 ${fmt(l.e2e.p50, 1)} ms · p99 ${fmt(l.e2e.p99, 1)} ms · max ${fmt(l.e2e.max, 1)} ms (${fmt(l.delivered)}/${fmt(l.sent)} delivered${l.failures ? `, ${l.failures} emit failures` : ""}${l.directShare === undefined ? "" : `; ${fmt(l.directShare * 100, 1)} % of first attempts direct, the rest queued`})`,
      `emit→202: p50 ${fmt(l.ack.p50, 1)} ms · p99 ${fmt(l.ack.p99, 1)} ms${unitCost(l.cost, "event, emit + delivery")} → the daemon alone needs ≈${fmt(((daemonUs(l.cost) ?? 0) * l.rate) / 10_000)} % of one core at this rate${bullAt(l, r.bullLatency)}`,
      "—",
      l.rate === 1000 && l.batch === 1 ? "p99 < 50 ms" : "(info)",
      l.rate === 1000 && l.batch === 1
        ? judged(l.e2e.p99 < 50 && complete, noise(l.cost))
        : complete
          ? `${l.e2e.p99 < 50 ? "under" : "over"} 50 ms`
          : "incomplete",
      pct(l.cost.pct),
    ]);
  }
  const R = S.runtime;
  const sh = r.srcHttp;
  rows.push([
    "5. HTTP source, queued runs (trivial `$emit(e.body)` component)",
    sh
      ? `${closed(sh.load)} (200 {"success":true}) · workers completed **${fmt(sh.runsPerSec)} runs/s** (${fmt(sh.runs)} runs in ${fmt(sh.load.durationS + sh.drainS, 1)} s${sh.complete ? "" : `, DEADLINE HIT with runs still queued`}${sh.runErrors ? `, ${fmt(sh.runErrors)} not ok` : ""})${unitCost(sh.cost, "run, request + run")}`
      : "not run",
    sh
      ? `${fmt(sh.runsPerSecUnderLoad)} runs/s during the load, ${fmt(sh.runsPerSecDraining)} runs/s draining the ${fmt(sh.backlogAtLoadEnd)} runs queued at its end (${fmt(sh.drainS, 1)} s); SOURCE_RUN_CONCURRENCY ${sh.concurrency}; runs counted by ${sh.countedBy === "metrics" ? 'tributary_source_runs_total{trigger="http",outcome="ok"}' : "queued jobs finished (split processes: no worker /metrics)"}; daemon sandbox time per run ${hist(sh.sandboxHist, "runs")}`
      : "—",
    sh ? `runs/req accepted: ${fmt(ratio(sh.runsPerSec, sh.load.reqPerSec), 2)}×` : "—",
    "(info)",
    sh ? (sh.complete ? "drained" : "backlog left at deadline") : "—",
    pct(sh?.cost.pct),
  ]);
  const si = r.srcInline;
  rows.push([
    "5. HTTP source, custom response (inline run, `this.http.respond`)",
    si
      ? `${fmt(si.load.reqPerSec)} req/s · p50 ${fmt(si.load.p50, 1)} ms · p99 ${fmt(si.load.p99, 1)} ms (200 "ok" answers only)${unitCost(si.cost, "request")}`
      : "not run",
    si ? `${si.connections} connections (SOURCE_INLINE_CONCURRENCY); all answers: ${statuses(si.load.statuses)}` : "—",
    "—",
    "(info)",
    "—",
    pct(si?.cost.pct),
  ]);
  const sb = r.sandbox;
  rows.push([
    "6. Sandbox run overhead (trivial component, sequential `Sandbox.run`)",
    sb
      ? `p50 ${fmt(sb.p50, 3)} ms · p99 ${fmt(sb.p99, 3)} ms · mean ${fmt(sb.mean, 3)} ms · max ${fmt(sb.max, 1)} ms per run${Object.entries(
          sb.errors,
        )
          .map(([code, n]) => ` · **${fmt(n)} runs failed with ${code}** (first at run ${fmt(sb.firstError[code] ?? Number.NaN)})`)
          .join("")}`
      : "not run",
    sb
      ? `${fmt(sb.runs)} runs after ${fmt(sb.warmup)} warm-up, in-process timing (64 MB, 10 s limits) = ${fmt((sb.runs * 1000) / sb.wallMs)} runs/s on one thread, ${fmt(sb.cpuUsPerRun)} µs CPU per run; compare the daemon's own view in row 5`
      : "—",
    "—",
    "≤ 0.060 ms p50 and ≤ 130 µs CPU per warm run",
    sb
      ? Object.keys(sb.errors).length > 0
        ? "❌ runs failed"
        : sb.p50 <= 0.06 && sb.cpuUsPerRun <= 130
          ? "✅ met (every run ok)"
          : `missed (${sb.p50 > 0.06 ? "p50" : "CPU"}; every run ok)`
      : "—",
    sb?.otherPct !== undefined ? `other ${fmt(sb.otherPct, 0)}` : "—",
  ]);
  // Issue 12's cold target is on the first run of a new source of a user whose isolate is warm
  // (its context is created and the module evaluated); a new user's first run (a new isolate) is shown beside it.
  const cs = sb?.coldSource;
  const cu = sb?.coldUser;
  rows.push([
    "6a. Cold first run of a source (trivial component, a new context in its user's isolate)",
    cs
      ? `p50 ${fmt(cs.p50, 3)} ms · p99 ${fmt(cs.p99, 3)} ms · ${fmt(cs.cpuUsPerRun)} µs CPU per run (${fmt(cs.count)} sources)`
      : "not run",
    cu
      ? `first run of a new user (a new isolate too): p50 ${fmt(cu.p50, 3)} ms · p99 ${fmt(cu.p99, 3)} ms · ${fmt(cu.cpuUsPerRun)} µs CPU (${fmt(cu.count)} users)`
      : "—",
    "—",
    "≤ 2 ms p50",
    cs ? (cs.p50 <= 2 ? "✅ met" : "missed") : "—",
    sb?.otherPct !== undefined ? `other ${fmt(sb.otherPct, 0)}` : "—",
  ]);
  const mem = sb?.memory;
  rows.push([
    `6b. Sandbox memory: ${mem ? `${fmt(mem.sources)} live source contexts of ${fmt(mem.users)} users` : "live contexts"}`,
    mem
      ? `**${fmt(mem.rssTotalMiB, 0)} MiB RSS** for all of them (process ${fmt(mem.rssMiB, 0)} MiB, ${fmt(mem.rssBeforeMiB, 0)} MiB before) · ${fmt(mem.rssPerIsolateMiB, 2)} MiB per isolate (with its first context) · ${fmt(mem.rssPerContextKiB, 0)} KiB per further context`
      : "not run",
    mem ? `isolates' used heap ${fmt(mem.isolateHeapUsedMiB, 0)} MiB in all; RSS read after the host's GC` : "—",
    "—",
    "≤ 300 MB RSS (1,000 contexts of 10 users)",
    mem ? (mem.rssTotalMiB * 1.048576 <= 300 ? "within the target" : "over the target") : "—",
    "—",
  ]);
  const tm = r.timer;
  rows.push([
    `7. Timer lag (1 s interval, ${fmt(R.timerS)} s)`,
    tm
      ? `scheduled → component code running: p50 ${fmt(tm.toRun.p50, 1)} ms · p99 ${fmt(tm.toRun.p99, 1)} ms · max ${fmt(tm.toRun.max, 1)} ms (${tm.ticks}/${fmt(tm.expectedTicks)} ticks)`
      : "not run",
    tm ? `tributary_timer_lag_seconds (scheduled → worker picks the job): ${hist(tm.hist, "ticks")}` : "—",
    "—",
    "(info)",
    tm ? (tm.ticks >= tm.expectedTicks ? "no tick missed" : `${fmt(tm.expectedTicks - tm.ticks)} tick(s) missing`) : "—",
    "—",
  ]);
  const lt = r.liveTail;
  rows.push([
    `8. Live tail: ${lt ? fmt(lt.streams) : "100"} SSE streams on one workflow, single emits`,
    lt
      ? `${fmt(lt.framesPerSec)} frames/s (${fmt(lt.emitted)} events × ${fmt(lt.streams)} streams; ${fmt(lt.frames)} frames arrived) · record → stream p50 ${fmt(lt.latency.p50, 1)} ms · p99 ${fmt(lt.latency.p99, 1)} ms · max ${fmt(lt.latency.max, 1)} ms · **${fmt(lt.cost.usPerUnit.daemon ?? Number.NaN)} µs daemon CPU per event** (all its frames)`
      : "not run",
    lt ? `${fmt(lt.rate)} emits/s open loop; ${fmt(lt.failures)} emit failures` : "—",
    "—",
    "(info)",
    lt ? (lt.frames >= lt.emitted * lt.streams ? "every frame arrived" : "❌ frames missing") : "—",
    pct(lt?.cost.pct),
  ]);
  const rl = r.relay;
  if (rl) {
    const relayed = (x: RelayRun) =>
      `**${fmt(x.perSec)} delivered/s** (${fmt(x.delivered)}/${fmt(x.expected)} in ${fmt(x.spanS, 1)} s from the load's start${x.complete ? "" : ", DEADLINE HIT"}) · ${fmt(x.load.reqPerSec)} req/s accepted, p50 ${fmt(x.load.p50, 1)} ms · p99 ${fmt(x.load.p99, 1)} ms${x.load.bad ? ` · other answers: ${statuses(x.load.statuses)}` : ""}${unitCost(x.cost, "delivered event")}`;
    rows.push([
      "9. Relay to a webhook, single emits (emit → fan-out → delivery, end to end)",
      relayed(rl.single),
      `the baseline of 9b and 9c: ${fmt(rl.single.inFlightAtLoadEnd)} accepted events not yet delivered when the load stopped`,
      "—",
      "(baseline of 9b, 9c)",
      rl.single.complete ? "all delivered" : "❌ deadline hit",
      pct(rl.single.cost.pct),
    ]);
    for (const [label, x] of [
      ["9b. HTTP-source relay, queued runs (`$emit(e.body)`), to the same webhook", rl.queued],
      ["9c. HTTP-source relay, inline runs (`$emit(e.body)` + `this.http.respond`), to the same webhook", rl.inline],
    ] as const) {
      const perSecRatio = ratio(x.perSec, rl.single.perSec);
      const cpuRatio = ratio(daemonUs(rl.single.cost), daemonUs(x.cost));
      const inline =
        x === rl.inline ? `; SOURCE_INLINE_CONCURRENCY ${rl.inlineConcurrency} in this deployment (the load's connections)` : "";
      rows.push([
        label,
        relayed(x),
        `single-emit relay (9): ${fmt(rl.single.perSec)} delivered/s, ${fmt(daemonUs(rl.single.cost) ?? Number.NaN)} µs daemon CPU per delivered event; ${fmt(x.inFlightAtLoadEnd)} accepted events not yet delivered when the load stopped${inline}`,
        `**${fmt(perSecRatio, 2)}×** delivered/s (CPU/event: ${fmt(cpuRatio, 2)}×)`,
        `≥ ${RELAY_TARGET}× single-emit relay`,
        judged(Number.isNaN(perSecRatio) ? undefined : perSecRatio >= RELAY_TARGET && x.complete, noise(rl.single.cost, x.cost), {
          ok: cpuRatio >= RELAY_TARGET,
          ratio: cpuRatio,
        }),
        pct(x.cost.pct),
      ]);
    }
  }
  const cl = r.cluster;
  if (cl) {
    /** Redis CPU per unit over every redis-server of a side; the cluster's per master too. */
    const redisOf = (c: Cost) => Object.entries(c.usPerUnit).filter(([k]) => k === "redis" || k.startsWith("redis:"));
    const redisSum = (c: Cost) => redisOf(c).reduce((a, [, v]) => a + v, 0);
    const clusterCost = (c: Cost, unit: string) => {
      const nodes = redisOf(c);
      const perNode = nodes.length > 1 ? ` (${nodes.map(([, v]) => fmt(v)).join(" + ")} over the masters)` : "";
      return ` · **${fmt(c.usPerUnit.daemon ?? Number.NaN)} µs daemon + ${fmt(redisSum(c))} µs redis${perNode} CPU, ${fmt(c.redisPerUnit, 1)} Redis cmds per ${unit}**`;
    };
    for (const [label, unit, rate, a, b, ratios] of [
      [
        `10. Redis Cluster (${cl.masters} local masters): single emits`,
        "emit",
        "req/s",
        cl.single.ingest,
        cl.cluster.ingest,
        cl.cpuRatios.ingest,
      ],
      [
        `10b. Redis Cluster (${cl.masters} local masters): relay to a webhook, single emits (end to end)`,
        "delivered event",
        "delivered/s",
        cl.single.relay,
        cl.cluster.relay,
        cl.cpuRatios.relay,
      ],
    ] as const) {
      const rounds = ratios.length > 1 ? ` (the median of ${ratios.length} rounds: ${ratios.map((x) => `${fmt(x, 2)}×`).join(", ")})` : "";
      const figure = (x: typeof a) =>
        "perSec" in x
          ? `${fmt(x.perSec)} delivered/s (${fmt(x.delivered)}/${fmt(x.expected)} in ${fmt(x.spanS, 1)} s${x.complete ? "" : ", DEADLINE HIT"}) · ${fmt(x.load.reqPerSec)} req/s accepted, p50 ${fmt(x.load.p50, 1)} ms · p99 ${fmt(x.load.p99, 1)} ms${x.load.bad ? ` · other answers: ${statuses(x.load.statuses)}` : ""}`
          : closed(x);
      const perSec = (x: typeof a) => ("perSec" in x ? x.perSec : x.reqPerSec);
      const cpuRatio = ratio(b.cost.usPerUnit.daemon, a.cost.usPerUnit.daemon);
      rows.push([
        label,
        `${figure(b)}${clusterCost(b.cost, unit)}`,
        `the same daemon on one redis-server: ${figure(a)}${clusterCost(a.cost, unit)}`,
        `**${fmt(cpuRatio, 2)}× daemon CPU per ${unit}**${rounds} · ${fmt(ratio(perSec(b), perSec(a)), 2)}× ${rate} · ${fmt(ratio(redisSum(b.cost), redisSum(a.cost)), 2)}× Redis CPU per ${unit}`,
        `daemon CPU per event ≤ ${CLUSTER_CPU_TARGET}× one node (reported, not asserted)`,
        Number.isNaN(cpuRatio) ? verdict(undefined) : verdict(cpuRatio <= CLUSTER_CPU_TARGET),
        `cluster: ${pct(b.cost.pct)}; one node: ${pct(a.cost.pct)}`,
      ]);
    }
  }
  const rss = Object.entries(r.peakRssKb ?? {})
    .map(([n, kb]) => `${n} ${kb === undefined ? "n/a" : `${fmt(kb / 1024)} MiB`}`)
    .join(" · ");
  rows.push(["Daemon peak RSS (VmHWM)", rss || "n/a", "—", "—", "—", "—", "—"]);

  const header = [
    "Measurement",
    "Tributary",
    "Baseline / detail",
    "Ratio",
    "Target",
    "Result",
    "CPU % of one core (other = rest of the machine)",
  ];
  const out = [
    "",
    `## ${meta.title}`,
    "",
    `| ${header.join(" | ")} |`,
    `|${header.map(() => "---").join("|")}|`,
    ...rows.map((row) => `| ${row.join(" | ")} |`),
    "",
    `Settings: closed-loop ingest with autocannon, ${S.connections} connections, ${S.durationS} s (after a ${S.warmupS} s warm-up for single and Koa); ` +
      "ingest CPU and Redis costs include whatever fan-out the ingested events cause (their emitter has no subscribers, so the record script writes no outbox entry). " +
      `Tributary ran as ${r.split ? "two processes (ROLES=api and ROLES=worker,scheduler)" : "one daemon process with every role"}. ` +
      `Backlog of ${fmt(S.backlog)} events pre-loaded through an API-only daemon, then drained by the daemon (DELIVERY_CONCURRENCY ${S.deliveryConcurrency} and DELIVERY_DIRECT_CONCURRENCY ${S.deliveryConcurrency}, the defaults: fan-out makes first attempts directly, jobs carry retries and overflow); ` +
      `the BullMQ baseline adds the same number of jobs, then starts a Worker (concurrency ${S.deliveryConcurrency}); rate = deliveries between the first and last arrival. ` +
      `Latency phases: open loop (requests sent on a 1 ms timer schedule whatever the answers), ${S.durationS} s each after a ${S.warmupS} s warm-up at the same rate (not measured; plain BullMQ gets the same), latency = arrival at the receiver − send time of the request carrying the event; ` +
      `pacer max lag ${r.latency.map((l) => `${fmt(l.maxLagMs, 1)} ms`).join(" / ") || "n/a"}; the target is judged on single emits at 1,000/s; before those runs, plain BullMQ is paced at the same rate (the bench process calls Queue.add per job, the worker child of the drain baseline POSTs) as the reference of what BullMQ and undici alone achieve here. ` +
      "Daemon, baselines and redis-server run as separate processes (a daemon’s CPU includes its child processes: the sandbox process that runs components, esbuild); the load generator and the webhook receiver share the bench process (“bench” CPU). " +
      "“other” is CPU used by unrelated processes on the machine during the phase: when it is high the absolute figures are depressed, the per-unit CPU costs much less so. " +
      `Source runtime: the daemon runs with SOURCE_HTTP_RATE_PER_SECOND=100000 (the schema's maximum, so the per-source rate limit does not bind) and TIMER_MIN_INTERVAL_SECONDS=1; ` +
      `HTTP-source loads last ${R.durationS} s each (${S.connections} connections for queued runs, drain deadline ${R.drainDeadlineS} s; the inline one after a 1 s warm-up); ` +
      "timer lag per tick = the component's Date.now() − the job scheduler's slot (next − k × 1 s); the sandbox row runs in a child process after the daemon stopped. " +
      (r.relay
        ? `Relay rows (9–9c): a deployment of their own (SOURCE_INLINE_CONCURRENCY ${r.relay.inlineConcurrency}); the same closed loop (${S.connections} connections, ${S.durationS} s, after a ${S.warmupS} s warm-up whose events are all delivered first) on each ingress, whose events one webhook subscription delivers to the receiver; delivered/s = events at the receiver ÷ (last arrival − load start), waiting up to ${r.relay.deadlineS} s after the load; CPU per delivered event covers ingest, runs, fan-out and delivery; the CPU ratio is single-emit µs ÷ source µs. `
        : "") +
      (cl
        ? `Cluster rows (10, 10b): a one-process daemon of the phase's own on the bench's redis-server, then another on a local Redis Cluster of ${cl.masters} masters on loopback (no replicas, started in ${fmt(cl.clusterStartS, 1)} s), same build and settings; each gets, ${cl.rounds > 1 ? `${cl.rounds} times in alternating order (the row shows the round of the median ratio)` : "once"}, the single-emit load (closed loop, ${S.connections} connections, ${S.durationS} s after a ${S.warmupS} s warm-up, fan-out waited for) and the relay load of row 9 (deadline ${cl.deadlineS} s); redis CPU on the cluster is the masters' sum; ratios are cluster ÷ one node. `
        : "") +
      `Total bench time ${fmt(meta.totalS)} s.`,
    "",
    "Redis commands per unit (top 8):",
    `- single emit: ${top(r.single?.cost)}`,
    `- batch, per event: ${top(r.batch?.cost)}`,
    `- Tributary delivery (drain): ${top(r.drain?.cost)}`,
    `- plain BullMQ delivery: ${top(r.bull?.cost)}`,
    ...(r.relay
      ? [
          `- relay, single emit, per delivered event: ${top(r.relay.single.cost)}`,
          `- relay, HTTP source queued, per delivered event: ${top(r.relay.queued.cost)}`,
          `- relay, HTTP source inline, per delivered event: ${top(r.relay.inline.cost)}`,
        ]
      : []),
    ...(cl
      ? [
          `- single emit, one node (cluster phase): ${top(cl.single.ingest.cost)}`,
          `- single emit, Redis Cluster: ${top(cl.cluster.ingest.cost)}`,
          `- relay per delivered event, one node (cluster phase): ${top(cl.single.relay.cost)}`,
          `- relay per delivered event, Redis Cluster: ${top(cl.cluster.relay.cost)}`,
        ]
      : []),
    "",
  ];
  process.stdout.write(out.join("\n"));
}
