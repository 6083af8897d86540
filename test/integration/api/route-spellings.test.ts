import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, type Reply, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { caseMixes, otherSpellings } from "../../helpers/spellings.js";
import { createWebhook, expectError, expectStatus, workflowId } from "./support.js";

/**
 * Every spelling of a guarded path meets its guard. The routers guard with `router.use()`; a
 * router that matched its routes case-insensitively while its guard matched case-sensitively let
 * `/ADMIN/users` create users with no token at all. These tests generate the spellings (every
 * upper/lower-case mix of the prefix, upper-case and capitalised static segments,
 * percent-encoded letters) and send every method of every guarded route.
 */

let td: TestDaemon;
/** A daemon without ADMIN_TOKEN: the admin API must not exist in any spelling. */
let bare: TestDaemon;

beforeAll(async () => {
  [td, bare] = await Promise.all([startTestDaemon(), startTestDaemon({ ADMIN_TOKEN: "" })]);
});

afterAll(async () => {
  await Promise.all([td?.close(), bare?.close()]);
});

/** Runs requests a few at a time, so a loaded machine is not flooded with hundreds at once. */
async function inBatches<T>(items: readonly T[], send: (item: T) => Promise<void>, width = 8): Promise<void> {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(send));
}

interface Probe {
  method: string;
  path: string;
}

function withBody(c: Client, method: string, path: string): Promise<Reply> {
  const json = method === "GET" || method === "HEAD" || method === "DELETE" ? undefined : { username: "x", email: "x@example.com" };
  return c.request(method, path, json === undefined ? {} : { json });
}

