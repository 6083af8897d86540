import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import type { ReceivedRequest } from "../../helpers/receiver.js";
import {
  arrived,
  createWebhook,
  emit,
  h,
  headersOf,
  hookPath,
  installDeliveryHarness,
  quiet,
  rx,
  subscribe,
  workflowId,
} from "../../helpers/delivery-e2e.js";

/**
 * Webhook deliveries end to end (SPEC §6): signed so standardwebhooks verifies them, one per
 * subscribed webhook, channels kept apart, globs matched within the user.
 */

installDeliveryHarness();

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
});
