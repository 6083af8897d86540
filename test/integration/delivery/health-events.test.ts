import { describe, expect, it } from "vitest";
import { compareEventIds } from "../../../src/domain/ids.js";
import type { Client } from "../../helpers/daemon.js";
import {
  arrived,
  createWebhook,
  deliveries,
  emit,
  h,
  hookPath,
  installDeliveryHarness,
  NO_CIRCUIT,
  quiet,
  rx,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";
import { waitFor } from "../../helpers/receiver.js";

/**
 * Health events end to end (SPEC §12): a webhook emits `$delivery_failed`, `$webhook_disabled` and
 * `$webhook_recovered` as ordinary events, readable at GET /v1/webhooks/{id}/event_summaries and
 * routed by subscriptions naming the webhook or `wh_*`; a failing webhook's health events never
 * feed themselves.
 */

// Failing webhooks here fail on purpose many times; their circuits would stop the chains under test.
installDeliveryHarness(NO_CIRCUIT);

const failing = () => ({ status: 500 });

/** A webhook with a one-retry schedule (2 attempts in all). */
async function shortWebhook(api: Client, path: string): Promise<{ id: string }> {
  const res = await api.post("/v1/webhooks", { json: { url: rx.url(path), retry_schedule: "100ms" } });
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

interface Summary {
  id: string;
  event: Record<string, unknown>;
  metadata: { emitter_id: string; name: string; id?: string; summary?: string };
}

async function healthOf(api: Client, webhookId: string, channel: string): Promise<Summary[]> {
  const res = await api.get(`/v1/webhooks/${webhookId}/event_summaries`, { query: { event_name: channel, expand: "event", limit: 100 } });
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

const waitForHealth = (api: Client, webhookId: string, channel: string, n: number) =>
  waitFor(
    async () => {
      const got = await healthOf(api, webhookId, channel);
      return got.length >= n ? got : undefined;
    },
    { what: `${n} ${channel} event(s) of ${webhookId}` },
  );

describe("$delivery_failed", () => {
  it("is recorded once when a delivery exhausts its schedule, readable at the webhook's event_summaries and delivered to a wh_* subscriber", async () => {
    const u = await h.td.createUser();
    const failPath = hookPath("df-failing", failing);
    const monitorPath = hookPath("df-monitor");
    const f = await shortWebhook(u.api, failPath);
    const monitor = await createWebhook(u.api, rx.url(monitorPath));
    await subscribe(u.api, "wh_*", monitor.id, "$delivery_failed");
    const p = workflowId();
    await subscribe(u.api, p, f.id);
    const eventId = await emit(u.api, p, { order: 42 });

    const [got] = await arrived(monitorPath, 1);
    const body = JSON.parse(got!.raw);
    const [failed] = (await deliveries(u.api, f.id)).data;
    expect(failed).toMatchObject({ status: "failed", event_id: eventId, emitter_id: p });
    // The payload: the delivery as the attempt log shows it, plus the webhook id.
    expect(body).toEqual({ webhook_id: f.id, ...failed });
    expect(body.attempts).toHaveLength(2);
    expect(got!.headers).toMatchObject({ "x-tributary-emitter-id": f.id, "x-tributary-event-name": "$delivery_failed" });

    const [summary, ...more] = await healthOf(u.api, f.id, "$delivery_failed");
    expect(more).toEqual([]);
    expect(summary!.event).toEqual(body);
    expect(summary!.metadata).toMatchObject({ emitter_id: f.id, name: "$delivery_failed", id: failed!.id });
    expect(got!.headers["x-tributary-event-id"]).toBe(summary!.id);

    await quiet(h);
    expect(rx.to(monitorPath)).toHaveLength(1);
    expect(rx.to(failPath)).toHaveLength(2);
    // The monitor's deliveries succeeded: it has no health events of its own.
    expect(await healthOf(u.api, monitor.id, "$delivery_failed")).toEqual([]);
  });

  it("does not loop when failing webhooks subscribe to their own and each other's health events", async () => {
    const u = await h.td.createUser();
    const pathA = hookPath("loop-a", failing);
    const pathB = hookPath("loop-b", failing);
    const a = await shortWebhook(u.api, pathA);
    const b = await shortWebhook(u.api, pathB);
    await subscribe(u.api, a.id, a.id, "$delivery_failed");
    await subscribe(u.api, "wh_*", a.id, "$delivery_failed");
    await subscribe(u.api, "wh_*", b.id, "$delivery_failed");
    const p = workflowId();
    await subscribe(u.api, p, a.id);
    await emit(u.api, p, { doomed: true });

    await waitForHealth(u.api, a.id, "$delivery_failed", 1);
    await quiet(h);
    // A's failure went to A and B (2 attempts each), and their failing to take it reported nothing.
    expect(await healthOf(u.api, a.id, "$delivery_failed")).toHaveLength(1);
    expect(await healthOf(u.api, b.id, "$delivery_failed")).toEqual([]);
    expect((await deliveries(u.api, a.id)).data.map((d) => [d.emitter_id, d.status])).toEqual([
      [a.id, "failed"],
      [p, "failed"],
    ]);
    expect((await deliveries(u.api, b.id)).data.map((d) => [d.emitter_id, d.status])).toEqual([[a.id, "failed"]]);
    expect(rx.to(pathA)).toHaveLength(4);
    expect(rx.to(pathB)).toHaveLength(2);
  });
});

/** A source that answers every event it receives with an emit of its own. */
const ECHO = `module.exports = {
  name: "Health Echo",
  version: "0.0.1",
  props: {},
  async run(event) {
    this.$emit({ echo: event.id || null });
  },
};
`;

describe("$delivery_failed through a source", () => {
  it("stops after 16 hops when a source answers a webhook's failures with events that webhook fails again", async () => {
    const u = await h.td.createUser();
    const failPath = hookPath("hops-failing", failing);
    const a = await shortWebhook(u.api, failPath);
    const created = await u.api.post("/v1/sources", { json: { component_code: ECHO } });
    expect(created.status, created.text).toBe(200);
    const echo = created.body.data as { id: string };
    await subscribe(u.api, "wh_*", echo.id, "$delivery_failed");
    await subscribe(u.api, echo.id, a.id);
    const p = workflowId();
    await subscribe(u.api, p, a.id);
    await emit(u.api, p, { start: true });

    const [stopped] = await waitFor(
      async () => {
        const res = await u.api.get(`/v1/sources/${echo.id}/event_summaries`, { query: { event_name: "$errors", expand: "event" } });
        return res.body.data.length > 0 ? res.body.data : undefined;
      },
      { timeoutMs: 90_000, what: "the chain to stop on the source's $errors" },
    );
    expect(stopped.event.error.code).toBe("MAX_HOPS");
    await quiet(h);
    // The workflow's event and 16 echoes failed at A; the 17th report reached a source that refused to run.
    expect(await healthOf(u.api, a.id, "$delivery_failed")).toHaveLength(17);
    const echoes = await u.api.get(`/v1/sources/${echo.id}/event_summaries`, { query: { limit: 100 } });
    expect(echoes.body.page_info.total_count).toBe(16);
  }, 120_000);
});

describe("$webhook_disabled and $webhook_recovered", () => {
  it("reports a 410 deactivation (to a subscriber of that webhook), then PUT reactivation and deactivation", async () => {
    const u = await h.td.createUser();
    const gonePath = hookPath("gone-health", () => ({ status: 410 }));
    const monitorPath = hookPath("gone-monitor");
    const g = await createWebhook(u.api, rx.url(gonePath));
    const monitor = await createWebhook(u.api, rx.url(monitorPath));
    await subscribe(u.api, g.id, monitor.id, "$webhook_disabled");
    await subscribe(u.api, g.id, monitor.id, "$webhook_recovered");
    const p = workflowId();
    await subscribe(u.api, p, g.id);
    await emit(u.api, p, { bye: true });

    const [disabled] = await waitForHealth(u.api, g.id, "$webhook_disabled", 1);
    const [gone] = (await deliveries(u.api, g.id)).data;
    expect(disabled!.event).toMatchObject({ webhook_id: g.id, reason: "receiver", delivery_id: gone!.id });
    expect(disabled!.event.message).toMatch(/410/);
    expect(disabled!.metadata).toMatchObject({ emitter_id: g.id, name: "$webhook_disabled" });
    const [toMonitor] = await arrived(monitorPath, 1);
    expect(JSON.parse(toMonitor!.raw)).toEqual(disabled!.event);
    expect((await u.api.get(`/v1/webhooks/${g.id}`)).body.data.active).toBe(false);

    // Reactivation is a recovery; a PUT that changes nothing reports nothing.
    expect((await u.api.put(`/v1/webhooks/${g.id}`, { json: { active: true } })).status).toBe(200);
    expect((await u.api.put(`/v1/webhooks/${g.id}`, { json: { active: true, name: "again" } })).status).toBe(200);
    const [recovered, ...moreRecovered] = await healthOf(u.api, g.id, "$webhook_recovered");
    expect(moreRecovered).toEqual([]);
    expect(recovered!.event).toMatchObject({ webhook_id: g.id, reason: "api" });
    expect(recovered!.event).not.toHaveProperty("delivery_id");

    expect((await u.api.put(`/v1/webhooks/${g.id}`, { query: { active: "false" } })).status).toBe(200);
    const disabledNow = await healthOf(u.api, g.id, "$webhook_disabled");
    expect(disabledNow.map((s) => s.event.reason)).toEqual(["api", "receiver"]);

    await arrived(monitorPath, 3);
    await quiet(h);
    // Each once (the last two may arrive in either order: fan-out can attempt them side by side).
    expect(
      rx
        .to(monitorPath)
        .map((r) => r.headers["x-tributary-event-name"])
        .sort(),
    ).toEqual(["$webhook_disabled", "$webhook_disabled", "$webhook_recovered"]);
    // A delivery stopped by a 410 is reported as the deactivation, not as a failed delivery.
    expect(await healthOf(u.api, g.id, "$delivery_failed")).toEqual([]);
  });
});

describe("GET /v1/webhooks/{id}/event_summaries", () => {
  it("answers 404 for an unknown, malformed or foreign webhook and 400 for bad parameters", async () => {
    const a = await h.td.createUser();
    const b = await h.td.createUser();
    const wa = await createWebhook(a.api, rx.url(hookPath("summaries-a")));
    for (const id of ["wh_0000000000000000", "not-a-webhook", "dc_0000000000000000"]) {
      const res = await a.api.get(`/v1/webhooks/${id}/event_summaries`);
      expect(res.status, id).toBe(404);
      expect(res.body).toMatchObject({ code: "not_found" });
    }
    expect((await b.api.get(`/v1/webhooks/${wa.id}/event_summaries`)).status).toBe(404);
    expect((await a.api.get(`/v1/webhooks/${wa.id}/event_summaries`, { query: { limit: 0 } })).status).toBe(400);
    expect((await a.api.get(`/v1/webhooks/${wa.id}/event_summaries`, { query: { after: "nope" } })).status).toBe(400);
    const empty = await a.api.get(`/v1/webhooks/${wa.id}/event_summaries`);
    expect(empty.status).toBe(200);
    expect(empty.body).toEqual({ page_info: { total_count: 0, count: 0, start_cursor: null, end_cursor: null }, data: [] });
  });

  it("pages health events newest first like a source's event summaries, and goes with the deleted webhook", async () => {
    const u = await h.td.createUser();
    const w = await createWebhook(u.api, rx.url(hookPath("summaries-page")));
    for (const active of [false, true, false]) expect((await u.api.put(`/v1/webhooks/${w.id}`, { json: { active } })).status).toBe(200);
    const first = await u.api.get(`/v1/webhooks/${w.id}/event_summaries`, { query: { event_name: "$webhook_disabled", limit: 1 } });
    expect(first.body.page_info).toMatchObject({ total_count: 2, count: 1 });
    const next = await u.api.get(`/v1/webhooks/${w.id}/event_summaries`, {
      query: { event_name: "$webhook_disabled", after: first.body.page_info.end_cursor },
    });
    expect(next.body.data).toHaveLength(1);
    expect(compareEventIds(next.body.data[0].id, first.body.data[0].id)).toBe(-1);

    expect((await u.api.del(`/v1/webhooks/${w.id}`)).status).toBe(204);
    // Its event streams went with it (a test may list keys; the daemon never does).
    expect(await h.redis.keys(`${h.td.prefix}:*${w.id}*`)).toEqual([]);
  });
});
