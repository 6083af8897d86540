import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import {
  absentId,
  b64url,
  createSource,
  createWebhook,
  emit,
  expectError,
  expectStatus,
  HTTP_ESM,
  type Json,
  subscribe,
  workflowId,
} from "./support.js";

/** Webhooks (create, list, get, put, delete), subscriptions and auto-subscriptions. */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon();
});

afterAll(async () => {
  await td?.close();
});

const byId = (a: Json, b: Json) => String(a.id).localeCompare(String(b.id));

describe("POST /webhooks", () => {
  it("creates a webhook from query parameters with the documented fields and a signing secret", async () => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/webhooks", {
      query: { url: "https://example.com:12345/endpoint?x=1", name: "hook", description: "a test hook" },
    });
    expectStatus(res, 200);
    const w = res.body.data;
    expect(Object.keys(w).sort()).toEqual([
      "active",
      "circuit",
      "created_at",
      "description",
      "headers",
      "id",
      "name",
      "rate_limit_per_second",
      "retry_schedule",
      "signing_secret",
      "timeout_ms",
      "updated_at",
      "url",
      "user_id",
    ]);
    expect(w).toMatchObject({
      headers: null,
      timeout_ms: null,
      retry_schedule: null,
      rate_limit_per_second: null,
      circuit: { state: "closed", consecutive_failures: 0, opened_at: null, next_probe_at: null },
      user_id: u.id,
      url: "https://example.com:12345/endpoint?x=1",
      name: "hook",
      description: "a test hook",
      active: true,
    });
    expect(w.id).toMatch(/^wh_[A-Za-z0-9]{10,}$/);
    expect(Number.isInteger(w.created_at) && w.created_at === w.updated_at).toBe(true);
  });

  it("issues a distinct Standard Webhooks secret per webhook that the reference library accepts", async () => {
    const u = await td.createUser();
    const a = await createWebhook(u.api, "https://example.com/a");
    const b = await createWebhook(u.api, "https://example.com/b");
    for (const w of [a, b]) {
      expect(w.signing_secret).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/);
      expect(Buffer.from(w.signing_secret.slice(6), "base64").length).toBeGreaterThanOrEqual(24);
      const wh = new Webhook(w.signing_secret);
      const now = new Date();
      const signature = wh.sign("msg_1", now, '{"ok":true}');
      const headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": String(Math.floor(now.getTime() / 1000)),
        "webhook-signature": signature,
      };
      expect(wh.verify('{"ok":true}', headers)).toEqual({ ok: true });
    }
    expect(a.signing_secret).not.toBe(b.signing_secret);
  });

  it("sets name and description to null when absent or empty", async () => {
    const u = await td.createUser();
    const bare = await createWebhook(u.api, "http://example.com");
    expect(bare).toMatchObject({ name: null, description: null });
    const empty = await createWebhook(u.api, "http://example.com", { name: "", description: "" });
    expect(empty).toMatchObject({ name: null, description: null });
  });

  it("takes its parameters from a JSON body too", async () => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/webhooks", { json: { url: "https://example.com/json", name: "from body" } });
    expectStatus(res, 200);
    expect(res.body.data).toMatchObject({ url: "https://example.com/json", name: "from body" });
  });

  it("stores the URL verbatim", async () => {
    const u = await td.createUser();
    const url = "HTTPS://Example.COM:443/Some/Path/?q=a%20b#frag";
    expect((await createWebhook(u.api, url)).url).toBe(url);
  });

  it.each([["http://localhost/x"], ["http://127.0.0.1:9999/hook"], ["http://[::1]:8080/"], ["https://sub.domain.example.co.uk/a/b/c"]])(
    "accepts %s",
    async (url) => {
      const u = await td.createUser();
      expect((await createWebhook(u.api, url)).url).toBe(url);
    },
  );

  it.each([
    ["no protocol", "example.com"],
    ["a mysql URL", "mysql://user:pass@host:3306"],
    ["an ftp URL", "ftp://example.com/x"],
    ["a javascript URL", "javascript:alert(1)"],
    ["no hostname", "http://"],
    ["an empty authority", "https:///path"],
    ["backslashes", "http:\\\\example.com"],
    ["a single slash", "http:/example.com"],
    ["a leading space", " http://example.com"],
    ["a space in the host", "http://exa mple.com"],
    ["a newline", "http://example.com/\nx"],
    ["more than 2048 characters", `https://example.com/${"a".repeat(2048)}`],
  ])("answers 400 naming url for %s", async (_label, url) => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/webhooks", { query: { url } }), 400, /url/);
  });

  it("answers 400 when url is missing, empty or not a string", async () => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/webhooks"), 400, /url/);
    expectError(await u.api.post("/v1/webhooks", { query: { url: "" } }), 400, /url/);
    expectError(await u.api.post("/v1/webhooks", { json: { url: ["https://example.com"] } }), 400, /url/);
    expectError(await u.api.post("/v1/webhooks", { json: { url: null } }), 400, /url/);
    expect((await u.api.get("/v1/users/me/webhooks")).body.page_info.total_count).toBe(0);
  });

  it("answers 400 naming name or description when they are not strings or too long", async () => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/webhooks", { json: { url: "https://e.com", name: 5 } }), 400, /name/);
    expectError(await u.api.post("/v1/webhooks", { json: { url: "https://e.com", description: { a: 1 } } }), 400, /description/);
    expectError(await u.api.post("/v1/webhooks", { json: { url: "https://e.com", name: "n".repeat(1001) } }), 400, /name/);
    expect((await u.api.get("/v1/users/me/webhooks")).body.page_info.total_count).toBe(0);
  });
});

