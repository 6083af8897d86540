import { randomBytes } from "node:crypto";
import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Redis } from "ioredis";
import { expect } from "vitest";
import { EventStore } from "../../../src/store/events.js";
import { createKeys } from "../../../src/store/keys.js";
import type { Client, Reply, TestDaemon } from "../../helpers/daemon.js";

/**
 * Shared pieces of the management API tests: component fixtures, small creators that fail loudly,
 * the error-body assertion, a poll with a deadline, and a loopback HTTP server.
 */

// ---------------------------------------------------------------------------------------------
// Component code

/** CommonJS timer component with a db, a timer with a default, and a described string prop. */
export const TIMER_CJS = `module.exports = {
  key: "api-timer",
  name: "API Timer",
  version: "0.2.0",
  description: "Ticks for the API tests",
  props: {
    db: "$.service.db",
    timer: { type: "$.interface.timer", label: "Every", default: { intervalSeconds: 60 } },
    greeting: { type: "string", label: "Greeting", description: "What to say", default: "hello" },
  },
  async run() {},
};
`;

/** ESM HTTP component using the shorthand prop form. */
export const HTTP_ESM = `export default {
  key: "api-http",
  name: "API HTTP",
  version: "1.0.0",
  props: { http: "$.interface.http" },
  async run(event) { this.$emit(event.body); },
};
`;

/** Value props of every checked kind; only `url` is required. */
export const TYPED_PROPS = `module.exports = {
  key: "api-typed",
  name: "API Typed",
  version: "1.2.3",
  props: {
    url: { type: "string", label: "Feed URL" },
    count: { type: "integer", optional: true, min: 1, max: 10 },
    enabled: { type: "boolean", optional: true },
    mode: { type: "string", optional: true, options: ["fast", { label: "Slow", value: "slow" }] },
    tags: { type: "string[]", optional: true },
    extra: { type: "object", optional: true },
  },
  async run() {},
};
`;

/** A component without a key; its name drives the default source name. */
export const NAMED_ONLY = `module.exports = { name: "Weird   Name!! 2000", version: "3.0.0", props: {}, async run() {} };
`;

/** Code with the given key and a marker that makes its hash unique. */
export function keyedComponent(key: string, marker: string): string {
  return `module.exports = { key: ${JSON.stringify(key)}, name: ${JSON.stringify(`Keyed ${marker}`)}, version: "1.0.0", props: {}, async run() {} };\n`;
}

/** A component with a unique name (and so a unique code hash and default slug). */
export function uniqueComponent(extraProps = ""): string {
  const tag = randomBytes(4).toString("hex");
  return `module.exports = { name: "Uniq ${tag}", version: "1.0.0", props: {${extraProps}}, async run() {} };\n`;
}

// ---------------------------------------------------------------------------------------------
// Assertions and creators

/** The reply is an error with the given status and the `{error, code}` body of SPEC §2. */
export function expectError(res: Reply, status: number | readonly number[], message?: RegExp): void {
  const statuses = typeof status === "number" ? [status] : status;
  expect(statuses, `expected ${statuses.join("|")}, got ${res.status}: ${res.text.slice(0, 300)}`).toContain(res.status);
  expect(res.headers.get("content-type") ?? "").toMatch(/application\/json/);
  expect(typeof res.body?.error, `error body: ${res.text.slice(0, 300)}`).toBe("string");
  expect(res.body.error.length).toBeGreaterThan(0);
  expect(res.body.code).toMatch(/^[a-z][a-z0-9_]*$/);
  if (message) expect(res.body.error).toMatch(message);
}

/** The reply has the given status; the message carries the body when it does not. */
/** A 429 `limit_exceeded` naming the limit, with the nominal Retry-After. */
export function expectLimit(res: Reply, name: string): void {
  expectError(res, 429, new RegExp(`^${name} limit reached`));
  expect(res.body.code).toBe("limit_exceeded");
  expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
}

/** The user's `limits` object of GET /v1/users/me. */
export async function usage(api: Client): Promise<Json> {
  const res = await api.get("/v1/users/me");
  expectStatus(res, 200);
  return res.body.data.limits;
}

