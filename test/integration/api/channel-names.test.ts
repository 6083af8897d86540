import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeEventNameHeader } from "../../../src/domain/channel-name.js";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { createWebhook, emit, expectError, expectStatus, subscribe, workflowId } from "./support.js";

/**
 * Channel names beyond plain ASCII: the ingress, subscriptions, summaries and deliveries agree on
 * them, and the `x-tributary-event-name` header carries them percent-encoded
 * (domain/channel-name.ts), so a name HTTP cannot carry as it is still arrives, decodable.
 */

let td: TestDaemon;
let rx: Receiver;

beforeAll(async () => {
  [td, rx] = await Promise.all([startTestDaemon(), startReceiver()]);
});

afterAll(async () => {
  await Promise.all([td?.close(), rx?.close()]);
});

/** Subscribes a fresh webhook to `name` on a fresh workflow, emits one event there, and returns what arrived. */
async function deliverOn(name: string, path: string) {
  const u = await td.createUser();
  const p = workflowId();
  const hook = await createWebhook(u.api, rx.url(path));
  await subscribe(u.api, p, hook.id, name);
  const eventId = await emit(u.api, p, { on: name }, { name });
  const got = await rx.waitFor((r) => r.to(path)[0], { what: `a delivery on ${JSON.stringify(name)}` });
  return { u, p, hook, eventId, got };
}

describe("channel names in deliveries", () => {
  it("delivers an event on emoji😀 to a webhook, with an event-name header that decodes to the name", async () => {
    const name = "emoji😀";
    const { u, p, hook, eventId, got } = await deliverOn(name, "/emoji");
    expect(got.json).toEqual({ on: name });
    expect(got.headers["x-tributary-event-id"]).toBe(eventId);
    const header = String(got.headers["x-tributary-event-name"]);
    expect(header).toBe("emoji%F0%9F%98%80");
    expect(decodeEventNameHeader(header)).toBe(name);
    // The attempt log and the summaries name the channel as it was emitted.
    const log = await waitFor(async () => {
      const res = await u.api.get(`/v1/webhooks/${hook.id}/deliveries`);
      return res.body?.data?.[0]?.status === "delivered" ? res.body.data[0] : undefined;
    });
    expect(log.event_name).toBe(name);
    const summaries = await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { event_name: name } });
    expectStatus(summaries, 200);
    expect(summaries.body.data.map((e: { id: string }) => e.id)).toEqual([eventId]);
    expect(summaries.body.data[0].metadata.name).toBe(name);
  });

  it("keeps a name of spaces a channel of its own: summaries, subscriptions and the header agree", async () => {
    const name = "   ";
    const { u, p, eventId, got } = await deliverOn(name, "/spaces");
    const header = String(got.headers["x-tributary-event-name"]);
    expect(header).toBe("%20%20%20");
    expect(decodeEventNameHeader(header)).toBe(name);

    const onSpaces = await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { event_name: name } });
    expect(onSpaces.body.data.map((e: { id: string }) => e.id)).toEqual([eventId]);
    expect(onSpaces.body.data[0].metadata.name).toBe(name);
    // Not the default channel, which is empty.
    const dflt = await u.api.get(`/v1/workflows/${p}/event_summaries`);
    expectStatus(dflt, 200);
    expect(dflt.body.data).toEqual([]);
    // A default-channel subscription does not receive it; a second event on "   " reaches the first only.
    const other = await createWebhook(u.api, rx.url("/spaces-default"));
    await subscribe(u.api, p, other.id, "");
    const second = await emit(u.api, p, { again: true }, { name });
    await rx.waitFor((r) => r.to("/spaces").find((q) => q.headers["x-tributary-event-id"] === second), { what: "the second event" });
    expect(rx.to("/spaces-default")).toEqual([]);
  });

  it.each([
    ["a percent sign", "100% done"],
    ["Latin-1 and CJK", "café 日本"],
    ["edges of spaces", " padded "],
  ])("delivers a name with %s, decodable from the header", async (_label, name) => {
    const path = `/n${Buffer.from(name).toString("hex")}`;
    const { got } = await deliverOn(name, path);
    expect(decodeEventNameHeader(String(got.headers["x-tributary-event-name"]))).toBe(name);
  });

  it("refuses a name with an unpaired surrogate with 400 at the ingress and in subscriptions alike", async () => {
    const u = await td.createUser();
    const p = workflowId();
    await emit(u.api, p, { first: true });
    const lone = "bad\uD800name";
    const body = JSON.stringify({ event: { x: 1 }, name: lone }).replace("\\ud800", "\\uD800");
    const ingress = await u.api.post(`/v1/workflows/${p}/events`, { body, headers: { "content-type": "application/json" } });
    expectError(ingress, 400, /name must not contain unpaired UTF-16 surrogates/);
    const hook = await createWebhook(u.api, rx.url("/never"));
    const sub = await u.api.post("/v1/subscriptions", {
      body: JSON.stringify({ emitter_id: p, listener_id: hook.id, event_name: lone }),
      headers: { "content-type": "application/json" },
    });
    expectError(sub, 400, /event_name must not contain unpaired UTF-16 surrogates/);
    const summaries = await u.api.get(`/v1/workflows/${p}/event_summaries?event_name=bad%ED%A0%80name`);
    // %ED%A0%80 is not valid UTF-8; whatever the query parser makes of it is refused or unknown, never a 500.
    expect(summaries.status).toBeLessThan(500);
  });
});
