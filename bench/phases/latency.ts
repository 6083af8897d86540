/**
 * Emit-to-delivered latency in open loop (events/s × events per request), each run after a warm-up
 * at its rate; at the judged rate (1,000 single emits/s), plain BullMQ paced the same way first.
 */
import { writeFileSync } from "node:fs";
import { bullmqLatencyBaseline } from "../baselines.js";
import { LATENCY_WORKFLOW, type Phase } from "../context.js";
import { openLoop } from "../load.js";
import type { LatencyResult, Results } from "../report.js";
import { metricValue, scrape } from "../runtime.js";
import { fmt, summarize } from "../stats.js";

export const latency: Phase = {
  name: "latency",
  needs: ["daemon"],
  async run(ctx) {
    const { settings: S, receiver, redisServer, log, dep: dm, key } = ctx;
    const out: Partial<Results> & { latency: LatencyResult[] } = { latency: [] };
    const runs = ctx.latencyRuns ?? S.latency;
    const path = `/v1/workflows/${LATENCY_WORKFLOW}/events`;
    // The judged rate, once more with plain BullMQ alone (the Tributary daemon idles meanwhile).
    const judgedRun = runs.find((r) => r.rate === 1000 && r.batch === 1);
    if (judgedRun) {
      log(`plain BullMQ at ${judgedRun.rate} jobs/s for ${S.durationS}s (Queue.add one by one -> worker -> undici)`);
      const b = await bullmqLatencyBaseline({
        redisUrl: redisServer.url,
        redisPid: redisServer.pid,
        receiver,
        rate: judgedRun.rate,
        durationMs: S.durationS * 1000,
        warmupMs: S.warmupS * 1000,
        concurrency: S.deliveryConcurrency,
        seqBase: 90_000_000,
      });
      out.bullLatency = b;
      log(`  p50 ${fmt(b.e2e.p50, 1)} ms, p99 ${fmt(b.e2e.p99, 1)} ms, delivered ${b.delivered}/${b.sent}`);
    }
    for (const [index, { rate, batch }] of runs.entries()) {
      log(`emit-to-delivered at ${rate} events/s for ${S.durationS}s (${batch} event(s)/request), after a ${S.warmupS} s warm-up`);
      // Warm-up at the same rate, not measured: a steady rate is what the row reports, and a
      // daemon's first second of load runs on cold code and connections (BENCH_E2E_DUMP shows it).
      receiver.reset();
      await openLoop({
        origin: dm.url,
        path,
        token: key,
        rate,
        durationMs: S.warmupS * 1000,
        batch,
        seqBase: (index + 1) * 10_000_000 + 5_000_000,
      });
      await ctx.quiesce(`after the warm-up at ${rate}/s`);
      receiver.reset();
      // How many first attempts went direct rather than through the queue (one daemon: its /metrics sees fan-out).
      const fanoutCounts = async () => {
        if (ctx.split || !dm.hasWorker) return undefined;
        const text = await scrape(dm.url);
        return {
          all: metricValue(text, "tributary_fanout_deliveries_total"),
          direct: metricValue(text, "tributary_fanout_direct_deliveries_total"),
        };
      };
      const countsBefore = await fanoutCounts();
      const meter = await ctx.meter();
      const r = await openLoop({
        origin: dm.url,
        path,
        token: key,
        rate,
        durationMs: S.durationS * 1000,
        batch,
        seqBase: (index + 1) * 10_000_000,
      });
      const expected = r.sentAt.size - r.failures * batch;
      await receiver.waitFor(expected, 60_000);
      const cost = await meter(receiver.count());
      dm.ensureAlive();
      const countsAfter = await fanoutCounts();
      const fannedOut = countsAfter && countsBefore ? countsAfter.all - countsBefore.all : 0;
      const directShare = countsAfter && countsBefore && fannedOut > 0 ? (countsAfter.direct - countsBefore.direct) / fannedOut : undefined;
      const e2e: number[] = [];
      if (process.env.BENCH_E2E_DUMP) {
        const rows: string[] = [];
        for (const [seq, sent] of r.sentAt)
          rows.push(`${(sent / 1000).toFixed(3)} ${((receiver.arrivals.get(seq) ?? Number.NaN) - sent).toFixed(2)}`);
        writeFileSync(`${process.env.BENCH_E2E_DUMP}-${rate}x${batch}.txt`, rows.join("\n"));
      }
      for (const [seq, sent] of r.sentAt) {
        const at = receiver.arrivals.get(seq);
        if (at !== undefined) e2e.push(at - sent);
      }
      const res: LatencyResult = {
        rate,
        batch,
        sent: r.sentAt.size,
        delivered: e2e.length,
        e2e: summarize(e2e),
        ack: summarize(r.ackMs),
        failures: r.failures,
        maxLagMs: r.maxLagMs,
        cost,
        directShare,
      };
      out.latency.push(res);
      log(`  p50 ${fmt(res.e2e.p50, 1)} ms, p99 ${fmt(res.e2e.p99, 1)} ms, delivered ${res.delivered}/${res.sent}`);
      await ctx.quiesce(`after ${rate}/s`);
    }
    return out;
  },
};
