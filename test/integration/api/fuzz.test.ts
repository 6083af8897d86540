import { gzipSync } from "node:zlib";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENDPOINT_ANSWER_HEADERS } from "../../../src/domain/custom-response.js";
import { isEndpointPath } from "../../../src/api/routes/source-endpoints.js";
import { isUnderPrefix } from "../../../src/domain/path-prefix.js";
import { freePort } from "../../../src/redis/embedded.js";
import { client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { caseMixes, percentFirst } from "../../helpers/spellings.js";
import {
  b64url,
  BODY_LIMIT,
  chunked,
  jsonOfSize,
  createComponent,
  createSource,
  createWebhook,
  emit,
  expectStatus,
  HTTP_ESM,
  type Json,
  subscribe,
  workflowId,
} from "./support.js";

/**
 * The HTTP error contract of SPEC §2 (no input produces a 5xx; every error is `{error, code}`)
 * over every route, by a seeded fuzz run (robustness.test.ts checks it case by case).
 */

let td: TestDaemon;
/** The endpoints' own listener (ENDPOINT_PORT). */
let endpointBase: string;

beforeAll(async () => {
  const port = await freePort();
  endpointBase = `http://127.0.0.1:${port}`;
  td = await startTestDaemon({ ENDPOINT_PORT: String(port), ENDPOINT_URL: endpointBase });
});

afterAll(async () => {
  await td?.close();
});

const FUZZ_SEED = Number(process.env.FUZZ_SEED ?? 0x7121b);
const FUZZ_REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 1500);
const FUZZ_CONCURRENCY = 8;
const FUZZ_BUDGET_MS = 60_000;

interface FuzzRequest {
  route: string;
  method: string;
  path: string;
  /** The route's first segment was spelled otherwise (case, percent-encoding): no handler may serve it. */
  respelled: boolean;
  query: [string, string][];
  /** `cookie`: the queue dashboard's session cookie, as a browser holds it. */
  auth: "user" | "admin" | "none" | "garbage" | "cookie";
  /** Sent to the endpoints' own listener instead of the main one. */
  endpointListener?: boolean;
  body: { label: string; contentType?: string; encoding?: string; data?: string | Buffer; chunked?: boolean };
  /** Signature headers with hostile values, for the endpoints of sources with inbound verification. */
  headers?: Record<string, string>;
}

interface Fixtures {
  sources: string[];
  componentId: string;
  webhookId: string;
  workflowId: string;
  eventId: string;
  subscriptionId: string;
  foreignSource: string;
  foreignWebhook: string;
  sacrificialUserId: string;
  /** Endpoint token of a customResponse source that answers with what the query asks for. */
  responderToken: string;
  /** Endpoint tokens of sources with inbound verification (SPEC §12): the token form, each preset, the generic form. */
  verifiedTokens: string[];
  /** Live-tail browser tokens: one valid for sources[0], one whose API key was rotated since. */
  sseTokens: string[];
  /** The main listener's origin, which the dashboard's cookie calls may come from. */
  ownOrigin: string;
}

/** Every kind of inbound verification a source may have (the fuzz sends no valid signature). */
const INBOUND_AUTHS: readonly unknown[] = [
  { type: "token", token: "fuzz-token" },
  ...["github", "stripe", "shopify", "slack"].map((preset) => ({ type: "hmac", preset, secret: "fuzz-secret" })),
  { type: "hmac", preset: "standard-webhooks", secret: `whsec_${Buffer.alloc(24, 7).toString("base64")}` },
  { type: "hmac", header: "X-Signature", algorithm: "sha1", encoding: "base64", prefix: "sha1=", secret: "fuzz-secret" },
];

const SIGNATURE_HEADERS = [
  "authorization",
  "x-hub-signature-256",
  "stripe-signature",
  "x-shopify-hmac-sha256",
  "x-slack-signature",
  "x-slack-request-timestamp",
  "webhook-id",
  "webhook-timestamp",
  "webhook-signature",
  "x-signature",
] as const;

const SIGNATURE_VALUES = [
  "",
  "Bearer",
  "Bearer fuzz-token-not",
  "bearer  x",
  "Basic Zm9vOmJhcg==",
  "sha256=",
  "sha256=zz",
  `sha256=${"0".repeat(64)}`,
  `sha256=${"0".repeat(63)}`,
  "sha1====",
  "t=",
  "t=1,v1=",
  "t=99999999999999999999,v1=ab",
  "t=abc,v1=00",
  "=,=,,=",
  "v1,",
  "v1,!!!",
  "v1,AAAA v1, v2,x",
  "v0=",
  `v0=${"a".repeat(64)}`,
  "1700000000",
  "-1",
  "1e3",
  "NaN",
  "x".repeat(8000),
] as const;

/**
 * A customResponse source that answers with the status, headers and body the query names, or
 * throws with a detail that must never reach the caller.
 */
const RESPONDER = `module.exports = {
  name: "Fuzz responder",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    const q = event.query;
    if (q.throw) throw new Error("secret-detail " + q.throw);
    let headers = {};
    try { headers = JSON.parse(q.headers || "{}"); } catch {}
    this.http.respond({ status: q.status, headers, body: q.body === undefined ? "fuzz" : q.body });
  },
};`;

/** Headers that frame a connection or a body: a component's answer must never carry them. */
const HOP_BY_HOP = ["upgrade", "te", "trailer", "proxy-authenticate", "proxy-connection"] as const;

