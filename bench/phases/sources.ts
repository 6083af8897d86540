/**
 * Source runtime (issue 4): timer lag first, on an otherwise idle daemon; then HTTP sources with a
 * custom response (inline runs) and with queued runs. The measurements are in bench/runtime.ts.
 */
import type { Phase } from "../context.js";
import { sourceHttpPhase, sourceInlinePhase, timerPhase } from "../runtime.js";
import { fmt } from "../stats.js";

export const timer: Phase = {
  name: "timer",
  needs: ["daemon", "worker"],
  async run(ctx) {
    const R = ctx.settings.runtime;
    ctx.log(`timer source, 1 s interval, ticking for ${R.timerS} s`);
    const t = await timerPhase(ctx.runtime(), R.timerS);
    ctx.log(
      `  ${t.ticks}/${t.expectedTicks} ticks; lag to run p50 ${fmt(t.toRun.p50, 1)} ms, p99 ${fmt(t.toRun.p99, 1)} ms, max ${fmt(t.toRun.max, 1)} ms; histogram p50 ${fmt((t.hist?.p50 ?? Number.NaN) * 1000, 1)} ms`,
    );
    await ctx.quiesce("after the timer source");
    return { timer: t };
  },
};

export const srcinline: Phase = {
  name: "srcinline",
  needs: ["daemon"],
  async run(ctx) {
    ctx.log(`HTTP source with a custom response (inline runs): ${ctx.settings.runtime.durationS}s`);
    const meter = await ctx.meter();
    const r = await sourceInlinePhase(ctx.runtime());
    const srcInline = { ...r, cost: await meter(r.load.ok) };
    ctx.log(
      `  ${fmt(r.load.reqPerSec)} req/s answered 200, p50 ${fmt(r.load.p50, 1)} ms, p99 ${fmt(r.load.p99, 1)} ms; statuses ${JSON.stringify(r.load.statuses)}`,
    );
    await ctx.quiesce("after the inline source");
    return { srcInline };
  },
};

export const srchttp: Phase = {
  name: "srchttp",
  needs: ["daemon", "worker"],
  async run(ctx) {
    const { runtime: R, connections } = ctx.settings;
    ctx.log(`HTTP source, queued runs: ${R.durationS}s, ${connections} connections`);
    const meter = await ctx.meter();
    const r = await sourceHttpPhase(ctx.runtime(), R.drainDeadlineS * 1000, R.sourceRunConcurrency);
    const srcHttp = { ...r, cost: await meter(r.runs) };
    ctx.log(
      `  ${fmt(r.load.reqPerSec)} req/s accepted; workers ${fmt(r.runsPerSec)} runs/s (${r.runs} runs, backlog ${r.backlogAtLoadEnd} at load end, ` +
        `${r.complete ? "drained" : "NOT drained"} after ${fmt(r.drainS, 1)} s, ${r.runErrors} not ok)`,
    );
    await ctx.quiesce("after the queued source");
    return { srcHttp };
  },
};
