import { Validator } from "@seriousme/openapi-schema-validator";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildOpenApiDocument } from "../../../../src/api/openapi/document.js";
import { connectRedis } from "../../../helpers/redis.js";
import { client, type Client, type Reply, startTestDaemon, type TestDaemon } from "../../../helpers/daemon.js";
import { type Receiver, startReceiver } from "../../../helpers/receiver.js";
import { waitFor } from "../../../helpers/wait.js";
import { HTTP_ESM, type Json, seedSourceEvents, TIMER_CJS, workflowId } from "../support.js";
import { Contract, fill } from "./contract.js";

/**
 * SPEC §10: `GET /v1/openapi.json` describes every route the daemon serves, no more, and the
 * answers the daemon gives validate against it.
 */

let td: TestDaemon;
let doc: Json;
let contract: Contract;
let receiver: Receiver;

beforeAll(async () => {
  td = await startTestDaemon();
  receiver = await startReceiver();
  const res = await client(td.url).get("/v1/openapi.json");
  expect(res.status).toBe(200);
  doc = res.body;
  contract = new Contract(doc);
});

afterAll(async () => {
  await receiver?.close();
  await td?.close();
});

const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** "METHOD /path" of every operation in a document. */
function documented(d: Json): Set<string> {
  return new Set(
    Object.entries(d.paths as Record<string, Json>).flatMap(([path, item]) =>
      Object.keys(item)
        .filter((k) => METHODS.includes(k))
        .map((m) => `${m.toUpperCase()} ${path}`),
    ),
  );
}

/** What one side has and the other lacks. */
function drift(routes: ReadonlySet<string>, docOps: ReadonlySet<string>): { undocumented: string[]; unserved: string[] } {
  return {
    undocumented: [...routes].filter((r) => !docOps.has(r)).sort(),
    unserved: [...docOps].filter((o) => !routes.has(o)).sort(),
  };
}

describe("the document", () => {
  it("is served without an API key, as JSON, and is the document the code builds", async () => {
    const res = await client(td.url).get("/v1/openapi.json");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.body.openapi).toBe("3.1.0");
    expect(res.body).toEqual(JSON.parse(JSON.stringify(buildOpenApiDocument({ version: res.body.info.version }))));
    // A wrong key does not matter either, and the rest of /v1 still wants one.
    expect((await client(td.url, "garbage").get("/v1/openapi.json")).status).toBe(200);
    expect((await client(td.url).get("/v1/users/me")).status).toBe(401);
  });

  it("is a valid OpenAPI 3.1 document", async () => {
    const result = await new Validator().validate(doc);
    expect(result.errors ?? [], JSON.stringify(result.errors ?? []).slice(0, 2000)).toEqual([]);
    expect(result.valid).toBe(true);
  });

  it("rejects a broken document (the validator can fail)", async () => {
    const broken = structuredClone(doc);
    broken.paths["/v1/users/me"].get.responses = "none";
    expect((await new Validator().validate(broken)).valid).toBe(false);
  });

  it("declares the bearer schemes and puts every /v1 route but its own behind the API key", () => {
    expect(doc.components.securitySchemes.apiKey).toMatchObject({ type: "http", scheme: "bearer" });
    expect(doc.components.securitySchemes.adminToken).toMatchObject({ type: "http", scheme: "bearer" });
    for (const op of documented(doc)) {
      const [method, path] = op.split(" ") as [string, string];
      const security = doc.paths[path][method.toLowerCase()].security;
      // Live-tail streams of a source also take a browser token; workflows' only the API key.
      const stream = path.endsWith("/sse") || path.startsWith("/sse/");
      if (path === "/v1/openapi.json") expect(security).toEqual([]);
      else if (stream)
        expect(security, op).toEqual(path.startsWith("/v1/workflows/") ? [{ apiKey: [] }] : [{ apiKey: [] }, { sseToken: [] }]);
      else if (path.startsWith("/v1/")) expect(security, op).toEqual([{ apiKey: [] }]);
      else if (path.startsWith("/admin/")) expect(security[0], op).toEqual({ adminToken: [] });
      else expect(security, op).toEqual([]);
    }
  });

  it("documents exactly the routes the router serves (methods and path parameters included)", () => {
    const routes = new Set(td.daemon.routes.map((r) => `${r.method} ${r.path}`));
    // The real table: every router and mount is in it.
    for (const r of [
      "GET /healthz",
      "POST /v1/sources",
      "GET /v1/webhooks/{id}/deliveries",
      "DELETE /admin/users/{id}",
      "POST /e/{token}/{path}",
      "GET /admin/queues",
    ]) {
      expect(routes, r).toContain(r);
    }
    expect(drift(routes, documented(doc))).toEqual({ undocumented: [], unserved: [] });
  });

  it("reports a route missing from the document and an operation the router lacks", () => {
    const routes = new Set(td.daemon.routes.map((r) => `${r.method} ${r.path}`));
    const ops = documented(doc);
    ops.delete("PUT /v1/sources/{id}");
    ops.add("PATCH /v1/sources/{id}");
    expect(drift(routes, ops)).toEqual({ undocumented: ["PUT /v1/sources/{id}"], unserved: ["PATCH /v1/sources/{id}"] });
  });
});