/** Methods the routers know; any other method is answered 405 on every path (Node's 501 made a JSON 405). */
const ROUTER_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

const KNOWN_KEYS = [
  "component_code",
  "component_url",
  "component_id",
  "name",
  "configured_props",
  "active",
  "url",
  "description",
  "headers",
  "timeout_ms",
  "retry_schedule",
  "rate_limit_per_second",
  "filter",
  "emitter_id",
  "listener_id",
  "event_name",
  "limit",
  "after",
  "before",
  "include",
  "exclude",
  "expand",
  "start_id",
  "end_id",
  "trigger_url",
  "signing_secret",
  "username",
  "email",
  "plan",
  "event",
  "events",
  "id",
  "summary",
  "ts",
  "original_event",
  "error",
  "original_context",
  "status",
  "since",
  "until",
  "dry_run",
  "token",
  "last_event_id",
] as const;

const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "PROPFIND"] as const;

/** A path of the queue dashboard's JSON API, read-only and changing ones. */
function boardApiPath(s: readonly string[]): string {
  const queue = ["delivery", "maintenance", "source-run", "timers", s[1]][(s[1]?.length ?? 0) % 5];
  const tails = ["", `/${s[0]}`, `/${s[0]}/logs`, "/pause", `/retry/${s[0]}`, `/clean/${s[0]}`, "/empty", `/${s[0]}/promote`];
  return (s[0]?.length ?? 0) % 7 === 0
    ? "/admin/queues/api/redis/stats"
    : `/admin/queues/api/queues/${queue}${tails[(s[1]?.length ?? 0) % tails.length]}`;
}

const COOKIE_ROUTE = "/admin/queues/api/* (cookie)";
const ENDPOINT_LISTENER = "endpoint listener";
const RESPONDER_ON_ENDPOINT_LISTENER = "/e/:responder (endpoint listener)";

/** The responder's answers, on either listener: statuses and headers its query chose. */
const isResponder = (req: FuzzRequest) => req.route === "/e/:responder" || req.route === RESPONDER_ON_ENDPOINT_LISTENER;

/** What a browser may say of where a cookie call comes from ("" = header left out; "own" = the dashboard's origin). */
const BROWSER_SITES = ["", "same-origin", "same-site", "cross-site", "none", "Same-Origin", "garbage"] as const;
const BROWSER_ORIGINS = ["", "own", "null", "http://127.0.0.1:1", "https://evil.example"] as const;

