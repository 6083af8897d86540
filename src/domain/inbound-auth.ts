import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { ValidationError } from "./errors.js";

/**
 * Inbound verification for HTTP sources (SPEC §12): what `configured_props.<http>.auth` may say,
 * how it is shown back (never with its secret), and the check of one request against it. Pure:
 * the request reaches this module as its lower-case headers and its exact body bytes, and the
 * time is passed in.
 *
 * Every comparison of a secret-derived value runs in constant time (`timingSafeEqual`, after a
 * length check on values whose length is public: digest sizes, or SHA-256 of the token).
 */

export const HMAC_PRESETS = ["github", "stripe", "shopify", "slack", "standard-webhooks"] as const;
export type HmacPreset = (typeof HMAC_PRESETS)[number];
export const HMAC_ALGORITHMS = ["sha256", "sha1", "sha512"] as const;
export type HmacAlgorithm = (typeof HMAC_ALGORITHMS)[number];
export const SIGNATURE_ENCODINGS = ["hex", "base64"] as const;
export type SignatureEncoding = (typeof SIGNATURE_ENCODINGS)[number];

/** Stripe, Slack and Standard Webhooks refuse a timestamp further than this from now, either way. */
export const TIMESTAMP_TOLERANCE_SECONDS = 300;

export type InboundAuth =
  | { type: "token"; token: string }
  | { type: "hmac"; preset: HmacPreset; secret: string }
  | { type: "hmac"; header: string; algorithm: HmacAlgorithm; encoding: SignatureEncoding; prefix: string; secret: string };

/** What the API shows: the auth without its secret or token. */
export type InboundAuthView =
  | { type: "token" }
  | { type: "hmac"; preset: HmacPreset }
  | { type: "hmac"; header: string; algorithm: HmacAlgorithm; encoding: SignatureEncoding; prefix: string };

export function inboundAuthView(auth: InboundAuth): InboundAuthView {
  if (auth.type === "token") return { type: "token" };
  if ("preset" in auth) return { type: "hmac", preset: auth.preset };
  return { type: "hmac", header: auth.header, algorithm: auth.algorithm, encoding: auth.encoding, prefix: auth.prefix };
}

const MAX_SECRET_LENGTH = 1024;
const MAX_PREFIX_LENGTH = 64;
/** RFC 9110 token characters: what a header name may be made of. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/;
/** Visible ASCII only: a token must fit in an Authorization header as sent. */
const TOKEN_TEXT = /^[\x21-\x7e]+$/;
const STRICT_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** The headers a request signature cannot be in: they are the transport's, not the sender's. */
const TRANSPORT_HEADERS = new Set(["host", "content-length", "content-type", "transfer-encoding", "connection"]);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function onlyKeys(raw: Record<string, unknown>, allowed: readonly string[], where: string): void {
  for (const k of Object.keys(raw)) {
    if (!allowed.includes(k)) throw new ValidationError(`${where}.${k} is not allowed here (allowed: ${allowed.join(", ")})`);
  }
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], where: string): T {
  if (typeof value !== "string" || !allowed.includes(value as T)) {
    throw new ValidationError(`${where} must be one of: ${allowed.map((a) => JSON.stringify(a)).join(", ")}`);
  }
  return value as T;
}

function secretText(value: unknown, where: string): string {
  if (typeof value !== "string" || value === "") throw new ValidationError(`${where} is required: a non-empty string`);
  if (value.length > MAX_SECRET_LENGTH) throw new ValidationError(`${where} must be at most ${MAX_SECRET_LENGTH} characters`);
  return value;
}

/** The key bytes of a Standard Webhooks secret: `whsec_` (optional, as the library has it) + base64. */
function standardWebhooksKey(secret: string): Buffer {
  const text = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  return Buffer.from(text, "base64");
}

/**
 * Parses a given `auth` (`where` names it in errors) into what is stored. Unknown keys are refused,
 * so a misspelt `secert` is a 400 rather than a source that verifies nothing.
 */
