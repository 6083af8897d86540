import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type ReceivedRequest, type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { absentId, createWebhook, emit, expectError, expectStatus, type Json, subscribe, workflowId } from "./support.js";

/**
 * Signing secrets (issue 10, item 21, as Svix does): `GET /v1/webhooks/{id}/secret` and
 * `POST /v1/webhooks/{id}/secret/rotate`, and what deliveries carry during and after a rotation's
 * overlap, verified with the real `standardwebhooks` package at a real loopback receiver.
 */

let td: TestDaemon;
let rx: Receiver;

beforeAll(async () => {
  [td, rx] = await Promise.all([startTestDaemon(), startReceiver()]);
});

afterAll(async () => {
  await td?.close();
  await rx?.close();
});

const DAY_MS = 86_400_000;

/** `whsec_` + base64 of `bytes` bytes of `fill` (0xfb gives "+" and "/" in the text). */
const secretOf = (bytes: number, fill: number) => `whsec_${Buffer.alloc(bytes, fill).toString("base64")}`;

let pathCounter = 0;
const hookPath = (name: string) => `/${name}-${++pathCounter}-${randomBytes(3).toString("hex")}`;

const headersOf = (r: ReceivedRequest): Record<string, string> =>
  Object.fromEntries(Object.entries(r.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]));

/** A webhook at a fresh receiver path, subscribed to a fresh workflow. */
async function subscribedHook(api: Client): Promise<{ hook: Json; path: string; emitter: string }> {
  const path = hookPath("secret");
  const hook = await createWebhook(api, rx.url(path));
  const emitter = workflowId();
  await subscribe(api, emitter, hook.id);
  return { hook, path, emitter };
}

/** Emits one event and returns the delivery the receiver got for it. */
async function deliverOne(api: Client, emitter: string, path: string): Promise<ReceivedRequest> {
  const marker = randomBytes(6).toString("hex");
  await emit(api, emitter, { marker });
  return rx.waitFor((r) => r.to(path).find((req) => (req.json as Json)?.marker === marker), {
    timeoutMs: 15_000,
    what: `the delivery of ${marker} at ${path}`,
  });
}

/** Whether `secret` alone verifies the delivery with the standardwebhooks package. */
function verifies(secret: string, got: ReceivedRequest): boolean {
  try {
    new Webhook(secret).verify(got.raw, headersOf(got));
    return true;
  } catch {
    return false;
  }
}

const signatureCount = (got: ReceivedRequest) => String(got.headers["webhook-signature"]).split(" ").length;

async function secretOfHook(api: Client, id: string): Promise<string> {
  const res = await api.get(`/v1/webhooks/${id}/secret`);
  expectStatus(res, 200);
  return res.body.data.signing_secret;
}

async function rotate(api: Client, id: string, opts: { query?: Record<string, unknown>; json?: unknown } = {}): Promise<Json> {
  const res = await api.post(`/v1/webhooks/${id}/secret/rotate`, opts);
  expectStatus(res, 200);
  return res.body.data;
}

describe("GET /webhooks/{id}/secret", () => {
  it("answers the webhook's signing secret to its owner, marked not to be cached", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/secret");
    const res = await u.api.get(`/v1/webhooks/${w.id}/secret`);
    expectStatus(res, 200);
    expect(res.body).toEqual({ data: { signing_secret: w.signing_secret } });
    expect(res.headers.get("cache-control")).toBe("no-store");
  });

  it("answers 404 for unknown, malformed and foreign ids on both endpoints, 401 without a key, and changes nothing", async () => {
    const owner = await td.createUser();
    const other = await td.createUser();
    const w = await createWebhook(owner.api, "https://example.com/mine");
    for (const id of [w.id, absentId("wh_"), "not-a-webhook", "wh_", "dc_abcdefghijkl"]) {
      expectError(await other.api.get(`/v1/webhooks/${id}/secret`), 404);
      expectError(await other.api.post(`/v1/webhooks/${id}/secret/rotate`), 404);
      expectError(await other.api.post(`/v1/webhooks/${id}/secret/rotate`, { json: { signing_secret: secretOf(24, 1) } }), 404);
    }
    const anonymous = client(td.url);
    expectError(await anonymous.get(`/v1/webhooks/${w.id}/secret`), 401);
    expectError(await anonymous.post(`/v1/webhooks/${w.id}/secret/rotate`), 401);
    expect(await secretOfHook(owner.api, w.id)).toBe(w.signing_secret);
    expect((await owner.api.get(`/v1/webhooks/${w.id}`)).body.data).toEqual(w);
  });
});

