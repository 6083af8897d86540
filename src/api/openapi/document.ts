import { componentSchemas } from "./schemas.js";

/**
 * The OpenAPI 3.1 document of every route the daemon serves (SPEC §10), served at
 * `GET /v1/openapi.json` and rendered at `/docs`. Resource shapes are zod schemas (schemas.ts,
 * converted with zod's own `z.toJSONSchema`, draft 2020-12 = OpenAPI 3.1's dialect); this file
 * declares the operations. test/integration/api/openapi/ proves that the paths and methods here
 * are exactly the router's, and that real answers validate against the schemas.
 */

type Json = Record<string, unknown>;

const ref = (id: string): Json => ({ $ref: `#/components/schemas/${id}` });
const strict = (properties: Json, required: readonly string[]): Json => ({
  type: "object",
  properties,
  required,
  additionalProperties: false,
});
/** `{data: <schema>}`. */
const data = (schema: Json): Json => strict({ data: schema }, ["data"]);
/** `{page_info, data: [<id>]}`. */
const page = (id: string): Json => strict({ page_info: ref("PageInfo"), data: { type: "array", items: ref(id) } }, ["page_info", "data"]);
/** `{data: [<id>]}` (unpaginated). */
const list = (id: string): Json => data({ type: "array", items: ref(id) });

type Auth = "user" | "admin" | "none";
type ErrorStatus = 400 | 401 | 403 | 404 | 409 | 413 | 415 | 429 | 502 | 504;

interface Param {
  readonly name: string;
  readonly schema: Json;
  readonly description: string;
  readonly required?: boolean;
}

interface Operation {
  readonly tag: string;
  readonly summary: string;
  readonly description?: string;
  readonly auth: Auth;
  /** Query parameters (beyond include/exclude and the page parameters, added by the flags below). */
  readonly query?: readonly Param[];
  /** POST/PUT: the query parameters may also come as a JSON object body (body wins). */
  readonly jsonBody?: boolean | Json;
  readonly paged?: boolean;
  /** Answers `{data}` or a list, so include/exclude apply. */
  readonly fields?: boolean;
  readonly ok: { readonly status: number; readonly description: string; readonly schema?: Json; readonly type?: string };
  /** A second success answer (a dry run's 200 beside the 202 of the real thing). */
  readonly alsoOk?: { readonly status: number; readonly description: string; readonly schema: Json };
  /** Error answers beyond those every operation of its kind has (401, 500, 503, body errors). */
  readonly errors?: readonly ErrorStatus[];
  /** Whether Redis is on the path (so 503 when it is unavailable). */
  readonly storage?: boolean;
  /** A live-tail browser token (?token=) is accepted instead of the API key. */
  readonly sseToken?: boolean;
}

const str = { type: "string" };
const PATH_PARAMS: Readonly<Record<string, Param>> = {
  id: { name: "id", schema: str, description: "The resource's id (dc_, wh_, p_ or u_ by resource)" },
  key: { name: "key", schema: str, description: "Component key of a shipped (registry) component" },
  keyOrId: { name: "keyOrId", schema: str, description: "A saved component's id (sc_…) or key (the newest with that key)" },
  deliveryId: { name: "deliveryId", schema: { type: "string", pattern: "^d_" }, description: "Delivery id" },
  replayId: { name: "replayId", schema: { type: "string", pattern: "^rpl_" }, description: "Bulk replay id" },
  token: { name: "token", schema: { type: "string", pattern: "^[A-Za-z0-9]{8,64}$" }, description: "The endpoint's unguessable token" },
  path: { name: "path", schema: str, description: "Any sub-path (it may contain further / segments)" },
  file: { name: "file", schema: str, description: "Asset file name" },
};