export function parseInboundAuth(raw: unknown, where: string): InboundAuth {
  if (!isPlainObject(raw)) throw new ValidationError(`${where} must be an object with a type ("token" or "hmac")`);
  const type = oneOf(raw.type, ["token", "hmac"] as const, `${where}.type`);
  if (type === "token") {
    onlyKeys(raw, ["type", "token"], where);
    const token = secretText(raw.token, `${where}.token`);
    if (!TOKEN_TEXT.test(token)) throw new ValidationError(`${where}.token must be visible ASCII without spaces`);
    return { type, token };
  }
  const secret = secretText(raw.secret, `${where}.secret`);
  if (raw.preset !== undefined) {
    if (raw.header !== undefined) throw new ValidationError(`${where} takes either preset or header, not both`);
    onlyKeys(raw, ["type", "preset", "secret"], where);
    const preset = oneOf(raw.preset, HMAC_PRESETS, `${where}.preset`);
    if (preset === "standard-webhooks") {
      const text = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
      if (text === "" || !STRICT_BASE64.test(text)) {
        throw new ValidationError(`${where}.secret must be "whsec_" followed by base64 for the standard-webhooks preset`);
      }
    }
    return { type, preset, secret };
  }
  if (raw.header === undefined) throw new ValidationError(`${where} needs a preset (${HMAC_PRESETS.join(", ")}) or a header`);
  onlyKeys(raw, ["type", "header", "algorithm", "encoding", "prefix", "secret"], where);
  if (typeof raw.header !== "string" || !HEADER_NAME.test(raw.header)) throw new ValidationError(`${where}.header must be a header name`);
  const header = raw.header.toLowerCase();
  if (TRANSPORT_HEADERS.has(header)) throw new ValidationError(`${where}.header cannot be ${header}`);
  const algorithm = oneOf(raw.algorithm, HMAC_ALGORITHMS, `${where}.algorithm`);
  const encoding = oneOf(raw.encoding, SIGNATURE_ENCODINGS, `${where}.encoding`);
  const prefix = raw.prefix ?? "";
  if (typeof prefix !== "string" || prefix.length > MAX_PREFIX_LENGTH || !/^[\x20-\x7e]*$/.test(prefix)) {
    throw new ValidationError(`${where}.prefix must be a string of at most ${MAX_PREFIX_LENGTH} visible ASCII characters`);
  }
  return { type, header, algorithm, encoding, prefix, secret };
}

/**
 * The auth a source is configured with after POST or PUT, from the `auth` given (`undefined` when
 * absent). `null` or absent: none. The auth exactly as the API showed it (no secret) keeps
 * `current`, so a source read and written back keeps its secret (GET, edit, PUT).
 */
export function configuredInboundAuth(raw: unknown, current: InboundAuth | null, where: string): InboundAuth | null {
  if (raw === undefined || raw === null) return null;
  if (current && isPlainObject(raw) && sameView(raw, inboundAuthView(current))) return current;
  return parseInboundAuth(raw, where);
}

function sameView(raw: Record<string, unknown>, view: InboundAuthView): boolean {
  const shown: Record<string, unknown> = { ...view };
  const given: Record<string, unknown> = { ...raw };
  // The header is stored lower-case; an empty prefix may be left out.
  if (typeof given.header === "string") given.header = given.header.toLowerCase();
  if (shown.prefix === "" && !("prefix" in given)) given.prefix = "";
  const keys = new Set([...Object.keys(shown), ...Object.keys(given)]);
  return [...keys].every((k) => Object.hasOwn(shown, k) && Object.hasOwn(given, k) && given[k] === shown[k]);
}

/** A request as verification sees it: lower-case header names, the exact body bytes. */
export interface InboundRequest {
  readonly headers: Readonly<Record<string, string | undefined>>;
  readonly body: Buffer;
}

export type InboundVerdict = { ok: true } | { ok: false; problem: string };

