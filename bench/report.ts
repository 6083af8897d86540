import type { DrainResult } from "./baselines.js";
import type { CpuShares } from "./cpu.js";
import type { ClosedLoopResult } from "./load.js";
import type { Cost } from "./meter.js";
import { fmt, type Summary } from "./stats.js";

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
}

export interface Results {
  settings: {
    durationS: number;
    warmupS: number;
    backlog: number;
    connections: number;
    latency: readonly { rate: number; batch: number }[];
    batchSize: number;
    deliveryConcurrency: number;
  };
  /** The daemon ran as an api process plus a worker process. */
  split: boolean;
  koa?: ClosedLoopResult & { cost: Cost };
  bull?: DrainResult;
  drain?: DrainResult;
  single?: ClosedLoopResult & { cost: Cost };
  batch?: ClosedLoopResult & { cost: Cost };
  latency: LatencyResult[];
  peakRssKb?: Record<string, number | undefined>;
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
const top = (c: Cost | undefined) => (c ? c.redisTop.map(([cmd, n]) => `${cmd} ${fmt(n, 2)}`).join(", ") : "n/a");

/** Prints the one markdown table (and the settings and Redis-command details) to stdout. */
export function printReport(r: Results, meta: { title: string; totalS: number }): void {
  const S = r.settings;
  const ingestRatio = ratio(r.single?.reqPerSec, r.koa?.reqPerSec);
  const daemonUs = (c: Cost | undefined) =>
    c ? (c.usPerUnit.daemon ?? 0) + (c.usPerUnit.api ?? 0) + (c.usPerUnit.worker ?? 0) : undefined;
  const ingestCpuRatio = ratio(r.koa?.cost.usPerUnit.koa, daemonUs(r.single?.cost));
  const drainRatio = ratio(r.drain?.perSec, r.bull?.perSec);
  const drainCpuRatio = ratio(r.bull?.cost?.usPerUnit.worker, daemonUs(r.drain?.cost));
  const rows: string[][] = [];
  rows.push([
    "1. Emit ingest, single event",
    `${closed(r.single)}${unitCost(r.single?.cost, "emit")}`,
    `bare Koa: ${closed(r.koa)}${unitCost(r.koa?.cost, "request")}`,
    `**${fmt(ingestRatio, 2)}×** (CPU/req: ${fmt(ingestCpuRatio, 2)}×)`,
    "≥ 0.6× bare Koa",
    judged(Number.isNaN(ingestRatio) ? undefined : ingestRatio >= 0.6, noise(r.single?.cost, r.koa?.cost), {
      ok: ingestCpuRatio >= 0.6,
      ratio: ingestCpuRatio,
    }),
    `${pct(r.single?.cost.pct)}; bare Koa: ${pct(r.koa?.cost.pct)}`,
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
    `**${fmt(drainRatio, 2)}×** (CPU/delivery: ${fmt(drainCpuRatio, 2)}×)`,
    "≥ 0.8× plain BullMQ",
    judged(Number.isNaN(drainRatio) ? undefined : drainRatio >= 0.8 && r.drain?.complete === true, noise(r.drain?.cost, r.bull?.cost), {
      ok: drainCpuRatio >= 0.8,
      ratio: drainCpuRatio,
    }),
    `${pct(r.drain?.cost?.pct)}; BullMQ: ${pct(r.bull?.cost?.pct)}`,
  ]);
  for (const l of r.latency) {
    const complete = l.delivered === l.sent;
    rows.push([
      `4. Emit→delivered at ${fmt(l.rate)} events/s, ${l.batch === 1 ? "single emits" : `${l.batch} events per request`}`,
      `p50 ${fmt(l.e2e.p50, 1)} ms · p99 ${fmt(l.e2e.p99, 1)} ms · max ${fmt(l.e2e.max, 1)} ms (${fmt(l.delivered)}/${fmt(l.sent)} delivered${l.failures ? `, ${l.failures} emit failures` : ""})`,
      `emit→202: p50 ${fmt(l.ack.p50, 1)} ms · p99 ${fmt(l.ack.p99, 1)} ms${unitCost(l.cost, "event, emit + delivery")} → the daemon alone needs ≈${fmt(((daemonUs(l.cost) ?? 0) * l.rate) / 10_000)} % of one core at this rate`,
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
      "ingest CPU and Redis costs include the fan-out of the ingested events (no subscribers). " +
      `Tributary ran as ${r.split ? "two processes (ROLES=api and ROLES=worker,scheduler)" : "one daemon process with every role"}. ` +
      `Backlog of ${fmt(S.backlog)} events pre-loaded through an API-only daemon, then drained by the daemon (DELIVERY_CONCURRENCY ${S.deliveryConcurrency}); ` +
      `the BullMQ baseline adds the same number of jobs, then starts a Worker (concurrency ${S.deliveryConcurrency}); rate = deliveries between the first and last arrival. ` +
      `Latency phases: open loop (requests sent on a 1 ms timer schedule whatever the answers), ${S.durationS} s each, latency = arrival at the receiver − send time of the request carrying the event; ` +
      `pacer max lag ${r.latency.map((l) => `${fmt(l.maxLagMs, 1)} ms`).join(" / ") || "n/a"}; the target is judged on single emits at 1,000/s. ` +
      "Daemon, baselines and redis-server run as separate processes; the load generator and the webhook receiver share the bench process (“bench” CPU). " +
      "“other” is CPU used by unrelated processes on the machine during the phase: when it is high the absolute figures are depressed, the per-unit CPU costs much less so. " +
      `Total bench time ${fmt(meta.totalS)} s.`,
    "",
    "Redis commands per unit (top 8):",
    `- single emit: ${top(r.single?.cost)}`,
    `- batch, per event: ${top(r.batch?.cost)}`,
    `- Tributary delivery (drain): ${top(r.drain?.cost)}`,
    `- plain BullMQ delivery: ${top(r.bull?.cost)}`,
    "",
  ];
  process.stdout.write(out.join("\n"));
}
