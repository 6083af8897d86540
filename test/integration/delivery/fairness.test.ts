import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeHarness, emit, type Harness, harness, NO_CIRCUIT, subscribe, workflowId } from "../../helpers/delivery-e2e.js";
import type { Client } from "../../helpers/daemon.js";
import { type Receiver, startReceiver } from "../../helpers/receiver.js";

/**
 * Fairness between tenants and destinations (docs/decisions.md "Delivery fairness"), end to end
 * with the daemon's default caps (DELIVERY_CONCURRENCY_PER_USER and _PER_DESTINATION 64, direct
 * slots 64, worker concurrency 64): user A floods a receiver that never answers (each attempt
 * times out after 3 s) while user B delivers to a healthy receiver on another port. B's
 * deliveries must keep their latency, and so must A's own deliveries to that healthy receiver
 * (per-user 96 > per-destination 64); A's dead deliveries must still all be attempted.
 *
 * Without the caps, A's attempts held every direct slot and every queue worker, and B's deliveries
 * waited behind A's whole backlog: here (400 deliveries, half of them sent while B sends, 3 s
 * timeouts, 64 + 64 slots) over 10 s.
 */

const NOISY = 400;
const QUIET = 20;
const DEAD_TIMEOUT_MS = 3000;
/** B's p99, emit → received: generous for a loaded 2-core machine, far below A's backlog time. */
const QUIET_P99_BOUND_MS = 5000;

let h: Harness;
let dead: Receiver;
let healthy: Receiver;

beforeAll(async () => {
  dead = await startReceiver(() => "hang");
  healthy = await startReceiver(() => ({ status: 200 }));
  // The circuit breaker would stop the noisy user's attempts after a few failures; this test is
  // about the concurrency caps, so the circuits stay closed.
  h = await harness(NO_CIRCUIT);
});

afterAll(async () => {
  // The dead receiver first: hanging attempts end at once instead of holding the shutdown.
  await dead?.close();
  await closeHarness(h);
  await healthy?.close();
});

async function webhook(api: Client, url: string, settings: Record<string, unknown> = {}): Promise<string> {
  const res = await api.post("/v1/webhooks", { json: { url, ...settings } });
  expect(res.status, res.text).toBe(200);
  return res.body.data.id;
}

/** Nearest-rank percentile. */
function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
}

describe("delivery fairness", () => {
  it("keeps a healthy user's latency while another user's receiver never answers, and still attempts every noisy delivery", async () => {
    const a = await h.td.createUser("paid");
    const b = await h.td.createUser("paid");
    const aEmitter = workflowId();
    const bEmitter = workflowId();
    const aHealthyEmitter = workflowId();
    // A's retries come after the test (1 h): what is measured is the first attempts' pressure.
    await subscribe(a.api, aEmitter, await webhook(a.api, dead.url("/never"), { timeout_ms: DEAD_TIMEOUT_MS, retry_schedule: "1h" }));
    await subscribe(b.api, bEmitter, await webhook(b.api, healthy.url("/ok")));
    // A also has a healthy endpoint: A's dead host must not hold it up either.
    await subscribe(a.api, aHealthyEmitter, await webhook(a.api, healthy.url("/a-ok")));

    let noisy = 0;
    const flood = async (n: number) => {
      for (let sent = 0; sent < n; sent += 20)
        await Promise.all(Array.from({ length: Math.min(20, n - sent) }, () => emit(a.api, aEmitter, { noisy: noisy++ })));
    };
    // A floods: half of its events at once, and keeps going while B sends (below).
    await flood(NOISY / 2);
    // Let A's attempts take every slot they can.
    await dead.waitFor((r) => r.requests.length >= 64, { timeoutMs: 20_000, what: "A's first attempts to reach the dead receiver" });

    // B delivers while A saturates: one event every 100 ms or so, its emit time noted, and A's
    // healthy endpoint one every other time; A adds the other half of its flood meanwhile.
    const sentAt = new Map<number, number>();
    const aSentAt = new Map<number, number>();
    for (let i = 0; i < QUIET; i++) {
      sentAt.set(i, Date.now());
      await emit(b.api, bEmitter, { quiet: i });
      if (i % 2 === 0) {
        aSentAt.set(i, Date.now());
        await emit(a.api, aHealthyEmitter, { quiet: i });
      }
      await flood(NOISY / 2 / QUIET);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(noisy).toBe(NOISY);
    const latenciesAt = async (path: string, sent: Map<number, number>) => {
      const arrivals = await healthy.waitFor(
        (r) => {
          const got = new Map<number, number>();
          for (const req of r.to(path)) {
            const i = (req.json as { quiet?: number } | undefined)?.quiet;
            if (typeof i === "number" && !got.has(i)) got.set(i, req.at);
          }
          return got.size === sent.size ? got : undefined;
        },
        { timeoutMs: 90_000, what: `all ${sent.size} deliveries to ${path}` },
      );
      return [...arrivals].map(([i, at]) => at - (sent.get(i) ?? 0));
    };
    const latencies = await latenciesAt("/ok", sentAt);
    const p99 = percentile(latencies, 99);
    console.info(`fairness: B's p99 emit → received ${p99} ms (median ${percentile(latencies, 50)} ms) while A saturates`);
    expect(p99, `B's latencies (ms): ${latencies.join(", ")}`).toBeLessThan(QUIET_P99_BOUND_MS);
    const own = await latenciesAt("/a-ok", aSentAt);
    console.info(`fairness: A's own healthy endpoint, p99 ${percentile(own, 99)} ms`);
    expect(percentile(own, 99), `A's healthy endpoint latencies (ms): ${own.join(", ")}`).toBeLessThan(QUIET_P99_BOUND_MS);

    // A's deliveries are not lost: each is attempted (put off by the caps, never dropped).
    const attempted = await dead.waitFor(
      (r) => {
        const ids = new Set(r.requests.map((req) => req.headers["x-tributary-delivery-id"]));
        return ids.size >= NOISY ? ids.size : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 250, what: `all ${NOISY} of A's deliveries to be attempted` },
    );
    expect(attempted).toBe(NOISY);
  }, 240_000);
});
