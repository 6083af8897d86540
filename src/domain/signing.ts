import { createHmac } from "node:crypto";

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): receivers verify deliveries with
 * the `standardwebhooks` package or any of its ports. Secrets are `whsec_` + base64 key bytes; the
 * signature is over `id.timestamp.body`, so a captured body cannot be replayed under another id or
 * time.
 */

export const SIGNING_SECRET_PREFIX = "whsec_";

/**
 * 24 bytes (192 bits) as Svix issues them: well beyond brute force, and a multiple of 3, so the
 * base64 text has no padding.
 */
const SECRET_BYTES = 24;

/** A fresh secret; `randomBytes` is injected (`crypto.randomBytes` in production). */
export function generateSigningSecret(randomBytes: (n: number) => Buffer): string {
  const bytes = randomBytes(SECRET_BYTES);
  if (bytes.length !== SECRET_BYTES) throw new Error(`randomBytes returned ${bytes.length} bytes, expected ${SECRET_BYTES}`);
  return SIGNING_SECRET_PREFIX + bytes.toString("base64");
}

/** `v1,<base64 HMAC-SHA256 of "msgId.timestampSeconds.body">`, keyed by the secret's decoded bytes. */
export function signPayload(secret: string, msgId: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.startsWith(SIGNING_SECRET_PREFIX) ? secret.slice(SIGNING_SECRET_PREFIX.length) : secret, "base64");
  const mac = createHmac("sha256", key).update(`${msgId}.${timestampSeconds}.${body}`).digest("base64");
  return `v1,${mac}`;
}
