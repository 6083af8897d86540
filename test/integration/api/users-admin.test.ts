import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis } from "../../helpers/redis.js";
import { createSource, createWebhook, emit, expectError, expectStatus, HTTP_ESM, subscribe, workflowId } from "./support.js";
import { createKeys } from "../../../src/store/keys.js";

/** Authentication, the admin API (SPEC §4) and GET /users/me. */

const QUOTA_INVOCATIONS = 1234;
const QUOTA_COMPUTE_MS = 56_789;

let td: TestDaemon;
let admin: Client;
let anonymous: Client;

beforeAll(async () => {
  td = await startTestDaemon({
    FREE_DAILY_INVOCATIONS_QUOTA: String(QUOTA_INVOCATIONS),
    FREE_DAILY_COMPUTE_TIME_QUOTA_MS: String(QUOTA_COMPUTE_MS),
  });
  admin = client(td.url, td.adminToken);
  anonymous = client(td.url);
});

afterAll(async () => {
  await td?.close();
});

const uniqueName = (label: string) => `${label}_${randomBytes(5).toString("hex")}`;

describe("authentication of the /v1 API", () => {
  it("answers 401 with an error body when the Authorization header is missing", async () => {
    const res = await anonymous.get("/v1/users/me");
    expectError(res, 401, /Authorization|API key/i);
    expect(res.body.code).toBe("unauthorized");
  });

  it("answers 401 for a wrong key, a key that was never issued and an empty bearer", async () => {
    const { api_key } = await td.createUser();
    const forged = `${api_key.slice(0, -1)}${api_key.endsWith("A") ? "B" : "A"}`;
    for (const header of [`Bearer ${forged}`, "Bearer trib_notarealkeyatall", "Bearer ", "Bearer", `Bearer ${"k".repeat(500)}`]) {
      const res = await anonymous.request("GET", "/v1/users/me", { headers: { authorization: header } });
      expectError(res, 401);
      expect(res.body.code).toBe("unauthorized");
    }
  });

  it("refuses Basic auth, even when it carries a valid key", async () => {
    const { api_key } = await td.createUser();
    for (const header of [`Basic ${Buffer.from(`${api_key}:`).toString("base64")}`, `Basic ${api_key}`, api_key]) {
      expectError(await anonymous.request("GET", "/v1/users/me/sources", { headers: { authorization: header } }), 401);
    }
  });

  it("accepts the scheme in any case", async () => {
    const { id, api_key } = await td.createUser();
    const res = await anonymous.request("GET", "/v1/users/me", { headers: { authorization: `bearer ${api_key}` } });
    expectStatus(res, 200);
    expect(res.body.data.id).toBe(id);
  });

  it("checks the key before a write, so an unauthenticated POST creates nothing", async () => {
    const redis = connectRedis();
    try {
      const before = (await redis.keys(`${td.prefix}:*:webhook:*`)).sort();
      expectError(await anonymous.post("/v1/webhooks", { query: { url: "https://example.com/x" } }), 401);
      expect((await redis.keys(`${td.prefix}:*:webhook:*`)).sort()).toEqual(before);
    } finally {
      redis.disconnect();
    }
  });

  it("does not accept the admin token as a user key", async () => {
    expectError(await client(td.url, td.adminToken).get("/v1/users/me"), 401);
  });
});

describe("admin API access", () => {
  it("answers 401 to a missing or wrong admin token, and to a user's API key", async () => {
    const { api_key } = await td.createUser();
    const body = { username: uniqueName("x"), email: "x@example.com", plan: "free" };
    for (const c of [anonymous, client(td.url, `${td.adminToken}x`), client(td.url, td.adminToken.slice(0, -1)), client(td.url, api_key)]) {
      expectError(await c.post("/admin/users", { json: body }), 401);
      expectError(await c.get("/admin/users"), 401);
    }
    // None of the refused requests created the user.
    const list = await admin.get("/admin/users");
    expect(list.body.data.map((u: { username: string }) => u.username)).not.toContain(body.username);
  });

  describe("when ADMIN_TOKEN is unset", () => {
    let bare: TestDaemon;
    beforeAll(async () => {
      bare = await startTestDaemon({ ADMIN_TOKEN: "" });
    });
    afterAll(async () => {
      await bare?.close();
    });

    it("answers 404 with an error body on every admin route, whatever the token", async () => {
      for (const c of [client(bare.url), client(bare.url, bare.adminToken), client(bare.url, "anything-at-all")]) {
        expectError(await c.post("/admin/users", { json: { username: uniqueName("n"), email: "n@example.com" } }), 404);
        expectError(await c.get("/admin/users"), 404);
        expectError(await c.del("/admin/users/u_abcdefghij"), 404);
        expectError(await c.post("/admin/users/u_abcdefghij/api_key"), 404);
      }
    });

    it("still serves the /v1 API to users provisioned another way", async () => {
      const { user, apiKey } = await bare.daemon.users.create({ username: uniqueName("cli"), email: "cli@example.com", plan: "free" });
      const res = await client(bare.url, apiKey).get("/v1/users/me");
      expectStatus(res, 200);
      expect(res.body.data.id).toBe(user.id);
    });
  });
});

