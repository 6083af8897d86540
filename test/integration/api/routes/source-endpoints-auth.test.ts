import { createHmac, randomBytes } from "node:crypto";
import { Webhooks } from "@octokit/webhooks";
import { Webhook } from "standardwebhooks";
import Stripe from "stripe";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, startTestDaemon, type TestDaemon } from "../../../helpers/daemon.js";
import { waitFor } from "../../../helpers/receiver.js";
import { eventsNewestFirst, expectStatus, type Json } from "../../runtime/support.js";

/**
 * Inbound verification of HTTP sources (SPEC §12) through a whole daemon on loopback: the auth is
 * set with the management API, requests are signed with the providers' own libraries
 * (@octokit/webhooks, stripe, standardwebhooks) or by hand after their documentation (Slack,
 * Shopify), and what the run received is read back from its answer or its events.
 */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "5000" });
});

afterAll(async () => {
  await td?.close();
});

/** Answers with what run() received: the answer can only be this when the run happened. */
const ECHO = `module.exports = {
  name: "Auth Echo",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    this.http.respond({ status: 200, headers: { "content-type": "application/json" }, body: { ran: true, bodyRaw: event.bodyRaw } });
  },
};
`;

/** Queued (no custom response): emits what it received. */
const CAPTURE = `module.exports = {
  name: "Auth Capture",
  version: "0.0.1",
  props: { http: "$.interface.http", note: { type: "string", optional: true } },
  async run(event) { this.$emit({ bodyRaw: event.bodyRaw, marker: event.headers["x-marker"] ?? null }); },
};
`;

const GITHUB_SECRET = "It's a Secret to Everybody";
const SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BODY = '{"zen":"Keep it logically awesome.","hook_id":1,"note":"ünïcödé ✓"}';

interface Sent {
  status: number;
  body: Json;
  text: string;
}

/** One request to an endpoint, the body as exact bytes. */
async function send(url: string, body: string | Buffer, headers: Record<string, string> = {}, method = "POST"): Promise<Sent> {
  const res = await fetch(url, { method, headers, body: method === "GET" ? undefined : body });
  const text = await res.text();
  let parsed: Json;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text };
}

async function createSource(api: Client, code: string, auth: unknown, extra: Record<string, unknown> = {}): Promise<Json> {
  const res = await api.post("/v1/sources", { json: { component_code: code, configured_props: { http: { auth }, ...extra } } });
  expectStatus(res, 200);
  return res.body.data;
}

const endpointOf = (s: Json): string => String(s.configured_props.http.endpoint_url);

function expectUnauthorized(r: Sent, problem: RegExp): void {
  expect(r.status, r.text).toBe(401);
  expect(r.body).toEqual({ error: expect.stringMatching(problem), code: "unauthorized" });
}

function expectRan(r: Sent, bodyRaw: string): void {
  expect(r.status, r.text).toBe(200);
  expect(r.body).toEqual({ ran: true, bodyRaw });
}

const nowSeconds = () => Math.floor(Date.now() / 1000);
const hmac = (key: string, data: string | Buffer, enc: "hex" | "base64", alg = "sha256") => createHmac(alg, key).update(data).digest(enc);

