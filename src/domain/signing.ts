import { createHmac } from "node:crypto";
import { ValidationError } from "./errors.js";

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

/** Bytes a caller-chosen secret may decode to: the Standard Webhooks and Svix range. */
export const MIN_SECRET_BYTES = 24;
export const MAX_SECRET_BYTES = 64;

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * A caller-chosen secret (`POST /webhooks/{id}/secret/rotate`): `whsec_` + standard, padded
 * base64 of 24..64 bytes. Anything else is refused rather than normalised, because the caller
 * configures the same text at the receiver: a secret this side read differently (Node's base64
 * decoder skips characters it does not know) would never verify there.
 */
export function parseSigningSecret(raw: unknown, name = "signing_secret"): string {
  const shape = `${name} must be "${SIGNING_SECRET_PREFIX}" followed by the base64 of ${MIN_SECRET_BYTES} to ${MAX_SECRET_BYTES} random bytes`;
  if (typeof raw !== "string") throw new ValidationError(`${shape} (got a ${raw === null ? "null" : typeof raw})`);
  if (!raw.startsWith(SIGNING_SECRET_PREFIX)) throw new ValidationError(`${shape} (the "${SIGNING_SECRET_PREFIX}" prefix is missing)`);
  const text = raw.slice(SIGNING_SECRET_PREFIX.length);
  const bytes = Buffer.from(text, "base64");
  if (!BASE64.test(text) || text.length % 4 !== 0 || bytes.toString("base64") !== text)
    throw new ValidationError(`${shape} (the rest is not standard padded base64)`);
  if (bytes.length < MIN_SECRET_BYTES || bytes.length > MAX_SECRET_BYTES)
    throw new ValidationError(`${shape} (it decodes to ${bytes.length} bytes)`);
  return raw;
}

/**
 * A webhook's secrets as stored: the current one and, after a rotation, the one it replaced,
 * which stays in effect until `previous_secret_expires_at_ms` (epoch ms). Records written before
 * rotations existed have neither previous field.
 */
export interface WebhookSecrets {
  readonly signing_secret: string;
  readonly previous_signing_secret?: string | null;
  readonly previous_secret_expires_at_ms?: number | null;
}

/**
 * The secrets after rotating to `next` at `nowMs`: the replaced secret stays in effect for
 * `overlapMs` so that receivers can switch without losing a delivery (Svix: 24 h). Only the most
 * recent previous secret is kept: a second rotation during the overlap ends the first one's at once.
 * Rotating to the secret already in use changes nothing, so a retried call with the same
 * caller-chosen secret cannot push the real previous secret out of its overlap.
 */
export function rotateSecrets(current: WebhookSecrets, next: string, nowMs: number, overlapMs: number): Required<WebhookSecrets> {
  if (next === current.signing_secret)
    return {
      signing_secret: current.signing_secret,
      previous_signing_secret: current.previous_signing_secret ?? null,
      previous_secret_expires_at_ms: current.previous_secret_expires_at_ms ?? null,
    };
  return { signing_secret: next, previous_signing_secret: current.signing_secret, previous_secret_expires_at_ms: nowMs + overlapMs };
}

/** The previous secret while its overlap lasts (strictly before its expiry), else null. */
export function previousSecretInEffect(s: WebhookSecrets, nowMs: number): string | null {
  const until = s.previous_secret_expires_at_ms;
  return s.previous_signing_secret && typeof until === "number" && nowMs < until ? s.previous_signing_secret : null;
}

/**
 * The `webhook-signature` value for one or more secrets, newest first: `v1,<sig> v1,<sig>`. The
 * Standard Webhooks spec separates several signatures with spaces, and verifiers accept the
 * header when any one of them matches, so a receiver holding either secret verifies.
 */
export function signatureHeader(secrets: readonly string[], msgId: string, timestampSeconds: number, body: string): string {
  return secrets.map((s) => signPayload(s, msgId, timestampSeconds, body)).join(" ");
}
