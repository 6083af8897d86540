import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import { createKeys } from "../../../src/store/keys.js";
import {
  absentId,
  createComponent,
  createSource,
  createWebhook,
  expectError,
  expectStatus,
  HTTP_ESM,
  type Json,
  seedSourceEvents,
  subscribe,
  TIMER_CJS,
  TYPED_PROPS,
  workflowId,
} from "./support.js";

/** HTTP endpoint URLs, PUT /sources/{id} and DELETE /sources/{id}. */

const TIMER_MIN = 30;

let td: TestDaemon;
let redis: Redis;

beforeAll(async () => {
  td = await startTestDaemon({ TIMER_MIN_INTERVAL_SECONDS: String(TIMER_MIN) });
  redis = connectRedis();
});

afterAll(async () => {
  redis?.disconnect();
  await td?.close();
});

const endpointsKey = () => `${td.prefix}:{${td.prefix}}:endpoints`;
const tokenOf = (s: Json): string => String(s.configured_props.http.endpoint_url).split("/e/")[1] ?? "";

async function listAll(api: Client): Promise<Json[]> {
  const res = await api.get("/v1/users/me/sources", { query: { limit: 100 } });
  expectStatus(res, 200);
  return res.body.data;
}

describe("HTTP endpoint URLs", () => {
  it("builds the endpoint from PUBLIC_URL and an unguessable token, unique per source", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const urls = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const s = await createSource(u.api, { component_id: c.id });
      expect(Object.keys(s.configured_props)).toEqual(["http"]);
      expect(s.configured_props.http.endpoint_url).toMatch(new RegExp(`^${td.url}/e/[A-Za-z0-9]{24,}$`));
      urls.add(s.configured_props.http.endpoint_url);
    }
    expect(urls.size).toBe(8);
  });

  it("ignores an endpoint_url given by the caller", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, {
      component_code: HTTP_ESM,
      configured_props: { http: { endpoint_url: "https://evil.example/e/x" } },
    });
    expect(s.configured_props.http.endpoint_url.startsWith(`${td.url}/e/`)).toBe(true);
  });

  it("keeps the endpoint stable across PUTs, including when configured_props are re-sent", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM, name: "stable" });
    const url = s.configured_props.http.endpoint_url;
    const toggles = [
      { component_id: s.component_id, active: false },
      { component_id: s.component_id, configured_props: { http: { endpoint_url: "https://elsewhere.example/e/abc" } } },
      { component_code: HTTP_ESM, name: "renamed" },
    ];
    for (const body of toggles) {
      const put = await u.api.put(`/v1/sources/${s.id}`, { json: body });
      expectStatus(put, 200);
      expect(put.body.data.configured_props.http.endpoint_url).toBe(url);
    }
    expect(await redis.hget(endpointsKey(), tokenOf(s))).toBe(`${u.id} ${s.id}`);
  });

  it("drops the endpoint when a PUT switches to a component without an HTTP prop", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const put = await u.api.put(`/v1/sources/${s.id}`, { json: { component_code: TIMER_CJS } });
    expectStatus(put, 200);
    expect(put.body.data.configured_props).toEqual({ timer: { cron: null, interval_seconds: 60 }, greeting: "hello" });
    expect(await redis.hget(endpointsKey(), tokenOf(s))).toBeNull();
  });
});