/** Every route of the daemon; `s` is a path segment chosen by the fuzzer, `f` the fixtures. */
const ROUTES: {
  name: string;
  methods: readonly string[];
  admin?: boolean;
  path: (s: readonly string[], f: Fixtures, q: string) => string;
}[] = [
  { name: "/v1/components", methods: ["POST"], path: () => "/v1/components" },
  { name: "/v1/components/:key", methods: ["GET"], path: (s) => `/v1/components/${s[0]}` },
  { name: "/v1/components/registry/:key", methods: ["GET"], path: (s) => `/v1/components/registry/${s[0]}` },
  { name: "/v1/users/me/sources", methods: ["GET"], path: () => "/v1/users/me/sources" },
  { name: "/v1/sources", methods: ["GET", "POST"], path: () => "/v1/sources" },
  { name: "/v1/sources/:id", methods: ["GET", "PUT", "DELETE"], path: (s) => `/v1/sources/${s[0]}` },
  { name: "/v1/sources/:id/event_summaries", methods: ["GET"], path: (s) => `/v1/sources/${s[0]}/event_summaries` },
  { name: "/v1/sources/:id/events", methods: ["DELETE"], path: (s) => `/v1/sources/${s[0]}/events` },
  { name: "/v1/subscriptions", methods: ["POST", "DELETE"], path: () => "/v1/subscriptions" },
  { name: "/v1/users/me/subscriptions", methods: ["GET"], path: () => "/v1/users/me/subscriptions" },
  { name: "/v1/auto_subscriptions", methods: ["POST"], path: () => "/v1/auto_subscriptions" },
  { name: "/v1/webhooks", methods: ["GET", "POST"], path: () => "/v1/webhooks" },
  { name: "/v1/users/me/webhooks", methods: ["GET"], path: () => "/v1/users/me/webhooks" },
  { name: "/v1/webhooks/:id", methods: ["GET", "PUT", "DELETE"], path: (s) => `/v1/webhooks/${s[0]}` },
  { name: "/v1/webhooks/:id/secret", methods: ["GET"], path: (s) => `/v1/webhooks/${s[0]}/secret` },
  { name: "/v1/webhooks/:id/secret/rotate", methods: ["POST"], path: (s) => `/v1/webhooks/${s[0]}/secret/rotate` },
  { name: "/v1/webhooks/:id/deliveries", methods: ["GET"], path: (s) => `/v1/webhooks/${s[0]}/deliveries` },
  { name: "/v1/webhooks/:id/deliveries/:d/retry", methods: ["POST"], path: (s) => `/v1/webhooks/${s[0]}/deliveries/${s[1]}/retry` },
  { name: "/v1/webhooks/:id/deliveries/replay", methods: ["POST"], path: (s) => `/v1/webhooks/${s[0]}/deliveries/replay` },
  { name: "/v1/webhooks/:id/replays/:r", methods: ["GET"], path: (s) => `/v1/webhooks/${s[0]}/replays/${s[1]}` },
  { name: "/v1/webhooks/:id/event_summaries", methods: ["GET"], path: (s) => `/v1/webhooks/${s[0]}/event_summaries` },
  { name: "/v1/users/me", methods: ["GET"], path: () => "/v1/users/me" },
  { name: "/v1/users/me/workflows", methods: ["GET"], path: () => "/v1/users/me/workflows" },
  { name: "/v1/workflows/:id", methods: ["PUT", "GET", "DELETE"], path: (s) => `/v1/workflows/${s[0]}` },
  { name: "/v1/workflows/:id/events", methods: ["POST"], path: (s) => `/v1/workflows/${s[0]}/events` },
  {
    name: "/v1/workflows/:id/$errors/events",
    methods: ["POST"],
    path: (s) => `/v1/workflows/${s[0]}/${s[1] === "x" ? "%24" : "$"}errors/events`,
  },
  { name: "/v1/workflows/:id/event_summaries", methods: ["GET"], path: (s) => `/v1/workflows/${s[0]}/event_summaries` },
  { name: "/v1/workflows/:id/$errors/event_summaries", methods: ["GET"], path: (s) => `/v1/workflows/${s[0]}/$errors/event_summaries` },
  { name: "/v1/sources/:id/sse", methods: ["GET"], path: (s) => `/v1/sources/${s[0]}/sse` },
  { name: "/v1/workflows/:id/sse", methods: ["GET"], path: (s) => `/v1/workflows/${s[0]}/sse` },
  { name: "/sources/:id/sse", methods: ["GET"], path: (s) => `/sources/${s[0]}/sse` },
  { name: "/sse/dc/:id/emits", methods: ["GET"], path: (s) => `/sse/dc/${s[0]}/emits` },
  { name: "/sse/dc/:id/observations", methods: ["GET"], path: (s) => `/sse/dc/${s[0]}/observations` },
  { name: "/v1/sources/:id/sse_tokens", methods: ["POST"], path: (s) => `/v1/sources/${s[0]}/sse_tokens` },
  { name: "/admin/users", methods: ["GET", "POST"], admin: true, path: () => "/admin/users" },
  { name: "/admin/users/:id", methods: ["DELETE"], admin: true, path: (s) => `/admin/users/${s[0]}` },
  { name: "/admin/users/:id/api_key", methods: ["POST"], admin: true, path: (s) => `/admin/users/${s[0]}/api_key` },
  { name: "ops", methods: ["GET"], path: (s) => `/${s[1] === "x" ? "readyz" : "healthz"}` },
  // The API document and its reference page (no key), the queue dashboard (admin token).
  { name: "/v1/openapi.json", methods: ["GET"], path: () => "/v1/openapi.json" },
  { name: "/docs", methods: ["GET"], path: () => "/docs" },
  { name: "/", methods: ["GET"], path: () => "/" },
  {
    name: "/docs/assets/:file",
    methods: ["GET"],
    path: (s) => `/docs/assets/${["swagger-ui.css", "init.js", "favicon-32x32.png", s[0]][(s[0]?.length ?? 0) % 4]}`,
  },
  { name: "/admin/queues", methods: ["GET"], admin: true, path: () => "/admin/queues" },
  { name: "/admin/queues/api/*", methods: ["GET", "PUT", "POST", "PATCH"], admin: true, path: (s) => boardApiPath(s) },
  // The same with the dashboard's cookie, from its own page or from another site (BROWSER_SITES).
  { name: COOKIE_ROUTE, methods: ["GET", "PUT", "POST", "PATCH"], path: (s) => boardApiPath(s) },
  // The endpoints' own listener (ENDPOINT_PORT): endpoints, and paths it must not serve.
  {
    name: ENDPOINT_LISTENER,
    methods: ["GET", "POST", "PUT"],
    path: (s) =>
      [`/e/${s[0]}/${s[1]}`, "/admin/queues", boardApiPath(s), "/admin/users", "/v1/users/me", "/docs", "/healthz", `/${s[0]}/${s[1]}`][
        (s[0]?.length ?? 0) % 8
      ] as string,
  },
  { name: RESPONDER_ON_ENDPOINT_LISTENER, methods: ["GET", "POST", "PUT"], path: (s, f, q) => `/e/${f.responderToken}/${s[1]}?${q}` },
  { name: "unknown", methods: ["GET", "POST"], path: (s) => `/${s[0]}/${s[1]}` },
  { name: "/e/:token", methods: ["GET", "POST"], path: (s) => `/e/${s[0]}/${s[1]}` },
  { name: "/e/:responder", methods: ["GET", "POST", "PUT"], path: (s, f, q) => `/e/${f.responderToken}/${s[1]}?${q}` },
  // Sources with configured_props.http.auth (the body is always one, see fuzzArbitrary).
  { name: "/v1/sources (auth)", methods: ["POST"], path: () => "/v1/sources" },
  { name: "/v1/sources/:id (auth)", methods: ["PUT"], path: (_s, f) => `/v1/sources/${f.sources[0]}` },
  {
    name: "/e/:verified",
    methods: ["GET", "POST", "PUT"],
    path: (s, f) => `/e/${f.verifiedTokens[(s[0]?.length ?? 0) % f.verifiedTokens.length]}/${s[1]}`,
  },
];