describe("POST /webhooks/{id}/secret/rotate", () => {
  it("issues a new random secret, shown by GET secret and the webhook object, and the previous one's end 24 h ahead", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/rotate");
    const before = Date.now();
    const res = await u.api.post(`/v1/webhooks/${w.id}/secret/rotate`);
    const after = Date.now();
    expectStatus(res, 200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(Object.keys(res.body.data).sort()).toEqual(["previous_secret_expires_at", "signing_secret"]);
    const { signing_secret: next, previous_secret_expires_at: until } = res.body.data;
    expect(next).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    expect(next).not.toBe(w.signing_secret);
    expect(() => new Webhook(next)).not.toThrow();
    expect(until).toBe(new Date(Date.parse(until)).toISOString());
    expect(Date.parse(until)).toBeGreaterThanOrEqual(before + DAY_MS - 1000);
    expect(Date.parse(until)).toBeLessThanOrEqual(after + DAY_MS + 1000);

    expect(await secretOfHook(u.api, w.id)).toBe(next);
    const got = (await u.api.get(`/v1/webhooks/${w.id}`)).body.data;
    // The webhook object keeps its shape: the new secret, nothing about the previous one.
    expect(Object.keys(got).sort()).toEqual(Object.keys(w).sort());
    expect(got).toMatchObject({ ...w, signing_secret: next, updated_at: expect.any(Number) });
    const list = await u.api.get("/v1/users/me/webhooks");
    expect(JSON.stringify(list.body)).not.toMatch(/whsec_|signing_secret/);

    const again = await rotate(u.api, w.id);
    expect(new Set([w.signing_secret, next, again.signing_secret]).size).toBe(3);
  });

  it("sets a caller-chosen secret from the query string or from the JSON body", async () => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/chosen");
    const fromQuery = secretOf(24, 0xfb); // "+" and "/" survive the query string
    expect(fromQuery).toMatch(/[+/]/);
    expect((await rotate(u.api, w.id, { query: { signing_secret: fromQuery } })).signing_secret).toBe(fromQuery);
    expect(await secretOfHook(u.api, w.id)).toBe(fromQuery);
    const fromBody = secretOf(64, 7);
    expect((await rotate(u.api, w.id, { json: { signing_secret: fromBody } })).signing_secret).toBe(fromBody);
    expect(await secretOfHook(u.api, w.id)).toBe(fromBody);
    // The body wins over the query string, as for every parameter.
    const both = secretOf(32, 9);
    expect((await rotate(u.api, w.id, { query: { signing_secret: fromQuery }, json: { signing_secret: both } })).signing_secret).toBe(both);
  });

  it.each([
    ["without the whsec_ prefix", { query: { signing_secret: Buffer.alloc(24, 1).toString("base64") } }, /prefix/],
    ["empty", { query: { signing_secret: "" } }, /prefix/],
    ["not base64", { json: { signing_secret: "whsec_not*base64!" } }, /base64/],
    ["base64url", { json: { signing_secret: `whsec_${Buffer.alloc(24, 0xfb).toString("base64url")}` } }, /base64/],
    ["of 23 bytes", { json: { signing_secret: secretOf(23, 1) } }, /23 bytes/],
    ["of 65 bytes", { json: { signing_secret: secretOf(65, 1) } }, /65 bytes/],
    ["a number", { json: { signing_secret: 42 } }, /number/],
    ["an array", { json: { signing_secret: [secretOf(24, 1)] } }, /object/],
  ])("answers 400 naming signing_secret to a secret %s, and changes nothing", async (_label, opts, why) => {
    const u = await td.createUser();
    const w = await createWebhook(u.api, "https://example.com/invalid");
    const res = await u.api.post(`/v1/webhooks/${w.id}/secret/rotate`, opts);
    expectError(res, 400, /^signing_secret must be "whsec_" followed by the base64 of 24 to 64 random bytes/);
    expect(res.body.code).toBe("invalid_parameter");
    expect(res.body.error).toMatch(why);
    expect(await secretOfHook(u.api, w.id)).toBe(w.signing_secret);
    expect((await u.api.get(`/v1/webhooks/${w.id}`)).body.data).toEqual(w);
  });

  it("changes nothing when rotated to the secret already in use, so a retried call keeps the previous secret in effect", async () => {
    const u = await td.createUser();
    const { hook, path, emitter } = await subscribedHook(u.api);
    const chosen = secretOf(32, 3);
    const first = await rotate(u.api, hook.id, { json: { signing_secret: chosen } });
    const retried = await rotate(u.api, hook.id, { json: { signing_secret: chosen } });
    expect(retried).toEqual(first);
    const got = await deliverOne(u.api, emitter, path);
    expect(verifies(chosen, got)).toBe(true);
    expect(verifies(hook.signing_secret, got)).toBe(true);
  });
});

