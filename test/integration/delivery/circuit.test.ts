import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Client } from "../../helpers/daemon.js";
import {
  closeHarness,
  createWebhook,
  deliveries,
  type DeliveryView,
  emit,
  type Harness,
  harness,
  quiet,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";
import { type AnswerFn, type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { CircuitStore } from "../../../src/store/circuit.js";
import { createKeys } from "../../../src/store/keys.js";

/**
 * The circuit breaker and receiver-driven control end to end (SPEC §12), through a daemon with
 * CIRCUIT_FAILURE_THRESHOLD=3 and CIRCUIT_COOLDOWN=2s (and the test daemon's
 * DELIVERY_RETRY_SCHEDULE=100ms,200ms,400ms: 4 attempts per delivery), against a loopback receiver.
 * A second daemon, with a cool-down of an hour, shows that deleting a webhook releases the
 * deliveries waiting on its circuit.
 */

const answers = new Map<string, AnswerFn>();
let rx: Receiver;
let h: Harness;
let hourly: Harness;
let paths = 0;

beforeAll(async () => {
  rx = await startReceiver((req) => (answers.get(req.path.split("?")[0] ?? "") ?? (() => ({ status: 200 })))(req));
  [h, hourly] = await Promise.all([
    harness({ CIRCUIT_FAILURE_THRESHOLD: "3", CIRCUIT_COOLDOWN: "2s" }),
    harness({ CIRCUIT_FAILURE_THRESHOLD: "3", CIRCUIT_COOLDOWN: "1h" }),
  ]);
});
afterAll(async () => {
  await Promise.all([closeHarness(h), closeHarness(hourly)]);
  await rx?.close();
});

function hookPath(name: string, answer: AnswerFn): string {
  const p = `/${name}-${++paths}`;
  answers.set(p, answer);
  return p;
}

interface Circuit {
  state: "closed" | "open" | "half_open";
  consecutive_failures: number;
  opened_at: number | null;
  next_probe_at: number | null;
}

async function webhookObject(api: Client, id: string): Promise<{ active: boolean; circuit: Circuit }> {
  const res = await api.get(`/v1/webhooks/${id}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

const waitCircuit = (api: Client, id: string, ok: (c: Circuit) => boolean, what: string) =>
  waitFor(
    async () => {
      const c = (await webhookObject(api, id)).circuit;
      return ok(c) ? c : undefined;
    },
    { timeoutMs: 20_000, what },
  );

/** The events of one of the webhook's health channels (SPEC §12), newest first. */
async function healthEvents(api: Client, id: string, channel: string): Promise<Record<string, unknown>[]> {
  const res = await api.get(`/v1/webhooks/${id}/event_summaries`, { query: { event_name: channel, expand: "event" } });
  expect(res.status, res.text).toBe(200);
  return res.body.data.map((s: { event: Record<string, unknown> }) => s.event);
}

/** Every delivery of the webhook, once `n` of them are settled (delivered or failed). */
const settled = (api: Client, id: string, n: number) =>
  waitFor(
    async () => {
      const { data } = await deliveries(api, id, { limit: 50 });
      return data.length === n && data.every((d) => d.status !== "pending") ? data : undefined;
    },
    { timeoutMs: 30_000, what: `${n} settled deliveries of ${id}` },
  );

const statusCodes = (d: DeliveryView | undefined) => d?.attempts.map((a) => a.status_code);
const byEvent = (list: DeliveryView[], eventId: string) => list.find((d) => d.event_id === eventId);

async function metric(td: Harness["td"], pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${td.url}/metrics`)).text();
  const m = pattern.exec(text);
  return m ? Number(m[1]) : 0;
}

describe("circuit breaker", () => {
  it("shows a closed circuit on a new webhook, in POST, GET and PUT, not in the list", async () => {
    const u = await h.td.createUser();
    const created = await u.api.post("/v1/webhooks", { json: { url: rx.url("/never") } });
    const closed = { state: "closed", consecutive_failures: 0, opened_at: null, next_probe_at: null };
    expect(created.body.data.circuit).toEqual(closed);
    expect((await webhookObject(u.api, created.body.data.id)).circuit).toEqual(closed);
    expect((await u.api.put(`/v1/webhooks/${created.body.data.id}`, { json: { name: "x" } })).body.data.circuit).toEqual(closed);
    expect((await u.api.get("/v1/users/me/webhooks")).body.data[0]).not.toHaveProperty("circuit");
  });

  it("opens after 3 consecutive failures, attempts nothing during the cool-down, and a successful probe closes it and releases the waiting deliveries at once, their retries unspent", async () => {
    const u = await h.td.createUser();
    let failing = true;
    const path = hookPath("recovers", async (req) => {
      if (failing) return { status: 500 };
      // The probe is slow, so the deliveries that wake meanwhile wait again for its lease (10 s).
      if (req.nthOnPath === 4) await sleep(1500);
      return { status: 200 };
    });
    const res = await u.api.post("/v1/webhooks", { json: { url: rx.url(path), timeout_ms: 5000 } });
    const hook = res.body.data as { id: string };
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    const a = await emit(u.api, p, { n: "a" });

    const open = await waitCircuit(u.api, hook.id, (c) => c.state === "open", "the circuit to open");
    expect(open.consecutive_failures).toBe(3);
    expect(open.opened_at).toEqual(expect.any(Number));
    expect((open.next_probe_at as number) - (open.opened_at as number)).toBeGreaterThanOrEqual(2);
    expect((open.next_probe_at as number) - (open.opened_at as number)).toBeLessThanOrEqual(3);
    expect(rx.to(path)).toHaveLength(3);
    expect(await metric(h.td, /^tributary_circuits_open (\d+)/m)).toBeGreaterThanOrEqual(1);

    // Deliveries made while it is open wait too.
    const b = await emit(u.api, p, { n: "b" });
    const c = await emit(u.api, p, { n: "c" });
    failing = false;

    const got = await rx.waitFor((r) => (r.to(path).length >= 6 ? r.to(path) : undefined), { timeoutMs: 30_000, what: "6 requests" });
    const [probe, ...released] = got.slice(3);
    // Nothing was sent during the cool-down: the probe came after it.
    expect(probe?.at).toBeGreaterThanOrEqual((open.opened_at as number) * 1000 + 2000);
    // Released when the probe's answer (1.5 s) closed it, not at the end of the lease they waited for.
    for (const r of released) expect(r.at - (probe?.at as number)).toBeLessThan(6000);

    const list = await settled(u.api, hook.id, 3);
    // The first delivery's 4th and last attempt waited and was made: its retries were not spent.
    expect(statusCodes(byEvent(list, a))).toEqual([500, 500, 500, 200]);
    expect(statusCodes(byEvent(list, b))).toEqual([200]);
    expect(statusCodes(byEvent(list, c))).toEqual([200]);
    expect((await webhookObject(u.api, hook.id)).circuit).toEqual({
      state: "closed",
      consecutive_failures: 0,
      opened_at: null,
      next_probe_at: null,
    });
    await quiet(h);
    expect(rx.to(path)).toHaveLength(6);
    expect(await metric(h.td, /^tributary_circuit_transitions_total\{to="open"\} (\d+)/m)).toBeGreaterThanOrEqual(1);
    expect(await metric(h.td, /^tributary_circuit_transitions_total\{to="half_open"\} (\d+)/m)).toBeGreaterThanOrEqual(1);
    expect(await metric(h.td, /^tributary_circuit_transitions_total\{to="closed"\} (\d+)/m)).toBeGreaterThanOrEqual(1);
    expect(
      await metric(h.td, /^tributary_deliveries_total\{listener_kind="webhook",outcome="circuit_open"\} (\d+)/m),
    ).toBeGreaterThanOrEqual(2);
    // The opening and the closing are the webhook's health events (SPEC §12), one each.
    expect(await healthEvents(u.api, hook.id, "$webhook_disabled")).toEqual([
      expect.objectContaining({ webhook_id: hook.id, reason: "circuit" }),
    ]);
    expect(await healthEvents(u.api, hook.id, "$webhook_recovered")).toEqual([
      expect.objectContaining({ webhook_id: hook.id, reason: "circuit" }),
    ]);
  });

  it("gives the probe a head start: a backlog parked on the open circuit is not turned away again while a slow probe runs", async () => {
    const u = await h.td.createUser();
    let failing = true;
    let answered = false;
    const path = hookPath("head-start", async () => {
      if (failing) return { status: 500 };
      // The probe takes a while, as a receiver just back often does.
      if (!answered) await sleep(300);
      answered = true;
      return { status: 200 };
    });
    const res = await u.api.post("/v1/webhooks", { json: { url: rx.url(path), timeout_ms: 5000 } });
    const hook = res.body.data as { id: string };
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    await emit(u.api, p, { n: "opener" });
    await waitCircuit(u.api, hook.id, (c) => c.state === "open", "the circuit to open");
    const N = 60;
    for (let i = 0; i < N; i += 10) await Promise.all(Array.from({ length: 10 }, (_, j) => emit(u.api, p, { n: i + j })));

    // Every delivery parked for the next probe, at least 700 ms away (else the probe fails, the
    // backlog is turned away to the next one, and this waits for that).
    const keys = createKeys(h.td.prefix);
    const circuits = new CircuitStore(h.redis, keys, { threshold: 3, cooldownMs: 2000, maxCooldownMs: 3_600_000 });
    await waitFor(
      async () => {
        const { nextProbeAtMs } = await circuits.read(u.id, hook.id);
        if (nextProbeAtMs === null || nextProbeAtMs - Date.now() < 700) return false;
        const [parked, dueBefore, c] = await Promise.all([
          h.redis.zcard(keys.webhookCircuitWaiting(u.id, hook.id)),
          h.redis.zcount(keys.webhookCircuitWaiting(u.id, hook.id), "-inf", `(${nextProbeAtMs}`),
          h.queue.getJobCounts("wait", "active", "prioritized"),
        ]);
        return parked >= N && dueBefore === 0 && (c.wait ?? 0) + (c.active ?? 0) + (c.prioritized ?? 0) === 0;
      },
      { timeoutMs: 30_000, intervalMs: 20, what: "the deliveries parked for the next probe" },
    );
    const turnedAway = /^tributary_deliveries_total\{listener_kind="webhook",outcome="circuit_open"\} (\d+)/m;
    const before = await metric(h.td, turnedAway);
    failing = false;

    const list = await waitFor(
      async () => {
        const { data } = await deliveries(u.api, hook.id, { limit: 100 });
        const done = data.filter((d) => d.status === "delivered");
        return done.length >= N ? done : undefined;
      },
      { timeoutMs: 30_000, what: `${N} deliveries delivered` },
    );
    expect(list.length).toBeGreaterThanOrEqual(N);
    // Without the head start, each delivery that came due while the probe ran (a third of them)
    // was turned away until the probe's success released it.
    expect((await metric(h.td, turnedAway)) - before).toBeLessThanOrEqual(N / 10);
    await quiet(h);
  });

  it("opens again when the probe fails, with the cool-down doubled", async () => {
    const u = await h.td.createUser();
    const path = hookPath("down", () => ({ status: 503 }));
    const hook = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    await emit(u.api, p, { n: 1 });

    const first = await waitCircuit(u.api, hook.id, (c) => c.state === "open", "the circuit to open");
    // The 4th attempt probes after the cool-down, fails, and opens the circuit for twice as long.
    const probe = await rx.waitFor((r) => r.to(path)[3], { timeoutMs: 20_000, what: "the probe" });
    expect(probe.at).toBeGreaterThanOrEqual((first.opened_at as number) * 1000 + 2000);
    const again = await waitCircuit(u.api, hook.id, (c) => c.consecutive_failures === 4, "the probe's failure");
    expect(again.state).toBe("open");
    expect(again.opened_at).toBe(first.opened_at);
    const cooldownMs = (again.next_probe_at as number) * 1000 - probe.at;
    expect(cooldownMs).toBeGreaterThanOrEqual(4000 - 100);
    // Rounded up to a second, plus the time the probe's answer took to be recorded.
    expect(cooldownMs).toBeLessThanOrEqual(5000 + 2000);

    // That delivery used its last attempt; a new one waits out the doubled cool-down, then probes.
    const list = await settled(u.api, hook.id, 1);
    expect(statusCodes(list[0])).toEqual([503, 503, 503, 503]);
    await emit(u.api, p, { n: 2 });
    const next = await rx.waitFor((r) => r.to(path)[4], { timeoutMs: 20_000, what: "the second probe" });
    expect(next.at).toBeGreaterThanOrEqual((again.next_probe_at as number) * 1000 - 1000);
    expect(next.at - probe.at).toBeGreaterThanOrEqual(4000 - 100);
    // Its remaining attempts would wait for ever longer cool-downs: deleting the webhook ends them.
    await u.api.del(`/v1/webhooks/${hook.id}`);
    await quiet(h);
  });

  it("releases the waiting deliveries at the webhook's rate limit when the circuit closes", async () => {
    const u = await h.td.createUser();
    let failing = true;
    const path = hookPath("limited", () => ({ status: failing ? 500 : 200 }));
    const res = await u.api.post("/v1/webhooks", { json: { url: rx.url(path), rate_limit_per_second: 2 } });
    const hook = res.body.data as { id: string };
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    await emit(u.api, p, { n: 0 });
    await waitCircuit(u.api, hook.id, (c) => c.state === "open", "the circuit to open");
    for (let i = 1; i <= 6; i++) await emit(u.api, p, { n: i });
    failing = false;

    const got = await rx.waitFor((r) => (r.to(path).length >= 10 ? r.to(path) : undefined), { timeoutMs: 30_000, what: "10 requests" });
    // After the 3 failures: the probe and the 6 released deliveries, no more than 2 (+1 at the edge) a second.
    const at = got.slice(3).map((r) => r.at);
    for (const t of at) expect(at.filter((x) => x >= t && x < t + 1000).length).toBeLessThanOrEqual(3);
    const list = await settled(u.api, hook.id, 7);
    expect(list.every((d) => d.status === "delivered")).toBe(true);
    await quiet(h);
    expect(rx.to(path)).toHaveLength(10);
  });

  it("releases the deliveries waiting on a deleted webhook's circuit, instead of leaving them for the cool-down", async () => {
    const u = await hourly.td.createUser();
    const path = hookPath("deleted", () => ({ status: 500 }));
    const hook = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    await emit(u.api, p, { n: 1 });
    await waitCircuit(u.api, hook.id, (c) => c.state === "open", "the circuit to open");
    await emit(u.api, p, { n: 2 });
    // Both deliveries now wait for an hour, as delayed jobs.
    await waitFor(async () => (await hourly.queue.getJobCounts("delayed")).delayed === 2, { timeoutMs: 15_000, what: "2 waiting jobs" });

    const del = await u.api.del(`/v1/webhooks/${hook.id}`);
    expect(del.status, del.text).toBe(204);
    await quiet(hourly);
    expect(rx.to(path)).toHaveLength(3);
  });
});

describe("receiver-driven control (webhook-delivery response header)", () => {
  it("deactivates the webhook on `disable`, as a 410 does, without counting a circuit failure", async () => {
    const u = await h.td.createUser();
    const path = hookPath("disable", () => ({ status: 400, headers: { "webhook-delivery": "disable" } }));
    const hook = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    await emit(u.api, p, { n: 1 });

    const [d] = await settled(u.api, hook.id, 1);
    expect(d?.status).toBe("failed");
    expect(statusCodes(d)).toEqual([400]);
    expect(d?.attempts[0]?.error).toMatch(/webhook-delivery: disable/);
    const w = await webhookObject(u.api, hook.id);
    expect(w.active).toBe(false);
    expect(w.circuit.consecutive_failures).toBe(0);
    await emit(u.api, p, { n: 2 });
    await settled(u.api, hook.id, 2);
    await quiet(h);
    expect(rx.to(path)).toHaveLength(1);
  });

  it("gives up the delivery at once on `abort-message`, and keeps delivering the next ones", async () => {
    const u = await h.td.createUser();
    const path = hookPath("abort", (req) =>
      req.nthOnPath === 1 ? { status: 422, headers: { "Webhook-Delivery": "abort-message" } } : { status: 200 },
    );
    const hook = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, hook.id);
    const first = await emit(u.api, p, { n: 1 });
    await settled(u.api, hook.id, 1);
    const second = await emit(u.api, p, { n: 2 });

    const list = await settled(u.api, hook.id, 2);
    expect(byEvent(list, first)?.status).toBe("failed");
    expect(statusCodes(byEvent(list, first))).toEqual([422]);
    expect(byEvent(list, first)?.attempts[0]?.error).toMatch(/abort-message/);
    expect(byEvent(list, second)?.status).toBe("delivered");
    expect((await webhookObject(u.api, hook.id)).active).toBe(true);
    await quiet(h);
    expect(rx.to(path)).toHaveLength(2);
  });
});
