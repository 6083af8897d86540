import { createHmac } from "node:crypto";
import { Webhooks } from "@octokit/webhooks";
import fc from "fast-check";
import { Webhook } from "standardwebhooks";
import Stripe from "stripe";
import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/domain/errors.js";
import {
  configuredInboundAuth,
  type InboundAuth,
  inboundAuthView,
  parseInboundAuth,
  TIMESTAMP_TOLERANCE_SECONDS,
  verifyInbound,
} from "../../../src/domain/inbound-auth.js";

/**
 * Inbound verification (SPEC §12), signed with the providers' own libraries where they publish
 * one (@octokit/webhooks, stripe, standardwebhooks) and by hand after their documentation where
 * they do not (Slack, Shopify).
 */

const NOW = 1_750_000_000;
const WHERE = "configured_props.http.auth";
const SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BODY = '{"action":"opened","number":1,"title":"héllo ✓"}';

const auth = (raw: unknown): InboundAuth => parseInboundAuth(raw, WHERE);
const verify = (a: InboundAuth, headers: Record<string, string>, body: string | Buffer, now = NOW) =>
  verifyInbound(a, { headers, body: typeof body === "string" ? Buffer.from(body) : body }, now);
const problemOf = (raw: unknown): string => {
  try {
    auth(raw);
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return (err as Error).message;
  }
  throw new Error("expected a ValidationError");
};

const hmacOf = (alg: string, key: string | Buffer, data: string | Buffer, enc: "hex" | "base64") =>
  createHmac(alg, key).update(data).digest(enc);

describe("parsing auth", () => {
  it("accepts the token form, the five presets and the generic form", () => {
    expect(auth({ type: "token", token: "s3cr3t-T0ken" })).toEqual({ type: "token", token: "s3cr3t-T0ken" });
    for (const preset of ["github", "stripe", "shopify", "slack", "standard-webhooks"]) {
      const secret = preset === "standard-webhooks" ? SW_SECRET : "shh";
      expect(auth({ type: "hmac", preset, secret })).toEqual({ type: "hmac", preset, secret });
    }
    expect(auth({ type: "hmac", header: "X-Signature", algorithm: "sha1", encoding: "hex", prefix: "sha1=", secret: "k" })).toEqual({
      type: "hmac",
      header: "x-signature",
      algorithm: "sha1",
      encoding: "hex",
      prefix: "sha1=",
      secret: "k",
    });
    expect(auth({ type: "hmac", header: "X-Sig", algorithm: "sha512", encoding: "base64", secret: "k" })).toMatchObject({ prefix: "" });
  });

  it("refuses what is wrong with a message naming it", () => {
    expect(problemOf("token")).toMatch(/configured_props\.http\.auth must be an object/);
    expect(problemOf({ type: "basic" })).toMatch(/auth\.type must be one of: "token", "hmac"/);
    expect(problemOf({ type: "token" })).toMatch(/auth\.token is required/);
    expect(problemOf({ type: "token", token: "two words" })).toMatch(/auth\.token must be visible ASCII/);
    expect(problemOf({ type: "token", token: "t", secret: "x" })).toMatch(/auth\.secret is not allowed/);
    expect(problemOf({ type: "hmac", preset: "github" })).toMatch(/auth\.secret is required/);
    expect(problemOf({ type: "hmac", preset: "gitlab", secret: "s" })).toMatch(/auth\.preset must be one of: "github", "stripe"/);
    expect(problemOf({ type: "hmac", secret: "s" })).toMatch(/needs a preset .* or a header/);
    expect(problemOf({ type: "hmac", preset: "github", header: "x", secret: "s" })).toMatch(/either preset or header, not both/);
    expect(problemOf({ type: "hmac", preset: "github", secert: "s", secret: "s" })).toMatch(/auth\.secert is not allowed/);
    expect(problemOf({ type: "hmac", preset: "standard-webhooks", secret: "whsec_not base64!" })).toMatch(/"whsec_" followed by base64/);
    expect(problemOf({ type: "hmac", header: "x sig", algorithm: "sha256", encoding: "hex", secret: "s" })).toMatch(
      /header must be a header name/,
    );
    expect(problemOf({ type: "hmac", header: "Content-Type", algorithm: "sha256", encoding: "hex", secret: "s" })).toMatch(
      /cannot be content-type/,
    );
    expect(problemOf({ type: "hmac", header: "x-sig", algorithm: "md5", encoding: "hex", secret: "s" })).toMatch(
      /algorithm must be one of: "sha256", "sha1", "sha512"/,
    );
    expect(problemOf({ type: "hmac", header: "x-sig", algorithm: "sha256", encoding: "base32", secret: "s" })).toMatch(
      /encoding must be one of/,
    );
    expect(problemOf({ type: "hmac", header: "x-sig", algorithm: "sha256", encoding: "hex", prefix: 3, secret: "s" })).toMatch(
      /prefix must be a string/,
    );
    expect(problemOf({ type: "hmac", preset: "github", secret: "x".repeat(1025) })).toMatch(/at most 1024 characters/);
  });
});

