import { waitFor } from "../../helpers/wait.js";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import {
  absentId,
  b64url,
  createComponent,
  createSource,
  createWebhook,
  expectError,
  expectStatus,
  HTTP_ESM,
  type Json,
  loopbackServer,
  NAMED_ONLY,
  seedSourceEvents,
  subscribe,
  TIMER_CJS,
  TYPED_PROPS,
  uniqueComponent,
  workflowId,
} from "./support.js";

/** POST/PUT/DELETE /sources and GET /users/me/sources. */

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

describe("POST /sources", () => {
  it("creates a source from component code and answers with the documented fields", async () => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/sources", { json: { component_code: TIMER_CJS, configured_props: { greeting: "hi" } } });
    expectStatus(res, 200);
    const s = res.body.data;
    expect(Object.keys(s).sort()).toEqual([
      "active",
      "component_id",
      "configured_props",
      "created_at",
      "id",
      "name",
      "name_slug",
      "updated_at",
      "user_id",
    ]);
    expect(s.id).toMatch(/^dc_[A-Za-z0-9]{10,}$/);
    expect(s.user_id).toBe(u.id);
    expect(s.component_id).toMatch(/^sc_/);
    expect(s.active).toBe(true);
    expect(Number.isInteger(s.created_at) && s.updated_at === s.created_at).toBe(true);
    // The db prop holds no value; the timer is normalised from its default.
    expect(s.configured_props).toEqual({ timer: { cron: null, interval_seconds: 60 }, greeting: "hi" });
    // The component was saved for the user and can be reused.
    const c = await u.api.get(`/v1/components/${s.component_id}`);
    expect(c.body.data.code).toBe(TIMER_CJS);
  });

  it("uses component_id over component_code and component_url", async () => {
    const server = await loopbackServer((_req, res) => res.end(TYPED_PROPS));
    try {
      const u = await td.createUser();
      const c = await createComponent(u.api, HTTP_ESM);
      const s = await createSource(u.api, { component_id: c.id, component_code: TIMER_CJS, component_url: server.url("/c.js") });
      expect(s.component_id).toBe(c.id);
      expect(server.hits).toEqual([]);
    } finally {
      await server.close();
    }
  });

  it("creates a source from component_url", async () => {
    const server = await loopbackServer((_req, res) => res.end(HTTP_ESM));
    try {
      const u = await td.createUser();
      const s = await createSource(u.api, { component_url: server.url("/http.js") });
      expect(s.name).toBe("api-http");
      const c = await u.api.get(`/v1/components/${s.component_id}`);
      expect(c.body.data.component_url).toBe(server.url("/http.js"));
    } finally {
      await server.close();
    }
  });

  it("answers 400 when no component is selected, and 404 for an unknown or foreign component_id", async () => {
    const owner = await td.createUser();
    const other = await td.createUser();
    const c = await createComponent(owner.api, HTTP_ESM);
    expectError(await other.api.post("/v1/sources", { json: { name: "x" } }), 400, /component_id|component_code|component_url/);
    expectError(await other.api.post("/v1/sources", { json: { component_id: "" } }), 400);
    expectError(await other.api.post("/v1/sources", { json: { component_id: "banana" } }), 400, /component_id/);
    expectError(await other.api.post("/v1/sources", { json: { component_id: 12 } }), 400, /component_id/);
    expectError(await other.api.post("/v1/sources", { json: { component_id: c.id } }), 404);
    expectError(await other.api.post("/v1/sources", { json: { component_id: absentId("sc_") } }), 404);
    expect((await other.api.get("/v1/users/me/sources")).body.page_info.total_count).toBe(0);
  });

  it("answers 400 for code that is not a component and stores no source", async () => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/sources", { json: { component_code: "module.exports = 1" } }), 400);
    expect((await u.api.get("/v1/users/me/sources")).body.page_info.total_count).toBe(0);
  });

  it("takes its parameters from the query string too", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const res = await u.api.post("/v1/sources", { query: { component_id: c.id, name: "From Query" } });
    expectStatus(res, 200);
    expect(res.body.data).toMatchObject({ component_id: c.id, name: "From Query", name_slug: "from-query" });
  });
});