describe("GET /users/me/webhooks", () => {
  it("lists newest first, paginated, without user_id or signing_secret", async () => {
    const u = await td.createUser();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await createWebhook(u.api, `https://example.com/h${i}`)).id);
    const first = await u.api.get("/v1/users/me/webhooks", { query: { limit: 2 } });
    expectStatus(first, 200);
    expect(first.body.page_info).toEqual({ total_count: 3, count: 2, start_cursor: b64url(ids[2]!), end_cursor: b64url(ids[1]!) });
    expect(first.body.data.map((w: Json) => w.id)).toEqual([ids[2], ids[1]]);
    for (const w of first.body.data) {
      expect(Object.keys(w).sort()).toEqual([
        "active",
        "created_at",
        "description",
        "headers",
        "id",
        "name",
        "rate_limit_per_second",
        "retry_schedule",
        "timeout_ms",
        "updated_at",
        "url",
      ]);
    }
    expect(first.text).not.toContain("whsec_");
    const rest = await u.api.get("/v1/users/me/webhooks", { query: { limit: 2, after: first.body.page_info.end_cursor } });
    expect(rest.body.data.map((w: Json) => w.id)).toEqual([ids[0]]);
    const back = await u.api.get("/v1/users/me/webhooks", { query: { before: b64url(ids[0]!) } });
    expect(back.body.data.map((w: Json) => w.id)).toEqual([ids[2], ids[1]]);
  });

  it("cannot be made to show the secret with include", async () => {
    const u = await td.createUser();
    await createWebhook(u.api, "https://example.com/i");
    const res = await u.api.get("/v1/users/me/webhooks", { query: { include: "id,signing_secret,user_id" } });
    expect(Object.keys(res.body.data[0])).toEqual(["id"]);
  });

  it("answers 400 to a bad limit or cursor, including a source's cursor", async () => {
    const u = await td.createUser();
    await createWebhook(u.api, "https://example.com/c");
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    expectError(await u.api.get("/v1/users/me/webhooks", { query: { limit: 0 } }), 400, /limit/);
    expectError(await u.api.get("/v1/users/me/webhooks", { query: { after: "garbage!" } }), 400, /after/);
    expectError(await u.api.get("/v1/users/me/webhooks", { query: { after: b64url(s.id) } }), 400, /after/);
  });

  it("shows one user nothing of another's webhooks", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    await createWebhook(a.api, "https://example.com/iso");
    const res = await b.api.get("/v1/users/me/webhooks");
    expect(res.body).toEqual({ page_info: { total_count: 0, count: 0, start_cursor: null, end_cursor: null }, data: [] });
  });
});