describe("showing and keeping auth", () => {
  it("shows auth without its secret or token", () => {
    expect(inboundAuthView(auth({ type: "token", token: "t0k" }))).toEqual({ type: "token" });
    expect(inboundAuthView(auth({ type: "hmac", preset: "stripe", secret: "whsec_x" }))).toEqual({ type: "hmac", preset: "stripe" });
    const generic = inboundAuthView(
      auth({ type: "hmac", header: "X-Sig", algorithm: "sha256", encoding: "hex", prefix: "sha256=", secret: "k" }),
    );
    expect(generic).toEqual({ type: "hmac", header: "x-sig", algorithm: "sha256", encoding: "hex", prefix: "sha256=" });
    expect(JSON.stringify(generic)).not.toContain('"k"');
  });

  it("keeps the current auth when given back as shown, replaces it when given anew, drops it when absent or null", () => {
    const current = auth({ type: "hmac", preset: "github", secret: "old" });
    expect(configuredInboundAuth({ type: "hmac", preset: "github" }, current, WHERE)).toBe(current);
    expect(configuredInboundAuth({ type: "hmac", preset: "github", secret: "new" }, current, WHERE)).toEqual({ ...current, secret: "new" });
    expect(configuredInboundAuth(undefined, current, WHERE)).toBeNull();
    expect(configuredInboundAuth(null, current, WHERE)).toBeNull();
    // Another shape without a secret is a new auth, which needs one.
    expect(() => configuredInboundAuth({ type: "hmac", preset: "stripe" }, current, WHERE)).toThrow(/auth\.secret is required/);
    expect(() => configuredInboundAuth({ type: "hmac", preset: "github" }, null, WHERE)).toThrow(/auth\.secret is required/);
    const generic = auth({ type: "hmac", header: "X-Sig", algorithm: "sha1", encoding: "hex", secret: "k" });
    expect(configuredInboundAuth({ type: "hmac", header: "X-SIG", algorithm: "sha1", encoding: "hex" }, generic, WHERE)).toBe(generic);
    expect(() => configuredInboundAuth({ type: "hmac", header: "X-Sig", algorithm: "sha256", encoding: "hex" }, generic, WHERE)).toThrow(
      /secret is required/,
    );
    const token = auth({ type: "token", token: "t" });
    expect(configuredInboundAuth({ type: "token" }, token, WHERE)).toBe(token);
  });
});

describe("the token form", () => {
  const a = auth({ type: "token", token: "s3cr3t" });

  it("accepts Authorization: Bearer <token>, whatever the scheme's case", () => {
    expect(verify(a, { authorization: "Bearer s3cr3t" }, "")).toEqual({ ok: true });
    expect(verify(a, { authorization: "bearer s3cr3t" }, "")).toEqual({ ok: true });
  });

  it("refuses a missing header, another scheme, another token or a prefix of it", () => {
    expect(verify(a, {}, "")).toEqual({ ok: false, problem: "missing Authorization header" });
    expect(verify(a, { authorization: "Basic czNjcjN0" }, "")).toEqual({ ok: false, problem: "Authorization must be Bearer <token>" });
    expect(verify(a, { authorization: "Bearer s3cr3" }, "")).toEqual({ ok: false, problem: "token does not match" });
    expect(verify(a, { authorization: "Bearer s3cr3tt" }, "")).toEqual({ ok: false, problem: "token does not match" });
  });
});

