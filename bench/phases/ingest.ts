/** Closed-loop ingest: single emits and batches of 100 against the deployment, fan-out included in the cost; single emits interleaved with Koa + EVALSHA. */
import { startBaseline } from "../baselines.js";
import type { BenchContext, Phase } from "../context.js";
import { type ArmSlices, type InterleavedIngest, interleavedSlices, roundRatios, type SliceArm } from "../interleave.js";
import { type ClosedLoopResult, hammer, smallEvent } from "../load.js";
import type { Cost } from "../meter.js";
import { envInt, fmt, median } from "../stats.js";

/** The ingest workflow: nothing subscribes to it, so the record script writes no outbox entry. */
const INGEST_WORKFLOW = "p_bench_ingest";

async function closedLoop(
  ctx: BenchContext,
  body: string,
  warmupS: number,
  eventsPerRequest: number,
): Promise<ClosedLoopResult & { cost: Cost }> {
  const S = ctx.settings;
  const dm = ctx.dep;
  const url = `${dm.url}/v1/workflows/${INGEST_WORKFLOW}/events`;
  const headers = { authorization: `Bearer ${ctx.key}` };
  if (warmupS > 0) await hammer({ url, body, headers, durationS: warmupS, connections: S.connections });
  const meter = await ctx.meter();
  const r = await hammer({ url, body, headers, durationS: S.durationS, connections: S.connections });
  // Fan-out of what was just ingested is part of the price of an emit: wait for it before reading the meter.
  await ctx.quiesce("fan-out of the ingested events");
  const cost = await meter(r.ok * eventsPerRequest);
  dm.ensureAlive();
  return { ...r, cost };
}

export const single: Phase = {
  name: "single",
  needs: ["daemon"],
  async run(ctx) {
    const S = ctx.settings;
    ctx.log(`single-emit ingest: ${S.durationS}s, ${S.connections} connections`);
    const single = await closedLoop(ctx, JSON.stringify({ event: smallEvent(1) }), S.warmupS, 1);
    ctx.log(`  ${fmt(single.reqPerSec)} req/s`);
    return { single };
  },
};

export const batch: Phase = {
  name: "batch",
  needs: ["daemon"],
  async run(ctx) {
    const S = ctx.settings;
    ctx.log(`batch ingest (${S.batchSize} events/request): ${S.durationS}s, ${S.connections} connections`);
    const body = JSON.stringify({ events: Array.from({ length: S.batchSize }, (_, i) => ({ event: smallEvent(i) })) });
    const batch = await closedLoop(ctx, body, 0, S.batchSize);
    ctx.log(`  ${fmt(batch.reqPerSec)} req/s`);
    return { batch };
  },
};

/**
 * Row 1 again, interleaved: single emits to the deployment and to a fresh Koa + EVALSHA child (on
 * the same redis-server) in alternating slices, BENCH_INGEST_ROUNDS rounds (6) of
 * BENCH_INGEST_SLICE_S seconds (3) each, the order rotating each round (bench/interleave.ts). One
 * slice per arm, as the `koaredis` and `single` phases take, leaves the ratio to whichever arm met
 * the slower minute of a shared host; the median of per-round ratios does not.
 */
export const interleaved: Phase = {
  name: "interleaved",
  needs: ["daemon"],
  async run(ctx) {
    const S = ctx.settings;
    const rounds = envInt("BENCH_INGEST_ROUNDS", 6);
    const sliceS = envInt("BENCH_INGEST_SLICE_S", 3);
    const pid = ctx.dep.pids.daemon ?? ctx.dep.pids.api;
    if (pid === undefined) throw new Error("interleaved: the deployment has no process taking emits");
    const { child, url } = await startBaseline("koa-evalsha", { REDIS_URL: ctx.redisServer.url }, { name: "koa-evalsha-interleaved" });
    try {
      const arms: SliceArm[] = [
        {
          name: "Koa + EVALSHA",
          pid: child.pid,
          url,
          headers: { authorization: "Bearer x" },
          redisPid: ctx.redisServer.pid,
        },
        {
          name: "Tributary",
          pid,
          url: `${ctx.dep.url}/v1/workflows/${INGEST_WORKFLOW}/events`,
          headers: { authorization: `Bearer ${ctx.key}` },
          redisPid: ctx.redisServer.pid,
        },
      ];
      const body = JSON.stringify({ event: smallEvent(1) });
      ctx.log(`interleaved single-emit ingest vs Koa + EVALSHA: ${rounds} rounds of ${sliceS}s slices, ${S.connections} connections`);
      for (const a of arms) await hammer({ url: a.url, body, headers: a.headers, durationS: S.warmupS, connections: S.connections });
      const { slices, otherPeakPct, otherMedianPct } = await interleavedSlices(arms, {
        rounds,
        sliceS,
        connections: S.connections,
        body,
        onRound: (line) => ctx.log(`  ${line}`),
      });
      const [baseline, daemon] = slices as [ArmSlices, ArmSlices];
      await ctx.quiesce("fan-out of the interleaved emits");
      ctx.dep.ensureAlive();
      const ratios = roundRatios(daemon.rps, baseline.rps);
      ctx.log(`  median ${median(ratios).toFixed(2)}× (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`);
      const result: InterleavedIngest = {
        rounds,
        sliceS,
        ratios,
        cpuRatios: roundRatios(baseline.us, daemon.us),
        daemon,
        baseline,
        otherPeakPct,
        otherMedianPct,
      };
      return { interleaved: result };
    } finally {
      await child.stop();
    }
  },
};
