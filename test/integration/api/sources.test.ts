import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import {
  absentId,
  createComponent,
  createSource,
  expectError,
  expectStatus,
  HTTP_ESM,
  type Json,
  loopbackServer,
  NAMED_ONLY,
  TIMER_CJS,
  TYPED_PROPS,
  uniqueComponent,
} from "./support.js";

/** POST /sources: selection of the component, names and slugs, configured_props, timer props. */

const TIMER_MIN = 30;

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon({ TIMER_MIN_INTERVAL_SECONDS: String(TIMER_MIN) });
});

afterAll(async () => {
  await td?.close();
});

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