const eventName: Param = {
  name: "event_name",
  schema: str,
  description: 'Channel: "" or "default" (the default channel), "$errors", "$logs" or any name',
};
/** The attempt-log selectors (SPEC §12). */
const deliverySelectors: readonly Param[] = [
  { name: "status", schema: { type: "string", enum: ["pending", "delivered", "failed"] }, description: "Only deliveries in this state" },
  { name: "since", schema: { type: "integer", minimum: 0 }, description: "Events from this time on (epoch seconds, inclusive)" },
  { name: "until", schema: { type: "integer", minimum: 0 }, description: "Events before this time (epoch seconds, exclusive)" },
  { ...eventName, description: 'Only events of this channel ("" or "default": the default channel)' },
];
const expand: Param = { name: "expand", schema: { type: "string", enum: ["event"] }, description: "event: return full event data" };
const componentSelection: readonly Param[] = [
  { name: "component_id", schema: str, description: "Id of a saved component (sc_…); wins over code and URL" },
  { name: "component_code", schema: str, description: "Full component code (CommonJS or ESM)" },
  { name: "component_url", schema: str, description: "HTTP(S) URL the code is fetched from (GitHub blob URLs are read raw)" },
];
const sourceParams: readonly Param[] = [
  ...componentSelection,
  { name: "name", schema: str, description: "Defaults to the component's name slug" },
  {
    name: "configured_props",
    schema: { type: "object" },
    description:
      'Prop values by prop name (JSON body). The HTTP prop takes {auth}: {"type":"token","token"}, {"type":"hmac","preset":"github"|"stripe"|"shopify"|"slack"|"standard-webhooks","secret"} or {"type":"hmac","header","algorithm":"sha256"|"sha1"|"sha512","encoding":"hex"|"base64","prefix"?,"secret"}',
  },
];
const subscriptionParams = (required: boolean): readonly Param[] => [
  { name: "emitter_id", schema: str, description: "dc_…, p_…, wh_… (health events) or the globs dc_*, p_*, wh_*", required },
  { name: "listener_id", schema: str, description: "dc_…, p_… or wh_…", required },
  eventName,
];
const webhookParams = (urlRequired: boolean): readonly Param[] => [
  {
    name: "url",
    schema: { type: "string", format: "uri" },
    description:
      "http(s) URL with a hostname; unless ALLOW_PRIVATE_DESTINATIONS is on, localhost, *.localhost and loopback, private or link-local IP literals are refused",
    required: urlRequired,
  },
  { name: "name", schema: str, description: "Shown when listing webhooks" },
  { name: "description", schema: str, description: "Shown when listing webhooks" },
  {
    name: "headers",
    schema: { type: "object" },
    description:
      "Static request headers (a JSON object); refused: webhook-*, x-tributary-*, content-type, user-agent, and the connection's own (host, content-length, transfer-encoding, connection, keep-alive, upgrade, expect, te, trailer, http2-settings, proxy-*); null clears",
  },
  { name: "timeout_ms", schema: { type: "integer", minimum: 100, maximum: 60000 }, description: "Attempt timeout in ms; null clears" },
  {
    name: "retry_schedule",
    schema: str,
    description:
      "Delays between attempts, as DELIVERY_RETRY_SCHEDULE (5s,5m,30m): at most 20, adding up to at most MAX_RETRY_SPAN_HOURS (72 h by default); null clears",
  },
  {
    name: "rate_limit_per_second",
    schema: { type: "integer", minimum: 1, maximum: 10000 },
    description: "At most this many attempts start per second; null clears",
  },
];
const summaryQuery: readonly Param[] = [expand, eventName];

const v1 = (op: Omit<Operation, "auth" | "storage">): Operation => ({ auth: "user", storage: true, fields: true, ...op });

/** Every route: path (OpenAPI template) → method → operation. */
/** A live-tail stream (SPEC §9): `text/event-stream` frames `id: <event id>` and `data: <the expanded summary item>`. */
function liveTail(summary: string, source: boolean, channel = true): Operation {
  const query: Param[] = [
    {
      name: "last_event_id",
      schema: { type: "string", pattern: "^\\d{1,16}-\\d{1,16}$" },
      description: "Resume after this event id (the Last-Event-ID header does the same)",
    },
  ];
  if (channel) query.unshift(eventName);
  return {
    sseToken: source,
    tag: "Live tail",
    summary,
    description:
      "Each event is `id: <event id>` and one `data:` line holding the item GET …/event_summaries?expand=event returns; a `:sse-handshake` comment every SSE_HEARTBEAT_SECONDS. Streams end when the emitter is deleted, when the API key behind them (or behind their ?token=) is rotated, or when the reader falls 1,000 events or SSE_MAX_BUFFERED_BYTES_PER_STREAM bytes behind (or the process's streams together hold SSE_MAX_BUFFERED_BYTES_PER_PROCESS and this one is among the largest); resume with Last-Event-ID.",
    auth: "user",
    storage: true,
    query,
    ok: { status: 200, description: "An endless text/event-stream", type: "text/event-stream" },
    errors: [400, 404, 429],
  };
}