describe("GET, PUT and DELETE /webhooks/{id}", () => {
  it("returns one webhook with its owner and secret", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/get", { name: "n" });
    const res = await u.api.get(`/v1/webhooks/${w.id}`);
    expectStatus(res, 200);
    expect(res.body.data).toEqual(w);
  });

  it("answers 404 for unknown, malformed and foreign ids", async () => {
    const owner = await td.createUser();
    const other = await td.createUser();
    const w = await createWebhook(owner.api, "https://example.com/mine");
    for (const id of [w.id, absentId("wh_"), "not-a-webhook", "wh_", "dc_abcdefghijkl"]) {
      expectError(await other.api.get(`/v1/webhooks/${id}`), 404);
      expectError(await other.api.put(`/v1/webhooks/${id}`, { json: { active: false } }), 404);
      expectError(await other.api.del(`/v1/webhooks/${id}`), 404);
    }
    expect((await owner.api.get(`/v1/webhooks/${w.id}`)).body.data).toEqual(w);
  });

  it("updates only the fields given, from the body or the query string, and keeps the secret", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/a", { name: "before", description: "desc" });
    const body = await u.api.put(`/v1/webhooks/${w.id}`, { json: { active: false, url: "https://example.com/b" } });
    expectStatus(body, 200);
    expect(body.body.data).toMatchObject({
      id: w.id,
      user_id: u.id,
      url: "https://example.com/b",
      active: false,
      name: "before",
      description: "desc",
      signing_secret: w.signing_secret,
      created_at: w.created_at,
    });
    expect(body.body.data.updated_at).toBeGreaterThanOrEqual(w.updated_at);
    const query = await u.api.put(`/v1/webhooks/${w.id}`, { query: { name: "after", active: "true" } });
    expectStatus(query, 200);
    expect(query.body.data).toMatchObject({ name: "after", active: true, url: "https://example.com/b", description: "desc" });
    const cleared = await u.api.put(`/v1/webhooks/${w.id}`, { json: { name: null, description: "" } });
    expect(cleared.body.data).toMatchObject({ name: null, description: null });
    expect((await u.api.get(`/v1/webhooks/${w.id}`)).body.data).toEqual(cleared.body.data);
  });

  it("answers 400 to an invalid update and changes nothing", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/keep", { name: "keep" });
    for (const body of [{ url: "nope" }, { url: "" }, { active: "nah" }, { active: 1 }, { name: 7 }, { description: "d".repeat(1001) }]) {
      expectError(await u.api.put(`/v1/webhooks/${w.id}`, { json: { name: "changed", ...body } }), 400);
    }
    expect((await u.api.get(`/v1/webhooks/${w.id}`)).body.data).toEqual(w);
  });

  it("deletes with 204; the webhook is gone from get, list and a second delete", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/del");
    const del = await u.api.del(`/v1/webhooks/${w.id}`);
    expectStatus(del, 204);
    expect(del.text).toBe("");
    expectError(await u.api.get(`/v1/webhooks/${w.id}`), 404);
    expectError(await u.api.del(`/v1/webhooks/${w.id}`), 404);
    expectError(await u.api.put(`/v1/webhooks/${w.id}`, { json: { active: true } }), 404);
    expect((await u.api.get("/v1/users/me/webhooks")).body.page_info.total_count).toBe(0);
  });

  it("removes the subscriptions and auto-subscriptions of a deleted webhook, and only those", async () => {
    const u = await td.createUser();
    const doomed = await createWebhook(u.api, "https://example.com/doomed");
    const kept = await createWebhook(u.api, "https://example.com/kept");
    const p = workflowId();
    await subscribe(u.api, p, doomed.id);
    await subscribe(u.api, "dc_*", doomed.id, "$errors");
    const keep = await subscribe(u.api, p, kept.id);
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { listener_id: doomed.id, event_name: "default" } }), 200);
    expectStatus(await u.api.del(`/v1/webhooks/${doomed.id}`), 204);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([keep]);
    // The auto-subscription went with it: a new source gets no subscription.
    await createSource(u.api, { component_code: HTTP_ESM });
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([keep]);
  });
});