/** A query asking the responder for a hostile answer: 1xx statuses, framing headers, a throw. */
const responderQuery: fc.Arbitrary<string> = fc
  .record({
    status: fc.oneof(
      fc.constantFrom(100, 101, 102, 103, 199, 200, 204, 206, 301, 304, 404, 418, 500, 502, 599, 600, 0, -1),
      fc.integer({ min: 0, max: 1000 }),
      fc.constantFrom("abc", "200.5", "", "1e3"),
    ),
    headers: fc.dictionary(
      fc.constantFrom(
        "transfer-encoding",
        "Content-Length",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-authenticate",
        "proxy-connection",
        "x-hop",
        "x-fine",
        "bad name",
        "set-cookie",
        "Content-Security-Policy",
        "x-content-type-options",
        "referrer-policy",
      ),
      fc.constantFrom(
        "chunked",
        "0",
        "1",
        "close, x-hop",
        "Upgrade",
        "websocket",
        "a\r\nx-injected: 1",
        "é",
        "😀",
        "",
        "default-src *",
        "unsafe-url",
      ),
      { maxKeys: 5 },
    ),
    body: fc.option(fc.string({ maxLength: 20 }), { nil: undefined }),
    throws: fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom("a", "b") }),
  })
  .map(({ status, headers, body, throws }) => {
    const q = new URLSearchParams({ status: String(status), headers: JSON.stringify(headers) });
    if (body !== undefined) q.set("body", body);
    if (throws !== undefined) q.set("throw", throws);
    return q.toString();
  });

/** `/admin/users` -> `/aDmIn/users` or `/%61dmin/users`: the first segment spelled otherwise. */
function respell(path: string, pick: number): string {
  const m = /^\/([^/?]+)(.*)$/s.exec(path);
  if (!m) return path;
  const [, first = "", rest = ""] = m;
  const spellings = [...caseMixes(first).slice(1), percentFirst(first)];
  return `/${spellings[pick % spellings.length]}${rest}`;
}

