/** Draining: the daemon starts on the backlog the set-up pre-loaded, and delivers it to the receiver. */
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import { drainResult } from "../baselines.js";
import type { BenchContext, Phase } from "../context.js";
import { cpuMsOf } from "../cpu.js";
import { metricValue, scrape } from "../runtime.js";
import { outboxLength } from "../../src/store/outbox-stream.js";
import { fmt } from "../stats.js";

/** BENCH_TRACE=1: once a second, where the drain's backlog sits (outbox, delivery queue, delivered). */
function trace({ redis, keys, receiver, log }: BenchContext): () => void {
  const q = new Queue("delivery", { connection: redis, prefix: keys.queuePrefix("delivery") });
  const timer = setInterval(() => {
    void (async () => {
      const outbox = await outboxLength(redis, keys);
      const c = await q.getJobCounts("wait", "active", "completed");
      log(`  trace: outbox ${outbox} · queue wait ${c.wait} active ${c.active} completed ${c.completed} · delivered ${receiver.count()}`);
    })().catch(() => {});
  }, 1000);
  return () => {
    clearInterval(timer);
    void q.close();
  };
}

export const drain: Phase = {
  name: "drain",
  needs: ["backlog"],
  async run(ctx) {
    const { settings: S, redis, keys, receiver, log } = ctx;
    receiver.reset();
    log(`starting ${ctx.split ? "an api and a worker process" : "the full daemon (api,worker,scheduler)"} on the backlog`);
    const d = await ctx.deploy();
    const workerPid = d.workerPid as number;
    const meter = await ctx.meter();
    const deliveredBeforeMeter = receiver.count();
    const outboxAtMeter = await outboxLength(redis, keys);
    const cpuAtMeter = cpuMsOf(workerPid) ?? 0;
    // Where the backlog sits over time: when the outbox empties, fan-out is done and only delivery remains.
    let fanoutDone: { at: number; delivered: number; cpuMs: number } | undefined;
    const watch = setInterval(() => {
      void outboxLength(redis, keys)
        .then((n) => {
          if (n === 0 && !fanoutDone) fanoutDone = { at: performance.now(), delivered: receiver.count(), cpuMs: cpuMsOf(workerPid) ?? 0 };
        })
        .catch(() => {});
    }, 100);
    const stopTrace = ctx.trace ? trace(ctx) : () => {};
    const complete = await receiver.waitFor(S.backlog, 120_000);
    const cpuAtEnd = cpuMsOf(workerPid) ?? 0;
    clearInterval(watch);
    stopTrace();
    d.ensureAlive();
    const base = drainResult(receiver, S.backlog, complete, await meter(receiver.count() - deliveredBeforeMeter));
    const w = receiver.window();
    let detail = "";
    const tail = fanoutDone ? S.backlog - fanoutDone.delivered : 0;
    if (fanoutDone && w && tail > 500 && outboxAtMeter > 0) {
      // Split the worker process's CPU: after the outbox emptied it only delivers, which prices a
      // delivery; the rest of its CPU before that moment is the fan-out's.
      const tailMs = w.last - fanoutDone.at;
      const usPerDelivery = ((cpuAtEnd - fanoutDone.cpuMs) * 1000) / tail;
      const fanoutUs =
        ((fanoutDone.cpuMs - cpuAtMeter) * 1000 - usPerDelivery * (fanoutDone.delivered - deliveredBeforeMeter)) / outboxAtMeter;
      detail =
        `fan-out finished ${fmt((fanoutDone.at - w.first) / 1000, 1)} s in, with ${fmt(fanoutDone.delivered)} delivered; ` +
        `delivery alone afterwards ${fmt((tail * 1000) / tailMs)}/s. Worker CPU split: ≈${fmt(fanoutUs)} µs fan-out per event + ≈${fmt(usPerDelivery)} µs per delivery`;
    } else if (fanoutDone && w) {
      detail = `fan-out finished ${fmt((fanoutDone.at - w.first) / 1000, 1)} s in, with ${fmt(fanoutDone.delivered)} delivered`;
    }
    if (!ctx.split) {
      // A fresh daemon: its counters cover the drain alone.
      const text = await scrape(d.url);
      const all = metricValue(text, "tributary_fanout_deliveries_total");
      if (all > 0) {
        const share = metricValue(text, "tributary_fanout_direct_deliveries_total") / all;
        detail = `${detail ? `${detail}; ` : ""}${fmt(share * 100, 1)} % of first attempts direct, the rest queued`;
      }
    }
    const result = { ...base, detail };
    log(`  ${fmt(result.perSec)} deliveries/s (${result.delivered}/${result.expected}); ${detail}`);
    return { drain: result };
  },
};