describe("POST /subscriptions", () => {
  it("answers 200 with the subscription; event_name defaults to the empty string", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/s");
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const res = await u.api.post("/v1/subscriptions", { query: { emitter_id: s.id, listener_id: w.id } });
    expectStatus(res, 200);
    expect(Object.keys(res.body.data).sort()).toEqual(["emitter_id", "event_name", "filter", "id", "listener_id"]);
    expect(res.body.data).toMatchObject({ emitter_id: s.id, listener_id: w.id, event_name: "", filter: null });
    expect(res.body.data.id).toMatch(/^sub_[A-Za-z0-9]{10,}$/);
  });

  it('is idempotent on the triple, and treats "" and "default" as one channel', async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/idem");
    const p = workflowId();
    const first = await subscribe(u.api, p, w.id);
    expect(await subscribe(u.api, p, w.id)).toEqual(first);
    expect((await subscribe(u.api, p, w.id, "default")).id).toBe(first.id);
    expect((await subscribe(u.api, p, w.id, "")).id).toBe(first.id);
    const errors = await subscribe(u.api, p, w.id, "$errors");
    expect(errors.id).not.toBe(first.id);
    expect(errors.event_name).toBe("$errors");
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toHaveLength(2);
  });

  it("creates one subscription when the same triple is posted concurrently", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/race");
    const p = workflowId();
    const results = await Promise.all(
      Array.from({ length: 8 }, () => u.api.post("/v1/subscriptions", { query: { emitter_id: p, listener_id: w.id } })),
    );
    for (const r of results) expectStatus(r, 200);
    expect(new Set(results.map((r) => r.body.data.id)).size).toBe(1);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toHaveLength(1);
  });

  it("takes its parameters from a JSON body too", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/json");
    const res = await u.api.post("/v1/subscriptions", { json: { emitter_id: "p_*", listener_id: w.id, event_name: "$logs" } });
    expectStatus(res, 200);
    expect(res.body.data).toMatchObject({ emitter_id: "p_*", listener_id: w.id, event_name: "$logs" });
  });

  it("accepts the globs dc_*, p_* and wh_* as emitters", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/glob");
    for (const emitter of ["dc_*", "p_*", "wh_*"]) expect((await subscribe(u.api, emitter, w.id)).emitter_id).toBe(emitter);
  });

  it("accepts an owned webhook as emitter (its health events, SPEC §12)", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/health");
    const listener = workflowId();
    expect(await subscribe(u.api, w.id, listener, "$delivery_failed")).toMatchObject({ emitter_id: w.id, event_name: "$delivery_failed" });
  });

  it("registers workflows named as emitter or listener", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/wf");
    const emitter = workflowId();
    const listener = workflowId();
    await subscribe(u.api, emitter, w.id);
    await subscribe(u.api, "dc_*", listener);
    for (const id of [emitter, listener]) {
      const res = await u.api.get(`/v1/workflows/${id}`);
      expectStatus(res, 200);
      expect(res.body.data).toMatchObject({ id, name: null, trigger_url: null });
    }
  });

  it("accepts a source as listener, and a source subscribed to another source", async () => {
    const u = await td.createUser();
    const a = await createSource(u.api, { component_code: HTTP_ESM });
    const b = await createSource(u.api, { component_code: HTTP_ESM });
    expect(await subscribe(u.api, a.id, b.id, "$logs")).toMatchObject({ emitter_id: a.id, listener_id: b.id, event_name: "$logs" });
  });

  it.each([
    ["a missing emitter_id", { listener_id: "p_x" }, /emitter_id/],
    ["a missing listener_id", { emitter_id: "p_x" }, /listener_id/],
    ["an emitter that is no id", { emitter_id: "banana", listener_id: "p_x" }, /emitter_id/],
    ["a malformed webhook id as emitter", { emitter_id: "wh_abc-def", listener_id: "p_x" }, /emitter_id/],
    ["an unknown glob wh_x*", { emitter_id: "wh_x*", listener_id: "p_x" }, /emitter_id/],
    ["a component as emitter", { emitter_id: "sc_abcdefghijkl", listener_id: "p_x" }, /emitter_id/],
    ["an unknown glob", { emitter_id: "sc_*", listener_id: "p_x" }, /emitter_id/],
    ["a bare star", { emitter_id: "*", listener_id: "p_x" }, /emitter_id/],
    ["a glob as listener", { emitter_id: "p_x", listener_id: "p_*" }, /listener_id/],
    ["a component as listener", { emitter_id: "p_x", listener_id: "sc_abcdefghijkl" }, /listener_id/],
    ["an empty workflow id", { emitter_id: "p_", listener_id: "p_x" }, /emitter_id/],
    ["a workflow id with a space", { emitter_id: "p_a b", listener_id: "p_x" }, /emitter_id/],
    ["a workflow id of 65 characters", { emitter_id: `p_${"a".repeat(65)}`, listener_id: "p_x" }, /emitter_id/],
    ["an event_name of 201 characters", { emitter_id: "p_x", listener_id: "p_y", event_name: "e".repeat(201) }, /event_name/],
    ["an event_name with a control character", { emitter_id: "p_x", listener_id: "p_y", event_name: "a\u0001b" }, /event_name/],
    ["a numeric event_name", { emitter_id: "p_x", listener_id: "p_y", event_name: 5 }, /event_name/],
    ["an array emitter_id", { emitter_id: ["p_x"], listener_id: "p_y" }, /emitter_id/],
  ])("answers 400 naming the parameter for %s", async (_label, body, message) => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/subscriptions", { json: body }), 400, message);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
  });

  it("answers 404 for unknown or foreign sources and webhooks, and creates nothing", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const wa = await createWebhook(a.api, "https://example.com/a");
    const wb = await createWebhook(b.api, "https://example.com/b");
    const sa = await createSource(a.api, { component_code: HTTP_ESM });
    const cases = [
      { emitter_id: sa.id, listener_id: wb.id },
      { emitter_id: "p_*", listener_id: wa.id },
      { emitter_id: "dc_*", listener_id: sa.id },
      { emitter_id: absentId("dc_"), listener_id: wb.id },
      { emitter_id: wa.id, listener_id: wb.id },
      { emitter_id: absentId("wh_"), listener_id: wb.id },
      { emitter_id: "p_*", listener_id: absentId("wh_") },
      { emitter_id: "p_*", listener_id: absentId("dc_") },
    ];
    for (const query of cases) expectError(await b.api.post("/v1/subscriptions", { query }), 404);
    expect((await b.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
    expect((await a.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
  });

  it("answers 400, not 404, when one id is malformed and the other foreign", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const wa = await createWebhook(a.api, "https://example.com/a");
    expectError(await b.api.post("/v1/subscriptions", { query: { emitter_id: "banana", listener_id: wa.id } }), 400);
  });

  it("registers no workflow when the request fails", async () => {
    const u = await td.createUser();
    const p = workflowId();
    expectError(await u.api.post("/v1/subscriptions", { query: { emitter_id: absentId("dc_"), listener_id: p } }), 404);
    expectError(await u.api.get(`/v1/workflows/${p}`), 404);
    expect((await u.api.get("/v1/users/me/workflows")).body.page_info.total_count).toBe(0);
  });
});

