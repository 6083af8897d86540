import { z } from "zod";
import { MAX_CIRCUIT_COOLDOWN_MS } from "../domain/circuit.js";
import { parseDuration, parseDurationList } from "../domain/duration.js";
import type { UserLimits } from "../domain/limits.js";
import { FILTER_BUDGET_DEFAULTS } from "../domain/filter-budget.js";
import { DEFAULT_OUTBOX_SHARDS, MAX_SHARDS } from "../domain/shards.js";
import { DEFAULT_MAX_RETRY_SPAN_HOURS } from "../domain/webhook-settings.js";
import { type HostPort, parseHostList } from "./host-list.js";

/**
 * The one configuration schema. Every setting is an environment variable; its default is here and
 * documented in `config/defaults.env` (a unit test keeps the two in step). `loadConfig` is the only
 * reader of the environment and runs once, in `main.ts`.
 */
const bool = z
  .enum(["true", "false", "1", "0", "yes", "no"], { message: "accepts true or false" })
  .transform((v) => v === "true" || v === "1" || v === "yes");
const int = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, { message: `accepts an integer from ${min} to ${max}` })
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(min, { message: `accepts an integer from ${min} to ${max}` })
        .max(max, { message: `accepts an integer from ${min} to ${max}` }),
    );
const hostList = z.string().transform((s, ctx) => {
  const parsed = parseHostList(s);
  if (!parsed.ok) {
    ctx.addIssue({ code: "custom", message: parsed.message });
    return z.NEVER;
  }
  return parsed.nodes;
});
const ROLE_NAMES = ["api", "worker", "scheduler"] as const;
export type Role = (typeof ROLE_NAMES)[number];