describe("real answers validate against the document", () => {
  /** Calls `method template` with `params` filled in and checks the answer against the document. */
  async function call(
    api: Client,
    method: string,
    template: string,
    params: Record<string, string> = {},
    opts: { query?: Record<string, unknown>; json?: unknown; body?: string; headers?: Record<string, string> } = {},
  ): Promise<Reply> {
    const res = await api.request(method, fill(template, params), opts);
    contract.expectMatches(method, template, res);
    return res;
  }

  it("the validator rejects an answer that breaks its schema (the check can fail)", async () => {
    const u = await td.createUser();
    const res = await call(u.api, "GET", "/v1/users/me");
    expect(contract.problems("GET", "/v1/users/me", { ...res, body: { data: { ...res.body.data, extra: 1 } } })).not.toEqual([]);
    expect(contract.problems("GET", "/v1/users/me", { ...res, status: 418 })).not.toEqual([]);
    expect(contract.errorsFor("Error", { error: "x" })).not.toEqual([]);
  });

  it("components, sources and their events", async () => {
    const u = await td.createUser();
    const component = (await call(u.api, "POST", "/v1/components", {}, { json: { component_code: TIMER_CJS } })).body.data;
    await call(u.api, "GET", "/v1/components/{keyOrId}", { keyOrId: component.id });
    await call(u.api, "GET", "/v1/components/{keyOrId}", { keyOrId: "api-timer" });
    await call(u.api, "GET", "/v1/components/registry/{key}", { key: "http" });
    await call(u.api, "GET", "/v1/components/registry/{key}", { key: "no-such-component" });
    await call(u.api, "POST", "/v1/components", {}, { json: { component_code: "not a component" } });

    const timer = (await call(u.api, "POST", "/v1/sources", {}, { json: { component_id: component.id, name: "Ticks" } })).body.data;
    const http = (await call(u.api, "POST", "/v1/sources", {}, { json: { component_code: HTTP_ESM } })).body.data;
    await call(u.api, "POST", "/v1/sources", {}, { json: {} });
    await call(u.api, "PUT", "/v1/sources/{id}", { id: timer.id }, { json: { component_id: component.id, active: false } });
    await call(u.api, "POST", "/v1/sources/{id}/sse_tokens", { id: http.id });
    await call(u.api, "POST", "/v1/sources/{id}/sse_tokens", { id: "dc_absent000000000" });
    await call(u.api, "GET", "/v1/users/me/sources", {}, { query: { limit: 1 } });
    await call(u.api, "GET", "/v1/users/me/sources", {}, { query: { limit: 0 } });

    const redis = connectRedis();
    try {
      await seedSourceEvents(td, redis, u.id, http.id, [{ small: true }, { big: "x".repeat(3000) }]);
    } finally {
      redis.disconnect();
    }
    const summaries = await call(u.api, "GET", "/v1/sources/{id}/event_summaries", { id: http.id });
    expect(summaries.body.data.some((s: Json) => s.truncated === true)).toBe(true);
    await call(u.api, "GET", "/v1/sources/{id}/event_summaries", { id: http.id }, { query: { expand: "event" } });
    await call(u.api, "GET", "/v1/sources/{id}/event_summaries", { id: "dc_nosuchsource00" });
    await call(u.api, "DELETE", "/v1/sources/{id}/events", { id: http.id });
    await call(u.api, "DELETE", "/v1/sources/{id}", { id: timer.id });
    await call(u.api, "DELETE", "/v1/sources/{id}", { id: timer.id });
  });

  it("workflows, ingress, subscriptions, webhooks and deliveries", async () => {
    const u = await td.createUser("paid");
    const p = workflowId();
    await call(u.api, "POST", "/v1/workflows/{id}/events", { id: p }, { json: { event: { n: 1 }, summary: "one" } });
    await call(u.api, "POST", "/v1/workflows/{id}/events", { id: p }, { json: { events: [{ event: 2 }, { event: 3, name: "other" }] } });
    await call(u.api, "POST", "/v1/workflows/{id}/events", { id: p }, { json: { events: "nope" } });
    await call(u.api, "POST", "/v1/workflows/{id}/$errors/events", { id: p }, { json: { original_event: {}, error: { msg: "boom" } } });
    await call(u.api, "GET", "/v1/workflows/{id}/event_summaries", { id: p });
    await call(u.api, "GET", "/v1/workflows/{id}/$errors/event_summaries", { id: p }, { query: { expand: "event" } });
    await call(u.api, "PUT", "/v1/workflows/{id}", { id: p }, { json: { name: "Orders" } });
    await call(u.api, "GET", "/v1/workflows/{id}", { id: p });
    await call(u.api, "GET", "/v1/users/me/workflows");

    const hook = (await call(u.api, "POST", "/v1/webhooks", {}, { query: { url: receiver.url("/hook"), name: "local" } })).body.data;
    await call(u.api, "POST", "/v1/webhooks", {}, { query: { url: "ftp://example.com" } });
    await call(u.api, "GET", "/v1/users/me/webhooks");
    await call(u.api, "GET", "/v1/webhooks/{id}", { id: hook.id });
    await call(u.api, "PUT", "/v1/webhooks/{id}", { id: hook.id }, { json: { description: "kept" } });
    // Health events (SPEC §12): a deactivation and a reactivation through PUT, read back.
    await call(u.api, "PUT", "/v1/webhooks/{id}", { id: hook.id }, { json: { active: false } });
    await call(u.api, "PUT", "/v1/webhooks/{id}", { id: hook.id }, { json: { active: true } });
    const health = await call(
      u.api,
      "GET",
      "/v1/webhooks/{id}/event_summaries",
      { id: hook.id },
      { query: { event_name: "$webhook_disabled", expand: "event" } },
    );
    expect(health.body.data).toHaveLength(1);
    await call(u.api, "GET", "/v1/webhooks/{id}/event_summaries", { id: "wh_nosuchwebhook0" });
    await call(u.api, "GET", "/v1/webhooks/{id}/secret", { id: hook.id });
    await call(u.api, "POST", "/v1/webhooks/{id}/secret/rotate", { id: hook.id });

    await call(u.api, "POST", "/v1/subscriptions", {}, { query: { emitter_id: p, listener_id: hook.id } });
    await call(u.api, "POST", "/v1/subscriptions", {}, { query: { emitter_id: "dc_nosuchsource00", listener_id: hook.id } });
    const filter = { "order.total": { $gte: 100 }, $or: [{ tags: { $contains: "vip" } }, { vip: true }] };
    await call(u.api, "POST", "/v1/subscriptions", {}, { json: { emitter_id: p, listener_id: hook.id, event_name: "other", filter } });
    await call(u.api, "POST", "/v1/subscriptions", {}, { json: { emitter_id: p, listener_id: hook.id, filter: { n: { $bogus: 1 } } } });
    await call(u.api, "POST", "/v1/auto_subscriptions", {}, { query: { listener_id: hook.id, event_name: "$errors" } });
    await call(u.api, "GET", "/v1/users/me/subscriptions");

    await call(u.api, "POST", "/v1/workflows/{id}/events", { id: p }, { json: { event: { deliver: true } } });
    await receiver.waitFor((rx) => rx.to("/hook").length > 0, { what: "a delivery" });
    const deliveries = await waitFor(
      async () => {
        const res = await u.api.get(`/v1/webhooks/${hook.id}/deliveries`);
        return res.body?.data?.[0]?.status === "delivered" ? res : undefined;
      },
      { what: "the delivery recorded as delivered" },
    );
    contract.expectMatches("GET", "/v1/webhooks/{id}/deliveries", deliveries);
    const deliveryId = deliveries.body.data[0].id as string;
    // Only failed deliveries are retried: a delivered one is a 409.
    await call(u.api, "POST", "/v1/webhooks/{id}/deliveries/{deliveryId}/retry", { id: hook.id, deliveryId });
    await call(u.api, "POST", "/v1/webhooks/{id}/deliveries/{deliveryId}/retry", { id: hook.id, deliveryId: "d_nosuchdelivery0" });
    await call(u.api, "GET", "/v1/webhooks/{id}/deliveries", { id: hook.id }, { query: { status: "delivered", since: 0, event_name: "" } });
    await call(u.api, "GET", "/v1/webhooks/{id}/deliveries", { id: hook.id }, { query: { status: "lost" } });
    await call(u.api, "POST", "/v1/webhooks/{id}/deliveries/replay", { id: hook.id }, { json: { dry_run: true } });
    const replay = await call(u.api, "POST", "/v1/webhooks/{id}/deliveries/replay", { id: hook.id }, { query: { since: 0 } });
    await call(u.api, "POST", "/v1/webhooks/{id}/deliveries/replay", { id: hook.id }, { query: { status: "pending" } });
    await call(u.api, "GET", "/v1/webhooks/{id}/replays/{replayId}", { id: hook.id, replayId: replay.body.data.id });
    await call(u.api, "GET", "/v1/webhooks/{id}/replays/{replayId}", { id: hook.id, replayId: "rpl_nosuchreplay00" });

    await call(u.api, "DELETE", "/v1/subscriptions", {}, { query: { emitter_id: p, listener_id: hook.id, event_name: "" } });
    await call(u.api, "DELETE", "/v1/subscriptions", {}, { query: { emitter_id: p, listener_id: hook.id, event_name: "" } });
    await call(u.api, "DELETE", "/v1/webhooks/{id}", { id: hook.id });
    await call(u.api, "DELETE", "/v1/workflows/{id}", { id: p });
  });

  it("users, the admin API and the operational endpoints", async () => {
    const free = await td.createUser("free");
    const paid = await td.createUser("paid");
    await call(free.api, "GET", "/v1/users/me");
    await call(paid.api, "GET", "/v1/users/me");

    const admin = client(td.url, td.adminToken);
    const created = await call(admin, "POST", "/admin/users", {}, { json: { username: `doc${Date.now()}`, email: "doc@example.com" } });
    await call(admin, "POST", "/admin/users", {}, { json: { username: "", email: "x" } });
    await call(admin, "GET", "/admin/users");
    await call(admin, "POST", "/admin/users/{id}/api_key", { id: created.body.data.id });
    await call(admin, "DELETE", "/admin/users/{id}", { id: created.body.data.id });
    await call(admin, "DELETE", "/admin/users/{id}", { id: created.body.data.id });
    await call(client(td.url), "GET", "/admin/users");

    const anon = client(td.url);
    await call(anon, "GET", "/healthz");
    await call(anon, "GET", "/readyz");
    await call(anon, "GET", "/metrics");
    await call(anon, "GET", "/v1/openapi.json");
    await call(anon, "GET", "/docs");
    await call(anon, "GET", "/docs/assets/{file}", { file: "swagger-ui.css" });
    await call(anon, "GET", "/docs/assets/{file}", { file: "nope.js" });
  });

  it("errors: 400, 401, 404, 405 and 415 carry {error, code}", async () => {
    const u = await td.createUser();
    await call(u.api, "GET", "/v1/users/me/webhooks", {}, { query: { limit: 101 } });
    await call(client(td.url), "GET", "/v1/users/me");
    await call(client(td.url, "wrong-key"), "POST", "/v1/sources", {}, { json: {} });
    await call(u.api, "GET", "/v1/webhooks/{id}", { id: "wh_nosuchwebhook0" });
    await call(u.api, "POST", "/v1/components", {}, { body: "component_code=x", headers: { "content-type": "text/plain" } });
    await call(u.api, "POST", "/v1/webhooks", {}, { body: "{not json", headers: { "content-type": "application/json" } });

    // An unknown route and a wrong method: the shared responses, and Allow names the document's methods.
    const unknown = await u.api.get("/v1/no/such/route");
    expect(unknown.status).toBe(404);
    expect(contract.errorsFor("Error", unknown.body)).toEqual([]);
    const wrong = await u.api.del("/v1/users/me");
    expect(wrong.status).toBe(405);
    expect(contract.errorsFor("Error", wrong.body)).toEqual([]);
    const allow = (wrong.headers.get("allow") ?? "").split(",").map((m) => m.trim().toLowerCase());
    expect(allow.filter((m) => m !== "head").sort()).toEqual(Object.keys(doc.paths["/v1/users/me"]).sort());
  });
});
