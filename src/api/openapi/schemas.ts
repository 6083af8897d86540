import { z } from "zod";

/**
 * The shapes the API answers with, as zod schemas registered under the names the OpenAPI document
 * gives them (`#/components/schemas/<id>`). They describe the views the routes send
 * (services' `*View` functions, store records); the document test validates real responses
 * against them, so a field added to a view without being added here fails a test.
 *
 * Objects are strict (`additionalProperties: false`) on purpose: that is what catches drift.
 * `include`/`exclude` may remove any field, which is why the document says so on every operation
 * instead of marking every field optional.
 */
export const schemas = z.registry<{ id: string }>();
const descriptions = new Map<string, string>();

const named = <T extends z.ZodType>(id: string, schema: T, description?: string): T => {
  schemas.add(schema, { id });
  if (description) descriptions.set(id, description);
  return schema;
};

const epochSeconds = z.int().min(0).meta({ description: "Seconds since the Unix epoch" });
const idOf = (prefix: string, what: string) =>
  z
    .string()
    .regex(new RegExp(`^${prefix}`))
    .meta({ description: `${what} id (${prefix} prefix)` });

export const ErrorBody = named(
  "Error",
  z.object({
    error: z.string().min(1).meta({ description: "Human-readable message; names the parameter on a 400" }),
    code: z
      .string()
      .regex(/^[a-z][a-z0-9_]*$/)
      .meta({ description: "Stable snake_case code, e.g. invalid_parameter, unauthorized, not_found, rate_limited" }),
  }),
  "Every error answer: {error, code}. 500 carries a generic message; details stay in the logs.",
);

export const PageInfo = named(
  "PageInfo",
  z.object({
    total_count: z.int().min(0),
    count: z.int().min(0),
    start_cursor: z.string().nullable().meta({ description: "Cursor of the first item; null on an empty page" }),
    end_cursor: z.string().nullable().meta({ description: "Cursor of the last item; null on an empty page" }),
  }),
);

export const Prop = named(
  "ConfigurableProp",
  z.object({
    name: z.string(),
    type: z
      .string()
      .meta({ description: "string, integer, boolean, object, string[], $.interface.http, $.interface.timer, $.service.db, …" }),
    label: z.string().optional(),
    description: z.string().optional(),
    optional: z.boolean().optional(),
    default: z.unknown().optional(),
    secret: z.boolean().optional(),
    min: z.number().optional(),
    max: z.number().optional(),
    options: z.array(z.unknown()).optional(),
    customResponse: z.boolean().optional().meta({ description: "Only on $.interface.http: the run answers the HTTP request itself" }),
    remoteOptions: z.boolean().optional().meta({ description: "The component computes its options with a function" }),
  }),
);

export const Component = named(
  "Component",
  z.object({
    id: idOf("sc_", "Component"),
    key: z.string().nullable(),
    code: z.string(),
    code_hash: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .meta({ description: "SHA-256 hex of the code" }),
    name: z.string(),
    version: z.string(),
    description: z.string().nullable(),
    configurable_props: z.array(Prop),
    component_url: z.string().nullable().meta({ description: "Where the code was fetched from, if it was" }),
    created_at: epochSeconds,
    updated_at: epochSeconds,
  }),
);

export const Source = named(
  "Source",
  z.object({
    id: idOf("dc_", "Source"),
    user_id: idOf("u_", "Owner").optional().meta({ description: "Present in create and update answers, absent in lists" }),
    component_id: idOf("sc_", "Component"),
    configured_props: z.record(z.string(), z.unknown()).meta({
      description:
        "Prop values by name; http props are {endpoint_url} plus {auth} when set (inbound verification, without its secret or token: {type, preset} or {type, header, algorithm, encoding, prefix}), timer props {cron, interval_seconds}",
    }),
    active: z.boolean(),
    created_at: epochSeconds,
    updated_at: epochSeconds,
    name: z.string(),
    name_slug: z.string(),
  }),
);

export const Subscription = named(
  "Subscription",
  z.object({
    id: idOf("sub_", "Subscription"),
    emitter_id: z.string().meta({ description: "dc_…, p_…, wh_… (health events) or the globs dc_*, p_* and wh_*" }),
    listener_id: z.string().meta({ description: "dc_…, p_… or wh_…" }),
    event_name: z.string().meta({ description: 'Channel; "" when none was given' }),
    filter: z
      .record(z.string(), z.unknown())
      .nullable()
      .meta({ description: "The filter events must match to reach the listener (SPEC §12); null when none" }),
  }),
);

export const AutoSubscription = named(
  "AutoSubscription",
  z.object({ id: idOf("asub_", "Auto-subscription"), listener_id: z.string(), event_name: z.string() }),
);

