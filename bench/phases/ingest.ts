/** Closed-loop ingest: single emits and batches of 100 against the deployment, fan-out included in the cost. */
import type { BenchContext, Phase } from "../context.js";
import { type ClosedLoopResult, hammer, smallEvent } from "../load.js";
import type { Cost } from "../meter.js";
import { fmt } from "../stats.js";

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
