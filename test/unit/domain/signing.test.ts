import { createHmac, randomBytes } from "node:crypto";
import fc from "fast-check";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/domain/errors.js";
import {
  generateSigningSecret,
  parseSigningSecret,
  previousSecretInEffect,
  rotateSecrets,
  signatureHeader,
  signPayload,
} from "../../../src/domain/signing.js";

/** The conformance suite's check (shared/conformance/lib.mjs), copied so the two cannot drift apart silently. */
function verifySignature(secret: string, headers: Record<string, string | undefined>, rawBody: string): boolean {
  const id = headers["webhook-id"];
  const ts = headers["webhook-timestamp"];
  const sigs = String(headers["webhook-signature"] ?? "").split(" ");
  if (!id || !ts) return false;
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const expected = createHmac("sha256", key).update(`${id}.${ts}.${rawBody}`).digest("base64");
  return sigs.some((s) => s === `v1,${expected}`);
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The three Standard Webhooks headers of one attempt, as the delivery worker sets them. */
const webhookSignatureHeaders = (secret: string, msgId: string, ts: number, body: string): Record<string, string> => ({
  "webhook-id": msgId,
  "webhook-timestamp": String(ts),
  "webhook-signature": signPayload(secret, msgId, ts, body),
});

describe("generateSigningSecret", () => {
  it("is whsec_ followed by the base64 of 24 injected random bytes", () => {
    const secret = generateSigningSecret((n) => Buffer.alloc(n, 7));
    expect(secret).toBe(`whsec_${Buffer.alloc(24, 7).toString("base64")}`);
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
  });

  it("produces secrets the standardwebhooks package accepts", () => {
    expect(() => new Webhook(generateSigningSecret(randomBytes))).not.toThrow();
  });

  it("refuses a random source that returns the wrong length", () => {
    expect(() => generateSigningSecret(() => Buffer.alloc(3))).toThrow(/24/);
  });
});

describe("signPayload", () => {
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

  it("matches the Standard Webhooks reference signature", () => {
    const ts = 1_700_000_000;
    const body = '{"hello":"world"}';
    const reference = new Webhook(secret).sign("msg_1", new Date(ts * 1000), body);
    expect(signPayload(secret, "msg_1", ts, body)).toBe(reference);
  });

  it("is verified by standardwebhooks' Webhook.verify", () => {
    const body = JSON.stringify({ hello: "wörld", n: [1, 2, 3] });
    const headers = webhookSignatureHeaders(secret, "evt_123", nowSeconds(), body);
    expect(new Webhook(secret).verify(body, headers)).toEqual({ hello: "wörld", n: [1, 2, 3] });
  });

  it("is verified by the conformance suite's verifySignature", () => {
    const body = '{"a":1}';
    expect(verifySignature(secret, webhookSignatureHeaders(secret, "evt_1", nowSeconds(), body), body)).toBe(true);
  });

  it("fails verification when the body, id or timestamp change", () => {
    const ts = nowSeconds();
    const headers = webhookSignatureHeaders(secret, "evt_1", ts, '{"a":1}');
    expect(verifySignature(secret, headers, '{"a":2}')).toBe(false);
    expect(verifySignature(secret, { ...headers, "webhook-id": "evt_2" }, '{"a":1}')).toBe(false);
    expect(verifySignature(secret, { ...headers, "webhook-timestamp": String(ts + 1) }, '{"a":1}')).toBe(false);
    expect(() => new Webhook(secret).verify('{"a":2}', headers)).toThrow();
  });

  it("accepts a secret without the whsec_ prefix as the same key", () => {
    expect(signPayload("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, "b")).toBe(signPayload(secret, "m", 1, "b"));
  });

  it("verifies for any generated secret, id and body (property)", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 24, maxLength: 24 }),
        fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/),
        fc.string(),
        (bytes, id, body) => {
          const s = generateSigningSecret(() => Buffer.from(bytes));
          const headers = webhookSignatureHeaders(s, id, nowSeconds(), body);
          expect(verifySignature(s, headers, body)).toBe(true);
          expect(() => new Webhook(s).verify(body, headers, { jsonParse: false })).not.toThrow();
        },
      ),
      { numRuns: 200 },
    );
  });
});

const secretOf = (bytes: number, fill = 5) => `whsec_${Buffer.alloc(bytes, fill).toString("base64")}`;