describe("GitHub (signed by @octokit/webhooks)", () => {
  const a = auth({ type: "hmac", preset: "github", secret: "It's a Secret to Everybody" });
  const octokit = new Webhooks({ secret: "It's a Secret to Everybody" });

  it("accepts the library's signature and refuses a tampered body, another secret or a missing header", async () => {
    const sig = await octokit.sign(BODY);
    expect(verify(a, { "x-hub-signature-256": sig }, BODY)).toEqual({ ok: true });
    expect(verify(a, { "x-hub-signature-256": sig }, BODY.replace("1", "2"))).toEqual({ ok: false, problem: "signature does not match" });
    const other = await new Webhooks({ secret: "another" }).sign(BODY);
    expect(verify(a, { "x-hub-signature-256": other }, BODY).ok).toBe(false);
    expect(verify(a, {}, BODY)).toEqual({ ok: false, problem: "missing X-Hub-Signature-256 header" });
    expect(verify(a, { "x-hub-signature-256": sig.slice("sha256=".length) }, BODY).ok).toBe(false);
    expect(verify(a, { "x-hub-signature-256": sig.slice(0, -2) }, BODY)).toEqual({ ok: false, problem: "signature does not match" });
  });

  it("agrees with the library's verify on arbitrary bodies and signatures", async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ minLength: 1 }), fc.boolean(), fc.nat(63), async (body, tamper, at) => {
        let sig = await octokit.sign(body);
        if (tamper) {
          const i = "sha256=".length + at;
          sig = sig.slice(0, i) + (sig[i] === "0" ? "1" : "0") + sig.slice(i + 1);
        }
        expect(verify(a, { "x-hub-signature-256": sig }, body).ok).toBe(await octokit.verify(body, sig));
      }),
      { numRuns: 200 },
    );
  });
});

describe("Stripe (signed by stripe)", () => {
  const secret = "whsec_test_secret_value";
  const a = auth({ type: "hmac", preset: "stripe", secret });
  const header = (timestamp: number, s = secret) => Stripe.webhooks.generateTestHeaderString({ payload: BODY, secret: s, timestamp });

  it("accepts the library's header, and any one right v1 among several", () => {
    expect(verify(a, { "stripe-signature": header(NOW) }, BODY)).toEqual({ ok: true });
    const wrong = header(NOW, "whsec_other").split(",")[1];
    const right = header(NOW).split(",")[1];
    expect(verify(a, { "stripe-signature": `t=${NOW},${wrong},${right},v0=abc` }, BODY)).toEqual({ ok: true });
    expect(verify(a, { "stripe-signature": `t=${NOW},${wrong}` }, BODY)).toEqual({ ok: false, problem: "signature does not match" });
  });

  it("holds to the 300 s tolerance either way, and the timestamp is signed", () => {
    const tol = TIMESTAMP_TOLERANCE_SECONDS;
    expect(verify(a, { "stripe-signature": header(NOW - tol) }, BODY).ok).toBe(true);
    expect(verify(a, { "stripe-signature": header(NOW - tol - 1) }, BODY)).toEqual({
      ok: false,
      problem: "Stripe-Signature t is outside the 300 s tolerance",
    });
    expect(verify(a, { "stripe-signature": header(NOW + tol + 1) }, BODY).ok).toBe(false);
    // A captured signature with a fresh t does not verify.
    const v1 = header(NOW - 1000).split(",")[1];
    expect(verify(a, { "stripe-signature": `t=${NOW},${v1}` }, BODY)).toEqual({ ok: false, problem: "signature does not match" });
  });

  it("refuses a missing or malformed header and a tampered body", () => {
    expect(verify(a, {}, BODY)).toEqual({ ok: false, problem: "missing Stripe-Signature header" });
    expect(verify(a, { "stripe-signature": `t=${NOW}` }, BODY).ok).toBe(false);
    expect(verify(a, { "stripe-signature": "v1=abc" }, BODY).ok).toBe(false);
    expect(verify(a, { "stripe-signature": header(NOW) }, `${BODY} `)).toEqual({ ok: false, problem: "signature does not match" });
  });
});

describe("Shopify (signed by hand after shopify.dev)", () => {
  const a = auth({ type: "hmac", preset: "shopify", secret: "shpss_client_secret" });

  it("accepts the base64 HMAC-SHA256 of the body and refuses others", () => {
    const sig = hmacOf("sha256", "shpss_client_secret", BODY, "base64");
    expect(verify(a, { "x-shopify-hmac-sha256": sig }, BODY)).toEqual({ ok: true });
    expect(verify(a, { "x-shopify-hmac-sha256": hmacOf("sha256", "other", BODY, "base64") }, BODY).ok).toBe(false);
    expect(verify(a, { "x-shopify-hmac-sha256": hmacOf("sha256", "shpss_client_secret", BODY, "hex") }, BODY).ok).toBe(false);
    expect(verify(a, {}, BODY)).toEqual({ ok: false, problem: "missing X-Shopify-Hmac-Sha256 header" });
  });
});

