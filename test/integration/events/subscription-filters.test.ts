import { Queue } from "bullmq";
import { describe, expect, it } from "vitest";
import { QUEUES } from "../../../src/queue/catalog.js";
import { createKeys } from "../../../src/store/keys.js";
import type { Client } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { arrived, createWebhook, emit, h, hookPath, installDeliveryHarness, quiet, rx, workflowId } from "../../helpers/delivery-e2e.js";
import { createSource, events, expectStatus } from "../runtime/support.js";

/**
 * Subscription filters end to end (SPEC §12): given to POST /v1/subscriptions (JSON body or query
 * string), returned on the subscription object, replaced by re-posting the triple, applied by
 * fan-out before any delivery or source run, and counted as tributary_deliveries_total{outcome="filtered"}.
 */

installDeliveryHarness();

async function subscribeWith(api: Client, emitter: string, listener: string, filter?: unknown) {
  const res = await api.post("/v1/subscriptions", { json: { emitter_id: emitter, listener_id: listener, filter } });
  expect(res.status, res.text).toBe(200);
  return res.body.data as { id: string; filter: unknown };
}

/** tributary_deliveries_total{listener_kind, outcome="filtered"} of the harness daemon (0 before the first). */
async function filtered(kind: "webhook" | "workflow" | "source"): Promise<number> {
  const text = await (await fetch(`${h.td.url}/metrics`)).text();
  const m = text.match(new RegExp(`^tributary_deliveries_total\\{listener_kind="${kind}",outcome="filtered"\\} (\\d+)`, "m"));
  return Number(m?.[1] ?? 0);
}