describe("names and slugs", () => {
  it("defaults the name to the slug of the component's name", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: NAMED_ONLY });
    expect(s.name).toBe("weird-name-2000");
    expect(s.name_slug).toBe("weird-name-2000");
    const empty = await createSource(u.api, { component_code: NAMED_ONLY, name: "" });
    expect(empty.name).toBe("weird-name-2000");
    expect(empty.name_slug).toBe("weird-name-2000-2");
  });

  it.each([
    ["  Hello, World!  ", "hello-world"],
    ["MiXeD_Case__and--dashes", "mixed-case-and-dashes"],
    ["Ünïcödé Ñame", "n-c-d-ame"],
    ["!!!", "source"],
    ["trailing ---", "trailing"],
    ["emoji 😀 inside", "emoji-inside"],
  ])("slugifies %j as %j", async (name, slug) => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM, name });
    expect(s.name).toBe(name);
    expect(s.name_slug).toBe(slug);
  });

  it("numbers colliding slugs within a user, but not across users", async () => {
    const u = await td.createUser();
    const other = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const slugs: string[] = [];
    for (const name of ["My Source", "my source", "MY-SOURCE", "my_source"]) {
      slugs.push((await createSource(u.api, { component_id: c.id, name })).name_slug);
    }
    expect(slugs).toEqual(["my-source", "my-source-2", "my-source-3", "my-source-4"]);
    expect((await createSource(other.api, { component_code: HTTP_ESM, name: "My Source" })).name_slug).toBe("my-source");
  });

  it("gives concurrent creates with one name distinct slugs", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const results = await Promise.all(
      Array.from({ length: 6 }, () => u.api.post("/v1/sources", { json: { component_id: c.id, name: "Race" } })),
    );
    for (const r of results) expectStatus(r, 200);
    expect(results.map((r) => r.body.data.name_slug).sort()).toEqual(["race", "race-2", "race-3", "race-4", "race-5", "race-6"]);
  });

  it("releases the slug when the source is deleted", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const a = await createSource(u.api, { component_id: c.id, name: "Reuse" });
    const b = await createSource(u.api, { component_id: c.id, name: "Reuse" });
    expect(b.name_slug).toBe("reuse-2");
    expectStatus(await u.api.del(`/v1/sources/${a.id}`), 204);
    expect((await createSource(u.api, { component_id: c.id, name: "Reuse" })).name_slug).toBe("reuse");
    expectStatus(await u.api.del(`/v1/sources/${b.id}`), 204);
    expect((await createSource(u.api, { component_id: c.id, name: "Reuse" })).name_slug).toBe("reuse-2");
  });

  it("releases the old slug when a source is renamed", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const a = await createSource(u.api, { component_id: c.id, name: "Before" });
    const put = await u.api.put(`/v1/sources/${a.id}`, { json: { component_id: c.id, name: "After" } });
    expectStatus(put, 200);
    expect(put.body.data).toMatchObject({ name: "After", name_slug: "after" });
    expect((await createSource(u.api, { component_id: c.id, name: "Before" })).name_slug).toBe("before");
  });

  it("gives a renamed source the plain slug when it is free", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const s = await createSource(u.api, { component_id: c.id, name: "Report 2" });
    expect(s.name_slug).toBe("report-2");
    const put = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: c.id, name: "Report" } });
    expectStatus(put, 200);
    // "report" is taken by no one, so the slug of "Report" is "report".
    expect(put.body.data.name_slug).toBe("report");
  });

  it.each([
    ["a number", 42],
    ["an object", { first: "x" }],
    ["a blank string", "   "],
    ["201 characters", "n".repeat(201)],
  ])("answers 400 naming name for %s", async (_label, name) => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/sources", { json: { component_code: HTTP_ESM, name } }), 400, /name/);
  });

  it("does not claim a slug for a request that fails validation", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, TYPED_PROPS);
    expectError(await u.api.post("/v1/sources", { json: { component_id: c.id, name: "Atomic" } }), 400);
    const ok = await createSource(u.api, { component_id: c.id, name: "Atomic", configured_props: { url: "https://x.test" } });
    expect(ok.name_slug).toBe("atomic");
  });
});