const OPERATIONS: Readonly<Record<string, Readonly<Record<string, Operation>>>> = {
  // Operational, unauthenticated.
  "/": {
    get: {
      tag: "Operations",
      summary: "A small page linking the API reference, the OpenAPI document and the health endpoints",
      description: "Static HTML; its Content-Security-Policy allows nothing to load or run.",
      auth: "none",
      ok: { status: 200, description: "HTML page", type: "text/html" },
    },
  },
  "/healthz": {
    get: { tag: "Operations", summary: "Process is alive", auth: "none", ok: { status: 200, description: "Alive", schema: ref("Status") } },
  },
  "/readyz": {
    get: {
      tag: "Operations",
      summary: "Redis answers and this process's roles run",
      description: "Answers within 1.5 s; 503 while Redis is unreachable or stalled.",
      auth: "none",
      ok: { status: 200, description: "Ready", schema: ref("Status") },
      storage: true,
    },
  },
  "/metrics": {
    get: {
      tag: "Operations",
      summary: "Prometheus metrics (prefix tributary_)",
      auth: "none",
      ok: { status: 200, description: "Prometheus text exposition format", type: "text/plain" },
    },
  },
  "/v1/openapi.json": {
    get: {
      tag: "Operations",
      summary: "This OpenAPI 3.1 document",
      description: "Needs no API key.",
      auth: "none",
      ok: { status: 200, description: "The document", schema: { type: "object" } },
    },
  },
  "/docs": {
    get: {
      tag: "Operations",
      summary: "API reference page rendered from this document",
      description: "Served entirely by the daemon (Swagger UI from its own assets); its Content-Security-Policy allows no other host.",
      auth: "none",
      ok: { status: 200, description: "HTML page", type: "text/html" },
    },
  },
  "/docs/assets/{file}": {
    get: {
      tag: "Operations",
      summary: "Script and style files of the reference page",
      auth: "none",
      ok: { status: 200, description: "The file", type: "*/*" },
      errors: [404],
    },
  },

  // Components.
  "/v1/components": {
    post: v1({
      tag: "Components",
      summary: "Create a component",
      description: "At least one of component_code and component_url. Re-posting identical code returns the existing component.",
      query: componentSelection.slice(1),
      jsonBody: true,
      ok: { status: 200, description: "The component", schema: data(ref("Component")) },
      errors: [400, 413, 429],
    }),
  },
  "/v1/components/registry/{key}": {
    get: v1({
      tag: "Components",
      summary: "Get a shipped (registry) component by key",
      ok: { status: 200, description: "The component", schema: data(ref("Component")) },
      errors: [404],
    }),
  },
  "/v1/components/{keyOrId}": {
    get: v1({
      tag: "Components",
      summary: "Get a saved component by id or key",
      ok: { status: 200, description: "The component", schema: data(ref("Component")) },
      errors: [404],
    }),
  },

  // Sources.
  "/v1/users/me/sources": {
    get: v1({
      tag: "Sources",
      summary: "List the user's sources",
      paged: true,
      ok: { status: 200, description: "A page of sources (without user_id)", schema: page("Source") },
      errors: [400],
    }),
  },
  "/v1/sources": {
    get: v1({
      tag: "Sources",
      summary: "List the user's sources (the same list as GET /v1/users/me/sources)",
      paged: true,
      ok: { status: 200, description: "A page of sources (without user_id)", schema: page("Source") },
      errors: [400],
    }),
    post: v1({
      tag: "Sources",
      summary: "Create a source",
      description: "At least one of component_id, component_code and component_url.",
      query: sourceParams,
      jsonBody: true,
      ok: { status: 200, description: "The source", schema: data(ref("Source")) },
      errors: [400, 404, 413, 429],
    }),
  },
  "/v1/sources/{id}": {
    get: v1({
      tag: "Sources",
      summary: "Get a source",
      ok: { status: 200, description: "The source", schema: data(ref("Source")) },
      errors: [404],
    }),
    put: v1({
      tag: "Sources",
      summary: "Update a source",
      description: "Parameters as for create, plus active (default true).",
      query: [...sourceParams, { name: "active", schema: { type: "boolean" }, description: "false disables, true enables" }],
      jsonBody: true,
      ok: { status: 200, description: "The source", schema: data(ref("Source")) },
      errors: [400, 404, 413, 429],
    }),
    delete: v1({
      tag: "Sources",
      summary: "Delete a source, its timers, endpoint, events, db and subscriptions",
      fields: false,
      ok: { status: 204, description: "Deleted" },
      errors: [404],
    }),
  },

  // Events and ingress.
  "/v1/sources/{id}/event_summaries": {
    get: v1({
      tag: "Events",
      summary: "A source's latest events (up to 100), newest first",
      paged: true,
      query: summaryQuery,
      ok: { status: 200, description: "A page of event summaries", schema: page("EventSummary") },
      errors: [400, 404],
    }),
  },
  "/v1/webhooks/{id}/event_summaries": {
    get: v1({
      tag: "Events",
      summary:
        "A webhook's health events (up to 100 per channel), newest first: event_name $delivery_failed, $webhook_disabled or $webhook_recovered (SPEC §12)",
      paged: true,
      query: summaryQuery,
      ok: { status: 200, description: "A page of event summaries", schema: page("EventSummary") },
      errors: [400, 404],
    }),
  },
  "/v1/sources/{id}/events": {
    delete: v1({
      tag: "Events",
      summary: "Delete a source's events (asynchronously)",
      fields: false,
      query: [
        { name: "start_id", schema: str, description: "First event id to delete (inclusive)" },
        { name: "end_id", schema: str, description: "Last event id to delete (inclusive)" },
        eventName,
      ],
      ok: { status: 202, description: "Accepted; a worker deletes the events" },
      errors: [400, 404],
    }),
  },
  "/v1/workflows/{id}/event_summaries": {
    get: v1({
      tag: "Events",
      summary: "A workflow's latest emits (up to 100); event is {raw_event}",
      paged: true,
      query: summaryQuery,
      ok: { status: 200, description: "A page of event summaries", schema: page("EventSummary") },
      errors: [400, 404],
    }),
  },
  "/v1/workflows/{id}/$errors/event_summaries": {
    get: v1({
      tag: "Events",
      summary: "A workflow's latest errors (up to 100)",
      paged: true,
      query: [expand],
      ok: { status: 200, description: "A page of event summaries", schema: page("EventSummary") },
      errors: [400, 404],
    }),
  },
  "/v1/sources/{id}/sse": { get: liveTail("A source's new events as server-sent events", true) },
  "/v1/workflows/{id}/sse": { get: liveTail("A workflow's new emits as server-sent events", false) },
  "/sources/{id}/sse": { get: liveTail("Pipedream's URL form of GET /v1/sources/{id}/sse", true) },
  "/sse/dc/{id}/emits": { get: liveTail("Pipedream's URL form of GET /v1/sources/{id}/sse", true) },
  "/sse/dc/{id}/observations": { get: liveTail("A source's $logs channel as server-sent events", true, false) },
  "/v1/sources/{id}/sse_tokens": {
    post: v1({
      tag: "Live tail",
      summary: "A read-only browser token for this source's streams (pass it as ?token=)",
      description:
        "Valid SSE_TOKEN_TTL_SECONDS (default 3600) and while the API key that asked for it is the user's: rotating that key makes the token answer 401. expires_at is in epoch seconds.",
      ok: {
        status: 200,
        description: "The token",
        schema: data(strict({ token: { type: "string", pattern: "^sse_" }, expires_at: { type: "integer" } }, ["token", "expires_at"])),
      },
      errors: [404],
    }),
  },
  "/v1/workflows/{id}/events": {
    post: v1({
      tag: "Ingress",
      summary: "Emit from a workflow ($send.emit)",
      description: "One event, or {events: [...]} of at most 1000. Answers once the events are durable.",
      jsonBody: {
        oneOf: [
          {
            type: "object",
            required: ["event"],
            properties: { event: {}, name: str, id: { type: ["string", "number"] }, summary: str, ts: { type: "number" } },
          },
          { type: "object", required: ["events"], properties: { events: { type: "array", maxItems: 1000, items: { type: "object" } } } },
        ],
      },
      ok: {
        status: 202,
        description: "Accepted: {data: {id}} or, for a batch, {data: [{id}, …]}",
        schema: data({ oneOf: [ref("EventId"), { type: "array", items: ref("EventId") }] }),
      },
      errors: [400, 413, 429],
    }),
  },
  "/v1/workflows/{id}/$errors/events": {
    post: v1({
      tag: "Ingress",
      summary: "Record a workflow error",
      jsonBody: {
        type: "object",
        properties: {
          original_event: {},
          error: { type: "object", properties: { code: str, msg: str, stack: str, cellId: str, ts: str } },
          original_context: { type: "object" },
        },
      },
      ok: { status: 202, description: "Accepted", schema: data(ref("EventId")) },
      errors: [400, 413, 429],
    }),
  },

  // Workflows.
  "/v1/workflows/{id}": {
    put: v1({
      tag: "Workflows",
      summary: "Register or update a workflow",
      query: [
        { name: "name", schema: { type: ["string", "null"] }, description: "Display name" },
        {
          name: "trigger_url",
          schema: { type: ["string", "null"] },
          description: "Where deliveries to it are POSTed (refused like a webhook's url)",
        },
      ],
      jsonBody: true,
      ok: { status: 200, description: "The workflow", schema: data(ref("Workflow")) },
      errors: [400, 413, 429],
    }),
    get: v1({
      tag: "Workflows",
      summary: "Get a workflow",
      ok: { status: 200, description: "The workflow", schema: data(ref("Workflow")) },
      errors: [400, 404],
    }),
    delete: v1({
      tag: "Workflows",
      summary: "Delete a workflow",
      fields: false,
      ok: { status: 204, description: "Deleted" },
      errors: [400, 404],
    }),
  },
  "/v1/users/me/workflows": {
    get: v1({
      tag: "Workflows",
      summary: "List the user's workflows",
      paged: true,
      ok: { status: 200, description: "A page of workflows", schema: page("Workflow") },
      errors: [400],
    }),
  },

  // Subscriptions.
  "/v1/subscriptions": {
    post: v1({
      tag: "Subscriptions",
      summary: "Subscribe a listener to an emitter's channel (idempotent)",
      description:
        "Posting an existing (emitter_id, listener_id, event_name) triple answers with that subscription; with `filter` it replaces the subscription's filter (null clears it).",
      query: [
        ...subscriptionParams(true),
        {
          name: "filter",
          schema: { type: "object" },
          description:
            "Matched against each event's payload before any delivery or run (a JSON object; JSON text in the query string): dotted paths to a literal or to $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists, $startsWith, $contains; $and, $or, $not combine. At most 4096 characters, 10 levels, 64 conditions",
        },
      ],
      jsonBody: true,
      ok: { status: 200, description: "The subscription", schema: data(ref("Subscription")) },
      errors: [400, 404, 413, 429],
    }),
    delete: v1({
      tag: "Subscriptions",
      summary: "Delete a subscription",
      description: 'An absent event_name means "".',
      fields: false,
      query: subscriptionParams(true),
      ok: { status: 204, description: "Deleted" },
      errors: [400, 404],
    }),
  },
  "/v1/users/me/subscriptions": {
    get: v1({
      tag: "Subscriptions",
      summary: "List all the user's subscriptions (not paginated)",
      ok: { status: 200, description: "Every subscription", schema: list("Subscription") },
    }),
  },
  "/v1/auto_subscriptions": {
    post: v1({
      tag: "Subscriptions",
      summary: "Subscribe a listener to every source and workflow created afterwards",
      query: [
        { name: "listener_id", schema: str, description: "dc_…, p_… or wh_…", required: true },
        { ...eventName, required: true },
      ],
      jsonBody: true,
      ok: { status: 200, description: "The auto-subscription", schema: data(ref("AutoSubscription")) },
      errors: [400, 404, 413, 429],
    }),
  },

  // Webhooks.
  "/v1/webhooks": {
    get: v1({
      tag: "Webhooks",
      summary: "List the user's webhooks (the same list as GET /v1/users/me/webhooks)",
      paged: true,
      ok: { status: 200, description: "A page of webhooks (without user_id and secret)", schema: page("Webhook") },
      errors: [400],
    }),
    post: v1({
      tag: "Webhooks",
      summary: "Create a webhook",
      query: webhookParams(true),
      jsonBody: true,
      ok: { status: 200, description: "The webhook, with its signing_secret", schema: data(ref("Webhook")) },
      errors: [400, 413, 429],
    }),
  },
  "/v1/users/me/webhooks": {
    get: v1({
      tag: "Webhooks",
      summary: "List the user's webhooks",
      paged: true,
      ok: { status: 200, description: "A page of webhooks (without user_id and secret)", schema: page("Webhook") },
      errors: [400],
    }),
  },
  "/v1/webhooks/{id}": {
    get: v1({
      tag: "Webhooks",
      summary: "Get a webhook",
      ok: { status: 200, description: "The webhook", schema: data(ref("Webhook")) },
      errors: [404],
    }),
    put: v1({
      tag: "Webhooks",
      summary: "Update a webhook",
      query: [...webhookParams(false), { name: "active", schema: { type: "boolean" }, description: "Enabled flag" }],
      jsonBody: true,
      ok: { status: 200, description: "The webhook", schema: data(ref("Webhook")) },
      errors: [400, 404, 413],
    }),
    delete: v1({ tag: "Webhooks", summary: "Delete a webhook", fields: false, ok: { status: 204, description: "Deleted" }, errors: [404] }),
  },
  "/v1/webhooks/{id}/secret": {
    get: v1({
      tag: "Webhooks",
      summary: "Read the webhook's signing secret",
      ok: { status: 200, description: "The secret (Cache-Control: no-store)", schema: data(ref("SigningSecret")) },
      errors: [404],
    }),
  },
  "/v1/webhooks/{id}/secret/rotate": {
    post: v1({
      tag: "Webhooks",
      summary: "Rotate the signing secret; the old one keeps signing for the overlap",
      query: [{ name: "signing_secret", schema: { type: "string", pattern: "^whsec_" }, description: "The new secret (default: random)" }],
      jsonBody: true,
      ok: { status: 200, description: "The new secret", schema: data(ref("SecretRotation")) },
      errors: [400, 404, 413],
    }),
  },
  "/v1/webhooks/{id}/deliveries": {
    get: v1({
      tag: "Deliveries",
      summary: "The webhook's attempt log, newest first, optionally filtered",
      query: deliverySelectors,
      paged: true,
      ok: { status: 200, description: "A page of matching deliveries", schema: page("Delivery") },
      errors: [400, 404],
    }),
  },
  "/v1/webhooks/{id}/deliveries/replay": {
    post: v1({
      tag: "Deliveries",
      summary: "Re-queue every failed delivery the selectors match, progressively (or count them: dry_run)",
      description:
        "status defaults to (and may only be) failed. An identical request while the first replay is still queueing answers with its id and queues nothing twice.",
      query: [
        ...deliverySelectors,
        { name: "dry_run", schema: { type: "boolean" }, description: "true: only count the matching deliveries (200)" },
      ],
      jsonBody: true,
      ok: { status: 202, description: "Accepted: the replay's id and how many deliveries it matched", schema: data(ref("ReplayAccepted")) },
      alsoOk: { status: 200, description: "dry_run: how many deliveries a replay would re-queue now", schema: data(ref("ReplayCount")) },
      errors: [400, 404, 413],
    }),
  },
  "/v1/webhooks/{id}/replays/{replayId}": {
    get: v1({
      tag: "Deliveries",
      summary: "A bulk replay's progress (kept 24 hours)",
      ok: { status: 200, description: "The replay", schema: data(ref("Replay")) },
      errors: [404],
    }),
  },
  "/v1/webhooks/{id}/deliveries/{deliveryId}/retry": {
    post: v1({
      tag: "Deliveries",
      summary: "Re-queue a failed delivery",
      jsonBody: true,
      ok: { status: 202, description: "Queued", schema: data(ref("Requeued")) },
      errors: [400, 404, 409, 413],
    }),
  },

  // Users.
  "/v1/users/me": {
    get: v1({ tag: "Users", summary: "The authenticated user", ok: { status: 200, description: "The user", schema: data(ref("User")) } }),
  },

  // Admin API (ADMIN_TOKEN).
  "/admin/users": {
    post: {
      tag: "Admin",
      summary: "Create a user (the only answer that shows the full API key)",
      auth: "admin",
      storage: true,
      jsonBody: {
        type: "object",
        required: ["username", "email"],
        properties: { username: str, email: { type: "string", format: "email" }, plan: { type: "string", enum: ["free", "paid"] } },
      },
      ok: { status: 201, description: "The user with api_key", schema: data(ref("AdminUser")) },
      errors: [400, 409, 413],
    },
    get: {
      tag: "Admin",
      summary: "List users",
      auth: "admin",
      storage: true,
      ok: { status: 200, description: "Every user", schema: list("AdminUser") },
    },
  },
  "/admin/users/{id}": {
    delete: {
      tag: "Admin",
      summary: "Delete a user and all their data",
      auth: "admin",
      storage: true,
      ok: { status: 204, description: "Deleted" },
      errors: [404],
    },
  },
  "/admin/users/{id}/api_key": {
    post: {
      tag: "Admin",
      summary: "Rotate a user's API key (the old key answers 401 at once)",
      auth: "admin",
      storage: true,
      ok: { status: 200, description: "The new key", schema: data(ref("ApiKey")) },
      errors: [404],
    },
  },
  "/admin/queues": {
    get: {
      tag: "Admin",
      summary: "Queue dashboard (bull-board)",
      description:
        "Admin token as a Bearer header, or once as ?token= in a browser: the daemon then sets an HttpOnly, SameSite=Strict cookie scoped to /admin/queues and redirects to the URL without the token.",
      auth: "admin",
      query: [{ name: "token", schema: str, description: "The admin token (browsers)" }],
      ok: { status: 200, description: "HTML page", type: "text/html" },
      errors: [],
    },
  },
  "/admin/queues/{path}": {
    ...Object.fromEntries(
      ["get", "post", "put", "patch"].map((m) => [
        m,
        {
          tag: "Admin",
          summary: `The queue dashboard's own assets and JSON API (${m.toUpperCase()})`,
          description:
            m === "get"
              ? "Served by bull-board, e.g. GET /admin/queues/api/queues; not a stable interface."
              : "Served by bull-board; not a stable interface. With the cookie, the call must come from the dashboard's own origin (Sec-Fetch-Site: same-origin, or without it an Origin of this host or PUBLIC_URL), else 403 cross_origin_request; the Bearer header works from anywhere.",
          auth: "admin",
          ok: { status: 200, description: "bull-board's answer", type: "*/*" },
          errors: m === "get" ? [400, 404] : [400, 403, 404],
        } satisfies Operation,
      ]),
    ),
  },

  // HTTP source endpoints.
  ...Object.fromEntries(
    ["/e/{token}", "/e/{token}/{path}"].map((p) => [
      p,
      Object.fromEntries(
        ["get", "post", "put", "patch", "delete", "options"].map((m) => [
          m,
          {
            tag: "Source endpoints",
            summary: `An HTTP source's endpoint_url${p.endsWith("{path}") ? " and any sub-path" : ""} (${m.toUpperCase()})`,
            description:
              "Any method, any body (up to the body limit). Without a custom response the request is made durable and answered {success: true}; with customResponse the source's run answers. When the source's HTTP prop has auth, the request is verified first, on its exact body bytes: a failure is a 401 and nothing runs. Every answer carries Content-Security-Policy: sandbox allow-scripts allow-forms, X-Content-Type-Options: nosniff and Referrer-Policy: no-referrer, which a source cannot change, and never Set-Cookie. Also served on ENDPOINT_PORT, under ENDPOINT_URL.",
            auth: "none",
            storage: true,
            ok: { status: 200, description: "{success: true}, or the source's own answer", type: "*/*" },
            errors: [401, 404, 413, 429, 502, 504],
          } satisfies Operation,
        ]),
      ),
    ]),
  ),
};

