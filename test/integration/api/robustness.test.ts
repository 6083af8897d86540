import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import {
  BODY_LIMIT,
  chunked,
  jsonOfSize,
  emit,
  expectError,
  expectStatus,
  HTTP_ESM,
  type Json,
  TYPED_PROPS,
  workflowId,
} from "./support.js";

/**
 * The HTTP error contract of SPEC §2 (no input produces a 5xx; every error is `{error, code}`),
 * checked case by case (fuzz.test.ts checks it over every route by a seeded fuzz run).
 */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon();
});

afterAll(async () => {
  await td?.close();
});

interface RawReply {
  status: number;
  headers: Headers;
  text: string;
  body: Json;
}

/** A request with full control over method, headers and body bytes (the helper client sends JSON text only). */
async function raw(
  method: string,
  path: string,
  opts: { key?: string; headers?: Record<string, string>; body?: string | Buffer | ReadableStream<Uint8Array> } = {},
): Promise<RawReply> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  const init: RequestInit & { duplex?: "half" } = { method, headers, redirect: "manual" };
  if (opts.body !== undefined) {
    init.body = opts.body as RequestInit["body"];
    if (opts.body instanceof ReadableStream) init.duplex = "half";
  }
  const res = await fetch(td.url + path, init);
  const text = await res.text();
  let body: Json;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: res.status, headers: res.headers, text, body };
}

const JSON_TYPE = { "content-type": "application/json" };