describe("configured_props", () => {
  it("keeps valid values of every type and fills nothing for absent optional props", async () => {
    const u = await td.createUser();
    const props = { url: "https://x.test", count: 10, enabled: false, mode: "slow", tags: ["a", "b"], extra: { deep: [1] } };
    const s = await createSource(u.api, { component_code: TYPED_PROPS, configured_props: props });
    expect(s.configured_props).toEqual(props);
    const minimal = await createSource(u.api, { component_code: TYPED_PROPS, configured_props: { url: "https://y.test", mode: "fast" } });
    expect(minimal.configured_props).toEqual({ url: "https://y.test", mode: "fast" });
  });

  it.each([
    ["a missing required prop", {}, /\burl\b.*required/],
    ["a null required prop", { url: null }, /\burl\b.*required/],
    ["a string for an integer", { url: "u", count: "many" }, /count/],
    ["a fraction for an integer", { url: "u", count: 1.5 }, /count/],
    ["an integer below min", { url: "u", count: 0 }, /count.*at least 1/],
    ["an integer above max", { url: "u", count: 11 }, /count.*at most 10/],
    ["a string for a boolean", { url: "u", enabled: "true" }, /enabled/],
    ["a value outside the options", { url: "u", mode: "medium" }, /mode/],
    ["an option label instead of its value", { url: "u", mode: "Slow" }, /mode/],
    ["a number inside a string[]", { url: "u", tags: ["a", 2] }, /tags\[1\]/],
    ["a string for a string[]", { url: "u", tags: "a" }, /tags/],
    ["an array for an object", { url: "u", extra: [1] }, /extra/],
    ["an unknown prop", { url: "u", nope: 1 }, /nope/],
    ["a prop named constructor", { url: "u", constructor: "x" }, /constructor/],
  ])("answers 400 naming the prop for %s", async (_label, configured_props, message) => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/sources", { json: { component_code: TYPED_PROPS, configured_props } });
    expectError(res, 400, message);
    expect(res.body.error).toMatch(/configured_props/);
  });

  it("answers 400 to a __proto__ key rather than setting a prototype, and stores nothing", async () => {
    const u = await td.createUser();
    const body = `{"component_code": ${JSON.stringify(TYPED_PROPS)}, "configured_props": {"url": "u", "__proto__": {"count": "x"}}}`;
    const res = await u.api.post("/v1/sources", { body, headers: { "content-type": "application/json" } });
    expectError(res, 400);
    expect(await listAll(u.api)).toEqual([]);
  });

  it.each([
    ["an array", [1]],
    ["a string", "url=u"],
    ["a number", 3],
  ])("answers 400 when configured_props is %s", async (_label, configured_props) => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/sources", { json: { component_code: TYPED_PROPS, configured_props } }), 400, /configured_props/);
  });
});

describe("timer props", () => {
  const timerSource = async (timer: unknown) => {
    const u = await td.createUser();
    return u.api.post("/v1/sources", { json: { component_code: TIMER_CJS, configured_props: { timer } } });
  };

  it("returns {intervalSeconds} as {cron: null, interval_seconds}", async () => {
    const res = await timerSource({ intervalSeconds: TIMER_MIN });
    expectStatus(res, 200);
    expect(res.body.data.configured_props.timer).toEqual({ cron: null, interval_seconds: TIMER_MIN });
  });

  it("accepts the stored spelling, so a source's own props can be posted back", async () => {
    const res = await timerSource({ cron: null, interval_seconds: 120 });
    expectStatus(res, 200);
    expect(res.body.data.configured_props.timer).toEqual({ cron: null, interval_seconds: 120 });
  });

  it.each([["*/5 * * * *"], ["0 9 * * 1-5"], ["@hourly"], ["  15 * * * *  "]])(
    "returns cron %j as {cron, interval_seconds: null}",
    async (cron) => {
      const res = await timerSource({ cron });
      expectStatus(res, 200);
      expect(res.body.data.configured_props.timer).toEqual({ cron: cron.trim(), interval_seconds: null });
    },
  );

  it.each([
    ["an interval below the minimum", { intervalSeconds: TIMER_MIN - 1 }, new RegExp(`at least ${TIMER_MIN}`)],
    ["a zero interval", { intervalSeconds: 0 }, /intervalSeconds/],
    ["a negative interval", { intervalSeconds: -60 }, /intervalSeconds/],
    ["a fractional interval", { intervalSeconds: 45.5 }, /intervalSeconds.*integer/],
    ["an interval as a string", { intervalSeconds: "60" }, /intervalSeconds/],
    ["both an interval and a cron", { intervalSeconds: 60, cron: "* * * * *" }, /not both/],
    ["neither", {}, /intervalSeconds or cron/],
    ["a number instead of an object", 60, /timer/],
    ["an invalid cron", { cron: "not a cron at all" }, /cron/],
    ["a cron of three fields", { cron: "* * *" }, /5 fields/],
    ["an empty cron", { cron: "" }, /cron/],
    ["a cron that fires every second", { cron: "* * * * * *" }, new RegExp(`${TIMER_MIN} seconds`)],
    ["a cron that fires every 10 seconds", { cron: "*/10 * * * * *" }, new RegExp(`${TIMER_MIN} seconds`)],
    ["a cron as a number", { cron: 5 }, /cron/],
  ])("answers 400 naming the timer for %s", async (_label, timer, message) => {
    const res = await timerSource(timer);
    expectError(res, 400, message);
    expect(res.body.error).toMatch(/configured_props\.timer/);
  });

  it("requires a timer value when the prop has no default", async () => {
    const u = await td.createUser();
    const code = uniqueComponent('timer: { type: "$.interface.timer" }');
    expectError(await u.api.post("/v1/sources", { json: { component_code: code } }), 400, /configured_props\.timer.*required/);
    const ok = await createSource(u.api, { component_code: code, configured_props: { timer: { intervalSeconds: 3600 } } });
    expect(ok.configured_props.timer).toEqual({ cron: null, interval_seconds: 3600 });
  });
});

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
    expect(await redis.keys(`${td.prefix}:{${u.id}}:events:${s.id}:*`)).toEqual([]);
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

  it("answers 405 to GET on a single source path", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    expectError(await u.api.get(`/v1/sources/${s.id}`), 405);
  });
});