export const Webhook = named(
  "Webhook",
  z.object({
    id: idOf("wh_", "Webhook"),
    user_id: idOf("u_", "Owner").optional().meta({ description: "Absent in lists" }),
    name: z.string().nullable(),
    description: z.string().nullable(),
    url: z.string(),
    active: z.boolean(),
    created_at: epochSeconds,
    updated_at: epochSeconds,
    signing_secret: z
      .string()
      .regex(/^whsec_/)
      .optional()
      .meta({ description: "Standard Webhooks secret (whsec_ + base64); absent in lists" }),
    headers: z
      .record(z.string(), z.string())
      .nullable()
      .meta({ description: "Static request headers added to every attempt; null when none" }),
    timeout_ms: z.number().int().nullable().meta({ description: "Attempt timeout (100..60000 ms); null = DELIVERY_TIMEOUT_MS" }),
    retry_schedule: z.string().nullable().meta({ description: "Delays between attempts (5s,5m,…); null = DELIVERY_RETRY_SCHEDULE" }),
    rate_limit_per_second: z
      .number()
      .int()
      .nullable()
      .meta({ description: "At most this many attempts start per second; null = no limit" }),
    circuit: z
      .object({
        state: z.enum(["closed", "open", "half_open"]),
        consecutive_failures: z.number().int().min(0),
        opened_at: epochSeconds
          .nullable()
          .meta({ description: "When the circuit opened (first opening of this outage); null while closed" }),
        next_probe_at: epochSeconds
          .nullable()
          .meta({ description: "When the cool-down ends and one probe attempt may go (in the past: due); null while closed" }),
      })
      .optional()
      .meta({ description: "The circuit breaker (CIRCUIT_FAILURE_THRESHOLD, CIRCUIT_COOLDOWN); absent in lists" }),
    filtered: z
      .object({
        count: z.number().int().min(0).meta({ description: "Events its subscriptions' filters kept from this webhook, in all" }),
        last_event_id: z.string().meta({ description: "The latest such event" }),
        last_at: epochSeconds.meta({ description: "When fan-out met it" }),
      })
      .optional()
      .meta({
        description:
          "Why an event did not arrive: a subscription filter refused it (no delivery is made, so none shows in the attempt log); only in GET /webhooks/{id}, and absent until a filter has refused an event",
      }),
  }),
);

export const SigningSecret = named("SigningSecret", z.object({ signing_secret: z.string().regex(/^whsec_/) }));

export const SecretRotation = named(
  "SecretRotation",
  z.object({
    signing_secret: z.string().regex(/^whsec_/),
    previous_secret_expires_at: z.iso.datetime().nullable().meta({ description: "When the replaced secret stops signing (ISO 8601)" }),
  }),
);

export const Workflow = named(
  "Workflow",
  z.object({
    id: z.string().regex(/^p_[A-Za-z0-9_-]{1,64}$/),
    name: z.string().nullable(),
    trigger_url: z.string().nullable().meta({ description: "Where deliveries to this workflow are POSTed" }),
    created_at: epochSeconds,
    updated_at: epochSeconds,
  }),
);

export const EventSummary = named(
  "EventSummary",
  z.object({
    id: z
      .string()
      .regex(/^\d+-\d+$/)
      .meta({ description: "<ms>-<seq>, time-ordered" }),
    indexed_at_ms: z.int().min(0),
    event: z.unknown().meta({
      description:
        "What was emitted ({raw_event} for a workflow emit); without expand=event, a JSON text of its first 1024 bytes when larger",
    }),
    metadata: z.object({
      emitter_id: z.string(),
      emit_id: z.string(),
      name: z.string().meta({ description: 'Channel; "" for the default channel' }),
      summary: z.string().optional(),
      id: z.union([z.string(), z.number()]).optional(),
      ts: z.number().optional(),
    }),
    truncated: z.literal(true).optional(),
  }),
);

export const EventId = named("EventId", z.object({ id: z.string().regex(/^\d+-\d+$/) }));

const counted = z.object({ limit: z.int().nullable(), used: z.int().min(0) });
export const UserLimits = named(
  "UserLimits",
  z.object({
    workflows: counted,
    sources: counted,
    components: counted,
    webhooks: counted,
    subscriptions: counted,
    auto_subscriptions: counted,
    component_bytes: counted,
    streams: counted.meta({
      description: "Event streams (one per emitter and event name); an emit onto a new name past the limit is a 429",
    }),
    stored_bytes: counted.meta({
      description: "Bytes of the events the user's streams keep (their JSON records); an emit that would grow past the limit is a 429",
    }),
    listeners_per_emitter: z.object({ limit: z.int().nullable() }),
    ingress_events_per_second: z.object({ limit: z.int().nullable(), burst: z.int().nullable() }),
  }),
  "Per-user limits (null = unlimited) and what is in use",
);