describe("Slack (signed by hand after api.slack.com/authentication/verifying-requests-from-slack)", () => {
  const secret = "8f742231b10e8888abcd99yyyzzz85a5";
  const a = auth({ type: "hmac", preset: "slack", secret });
  const form = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&command=%2Fweather&text=94070";
  const headers = (ts: number, body = form) => ({
    "x-slack-request-timestamp": String(ts),
    "x-slack-signature": `v0=${hmacOf("sha256", secret, `v0:${ts}:${body}`, "hex")}`,
  });

  it("accepts v0=<hex> over v0:<timestamp>:<body>", () => {
    expect(verify(a, headers(NOW), form)).toEqual({ ok: true });
    expect(verify(a, headers(NOW - 299), form)).toEqual({ ok: true });
  });

  it("refuses a stale timestamp, a timestamp other than the signed one, a tampered body or missing headers", () => {
    expect(verify(a, headers(NOW - 301), form)).toEqual({ ok: false, problem: "X-Slack-Request-Timestamp is outside the 300 s tolerance" });
    expect(verify(a, { ...headers(NOW - 10), "x-slack-request-timestamp": String(NOW) }, form).ok).toBe(false);
    expect(verify(a, headers(NOW), `${form}&x=1`)).toEqual({ ok: false, problem: "signature does not match" });
    expect(verify(a, { "x-slack-signature": headers(NOW)["x-slack-signature"] }, form).ok).toBe(false);
    expect(verify(a, { "x-slack-request-timestamp": String(NOW) }, form)).toEqual({
      ok: false,
      problem: "missing X-Slack-Signature header",
    });
    expect(verify(a, { ...headers(NOW), "x-slack-request-timestamp": "soon" }, form).ok).toBe(false);
  });
});

describe("Standard Webhooks (signed by standardwebhooks)", () => {
  const a = auth({ type: "hmac", preset: "standard-webhooks", secret: SW_SECRET });
  const wh = new Webhook(SW_SECRET);
  const headers = (ts: number, body = BODY, id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W") => ({
    "webhook-id": id,
    "webhook-timestamp": String(ts),
    "webhook-signature": wh.sign(id, new Date(ts * 1000), body),
  });

  it("accepts the library's signature, among several, and an empty body", () => {
    expect(verify(a, headers(NOW), BODY)).toEqual({ ok: true });
    const other = new Webhook("whsec_dGhpcyBpcyBhbm90aGVyIHNlY3JldCBrZXk=").sign("msg_1", new Date(NOW * 1000), BODY);
    expect(verify(a, { ...headers(NOW), "webhook-signature": `${other} v2,abc ${headers(NOW)["webhook-signature"]}` }, BODY).ok).toBe(true);
    expect(verify(a, headers(NOW, ""), "")).toEqual({ ok: true });
    // The secret without its whsec_ prefix means the same key, as in the library.
    expect(verify(auth({ type: "hmac", preset: "standard-webhooks", secret: SW_SECRET.slice(6) }), headers(NOW), BODY).ok).toBe(true);
  });

  it("refuses a stale or future timestamp, another id, a tampered body and missing headers", () => {
    expect(verify(a, headers(NOW - 301), BODY)).toEqual({ ok: false, problem: "webhook-timestamp is outside the 300 s tolerance" });
    expect(verify(a, headers(NOW + 301), BODY).ok).toBe(false);
    expect(verify(a, { ...headers(NOW), "webhook-id": "msg_other" }, BODY)).toEqual({ ok: false, problem: "signature does not match" });
    expect(verify(a, headers(NOW), `${BODY}\n`).ok).toBe(false);
    const { "webhook-id": _, ...noId } = headers(NOW);
    expect(verify(a, noId, BODY).ok).toBe(false);
  });

  it("agrees with the library's verify on arbitrary bodies, times and tampering", () => {
    // Both read the clock here; times within 2 s of the tolerance's edge are left out, so a
    // second ticking between the two checks cannot make them disagree.
    const skews = fc.integer({ min: -400, max: 400 }).filter((s) => Math.abs(Math.abs(s) - TIMESTAMP_TOLERANCE_SECONDS) > 2);
    fc.assert(
      fc.property(fc.string(), skews, fc.boolean(), (body, skew, tamper) => {
        const now = Math.floor(Date.now() / 1000);
        const h = headers(now + skew, body);
        const sent = tamper ? `${body}x` : body;
        let libraryOk = true;
        try {
          wh.verify(sent, h, { jsonParse: false });
        } catch {
          libraryOk = false;
        }
        expect(verify(a, h, sent, now).ok).toBe(libraryOk);
        expect(libraryOk).toBe(!tamper && Math.abs(skew) <= TIMESTAMP_TOLERANCE_SECONDS);
      }),
      { numRuns: 300 },
    );
  });
});

