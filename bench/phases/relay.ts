/**
 * Relay end to end to a webhook (issue 12 item 7): HTTP-source relay, queued and inline, against
 * single-emit relay at the same load, in one deployment of its own (the measurements are in
 * bench/relay.ts). Target: each HTTP-source relay at ≥ 0.5× of single-emit relay.
 */
import type { Phase } from "../context.js";
import { apiData } from "../daemon-process.js";
import { smallEvent } from "../load.js";
import { INLINE_RELAY_COMPONENT, type RelayRun, relayRun } from "../relay.js";
import type { RelayResult } from "../report.js";
import { createSource, deleteSource, endpointOf, QUEUED_COMPONENT } from "../runtime.js";
import { fmt } from "../stats.js";

/** The workflow of the single-emit relay: only the relay's webhook subscribes to it. */
const RELAY_WORKFLOW = "p_bench_relay";
/** How long the deliveries of a load may take after it stopped. */
const RELAY_DEADLINE_S = 60;

const daemonUs = (r: RelayRun) => (r.cost.usPerUnit.daemon ?? 0) + (r.cost.usPerUnit.api ?? 0) + (r.cost.usPerUnit.worker ?? 0);

export const relay: Phase = {
  name: "relay",
  needs: ["daemon", "worker"],
  async run(ctx) {
    const { settings: S, receiver, log } = ctx;
    // A source answers SOURCE_INLINE_CONCURRENCY custom responses at once (default 2, the rest 429):
    // this deployment allows as many as the load has connections, so all three get the same load.
    const inlineConcurrency = S.connections;
    log(`relay to a webhook: a deployment with SOURCE_INLINE_CONCURRENCY=${inlineConcurrency}`);
    await ctx.stopDeployment();
    await ctx.deploy({ SOURCE_INLINE_CONCURRENCY: String(inlineConcurrency) });
    const dm = await ctx.deployment();
    const rt = ctx.runtime();
    const hook = await apiData<{ id: string }>(dm.url, ctx.key, "POST", "/v1/webhooks", { url: receiver.url, name: "bench relay" }, 200);
    const subscribe = (emitter_id: string) =>
      apiData(dm.url, ctx.key, "POST", "/v1/subscriptions", { emitter_id, listener_id: hook.id }, 200);
    await subscribe(RELAY_WORKFLOW);
    const queuedSource = await createSource(rt, "bench-relay-queued", QUEUED_COMPONENT);
    const inlineSource = await createSource(rt, "bench-relay-inline", INLINE_RELAY_COMPONENT);
    try {
      await subscribe(queuedSource.id);
      await subscribe(inlineSource.id);
      const o = {
        receiver,
        connections: S.connections,
        durationS: S.durationS,
        warmupS: S.warmupS,
        deadlineS: RELAY_DEADLINE_S,
        meter: () => ctx.meter(),
        quiesce: (label: string) => ctx.quiesce(label),
        ensureAlive: () => dm.ensureAlive(),
        log,
      };
      // The same event everywhere: wrapped for the emit ingress, as is for the sources' bodies.
      const event = JSON.stringify(smallEvent(1));
      const runs: RelayRun[] = [];
      for (const t of [
        {
          variant: "single",
          url: `${dm.url}/v1/workflows/${RELAY_WORKFLOW}/events`,
          headers: { authorization: `Bearer ${ctx.key}` },
          body: `{"event":${event}}`,
          expect: 202,
        },
        { variant: "queued", url: endpointOf(queuedSource), body: event, expect: 200 },
        { variant: "inline", url: endpointOf(inlineSource), body: event, expect: 200 },
      ] as const) {
        log(`relay, ${t.variant}: ${S.durationS}s, ${S.connections} connections, after a ${S.warmupS} s warm-up`);
        const r = await relayRun(o, t);
        runs.push(r);
        const other = r.load.bad ? `; other answers: ${JSON.stringify(r.load.statuses)}` : "";
        log(
          `  ${fmt(r.perSec)} delivered/s (${r.delivered}/${r.expected} in ${fmt(r.spanS, 1)} s${r.complete ? "" : ", DEADLINE HIT"}); ` +
            `${fmt(r.load.reqPerSec)} req/s accepted, ${r.inFlightAtLoadEnd} not yet delivered at load end; ` +
            `${fmt(daemonUs(r))} µs daemon CPU per delivered event; other CPU ${Math.round(r.cost.pct.other ?? 0)} %${other}`,
        );
      }
      const [single, queued, inline] = runs as [RelayRun, RelayRun, RelayRun];
      for (const r of [queued, inline]) {
        log(
          `  ${r.variant} / single: ${fmt(r.perSec / single.perSec, 2)}× delivered/s, ${fmt(daemonUs(single) / daemonUs(r), 2)}× CPU per delivered event (single µs / ${r.variant} µs); target ≥ 0.5×`,
        );
      }
      await ctx.quiesce("after the relay");
      const relayResult: RelayResult = { single, queued, inline, deadlineS: RELAY_DEADLINE_S, inlineConcurrency };
      return { relay: relayResult };
    } finally {
      await deleteSource(rt, queuedSource.id).catch(() => {});
      await deleteSource(rt, inlineSource.id).catch(() => {});
    }
  },
};
