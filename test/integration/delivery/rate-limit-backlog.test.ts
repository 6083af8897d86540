import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { Client } from "../../helpers/daemon.js";
import {
  emit,
  h,
  hookPath,
  installDeliveryHarness,
  NO_CIRCUIT,
  ownHarness,
  rx,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";
import { waitFor } from "../../helpers/receiver.js";

/**
 * A rate-limited webhook with a backlog (SPEC §12 `rate_limit_per_second`): each waiting delivery
 * reserves a start slot of its own and comes back once, at its turn (store/scripts/webhook-slot.ts),
 * instead of every one of them trying again every interval. Before slots, 400 deliveries at 5/s
 * made thousands of bounces within seconds (each one a queue round that other users' deliveries
 * queue behind).
 */

installDeliveryHarness(NO_CIRCUIT);

const RATE = 5;
const BACKLOG = 400;
/** How long the backlog is watched once it is queued. */
const WINDOW_MS = 8000;

async function webhook(api: Client, url: string, settings: Record<string, unknown> = {}): Promise<string> {
  const res = await api.post("/v1/webhooks", { json: { url, ...settings } });
  expect(res.status, res.text).toBe(200);
  return res.body.data.id;
}

/** `tributary_deliveries_total{listener_kind="webhook",outcome="rate_limited"}`. */
async function bounces(): Promise<number> {
  const text = await (await fetch(`${h.td.url}/metrics`)).text();
  const m = /tributary_deliveries_total\{[^}]*outcome="rate_limited"[^}]*\} (\d+)/.exec(text);
  return m ? Number(m[1]) : 0;
}

describe("a rate-limited backlog", () => {
  it("waits one reserved slot per delivery, starts at the rate, and leaves another user's delivery and retry on time", async () => {
    const a = await h.td.createUser("paid");
    const b = await h.td.createUser("paid");
    const aPath = hookPath("limited");
    const aEmitter = workflowId();
    await subscribe(a.api, aEmitter, await webhook(a.api, rx.url(aPath), { rate_limit_per_second: RATE }));
    const before = await bounces();
    for (let sent = 0; sent < BACKLOG; sent += 100) {
      const res = await a.api.post(`/v1/workflows/${aEmitter}/events`, {
        json: { events: Array.from({ length: 100 }, (_, i) => ({ event: { n: sent + i } })) },
      });
      expect(res.status, res.text).toBe(202);
    }
    const queuedAt = Date.now();

    // B: one delivery to a healthy webhook, and one whose first attempt fails and whose retry
    // (1 s later) succeeds, while A's backlog waits.
    const bOk = hookPath("b-ok");
    let failedOnce = false;
    const bRetry = hookPath("b-retry", () => {
      if (failedOnce) return { status: 200 };
      failedOnce = true;
      return { status: 500 };
    });
    const bEmitter = workflowId();
    const bRetryEmitter = workflowId();
    await subscribe(b.api, bEmitter, await webhook(b.api, rx.url(bOk)));
    await subscribe(b.api, bRetryEmitter, await webhook(b.api, rx.url(bRetry), { retry_schedule: "1s" }));
    await sleep(2000);
    const bSentAt = Date.now();
    await emit(b.api, bEmitter, { b: 1 });
    await emit(b.api, bRetryEmitter, { b: 2 });
    const [okAt, retried] = await Promise.all([
      rx.waitFor((r) => r.to(bOk)[0]?.at, { timeoutMs: 20_000, what: "B's delivery" }),
      rx.waitFor((r) => (r.to(bRetry).length >= 2 ? r.to(bRetry) : undefined), { timeoutMs: 20_000, what: "B's retry" }),
    ]);
    expect(okAt - bSentAt, "B's emit → delivery (ms)").toBeLessThan(2000);
    const [first, second] = retried.map((r) => r.at) as [number, number];
    expect(first - bSentAt, "B's emit → first attempt (ms)").toBeLessThan(2000);
    // The schedule's 1 s, spread ±20 %, plus at most about a second of queueing.
    expect(second - first, "B's retry after its 1 s delay (ms)").toBeGreaterThanOrEqual(750);
    expect(second - first, "B's retry after its 1 s delay (ms)").toBeLessThan(2500);

    const left = WINDOW_MS - (Date.now() - queuedAt);
    if (left > 0) await sleep(left);
    const elapsedMs = Date.now() - queuedAt;
    const made = (await bounces()) - before;
    const got = rx.to(aPath);
    // About one bounce per waiting delivery (its reservation), not one per interval per delivery.
    expect(made, `rate-limit bounces in ${elapsedMs} ms`).toBeLessThanOrEqual(BACKLOG * 1.5);
    expect(made, "rate-limit bounces").toBeGreaterThanOrEqual(BACKLOG / 2);
    // Starts at the rate: none lost to the schedule, and no second sees more than the rate plus one
    // (plus one more for the receiver's own timing).
    expect(got.length, `deliveries in ${elapsedMs} ms`).toBeGreaterThanOrEqual(Math.floor(((elapsedMs - 2000) / 1000) * RATE * 0.6));
    expect(got.length).toBeLessThanOrEqual(Math.ceil((elapsedMs / 1000) * RATE) + 2);
    const at = got.map((r) => r.at).sort((x, y) => x - y);
    for (let i = 0; i < at.length; i++) {
      const inWindow = at.filter((t) => t >= (at[i] as number) && t < (at[i] as number) + 1000).length;
      expect(inWindow, `arrivals within 1 s of #${i}`).toBeLessThanOrEqual(RATE + 2);
    }
    // In the order the events came: each delivery's turn follows the one reserved before it.
    const order = got.map((r) => (r.json as { n: number }).n);
    const inversions = order.filter((n, i) => i > 0 && n < (order[i - 1] as number)).length;
    expect(inversions, `order of arrival ${order.join(",")}`).toBeLessThanOrEqual(Math.ceil(order.length / 10));
  });
});