describe("POST /admin/users", () => {
  it("answers 201 with the user and the full key, which works at once", async () => {
    const username = uniqueName("Alice.B-c");
    const res = await admin.post("/admin/users", { json: { username, email: "alice@example.com", plan: "paid" } });
    expectStatus(res, 201);
    const d = res.body.data;
    expect(d).toMatchObject({ username, email: "alice@example.com", plan: "paid" });
    expect(d.id).toMatch(/^u_[A-Za-z0-9]{10,}$/);
    expect(typeof d.api_key).toBe("string");
    expect(d.api_key.length).toBeGreaterThanOrEqual(20);
    expect(d.api_key_hash).toBeUndefined();
    const me = await client(td.url, d.api_key).get("/v1/users/me");
    expectStatus(me, 200);
    expect(me.body.data.id).toBe(d.id);
  });

  it("defaults the plan to free", async () => {
    const res = await admin.post("/admin/users", { json: { username: uniqueName("p"), email: "p@example.com" } });
    expectStatus(res, 201);
    expect(res.body.data.plan).toBe("free");
  });

  it("takes its parameters from the query string too", async () => {
    const username = uniqueName("q");
    const res = await admin.post("/admin/users", { query: { username, email: "q@example.com", plan: "paid" } });
    expectStatus(res, 201);
    expect(res.body.data).toMatchObject({ username, plan: "paid" });
  });

  it.each([
    ["a missing username", { email: "a@example.com" }, /username/],
    ["an empty username", { username: "", email: "a@example.com" }, /username/],
    ["a username with spaces", { username: "has space", email: "a@example.com" }, /username/],
    ["a username of 65 characters", { username: "u".repeat(65), email: "a@example.com" }, /username/],
    ["a numeric username", { username: 12345, email: "a@example.com" }, /username/],
    ["a missing email", { username: "fine" }, /email/],
    ["an email without a domain", { username: "fine", email: "nobody@" }, /email/],
    ["an email with spaces", { username: "fine", email: "a b@example.com" }, /email/],
    ["an unknown plan", { username: "fine", email: "a@example.com", plan: "platinum" }, /plan/],
    ["a plan of the wrong type", { username: "fine", email: "a@example.com", plan: true }, /plan/],
  ])("answers 400 naming the field for %s", async (_label, body, field) => {
    const res = await admin.post("/admin/users", { json: body });
    expectError(res, 400, field);
  });

  it("answers 400 to malformed JSON and 415 to a non-JSON body", async () => {
    expectError(await admin.post("/admin/users", { body: '{"username": ', headers: { "content-type": "application/json" } }), 400);
    expectError(await admin.post("/admin/users", { body: "username=x", headers: { "content-type": "text/plain" } }), 415);
  });

  it("answers 409 to a taken username and leaves the first user intact", async () => {
    const username = uniqueName("dup");
    const first = await admin.post("/admin/users", { json: { username, email: "one@example.com" } });
    expectStatus(first, 201);
    const second = await admin.post("/admin/users", { json: { username, email: "two@example.com", plan: "paid" } });
    expectError(second, 409, new RegExp(username));
    const list = await admin.get("/admin/users");
    const same = list.body.data.filter((u: { username: string }) => u.username === username);
    expect(same).toEqual([expect.objectContaining({ id: first.body.data.id, email: "one@example.com", plan: "free" })]);
    expectStatus(await client(td.url, first.body.data.api_key).get("/v1/users/me"), 200);
  });

  it("lets exactly one of several concurrent creates win a username", async () => {
    const username = uniqueName("race");
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => admin.post("/admin/users", { json: { username, email: `r${i}@example.com` } })),
    );
    expect(results.filter((r) => r.status === 201)).toHaveLength(1);
    for (const r of results.filter((r) => r.status !== 201)) expectError(r, 409);
    const list = await admin.get("/admin/users");
    expect(list.body.data.filter((u: { username: string }) => u.username === username)).toHaveLength(1);
  });
});

