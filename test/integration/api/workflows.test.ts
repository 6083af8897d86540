import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { b64url, createWebhook, emit, expectError, expectStatus, type Json, subscribe, workflowId } from "./support.js";

/** The workflow registry: PUT, first-sight registration, listing, deletion, isolation between users. */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon();
});

afterAll(async () => {
  await td?.close();
});

async function summaries(api: Client, p: string, query: Record<string, unknown> = {}): Promise<Json> {
  const res = await api.get(`/v1/workflows/${p}/event_summaries`, { query });
  expectStatus(res, 200);
  return res.body;
}

describe("workflow registry", () => {
  it("registers a workflow on PUT and updates only the fields given", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const put = await u.api.put(`/v1/workflows/${p}`, { json: { name: "My flow", trigger_url: "https://example.com/trigger" } });
    expectStatus(put, 200);
    expect(put.body.data).toEqual({
      id: p,
      name: "My flow",
      trigger_url: "https://example.com/trigger",
      created_at: expect.any(Number),
      updated_at: expect.any(Number),
    });
    const rename = await u.api.put(`/v1/workflows/${p}`, { json: { name: "Renamed" } });
    expect(rename.body.data).toMatchObject({
      name: "Renamed",
      trigger_url: "https://example.com/trigger",
      created_at: put.body.data.created_at,
    });
    const cleared = await u.api.put(`/v1/workflows/${p}`, { query: { trigger_url: "" } });
    expect(cleared.body.data).toMatchObject({ name: "Renamed", trigger_url: null });
    expect((await u.api.get(`/v1/workflows/${p}`)).body.data).toEqual(cleared.body.data);
  });

  it.each([
    ["a trigger_url without a scheme", { trigger_url: "example.com/x" }, /trigger_url/],
    ["a numeric trigger_url", { trigger_url: 5 }, /trigger_url/],
    ["a numeric name", { name: 5 }, /name/],
    ["a name of 201 characters", { name: "n".repeat(201) }, /name/],
  ])("answers 400 for %s and registers nothing", async (_label, body, message) => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.put(`/v1/workflows/${p}`, { json: body }), 400, message);
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
  });

  it("registers a workflow the first time it emits", async () => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
    await emit(u.api, p, 1);
    expect((await u.api.get(`/v1/workflows/${p}`)).body.data).toMatchObject({ id: p, name: null, trigger_url: null });
  });

  it("lists the user's workflows newest first with base64url cursors", async () => {
    const u = await td.createUser();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const p = workflowId();
      expectStatus(await u.api.put(`/v1/workflows/${p}`, { json: { name: `w${i}` } }), 200);
      ids.push(p);
    }
    const res = await u.api.get("/v1/users/me/workflows", { query: { limit: 2 } });
    expectStatus(res, 200);
    expect(res.body.page_info).toEqual({ total_count: 3, count: 2, start_cursor: b64url(ids[2]!), end_cursor: b64url(ids[1]!) });
    expect(res.body.data.map((w: Json) => w.name)).toEqual(["w2", "w1"]);
    const rest = await u.api.get("/v1/users/me/workflows", { query: { after: res.body.page_info.end_cursor } });
    expect(rest.body.data.map((w: Json) => w.id)).toEqual([ids[0]]);
    const other = await td.createUser();
    expect((await other.api.get("/v1/users/me/workflows")).body.page_info.total_count).toBe(0);
  });

  it("deletes with 204, then answers 404; removes the subscriptions that name it", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const hook = await createWebhook(u.api, "https://example.com/wf");
    await subscribe(u.api, p, hook.id);
    await subscribe(u.api, "dc_*", p);
    const keep = await subscribe(u.api, "p_*", hook.id);
    const del = await u.api.del(`/v1/workflows/${p}`);
    expectStatus(del, 204);
    expect(del.text).toBe("");
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
    expectError(await u.api.del(`/v1/workflows/${p}`), 404);
    expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`), 404);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([keep]);
  });

  it("drops a deleted workflow's events, so the same id starts empty when seen again", async () => {
    const u = await td.createUser();
    const p = workflowId();
    await emit(u.api, p, { old: true });
    expectStatus(await u.api.post(`/v1/workflows/${p}/$errors/events`, { json: { error: { msg: "old" } } }), 202);
    expectStatus(await u.api.del(`/v1/workflows/${p}`), 204);
    await emit(u.api, p, { fresh: true });
    const page = await summaries(u.api, p, { expand: "event" });
    expect(page.data.map((e: Json) => e.event.raw_event)).toEqual([{ fresh: true }]);
    expect((await u.api.get(`/v1/workflows/${p}/$errors/event_summaries`)).body.data).toEqual([]);
  });

  it("keeps one user's workflow registry from another", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const p = workflowId();
    expectStatus(await a.api.put(`/v1/workflows/${p}`, { json: { name: "a's" } }), 200);
    expectError(await b.api.get(`/v1/workflows/${p}`), 404);
    expectError(await b.api.del(`/v1/workflows/${p}`), 404);
    expect((await a.api.get(`/v1/workflows/${p}`)).body.data.name).toBe("a's");
  });

  it("answers 400 to a malformed workflow id on every registry route", async () => {
    const u = await td.createUser();
    expectError(await u.api.put("/v1/workflows/p_bad%20id", { json: {} }), 400, /workflow_id/);
    expectError(await u.api.get("/v1/workflows/nope"), 400, /workflow_id/);
    expectError(await u.api.del("/v1/workflows/p_"), 400, /workflow_id/);
  });
});