describe("a rate-limited backlog whose webhook's circuit opens", () => {
  const own = ownHarness({ CIRCUIT_FAILURE_THRESHOLD: "3", CIRCUIT_COOLDOWN: "2s" });

  it("probes when the cool-down ends, not after the slots the waiting deliveries had reserved", async () => {
    const td = own().td;
    const a = await td.createUser("paid");
    let down = true;
    const path = hookPath("flaky-limited", () => ({ status: down ? 500 : 200 }));
    const w = await webhook(a.api, rx.url(path), { rate_limit_per_second: 2, retry_schedule: "1h" });
    const emitter = workflowId();
    await subscribe(a.api, emitter, w);
    // 60 deliveries at 2/s: slots reserved up to 30 s ahead.
    const res = await a.api.post(`/v1/workflows/${emitter}/events`, {
      json: { events: Array.from({ length: 60 }, (_, i) => ({ event: { n: i } })) },
    });
    expect(res.status, res.text).toBe(202);
    const circuit = async () => (await a.api.get(`/v1/webhooks/${w}`)).body.data.circuit as { state: string };
    await waitFor(async () => (await circuit()).state === "open", { timeoutMs: 15_000, what: "the circuit to open" });
    down = false;
    const openedAt = Date.now();
    await waitFor(async () => (await circuit()).state === "closed", { timeoutMs: 20_000, intervalMs: 100, what: "the circuit to close" });
    // The 2 s cool-down, then the probe; not the 30 s of slots ahead.
    expect(Date.now() - openedAt, "open → closed (ms)").toBeLessThan(8000);
    await rx.waitFor((r) => (r.to(path).filter((q) => q.at > openedAt).length >= 4 ? true : undefined), {
      timeoutMs: 10_000,
      what: "deliveries after the circuit closed",
    });
  });
});