export const envSchema = z.object({
  /** TCP port of the HTTP server. */
  PORT: int(0, 65535).default(3000),
  /** Interface the HTTP server binds. */
  HOST: z.string().min(1).default("0.0.0.0"),
  /**
   * Port of a second listener (on HOST) serving only /healthz, /readyz and /metrics; unset = none.
   * It gives processes without the api role (which serve no other HTTP) probes and a scrape target.
   */
  OPS_PORT: int(0, 65535).optional(),
  /** Redis to use; unset = start an embedded redis-server from PATH. */
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, { message: "accepts a redis:// or rediss:// URL" })
    .optional(),
  // High availability (SPEC §8). One shape at most: REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES.
  /** Sentinels to ask for the master of REDIS_SENTINEL_NAME (host:port,...). */
  REDIS_SENTINELS: hostList.optional(),
  /** The master group the sentinels monitor (`sentinel monitor <name> ...`). */
  REDIS_SENTINEL_NAME: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,64}$/, { message: "accepts 1-64 characters of [A-Za-z0-9._-]" })
    .optional(),
  /** Password of the sentinels themselves, when they require one (REDIS_PASSWORD is the data nodes'). */
  REDIS_SENTINEL_PASSWORD: z.string().min(1).optional(),
  /** Seed nodes of a Redis Cluster (host:port,...): the key space is sharded over its slots (OUTBOX_SHARDS). */
  REDIS_CLUSTER_NODES: hostList.optional(),
  /** Password of the Redis data nodes, for every shape (overrides one in REDIS_URL). */
  REDIS_PASSWORD: z.string().min(1).optional(),
  /** ACL user of the Redis data nodes, for every shape (overrides one in REDIS_URL). */
  REDIS_USERNAME: z.string().min(1).optional(),
  /** Replicas that must confirm each acknowledged write (WAIT) before a 2xx; 0 = no WAIT. */
  REDIS_MIN_REPLICAS_ACK: int(0, 100).default(0),
  /** How long that WAIT may take; fewer confirmations by then answer 503 with Retry-After: 1. */
  REDIS_REPLICA_ACK_TIMEOUT_MS: int(1, 600_000).default(1000),
  /**
   * The longest a request waits for Redis while it is unreachable (a failover): request-path
   * commands fail (503) after min(this, REDIS_COMMAND_TIMEOUT_MS), and a connection attempt to a
   * node that does not answer is given up after this long.
   */
  REDIS_FAILOVER_TIMEOUT_MS: int(100, 600_000).default(10_000),
  /** Prefix of every Redis key and BullMQ queue; lets several deployments (or tests) share one Redis. */
  REDIS_KEY_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,32}$/, { message: "accepts 1-32 characters of [A-Za-z0-9_-]" })
    .default("trib"),
  /**
   * Shards of the key space (SPEC §8 "Sharded outbox"): outbox streams and hash tags users are
   * spread over. Fixed for the life of a deployment: stored in Redis at first start, and a process
   * whose value differs refuses to start (store/layout.ts).
   */
  OUTBOX_SHARDS: int(1, MAX_SHARDS).default(DEFAULT_OUTBOX_SHARDS),
  /**
   * How long a request waits for one Redis reply before it answers 503 (a stalled or unreachable
   * Redis). Applies to the connections requests use; blocking readers and queue workers wait.
   */
  REDIS_COMMAND_TIMEOUT_MS: int(100, 600_000).default(5_000),
  /** Where the embedded redis-server keeps its append-only file (under `redis/`, mode 0700). */
  DATA_DIR: z.string().min(1).default("./data"),
  /** Base URL HTTP source endpoint URLs are built from; default http://localhost:$PORT. */
  PUBLIC_URL: z
    .string()
    .regex(/^https?:\/\/[^/\s]+/, { message: "accepts an http(s) URL" })
    .optional(),
  /**
   * Base URL of HTTP source endpoint URLs when endpoints have an origin of their own (another host
   * or port than PUBLIC_URL's, which serves the admin dashboard); default PUBLIC_URL, or
   * http://localhost:$ENDPOINT_PORT with ENDPOINT_PORT.
   */
  ENDPOINT_URL: z
    .string()
    .regex(/^https?:\/\/[^/\s]+/, { message: "accepts an http(s) URL" })
    .optional(),
  /** Port of a second listener (on HOST, api role) serving only HTTP source endpoints; unset = none. */
  ENDPOINT_PORT: int(0, 65535).optional(),
  /** Enables the admin API; unset = the admin API answers 404. */
  ADMIN_TOKEN: z.string().min(8, { message: "accepts a token of at least 8 characters" }).optional(),
  /** Roles this process runs: comma list of api, worker, scheduler. */
  ROLES: z
    .string()
    .default("api,worker,scheduler")
    .transform((s) =>
      s
        .split(",")
        .map((r) => r.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.enum(ROLE_NAMES, { message: "accepts a comma list of api, worker, scheduler" })).min(1)),
  /** Lets deliveries and fetches reach loopback, private and link-local addresses. */
  ALLOW_PRIVATE_DESTINATIONS: bool.default(false),
  /** Delays between delivery attempts (integer + ms|s|m|h); attempts = delays + 1. Jitter ±20 %. */
  DELIVERY_RETRY_SCHEDULE: z
    .string()
    .default("5s,5m,30m,2h,5h,10h,10h")
    .transform((s, ctx) => {
      const list = parseDurationList(s);
      if (!list) {
        ctx.addIssue({ code: "custom", message: "accepts a comma list of durations such as 5s,5m,30m (units ms, s, m, h)" });
        return z.NEVER;
      }
      return list;
    }),
  /** The longest the delays of one retry schedule may add up to (DELIVERY_RETRY_SCHEDULE and each webhook's retry_schedule). */
  MAX_RETRY_SPAN_HOURS: int(1, 100_000).default(DEFAULT_MAX_RETRY_SPAN_HOURS),
  /** Per-attempt delivery timeout. */
  DELIVERY_TIMEOUT_MS: int(100, 600_000).default(15_000),
  /** Concurrent delivery attempts per worker process. */
  DELIVERY_CONCURRENCY: int(1, 1000).default(64),
  /** First attempts fan-out makes directly, in flight at once per worker process; 0 queues every delivery. */
  DELIVERY_DIRECT_CONCURRENCY: int(0, 1000).default(64),
  /** Delivery attempts in flight per user, per worker process (direct and queued together); 0 = no cap. */
  DELIVERY_CONCURRENCY_PER_USER: int(0, 10_000).default(96),
  /** Delivery attempts in flight per destination (URL origin), per worker process; 0 = no cap. */
  DELIVERY_CONCURRENCY_PER_DESTINATION: int(0, 10_000).default(64),
  /** Consecutive failed attempts to one webhook that open its circuit (SPEC §12). */
  CIRCUIT_FAILURE_THRESHOLD: int(1, 1_000_000).default(10),
  /** First cool-down of an open circuit (integer + ms|s|m|h, at most 1h); doubled per consecutive opening up to 1h. */
  CIRCUIT_COOLDOWN: z
    .string()
    .default("30s")
    .transform((s, ctx) => {
      const ms = parseDuration(s);
      if (ms === undefined || ms < 1 || ms > MAX_CIRCUIT_COOLDOWN_MS) {
        ctx.addIssue({ code: "custom", message: "accepts a duration from 1ms to 1h such as 30s (units ms, s, m, h)" });
        return z.NEVER;
      }
      return ms;
    }),
  /** Deliveries kept per webhook in the attempt log. */
  DELIVERY_LOG_LIMIT: int(10, 100_000).default(1000),
  /** Deliveries bulk replays re-queue per second, all replays together, shared between users in turn (SPEC §12). */
  REPLAY_RATE_PER_SECOND: int(1, 100_000).default(100),
  /**
   * How long a webhook's previous signing secret stays in effect after a rotation (deliveries are
   * signed with both meanwhile); Svix's 24 h by default, at most 30 days, 0 = it ends at once.
   */
  WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS: int(0, 2_592_000).default(86_400),
  /** Smallest accepted timer interval. */
  TIMER_MIN_INTERVAL_SECONDS: int(1, 86_400).default(15),
  /** Largest accepted request body (Pipedream's limit is 512 KB). */
  BODY_LIMIT_BYTES: int(1024, 64 * 1024 * 1024).default(512 * 1024),
  /** Free plan: source runs per UTC day. */
  FREE_DAILY_INVOCATIONS_QUOTA: int(0, 1_000_000_000).default(10_000),
  /** Free plan: sandbox compute time per UTC day, in milliseconds. */
  FREE_DAILY_COMPUTE_TIME_QUOTA_MS: int(0, 1_000_000_000_000).default(1_800_000),
  /** Memory limit of one sandbox isolate. */
  SANDBOX_MEMORY_MB: int(8, 4096).default(64),
  /** Time limit of one source run (or hook) in the sandbox. */
  SANDBOX_TIMEOUT_MS: int(10, 600_000).default(10_000),
  /** Packages component code may require/import (comma list); bundled with esbuild. */
  SANDBOX_ALLOWED_PACKAGES: z
    .string()
    .default("@pipedream/platform")
    .transform((s) =>
      s
        .split(",")
        .map((p) => p.trim())
        .filter(Boolean),
    ),
  /** Concurrent source runs per worker process (docs/decisions.md "Source run concurrency"). */
  SOURCE_RUN_CONCURRENCY: int(1, 256).default(16),
  /** A user's runs at most in the run stream at once; past it they are parked in order until one settles (docs/guide/writing-sources.md). */
  SOURCE_RUN_STREAM_PER_USER: int(1, 1_000_000).default(32),
  /** customResponse runs of one source answered at once per API process (past it: 429). */
  SOURCE_INLINE_CONCURRENCY: int(1, 256).default(2),
  /** Lifecycle hooks (deploy, activate, deactivate) of one user running at once per process; more wait. */
  SOURCE_HOOK_CONCURRENCY_PER_USER: int(1, 256).default(2),
  /** Isolates (one per user) for customResponse runs per API process; past it a request waits briefly, then 503. */
  SOURCE_INLINE_ISOLATES: int(1, 1024).default(16),
  /** Average HTTP requests per second accepted by one source endpoint (burst is 2x). */
  SOURCE_HTTP_RATE_PER_SECOND: int(1, 100_000).default(10),
  // Per-user limits (docs/security.md); 0 = unlimited. Past a count: 429 limit_exceeded.
  /** Workflows one user may have (registered on first sight, PUT, or a subscription naming one). */
  MAX_WORKFLOWS_PER_USER: int(0, 1_000_000_000).default(1000),
  /** Sources one user may have. */
  MAX_SOURCES_PER_USER: int(0, 1_000_000_000).default(1000),
  /** Saved components one user may have. */
  MAX_COMPONENTS_PER_USER: int(0, 1_000_000_000).default(1000),
  /** Webhooks one user may have. */
  MAX_WEBHOOKS_PER_USER: int(0, 1_000_000_000).default(1000),
  /** Subscriptions one user may have (including those made from auto-subscriptions). */
  MAX_SUBSCRIPTIONS_PER_USER: int(0, 1_000_000_000).default(10_000),
  /** Auto-subscriptions one user may have. */
  MAX_AUTO_SUBSCRIPTIONS_PER_USER: int(0, 1_000_000_000).default(100),
  /** Bytes one user's saved components may take: each one's record (code, metadata) plus its compiled bundle. */
  MAX_COMPONENT_BYTES_PER_USER: int(0, 1_000_000_000_000).default(100 * 1024 * 1024),
  /** Event streams one user may have (one per emitter and event name); an emit onto a new name past it is a 429. */
  MAX_STREAMS_PER_USER: int(0, 1_000_000_000).default(10_000),
  /** MiB the events kept in one user's streams may take (their summary records); an emit that would grow past it is a 429. */
  MAX_STORED_MB_PER_USER: int(0, 1_000_000_000).default(100),
  /** Subscriptions one event may match: those of its emitter on its channel plus the matching glob's. */
  MAX_LISTENERS_PER_EMITTER: int(0, 1_000_000_000).default(100),
  /** Events per second one user may send in: workflow emits (each event of a batch) and HTTP source requests. */
  INGRESS_EVENTS_PER_SECOND_PER_USER: int(0, 1_000_000_000).default(1000),
  /** Events one user may send at once before the per-second rate applies; larger requests are a 413. */
  INGRESS_BURST_EVENTS_PER_USER: int(1, 1_000_000_000).default(5000),
  /**
   * Subscription filters (docs/security.md "Filter budget"): visits (a condition tested, an array
   * element or object key compared, a character searched) all the filters of one event may make;
   * past it the rest answer "too costly" and the event is not delivered to those listeners.
   */
  FILTER_VISITS_PER_EVENT: int(1000, 1_000_000_000).default(FILTER_BUDGET_DEFAULTS.perEvent),
  /** Visits one user's events may spend on filters per second and worker process (a one-second burst); 0 = no per-user bound. */
  FILTER_VISITS_PER_SECOND_PER_USER: int(0, 1_000_000_000_000).default(FILTER_BUDGET_DEFAULTS.perSecondPerUser),
  /** Live tail (SPEC §9): how long a browser token from POST /v1/sources/{id}/sse_tokens is valid. */
  SSE_TOKEN_TTL_SECONDS: int(10, 7 * 24 * 3600).default(3600),
  /** Live tail: a `:sse-handshake` comment line on every open stream this often. */
  SSE_HEARTBEAT_SECONDS: int(1, 3600).default(15),
  /** Live tail: open streams per user across every process, then 429; 0 = unlimited. */
  SSE_MAX_STREAMS_PER_USER: int(0, 100_000).default(20),
  /**
   * Live tail: bytes the daemon may hold for one stream (unsent in its socket plus queued for it),
   * then the stream is disconnected (the client resumes with Last-Event-ID).
   */
  SSE_MAX_BUFFERED_BYTES_PER_STREAM: int(64 * 1024, 1024 * 1024 * 1024).default(4 * 1024 * 1024),
  /** Live tail: bytes all streams of this process may hold together, then the largest are disconnected. */
  SSE_MAX_BUFFERED_BYTES_PER_PROCESS: int(64 * 1024, 64 * 1024 * 1024 * 1024).default(128 * 1024 * 1024),
  /** Largest component fetched from component_url. */
  COMPONENT_FETCH_MAX_BYTES: int(1024, 16 * 1024 * 1024).default(512 * 1024),
  /** Time limit to fetch a component_url. */
  COMPONENT_FETCH_TIMEOUT_MS: int(100, 120_000).default(10_000),
  /** How long shutdown waits for in-flight work before giving up. */
  SHUTDOWN_TIMEOUT_MS: int(100, 600_000).default(10_000),
  /** pino level. */
  LOG_LEVEL: z
    .enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"], {
      message: "accepts fatal, error, warn, info, debug, trace or silent",
    })
    .default("info"),
  /** json: one JSON object a line (for collectors); pretty: pino-pretty's coloured lines for a terminal. */
  LOG_FORMAT: z.enum(["json", "pretty"], { message: "accepts json or pretty" }).default("json"),
});

