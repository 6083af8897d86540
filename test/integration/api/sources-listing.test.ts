import { waitFor } from "../../helpers/wait.js";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import { b64url, createComponent, createSource, expectError, expectStatus, HTTP_ESM, type Json, seedSourceEvents } from "./support.js";

/** GET /users/me/sources (pages, cursors, fields, isolation) and a source's event summaries. */

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