const ERROR_RESPONSES: Readonly<Record<number, [string, string]>> = {
  400: ["BadRequest", "Invalid input (the message names the parameter) or malformed JSON"],
  401: ["Unauthorized", "Missing, invalid or revoked credentials"],
  403: ["Forbidden", "Valid credentials this request may not use (a dashboard cookie from another origin)"],
  404: ["NotFound", "Unknown id, an id owned by another user, or (admin API) ADMIN_TOKEN unset"],
  405: ["MethodNotAllowed", "Wrong method on a known path; Allow names the right ones"],
  409: ["Conflict", "Conflicts with existing state"],
  413: ["PayloadTooLarge", "Body over the limit (BODY_LIMIT_BYTES) or a quota of bytes"],
  415: ["UnsupportedMediaType", "A JSON endpoint was given a body that is not JSON"],
  429: ["TooManyRequests", "A limit, quota or rate was hit; Retry-After says when to retry"],
  500: ["InternalError", "A bug; the body is generic, details are in the logs"],
  502: ["BadGateway", "A source's run failed to answer (customResponse)"],
  503: ["Unavailable", "Redis is unavailable or stalled; retry shortly"],
  504: ["GatewayTimeout", "A source's run did not answer in time (customResponse)"],
};

function errorResponses(): Json {
  const retryAfter = { "Retry-After": { schema: { type: "integer" }, description: "Seconds to wait" } };
  return Object.fromEntries(
    Object.values(ERROR_RESPONSES).map(([name, description]) => [
      name,
      {
        description,
        ...(name === "TooManyRequests" || name === "Unavailable" ? { headers: retryAfter } : {}),
        ...(name === "MethodNotAllowed" ? { headers: { Allow: { schema: str, description: "Allowed methods" } } } : {}),
        content: { "application/json": { schema: ref("Error") } },
      },
    ]),
  );
}