function fuzzArbitrary(f: Fixtures): fc.Arbitrary<FuzzRequest> {
  const ids = [...f.sources, f.componentId, f.webhookId, f.workflowId, f.eventId, f.subscriptionId, f.foreignSource, f.foreignWebhook];
  const hostile = fc.constantFrom(
    "",
    " ",
    "null",
    "[]",
    "{}",
    "%00",
    "\u0000",
    "ü€😀",
    "emoji😀",
    "   ",
    " padded ",
    "100%",
    "\uD800",
    "../../etc/passwd",
    "dc_*",
    "p_*",
    "sc_*",
    "*",
    "' OR 1=1 --",
    "-1",
    "0",
    "101",
    "1e309",
    "NaN",
    "__proto__",
    "constructor",
    "prototype",
    "$errors",
    "%24errors",
    "$logs",
    "default",
    "0-0",
    "1-1",
    "0000000000000000-0",
    "9999999999999999-9999999999999999",
    "true",
    "false",
    "javascript:alert(1)",
    "http://127.0.0.1:1/x",
    "https://example.com/hook",
    "file:///etc/passwd",
    "registry",
    "a".repeat(5000),
    "module.exports = { name: 'fz', async run() {} }",
    // filter (subscriptions): valid, invalid and bound-testing JSON texts.
    '{"a.b":{"$gte":1},"$or":[{"c":{"$in":[1,"x"]}},{"$not":{"d":{"$exists":false}}}]}',
    '{"a":{"$regex":"x"}}',
    '{"$or":[]}',
    '{"a..b":1}',
    `{"a":${"[".repeat(40)}${"]".repeat(40)}}`,
    "while (true) {}",
    // headers and retry_schedule (webhooks): headers no delivery can carry, schedules past the span cap.
    '{"Transfer-Encoding":"chunked","Upgrade":"h2c"}',
    '{"User-Agent":"x","Proxy-Authorization":"y"}',
    Array(20).fill("1000h").join(","),
    "72h,1ms",
    // url (webhooks): private, loopback and link-local literals and localhost names.
    "http://localhost:1/x",
    "http://a.localhost/x",
    "http://[::1]:1/x",
    "http://169.254.169.254/latest",
    "http://10.0.0.1/x",
    "http://[::ffff:127.0.0.1]/x",
    // signing_secret: a valid one (the rotation's success path) and the validator's edges.
    `whsec_${Buffer.alloc(24, 0xfb).toString("base64")}`,
    `whsec_${Buffer.alloc(23, 1).toString("base64")}`,
    "whsec_",
    "whsec_====",
    "sse_",
    `sse_${"A".repeat(32)}`,
    ...f.sseTokens,
    ...ids,
    ...ids.map(b64url),
  );
  const str = fc.oneof(
    { weight: 3, arbitrary: hostile },
    { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
    { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
  );
  const key = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...KNOWN_KEYS) }, { weight: 1, arbitrary: str });
  const leaf = fc.oneof(str, fc.integer(), fc.double(), fc.boolean(), fc.constant(null));
  const value: fc.Arbitrary<unknown> = fc.oneof(
    { weight: 4, arbitrary: leaf },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
    { weight: 1, arbitrary: fc.array(leaf, { maxLength: 4 }) },
    { weight: 1, arbitrary: fc.dictionary(key, leaf, { maxKeys: 4 }) },
    { weight: 1, arbitrary: fc.array(fc.record({ event: leaf, name: fc.option(str, { nil: undefined }) }), { maxLength: 3 }) },
  );
  const object = fc.dictionary(key, value, { maxKeys: 6 });
  const json = (data: string, label: string) => ({ label, contentType: "application/json", data });
  // configured_props.http.auth of an HTTP source: near-valid shapes with hostile values.
  const authKey = fc.constantFrom("type", "token", "preset", "secret", "header", "algorithm", "encoding", "prefix");
  const authValue = fc.oneof(
    fc.constantFrom("token", "hmac", "github", "stripe", "shopify", "slack", "standard-webhooks", "sha256", "sha1", "md5", "hex", "base64"),
    fc.constantFrom("X-Signature", "content-type", "bad header", "sha256=", "whsec_", "whsec_AAAA", "whsec_not base64", "a".repeat(2000)),
    leaf,
  );
  const auth = fc.oneof(fc.dictionary(authKey, authValue, { maxKeys: 6 }), fc.constantFrom(...INBOUND_AUTHS), value);
  const authBody = fc
    .record({ auth, keep: fc.nat(3) })
    .map(({ auth: a, keep }) =>
      json(JSON.stringify({ ...(keep > 0 ? { component_id: f.componentId } : {}), configured_props: { http: { auth: a } } }), "http auth"),
    );

  const segment = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...ids) },
    // Unpaired surrogates cannot be percent-encoded; a URL carries them as U+FFFD.
    { weight: 2, arbitrary: str.map((s) => encodeURIComponent(s.replace(/\p{Cs}/gu, "\uFFFD"))) },
    {
      weight: 1,
      arbitrary: fc.constantFrom("%", "%zz", "%E0%A4", "%C0%AF", "..", "%2e%2e", "%00", "%2F", "$errors", "p_", "dc_", "x".repeat(3000)),
    },
    { weight: 1, arbitrary: fc.stringMatching(/^(p|dc|wh|sc|sub|d)_[A-Za-z0-9_-]{1,70}$/) },
  );
  const adminSegment = fc.oneof(
    fc.constant(f.sacrificialUserId),
    segment.filter((s) => !s.startsWith("u_")),
  );

  const body = fc.oneof(
    { weight: 5, arbitrary: fc.constant({ label: "none" }) },
    { weight: 10, arbitrary: object.map((o) => json(JSON.stringify(o), "object")) },
    { weight: 2, arbitrary: authBody },
    { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 6 }).map((v) => json(JSON.stringify(v), "json value")) },
    {
      weight: 2,
      arbitrary: fc.tuple(value, object).map(([v, o]) => {
        const rest = Object.entries(o).map(([k, x]) => `${JSON.stringify(k)}:${JSON.stringify(x) ?? "null"}`);
        const parts = [`"__proto__":${JSON.stringify(v) ?? "null"}`, `"constructor":{"prototype":{"polluted":true}}`, ...rest];
        return json(`{${parts.join(",")}}`, "prototype keys");
      }),
    },
    {
      weight: 1,
      arbitrary: fc
        .record({ depth: fc.integer({ min: 200, max: 60_000 }), key: fc.constantFrom(...KNOWN_KEYS), open: fc.constantFrom("[", '{"a":') })
        .map(({ depth, key: k, open }) => {
          const close = open === "[" ? "]" : "}";
          const inner = open === "[" ? "" : "1";
          return json(`{"${k}":${open.repeat(depth)}${inner}${close.repeat(depth)}}`, "deep nesting");
        }),
    },
    {
      weight: 1,
      arbitrary: fc
        .record({
          size: fc.integer({ min: 50_000, max: BODY_LIMIT - 100 }),
          key: fc.constantFrom(...KNOWN_KEYS),
          char: fc.constantFrom("x", "é", "😀"),
        })
        .map(({ size, key: k, char }) => json(`{"${k}":"${char.repeat(Math.floor(size / Buffer.byteLength(char)))}"}`, "huge string")),
    },
    {
      weight: 3,
      arbitrary: fc
        .oneof(
          fc.constantFrom(
            '{"a":',
            "{'a':1}",
            '{"a":1,}',
            "NaN",
            "undefined",
            '{"a":01}',
            "\uFEFF{}",
            "[1,2",
            "}",
            "",
            " ",
            '{"a":1}{"b":2}',
          ),
          str,
        )
        .map((s) => json(s, "malformed json")),
    },
    {
      weight: 3,
      arbitrary: fc
        .record({
          contentType: fc.constantFrom(
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/xml",
            "application/octet-stream",
            "application/json; charset=latin1",
            "application/json; charset=utf-16",
            "application/vnd.api+json",
            "application/jsonx",
            "application/json, text/plain",
            "",
          ),
          data: fc.oneof(
            str,
            object.map((o) => JSON.stringify(o)),
          ),
        })
        .map(({ contentType, data }) => ({ label: `content-type ${contentType || "(none)"}`, contentType, data })),
    },
    {
      weight: 2,
      arbitrary: fc
        .record({ encoding: fc.constantFrom("gzip", "deflate", "br", "zstd", "identity", "gzip, gzip"), o: object, real: fc.boolean() })
        .map(({ encoding, o, real }) => ({
          label: `content-encoding ${encoding}${real ? " (real gzip)" : ""}`,
          contentType: "application/json",
          encoding: real ? "gzip" : encoding,
          data: real ? gzipSync(JSON.stringify(o)) : Buffer.from(JSON.stringify(o)),
        })),
    },
    {
      weight: 1,
      arbitrary: fc.uint8Array({ minLength: 1, maxLength: 64 }).map((bytes) => ({
        label: "invalid utf-8",
        contentType: "application/json",
        data: Buffer.concat([Buffer.from('{"name":"'), bytes, Buffer.from('"}')]),
      })),
    },
    {
      weight: 1,
      arbitrary: fc.boolean().map((isChunked) => ({
        label: isChunked ? "oversize chunked" : "oversize",
        contentType: "application/json",
        data: jsonOfSize(BODY_LIMIT + 64 * 1024, "event"),
        chunked: isChunked,
      })),
    },
  );

  return fc
    .record({
      routeIndex: fc.nat({ max: ROUTES.length - 1 }),
      methodPick: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(...METHODS) }),
      methodIndex: fc.nat(),
      segments: fc.tuple(segment, segment),
      adminSegment,
      query: fc.array(fc.tuple(key, str), { maxLength: 6 }),
      auth: fc.constantFrom("user", "user", "user", "user", "user", "user", "user", "user", "none", "garbage", "admin"),
      body,
      respondWith: responderQuery,
      authBody,
      signatureHeaders: fc.dictionary(fc.constantFrom(...SIGNATURE_HEADERS), fc.constantFrom(...SIGNATURE_VALUES), { maxKeys: 4 }),
      browser: fc.tuple(fc.constantFrom(...BROWSER_SITES), fc.constantFrom(...BROWSER_ORIGINS)),
      // One request in eight spells its route's first segment otherwise (/ADMIN, /V1, /%61dmin).
      respell: fc.oneof({ weight: 7, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.nat() }),
    })
    .map((r) => {
      const route = ROUTES[r.routeIndex]!;
      const method = r.methodPick ?? route.methods[r.methodIndex % route.methods.length]!;
      const segs = route.admin ? [r.adminSegment, r.segments[1]] : r.segments;
      // An admin route without a token is the case its guard exists for: keep it common.
      const auth =
        route.name === COOKIE_ROUTE
          ? "cookie"
          : route.admin && r.auth === "user"
            ? r.methodIndex % 2 === 0
              ? "admin"
              : "none"
            : (r.auth as FuzzRequest["auth"]);
      // fetch sends no body with GET or HEAD.
      const b = method === "GET" || method === "HEAD" ? { label: "none" } : route.name.endsWith("(auth)") ? r.authBody : r.body;
      const exact = route.path(segs, f, r.respondWith);
      const respelled = r.respell !== undefined && (route.admin === true || route.name.startsWith("/v1/"));
      const path = respelled ? respell(exact, r.respell ?? 0) : exact;
      const [site, origin] = r.browser;
      const browser: Record<string, string> = {
        ...(site ? { "sec-fetch-site": site } : {}),
        ...(origin ? { origin: origin === "own" ? f.ownOrigin : origin } : {}),
      };
      const headers =
        route.name === "/e/:verified" ? { headers: r.signatureHeaders } : route.name === COOKIE_ROUTE ? { headers: browser } : {};
      const listener = route.name === ENDPOINT_LISTENER || route.name === RESPONDER_ON_ENDPOINT_LISTENER ? { endpointListener: true } : {};
      return { route: route.name, method, path, respelled, query: r.query, auth, body: b, ...headers, ...listener };
    });
}

