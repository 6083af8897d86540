import { monitorEventLoopDelay } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Client } from "../../helpers/daemon.js";
import { closeHarness, createWebhook, emit, type Harness, harness, workflowId } from "../../helpers/delivery-e2e.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";

/**
 * The filter budget end to end (docs/security.md "Filter budget"), with the daemon's defaults:
 * user A has ten valid filters of 63 `$contains` each and emits events carrying a 200,000-element
 * array (400 KB, within the body limit); user B emits small events to a webhook on a loopback
 * receiver. B's emit → delivery and B's API calls must stay under a second while A's load runs,
 * A's events must reach none of A's filtered webhooks (over budget), and A must be told on the
 * emitter's `$errors`.
 *
 * Without the budget, each of A's events kept the event loop busy for seconds (10 × 63 scans of
 * 200,000 elements): B's deliveries and API calls waited behind them.
 */

const FILTERS = 10;
const CONDITIONS = 63;
const ITEMS = 200_000;
/** A's events: sent two at a time while B measures, at most this many. */
const A_EVENTS_MAX = 12;
/**
 * Between A's pairs: without the budget a pair held the loop for seconds; with it, what is left of
 * A's load is the cost of carrying 400 KB events, which is not what this test measures.
 */
const A_PAUSE_MS = 300;
const B_ROUNDS = 10;
const BOUND_MS = 1000;

let h: Harness;
let rx: Receiver;

beforeAll(async () => {
  rx = await startReceiver();
  h = await harness();
});

afterAll(async () => {
  await closeHarness(h);
  await rx?.close();
});

async function subscribeWith(api: Client, emitter: string, listener: string, filter?: unknown): Promise<void> {
  const res = await api.post("/v1/subscriptions", { json: { emitter_id: emitter, listener_id: listener, filter } });
  expect(res.status, res.text).toBe(200);
}

/** A counter of the harness daemon's /metrics (0 before the first). */
async function metric(series: string): Promise<number> {
  const text = await (await fetch(`${h.td.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return Number(line?.split(" ")[1] ?? 0);
}

async function timed<T>(call: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const start = Date.now();
  const value = await call();
  return { value, ms: Date.now() - start };
}

describe("filter budget", () => {
  it("keeps another user's emit → delivery and API under a second while one user's filters would scan 200,000-element arrays", async () => {
    const a = await h.td.createUser("paid");
    const b = await h.td.createUser("paid");
    const aEmitter = workflowId();
    const bEmitter = workflowId();
    for (let f = 0; f < FILTERS; f++) {
      const hook = await createWebhook(a.api, rx.url(`/a-${f}`));
      const filter = { $or: Array.from({ length: CONDITIONS }, (_, i) => ({ items: { $contains: `absent-${f}-${i}` } })) };
      await subscribeWith(a.api, aEmitter, hook.id, filter);
    }
    const bHook = await createWebhook(b.api, rx.url("/b"));
    await subscribeWith(b.api, bEmitter, bHook.id);
    const overBudgetBefore = await metric('tributary_deliveries_total{listener_kind="webhook",outcome="filter_budget"}');

    // Serialised once: this process also runs the daemon, and should spend its time there.
    const big = JSON.stringify({ event: { items: new Array(ITEMS).fill(0) } });
    expect(big.length).toBeLessThan(512 * 1024);
    const emitBig = async () => {
      const res = await a.api.post(`/v1/workflows/${aEmitter}/events`, { body: big, headers: { "content-type": "application/json" } });
      expect(res.status, res.text).toBe(202);
    };
    // A's load: two events at a time, a pair every A_PAUSE_MS, until B is done (bounded in count).
    let bDone = false;
    let aSent = 0;
    const aLoad = (async () => {
      while (!bDone && aSent < A_EVENTS_MAX) {
        await Promise.all([emitBig(), emitBig()]);
        aSent += 2;
        await new Promise((r) => setTimeout(r, A_PAUSE_MS));
      }
    })();
    // B starts once A's first events are in.
    await waitFor(() => aSent >= 2, { timeoutMs: 30_000, what: "A's first events to be accepted" });

    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    const deliveries: number[] = [];
    const apiCalls: number[] = [];
    try {
      for (let i = 0; i < B_ROUNDS; i++) {
        const sentAt = Date.now();
        await emit(b.api, bEmitter, { round: i });
        const arrived = await rx.waitFor((r) => r.to("/b").find((req) => (req.json as { round?: number })?.round === i), {
          timeoutMs: 30_000,
          intervalMs: 5,
          what: `B's delivery ${i}`,
        });
        deliveries.push(arrived.at - sentAt);
        const call = await timed(() => b.api.get(`/v1/webhooks/${bHook.id}`));
        expect(call.value.status).toBe(200);
        apiCalls.push(call.ms);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      bDone = true;
      loop.disable();
      await aLoad;
    }
    console.info(
      `filter budget: A sent ${aSent} events; B emit → delivery max ${Math.max(...deliveries)} ms, API max ${Math.max(...apiCalls)} ms; ` +
        `event loop delay max ${(loop.max / 1e6).toFixed(0)} ms, p99 ${(loop.percentile(99) / 1e6).toFixed(0)} ms`,
    );
    expect(aSent).toBeGreaterThanOrEqual(2);
    expect(Math.max(...deliveries), `B's emit → delivery (ms): ${deliveries.join(", ")}`).toBeLessThan(BOUND_MS);
    expect(Math.max(...apiCalls), `B's API calls (ms): ${apiCalls.join(", ")}`).toBeLessThan(BOUND_MS);

    // A's events reached none of A's filtered webhooks, each kept out as over budget...
    await waitFor(
      async () =>
        (await metric('tributary_deliveries_total{listener_kind="webhook",outcome="filter_budget"}')) - overBudgetBefore >= aSent * FILTERS,
      { timeoutMs: 60_000, what: "every one of A's events to be fanned out" },
    );
    expect(rx.requests.filter((r) => r.path.startsWith("/a-"))).toEqual([]);
    // ...and A is told on the emitter's $errors (once: the report is throttled per emitter).
    const errors = await waitFor(
      async () => {
        const res = await a.api.get(`/v1/workflows/${aEmitter}/$errors/event_summaries`, { query: { expand: "event" } });
        expect(res.status, res.text).toBe(200);
        return res.body.data.length > 0 ? (res.body.data as { event: unknown }[]) : undefined;
      },
      { timeoutMs: 10_000, what: "the filter budget report on A's $errors" },
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]?.event).toMatchObject({
      error: { code: "FILTER_BUDGET_EXCEEDED", msg: expect.stringContaining("subscription filters") },
      original_event: null,
      original_context: { emitter_id: aEmitter, listener_ids: expect.arrayContaining([expect.stringMatching(/^wh_/)]) },
    });
    // B has no such report.
    expect((await b.api.get(`/v1/workflows/${bEmitter}/$errors/event_summaries`)).body.data).toEqual([]);
  }, 240_000);
});