describe("the error contract", () => {
  it("answers unknown routes with a 404 JSON error", async () => {
    const u = await td.createUser();
    for (const path of ["/v1/no/such/route", "/nope", "/v2/users/me", "/v1/users/me/extra", "/v1", "/v1/webhooks/wh_x/y/z"]) {
      const res = await u.api.get(path);
      expectError(res, 404);
      expect(res.body.code).toBe("route_not_found");
    }
  });

  it.each([
    ["DELETE", "/v1/users/me", ["GET"]],
    ["POST", "/v1/users/me/sources", ["GET"]],
    ["PUT", "/v1/sources", ["GET", "POST"]],
    ["PATCH", "/v1/sources/dc_abcdefghijkl", ["PUT", "DELETE"]],
    ["GET", "/v1/subscriptions", ["POST", "DELETE"]],
    ["PUT", "/v1/components", ["POST"]],
    ["GET", "/v1/workflows/p_abc/events", ["POST"]],
    ["POST", "/v1/users/me/webhooks", ["GET"]],
    ["PUT", "/admin/users", ["GET", "POST"]],
  ])("answers %s %s with a 405 JSON error and an Allow header naming %j", async (method, path, allowed) => {
    const u = await td.createUser();
    const key = path.startsWith("/admin") ? td.adminToken : u.api_key;
    const res = await raw(method, path, { key, headers: JSON_TYPE, body: method === "GET" ? undefined : "{}" });
    expectError(res, 405);
    const allow = (res.headers.get("allow") ?? "").split(",").map((m) => m.trim());
    for (const m of allowed) expect(allow).toContain(m);
  });

  it("accepts a body of exactly 512 KB and answers 413 to one byte more", async () => {
    const u = await td.createUser();
    const atLimit = await raw("POST", "/v1/components", { key: u.api_key, headers: JSON_TYPE, body: jsonOfSize(BODY_LIMIT) });
    // Not a component (a 400), but read and parsed: the limit is inclusive.
    expectError(atLimit, 400);
    const over = await raw("POST", "/v1/components", { key: u.api_key, headers: JSON_TYPE, body: jsonOfSize(BODY_LIMIT + 1) });
    expectError(over, 413);
    expect(over.body.code).toBe("payload_too_large");
  });

  it.each([
    ["POST", "/v1/components"],
    ["POST", "/v1/sources"],
    ["POST", `/v1/workflows/p_big/events`],
    ["POST", "/v1/webhooks"],
    ["PUT", "/v1/workflows/p_big"],
    ["POST", "/admin/users"],
  ])("answers 413 to an oversize body on %s %s, declared or chunked", async (method, path) => {
    const u = await td.createUser();
    const key = path.startsWith("/admin") ? td.adminToken : u.api_key;
    const text = jsonOfSize(600 * 1024, "event");
    expectError(await raw(method, path, { key, headers: JSON_TYPE, body: text }), 413);
    expectError(await raw(method, path, { key, headers: JSON_TYPE, body: chunked(text) }), 413);
  });

  it.each([
    ["text/plain", "component_code=x"],
    ["application/x-www-form-urlencoded", "component_code=x"],
    ["multipart/form-data; boundary=b", "--b\r\n\r\nx\r\n--b--"],
    ["application/xml", "<a/>"],
    ["application/octet-stream", "{}"],
    ["application/jsonx", "{}"],
  ])("answers 415 to a %s body on every JSON endpoint", async (type, body) => {
    const u = await td.createUser();
    const targets: [string, string, string][] = [
      ["POST", "/v1/components", u.api_key],
      ["POST", "/v1/sources", u.api_key],
      ["PUT", "/v1/sources/dc_abcdefghijkl", u.api_key],
      ["POST", "/v1/workflows/p_x/events", u.api_key],
      ["POST", "/v1/subscriptions", u.api_key],
      ["POST", "/admin/users", td.adminToken],
    ];
    for (const [method, path, key] of targets) {
      const res = await raw(method, path, { key, headers: { "content-type": type }, body });
      expectError(res, 415);
      expect(res.body.code).toBe("unsupported_media_type");
    }
  });

  it("answers 415 to a body without a content type", async () => {
    const u = await td.createUser();
    expectError(await raw("POST", "/v1/components", { key: u.api_key, body: Buffer.from("{}") }), 415);
  });

  it("accepts JSON under application/json with a charset and under +json types", async () => {
    const u = await td.createUser();
    for (const type of ["application/json; charset=utf-8", "APPLICATION/JSON", "application/vnd.api+json"]) {
      const res = await raw("POST", "/v1/components", {
        key: u.api_key,
        headers: { "content-type": type },
        body: JSON.stringify({ component_code: HTTP_ESM }),
      });
      expectStatus(res, 200);
    }
  });

  it.each([
    ["a truncated object", '{"component_code": '],
    ["single quotes", "{'component_code': 'x'}"],
    ["a trailing comma", '{"a": 1,}'],
    ["NaN", "NaN"],
    ["two objects", '{"a":1}{"b":2}'],
    ["a bare word", "undefined"],
    ["a leading zero", '{"a": 01}'],
    ["a bad escape", '{"a": "\\x41"}'],
  ])("answers 400 invalid_json to %s", async (_label, body) => {
    const u = await td.createUser();
    const res = await raw("POST", "/v1/sources", { key: u.api_key, headers: JSON_TYPE, body });
    expectError(res, 400);
    expect(res.body.code).toBe("invalid_json");
  });

  it("reads a gzip-encoded JSON body", async () => {
    const u = await td.createUser();
    const res = await raw("POST", "/v1/components", {
      key: u.api_key,
      headers: { ...JSON_TYPE, "content-encoding": "gzip" },
      body: gzipSync(JSON.stringify({ component_code: HTTP_ESM })),
    });
    expectStatus(res, 200);
  });

  it.each([["gzip"], ["deflate"], ["br"]])("answers 4xx, not 500, to a body that is not valid %s", async (encoding) => {
    const u = await td.createUser();
    const res = await raw("POST", "/v1/components", {
      key: u.api_key,
      headers: { ...JSON_TYPE, "content-encoding": encoding },
      body: Buffer.from('{"component_code": "not compressed at all"}'),
    });
    expectError(res, [400, 415]);
  });

  it("answers 415 to an unknown content encoding", async () => {
    const u = await td.createUser();
    const res = await raw("POST", "/v1/components", { key: u.api_key, headers: { ...JSON_TYPE, "content-encoding": "zstd" }, body: "{}" });
    expectError(res, 415);
    expect(res.body.code).toBe("unsupported_media_type");
  });

  it("names __proto__ keys as the problem rather than calling the JSON invalid", async () => {
    const u = await td.createUser();
    const res = await raw("POST", "/v1/components", {
      key: u.api_key,
      headers: JSON_TYPE,
      body: '{"__proto__": {"x": 1}, "component_code": "x"}',
    });
    expectError(res, 400);
    expect(res.body.code).toBe("invalid_body");
    expect(res.body.error).toMatch(/__proto__/);
  });

  it.each([
    ["a workflow emit", "POST", () => "/v1/workflows/p_deep/events", (d: string) => `{"event": ${d}}`],
    ["a batch emit", "POST", () => "/v1/workflows/p_deep/events", (d: string) => `{"events": [{"event": ${d}}]}`],
    ["a workflow error", "POST", () => "/v1/workflows/p_deep/$errors/events", (d: string) => `{"original_event": ${d}}`],
    [
      "a source's object prop",
      "POST",
      () => "/v1/sources",
      (d: string) => `{"component_code": ${JSON.stringify(TYPED_PROPS)}, "configured_props": {"url": "u", "extra": {"deep": ${d}}}}`,
    ],
    ["a webhook name", "POST", () => "/v1/webhooks", (d: string) => `{"url": "https://example.com", "name": ${d}}`],
    [
      "a subscription event_name",
      "POST",
      () => "/v1/subscriptions",
      (d: string) => `{"emitter_id": "p_*", "listener_id": "p_x", "event_name": ${d}}`,
    ],
  ])("answers 2xx or 4xx, never 500, to JSON nested 20000 deep in %s", async (_label, method, path, wrap) => {
    const u = await td.createUser();
    for (const deep of ["[".repeat(20_000) + "]".repeat(20_000), `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`]) {
      const res = await raw(method, path(), { key: u.api_key, headers: JSON_TYPE, body: wrap(deep) });
      expect(res.status, `${res.status}: ${res.text.slice(0, 200)}`).toBeLessThan(500);
      if (res.status >= 400) expectError(res, res.status);
    }
    expectStatus(await u.api.get("/v1/users/me"), 200);
  });

  it("answers 2xx or 4xx, never 500, to the smallest event id as a cursor", async () => {
    const u = await td.createUser();
    const p = workflowId();
    await emit(u.api, p, 1);
    for (const [name, cursor] of [
      ["after", "0-0"],
      ["before", "0-0"],
      ["after", "0000000000000000-0"],
      ["after", "0-1"],
    ] as const) {
      const res = await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { [name]: cursor } });
      expect(res.status, `${name}=${cursor}: ${res.status} ${res.text.slice(0, 200)}`).toBeLessThan(500);
    }
    // Nothing follows the smallest id in newest-first order.
    const after = await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { after: "0-0" } });
    expect(after.body?.data).toEqual([]);
  });

  it("never lets __proto__ or constructor.prototype keys reach a prototype", async () => {
    const u = await td.createUser();
    const bodies = [
      '{"__proto__": {"polluted": "yes"}, "component_code": "x"}',
      '{"constructor": {"prototype": {"polluted": "yes"}}, "url": "https://example.com"}',
      '{"event": {"__proto__": {"polluted": "yes"}}}',
    ];
    for (const [path, body] of [
      ["/v1/components", bodies[0]],
      ["/v1/webhooks", bodies[1]],
      ["/v1/workflows/p_proto/events", bodies[2]],
    ] as const) {
      const res = await raw("POST", path, { key: u.api_key, headers: JSON_TYPE, body });
      expect(res.status).toBeLessThan(500);
      if (res.status >= 400) expectError(res, res.status);
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const query = await u.api.get("/v1/users/me/sources", { query: { __proto__: "x", constructor: "y", limit: "5" } });
    expectStatus(query, 200);
  });

  it("keeps the operational endpoints open without a key", async () => {
    expectStatus(await raw("GET", "/healthz"), 200);
    expectStatus(await raw("GET", "/readyz"), 200);
    const metrics = await raw("GET", "/metrics");
    expectStatus(metrics, 200);
    expect(metrics.text).toMatch(/^# HELP tributary_/m);
  });
});
