import { createHmac, randomBytes } from "node:crypto";
import fc from "fast-check";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { generateSigningSecret, signPayload } from "../../src/domain/signing.js";

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