describe("PUT /sources/{id}", () => {
  it("disables and re-enables; active defaults to true; id and created_at stay", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM, name: "toggle" });
    const off = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, name: "toggle", active: false } });
    expectStatus(off, 200);
    expect(off.body.data).toMatchObject({ id: s.id, user_id: u.id, active: false, name: "toggle", created_at: s.created_at });
    expect(off.body.data.updated_at).toBeGreaterThanOrEqual(s.updated_at);
    expect((await listAll(u.api)).find((x) => x.id === s.id)?.active).toBe(false);
    const on = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, name: "toggle" } });
    expectStatus(on, 200);
    expect(on.body.data.active).toBe(true);
  });

  it.each([
    ["false", false],
    ["true", true],
  ])("accepts active as the string %j (query-string form)", async (active, expected) => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const put = await u.api.put(`/v1/sources/${s.id}`, { query: { component_id: s.component_id, active } });
    expectStatus(put, 200);
    expect(put.body.data.active).toBe(expected);
  });

  it("answers 400 to an active that is not a boolean and changes nothing", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    for (const active of ["maybe", 0, 1, {}]) {
      expectError(await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, active } }), 400, /active/);
    }
    expect((await listAll(u.api))[0]).toMatchObject({ id: s.id, active: true, updated_at: s.updated_at });
  });

  it("requires a component selection", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    expectError(await u.api.put(`/v1/sources/${s.id}`, { json: { active: false } }), 400, /component_id|component_code|component_url/);
    expectError(await u.api.put(`/v1/sources/${s.id}`), 400);
    expect((await listAll(u.api))[0].active).toBe(true);
  });

  it("defaults the name as POST does when it is absent", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM, name: "Custom Name" });
    const put = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id } });
    expectStatus(put, 200);
    expect(put.body.data).toMatchObject({ name: "api-http", name_slug: "api-http" });
  });

  it("keeps configured_props when they are absent and the component is unchanged", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, {
      component_code: TIMER_CJS,
      configured_props: { timer: { cron: "0 * * * *" }, greeting: "bonjour" },
    });
    const put = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, active: false } });
    expectStatus(put, 200);
    expect(put.body.data.configured_props).toEqual({ timer: { cron: "0 * * * *", interval_seconds: null }, greeting: "bonjour" });
    const interval = await u.api.put(`/v1/sources/${s.id}`, {
      json: { component_id: s.component_id, configured_props: { timer: { intervalSeconds: 300 } } },
    });
    expectStatus(interval, 200);
    // Given props replace the old ones: greeting falls back to its default.
    expect(interval.body.data.configured_props).toEqual({ timer: { cron: null, interval_seconds: 300 }, greeting: "hello" });
  });

  it("validates props afresh when the component changes", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    expectError(await u.api.put(`/v1/sources/${s.id}`, { json: { component_code: TYPED_PROPS } }), 400, /url/);
    const ok = await u.api.put(`/v1/sources/${s.id}`, {
      json: { component_code: TYPED_PROPS, configured_props: { url: "https://z.test" } },
    });
    expectStatus(ok, 200);
    expect(ok.body.data.configured_props).toEqual({ url: "https://z.test" });
  });

  it("leaves the source untouched when the update is invalid", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: TYPED_PROPS, name: "Keep Me", configured_props: { url: "https://k.test" } });
    const bad = await u.api.put(`/v1/sources/${s.id}`, {
      json: { component_id: s.component_id, name: "Renamed", active: false, configured_props: { url: 5 } },
    });
    expectError(bad, 400, /url/);
    const [now] = await listAll(u.api);
    expect(now).toEqual({ ...s, user_id: undefined });
    // The slug of the rejected name was not claimed.
    expect((await createSource(u.api, { component_id: s.component_id, name: "Renamed", configured_props: { url: "u" } })).name_slug).toBe(
      "renamed",
    );
  });

  it("answers 404 for an unknown id, a malformed id and another user's source, and changes nothing", async () => {
    const owner = await td.createUser();
    const other = await td.createUser();
    const s = await createSource(owner.api, { component_code: HTTP_ESM });
    const c = await createComponent(other.api, HTTP_ESM);
    expectError(await other.api.put(`/v1/sources/${s.id}`, { json: { component_id: c.id, active: false } }), 404);
    expectError(await other.api.put(`/v1/sources/${absentId("dc_")}`, { json: { component_id: c.id } }), 404);
    expectError(await other.api.put("/v1/sources/not-an-id", { json: { component_id: c.id } }), 404);
    expect((await listAll(owner.api))[0]).toMatchObject({ id: s.id, active: true, component_id: s.component_id });
  });
});