async function sendFuzz(
  req: FuzzRequest,
  keys: { user: string; admin: string; cookie: string },
): Promise<{ status: number; headers: Headers; text: string; body: Json }> {
  const headers: Record<string, string> = {};
  if (req.auth === "user") headers.authorization = `Bearer ${keys.user}`;
  if (req.auth === "admin") headers.authorization = `Bearer ${keys.admin}`;
  if (req.auth === "garbage") headers.authorization = "Bearer garbage-key-0000";
  if (req.auth === "cookie") headers.cookie = keys.cookie;
  if (req.body.contentType) headers["content-type"] = req.body.contentType;
  if (req.body.encoding) headers["content-encoding"] = req.body.encoding;
  Object.assign(headers, req.headers);
  const qs = new URLSearchParams(req.query).toString();
  const init: RequestInit & { duplex?: "half" } = { method: req.method, headers, redirect: "manual" };
  if (req.body.data !== undefined) {
    if (req.body.chunked) {
      init.body = chunked(String(req.body.data));
      init.duplex = "half";
    } else init.body = req.body.data as RequestInit["body"];
  }
  const ac = new AbortController();
  init.signal = ac.signal;
  // A request the daemon never finishes answering is a failure the report names (not a hung test).
  const hung = setTimeout(() => ac.abort(new Error("no complete answer within 20 s")), 20_000);
  let text: string;
  let res: Response;
  try {
    res = await fetch(
      `${req.endpointListener ? endpointBase : td.url}${req.path}${qs ? `${req.path.includes("?") ? "&" : "?"}${qs}` : ""}`,
      init,
    );
    // A live-tail stream that opened never ends by itself: its head is the answer.
    const streaming = res.status === 200 && (res.headers.get("content-type") ?? "").startsWith("text/event-stream");
    if (streaming) ac.abort();
    text = streaming ? "" : await res.text();
  } finally {
    clearTimeout(hung);
  }
  let body: Json;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: res.status, headers: res.headers, text, body };
}