describe("subscription filters", () => {
  it("delivers the events that match, and counts the others filtered", async () => {
    const u = await h.td.createUser();
    const path = hookPath("filtered");
    const hook = await createWebhook(u.api, rx.url(path));
    const emitter = workflowId();
    const filter = { "order.total": { $gte: 100 }, "order.currency": { $in: ["EUR", "USD"] } };
    const sub = await subscribeWith(u.api, emitter, hook.id, filter);
    expect(sub.filter).toEqual(filter);
    const before = await filtered("webhook");

    await emit(u.api, emitter, { order: { total: 50, currency: "EUR" } });
    await emit(u.api, emitter, { order: { total: "150", currency: "EUR" } });
    await emit(u.api, emitter, { order: { total: 150, currency: "GBP" } });
    await emit(u.api, emitter, { other: true });
    await emit(u.api, emitter, { order: { total: 150, currency: "USD" }, n: 1 });
    await emit(u.api, emitter, { order: { total: 100, currency: "EUR" }, n: 2 });
    await arrived(path, 2);
    await quiet(h);

    expect(rx.to(path).map((r) => (r.json as { n: number }).n)).toEqual([1, 2]);
    expect((await filtered("webhook")) - before).toBe(4);
  });

  it("returns the filter on every subscription object, null when none", async () => {
    const u = await h.td.createUser();
    const hook = await createWebhook(u.api, rx.url(hookPath("listed")));
    const plain = await subscribeWith(u.api, workflowId(), hook.id);
    expect(plain.filter).toBeNull();
    // The query string takes the filter as JSON text.
    const emitter = workflowId();
    const res = await u.api.post("/v1/subscriptions", { query: { emitter_id: emitter, listener_id: hook.id, filter: '{"kind":"a"}' } });
    expect(res.status, res.text).toBe(200);
    expect(res.body.data.filter).toEqual({ kind: "a" });
    const listed = (await u.api.get("/v1/users/me/subscriptions")).body.data as { id: string; filter: unknown }[];
    expect(Object.fromEntries(listed.map((s) => [s.id, s.filter]))).toEqual({ [plain.id]: null, [res.body.data.id]: { kind: "a" } });
  });

  it("replaces the filter when the triple is posted again, keeps it when the filter is absent, clears it with null", async () => {
    const u = await h.td.createUser();
    const path = hookPath("replaced");
    const hook = await createWebhook(u.api, rx.url(path));
    const emitter = workflowId();
    const first = await subscribeWith(u.api, emitter, hook.id, { kind: "a" });
    const again = await subscribeWith(u.api, emitter, hook.id, { kind: "b" });
    expect(again).toEqual({ ...first, filter: { kind: "b" } });
    // Absent: the filter stays.
    expect((await subscribeWith(u.api, emitter, hook.id)).filter).toEqual({ kind: "b" });
    const listed = (await u.api.get("/v1/users/me/subscriptions")).body.data;
    expect(listed).toEqual([{ ...first, filter: { kind: "b" } }]);

    await emit(u.api, emitter, { kind: "a", n: 1 });
    await emit(u.api, emitter, { kind: "b", n: 2 });
    await arrived(path, 1);
    await quiet(h);
    expect(rx.to(path).map((r) => (r.json as { n: number }).n)).toEqual([2]);

    // null clears it: every event is delivered again.
    expect((await subscribeWith(u.api, emitter, hook.id, null)).filter).toBeNull();
    await emit(u.api, emitter, { kind: "a", n: 3 });
    await arrived(path, 2);
    expect(rx.to(path).map((r) => (r.json as { n: number }).n)).toEqual([2, 3]);
  });

  it("does not run a source listener for an event its filter refuses", async () => {
    const u = await h.td.createUser();
    const source = await createSource(
      u.api,
      `module.exports = { name: "Echo", version: "0.0.1", props: { http: "$.interface.http" }, async run(event) { this.$emit({ got: event }); } };`,
    );
    const emitter = workflowId();
    await subscribeWith(u.api, emitter, source.id, { $not: { skip: true } });
    const before = await filtered("source");

    await emit(u.api, emitter, { skip: true, n: 1 });
    // Fan-out is done once the outbox is empty: a run of the refused event would be queued by then.
    await quiet(h);
    expect((await filtered("source")) - before).toBe(1);
    await emit(u.api, emitter, { skip: false, n: 2 });
    const got = await waitFor(
      async () => {
        const list = await events(u.api, source.id);
        return list.length > 0 ? list : undefined;
      },
      { what: "the source's run of the matching event" },
    );
    // Once no source run waits or runs, a run of the refused event would have emitted by now.
    const runs = new Queue(QUEUES.sourceRun, {
      connection: h.redis.duplicate(),
      prefix: createKeys(h.td.prefix).queuePrefix("source-run"),
    });
    try {
      await waitFor(
        async () => {
          const c = await runs.getJobCounts("wait", "active", "delayed", "prioritized");
          return Object.values(c).every((n) => n === 0);
        },
        { what: "the source-run queue to be idle" },
      );
    } finally {
      await runs.close();
    }
    expect(got.map((e: { event: { got: { n: number } } }) => e.event.got.n)).toEqual([2]);
    expect((await events(u.api, source.id)).map((e: { event: { got: { n: number } } }) => e.event.got.n)).toEqual([2]);
  });

  it("refuses an invalid filter with a 400 naming the path and operator, and writes nothing", async () => {
    const u = await h.td.createUser();
    const hook = await createWebhook(u.api, rx.url(hookPath("invalid")));
    const emitter = workflowId();
    const cases: [unknown, RegExp][] = [
      [{ "user.name": { $regex: "^a" } }, /unknown operator \$regex at user\.name/],
      [{ total: { $gt: true } }, /\$gt at total needs a number or a string/],
      [{ tags: { $in: "a" } }, /\$in at tags needs an array/],
      [{ $or: [] }, /\$or must be a non-empty array/],
      [{ "a..b": 1 }, /path "a\.\.b" has an empty segment/],
      [[1, 2], /filter must be a JSON object/],
      ["{not json", /filter must be a JSON object/],
      [{ a: "x".repeat(5000) }, /at most 4096 characters/],
    ];
    for (const [filter, message] of cases) {
      const res = await u.api.post("/v1/subscriptions", { json: { emitter_id: emitter, listener_id: hook.id, filter } });
      expect(res.status, JSON.stringify(filter)).toBe(400);
      expect(res.body).toMatchObject({ code: "invalid_parameter" });
      expect(res.body.error).toMatch(message);
    }
    const fromQuery = await u.api.post("/v1/subscriptions", {
      query: { emitter_id: emitter, listener_id: hook.id, filter: '{"n":{"$exists":"yes"}}' },
    });
    expectStatus(fromQuery, 400);
    expect(fromQuery.body.error).toBe("filter: $exists at n needs true or false");
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
  });
});