describe("parseSigningSecret (a caller-chosen secret)", () => {
  it.each([24, 25, 32, 48, 64])("accepts whsec_ + standard base64 of %i bytes, unchanged", (n) => {
    const secret = secretOf(n);
    expect(parseSigningSecret(secret)).toBe(secret);
    expect(() => new Webhook(secret)).not.toThrow();
  });

  it.each([
    ["a number", 42, /got a number/],
    ["null", null, /got a null/],
    ["an object", { secret: "x" }, /got a object/],
    ["the empty string", "", /prefix is missing/],
    ["no prefix", Buffer.alloc(24).toString("base64"), /prefix is missing/],
    ["another prefix", `sk_${Buffer.alloc(24).toString("base64")}`, /prefix is missing/],
    ["the prefix alone", "whsec_", /not standard padded base64/],
    ["base64url characters", `whsec_${"-_".repeat(16)}`, /not standard padded base64/],
    ["missing padding", secretOf(25).replace(/=+$/, ""), /not standard padded base64/],
    ["characters base64 does not have", `whsec_${Buffer.alloc(24).toString("base64").slice(0, -1)}!`, /not standard padded base64/],
    [
      "a space inside",
      `whsec_${Buffer.alloc(24).toString("base64").slice(0, 16)} ${Buffer.alloc(24).toString("base64").slice(16)}`,
      /base64/,
    ],
    ["a trailing newline", `${secretOf(24)}\n`, /not standard padded base64/],
    ["non-canonical padding bits", "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB==", /not standard padded base64/],
    ["23 bytes", secretOf(23), /decodes to 23 bytes/],
    ["65 bytes", secretOf(65), /decodes to 65 bytes/],
  ])("refuses %s with a 400 naming signing_secret", (_label, raw, why) => {
    let caught: unknown;
    try {
      parseSigningSecret(raw);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ValidationError);
    expect((caught as ValidationError).status).toBe(400);
    expect((caught as ValidationError).message).toMatch(/^signing_secret must be "whsec_" followed by the base64 of 24 to 64 random bytes/);
    expect((caught as ValidationError).message).toMatch(why);
  });
});

describe("rotateSecrets and previousSecretInEffect (the overlap window)", () => {
  const a = secretOf(24, 1);
  const b = secretOf(24, 2);
  const c = secretOf(24, 3);
  const t0 = 1_700_000_000_000;
  const day = 86_400_000;

  it("makes the new secret current and keeps the replaced one in effect until the overlap ends", () => {
    const rotated = rotateSecrets({ signing_secret: a }, b, t0, day);
    expect(rotated).toEqual({ signing_secret: b, previous_signing_secret: a, previous_secret_expires_at_ms: t0 + day });
    expect(previousSecretInEffect(rotated, t0)).toBe(a);
    expect(previousSecretInEffect(rotated, t0 + day - 1)).toBe(a);
    expect(previousSecretInEffect(rotated, t0 + day)).toBeNull();
  });

  it("keeps only the most recent previous secret when rotating again during the overlap", () => {
    const once = rotateSecrets({ signing_secret: a }, b, t0, day);
    const twice = rotateSecrets(once, c, t0 + 1000, day);
    expect(twice).toEqual({ signing_secret: c, previous_signing_secret: b, previous_secret_expires_at_ms: t0 + 1000 + day });
    expect(previousSecretInEffect(twice, t0 + 2000)).toBe(b);
  });

  it("changes nothing when rotating to the secret already in use (a retried call)", () => {
    const once = rotateSecrets({ signing_secret: a }, b, t0, day);
    expect(rotateSecrets(once, b, t0 + 5000, day)).toEqual(once);
    expect(rotateSecrets({ signing_secret: a }, a, t0, day)).toEqual({
      signing_secret: a,
      previous_signing_secret: null,
      previous_secret_expires_at_ms: null,
    });
  });

  it("ends the previous secret at once with a zero overlap, and has none before any rotation", () => {
    expect(previousSecretInEffect(rotateSecrets({ signing_secret: a }, b, t0, 0), t0)).toBeNull();
    expect(previousSecretInEffect({ signing_secret: a }, t0)).toBeNull();
    expect(previousSecretInEffect({ signing_secret: a, previous_signing_secret: b, previous_secret_expires_at_ms: null }, t0)).toBeNull();
  });
});

describe("signatureHeader (several secrets)", () => {
  const newSecret = generateSigningSecret(randomBytes);
  const oldSecret = generateSigningSecret(randomBytes);
  const body = JSON.stringify({ rotated: true });

  it("is the space-separated v1 signatures, newest first", () => {
    const header = signatureHeader([newSecret, oldSecret], "d_1", 1_700_000_000, body);
    expect(header).toBe(`${signPayload(newSecret, "d_1", 1_700_000_000, body)} ${signPayload(oldSecret, "d_1", 1_700_000_000, body)}`);
    expect(signatureHeader([newSecret], "d_1", 1_700_000_000, body)).toBe(signPayload(newSecret, "d_1", 1_700_000_000, body));
  });

  it("is verified by standardwebhooks with the old secret alone and with the new secret alone, and by no other", () => {
    const ts = nowSeconds();
    const headers = {
      "webhook-id": "d_2",
      "webhook-timestamp": String(ts),
      "webhook-signature": signatureHeader([newSecret, oldSecret], "d_2", ts, body),
    };
    expect(new Webhook(oldSecret).verify(body, headers)).toEqual({ rotated: true });
    expect(new Webhook(newSecret).verify(body, headers)).toEqual({ rotated: true });
    expect(verifySignature(oldSecret, headers, body)).toBe(true);
    expect(verifySignature(newSecret, headers, body)).toBe(true);
    const stranger = generateSigningSecret(randomBytes);
    expect(() => new Webhook(stranger).verify(body, headers)).toThrow();
    expect(verifySignature(stranger, headers, body)).toBe(false);
  });
});
