import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeHarness, createWebhook, harness, type Harness } from "../../helpers/delivery-e2e.js";
import { seedDeliveries, type SeedDelivery } from "../../helpers/attempt-log-seed.js";
import { createKeys } from "../../../src/store/keys.js";

/**
 * Attempt-log queries and the replay API's refusals (SPEC §12): status, since/until and
 * event_name selectors over a seeded log, their pages, dry runs, and 400s/404s. The replays
 * themselves are test/integration/delivery/bulk-replay.test.ts.
 */

let h: Harness;
beforeAll(async () => {
  // ROLES=api: no worker takes the replays planned here, so nothing changes the seeded log.
  h = await harness({ ROLES: "api" });
});
afterAll(async () => {
  await closeHarness(h);
});

const T0 = 1_700_000_000_000;
const STATUSES = ["failed", "delivered", "pending"] as const;
const NAMES = ["a", "b", ""];

/** 30 deliveries one second apart: statuses and event names cycle (d_q00 is the oldest). */
function log30(): SeedDelivery[] {
  return Array.from({ length: 30 }, (_, i) => ({
    id: `d_q${String(i).padStart(2, "0")}`,
    atMs: T0 + i * 1000,
    status: STATUSES[i % 3] as (typeof STATUSES)[number],
    eventName: NAMES[Math.floor(i / 3) % 3] as string,
  }));
}

async function seeded() {
  const u = await h.td.createUser();
  const w = await createWebhook(u.api, "http://127.0.0.1:9/never");
  const list = log30();
  await seedDeliveries(h.redis, h.td.prefix, u.id, w.id, list);
  const expected = (keep: (d: SeedDelivery) => boolean) =>
    list
      .filter(keep)
      .map((d) => d.id)
      .reverse();
  return { u, w, expected };
}

type Api = Awaited<ReturnType<typeof seeded>>["u"]["api"];

async function ids(api: Api, webhookId: string, query: Record<string, unknown>) {
  const res = await api.get(`/v1/webhooks/${webhookId}/deliveries`, { query: { limit: 100, ...query } });
  expect(res.status, res.text).toBe(200);
  return { ids: (res.body.data as { id: string }[]).map((d) => d.id), body: res.body };
}