const ok: InboundVerdict = { ok: true };
const refuse = (problem: string): InboundVerdict => ({ ok: false, problem });

/** Checks one request against a source's auth; `nowSeconds` is the current epoch time. */
export function verifyInbound(auth: InboundAuth, req: InboundRequest, nowSeconds: number): InboundVerdict {
  if (auth.type === "token") return verifyToken(auth.token, req.headers.authorization);
  if (!("preset" in auth)) {
    const given = req.headers[auth.header];
    if (given === undefined) return refuse(`missing ${auth.header} header`);
    if (!given.startsWith(auth.prefix)) return refuse(`${auth.header} must start with ${JSON.stringify(auth.prefix)}`);
    const mac = hmac(auth.algorithm, auth.secret, [req.body]);
    return matchesAny([given.slice(auth.prefix.length)], auth.encoding, mac) ? ok : refuse("signature does not match");
  }
  switch (auth.preset) {
    case "github":
      return verifyGithub(auth.secret, req);
    case "shopify":
      return verifyShopify(auth.secret, req);
    case "stripe":
      return verifyStripe(auth.secret, req, nowSeconds);
    case "slack":
      return verifySlack(auth.secret, req, nowSeconds);
    case "standard-webhooks":
      return verifyStandardWebhooks(auth.secret, req, nowSeconds);
  }
}

function verifyToken(token: string, header: string | undefined): InboundVerdict {
  if (header === undefined) return refuse("missing Authorization header");
  const m = /^bearer +(\S+) *$/i.exec(header);
  if (!m) return refuse("Authorization must be Bearer <token>");
  // Digests of both sides: equal lengths, so the comparison says nothing about the token's length.
  const given = createHash("sha256")
    .update(m[1] as string)
    .digest();
  const expected = createHash("sha256").update(token).digest();
  return timingSafeEqual(given, expected) ? ok : refuse("token does not match");
}

function verifyGithub(secret: string, req: InboundRequest): InboundVerdict {
  const given = req.headers["x-hub-signature-256"];
  if (given === undefined) return refuse("missing X-Hub-Signature-256 header");
  if (!given.startsWith("sha256=")) return refuse('X-Hub-Signature-256 must start with "sha256="');
  return matchesAny([given.slice("sha256=".length)], "hex", hmac("sha256", secret, [req.body])) ? ok : refuse("signature does not match");
}

function verifyShopify(secret: string, req: InboundRequest): InboundVerdict {
  const given = req.headers["x-shopify-hmac-sha256"];
  if (given === undefined) return refuse("missing X-Shopify-Hmac-Sha256 header");
  return matchesAny([given.trim()], "base64", hmac("sha256", secret, [req.body])) ? ok : refuse("signature does not match");
}

/** `Stripe-Signature: t=<ts>,v1=<hex>[,v1=<hex>...]` (other schemes such as v0 are ignored), over `<t>.<body>`. */
function verifyStripe(secret: string, req: InboundRequest, nowSeconds: number): InboundVerdict {
  const header = req.headers["stripe-signature"];
  if (header === undefined) return refuse("missing Stripe-Signature header");
  let t: string | undefined;
  const signatures: string[] = [];
  for (const item of header.split(",")) {
    const eq = item.indexOf("=");
    const key = item.slice(0, eq).trim();
    const value = item.slice(eq + 1).trim();
    if (eq === -1) continue;
    if (key === "t") t = value;
    else if (key === "v1") signatures.push(value);
  }
  if (t === undefined || signatures.length === 0) return refuse("Stripe-Signature must carry t=<timestamp> and v1=<signature>");
  const stale = checkTimestamp(t, nowSeconds, "Stripe-Signature t");
  if (stale) return stale;
  const mac = hmac("sha256", secret, [Buffer.from(`${Number(t)}.`), req.body]);
  return matchesAny(signatures, "hex", mac) ? ok : refuse("signature does not match");
}