describe("GET /users/me/sources", () => {
  async function fiveSources() {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const ids: string[] = [];
    // Created one after another, so creation order is list order (newest first).
    for (let i = 0; i < 5; i++) ids.push((await createSource(u.api, { component_id: c.id, name: `s${i}` })).id);
    return { u, ids, newestFirst: [...ids].reverse() };
  }

  it("lists newest first with base64url cursors and no user_id", async () => {
    const { u, newestFirst } = await fiveSources();
    const res = await u.api.get("/v1/users/me/sources", { query: { limit: 2 } });
    expectStatus(res, 200);
    expect(res.body.page_info).toEqual({
      total_count: 5,
      count: 2,
      start_cursor: b64url(newestFirst[0]!),
      end_cursor: b64url(newestFirst[1]!),
    });
    expect(res.body.data.map((s: Json) => s.id)).toEqual(newestFirst.slice(0, 2));
    for (const s of res.body.data) expect(s.user_id).toBeUndefined();
  });

  it("walks forward with after and backward with before", async () => {
    const { u, newestFirst } = await fiveSources();
    const seen: string[] = [];
    let after: string | undefined;
    for (let page = 0; page < 4; page++) {
      const res = await u.api.get("/v1/users/me/sources", { query: { limit: 2, after } });
      expectStatus(res, 200);
      expect(res.body.page_info.total_count).toBe(5);
      if (res.body.data.length === 0) {
        expect(res.body.page_info).toMatchObject({ count: 0, start_cursor: null, end_cursor: null });
        break;
      }
      seen.push(...res.body.data.map((s: Json) => s.id));
      after = res.body.page_info.end_cursor;
    }
    expect(seen).toEqual(newestFirst);
    const back = await u.api.get("/v1/users/me/sources", { query: { limit: 2, before: b64url(newestFirst[4]!) } });
    expect(back.body.data.map((s: Json) => s.id)).toEqual([newestFirst[2], newestFirst[3]]);
    const wide = await u.api.get("/v1/users/me/sources", { query: { limit: 10, before: b64url(newestFirst[2]!) } });
    expect(wide.body.data.map((s: Json) => s.id)).toEqual(newestFirst.slice(0, 2));
    const none = await u.api.get("/v1/users/me/sources", { query: { before: b64url(newestFirst[0]!) } });
    expect(none.body).toEqual({ page_info: { total_count: 5, count: 0, start_cursor: null, end_cursor: null }, data: [] });
  });

  it("visits every source exactly once when sources were created concurrently", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    const made = await Promise.all(Array.from({ length: 12 }, (_, i) => createSource(u.api, { component_id: c.id, name: `c${i}` })));
    const seen: string[] = [];
    let after: string | undefined;
    for (let guard = 0; guard < 10; guard++) {
      const res = await u.api.get("/v1/users/me/sources", { query: { limit: 5, after } });
      if (res.body.data.length === 0) break;
      seen.push(...res.body.data.map((s: Json) => s.id));
      after = res.body.page_info.end_cursor;
    }
    expect(seen.sort()).toEqual(made.map((s) => s.id).sort());
  });

  it.each([
    ["not base64url", "%%%"],
    ["the cursor of an absent id", b64url("dc_neverexisted000")],
    ["a raw id instead of a cursor", "dc_abc"],
    ["a padded cursor", `${b64url("dc_abcdefghijk")}=`],
  ])("answers 400 to a cursor that is %s", async (_label, cursor) => {
    const { u } = await fiveSources();
    expectError(await u.api.get("/v1/users/me/sources", { query: { after: cursor } }), 400, /after/);
    expectError(await u.api.get("/v1/users/me/sources", { query: { before: cursor } }), 400, /before/);
  });

  it("answers 400 to another user's cursor and to after with before", async () => {
    const a = await fiveSources();
    const b = await fiveSources();
    expectError(await b.u.api.get("/v1/users/me/sources", { query: { after: b64url(a.ids[0]!) } }), 400);
    expectError(await a.u.api.get("/v1/users/me/sources", { query: { after: b64url(a.ids[1]!), before: b64url(a.ids[3]!) } }), 400);
  });

  it.each([["0"], ["101"], ["abc"], ["-3"], ["1.5"], ["1e2"], ["1000"]])("answers 400 naming limit for limit=%s", async (limit) => {
    const u = await td.createUser();
    expectError(await u.api.get("/v1/users/me/sources", { query: { limit } }), 400, /limit/);
  });

  it("defaults to 10 items and accepts 1 and 100", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    await Promise.all(Array.from({ length: 11 }, () => createSource(u.api, { component_id: c.id })));
    expect((await u.api.get("/v1/users/me/sources")).body.data).toHaveLength(10);
    expect((await u.api.get("/v1/users/me/sources", { query: { limit: 1 } })).body.data).toHaveLength(1);
    expect((await u.api.get("/v1/users/me/sources", { query: { limit: 100 } })).body.data).toHaveLength(11);
  });

  it("applies include, then exclude, to items only; unknown names are ignored", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const inc = await u.api.get("/v1/users/me/sources", { query: { include: "id, name,nope" } });
    expect(inc.body.data).toEqual([{ id: s.id, name: s.name }]);
    expect(inc.body.page_info.total_count).toBe(1);
    const exc = await u.api.get("/v1/users/me/sources", { query: { exclude: "configured_props,name_slug,total_count" } });
    expect(Object.keys(exc.body.data[0]).sort()).toEqual(["active", "component_id", "created_at", "id", "name", "updated_at"]);
    expect(exc.body.page_info.total_count).toBe(1);
    const both = await u.api.get("/v1/users/me/sources", { query: { include: "id,name,active", exclude: "name" } });
    expect(both.body.data).toEqual([{ id: s.id, active: true }]);
    const pageInfo = await u.api.get("/v1/users/me/sources", { query: { include: "page_info" } });
    expect(pageInfo.body.page_info).toMatchObject({ total_count: 1, count: 1 });
    expect(pageInfo.body.data).toEqual([{}]);
  });

  it("applies include and exclude to create and update answers", async () => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/sources", { query: { include: "id,active" }, json: { component_code: HTTP_ESM } });
    expect(Object.keys(res.body.data).sort()).toEqual(["active", "id"]);
    const put = await u.api.put(`/v1/sources/${res.body.data.id}`, {
      query: { exclude: "configured_props" },
      json: { component_code: HTTP_ESM },
    });
    expect(put.body.data.configured_props).toBeUndefined();
    expect(put.body.data.id).toBe(res.body.data.id);
  });

  it("shows one user nothing of another's sources", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    await createSource(a.api, { component_code: HTTP_ESM });
    const res = await b.api.get("/v1/users/me/sources");
    expect(res.body).toEqual({ page_info: { total_count: 0, count: 0, start_cursor: null, end_cursor: null }, data: [] });
  });
});

describe("source event summaries", () => {
  it("returns a source's events newest first with the source's metadata", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const ids = await seedSourceEvents(td, redis, u.id, s.id, [{ n: 1 }, { n: 2 }]);
    const res = await waitFor(
      async () => {
        const r = await u.api.get(`/v1/sources/${s.id}/event_summaries`);
        return r.body.data.length === 2 ? r : undefined;
      },
      { what: "events" },
    );
    expect(res.body.data.map((e: Json) => e.id)).toEqual([...ids].reverse());
    // A source event is the payload as emitted, not wrapped in raw_event.
    expect(res.body.data[0]).toMatchObject({ event: { n: 2 }, metadata: { emitter_id: s.id, name: "", summary: "seed 1" } });
  });
});