describe("DELETE /sources/{id}", () => {
  it("answers 204 with no body; the source is gone; a second delete is a 404", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const del = await u.api.del(`/v1/sources/${s.id}`);
    expectStatus(del, 204);
    expect(del.text).toBe("");
    expect(await listAll(u.api)).toEqual([]);
    expect((await u.api.get("/v1/users/me/sources")).body.page_info.total_count).toBe(0);
    expectError(await u.api.del(`/v1/sources/${s.id}`), 404);
    expectError(await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id } }), 404);
    expectError(await u.api.get(`/v1/sources/${s.id}/event_summaries`), 404);
    expect(await redis.hget(endpointsKey(), tokenOf(s))).toBeNull();
  });

  it("removes the subscriptions that name it, as emitter or listener, and only those", async () => {
    const u = await td.createUser();
    const a = await createSource(u.api, { component_code: HTTP_ESM });
    const b = await createSource(u.api, { component_code: HTTP_ESM });
    const hook = await createWebhook(u.api, "https://example.com/h");
    const p = workflowId();
    await subscribe(u.api, a.id, hook.id);
    await subscribe(u.api, a.id, b.id, "$errors");
    await subscribe(u.api, b.id, a.id);
    await subscribe(u.api, p, a.id);
    const keep = [await subscribe(u.api, b.id, hook.id), await subscribe(u.api, "dc_*", hook.id)];
    expectStatus(await u.api.del(`/v1/sources/${a.id}`), 204);
    const list = await u.api.get("/v1/users/me/subscriptions");
    const byId = (x: Json, y: Json) => String(x.id).localeCompare(String(y.id));
    expect([...list.body.data].sort(byId)).toEqual([...keep].sort(byId));
  });

  it("removes auto-subscriptions that deliver to it", async () => {
    const u = await td.createUser();
    const listener = await createSource(u.api, { component_code: HTTP_ESM });
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: listener.id, event_name: "default" } }), 200);
    expectStatus(await u.api.del(`/v1/sources/${listener.id}`), 204);
    await createSource(u.api, { component_code: HTTP_ESM });
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
  });

  it("removes its events on every channel", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    await seedSourceEvents(td, redis, u.id, s.id, [{ a: 1 }, { a: 2 }]);
    await seedSourceEvents(td, redis, u.id, s.id, [{ log: 1 }], "$logs");
    const before = await u.api.get(`/v1/sources/${s.id}/event_summaries`);
    expect(before.body.page_info.total_count).toBe(2);
    expectStatus(await u.api.del(`/v1/sources/${s.id}`), 204);
    expect(await redis.keys(`${createKeys(td.prefix).userKeyBase(u.id)}:events:${s.id}:*`)).toEqual([]);
  });

  it("answers 404 for another user's source and leaves it and its events alone", async () => {
    const owner = await td.createUser();
    const other = await td.createUser();
    const s = await createSource(owner.api, { component_code: HTTP_ESM });
    await seedSourceEvents(td, redis, owner.id, s.id, [{ mine: true }]);
    expectError(await other.api.del(`/v1/sources/${s.id}`), 404);
    expectError(await other.api.get(`/v1/sources/${s.id}/event_summaries`), 404);
    expectError(await other.api.del(`/v1/sources/${s.id}/events`), 404);
    expect((await owner.api.get(`/v1/sources/${s.id}/event_summaries`)).body.page_info.total_count).toBe(1);
    expect(await listAll(owner.api)).toHaveLength(1);
    expect(await listAll(other.api)).toEqual([]);
  });

  it("answers 405 to PATCH on a single source path (GET reads it: where-things-are.test.ts)", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    expectError(await u.api.request("PATCH", `/v1/sources/${s.id}`, { json: {} }), 405);
  });
});
