import { describe, expect, it } from "vitest";
import { AttemptLog } from "../../../src/store/attempt-log.js";
import { createKeys } from "../../../src/store/keys.js";
import { waitFor } from "../../helpers/receiver.js";
import { storeWebhookUrl } from "../../helpers/stored-destination.js";
import {
  arrived,
  createWebhook,
  emit,
  h,
  hookPath,
  installDeliveryHarness,
  onlyDelivery,
  ownHarness,
  quiet,
  rx,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";

/**
 * Listener kinds and delivery paths end to end: workflows as listeners, auto-subscriptions, the
 * SSRF guard on destinations, and first attempts direct or queued.
 */

installDeliveryHarness();

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

describe("SSRF guard (ALLOW_PRIVATE_DESTINATIONS=false)", () => {
  const guardedHarness = ownHarness({ ALLOW_PRIVATE_DESTINATIONS: "false" });

  it.each([
    ["127.0.0.1", (path: string) => rx.url(path)],
    ["localhost", (path: string) => `http://localhost:${rx.port}${path}`],
  ])("refuses a stored webhook at %s without sending anything, and says why in the attempt log", async (_name, urlOf) => {
    const guarded = guardedHarness();
    const u = await guarded.td.createUser();
    const path = hookPath("ssrf");
    // The API refuses such a URL when it is stored; this one was stored before the rule applied.
    const w = await createWebhook(u.api, "https://receiver.example/hook");
    await storeWebhookUrl(guarded.td, u.id, w.id, urlOf(path));
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