const userBase = { id: idOf("u_", "User"), username: z.string(), email: z.string(), limits: UserLimits };
export const User = named(
  "User",
  z.union([
    z.object({
      ...userBase,
      api_key: z.string().meta({ description: "Masked: all but the last 4 characters are *" }),
      daily_compute_time_quota: z.int().meta({ description: "Milliseconds" }),
      daily_compute_time_used: z.int(),
      daily_invocations_quota: z.int(),
      daily_invocations_used: z.int(),
    }),
    z.object({
      ...userBase,
      billing_period_start_ts: epochSeconds,
      billing_period_end_ts: epochSeconds,
      billing_period_invocations: z.int(),
    }),
  ]),
  "Free plan (quotas) or paid plan (billing period)",
);

export const DeliveryAttempt = named(
  "DeliveryAttempt",
  z.object({
    attempt: z.int().min(1),
    at: z.string().meta({ description: "ISO 8601 start of the attempt" }),
    status_code: z.int().nullable(),
    duration_ms: z.number().min(0),
    error: z.string().nullable(),
  }),
);

export const Delivery = named(
  "Delivery",
  z.object({
    id: idOf("d_", "Delivery"),
    event_id: z.string(),
    emitter_id: z.string(),
    event_name: z.string(),
    status: z.enum(["pending", "delivered", "failed"]),
    attempts: z.array(DeliveryAttempt),
    created_at: epochSeconds,
    updated_at: epochSeconds,
  }),
);

export const AdminUser = named(
  "AdminUser",
  z.object({
    id: idOf("u_", "User"),
    username: z.string(),
    email: z.string(),
    plan: z.enum(["free", "paid"]),
    created_at: epochSeconds,
    api_key: z.string().optional().meta({ description: "The full key: only in the create answer" }),
  }),
);

export const ApiKey = named("ApiKey", z.object({ id: idOf("u_", "User"), api_key: z.string() }));

export const Status = named("Status", z.object({ status: z.string() }));

/** `{id, status}` of a re-queued delivery. */
export const Requeued = named("Requeued", z.object({ id: z.string(), status: z.literal("pending") }));

/** A bulk replay's dry run (SPEC §12). */
export const ReplayCount = named("ReplayCount", z.object({ matched: z.int().min(0) }));

/** A bulk replay as acknowledged with 202 (the same id again for an identical request while it queues). */
export const ReplayAccepted = named("ReplayAccepted", z.object({ id: idOf("rpl_", "Replay"), matched: z.int().min(0) }));

const count = z.int().min(0);
/** A bulk replay's progress (SPEC §12; `GET /v1/webhooks/{id}/replays/{replayId}`). */
export const Replay = named(
  "Replay",
  z.object({
    id: idOf("rpl_", "Replay"),
    webhook_id: idOf("wh_", "Webhook"),
    state: z.enum(["queueing", "running", "done"]).meta({
      description: "queueing: deliveries still to be re-queued; running: all queued, some not settled; done",
    }),
    selectors: z.object({
      status: z.literal("failed").optional(),
      since: epochSeconds.optional(),
      until: epochSeconds.optional(),
      event_name: z.string().optional(),
    }),
    matched: count.meta({ description: "Failed deliveries the selectors matched when the replay was asked for" }),
    queued: count.meta({ description: "Deliveries re-queued so far" }),
    delivered: count.meta({ description: "Re-queued deliveries delivered since" }),
    failed: count.meta({ description: "Re-queued deliveries that used their fresh attempts and failed again" }),
    pending: count.meta({ description: "matched - delivered - failed - skipped: still to be queued or settled" }),
    skipped: count.meta({ description: "Matched deliveries no longer failed when their turn came (replayed otherwise, or gone)" }),
    created_at: epochSeconds,
    expires_at: epochSeconds,
  }),
);

/** The OpenAPI `components.schemas` of every registered schema, refs pointing inside the document. */
export function componentSchemas(): Record<string, object> {
  const out = z.toJSONSchema(schemas, {
    target: "draft-2020-12",
    io: "output",
    unrepresentable: "any",
    uri: (id) => `#/components/schemas/${id}`,
  }).schemas;
  // Each schema is a member of the OpenAPI document, not a standalone JSON Schema resource.
  return Object.fromEntries(
    Object.entries(out).map(([id, s]) => {
      const { $schema: _s, $id: _i, ...rest } = s as Record<string, unknown>;
      const description = descriptions.get(id);
      return [id, description ? { description, ...rest } : rest];
    }),
  );
}