/** `X-Slack-Signature: v0=<hex>` over `v0:<X-Slack-Request-Timestamp>:<body>`. */
function verifySlack(secret: string, req: InboundRequest, nowSeconds: number): InboundVerdict {
  const ts = req.headers["x-slack-request-timestamp"];
  const given = req.headers["x-slack-signature"];
  if (ts === undefined) return refuse("missing X-Slack-Request-Timestamp header");
  if (given === undefined) return refuse("missing X-Slack-Signature header");
  const stale = checkTimestamp(ts, nowSeconds, "X-Slack-Request-Timestamp");
  if (stale) return stale;
  if (!given.startsWith("v0=")) return refuse('X-Slack-Signature must start with "v0="');
  const mac = hmac("sha256", secret, [Buffer.from(`v0:${ts}:`), req.body]);
  return matchesAny([given.slice("v0=".length)], "hex", mac) ? ok : refuse("signature does not match");
}

/**
 * `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> [v1,<base64>...]` over
 * `<id>.<ts>.<body>`, keyed by the secret's base64-decoded bytes (the `standardwebhooks` library's
 * reading: `whsec_` optional). Signatures of other versions are skipped.
 */
function verifyStandardWebhooks(secret: string, req: InboundRequest, nowSeconds: number): InboundVerdict {
  const id = req.headers["webhook-id"];
  const ts = req.headers["webhook-timestamp"];
  const header = req.headers["webhook-signature"];
  if (id === undefined || ts === undefined || header === undefined) {
    return refuse("missing webhook-id, webhook-timestamp or webhook-signature header");
  }
  const stale = checkTimestamp(ts, nowSeconds, "webhook-timestamp");
  if (stale) return stale;
  const signatures = header
    .split(" ")
    .map((s) => s.split(","))
    .filter(([version]) => version === "v1")
    .map(([, sig]) => sig ?? "");
  if (signatures.length === 0) return refuse("webhook-signature carries no v1 signature");
  const mac = hmac("sha256", standardWebhooksKey(secret), [Buffer.from(`${id}.${Number(ts)}.`), req.body]);
  return matchesAny(signatures, "base64", mac) ? ok : refuse("signature does not match");
}

/** A timestamp must be whole epoch seconds within the tolerance of now, in the past or the future. */
function checkTimestamp(text: string, nowSeconds: number, what: string): InboundVerdict | undefined {
  if (!/^\d{1,15}$/.test(text.trim())) return refuse(`${what} must be epoch seconds`);
  if (Math.abs(nowSeconds - Number(text)) > TIMESTAMP_TOLERANCE_SECONDS) {
    return refuse(`${what} is outside the ${TIMESTAMP_TOLERANCE_SECONDS} s tolerance`);
  }
  return undefined;
}

function hmac(algorithm: HmacAlgorithm, key: string | Buffer, parts: readonly Buffer[]): Buffer {
  const h = createHmac(algorithm, key);
  for (const p of parts) h.update(p);
  return h.digest();
}

/** The bytes of a signature as sent, or undefined when it is not well-formed in its encoding. */
function decodeSignature(text: string, encoding: SignatureEncoding): Buffer | undefined {
  if (encoding === "hex") return /^(?:[0-9a-fA-F]{2})+$/.test(text) ? Buffer.from(text, "hex") : undefined;
  // Padding may be left out; anything else must be standard base64.
  const padded = text.length % 4 === 0 ? text : text + "=".repeat(4 - (text.length % 4));
  return text !== "" && STRICT_BASE64.test(padded) ? Buffer.from(padded, "base64") : undefined;
}

/** True when any of the signatures is the MAC; every candidate is compared in full, in constant time. */
function matchesAny(signatures: readonly string[], encoding: SignatureEncoding, mac: Buffer): boolean {
  let found = false;
  for (const s of signatures) {
    const bytes = decodeSignature(s, encoding);
    // The MAC's length is public (the algorithm's digest size), so checking it first leaks nothing.
    if (bytes && bytes.length === mac.length && timingSafeEqual(bytes, mac)) found = true;
  }
  return found;
}
