import { randomBytes } from "node:crypto";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AttemptLog } from "../../../src/store/attempt-log.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { createKeys } from "../../../src/store/keys.js";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type AnswerFn, type ReceivedRequest, type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { connectRedis } from "../../helpers/redis.js";

/**
 * Webhook and workflow deliveries end to end (SPEC §6): an in-process daemon with real Redis,
 * real BullMQ and a real loopback receiver. Where a test asserts that something did NOT arrive, it
 * first waits for the daemon to be quiet (outbox drained, no job waiting, active or delayed), so
 * the absence is a fact rather than the result of a sleep that happened to be long enough.
 *
 * The daemon runs with DELIVERY_RETRY_SCHEDULE=100ms,200ms,400ms: 4 attempts per delivery.
 */

interface Harness {
  td: TestDaemon;
  redis: Redis;
  queue: Queue;
}

async function harness(env: Record<string, string> = {}): Promise<Harness> {
  const td = await startTestDaemon(env);
  const redis = connectRedis();
  const queue = new Queue(QUEUES.delivery, { connection: redis.duplicate(), prefix: createKeys(td.prefix).bullPrefix });
  return { td, redis, queue };
}

async function closeHarness(h: Harness | undefined): Promise<void> {
  if (!h) return;
  await h.queue.close();
  await h.td.close();
  h.redis.disconnect();
}

/**
 * Waits until nothing is left to deliver: the outbox is empty (entries are deleted only once
 * their direct first attempts settled and their jobs exist) and no delivery job is waiting,
 * active or delayed; twice in a row.
 */
async function quiet(h: Harness): Promise<void> {
  const outbox = createKeys(h.td.prefix).outbox();
  let calm = 0;
  await waitFor(
    async () => {
      const [len, counts] = await Promise.all([
        h.redis.xlen(outbox),
        h.queue.getJobCounts("wait", "active", "delayed", "prioritized", "waiting-children"),
      ]);
      const busy = len + Object.values(counts).reduce((a, b) => a + b, 0);
      calm = busy === 0 ? calm + 1 : 0;
      return calm >= 2;
    },
    { timeoutMs: 15_000, intervalMs: 50, what: "the daemon to finish every delivery" },
  );
}

// The receiver answers per path; each test registers its own paths.
const answers = new Map<string, AnswerFn>();
let rx: Receiver;
let h: Harness;

beforeAll(async () => {
  rx = await startReceiver((req) => (answers.get(req.path.split("?")[0] ?? "") ?? (() => ({ status: 200 })))(req));
  h = await harness();
});

afterAll(async () => {
  await closeHarness(h);
  await rx?.close();
});

let pathCounter = 0;
/** A fresh receiver path, answered by `answer` (default 200). */
function hookPath(name: string, answer?: AnswerFn): string {
  const p = `/${name}-${++pathCounter}`;
  if (answer) answers.set(p, answer);
  return p;
}

const workflowId = (): string => `p_${randomBytes(6).toString("hex")}`;

async function createWebhook(api: Client, url: string): Promise<{ id: string; signing_secret: string }> {
  const res = await api.post("/v1/webhooks", { json: { url, name: "test" } });
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

async function subscribe(api: Client, emitter: string, listener: string, eventName?: string): Promise<void> {
  const res = await api.post("/v1/subscriptions", {
    json: { emitter_id: emitter, listener_id: listener, ...(eventName === undefined ? {} : { event_name: eventName }) },
  });
  expect(res.status, res.text).toBe(200);
}

async function emit(api: Client, workflow: string, event: unknown, name?: string): Promise<string> {
  const res = await api.post(`/v1/workflows/${workflow}/events`, { json: { event, ...(name === undefined ? {} : { name }) } });
  expect(res.status, res.text).toBe(202);
  return res.body.data.id;
}

interface DeliveryView {
  id: string;
  event_id: string;
  emitter_id: string;
  event_name: string;
  status: "pending" | "delivered" | "failed";
  attempts: { attempt: number; at: string; status_code: number | null; duration_ms: number; error: string | null }[];
  created_at: number;
  updated_at: number;
}

async function deliveries(api: Client, webhookId: string, query: Record<string, unknown> = {}) {
  const res = await api.get(`/v1/webhooks/${webhookId}/deliveries`, { query });
  expect(res.status, res.text).toBe(200);
  return res.body as {
    data: DeliveryView[];
    page_info: { total_count: number; count: number; start_cursor: string | null; end_cursor: string | null };
  };
}

/** Polls the attempt log until the webhook's only delivery has `status`. */
async function onlyDelivery(api: Client, webhookId: string, status: DeliveryView["status"]): Promise<DeliveryView> {
  return waitFor(
    async () => {
      const { data } = await deliveries(api, webhookId);
      return data.length === 1 && data[0]?.status === status ? data[0] : undefined;
    },
    { what: `the delivery of ${webhookId} to be ${status}` },
  );
}

const headersOf = (r: ReceivedRequest): Record<string, string> =>
  Object.fromEntries(Object.entries(r.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]));