export type Env = z.infer<typeof envSchema>;

/** Which Redis deployment the process talks to (SPEC §8). */
export type RedisShape =
  | { readonly kind: "single" }
  | { readonly kind: "sentinel"; readonly sentinels: readonly HostPort[]; readonly name: string }
  | { readonly kind: "cluster"; readonly nodes: readonly HostPort[] };

export interface RedisHaConfig {
  /** "single": REDIS_URL or the embedded server. */
  readonly shape: RedisShape;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly sentinelPassword: string | undefined;
  readonly minReplicasAck: number;
  readonly replicaAckTimeoutMs: number;
  readonly failoverTimeoutMs: number;
}

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly opsPort: number | undefined;
  readonly redisUrl: string | undefined;
  readonly keyPrefix: string;
  /** OUTBOX_SHARDS: shards of the key space, fixed once stored (store/layout.ts). */
  readonly outboxShards: number;
  readonly redisCommandTimeoutMs: number;
  /** The Redis deployment shape and its HA settings (SPEC §8). */
  readonly redisHa: RedisHaConfig;
  readonly dataDir: string;
  readonly publicUrl: string;
  /** ENDPOINT_URL: the base of HTTP source endpoint URLs (PUBLIC_URL unless set). */
  readonly endpointUrl: string;
  /** ENDPOINT_PORT: the endpoints' own listener; undefined = none. */
  readonly endpointPort: number | undefined;
  readonly adminToken: string | undefined;
  readonly roles: readonly Role[];
  readonly allowPrivateDestinations: boolean;
  readonly deliveryRetryScheduleMs: readonly number[];
  /** MAX_RETRY_SPAN_HOURS: how long a retry schedule's delays may add up to. */
  readonly maxRetrySpanHours: number;
  readonly deliveryTimeoutMs: number;
  readonly deliveryConcurrency: number;
  readonly deliveryDirectConcurrency: number;
  readonly deliveryConcurrencyPerUser: number;
  readonly deliveryConcurrencyPerDestination: number;
  readonly deliveryLogLimit: number;
  readonly replayRatePerSecond: number;
  /** The webhook circuit breaker (SPEC §12): CIRCUIT_FAILURE_THRESHOLD, CIRCUIT_COOLDOWN in ms. */
  readonly circuit: { readonly failureThreshold: number; readonly cooldownMs: number };
  readonly webhookSecretRotationOverlapSeconds: number;
  readonly timerMinIntervalSeconds: number;
  readonly bodyLimitBytes: number;
  readonly freeDailyInvocationsQuota: number;
  readonly freeDailyComputeTimeQuotaMs: number;
  readonly sandboxMemoryMb: number;
  readonly sandboxTimeoutMs: number;
  readonly sandboxAllowedPackages: readonly string[];
  readonly sourceRunConcurrency: number;
  readonly sourceRunStreamPerUser: number;
  readonly sourceInlineConcurrency: number;
  readonly sourceHookConcurrencyPerUser: number;
  readonly sourceInlineIsolates: number;
  readonly sourceHttpRatePerSecond: number;
  /** Per-user limits; 0 = unlimited. */
  readonly limits: UserLimits;
  /** FILTER_VISITS_PER_EVENT, FILTER_VISITS_PER_SECOND_PER_USER (0: none). */
  readonly filterBudget: { readonly perEvent: number; readonly perSecondPerUser: number };
  readonly liveTail: {
    readonly tokenTtlSeconds: number;
    readonly heartbeatSeconds: number;
    readonly maxStreamsPerUser: number;
    readonly maxBufferedBytesPerStream: number;
    readonly maxBufferedBytesPerProcess: number;
  };
  readonly componentFetchMaxBytes: number;
  readonly componentFetchTimeoutMs: number;
  readonly shutdownTimeoutMs: number;
  readonly logLevel: Env["LOG_LEVEL"];
  readonly logFormat: Env["LOG_FORMAT"];
  readonly version: string;
}