/** Every admin route with its methods; `{id}` is the user the probes would delete or rotate. */
function adminProbes(userId: string): Probe[] {
  const routes: { rest: string[]; dynamic: Set<number>; methods: string[] }[] = [
    { rest: ["users"], dynamic: new Set(), methods: ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"] },
    { rest: ["users", userId], dynamic: new Set([1]), methods: ["DELETE", "GET", "POST", "PUT", "OPTIONS"] },
    { rest: ["users", userId, "api_key"], dynamic: new Set([1]), methods: ["POST", "GET", "PUT", "DELETE", "OPTIONS"] },
  ];
  return routes.flatMap((r) => otherSpellings("admin", r.rest, r.dynamic).flatMap((path) => r.methods.map((method) => ({ method, path }))));
}

describe("caseMixes", () => {
  it("lists every mix once, the word itself first", () => {
    const mixes = caseMixes("admin");
    expect(mixes).toHaveLength(32);
    expect(new Set(mixes).size).toBe(32);
    expect(mixes[0]).toBe("admin");
    expect(mixes).toContain("ADMIN");
    expect(mixes).toContain("aDmIn");
    expect(caseMixes("v1")).toEqual(["v1", "V1"]);
  });
});

describe("the admin API in every spelling", () => {
  it("answers 401 to every method of every admin route in every other spelling without the token, and changes nothing", async () => {
    const victim = await td.createUser();
    const admin = client(td.url, td.adminToken);
    const before = (await admin.get("/admin/users")).body.data.map((u: { id: string }) => u.id).sort();
    const probes = adminProbes(victim.id);
    expect(probes.length).toBeGreaterThan(100);
    const wrong: string[] = [];
    for (const c of [client(td.url), client(td.url, `${td.adminToken}x`), client(td.url, victim.api_key)]) {
      await inBatches(probes, async ({ method, path }) => {
        const res = await withBody(c, method, path);
        if (res.status !== 401 || (method !== "HEAD" && res.body?.code !== "unauthorized")) {
          wrong.push(`${method} ${path} -> ${res.status} ${res.text.slice(0, 80)}`);
        }
      });
    }
    expect(wrong).toEqual([]);
    // Nothing was created, deleted or rotated: the victim's key still works.
    const after = (await admin.get("/admin/users")).body.data.map((u: { id: string }) => u.id).sort();
    expect(after).toEqual(before);
    expectStatus(await victim.api.get("/v1/users/me"), 200);
  });

  it("answers 401 without the token on admin paths the router does not know", async () => {
    for (const path of ["/admin", "/admin/", "/ADMIN", "/admin/nope", "/Admin/users/x/y/z", "/admin/users/"]) {
      expectError(await client(td.url).get(path), 401);
    }
  });

  it("serves only the exact spelling to the admin token; other spellings are unknown routes", async () => {
    const victim = await td.createUser();
    const admin = client(td.url, td.adminToken);
    const wrong: string[] = [];
    await inBatches(
      adminProbes(victim.id).filter((p) => p.method !== "OPTIONS"),
      async ({ method, path }) => {
        const res = await withBody(admin, method, path);
        if (res.status !== 404) wrong.push(`${method} ${path} -> ${res.status} ${res.text.slice(0, 80)}`);
      },
    );
    expect(wrong).toEqual([]);
    expectStatus(await victim.api.get("/v1/users/me"), 200);
    // The exact spelling still works.
    expectStatus(await admin.get("/admin/users"), 200);
  });

  it("answers 404 in every spelling, whatever the token, when ADMIN_TOKEN is unset", async () => {
    const { user } = await bare.daemon.users.create({
      username: `bare${randomBytes(4).toString("hex")}`,
      email: "bare@example.com",
      plan: "free",
    });
    const probes = [
      ...adminProbes(user.id),
      { method: "GET", path: "/admin/users" },
      { method: "POST", path: "/admin/users" },
      { method: "DELETE", path: `/admin/users/${user.id}` },
      { method: "POST", path: `/admin/users/${user.id}/api_key` },
    ];
    const wrong: string[] = [];
    for (const c of [client(bare.url), client(bare.url, "anything-at-all")]) {
      await inBatches(probes, async ({ method, path }) => {
        const res = await withBody(c, method, path);
        if (res.status !== 404) wrong.push(`${method} ${path} -> ${res.status} ${res.text.slice(0, 80)}`);
      });
    }
    expect(wrong).toEqual([]);
    expect((await bare.daemon.users.list()).map((u) => u.id)).toContain(user.id);
  });
});

describe("the /v1 API in every spelling", () => {
  it("never serves a route in another spelling: 401 without a key, an unknown route with one", async () => {
    const u = await td.createUser();
    const hook = await createWebhook(u.api, "https://example.com/spelling");
    const p = workflowId();
    const routes: { rest: string[]; dynamic: Set<number>; methods: string[] }[] = [
      { rest: ["users", "me"], dynamic: new Set(), methods: ["GET"] },
      { rest: ["users", "me", "webhooks"], dynamic: new Set(), methods: ["GET"] },
      { rest: ["users", "me", "sources"], dynamic: new Set(), methods: ["GET"] },
      { rest: ["users", "me", "subscriptions"], dynamic: new Set(), methods: ["GET"] },
      { rest: ["users", "me", "workflows"], dynamic: new Set(), methods: ["GET"] },
      { rest: ["webhooks"], dynamic: new Set(), methods: ["POST"] },
      { rest: ["webhooks", hook.id], dynamic: new Set([1]), methods: ["GET", "PUT", "DELETE"] },
      { rest: ["components"], dynamic: new Set(), methods: ["POST"] },
      { rest: ["sources"], dynamic: new Set(), methods: ["POST"] },
      { rest: ["subscriptions"], dynamic: new Set(), methods: ["POST", "DELETE"] },
      { rest: ["auto_subscriptions"], dynamic: new Set(), methods: ["POST"] },
      { rest: ["workflows", p], dynamic: new Set([1]), methods: ["PUT", "GET", "DELETE"] },
      { rest: ["workflows", p, "events"], dynamic: new Set([1]), methods: ["POST"] },
      { rest: ["workflows", p, "event_summaries"], dynamic: new Set([1]), methods: ["GET"] },
    ];
    const probes = routes.flatMap((r) =>
      otherSpellings("v1", r.rest, r.dynamic).flatMap((path) => r.methods.map((method) => ({ method, path }))),
    );
    const wrong: string[] = [];
    const body = { url: "https://example.com/made-by-a-spelling", event: { x: 1 } };
    for (const [label, c, allowed] of [
      ["no key", client(td.url), [401, 404]],
      ["a key", u.api, [404]],
    ] as const) {
      await inBatches(probes, async ({ method, path }) => {
        const res = await c.request(method, path, method === "GET" ? {} : { json: body });
        if (!(allowed as readonly number[]).includes(res.status))
          wrong.push(`${label}: ${method} ${path} -> ${res.status} ${res.text.slice(0, 80)}`);
      });
    }
    expect(wrong).toEqual([]);
    // Nothing was created or deleted through another spelling.
    const hooks = await u.api.get("/v1/users/me/webhooks");
    expect(hooks.body.data.map((w: { id: string }) => w.id)).toEqual([hook.id]);
    expectError(await u.api.get(`/v1/workflows/${p}/event_summaries`), 404);
  });
});