describe("the generic form", () => {
  it("checks <prefix><digest> in the named header with the named algorithm and encoding", () => {
    const hexSha1 = auth({ type: "hmac", header: "X-Signature", algorithm: "sha1", encoding: "hex", prefix: "sha1=", secret: "k" });
    expect(verify(hexSha1, { "x-signature": `sha1=${hmacOf("sha1", "k", BODY, "hex")}` }, BODY)).toEqual({ ok: true });
    expect(verify(hexSha1, { "x-signature": `sha1=${hmacOf("sha1", "k", BODY, "hex").toUpperCase()}` }, BODY)).toEqual({ ok: true });
    expect(verify(hexSha1, { "x-signature": hmacOf("sha1", "k", BODY, "hex") }, BODY)).toEqual({
      ok: false,
      problem: 'x-signature must start with "sha1="',
    });
    expect(verify(hexSha1, { "x-signature": `sha1=${hmacOf("sha256", "k", BODY, "hex")}` }, BODY).ok).toBe(false);
    expect(verify(hexSha1, {}, BODY)).toEqual({ ok: false, problem: "missing x-signature header" });

    const b64Sha512 = auth({ type: "hmac", header: "X-Sig", algorithm: "sha512", encoding: "base64", secret: "k" });
    const sig = hmacOf("sha512", "k", BODY, "base64");
    expect(verify(b64Sha512, { "x-sig": sig }, BODY)).toEqual({ ok: true });
    expect(verify(b64Sha512, { "x-sig": sig.replace(/=+$/, "") }, BODY)).toEqual({ ok: true });
    expect(verify(b64Sha512, { "x-sig": `${sig}!` }, BODY).ok).toBe(false);
    expect(verify(b64Sha512, { "x-sig": hmacOf("sha512", "k", `${BODY}.`, "base64") }, BODY).ok).toBe(false);
  });

  it("refuses any single changed byte of the body", () => {
    const a = auth({ type: "hmac", header: "x-sig", algorithm: "sha256", encoding: "hex", secret: "k" });
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 300 }), fc.nat(), fc.integer({ min: 1, max: 255 }), (bytes, at, delta) => {
        const body = Buffer.from(bytes);
        const headers = { "x-sig": hmacOf("sha256", "k", body, "hex") };
        expect(verify(a, headers, body).ok).toBe(true);
        const changed = Buffer.from(body);
        const i = at % changed.length;
        changed[i] = ((changed[i] as number) + delta) % 256;
        expect(verify(a, headers, changed).ok).toBe(false);
      }),
    );
  });
});

describe("exact bytes", () => {
  it("verifies the bytes as sent, not their UTF-8 reading, for bodies that are not UTF-8", () => {
    const a = auth({ type: "hmac", preset: "github", secret: "s" });
    const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9, 0xff, 0x00, 0x0a]);
    const overBytes = `sha256=${hmacOf("sha256", "s", latin1, "hex")}`;
    const overText = `sha256=${hmacOf("sha256", "s", Buffer.from(latin1.toString("utf8")), "hex")}`;
    expect(overBytes).not.toBe(overText);
    expect(verify(a, { "x-hub-signature-256": overBytes }, latin1)).toEqual({ ok: true });
    expect(verify(a, { "x-hub-signature-256": overText }, latin1).ok).toBe(false);
  });

  it("verifies an empty body", () => {
    const a = auth({ type: "hmac", preset: "shopify", secret: "s" });
    expect(verify(a, { "x-shopify-hmac-sha256": hmacOf("sha256", "s", "", "base64") }, Buffer.alloc(0))).toEqual({ ok: true });
    expect(verify(a, { "x-shopify-hmac-sha256": hmacOf("sha256", "s", " ", "base64") }, Buffer.alloc(0)).ok).toBe(false);
  });
});