type FuzzAnswer = Awaited<ReturnType<typeof sendFuzz>>;

/**
 * The responder's 5xx that are not the daemon's failures: the status the component was asked to
 * answer with, or the generic 502/504 of a run that failed (whose detail stays on $errors).
 */
function responderChose5xx(req: FuzzRequest, res: FuzzAnswer): boolean {
  if (!isResponder(req)) return false;
  if ([502, 504].includes(res.status)) {
    // A HEAD answer has no body to carry the code; its status is all there is to check.
    if (req.method === "HEAD") return true;
    if (["source_run_failed", "invalid_response", "no_response"].includes(res.body?.code)) return true;
  }
  const asked = new URLSearchParams(req.path.split("?")[1] ?? "").get("status");
  return asked !== null && Number(asked) === res.status;
}

/** What must hold for a request beyond "no 5xx" (item by item: route guards, custom responses). */
function invariantProblem(req: FuzzRequest, res: FuzzAnswer): string | undefined {
  const path = req.path.split("?")[0] ?? req.path;
  // The client sends the path as the URL parser resolves it ("/e/../x" is "/x"): endpoints are
  // judged on what the daemon was sent.
  return (
    endpointProblem(req, res, new URL(path, "http://fuzz.invalid").pathname) ??
    (req.endpointListener ? undefined : guardProblem(req, res, path)) ??
    answerProblem(req, res)
  );
}

/** Every answer of an endpoint path, and every answer of the endpoints' listener, is sandboxed; that listener serves nothing else. */
function endpointProblem(req: FuzzRequest, res: FuzzAnswer, path: string): string | undefined {
  // 431 comes from Node's HTTP parser, before any application code.
  if (res.status === 431 || !(req.endpointListener || isEndpointPath(path))) return undefined;
  const wrong = Object.entries(ENDPOINT_ANSWER_HEADERS).filter(([name, value]) => res.headers.get(name) !== value);
  if (wrong.length > 0) return `endpoint answer without its ${wrong.map(([name]) => name).join(", ")}`;
  if (res.headers.has("set-cookie")) return "endpoint answer set a cookie";
  if (req.endpointListener && !isEndpointPath(path) && res.status !== 404) return `endpoint listener answered ${path} with ${res.status}`;
  return undefined;
}

/** The main listener's guards: the admin token, the dashboard's cookie, route spellings. */
function guardProblem(req: FuzzRequest, res: FuzzAnswer, path: string): string | undefined {
  // A cookie call that changes queues must come from the dashboard's own page (a ?token= is a login instead).
  const login = req.query.some(([k]) => k === "token");
  if (req.auth === "cookie" && !login && req.method !== "GET" && req.method !== "HEAD") {
    const site = req.headers?.["sec-fetch-site"];
    const own = site === "same-origin" || (site === undefined && req.headers?.origin === td.url);
    if (!own && (res.status !== 403 || res.body?.code !== "cross_origin_request"))
      return `cookie call from another site answered ${res.status}`;
    if (own && res.status === 403) return "cookie call from the dashboard's own page answered 403";
  }
  // Every spelling of /admin meets the admin guard first.
  if (isUnderPrefix(path, "/admin") && req.auth !== "admin" && req.auth !== "cookie" && res.status !== 401)
    return `admin path without the token answered ${res.status}`;
  // A route spelled otherwise is an unknown route (or the guard's 401); never served.
  const unknownMethod = res.status === 405 && !ROUTER_METHODS.has(req.method);
  if (req.respelled && res.status !== 404 && res.status !== 401 && !unknownMethod) return `respelled route answered ${res.status}`;
  return undefined;
}

/** What verified endpoints and custom responses may answer. */
function answerProblem(req: FuzzRequest, res: FuzzAnswer): string | undefined {
  // No fuzz request carries a valid signature or token: a verified endpoint never runs its source.
  if (req.route === "/e/:verified" && res.status < 400) return `unsigned request to a verified endpoint answered ${res.status}`;
  if (isResponder(req)) {
    if (res.status < 200) return `custom response with status ${res.status}`;
    const framing = HOP_BY_HOP.filter((h) => res.headers.has(h));
    if (framing.length > 0) return `custom response carried ${framing.join(", ")}`;
    if (res.headers.has("x-injected")) return "custom response split its headers";
    if (res.status >= 500 && /secret-detail/.test(res.text)) return "a run's error reached the caller";
  }
  return undefined;
}