describe("GET /admin/users", () => {
  it("lists users with their plans and never a key or key hash", async () => {
    const a = await td.createUser("free");
    const b = await td.createUser("paid");
    const res = await admin.get("/admin/users");
    expectStatus(res, 200);
    expect(res.body.page_info).toBeUndefined();
    const byId = new Map(res.body.data.map((u: { id: string }) => [u.id, u]));
    expect(byId.get(a.id)).toMatchObject({ id: a.id, plan: "free" });
    expect(byId.get(b.id)).toMatchObject({ id: b.id, plan: "paid" });
    for (const u of res.body.data) {
      expect(Object.keys(u).sort()).toEqual(["created_at", "email", "id", "plan", "username"]);
    }
    expect(res.text).not.toContain(a.api_key);
    expect(res.text).not.toContain(b.api_key);
  });
});

describe("POST /admin/users/{id}/api_key", () => {
  it("issues a new key and revokes the old one at once", async () => {
    const u = await td.createUser();
    // Used first, so the daemon's auth cache holds the key when it is rotated.
    expectStatus(await u.api.get("/v1/users/me"), 200);
    const rot = await admin.post(`/admin/users/${u.id}/api_key`);
    expectStatus(rot, 200);
    expect(rot.body.data.id).toBe(u.id);
    const fresh: string = rot.body.data.api_key;
    expect(fresh).not.toBe(u.api_key);
    // No delay: the very next request with the old key fails.
    expectError(await u.api.get("/v1/users/me"), 401);
    expectError(await u.api.get("/v1/users/me/sources"), 401);
    const me = await client(td.url, fresh).get("/v1/users/me");
    expectStatus(me, 200);
    expect(me.body.data.id).toBe(u.id);
    expect(me.body.data.api_key.endsWith(fresh.slice(-4))).toBe(true);
  });

  it("revokes every earlier key when rotated twice, and keeps the user's data", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/keep");
    const k1 = (await admin.post(`/admin/users/${u.id}/api_key`)).body.data.api_key;
    expectStatus(await client(td.url, k1).get("/v1/users/me"), 200);
    const k2 = (await admin.post(`/admin/users/${u.id}/api_key`)).body.data.api_key;
    expectError(await client(td.url, u.api_key).get("/v1/users/me"), 401);
    expectError(await client(td.url, k1).get("/v1/users/me"), 401);
    const hooks = await client(td.url, k2).get("/v1/users/me/webhooks");
    expectStatus(hooks, 200);
    expect(hooks.body.data.map((w: { id: string }) => w.id)).toEqual([hook.id]);
  });

  it("answers 404 for an unknown user", async () => {
    expectError(await admin.post("/admin/users/u_doesnotexist0000/api_key"), 404);
  });
});