describe("deliveries around a rotation", () => {
  it("are signed with both secrets during the overlap: a receiver holding only the old or only the new secret verifies", async () => {
    const u = await td.createUser();
    const { hook, path, emitter } = await subscribedHook(u.api);
    const before = await deliverOne(u.api, emitter, path);
    expect(signatureCount(before)).toBe(1);
    expect(verifies(hook.signing_secret, before)).toBe(true);

    const { signing_secret: next } = await rotate(u.api, hook.id);
    const during = await deliverOne(u.api, emitter, path);
    const signatures = String(during.headers["webhook-signature"]).split(" ");
    expect(signatures).toHaveLength(2);
    expect(signatures.every((s) => /^v1,[A-Za-z0-9+/]+=*$/.test(s))).toBe(true);
    expect(new Webhook(hook.signing_secret).verify(during.raw, headersOf(during))).toEqual(during.json);
    expect(new Webhook(next).verify(during.raw, headersOf(during))).toEqual(during.json);
    expect(verifies(secretOf(24, 0x42), during)).toBe(false);
  });

  it("after a second rotation during the overlap, are signed with the newest secret and the one it replaced only", async () => {
    const u = await td.createUser();
    const { hook, path, emitter } = await subscribedHook(u.api);
    const second = (await rotate(u.api, hook.id)).signing_secret;
    const third = (await rotate(u.api, hook.id)).signing_secret;
    const got = await deliverOne(u.api, emitter, path);
    expect(signatureCount(got)).toBe(2);
    expect(verifies(third, got)).toBe(true);
    expect(verifies(second, got)).toBe(true);
    expect(verifies(hook.signing_secret, got)).toBe(false);
  });

  it("keep every concurrent rotation: none is lost, and no concurrent update puts an old secret back", async () => {
    const u = await td.createUser();
    const { hook, path, emitter } = await subscribedHook(u.api);
    const names = Array.from({ length: 6 }, (_, i) => `name-${i}`);
    const replies = await Promise.all([
      ...names.map((name) => u.api.put(`/v1/webhooks/${hook.id}`, { json: { name } })),
      ...names.map(() => u.api.post(`/v1/webhooks/${hook.id}/secret/rotate`)),
    ]);
    for (const r of replies) expectStatus(r, 200);
    const issued: string[] = replies.slice(names.length).map((r) => r.body.data.signing_secret);
    expect(new Set(issued).size).toBe(names.length);

    // The rotations were applied one after another: the current secret is one of them, and the
    // previous one is another of them (not the original, which two racing rotations would both
    // have kept as "previous"); the PUTs changed names only.
    const current = await secretOfHook(u.api, hook.id);
    expect(issued).toContain(current);
    const view = (await u.api.get(`/v1/webhooks/${hook.id}`)).body.data;
    expect(names).toContain(view.name);
    expect(view.signing_secret).toBe(current);
    const got = await deliverOne(u.api, emitter, path);
    expect(signatureCount(got)).toBe(2);
    expect(verifies(hook.signing_secret, got)).toBe(false);
    expect(issued.filter((s) => verifies(s, got))).toHaveLength(2);
  });
});

describe("a tiny overlap, with the API and the worker in separate processes", () => {
  let api: TestDaemon;
  let worker: TestDaemon;

  beforeAll(async () => {
    api = await startTestDaemon({ ROLES: "api", WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS: "1" });
    // Shares the API daemon's key space; its deliveries read webhooks through its own listener cache.
    worker = await startTestDaemon({ ROLES: "worker,scheduler", REDIS_KEY_PREFIX: api.prefix });
  });

  afterAll(async () => {
    // `worker` shares `api`'s prefix: closing `api` last drops the shared keys.
    await worker?.close();
    await api?.close();
  });

  it("the worker signs with the new secret as soon as the API process rotates it, and with it alone once the overlap ends", async () => {
    const u = await api.createUser();
    const { hook, path, emitter } = await subscribedHook(u.api);
    // The worker reads the webhook (and caches it) for this first delivery.
    expect(verifies(hook.signing_secret, await deliverOne(u.api, emitter, path))).toBe(true);

    const rotated = await rotate(u.api, hook.id);
    const next: string = rotated.signing_secret;
    const until = Date.parse(rotated.previous_secret_expires_at);
    const now = Date.now();
    expect(until).toBeGreaterThan(now - 5000);
    expect(until).toBeLessThanOrEqual(now + 1000);
    // No assertion on the old secret here: on a loaded machine the 1 s overlap may be over already.
    expect(verifies(next, await deliverOne(u.api, emitter, path))).toBe(true);

    await waitFor(() => Date.now() > until + 20, { what: "the overlap to end", intervalMs: 20 });
    const afterOverlap = await deliverOne(u.api, emitter, path);
    expect(signatureCount(afterOverlap)).toBe(1);
    expect(verifies(next, afterOverlap)).toBe(true);
    expect(verifies(hook.signing_secret, afterOverlap)).toBe(false);
  });
});