/** The value of `tributary_source_requests_total{outcome}` on /metrics (0 before the first). */
async function counted(outcome: string): Promise<number> {
  const text = await (await fetch(`${td.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`tributary_source_requests_total{outcome="${outcome}"}`));
  return line ? Number(line.split(" ").pop()) : 0;
}

describe("configuring auth", () => {
  it("returns auth without its secret or token on POST, PUT and the list", async () => {
    const u = await td.createUser();
    const secret = `gh-${randomBytes(8).toString("hex")}`;
    const created = await u.api.post("/v1/sources", {
      json: { component_code: ECHO, configured_props: { http: { auth: { type: "hmac", preset: "github", secret } } } },
    });
    expectStatus(created, 200);
    expect(created.body.data.configured_props.http).toEqual({
      endpoint_url: expect.stringMatching(/\/e\/[A-Za-z0-9]+$/),
      auth: { type: "hmac", preset: "github" },
    });
    const token = `tok-${randomBytes(8).toString("hex")}`;
    const tokenSource = await createSource(u.api, ECHO, { type: "token", token });
    expect(tokenSource.configured_props.http.auth).toEqual({ type: "token" });
    const generic = await createSource(u.api, ECHO, {
      type: "hmac",
      header: "X-Signature",
      algorithm: "sha1",
      encoding: "hex",
      prefix: "sha1=",
      secret,
    });
    expect(generic.configured_props.http.auth).toEqual({
      type: "hmac",
      header: "x-signature",
      algorithm: "sha1",
      encoding: "hex",
      prefix: "sha1=",
    });
    const put = await u.api.put(`/v1/sources/${created.body.data.id}`, {
      json: { component_id: created.body.data.component_id, name: "renamed" },
    });
    expectStatus(put, 200);
    const list = await u.api.get("/v1/users/me/sources", { query: { limit: 100 } });
    expectStatus(list, 200);
    expect(list.body.data).toHaveLength(3);
    for (const text of [created.text, JSON.stringify(tokenSource), JSON.stringify(generic), put.text, list.text]) {
      expect(text).not.toContain(secret);
      expect(text).not.toContain(token);
    }
    expect(put.body.data.configured_props.http.auth).toEqual({ type: "hmac", preset: "github" });
  });

  it("refuses invalid auth with a 400 naming the problem, on POST and PUT", async () => {
    const u = await td.createUser();
    const bad: [unknown, RegExp][] = [
      [{ type: "hmac", preset: "gitlab", secret: "s" }, /configured_props\.http\.auth\.preset must be one of/],
      [{ type: "hmac", preset: "github" }, /configured_props\.http\.auth\.secret is required/],
      [{ type: "token" }, /configured_props\.http\.auth\.token is required/],
      [{ type: "hmac", header: "X-Sig", algorithm: "md5", encoding: "hex", secret: "s" }, /auth\.algorithm must be one of/],
      [{ type: "hmac", preset: "standard-webhooks", secret: "not base64!" }, /"whsec_" followed by base64/],
      ["secret", /auth must be an object/],
    ];
    for (const [auth, problem] of bad) {
      const res = await u.api.post("/v1/sources", { json: { component_code: ECHO, configured_props: { http: { auth } } } });
      expect(res.status, res.text).toBe(400);
      expect(res.body.error).toMatch(problem);
    }
    const s = await createSource(u.api, ECHO, { type: "token", token: "t" });
    const put = await u.api.put(`/v1/sources/${s.id}`, {
      json: { component_id: s.component_id, configured_props: { http: { auth: { type: "hmac", preset: "slack" } } } },
    });
    expect(put.status, put.text).toBe(400);
    expect(put.body.error).toMatch(/auth\.secret is required/);
  });

  it("PUT keeps auth without configured_props or with auth given back as shown, replaces it when given anew, drops it when left out", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, ECHO, { type: "hmac", preset: "shopify", secret: "first" });
    const url = endpointOf(s);
    const signed = (secret: string) => ({ "x-shopify-hmac-sha256": hmac(secret, BODY, "base64") });
    const put = async (json: Record<string, unknown>) => {
      const res = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, ...json } });
      expectStatus(res, 200);
      return res.body.data;
    };

    await put({ active: true });
    expectRan(await send(url, BODY, signed("first")), BODY);
    expectUnauthorized(await send(url, BODY), /missing X-Shopify-Hmac-Sha256 header/);

    // What GET showed, written back: the stored secret stays.
    const shown = await put({ configured_props: s.configured_props });
    expect(shown.configured_props.http.auth).toEqual({ type: "hmac", preset: "shopify" });
    expectRan(await send(url, BODY, signed("first")), BODY);

    await put({ configured_props: { http: { auth: { type: "hmac", preset: "shopify", secret: "second" } } } });
    expectUnauthorized(await send(url, BODY, signed("first")), /signature does not match/);
    expectRan(await send(url, BODY, signed("second")), BODY);

    const dropped = await put({ configured_props: {} });
    expect(dropped.configured_props.http).toEqual({ endpoint_url: url });
    expectRan(await send(url, BODY), BODY);
  });
});

describe("verifying requests", () => {
  it("GitHub: accepts @octokit/webhooks' signature with the exact body; refuses a wrong one, a tampered body or none, running nothing", async () => {
    const u = await td.createUser();
    const url = endpointOf(await createSource(u.api, ECHO, { type: "hmac", preset: "github", secret: GITHUB_SECRET }));
    const sig = await new Webhooks({ secret: GITHUB_SECRET }).sign(BODY);
    expectRan(await send(url, BODY, { "content-type": "application/json", "x-hub-signature-256": sig }), BODY);
    const wrong = await new Webhooks({ secret: "another secret" }).sign(BODY);
    expectUnauthorized(await send(url, BODY, { "x-hub-signature-256": wrong }), /^signature does not match$/);
    expectUnauthorized(await send(url, BODY.replace("1", "2"), { "x-hub-signature-256": sig }), /^signature does not match$/);
    expectUnauthorized(await send(url, BODY), /^missing X-Hub-Signature-256 header$/);
  });

  it("Stripe: accepts stripe's test header; refuses a stale timestamp and a tampered body", async () => {
    const u = await td.createUser();
    const secret = "whsec_stripe_integration";
    const url = endpointOf(await createSource(u.api, ECHO, { type: "hmac", preset: "stripe", secret }));
    const header = (timestamp: number) => Stripe.webhooks.generateTestHeaderString({ payload: BODY, secret, timestamp });
    expectRan(await send(url, BODY, { "stripe-signature": header(nowSeconds()) }), BODY);
    expectUnauthorized(await send(url, BODY, { "stripe-signature": header(nowSeconds() - 600) }), /outside the 300 s tolerance/);
    expectUnauthorized(await send(url, `${BODY} `, { "stripe-signature": header(nowSeconds()) }), /signature does not match/);
  });

  it("Slack: accepts v0 signatures made after Slack's documentation; refuses a stale timestamp and a missing one", async () => {
    const u = await td.createUser();
    const secret = "8f742231b10e8888abcd99yyyzzz85a5";
    const url = endpointOf(await createSource(u.api, ECHO, { type: "hmac", preset: "slack", secret }));
    const form = "token=xyzz0WbapA4vBCDEFasx0q6G&command=%2Fweather&text=94070";
    const headers = (ts: number) => ({
      "content-type": "application/x-www-form-urlencoded",
      "x-slack-request-timestamp": String(ts),
      "x-slack-signature": `v0=${hmac(secret, `v0:${ts}:${form}`, "hex")}`,
    });
    expectRan(await send(url, form, headers(nowSeconds())), form);
    expectUnauthorized(await send(url, form, headers(nowSeconds() - 400)), /X-Slack-Request-Timestamp is outside the 300 s tolerance/);
    const { "x-slack-request-timestamp": _, ...noTimestamp } = headers(nowSeconds());
    expectUnauthorized(await send(url, form, noTimestamp), /missing X-Slack-Request-Timestamp header/);
  });

  it("Shopify: accepts the base64 HMAC of the body", async () => {
    const u = await td.createUser();
    const url = endpointOf(await createSource(u.api, ECHO, { type: "hmac", preset: "shopify", secret: "shpss_abc" }));
    expectRan(await send(url, BODY, { "x-shopify-hmac-sha256": hmac("shpss_abc", BODY, "base64") }), BODY);
    expectUnauthorized(await send(url, BODY, { "x-shopify-hmac-sha256": hmac("shpss_abc", BODY, "hex") }), /signature does not match/);
  });

  it("Standard Webhooks: accepts standardwebhooks' signature, on an empty body too; refuses a stale timestamp and another id", async () => {
    const u = await td.createUser();
    const url = endpointOf(await createSource(u.api, ECHO, { type: "hmac", preset: "standard-webhooks", secret: SW_SECRET }));
    const wh = new Webhook(SW_SECRET);
    const headers = (body: string, ts = nowSeconds(), id = `msg_${randomBytes(6).toString("hex")}`) => ({
      "webhook-id": id,
      "webhook-timestamp": String(ts),
      "webhook-signature": wh.sign(id, new Date(ts * 1000), body),
    });
    expectRan(await send(url, BODY, headers(BODY)), BODY);
    expectRan(await send(url, "", headers("")), "");
    expectUnauthorized(await send(url, BODY, headers(BODY, nowSeconds() - 301 - 5)), /webhook-timestamp is outside the 300 s tolerance/);
    expectUnauthorized(await send(url, BODY, { ...headers(BODY), "webhook-id": "msg_other" }), /signature does not match/);
  });

  it("verifies the bytes as sent: a body that is not UTF-8 verifies over its bytes, and the run gets its UTF-8 reading", async () => {
    const u = await td.createUser();
    const url = endpointOf(await createSource(u.api, ECHO, { type: "hmac", preset: "github", secret: GITHUB_SECRET }));
    const bytes = Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x20, 0xff, 0xfe, 0x0a]);
    const overBytes = `sha256=${hmac(GITHUB_SECRET, bytes, "hex")}`;
    expectRan(
      await send(url, bytes, { "content-type": "application/octet-stream", "x-hub-signature-256": overBytes }),
      bytes.toString("utf8"),
    );
    // Signed over the text the run sees rather than the bytes sent: refused.
    const overText = `sha256=${hmac(GITHUB_SECRET, Buffer.from(bytes.toString("utf8")), "hex")}`;
    expectUnauthorized(await send(url, bytes, { "x-hub-signature-256": overText }), /signature does not match/);
  });

  it("the token form: accepts Authorization: Bearer <token>, refuses another token or none", async () => {
    const u = await td.createUser();
    const token = randomBytes(16).toString("hex");
    const url = endpointOf(await createSource(u.api, ECHO, { type: "token", token }));
    expectRan(await send(url, BODY, { authorization: `Bearer ${token}` }), BODY);
    expectRan(await send(`${url}/sub/path?x=1`, "", { authorization: `Bearer ${token}` }, "GET"), "");
    expectUnauthorized(await send(url, BODY, { authorization: `Bearer ${token}x` }), /^token does not match$/);
    expectUnauthorized(await send(url, BODY), /^missing Authorization header$/);
  });

  it("the generic form: the named header, algorithm, encoding and prefix", async () => {
    const u = await td.createUser();
    const url = endpointOf(
      await createSource(u.api, ECHO, {
        type: "hmac",
        header: "X-Signature",
        algorithm: "sha512",
        encoding: "base64",
        prefix: "v1=",
        secret: "k",
      }),
    );
    expectRan(await send(url, BODY, { "x-signature": `v1=${hmac("k", BODY, "base64", "sha512")}` }), BODY);
    expectUnauthorized(await send(url, BODY, { "x-signature": hmac("k", BODY, "base64", "sha512") }), /x-signature must start with "v1="/);
    expectUnauthorized(await send(url, BODY, { "x-signature": `v1=${hmac("k", BODY, "base64", "sha256")}` }), /signature does not match/);
  });
});

describe("queued runs", () => {
  it("a verified request is queued and its run sees the exact bodyRaw; refused ones are never run", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, CAPTURE, { type: "hmac", preset: "github", secret: GITHUB_SECRET });
    const url = endpointOf(s);
    const octokit = new Webhooks({ secret: GITHUB_SECRET });
    const forged = await octokit.sign("something else");
    for (let i = 0; i < 3; i++) {
      expectUnauthorized(
        await send(url, `${BODY}${i}`, { "x-marker": `forged-${i}`, "x-hub-signature-256": forged }),
        /signature does not match/,
      );
    }
    const body = `${BODY}\r\n  `;
    const accepted = await send(url, body, { "x-marker": "signed", "x-hub-signature-256": await octokit.sign(body) });
    expect(accepted.status, accepted.text).toBe(200);
    expect(accepted.body).toEqual({ success: true });
    const got = await waitFor(
      async () => {
        const e = await eventsNewestFirst(u.api, s.id);
        return e.length > 0 ? e : undefined;
      },
      { what: "the signed request's event" },
    );
    expect(got.map((e: Json) => e.event)).toEqual([{ bodyRaw: body, marker: "signed" }]);
  });
});

describe("order and metrics", () => {
  it("refused requests spend none of the source's rate, and every outcome is counted", async () => {
    const before = {
      accepted: await counted("accepted"),
      unauthorized: await counted("unauthorized"),
      not_found: await counted("not_found"),
    };
    const u = await td.createUser();
    const url = endpointOf(await createSource(u.api, ECHO, { type: "token", token: "right" }));
    // Far more than the source's burst (SOURCE_HTTP_RATE_PER_SECOND 10, burst 20), all at once.
    const forged = await Promise.all(Array.from({ length: 60 }, () => send(url, BODY, { authorization: "Bearer wrong" })));
    for (const r of forged) expectUnauthorized(r, /token does not match/);
    expectRan(await send(url, BODY, { authorization: "Bearer right" }), BODY);
    expect((await send(`${td.url}/e/NoSuchEndpointToken1`, BODY)).status).toBe(404);
    expect(await counted("unauthorized")).toBe(before.unauthorized + 60);
    expect(await counted("accepted")).toBe(before.accepted + 1);
    expect(await counted("not_found")).toBe(before.not_found + 1);
  });
});