describe("GET /users/me/subscriptions", () => {
  it("lists every subscription without pagination", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/list");
    const made = await Promise.all(Array.from({ length: 12 }, () => subscribe(u.api, workflowId(), w.id)));
    const res = await u.api.get("/v1/users/me/subscriptions", { query: { limit: 2 } });
    expectStatus(res, 200);
    expect(Object.keys(res.body)).toEqual(["data"]);
    // More than a default page, and `limit` does not apply: the list is not paginated.
    expect([...res.body.data].sort(byId)).toEqual([...made].sort(byId));
  });

  it("lists subscriptions newest first, as every list (SPEC §2)", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/order");
    const made: Json[] = [];
    // One after another, so creation order is well defined.
    for (let i = 0; i < 4; i++) made.push(await subscribe(u.api, workflowId(), w.id));
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([...made].reverse());
  });

  it("shows one user nothing of another's subscriptions", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const w = await createWebhook(a.api, "https://example.com/iso");
    await subscribe(a.api, "p_*", w.id);
    expect((await b.api.get("/v1/users/me/subscriptions")).body).toEqual({ data: [] });
  });
});

describe("DELETE /subscriptions", () => {
  it("deletes by triple with 204, then answers 404", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/del");
    const p = workflowId();
    await subscribe(u.api, p, w.id);
    const errors = await subscribe(u.api, p, w.id, "$errors");
    const del = await u.api.del("/v1/subscriptions", { query: { emitter_id: p, listener_id: w.id, event_name: "" } });
    expectStatus(del, 204);
    expect(del.text).toBe("");
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([errors]);
    expectError(await u.api.del("/v1/subscriptions", { query: { emitter_id: p, listener_id: w.id, event_name: "" } }), 404);
  });

  it('treats an absent event_name, "" and "default" as the same channel', async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/chan");
    const p = workflowId();
    await subscribe(u.api, p, w.id, "default");
    expectStatus(await u.api.del("/v1/subscriptions", { query: { emitter_id: p, listener_id: w.id } }), 204);
    await subscribe(u.api, p, w.id);
    expectStatus(await u.api.del("/v1/subscriptions", { query: { emitter_id: p, listener_id: w.id, event_name: "default" } }), 204);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
  });

  it("lets a deleted triple be subscribed again under a new id", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/again");
    const first = await subscribe(u.api, "p_*", w.id);
    expectStatus(await u.api.del("/v1/subscriptions", { query: { emitter_id: "p_*", listener_id: w.id } }), 204);
    const second = await subscribe(u.api, "p_*", w.id);
    expect(second.id).not.toBe(first.id);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([second]);
  });

  it("answers 404 to another user's triple and leaves it in place", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const w = await createWebhook(a.api, "https://example.com/a");
    const sub = await subscribe(a.api, "p_*", w.id);
    expectError(await b.api.del("/v1/subscriptions", { query: { emitter_id: "p_*", listener_id: w.id, event_name: "" } }), 404);
    expect((await a.api.get("/v1/users/me/subscriptions")).body.data).toEqual([sub]);
  });

  it("answers 400 naming a missing emitter_id or listener_id", async () => {
    const u = await td.createUser();
    expectError(await u.api.del("/v1/subscriptions", { query: { listener_id: "p_x" } }), 400, /emitter_id/);
    expectError(await u.api.del("/v1/subscriptions", { query: { emitter_id: "p_x" } }), 400, /listener_id/);
  });
});