describe("GET /v1/webhooks/{id}/deliveries selectors", () => {
  it("filters by status, event_name (default = the default channel) and both", async () => {
    const { u, w, expected } = await seeded();
    const failed = await ids(u.api, w.id, { status: "failed" });
    expect(failed.ids).toEqual(expected((d) => d.status === "failed"));
    expect(failed.body.page_info.total_count).toBe(10);
    for (const d of failed.body.data) expect(d.status).toBe("failed");

    expect((await ids(u.api, w.id, { event_name: "a" })).ids).toEqual(expected((d) => d.eventName === "a"));
    expect((await ids(u.api, w.id, { event_name: "default" })).ids).toEqual(expected((d) => d.eventName === ""));
    expect((await ids(u.api, w.id, { event_name: "" })).ids).toEqual(expected((d) => d.eventName === ""));
    expect((await ids(u.api, w.id, { event_name: "nope" })).ids).toEqual([]);
    const both = await ids(u.api, w.id, { status: "pending", event_name: "b" });
    expect(both.ids).toEqual(expected((d) => d.status === "pending" && d.eventName === "b"));
    expect(both.ids.length).toBeGreaterThan(0);
  });

  it("selects by event time: since inclusive, until exclusive, in epoch seconds", async () => {
    const { u, w, expected } = await seeded();
    const since = T0 / 1000 + 5;
    const until = T0 / 1000 + 12;
    const got = await ids(u.api, w.id, { since, until });
    expect(got.ids).toEqual(expected((d) => d.atMs >= since * 1000 && d.atMs < until * 1000));
    expect(got.ids[0]).toBe("d_q11");
    expect(got.ids.at(-1)).toBe("d_q05");
    expect(got.body.page_info.total_count).toBe(7);
    expect((await ids(u.api, w.id, { since: T0 / 1000 + 29 })).ids).toEqual(["d_q29"]);
    expect((await ids(u.api, w.id, { until: T0 / 1000 + 1 })).ids).toEqual(["d_q00"]);
    const failedInWindow = await ids(u.api, w.id, { since, until, status: "failed" });
    expect(failedInWindow.ids).toEqual(["d_q09", "d_q06"]);
  });

  it("pages through filtered results with after and before, each match exactly once", async () => {
    const { u, w, expected } = await seeded();
    const all = expected((d) => d.status !== "delivered");
    const seen: string[] = [];
    const pages: { start: string; ids: string[] }[] = [];
    let after: string | undefined;
    for (let guard = 0; guard < 20; guard++) {
      const res = await u.api.get(`/v1/webhooks/${w.id}/deliveries`, {
        query: { status: "failed", limit: 3, ...(after ? { after } : {}) },
      });
      expect(res.status, res.text).toBe(200);
      const page = (res.body.data as { id: string }[]).map((d) => d.id);
      expect(res.body.page_info.total_count).toBe(10);
      expect(res.body.page_info.count).toBe(page.length);
      if (page.length === 0) break;
      seen.push(...page);
      pages.push({ start: res.body.page_info.start_cursor, ids: page });
      after = res.body.page_info.end_cursor;
    }
    expect(seen).toEqual(expected((d) => d.status === "failed"));
    expect(all.length).toBe(20);
    // `before` the third page's first item is the second page.
    const back = await u.api.get(`/v1/webhooks/${w.id}/deliveries`, { query: { status: "failed", limit: 3, before: pages[2]!.start } });
    expect(back.status, back.text).toBe(200);
    expect((back.body.data as { id: string }[]).map((d) => d.id)).toEqual(pages[1]!.ids);
    // A cursor of a delivery the filter does not match still anchors by its place in the log.
    const delivered = expected((d) => d.status === "delivered");
    const fromDelivered = await ids(u.api, w.id, { status: "failed", after: Buffer.from(delivered[0]!).toString("base64url") });
    expect(fromDelivered.ids).toEqual(expected((d) => d.status === "failed" && d.atMs < T0 + 28_000));
  });

  it("answers 400 naming the parameter for bad selectors and cursors, 404 for a webhook that is not the caller's", async () => {
    const { u, w } = await seeded();
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ status: "lost" }, /status/],
      [{ since: "yesterday" }, /since/],
      [{ until: "-1" }, /until/],
      [{ since: 200, until: 100 }, /since must be earlier than until/],
      [{ event_name: "x".repeat(201) }, /event_name/],
      [{ status: "failed", after: "not!a!cursor" }, /after/],
      [{ status: "failed", after: Buffer.from("d_unknown").toString("base64url") }, /after/],
    ];
    for (const [query, message] of cases) {
      const res = await u.api.get(`/v1/webhooks/${w.id}/deliveries`, { query });
      expect(res.status, `${JSON.stringify(query)}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatch(message);
    }
    const stranger = await h.td.createUser();
    expect((await stranger.api.get(`/v1/webhooks/${w.id}/deliveries`, { query: { status: "failed" } })).status).toBe(404);
  });
});

describe("POST /v1/webhooks/{id}/deliveries/replay and GET .../replays/{id}", () => {
  it("counts failed deliveries in a dry run, from the query string or a JSON body", async () => {
    const { u, w } = await seeded();
    const dry = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { query: { dry_run: "true" } });
    expect(dry.status, dry.text).toBe(200);
    expect(dry.body).toEqual({ data: { matched: 10 } });
    const narrowed = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, {
      json: { dry_run: true, event_name: "a", since: T0 / 1000 + 9 },
    });
    expect(narrowed.status, narrowed.text).toBe(200);
    // Failed (every third) with event name "a" (seconds 0-2, 9-11, 18-20, 27-29) from second 9 on: d_q09, d_q18, d_q27.
    expect(narrowed.body.data.matched).toBe(3);
    // A dry run plans nothing.
    const keysLeft = await h.redis.keys(`${createKeys(h.td.prefix).userKeyBase(u.id)}:replay*`);
    expect(keysLeft).toEqual([]);
  });

  it("acknowledges a replay with 202 and an rpl_ id whose status counts the plan; 404 for ids that are not the webhook's", async () => {
    const { u, w } = await seeded();
    const res = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { json: { event_name: "b" } });
    expect(res.status, res.text).toBe(202);
    expect(res.body.data.id).toMatch(/^rpl_[A-Za-z0-9]{16}$/);
    expect(res.body.data.matched).toBe(3);
    const status = await u.api.get(`/v1/webhooks/${w.id}/replays/${res.body.data.id}`);
    expect(status.status, status.text).toBe(200);
    // No worker runs in this daemon: everything is still to be queued.
    expect(status.body.data).toMatchObject({
      id: res.body.data.id,
      webhook_id: w.id,
      matched: 3,
      queued: 0,
      delivered: 0,
      failed: 0,
      pending: 3,
    });
    expect(status.body.data.state).toBe("queueing");
    expect(status.body.data.expires_at - status.body.data.created_at).toBe(24 * 3600);

    // The same selectors again while it is queueing: the same replay, nothing planned twice.
    const again = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { query: { event_name: "b", status: "failed" } });
    expect(again.status, again.text).toBe(202);
    expect(again.body.data).toEqual({ id: res.body.data.id, matched: 3 });
    // Other selectors: another replay.
    const other = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { json: { event_name: "a" } });
    expect(other.status, other.text).toBe(202);
    expect(other.body.data.id).not.toBe(res.body.data.id);
    // Nothing matched, nothing to queue: an identical request is a replay of its own.
    const empty = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { json: { event_name: "nothing" } });
    expect(empty.body.data.matched).toBe(0);
    const emptyAgain = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { json: { event_name: "nothing" } });
    expect(emptyAgain.body.data.id).not.toBe(empty.body.data.id);
    const emptyStatus = await u.api.get(`/v1/webhooks/${w.id}/replays/${empty.body.data.id}`);
    expect(emptyStatus.body.data).toMatchObject({ state: "done", matched: 0, pending: 0 });

    const otherHook = await createWebhook(u.api, "http://127.0.0.1:9/other");
    expect((await u.api.get(`/v1/webhooks/${otherHook.id}/replays/${res.body.data.id}`)).status).toBe(404);
    const stranger = await h.td.createUser();
    expect((await stranger.api.get(`/v1/webhooks/${w.id}/replays/${res.body.data.id}`)).status).toBe(404);
    expect((await u.api.get(`/v1/webhooks/${w.id}/replays/rpl_0000000000000000`)).status).toBe(404);
    expect((await u.api.get(`/v1/webhooks/${w.id}/replays/not-an-id`)).status).toBe(404);
  });

  it("answers 400 naming the parameter for bad replay selectors", async () => {
    const { u, w } = await seeded();
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ status: "delivered" }, /status must be failed/],
      [{ status: 3 }, /status/],
      [{ dry_run: "maybe" }, /dry_run/],
      [{ since: 1.5 }, /since/],
      [{ event_name: ["a"] }, /event_name/],
    ];
    for (const [json, message] of cases) {
      const res = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { json });
      expect(res.status, `${JSON.stringify(json)}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatch(message);
    }
    const query = await u.api.post(`/v1/webhooks/${w.id}/deliveries/replay`, { query: { until: "soon" } });
    expect(query.status, query.text).toBe(400);
    expect(query.body.error).toMatch(/until/);
  });
});