describe("DELETE /admin/users/{id}", () => {
  it("removes the user and all their data; their key answers 401", async () => {
    const doomed = await td.createUser();
    const bystander = await td.createUser();
    const source = await createSource(doomed.api, { component_code: HTTP_ESM });
    const hook = await createWebhook(doomed.api, "https://example.com/doomed");
    await subscribe(doomed.api, source.id, hook.id);
    await emit(doomed.api, workflowId(), { a: 1 });
    const kept = await createWebhook(bystander.api, "https://example.com/kept");

    const del = await admin.del(`/admin/users/${doomed.id}`);
    expectStatus(del, 204);
    expect(del.text).toBe("");

    expectError(await doomed.api.get("/v1/users/me"), 401);
    expectError(await doomed.api.get("/v1/users/me/sources"), 401);
    const list = await admin.get("/admin/users");
    expect(list.body.data.map((u: { id: string }) => u.id)).not.toContain(doomed.id);

    const redis = connectRedis();
    try {
      // Nothing remains under the user's hash tag, and the source's endpoint token is gone.
      expect(await redis.keys(`${createKeys(td.prefix).userKeyBase(doomed.id)}:*`)).toEqual([]);
      const endpoints = await redis.hvals(`${td.prefix}:{${td.prefix}}:endpoints`);
      expect(endpoints.filter((v) => v.startsWith(`${doomed.id} `))).toEqual([]);
    } finally {
      redis.disconnect();
    }

    const still = await bystander.api.get("/v1/users/me/webhooks");
    expect(still.body.data.map((w: { id: string }) => w.id)).toEqual([kept.id]);
  });

  it("frees the username for a new user", async () => {
    const username = uniqueName("again");
    const first = await admin.post("/admin/users", { json: { username, email: "a@example.com" } });
    expectStatus(first, 201);
    expectStatus(await admin.del(`/admin/users/${first.body.data.id}`), 204);
    const second = await admin.post("/admin/users", { json: { username, email: "b@example.com" } });
    expectStatus(second, 201);
    expect(second.body.data.id).not.toBe(first.body.data.id);
  });

  it("answers 404 for an unknown user and for a second delete", async () => {
    const u = await td.createUser();
    expectStatus(await admin.del(`/admin/users/${u.id}`), 204);
    expectError(await admin.del(`/admin/users/${u.id}`), 404);
    expectError(await admin.del("/admin/users/u_neverexisted000"), 404);
  });
});

describe("GET /users/me", () => {
  it("returns the free shape with the configured quotas and zero usage", async () => {
    const u = await td.createUser("free");
    const res = await u.api.get("/v1/users/me");
    expectStatus(res, 200);
    const d = res.body.data;
    expect(Object.keys(d).sort()).toEqual([
      "api_key",
      "daily_compute_time_quota",
      "daily_compute_time_used",
      "daily_invocations_quota",
      "daily_invocations_used",
      "email",
      "id",
      "limits",
      "username",
    ]);
    expect(d.id).toBe(u.id);
    expect(d.username).toMatch(/^u[0-9a-f]{10}$/);
    expect(d.email).toBe(`${d.username}@example.com`);
    expect(d.daily_invocations_quota).toBe(QUOTA_INVOCATIONS);
    expect(d.daily_compute_time_quota).toBe(QUOTA_COMPUTE_MS);
    expect(d.daily_invocations_used).toBe(0);
    expect(d.daily_compute_time_used).toBe(0);
  });

  it("returns the paid shape: the current UTC month as billing period", async () => {
    const u = await td.createUser("paid");
    const res = await u.api.get("/v1/users/me");
    expectStatus(res, 200);
    const d = res.body.data;
    expect(Object.keys(d).sort()).toEqual([
      "billing_period_end_ts",
      "billing_period_invocations",
      "billing_period_start_ts",
      "email",
      "id",
      "limits",
      "username",
    ]);
    const now = new Date();
    const start = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) / 1000;
    const end = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1) / 1000;
    // A request made across a month boundary may see the next month; accept either.
    expect([start, end]).toContain(d.billing_period_start_ts);
    expect(d.billing_period_end_ts).toBeGreaterThan(d.billing_period_start_ts);
    expect(d.billing_period_invocations).toBe(0);
    expect(res.text).not.toContain(u.api_key);
  });

  it("masks the key: same length, only the last 4 characters shown, never the full key", async () => {
    const u = await td.createUser("free");
    const res = await u.api.get("/v1/users/me");
    const masked: string = res.body.data.api_key;
    expect(masked).toHaveLength(u.api_key.length);
    expect(masked).toBe("*".repeat(u.api_key.length - 4) + u.api_key.slice(-4));
    expect(res.text).not.toContain(u.api_key);
    // Not even a 5-character run of the key leaks.
    expect(res.text).not.toContain(u.api_key.slice(-5));
  });

  it("answers 405 to a write method on the path", async () => {
    const u = await td.createUser();
    for (const method of ["DELETE", "PUT", "POST"]) {
      const res = await u.api.request(method, "/v1/users/me", { json: {} });
      expectError(res, 405);
      expect(res.headers.get("allow") ?? "").not.toBe("");
    }
  });
});