const paramRef = (name: string): Json => ({ $ref: `#/components/parameters/${name}` });

const COMMON_PARAMETERS: Json = {
  include: {
    name: "include",
    in: "query",
    schema: str,
    description: "Comma-separated top-level fields of each object in data to keep (default all)",
  },
  exclude: { name: "exclude", in: "query", schema: str, description: "Comma-separated top-level fields of each object in data to drop" },
  limit: { name: "limit", in: "query", schema: { type: "integer", minimum: 1, maximum: 100, default: 10 }, description: "Page size" },
  after: { name: "after", in: "query", schema: str, description: "Cursor: items after it" },
  before: { name: "before", in: "query", schema: str, description: "Cursor: items before it" },
};

function operationObject(path: string, method: string, op: Operation): Json {
  const pathParams = [...path.matchAll(/\{(\w+)\}/g)].map((m) => {
    const p = PATH_PARAMS[m[1] as string];
    if (!p) throw new Error(`no description of path parameter ${m[1]} (${path})`);
    return { name: p.name, in: "path", required: true, schema: p.schema, description: p.description };
  });
  // Parameters a JSON body may carry instead are never required in the query.
  const query = (op.query ?? []).map((p) => ({
    name: p.name,
    in: "query",
    ...(p.required && !op.jsonBody ? { required: true } : {}),
    schema: p.schema,
    description: p.required ? `${p.description} (required${op.jsonBody ? ", in the query or the JSON body" : ""})` : p.description,
  }));
  const parameters = [
    ...pathParams,
    ...query,
    ...(op.paged ? ["limit", "after", "before"].map(paramRef) : []),
    ...(op.fields ? ["include", "exclude"].map(paramRef) : []),
  ];

  const statuses = new Set<number>(op.errors ?? []);
  if (op.auth !== "none") statuses.add(401);
  if (op.auth === "admin") statuses.add(404);
  if (op.jsonBody) for (const s of [400, 413, 415]) statuses.add(s);
  if (op.storage) statuses.add(503);
  if (path.startsWith("/v1/") && op.auth === "user") statuses.add(503);
  const responses: Json = {
    [op.ok.status]: {
      description: op.ok.description,
      ...(op.ok.schema ? { content: { [op.ok.type ?? "application/json"]: { schema: op.ok.schema } } } : {}),
      ...(!op.ok.schema && op.ok.type ? { content: { [op.ok.type]: {} } } : {}),
    },
  };
  if (op.alsoOk)
    responses[op.alsoOk.status] = { description: op.alsoOk.description, content: { "application/json": { schema: op.alsoOk.schema } } };
  for (const s of [...statuses].sort()) {
    const entry = ERROR_RESPONSES[s];
    if (entry) responses[s] = { $ref: `#/components/responses/${entry[0]}` };
  }
  responses[500] = { $ref: "#/components/responses/InternalError" };

  let requestBody: Json | undefined;
  if (op.jsonBody) {
    const schema =
      op.jsonBody === true
        ? { type: "object", properties: Object.fromEntries((op.query ?? []).map((p) => [p.name, p.schema])) }
        : op.jsonBody;
    requestBody = {
      required: op.jsonBody !== true,
      description: op.jsonBody === true ? "The parameters as a JSON object (wins over the query string)" : undefined,
      content: { "application/json": { schema } },
    };
  }
  const security =
    op.auth === "user"
      ? [{ apiKey: [] }, ...(op.sseToken ? [{ sseToken: [] }] : [])]
      : op.auth === "admin"
        ? [{ adminToken: [] }, ...(path.startsWith("/admin/queues") ? [{ adminCookie: [] }] : [])]
        : [];
  return JSON.parse(
    JSON.stringify({
      tags: [op.tag],
      summary: op.summary,
      description: op.description,
      operationId: `${method}${path.replace(/[{}$]/g, "").replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? "").toUpperCase())}`,
      security,
      parameters: parameters.length > 0 ? parameters : undefined,
      requestBody,
      responses,
    }),
  ) as Json;
}

