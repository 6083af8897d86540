import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { type Client, startTestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import {
  arrived,
  createWebhook,
  deliveries,
  emit,
  h,
  hookPath,
  installDeliveryHarness,
  onlyDelivery,
  quiet,
  rx,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";

/**
 * Per-webhook settings end to end (SPEC §12): `headers`, `timeout_ms`, `retry_schedule` and
 * `rate_limit_per_second`, validated by the API, returned on the webhook object and applied to
 * every attempt (direct first attempts, queued retries and replays). The daemon's defaults:
 * DELIVERY_RETRY_SCHEDULE=100ms,200ms,400ms (4 attempts), DELIVERY_TIMEOUT_MS=2000.
 */

installDeliveryHarness();

async function webhookWith(api: Client, url: string, settings: Record<string, unknown>): Promise<Record<string, unknown> & { id: string }> {
  const res = await api.post("/v1/webhooks", { json: { url, ...settings } });
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

describe("per-webhook settings", () => {
  it("returns the settings (null when unset), and PUT changes, keeps or clears them", async () => {
    const u = await h.td.createUser();
    const plain = await createWebhook(u.api, rx.url(hookPath("plain")));
    expect(plain).toMatchObject({ headers: null, timeout_ms: null, retry_schedule: null, rate_limit_per_second: null });

    const w = await webhookWith(u.api, rx.url(hookPath("set")), {
      headers: { "X-Team": "blue" },
      timeout_ms: 500,
      retry_schedule: "1s, 5s",
      rate_limit_per_second: 3,
    });
    const all = { headers: { "x-team": "blue" }, timeout_ms: 500, retry_schedule: "1s,5s", rate_limit_per_second: 3 };
    expect(w).toMatchObject(all);
    expect((await u.api.get(`/v1/webhooks/${w.id}`)).body.data).toMatchObject(all);
    const listed = (await u.api.get("/v1/users/me/webhooks")).body.data.find((x: { id: string }) => x.id === w.id);
    expect(listed).toMatchObject(all);

    // The query string works too (headers as JSON text); absent settings stay as they were.
    const put = await u.api.put(`/v1/webhooks/${w.id}`, { query: { timeout_ms: "700", headers: '{"X-Env":"prod"}' } });
    expect(put.status, put.text).toBe(200);
    expect(put.body.data).toMatchObject({ ...all, timeout_ms: 700, headers: { "x-env": "prod" } });
    // null clears a setting back to the default.
    const cleared = await u.api.put(`/v1/webhooks/${w.id}`, { json: { retry_schedule: null, rate_limit_per_second: null } });
    expect(cleared.body.data).toMatchObject({ timeout_ms: 700, retry_schedule: null, rate_limit_per_second: null });
  });

  it("refuses invalid settings with a 400 naming the field", async () => {
    const u = await h.td.createUser();
    const url = rx.url(hookPath("invalid"));
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ headers: { "webhook-signature": "v1,x" } }, /webhook-signature/],
      [{ headers: { "Webhook-Id": "x" } }, /Webhook-Id/],
      [{ headers: { "X-Tributary-Attempt": "9" } }, /X-Tributary-Attempt/],
      [{ headers: { "content-type": "text/plain" } }, /content-type/],
      [{ headers: { "Content-Length": "3" } }, /Content-Length/],
      [{ headers: { host: "evil.example" } }, /host/],
      [{ headers: { "Transfer-Encoding": "chunked" } }, /Transfer-Encoding cannot be set \(a header of the HTTP connection/],
      [{ headers: { Upgrade: "websocket" } }, /Upgrade cannot be set/],
      [{ headers: { Expect: "100-continue" } }, /Expect cannot be set/],
      [{ headers: { "Keep-Alive": "timeout=5" } }, /Keep-Alive cannot be set/],
      [{ headers: { Connection: "close" } }, /Connection cannot be set/],
      [{ headers: { "Proxy-Authorization": "Basic eA==" } }, /Proxy-Authorization cannot be set/],
      [{ headers: { te: "trailers" } }, /te cannot be set/],
      [{ headers: { "User-Agent": "mine/1" } }, /User-Agent cannot be set \(every delivery sends User-Agent: Tributary-Webhooks\/1\)/],
      [{ headers: { "bad name": "x" } }, /headers/],
      [{ headers: { "x-ok": 5 } }, /headers/],
      [{ headers: { "x-ok": "a\r\nb" } }, /headers/],
      [{ headers: ["x"] }, /headers/],
      [{ headers: "not json" }, /headers/],
      [{ timeout_ms: 99 }, /timeout_ms/],
      [{ timeout_ms: 60_001 }, /timeout_ms/],
      [{ timeout_ms: 1.5 }, /timeout_ms/],
      [{ timeout_ms: "soon" }, /timeout_ms/],
      [{ retry_schedule: "5 parsecs" }, /retry_schedule/],
      [{ retry_schedule: "5s,,5s" }, /retry_schedule/],
      [{ retry_schedule: 5 }, /retry_schedule/],
      [{ retry_schedule: Array(21).fill("1s").join(",") }, /retry_schedule/],
      [{ retry_schedule: Array(20).fill("1000h").join(",") }, /retry_schedule is too long: its delays add up to 20000h, more than the 72h/],
      [{ rate_limit_per_second: 0 }, /rate_limit_per_second/],
      [{ rate_limit_per_second: -1 }, /rate_limit_per_second/],
      [{ rate_limit_per_second: "fast" }, /rate_limit_per_second/],
    ];
    for (const [settings, named] of cases) {
      const res = await u.api.post("/v1/webhooks", { json: { url, ...settings } });
      expect(res.status, `${JSON.stringify(settings)}: ${res.text}`).toBe(400);
      expect(res.text).toMatch(named);
    }
    // In the query string of a PUT as well, and nothing is changed.
    const w = await webhookWith(u.api, url, { timeout_ms: 500 });
    const put = await u.api.put(`/v1/webhooks/${w.id}`, { query: { headers: '{"Host":"x"}', timeout_ms: "800" } });
    expect(put.status, put.text).toBe(400);
    expect(put.text).toMatch(/Host/);
    expect((await u.api.get(`/v1/webhooks/${w.id}`)).body.data).toMatchObject({ headers: null, timeout_ms: 500 });
  });

  it("adds the static headers to every attempt, without touching the delivery's own", async () => {
    const u = await h.td.createUser();
    const path = hookPath("headers", (req) => ({ status: req.nthOnPath === 1 ? 500 : 200 }));
    const w = await webhookWith(u.api, rx.url(path), { headers: { "X-Team": "blue", Authorization: "Bearer abc" } });
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { hello: 1 });

    // The direct first attempt and the queued retry both carry them.
    const got = await arrived(path, 2);
    for (const r of got) {
      expect(r.headers["x-team"]).toBe("blue");
      expect(r.headers.authorization).toBe("Bearer abc");
      expect(r.headers["content-type"]).toBe("application/json");
      expect(r.headers["webhook-id"]).toMatch(/^d_/);
    }
  });

  it("fails an attempt that outlasts timeout_ms and retries it", async () => {
    const u = await h.td.createUser();
    // 1 s is well within the daemon's DELIVERY_TIMEOUT_MS (2 s), but beyond the webhook's 300 ms.
    const path = hookPath("slow", async (req) => {
      if (req.nthOnPath === 1) await sleep(1000);
      return { status: 200 };
    });
    const w = await webhookWith(u.api, rx.url(path), { timeout_ms: 300 });
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { slow: true });

    const d = await onlyDelivery(u.api, w.id, "delivered");
    expect(d.attempts.map((a) => [a.attempt, a.status_code])).toEqual([
      [1, null],
      [2, 200],
    ]);
    expect(d.attempts[0]?.error).toMatch(/300 ms/);
  });

  it("gives up at the end of the webhook's retry_schedule, while another webhook keeps the default, also on replay", async () => {
    const u = await h.td.createUser();
    const shortPath = hookPath("short", () => ({ status: 500 }));
    const defaultPath = hookPath("default", () => ({ status: 500 }));
    const short = await webhookWith(u.api, rx.url(shortPath), { retry_schedule: "100ms" });
    const normal = await createWebhook(u.api, rx.url(defaultPath));
    const p = workflowId();
    await subscribe(u.api, p, short.id);
    await subscribe(u.api, p, normal.id);
    await emit(u.api, p, { doomed: true });

    const failedShort = await onlyDelivery(u.api, short.id, "failed");
    const failedNormal = await onlyDelivery(u.api, normal.id, "failed");
    await quiet(h);
    expect(failedShort.attempts).toHaveLength(2);
    expect(failedShort.attempts[1]?.error).toMatch(/gave up after 2 attempts/);
    expect(failedNormal.attempts).toHaveLength(4);
    expect(rx.to(shortPath)).toHaveLength(2);
    expect(rx.to(defaultPath)).toHaveLength(4);

    // A replay gets the webhook's schedule afresh: two more attempts.
    const replay = await u.api.post(`/v1/webhooks/${short.id}/deliveries/${failedShort.id}/retry`);
    expect(replay.status, replay.text).toBeLessThan(300);
    await arrived(shortPath, 4);
    await onlyDelivery(u.api, short.id, "failed");
    await quiet(h);
    expect(rx.to(shortPath)).toHaveLength(4);
  });

  it("runs a retry_schedule longer than the default to its end", async () => {
    const u = await h.td.createUser();
    const path = hookPath("long", () => ({ status: 500 }));
    // 6 attempts, where DELIVERY_RETRY_SCHEDULE gives 4.
    const w = await webhookWith(u.api, rx.url(path), { retry_schedule: "50ms,50ms,50ms,50ms,50ms" });
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { long: true });

    const failed = await onlyDelivery(u.api, w.id, "failed");
    await quiet(h);
    expect(failed.attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(rx.to(path)).toHaveLength(6);
  });

  it("starts at most rate_limit_per_second attempts per second; waiting attempts are neither failures nor spent attempts", async () => {
    const u = await h.td.createUser();
    const path = hookPath("limited");
    const w = await webhookWith(u.api, rx.url(path), { rate_limit_per_second: 2 });
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    for (let i = 0; i < 10; i++) await emit(u.api, p, { n: i });

    const got = await rx.waitFor((r) => (r.to(path).length >= 10 ? r.to(path) : undefined), {
      timeoutMs: 30_000,
      what: "10 rate-limited deliveries",
    });
    await quiet(h);
    expect(rx.to(path)).toHaveLength(10);
    // Each event exactly once.
    expect(new Set(got.map((r) => JSON.stringify(r.json))).size).toBe(10);
    // Spread: no 1-second window holds more than 2 (+1 at its edge) arrivals.
    const at = got.map((r) => r.at).sort((a, b) => a - b);
    for (let i = 0; i < at.length; i++) {
      const inWindow = at.filter((t) => t >= (at[i] as number) && t < (at[i] as number) + 1000).length;
      expect(inWindow, `arrivals within 1 s of #${i}`).toBeLessThanOrEqual(3);
    }
    // Every delivery delivered at its first attempt: the waits were not counted.
    const log = await waitFor(
      async () => {
        const { data } = await deliveries(u.api, w.id, { limit: 50 });
        return data.length === 10 && data.every((d) => d.status === "delivered") ? data : undefined;
      },
      { what: "10 delivered records" },
    );
    for (const d of log) expect(d.attempts.map((a) => [a.attempt, a.status_code])).toEqual([[1, 200]]);
    expect(got.every((r) => r.headers["x-tributary-attempt"] === "1")).toBe(true);
  });

  it("shares the rate limit between worker processes", async () => {
    // A second daemon on the same Redis prefix: both fan out and work the delivery queue.
    const second = await startTestDaemon({ REDIS_KEY_PREFIX: h.td.prefix, ROLES: "worker" });
    try {
      const u = await h.td.createUser();
      const path = hookPath("shared-limit");
      const w = await webhookWith(u.api, rx.url(path), { rate_limit_per_second: 2 });
      const p = workflowId();
      await subscribe(u.api, p, w.id);
      for (let i = 0; i < 10; i++) await emit(u.api, p, { n: i });

      const got = await rx.waitFor((r) => (r.to(path).length >= 10 ? r.to(path) : undefined), {
        timeoutMs: 30_000,
        what: "10 rate-limited deliveries",
      });
      await quiet(h);
      expect(rx.to(path)).toHaveLength(10);
      expect(new Set(got.map((r) => JSON.stringify(r.json))).size).toBe(10);
      const at = got.map((r) => r.at).sort((a, b) => a - b);
      for (let i = 0; i < at.length; i++) {
        const inWindow = at.filter((t) => t >= (at[i] as number) && t < (at[i] as number) + 1000).length;
        expect(inWindow, `arrivals within 1 s of #${i}`).toBeLessThanOrEqual(3);
      }
    } finally {
      // Not second.close(): that would drop the prefix the first daemon still uses.
      await second.daemon.close();
    }
  });
});
