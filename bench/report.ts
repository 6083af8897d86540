import type { DrainResult } from "./baselines.js";
import { type CpuShares, formatCpu } from "./cpu.js";
import type { ClosedLoopResult } from "./load.js";
import { fmt, type Summary } from "./stats.js";

export interface LatencyResult {
  readonly rate: number;
  readonly sent: number;
  readonly delivered: number;
  readonly e2e: Summary;
  readonly ack: Summary;
  readonly failures: number;
  readonly maxLagMs: number;
  readonly cpu: CpuShares;
}

export interface Results {
  settings: {
    durationS: number;
    warmupS: number;
    backlog: number;
    connections: number;
    latBatch: number;
    batchSize: number;
    deliveryConcurrency: number;
  };
  koa?: ClosedLoopResult & { cpu: CpuShares };
  bull?: DrainResult;
  drain?: DrainResult;
  single?: ClosedLoopResult & { cpu: CpuShares };
  batch?: ClosedLoopResult & { cpu: CpuShares };
  latency: LatencyResult[];
  peakRssKb?: number;
}

const verdict = (ok: boolean | undefined) => (ok === undefined ? "not run" : ok ? "✅ met" : "❌ missed");
const ratio = (a: number | undefined, b: number | undefined) => (a !== undefined && b !== undefined && b > 0 ? a / b : Number.NaN);
const errs = (r: ClosedLoopResult) => (r.bad ? ` · ${fmt(r.bad)} errors/non-2xx` : "");
const closed = (r: ClosedLoopResult | undefined) =>
  r ? `${fmt(r.reqPerSec)} req/s · p50 ${fmt(r.p50)} ms · p99 ${fmt(r.p99)} ms${errs(r)}` : "not run";
const drained = (d: DrainResult | undefined) =>
  d
    ? `${fmt(d.perSec)} deliveries/s (${fmt(d.delivered)}/${fmt(d.expected)} in ${fmt(d.spanMs / 1000, 1)} s${d.complete ? "" : ", DEADLINE HIT"}${d.duplicates ? `, ${d.duplicates} duplicates` : ""})${d.detail ? `; ${d.detail}` : ""}`
    : "not run";

/** Prints the one markdown table (and a settings paragraph) to stdout. */
export function printReport(r: Results, meta: { title: string; totalS: number }): void {
  const S = r.settings;
  const ingestRatio = ratio(r.single?.reqPerSec, r.koa?.reqPerSec);
  const drainRatio = ratio(r.drain?.perSec, r.bull?.perSec);
  const rows: string[][] = [];
  rows.push([
    "1. Emit ingest, single event",
    closed(r.single),
    `bare Koa: ${closed(r.koa)}`,
    `${fmt(ingestRatio, 2)}×`,
    "≥ 0.6× bare Koa",
    verdict(Number.isNaN(ingestRatio) ? undefined : ingestRatio >= 0.6),
    `${formatCpu(r.single?.cpu)}; bare Koa: ${formatCpu(r.koa?.cpu)}`,
  ]);
  rows.push([
    `2. Emit ingest, batch of ${S.batchSize}`,
    r.batch ? `${closed(r.batch)} = **${fmt(r.batch.reqPerSec * S.batchSize)} events/s**` : "not run",
    "—",
    `${fmt(ratio(r.batch ? r.batch.reqPerSec * S.batchSize : undefined, r.single?.reqPerSec), 1)}× single (events/s)`,
    "—",
    "—",
    formatCpu(r.batch?.cpu),
  ]);
  rows.push([
    `3. Draining a ${fmt(S.backlog)}-event backlog`,
    drained(r.drain),
    `plain BullMQ: ${drained(r.bull)}`,
    `${fmt(drainRatio, 2)}×`,
    "≥ 0.8× plain BullMQ",
    verdict(Number.isNaN(drainRatio) ? undefined : drainRatio >= 0.8 && r.drain?.complete === true),
    `${formatCpu(r.drain?.cpu)}; BullMQ: ${formatCpu(r.bull?.cpu)}`,
  ]);
  for (const l of r.latency) {
    const complete = l.delivered === l.sent;
    rows.push([
      `4. Emit→delivered at ${fmt(l.rate)} events/s`,
      `p50 ${fmt(l.e2e.p50, 1)} ms · p99 ${fmt(l.e2e.p99, 1)} ms · max ${fmt(l.e2e.max, 1)} ms (${fmt(l.delivered)}/${fmt(l.sent)} delivered${l.failures ? `, ${l.failures} emit failures` : ""})`,
      `emit→202: p50 ${fmt(l.ack.p50, 1)} ms · p99 ${fmt(l.ack.p99, 1)} ms`,
      "—",
      l.rate === 1000 ? "p99 < 50 ms" : "—",
      l.rate === 1000 ? verdict(l.e2e.p99 < 50 && complete) : complete ? "(info)" : "incomplete",
      formatCpu(l.cpu),
    ]);
  }
  rows.push(["Daemon peak RSS (VmHWM)", r.peakRssKb === undefined ? "n/a" : `${fmt(r.peakRssKb / 1024)} MiB`, "—", "—", "—", "—", "—"]);

  const header = ["Measurement", "Tributary", "Baseline / detail", "Ratio", "Target", "Result", "CPU % of one core"];
  const pace = S.latBatch === 1 ? "single emits (1 event per request)" : `${S.latBatch} events per request`;
  const out = [
    "",
    `## ${meta.title}`,
    "",
    `| ${header.join(" | ")} |`,
    `|${header.map(() => "---").join("|")}|`,
    ...rows.map((row) => `| ${row.join(" | ")} |`),
    "",
    `Settings: closed-loop ingest with autocannon, ${S.connections} connections, ${S.durationS} s (after a ${S.warmupS} s warm-up for single and Koa). ` +
      `Backlog of ${fmt(S.backlog)} events pre-loaded through an API-only daemon, then drained by a full daemon (DELIVERY_CONCURRENCY ${S.deliveryConcurrency}); ` +
      `the BullMQ baseline adds the same number of jobs, then starts a Worker (concurrency ${S.deliveryConcurrency}); rate = deliveries between the first and last arrival. ` +
      `Latency phases: open loop, ${pace}, ${S.durationS} s each; pacer max lag ${r.latency.map((l) => `${fmt(l.maxLagMs, 1)} ms`).join(" / ") || "n/a"}. ` +
      "Daemon, baselines and redis-server run as separate processes; the load generator and the webhook receiver share the bench process (“bench” CPU). " +
      `Total bench time ${fmt(meta.totalS)} s.`,
    "",
  ];
  process.stdout.write(out.join("\n"));
}
