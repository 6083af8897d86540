/** Live tail (SPEC §9): events fanned out to open SSE streams. */
import type { Phase } from "../context.js";
import { liveTailPhase } from "../live-tail.js";
import { smallEvent } from "../load.js";
import { fmt } from "../stats.js";

export const sse: Phase = {
  name: "sse",
  needs: ["daemon"],
  async run(ctx) {
    const L = ctx.settings.liveTail;
    const { dep: dm, key, log } = ctx;
    log(`live tail: ${L.streams} streams on one workflow, ${L.rate} single emits/s for ${L.durationS} s`);
    const meter = await ctx.meter();
    const wf = "p_bench_live_tail";
    const r = await liveTailPhase({
      url: dm.url,
      key,
      workflowId: wf,
      streams: L.streams,
      rate: L.rate,
      durationS: L.durationS,
      emitOne: async () => {
        const res = await fetch(`${dm.url}/v1/workflows/${wf}/events`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ event: smallEvent(0) }),
        });
        if (res.status !== 202) throw new Error(`live tail set-up emit: ${res.status}`);
      },
    });
    const liveTail = { ...r, cost: await meter(r.emitted) };
    log(
      `  ${fmt(r.framesPerSec)} frames/s to ${r.streams} streams (${r.frames}/${r.emitted * r.streams}); record → stream p50 ${fmt(r.latency.p50, 1)} ms, p99 ${fmt(r.latency.p99, 1)} ms`,
    );
    await ctx.quiesce("after the live tail");
    return { liveTail };
  },
};