export interface DocumentOptions {
  /** The daemon's version (info.version). */
  readonly version: string;
}

/** The whole document. Pure: the same options give the same document. */
export function buildOpenApiDocument(opts: DocumentOptions): Json {
  const paths: Json = {};
  for (const [path, methods] of Object.entries(OPERATIONS)) {
    paths[path] = Object.fromEntries(Object.entries(methods).map(([m, op]) => [m, operationObject(path, m, op)]));
  }
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://spec.openapis.org/oas/3.1/dialect/base",
    info: {
      title: "Tributary",
      version: opts.version,
      description:
        "A self-hosted event relay daemon speaking the Pipedream REST API v1, with its extensions: workflow ingress, " +
        "webhook secrets and attempt logs, the admin API, HTTP source endpoints and the operational endpoints. " +
        "Errors are always {error, code}. Every /v1 endpoint accepts include and exclude (top-level fields of " +
        "each object in data), so any documented field may be absent when they are used. POST and PUT take their " +
        "parameters from the query string or a JSON body (body wins).",
      license: { name: "MIT", identifier: "MIT" },
    },
    tags: [
      "Components",
      "Sources",
      "Events",
      "Ingress",
      "Workflows",
      "Subscriptions",
      "Webhooks",
      "Deliveries",
      "Users",
      "Admin",
      "Source endpoints",
      "Operations",
    ].map((name) => ({ name })),
    paths,
    components: {
      schemas: componentSchemas(),
      parameters: COMMON_PARAMETERS,
      responses: errorResponses(),
      securitySchemes: {
        apiKey: { type: "http", scheme: "bearer", description: "Authorization: Bearer <API key> (a user's key)" },
        adminToken: {
          type: "http",
          scheme: "bearer",
          description: "Authorization: Bearer <ADMIN_TOKEN>; the admin API answers 404 when ADMIN_TOKEN is unset",
        },
        sseToken: {
          type: "apiKey",
          in: "query",
          name: "token",
          description: "A read-only browser token from POST /v1/sources/{id}/sse_tokens, for that source's live-tail streams only",
        },
        adminCookie: {
          type: "apiKey",
          in: "cookie",
          name: "tributary_admin",
          description: "Set by /admin/queues?token=<ADMIN_TOKEN> for browsers (HttpOnly, SameSite=Strict, Path=/admin/queues)",
        },
      },
    },
  };
}
