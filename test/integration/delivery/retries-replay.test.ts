import { Queue } from "bullmq";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { createKeys } from "../../../src/store/keys.js";
import { waitFor } from "../../helpers/receiver.js";
import {
  arrived,
  closeHarness,
  createWebhook,
  deliveries,
  emit,
  h,
  harness,
  type Harness,
  headersOf,
  hookPath,
  installDeliveryHarness,
  onlyDelivery,
  quiet,
  rx,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";

/**
 * Retries, giving up, replays and the attempt log end to end (SPEC §6): the retry schedule, 410
 * and 3xx answers, inactive webhooks, time-outs, replays and their refusals, and the log's pages.
 */

installDeliveryHarness();

describe("webhook retries, replays and the attempt log", () => {
  it("retries a 500 on the schedule and stops at the first success, with a stable webhook-id", async () => {
    const u = await h.td.createUser();
    const path = hookPath("flaky", (req) => ({ status: req.nthOnPath <= 2 ? 500 : 200 }));
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { flaky: true });

    await arrived(path, 3);
    await quiet(h);
    const got = rx.to(path);
    expect(got).toHaveLength(3);
    expect(got.map((r) => r.headers["x-tributary-attempt"])).toEqual(["1", "2", "3"]);
    expect(new Set(got.map((r) => r.headers["webhook-id"])).size).toBe(1);
    for (const r of got) expect(new Webhook(w.signing_secret).verify(r.raw, headersOf(r))).toEqual({ flaky: true });
    // 100 ms and 200 ms, each with at most 20 % jitter.
    expect(got[1]!.at - got[0]!.at).toBeGreaterThanOrEqual(80);
    expect(got[2]!.at - got[1]!.at).toBeGreaterThanOrEqual(160);

    const d = await onlyDelivery(u.api, w.id, "delivered");
    expect(d.id).toBe(got[0]!.headers["webhook-id"]);
    expect(d.attempts.map((a) => [a.attempt, a.status_code, a.error])).toEqual([
      [1, 500, "HTTP 500"],
      [2, 500, "HTTP 500"],
      [3, 200, null],
    ]);
  });

  it("gives up after the last attempt, logs every attempt, and replays the failed delivery on request", async () => {
    let healthy = false;
    const u = await h.td.createUser();
    const path = hookPath("down", () => ({ status: healthy ? 200 : 500, body: "down for maintenance" }));
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    const eventId = await emit(u.api, p, { doomed: true });

    const failed = await onlyDelivery(u.api, w.id, "failed");
    await quiet(h);
    expect(rx.to(path)).toHaveLength(4);
    expect(failed).toMatchObject({ event_id: eventId, emitter_id: p, status: "failed" });
    expect(failed.attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4]);
    for (const a of failed.attempts) {
      expect(a.status_code).toBe(500);
      expect(a.error).toMatch(/^HTTP 500/);
      expect(Number.isInteger(a.duration_ms) && a.duration_ms >= 0).toBe(true);
      expect(Number.isNaN(Date.parse(a.at))).toBe(false);
    }
    expect(failed.attempts[3]!.error).toMatch(/gave up after 4 attempts/);
    // What the endpoint said comes along, as webhook services show it.
    for (const a of failed.attempts) expect(a.error).toMatch(/; response: down for maintenance$/);

    healthy = true;
    const replay = await u.api.post(`/v1/webhooks/${w.id}/deliveries/${failed.id}/retry`);
    expect(replay.status, replay.text).toBe(202);
    const [, , , , fifth] = await arrived(path, 5);
    expect(fifth!.json).toEqual({ doomed: true });
    expect(fifth!.headers["webhook-id"]).toBe(failed.id);
    const delivered = await onlyDelivery(u.api, w.id, "delivered");
    expect(delivered.attempts).toHaveLength(5);
    expect(delivered.attempts[4]).toMatchObject({ attempt: 5, status_code: 200, error: null });
    await quiet(h);
    expect(rx.to(path)).toHaveLength(5);

    // Only failed deliveries can be replayed.
    const again = await u.api.post(`/v1/webhooks/${w.id}/deliveries/${failed.id}/retry`);
    expect(again.status, again.text).toBe(409);
  });

  it("answers 409 to a replay of a delivery still in flight", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const u = await h.td.createUser();
    // The first attempt fails (the record exists from then on, pending); the second is held open.
    let calls = 0;
    const path = hookPath("held", async () => {
      calls++;
      if (calls === 1) return { status: 500 };
      await released;
      return { status: 200 };
    });
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { held: true });
    await arrived(path, 2);
    const pending = await onlyDelivery(u.api, w.id, "pending");

    const res = await u.api.post(`/v1/webhooks/${w.id}/deliveries/${pending.id}/retry`);
    expect(res.status, res.text).toBe(409);
    release();
    await onlyDelivery(u.api, w.id, "delivered");
  });

  it("leaves no attempt log behind for a webhook deleted while an attempt was in flight", async () => {
    let release!: () => void;
    const released = new Promise<void>((r) => {
      release = r;
    });
    const u = await h.td.createUser();
    const path = hookPath("deleted-in-flight", async () => {
      await released;
      return { status: 200 };
    });
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { doomed: true });
    await arrived(path, 1);
    expect((await u.api.del(`/v1/webhooks/${w.id}`)).status).toBe(204);
    release();
    const keys = createKeys(h.td.prefix);
    await waitFor(async () => (await h.redis.get(keys.webhook(u.id, w.id))) === null, { what: "the webhook to be gone" });
    // The attempt ends after the deletion; once the job is done, nothing was written for it.
    const q = new Queue(QUEUES.delivery, { connection: h.redis.duplicate(), prefix: keys.queuePrefix("delivery") });
    try {
      await waitFor(async () => (await q.getJobCounts("active", "wait")).active === 0, { what: "the attempt to end" });
    } finally {
      await q.close();
    }
    expect(await h.redis.exists(keys.deliveries(u.id, w.id))).toBe(0);
  });

  it("answers 404 to a replay through another user's webhook or of another user's delivery", async () => {
    const owner = await h.td.createUser();
    const stranger = await h.td.createUser();
    const path = hookPath("foreign", () => ({ status: 500 }));
    const w = await createWebhook(owner.api, rx.url(path));
    const p = workflowId();
    await subscribe(owner.api, p, w.id);
    await emit(owner.api, p, { mine: true });
    const failed = await onlyDelivery(owner.api, w.id, "failed");
    const strangersHook = await createWebhook(stranger.api, rx.url(hookPath("strangers")));

    const viaForeignWebhook = await stranger.api.post(`/v1/webhooks/${w.id}/deliveries/${failed.id}/retry`);
    expect(viaForeignWebhook.status, viaForeignWebhook.text).toBe(404);
    const foreignDelivery = await stranger.api.post(`/v1/webhooks/${strangersHook.id}/deliveries/${failed.id}/retry`);
    expect(foreignDelivery.status, foreignDelivery.text).toBe(404);
    const unknown = await owner.api.post(`/v1/webhooks/${w.id}/deliveries/d_000000000000000000000000/retry`);
    expect(unknown.status, unknown.text).toBe(404);
    const otherWebhookOfOwner = await createWebhook(owner.api, rx.url(hookPath("owner-other")));
    const wrongWebhook = await owner.api.post(`/v1/webhooks/${otherWebhookOfOwner.id}/deliveries/${failed.id}/retry`);
    expect(wrongWebhook.status, wrongWebhook.text).toBe(404);
    expect((await stranger.api.get(`/v1/webhooks/${w.id}/deliveries`)).status).toBe(404);
    // Nothing was re-queued by the refused requests.
    await quiet(h);
    expect(rx.to(path)).toHaveLength(4);
  });

  it("deactivates the webhook on 410 Gone and stops delivering to it", async () => {
    const u = await h.td.createUser();
    const path = hookPath("gone", () => ({ status: 410 }));
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { first: true });

    await waitFor(async () => (await u.api.get(`/v1/webhooks/${w.id}`)).body.data.active === false, { what: "deactivation" });
    const d = await onlyDelivery(u.api, w.id, "failed");
    expect(d.attempts).toHaveLength(1);
    expect(d.attempts[0]).toMatchObject({ status_code: 410 });
    expect(d.attempts[0]!.error).toMatch(/410/);

    await emit(u.api, p, { second: true });
    await quiet(h);
    expect(rx.to(path)).toHaveLength(1);
  });

  it("does not follow a 3xx and retries it as a failure", async () => {
    const u = await h.td.createUser();
    const target = hookPath("target");
    const path = hookPath("moved", () => ({ status: 302, headers: { location: target } }));
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { moved: true });

    const d = await onlyDelivery(u.api, w.id, "failed");
    await quiet(h);
    expect(rx.to(path)).toHaveLength(4);
    expect(rx.to(target)).toHaveLength(0);
    expect(d.attempts.map((a) => a.status_code)).toEqual([302, 302, 302, 302]);
    expect(d.attempts[0]!.error).toMatch(/redirect/i);
  });

  it.each([429, 503])("waits for Retry-After on a %i before the next attempt", async (status) => {
    const u = await h.td.createUser();
    const path = hookPath(`throttled-${status}`, (req) =>
      req.nthOnPath === 1 ? { status, headers: { "retry-after": "1" } } : { status: 200 },
    );
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { polite: true });

    const [first, second] = await arrived(path, 2);
    // The schedule says ~100 ms; Retry-After: 1 lengthens it to a second.
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(950);
    const d = await onlyDelivery(u.api, w.id, "delivered");
    expect(d.attempts.map((a) => a.status_code)).toEqual([status, 200]);
  });

  it("delivers nothing to an inactive webhook and logs why", async () => {
    const u = await h.td.createUser();
    const path = hookPath("inactive");
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    const off = await u.api.put(`/v1/webhooks/${w.id}`, { json: { active: false } });
    expect(off.status, off.text).toBe(200);
    await emit(u.api, p, { x: 1 });

    const d = await onlyDelivery(u.api, w.id, "failed");
    await quiet(h);
    expect(rx.to(path)).toHaveLength(0);
    expect(d.attempts).toHaveLength(1);
    expect(d.attempts[0]).toMatchObject({ status_code: null });
    expect(d.attempts[0]!.error).toMatch(/inactive/);
  });

  it("lists the attempt log newest first, in pages", async () => {
    const u = await h.td.createUser();
    const path = hookPath("paged");
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push(await emit(u.api, p, { i }));
      await arrived(path, i + 1);
    }
    const newestFirst = [...ids].reverse();

    const first = await deliveries(u.api, w.id, { limit: 2 });
    expect(first.data.map((d) => d.event_id)).toEqual(newestFirst.slice(0, 2));
    expect(first.page_info).toMatchObject({ total_count: 5, count: 2 });
    const second = await deliveries(u.api, w.id, { limit: 2, after: first.page_info.end_cursor });
    expect(second.data.map((d) => d.event_id)).toEqual(newestFirst.slice(2, 4));
    const third = await deliveries(u.api, w.id, { limit: 2, after: second.page_info.end_cursor });
    expect(third.data.map((d) => d.event_id)).toEqual(newestFirst.slice(4));
    expect(third.page_info.count).toBe(1);
    const back = await deliveries(u.api, w.id, { limit: 2, before: second.page_info.start_cursor });
    expect(back.data.map((d) => d.event_id)).toEqual(newestFirst.slice(0, 2));
    expect((await u.api.get(`/v1/webhooks/${w.id}/deliveries`, { query: { limit: 0 } })).status).toBe(400);
  });

  // One fan-out batch records its deliveries in the same millisecond; the log orders them by event
  // id. Ten events make an accidental pass a 1-in-3.6-million event.
  it("lists the deliveries of one batch newest first too", async () => {
    const u = await h.td.createUser();
    const path = hookPath("paged-batch");
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    const res = await u.api.post(`/v1/workflows/${p}/events`, {
      json: { events: Array.from({ length: 10 }, (_, i) => ({ event: { i } })) },
    });
    expect(res.status, res.text).toBe(202);
    const ids = (res.body.data as { id: string }[]).map((d) => d.id);
    await arrived(path, 10);

    const page = await deliveries(u.api, w.id, { limit: 10 });
    expect(page.data.map((d) => d.event_id)).toEqual([...ids].reverse());
  });
});

describe("attempt time-outs", () => {
  let slow: Harness;
  beforeAll(async () => {
    slow = await harness({ DELIVERY_TIMEOUT_MS: "300" });
  });
  afterAll(async () => {
    await closeHarness(slow);
  });

  it("counts a receiver that does not answer within DELIVERY_TIMEOUT_MS as a failed attempt and retries", async () => {
    const u = await slow.td.createUser();
    const path = hookPath("silent", (req) => (req.nthOnPath === 1 ? "hang" : { status: 200 }));
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { patient: false });

    const d = await onlyDelivery(u.api, w.id, "delivered");
    expect(d.attempts).toHaveLength(2);
    expect(d.attempts[0]).toMatchObject({ attempt: 1, status_code: null });
    expect(d.attempts[0]!.error).toMatch(/300 ms/);
    expect(d.attempts[0]!.duration_ms).toBeGreaterThanOrEqual(250);
    expect(d.attempts[0]!.duration_ms).toBeLessThan(2000);
    expect(d.attempts[1]).toMatchObject({ attempt: 2, status_code: 200, error: null });
  });
});