export function expectStatus(res: Reply, status: number): void {
  expect(res.status, `${res.status}: ${res.text.slice(0, 500)}`).toBe(status);
}

// biome-ignore lint/suspicious/noExplicitAny: API objects are read as arbitrary JSON in tests.
export type Json = any;

export async function createComponent(api: Client, code: string): Promise<Json> {
  const res = await api.post("/v1/components", { json: { component_code: code } });
  expectStatus(res, 200);
  return res.body.data;
}

export async function createSource(api: Client, body: Record<string, unknown>): Promise<Json> {
  const res = await api.post("/v1/sources", { json: body });
  expectStatus(res, 200);
  return res.body.data;
}

export async function createWebhook(api: Client, url: string, extra: Record<string, string> = {}): Promise<Json> {
  const res = await api.post("/v1/webhooks", { query: { url, ...extra } });
  expectStatus(res, 200);
  return res.body.data;
}

export async function subscribe(api: Client, emitter_id: string, listener_id: string, event_name?: string): Promise<Json> {
  const res = await api.post("/v1/subscriptions", { query: { emitter_id, listener_id, event_name } });
  expectStatus(res, 200);
  return res.body.data;
}

/** Emits one workflow event and returns its id. */
export async function emit(api: Client, workflowId: string, event: unknown, meta: Record<string, unknown> = {}): Promise<string> {
  const res = await api.post(`/v1/workflows/${workflowId}/events`, { json: { event, ...meta } });
  expectStatus(res, 202);
  return res.body.data.id;
}

/** A fresh workflow id, chosen by the caller as SPEC §3 allows. */
export function workflowId(): string {
  return `p_${randomBytes(6).toString("hex")}`;
}

/** A well-formed id that no one owns. */
export function absentId(prefix: "dc_" | "sc_" | "wh_" | "sub_"): string {
  return `${prefix}${randomBytes(8).toString("hex")}`;
}

export const b64url = (s: string): string => Buffer.from(s, "utf8").toString("base64url");

/**
 * Records events for a source through the product's own event store, as the source runtime does
 * when a run calls `$emit` (sources have no ingress of their own in the management API).
 */
export async function seedSourceEvents(
  td: TestDaemon,
  redis: Redis,
  userId: string,
  sourceId: string,
  payloads: readonly unknown[],
  channel = "",
): Promise<string[]> {
  const store = new EventStore(redis, createKeys(td.prefix));
  return store.record({
    userId,
    emitterId: sourceId,
    emitterKind: "source",
    channel,
    events: payloads.map((p, i) => ({
      payload: p,
      meta: { summary: `seed ${i}` },
      emitId: `emit_seed${i}${randomBytes(4).toString("hex")}`,
    })),
    acceptedAtMs: Date.now(),
  });
}

// ---------------------------------------------------------------------------------------------
// Loopback HTTP server

export interface Loopback {
  url(path?: string): string;
  /** Paths requested so far. */
  readonly hits: string[];
  close(): Promise<void>;
}

export async function loopbackServer(handler: RequestListener): Promise<Loopback> {
  const hits: string[] = [];
  const server: Server = createServer((req, res) => {
    hits.push(req.url ?? "");
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    hits,
    url: (path = "/") => `http://127.0.0.1:${port}${path}`,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Request bodies of the error-contract and fuzz tests

/** The daemon's default BODY_LIMIT_BYTES. */
export const BODY_LIMIT = 512 * 1024;

/** A JSON text of exactly `bytes` bytes: {"component_code":"xxx…"}. */
export function jsonOfSize(bytes: number, key = "component_code"): string {
  const shell = `{"${key}":""}`.length;
  return `{"${key}":"${"x".repeat(bytes - shell)}"}`;
}

/** A body sent in chunks, without a content-length (transfer-encoding: chunked). */
export function chunked(text: string, chunkBytes = 64 * 1024): ReadableStream<Uint8Array> {
  const bytes = Buffer.from(text);
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      controller.enqueue(bytes.subarray(offset, offset + chunkBytes));
      offset += chunkBytes;
    },
  });
}
