/**
 * Subscription filters (SPEC §12): the drain of a backlog whose every event matches one webhook
 * subscription, next to the same drain where each event also matches 10 filtered subscriptions
 * (workflow listeners whose filters refuse it, so the deliveries are the same). Each drain: the
 * deployment stops, an API-only daemon pre-loads the backlog, a fresh deployment drains it.
 * Target (issue 15): the filtered drain within 10 % of the plain one.
 */
import { randomBytes } from "node:crypto";
import { type DrainResult, drainResult } from "../baselines.js";
import { type BenchContext, type Phase, preloadBacklog } from "../context.js";
import { apiData, startDaemonProcess } from "../daemon-process.js";
import { FILTERED_SUBSCRIPTIONS } from "../report.js";
import { metricValue, scrape } from "../runtime.js";
import { fmt } from "../stats.js";

const PLAIN_WORKFLOW = "p_bench_unfiltered";
const FILTERED_WORKFLOW = "p_bench_filtered";

/**
 * Filters of the shape users write (several conditions, an $or) over the bench's events
 * (`smallEvent`: {seq, kind: "bench", msg, n: 42, ok: true}); the webhook's matches every event,
 * each of the 10 others refuses every event on its last condition.
 */
const MATCHING = { kind: "bench", seq: { $gte: 0 }, $or: [{ ok: true }, { "meta.force": { $exists: true } }] };
const refusing = (i: number) => ({
  kind: { $in: ["bench", "order"] },
  msg: { $startsWith: "hello" },
  $or: [{ ok: false }, { n: { $gt: 42 + i } }],
});

async function drainOnce(ctx: BenchContext, workflow: string, label: string): Promise<{ result: DrainResult; filteredCount?: number }> {
  const { settings: S, redis, keys, receiver, log } = ctx;
  await ctx.stopDeployment();
  const apiOnly = await startDaemonProcess(
    { redisUrl: ctx.redisServer.url, adminToken: `bench-admin-${randomBytes(8).toString("hex")}`, roles: "api" },
    `daemon(api, pre-load ${label})`,
  );
  try {
    await preloadBacklog({ url: apiOnly.url, key: ctx.key, redis, keys, log }, workflow, S.backlog);
  } finally {
    await apiOnly.stop();
  }
  receiver.reset();
  const d = await ctx.deploy();
  const meter = await ctx.meter();
  const complete = await receiver.waitFor(S.backlog, 120_000);
  d.ensureAlive();
  const result = drainResult(receiver, S.backlog, complete, await meter(receiver.count()));
  const filteredCount = ctx.split ? undefined : metricValue(await scrape(d.url), "tributary_deliveries_total", { outcome: "filtered" });
  log(`  ${label}: ${fmt(result.perSec)} deliveries/s (${result.delivered}/${result.expected})`);
  return { result, filteredCount };
}

export const filters: Phase = {
  name: "filters",
  needs: ["daemon", "worker"],
  async run(ctx) {
    const { receiver, log } = ctx;
    const url = ctx.dep.url;
    const hook = await apiData<{ id: string }>(url, ctx.key, "POST", "/v1/webhooks", { url: receiver.url, name: "bench filters" }, 200);
    const subscribe = (emitter_id: string, listener_id: string, filter?: object) =>
      apiData(url, ctx.key, "POST", "/v1/subscriptions", { emitter_id, listener_id, filter }, 200);
    await subscribe(PLAIN_WORKFLOW, hook.id);
    await subscribe(FILTERED_WORKFLOW, hook.id, MATCHING);
    for (let i = 0; i < FILTERED_SUBSCRIPTIONS; i++) await subscribe(FILTERED_WORKFLOW, `p_bench_refusing_${i}`, refusing(i));
    log(`drain without filters, then with ${FILTERED_SUBSCRIPTIONS} filtered subscriptions per event (plus the webhook's, filtered too)`);
    const plain = await drainOnce(ctx, PLAIN_WORKFLOW, "without filters");
    const filtered = await drainOnce(ctx, FILTERED_WORKFLOW, `${FILTERED_SUBSCRIPTIONS} filtered subscriptions`);
    return { filterDrain: { plain: plain.result, filtered: filtered.result, filteredCount: filtered.filteredCount } };
  },
};
