import { describe, expect, it } from "vitest";
import type { Client } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { arrived, createWebhook, emit, h, hookPath, installDeliveryHarness, quiet, rx, workflowId } from "../../helpers/delivery-e2e.js";

/**
 * "Why didn't it arrive?" for a filtered event: the webhook's own answer (GET /v1/webhooks/{id})
 * says how many events its subscriptions' filters kept from it, and which was the latest.
 */

installDeliveryHarness();

async function subscribeWith(api: Client, emitter: string, listener: string, filter?: unknown) {
  const res = await api.post("/v1/subscriptions", { json: { emitter_id: emitter, listener_id: listener, filter } });
  expect(res.status, res.text).toBe(200);
}

describe("filtered events on the webhook", () => {
  it("counts the events a filter kept from the webhook and names the latest", async () => {
    const u = await h.td.createUser();
    const path = hookPath("filtered-visible");
    const hook = await createWebhook(u.api, rx.url(path));
    const plain = await createWebhook(u.api, rx.url(hookPath("filtered-visible-plain")));
    const emitter = workflowId();
    await subscribeWith(u.api, emitter, hook.id, { order: { $gte: 100 } });
    await subscribeWith(u.api, emitter, plain.id);

    const started = Math.floor(Date.now() / 1000);
    await emit(u.api, emitter, { order: 42 });
    const last = await emit(u.api, emitter, { order: 7 });
    await emit(u.api, emitter, { order: 420 });
    await arrived(path, 1);
    await quiet(h);

    const filtered = await waitFor(
      async () => {
        const res = await u.api.get(`/v1/webhooks/${hook.id}`);
        expect(res.status, res.text).toBe(200);
        return res.body.data.filtered?.count === 2 && res.body.data.filtered;
      },
      { timeoutMs: 20_000, what: "the webhook's filtered count" },
    );
    expect(filtered.last_event_id).toBe(last);
    expect(filtered.last_at).toBeGreaterThanOrEqual(started - 1);
    expect(filtered.last_at).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    // Nothing filtered: no field.
    const other = await u.api.get(`/v1/webhooks/${plain.id}`);
    expect(other.status).toBe(200);
    expect(other.body.data).not.toHaveProperty("filtered");
    // The list stays as it was.
    const list = await u.api.get("/v1/users/me/webhooks");
    for (const w of list.body.data) expect(w).not.toHaveProperty("filtered");
  });
});