describe("fuzz", () => {
  it(`answers no 5xx, and a JSON error for every 4xx, across ${FUZZ_REQUESTS} random requests (seed ${FUZZ_SEED})`, async () => {
    const u = await td.createUser("paid");
    const other = await td.createUser();
    const sacrificial = await td.createUser();
    const component = await createComponent(u.api, HTTP_ESM);
    const sources = await Promise.all(Array.from({ length: 3 }, () => createSource(u.api, { component_id: component.id })));
    const hook = await createWebhook(u.api, "http://127.0.0.1:9/never-delivered");
    const p = workflowId();
    const eventId = await emit(u.api, p, { seed: true });
    const sub = await subscribe(u.api, p, hook.id);
    const sseToken = async (api: typeof u.api, sourceId: string) => {
      const res = await api.post(`/v1/sources/${sourceId}/sse_tokens`);
      expectStatus(res, 200);
      return res.body.data.token as string;
    };
    // A token of the sacrificial user, whose key is rotated before the run: refused as rotated.
    const rotatedToken = await sseToken(sacrificial.api, (await createSource(sacrificial.api, { component_code: HTTP_ESM })).id);
    expectStatus(await client(td.url, td.adminToken).post(`/admin/users/${sacrificial.id}/api_key`), 200);
    const fixtures: Fixtures = {
      sources: sources.map((s) => s.id),
      componentId: component.id,
      webhookId: hook.id,
      workflowId: p,
      eventId,
      subscriptionId: sub.id,
      foreignSource: (await createSource(other.api, { component_code: HTTP_ESM })).id,
      foreignWebhook: (await createWebhook(other.api, "https://example.com/other")).id,
      sacrificialUserId: sacrificial.id,
      ownOrigin: td.url,
      responderToken: String((await createSource(u.api, { component_code: RESPONDER })).configured_props.http.endpoint_url.split("/e/")[1]),
      sseTokens: [await sseToken(u.api, sources[0].id), rotatedToken],
      verifiedTokens: await Promise.all(
        INBOUND_AUTHS.map(async (auth) => {
          const s = await createSource(u.api, { component_code: RESPONDER, configured_props: { http: { auth } } });
          return String(s.configured_props.http.endpoint_url.split("/e/")[1]);
        }),
      ),
    };
    const requests = fc.sample(fuzzArbitrary(fixtures), { seed: FUZZ_SEED, numRuns: FUZZ_REQUESTS });
    const login = await fetch(`${td.url}/admin/queues?token=${encodeURIComponent(td.adminToken)}`, { redirect: "manual" });
    const cookie = (login.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
    expect(cookie).toMatch(/^tributary_admin=/);
    const keys = { user: u.api_key, admin: td.adminToken, cookie };

    const started = Date.now();
    const failures = new Map<string, { count: number; example: string }>();
    const statuses = new Map<number, number>();
    const fail = (req: FuzzRequest, problem: string, detail: string) => {
      const group = `${req.method} ${req.route} [${req.body.label}] ${problem}`;
      const seen = failures.get(group);
      if (seen) seen.count++;
      else {
        const query = new URLSearchParams(req.query).toString().slice(0, 120);
        failures.set(group, { count: 1, example: `${req.path.slice(0, 120)}?${query} -> ${detail.slice(0, 200)}` });
      }
    };
    let next = 0;
    const worker = async () => {
      while (next < requests.length && Date.now() - started < FUZZ_BUDGET_MS) {
        const req = requests[next++]!;
        let res: FuzzAnswer;
        try {
          res = await sendFuzz(req, keys);
        } catch (err) {
          fail(req, "network error", String((err as Error).cause ?? err));
          continue;
        }
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        const broken = invariantProblem(req, res);
        if (broken) fail(req, broken, res.text);
        if (res.status >= 500 && !responderChose5xx(req, res)) fail(req, String(res.status), res.text);
        // 431 comes from Node's HTTP parser (URL or headers over 16 KiB), before any application code.
        // The responder's own 4xx answers are whatever the component chose; the daemon's 429s are not.
        else if (res.status >= 400 && res.status !== 431 && req.method !== "HEAD" && (!isResponder(req) || res.status === 429)) {
          // The queue dashboard's JSON API answers its own 4xx in bull-board's shape ({error: {key}}),
          // which its UI reads; the daemon's guard in front of it answers {error, code} (401/404).
          const boardsOwn = req.route.startsWith("/admin/queues/api/*") && res.status !== 401 && res.body?.error !== undefined;
          if (!boardsOwn && (typeof res.body?.error !== "string" || typeof res.body?.code !== "string"))
            fail(req, `${res.status} without {error, code}`, res.text);
        }
      }
    };
    await Promise.all(Array.from({ length: FUZZ_CONCURRENCY }, worker));
    const elapsed = Date.now() - started;

    const report = [...failures].map(([group, f]) => `${group} (x${f.count}): ${f.example}`);
    expect(report, `seed ${FUZZ_SEED}; statuses ${JSON.stringify(Object.fromEntries(statuses))}`).toEqual([]);
    expect(next, "every generated request was sent within the time budget").toBe(requests.length);
    expect(elapsed).toBeLessThan(FUZZ_BUDGET_MS);
    // The fuzz reached the application, not only its front door.
    expect([...statuses.keys()].filter((s) => s < 300).length).toBeGreaterThan(0);
    expect(statuses.get(400) ?? 0).toBeGreaterThan(FUZZ_REQUESTS / 20);

    // The request histogram's labels stayed within their fixed sets, whatever was sent.
    const metrics = (await client(td.url).get("/metrics")).text.split("\n");
    const series = metrics.filter((l) => l.startsWith("tributary_http_request_duration_seconds_count{"));
    expect(series.length).toBeGreaterThan(0);
    for (const line of series) {
      expect(line).toMatch(/status="(1xx|2xx|3xx|4xx|5xx|other)"/);
      expect(line).toMatch(/method="(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS|other)"/);
    }

    // The daemon is still healthy, and nothing leaked into this process's prototypes.
    expectStatus(await u.api.get("/v1/users/me"), 200);
    expectStatus(await client(td.url).get("/readyz"), 200);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  }, 120_000);
});