describe("POST /auto_subscriptions", () => {
  it("answers 200 with an asub_ id, and is idempotent on listener and channel", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/auto");
    const res = await u.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors", listener_id: w.id } });
    expectStatus(res, 200);
    expect(Object.keys(res.body.data).sort()).toEqual(["event_name", "id", "listener_id"]);
    expect(res.body.data).toMatchObject({ listener_id: w.id, event_name: "$errors" });
    expect(res.body.data.id).toMatch(/^asub_[A-Za-z0-9]{10,}$/);
    const again = await u.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors", listener_id: w.id } });
    expect(again.body.data.id).toBe(res.body.data.id);
    const other = await u.api.post("/v1/auto_subscriptions", { query: { event_name: "$logs", listener_id: w.id } });
    expect(other.body.data.id).not.toBe(res.body.data.id);
  });

  it("subscribes the listener to sources created afterwards, not to existing ones", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/auto-src");
    const before = await createSource(u.api, { component_code: HTTP_ESM });
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { event_name: "default", listener_id: w.id } }), 200);
    expect((await u.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
    const after = await createSource(u.api, { component_code: HTTP_ESM });
    const subs = (await u.api.get("/v1/users/me/subscriptions")).body.data;
    expect(subs).toEqual([expect.objectContaining({ emitter_id: after.id, listener_id: w.id, event_name: "default" })]);
    expect(subs.some((s: Json) => s.emitter_id === before.id)).toBe(false);
  });

  it("subscribes the listener to workflows first seen afterwards, not to known ones", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/auto-wf");
    const known = workflowId();
    await emit(u.api, known, { before: true });
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors", listener_id: w.id } }), 200);
    const fresh = workflowId();
    await emit(u.api, fresh, { after: true });
    await emit(u.api, known, { again: true });
    const subs = (await u.api.get("/v1/users/me/subscriptions")).body.data;
    expect(subs).toEqual([expect.objectContaining({ emitter_id: fresh, listener_id: w.id, event_name: "$errors" })]);
  });

  it("does not subscribe a source listener to itself, and applies every auto-subscription", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/auto-many");
    const listener = await createSource(u.api, { component_code: HTTP_ESM });
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { event_name: "", listener_id: listener.id } }), 200);
    expectStatus(await u.api.post("/v1/auto_subscriptions", { query: { event_name: "$logs", listener_id: hook.id } }), 200);
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const subs = (await u.api.get("/v1/users/me/subscriptions")).body.data;
    expect(subs.map((x: Json) => [x.emitter_id, x.listener_id]).sort()).toEqual(
      [
        [s.id, listener.id],
        [s.id, hook.id],
      ].sort(),
    );
    expect(subs.some((x: Json) => x.emitter_id === x.listener_id)).toBe(false);
  });

  it("answers 400 without event_name or listener_id, and 404 for unknown or foreign listeners", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const wa = await createWebhook(a.api, "https://example.com/a");
    expectError(await a.api.post("/v1/auto_subscriptions", { query: { listener_id: wa.id } }), 400, /event_name/);
    expectError(await a.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors" } }), 400, /listener_id/);
    expectError(
      await a.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors", listener_id: "banana" } }),
      400,
      /listener_id/,
    );
    expectError(await a.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors", listener_id: absentId("wh_") } }), 404);
    expectError(await b.api.post("/v1/auto_subscriptions", { query: { event_name: "$errors", listener_id: wa.id } }), 404);
    // Nothing was recorded for b: a new source of b's gets no subscription.
    await createSource(b.api, { component_code: HTTP_ESM });
    expect((await b.api.get("/v1/users/me/subscriptions")).body.data).toEqual([]);
  });

  it("accepts a workflow listener and registers it", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const res = await u.api.post("/v1/auto_subscriptions", { json: { event_name: "default", listener_id: p } });
    expectStatus(res, 200);
    expectStatus(await u.api.get(`/v1/workflows/${p}`), 200);
    const s = await createSource(u.api, { component_code: HTTP_ESM });
    const subs = (await u.api.get("/v1/users/me/subscriptions")).body.data.sort(byId);
    expect(subs).toEqual([expect.objectContaining({ emitter_id: s.id, listener_id: p })]);
  });
});