const arrived = (path: string, n: number) =>
  rx.waitFor((r) => (r.to(path).length >= n ? r.to(path) : undefined), { what: `${n} request(s) at ${path}` });

// ---------------------------------------------------------------------------------------------

describe("webhook deliveries", () => {
  it("signs each delivery so that the standardwebhooks package verifies it, with x-tributary-* headers", async () => {
    const u = await h.td.createUser();
    const path = hookPath("signed");
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    const event = { hello: "world", unicode: "ünïcødé ✓", nested: { list: [1, 2, 3] } };
    const id = await emit(u.api, p, event);

    const [got] = await arrived(path, 1);
    expect(got!.method).toBe("POST");
    expect(got!.raw).toBe(JSON.stringify(event));
    expect(new Webhook(w.signing_secret).verify(got!.raw, headersOf(got!))).toEqual(event);
    expect(got!.headers).toMatchObject({
      "x-tributary-emitter-id": p,
      "x-tributary-event-id": id,
      "x-tributary-event-name": "default",
      "x-tributary-attempt": "1",
    });
    expect(got!.headers["content-type"]).toMatch(/^application\/json/);
    expect(got!.headers["webhook-id"]).toMatch(/^d_/);
    expect(got!.headers["webhook-signature"]).toMatch(/^v1,/);
    expect(Math.abs(Number(got!.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(60);

    // The verification is real: a changed body or another secret fails it.
    expect(() => new Webhook(w.signing_secret).verify(got!.raw.replace("world", "World"), headersOf(got!))).toThrow();
    const other = await createWebhook(u.api, rx.url(hookPath("other")));
    expect(() => new Webhook(other.signing_secret).verify(got!.raw, headersOf(got!))).toThrow();
  });

  it("fans one event out to every subscribed webhook, once each", async () => {
    const u = await h.td.createUser();
    const paths = [hookPath("fan-a"), hookPath("fan-b"), hookPath("fan-c")];
    const unrelated = hookPath("fan-unrelated");
    const hooks = await Promise.all(paths.map((p) => createWebhook(u.api, rx.url(p))));
    const p = workflowId();
    for (const w of hooks) await subscribe(u.api, p, w.id);
    const q = workflowId();
    await subscribe(u.api, q, (await createWebhook(u.api, rx.url(unrelated))).id);

    const id = await emit(u.api, p, { fan: "out" });
    await Promise.all(paths.map((path) => arrived(path, 1)));
    await quiet(h);

    const got = paths.map((path) => rx.to(path));
    expect(got.map((g) => g.length)).toEqual([1, 1, 1]);
    expect(got.map((g) => g[0]!.headers["x-tributary-event-id"])).toEqual([id, id, id]);
    // One delivery per listener: each has its own webhook-id and its own signature.
    expect(new Set(got.map((g) => g[0]!.headers["webhook-id"])).size).toBe(3);
    got.forEach((g, i) => {
      expect(new Webhook(hooks[i]!.signing_secret).verify(g[0]!.raw, headersOf(g[0]!))).toEqual({ fan: "out" });
    });
    expect(rx.to(unrelated)).toHaveLength(0);
  });

  it('keeps channels apart: "" and "default" are one channel; named channels and $errors are their own', async () => {
    const u = await h.td.createUser();
    const path = {
      empty: hookPath("ch-empty"),
      dflt: hookPath("ch-default"),
      errors: hookPath("ch-errors"),
      orders: hookPath("ch-orders"),
    };
    const hooks = {
      empty: await createWebhook(u.api, rx.url(path.empty)),
      dflt: await createWebhook(u.api, rx.url(path.dflt)),
      errors: await createWebhook(u.api, rx.url(path.errors)),
      orders: await createWebhook(u.api, rx.url(path.orders)),
    };
    const p = workflowId();
    await subscribe(u.api, p, hooks.empty.id, "");
    await subscribe(u.api, p, hooks.dflt.id, "default");
    await subscribe(u.api, p, hooks.errors.id, "$errors");
    await subscribe(u.api, p, hooks.orders.id, "orders");

    const unnamed = await emit(u.api, p, { n: "unnamed" });
    const namedDefault = await emit(u.api, p, { n: "named default" }, "default");
    const order = await emit(u.api, p, { n: "order" }, "orders");
    const otherCase = await emit(u.api, p, { n: "other case" }, "Orders");
    const err = await u.api.post(`/v1/workflows/${p}/$errors/events`, {
      json: { original_event: { n: 1 }, error: { code: "E_BAD", msg: "it broke" } },
    });
    expect(err.status, err.text).toBe(202);
    await quiet(h);

    const ids = (reqs: ReceivedRequest[]) => reqs.map((r) => r.headers["x-tributary-event-id"]).sort();
    expect(ids(rx.to(path.empty))).toEqual([unnamed, namedDefault].sort());
    expect(ids(rx.to(path.dflt))).toEqual([unnamed, namedDefault].sort());
    expect(ids(rx.to(path.orders))).toEqual([order]);
    expect(ids(rx.to(path.errors))).toEqual([err.body.data.id]);
    expect([...rx.to(path.empty), ...rx.to(path.dflt)].every((r) => r.headers["x-tributary-event-name"] === "default")).toBe(true);
    expect(rx.to(path.orders)[0]!.headers["x-tributary-event-name"]).toBe("orders");
    const errorDelivery = rx.to(path.errors)[0]!;
    expect(errorDelivery.headers["x-tributary-event-name"]).toBe("$errors");
    expect(errorDelivery.json).toMatchObject({
      original_event: { n: 1 },
      error: { code: "E_BAD", msg: "it broke" },
      original_context: { workflow_id: p, owner_id: u.id },
    });
    // Channel names are case-sensitive: "Orders" reached nobody.
    expect(rx.requests.some((r) => r.headers["x-tributary-event-id"] === otherCase)).toBe(false);
  });

  it("matches a p_* glob against every workflow of its own user and of nobody else", async () => {
    const a = await h.td.createUser();
    const b = await h.td.createUser();
    const pathA = hookPath("glob-a");
    const pathB = hookPath("glob-b");
    await subscribe(a.api, "p_*", (await createWebhook(a.api, rx.url(pathA))).id);
    await subscribe(b.api, "p_*", (await createWebhook(b.api, rx.url(pathB))).id);
    const [a1, a2, b1] = [workflowId(), workflowId(), workflowId()];

    await emit(a.api, a1, { from: "a1" });
    await emit(b.api, b1, { from: "b1" });
    await emit(a.api, a2, { from: "a2" });
    await quiet(h);

    expect(
      rx
        .to(pathA)
        .map((r) => r.headers["x-tributary-emitter-id"])
        .sort(),
    ).toEqual([a1, a2].sort());
    expect(rx.to(pathB).map((r) => r.headers["x-tributary-emitter-id"])).toEqual([b1]);
  });

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
    const q = new Queue(QUEUES.delivery, { connection: h.redis.duplicate(), prefix: keys.bullPrefix });
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

describe("workflow listeners", () => {
  it("delivers to a workflow's trigger_url like a webhook", async () => {
    const u = await h.td.createUser();
    const path = hookPath("trigger");
    const listener = workflowId();
    const put = await u.api.put(`/v1/workflows/${listener}`, { json: { name: "downstream", trigger_url: rx.url(path) } });
    expect(put.status, put.text).toBe(200);
    const emitter = workflowId();
    await subscribe(u.api, emitter, listener);
    const id = await emit(u.api, emitter, { chained: 1 });

    const [got] = await arrived(path, 1);
    expect(got!.json).toEqual({ chained: 1 });
    expect(got!.headers).toMatchObject({ "x-tributary-emitter-id": emitter, "x-tributary-event-id": id, "x-tributary-attempt": "1" });
    expect(got!.headers["content-type"]).toMatch(/^application\/json/);
    expect(got!.headers["webhook-id"]).toMatch(/^d_/);
  });

  it("counts a delivery to a workflow without trigger_url as failed: undeliverable", async () => {
    const u = await h.td.createUser();
    const listener = workflowId();
    expect((await u.api.put(`/v1/workflows/${listener}`, { json: { name: "no url" } })).status).toBe(200);
    const emitter = workflowId();
    await subscribe(u.api, emitter, listener);
    const id = await emit(u.api, emitter, { nowhere: true });

    // Workflow deliveries have no API listing; read the attempt log the daemon keeps in Redis.
    const log = new AttemptLog(h.redis, createKeys(h.td.prefix), 1000, Date.now);
    const record = await waitFor(
      async () => {
        const page = await log.list(u.id, listener, { limit: 10 });
        return page.data[0]?.status === "failed" ? page.data[0] : undefined;
      },
      { what: "the failed workflow delivery" },
    );
    expect(record).toMatchObject({ event_id: id, listener_kind: "workflow" });
    expect(record.attempts).toHaveLength(1);
    expect(record.attempts[0]!.error).toMatch(/undeliverable/);
    const metrics = await (await fetch(`${h.td.url}/metrics`)).text();
    expect(metrics).toMatch(/tributary_deliveries_total\{listener_kind="workflow",outcome="undeliverable"\} [1-9]/);
  });
});

describe("auto-subscriptions", () => {
  it("apply to a new workflow before its first event, and not to workflows seen before", async () => {
    const u = await h.td.createUser();
    const path = hookPath("auto");
    const w = await createWebhook(u.api, rx.url(path));
    const old = workflowId();
    await emit(u.api, old, { from: "old" });
    const auto = await u.api.post("/v1/auto_subscriptions", { json: { listener_id: w.id, event_name: "default" } });
    expect(auto.status, auto.text).toBe(200);
    expect(auto.body.data).toMatchObject({ id: expect.stringMatching(/^asub_/), listener_id: w.id, event_name: "default" });

    const fresh = workflowId();
    // The very first request of the new workflow is a batch: all of it is covered.
    const res = await u.api.post(`/v1/workflows/${fresh}/events`, { json: { events: [{ event: { n: 1 } }, { event: { n: 2 } }] } });
    expect(res.status, res.text).toBe(202);
    await emit(u.api, fresh, { n: "elsewhere" }, "orders");
    await emit(u.api, old, { from: "old again" });
    await quiet(h);

    expect(rx.to(path).map((r) => r.json)).toEqual(expect.arrayContaining([{ n: 1 }, { n: 2 }]));
    expect(rx.to(path)).toHaveLength(2);
    const subs = await u.api.get("/v1/users/me/subscriptions");
    expect(subs.body.data).toEqual(expect.arrayContaining([expect.objectContaining({ emitter_id: fresh, listener_id: w.id })]));
    expect(subs.body.data.some((s: { emitter_id: string }) => s.emitter_id === old)).toBe(false);
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

/** A daemon of its own with `env`, started before and stopped after the enclosing describe's tests. */
function ownHarness(env: Record<string, string>): () => Harness {
  let own: Harness | undefined;
  beforeAll(async () => {
    own = await harness(env);
  });
  afterAll(async () => {
    await closeHarness(own);
  });
  return () => own as Harness;
}

describe("SSRF guard (ALLOW_PRIVATE_DESTINATIONS=false)", () => {
  const guardedHarness = ownHarness({ ALLOW_PRIVATE_DESTINATIONS: "false" });

  it.each([
    ["127.0.0.1", (path: string) => rx.url(path)],
    ["localhost", (path: string) => `http://localhost:${rx.port}${path}`],
  ])("refuses a webhook at %s without sending anything, and says why in the attempt log", async (_name, urlOf) => {
    const guarded = guardedHarness();
    const u = await guarded.td.createUser();
    const path = hookPath("ssrf");
    const w = await createWebhook(u.api, urlOf(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { steal: "metadata" });

    const d = await onlyDelivery(u.api, w.id, "failed");
    await quiet(guarded);
    expect(rx.to(path)).toHaveLength(0);
    // Retrying cannot help, so there is exactly one attempt.
    expect(d.attempts).toHaveLength(1);
    expect(d.attempts[0]).toMatchObject({ status_code: null });
    expect(d.attempts[0]!.error).toMatch(/private|loopback/);
  });
});

describe("first attempts: direct by default, queued with DELIVERY_DIRECT_CONCURRENCY=0", () => {
  const queued = ownHarness({ DELIVERY_DIRECT_CONCURRENCY: "0" });

  it.each([
    ["direct (default)", () => h, false],
    ["queued (DELIVERY_DIRECT_CONCURRENCY=0)", queued, true],
  ])("%s: delivered once, with a delivery job only when queued", async (_name, which, expectJob) => {
    const d = which();
    const u = await d.td.createUser();
    const path = hookPath("first-attempt");
    const w = await createWebhook(u.api, rx.url(path));
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    await emit(u.api, p, { first: "attempt" });
    const delivery = await onlyDelivery(u.api, w.id, "delivered");
    await quiet(d);
    expect(rx.to(path).map((r) => r.headers["x-tributary-attempt"])).toEqual(["1"]);
    expect(delivery.attempts).toHaveLength(1);
    // A queued delivery's job lingers as completed; a direct one never had a job.
    expect((await d.queue.getJob(delivery.id))?.id).toBe(expectJob ? delivery.id : undefined);
  });
});
