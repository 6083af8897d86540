import { retrySpanProblem } from "../domain/webhook-settings.js";
import { envSchema, type Config, type Env, type RedisHaConfig } from "./schema.js";

export class ConfigError extends Error {}

/** Empty strings count as unset, so `FOO= npm start` falls back to the default. */
function present(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of Object.keys(envSchema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== "") out[key] = v;
  }
  return out;
}

/** Validates the environment once and returns a frozen config; throws ConfigError naming the variable. */
export function loadConfig(env: Readonly<Record<string, string | undefined>>, version = "0.0.0"): Config {
  const parsed = envSchema.safeParse(present(env));
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue?.path[0] ?? "environment");
    throw new ConfigError(`invalid ${name}: ${issue?.message ?? "invalid value"}`);
  }
  const e = parsed.data;
  const tooLong = retrySpanProblem(e.DELIVERY_RETRY_SCHEDULE, e.MAX_RETRY_SPAN_HOURS);
  if (tooLong) throw new ConfigError(`invalid DELIVERY_RETRY_SCHEDULE: ${tooLong}; shorten it or raise MAX_RETRY_SPAN_HOURS`);
  const redisHa = redisHaConfig(e);
  const publicUrl = (e.PUBLIC_URL ?? `http://localhost:${e.PORT}`).replace(/\/+$/, "");
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    opsPort: e.OPS_PORT,
    redisUrl: e.REDIS_URL,
    keyPrefix: e.REDIS_KEY_PREFIX,
    outboxShards: e.OUTBOX_SHARDS,
    redisCommandTimeoutMs: e.REDIS_COMMAND_TIMEOUT_MS,
    redisHa,
    dataDir: e.DATA_DIR,
    publicUrl,
    endpointUrl: endpointUrl(e, publicUrl),
    endpointPort: e.ENDPOINT_PORT,
    adminToken: e.ADMIN_TOKEN,
    roles: Object.freeze([...new Set(e.ROLES)]),
    allowPrivateDestinations: e.ALLOW_PRIVATE_DESTINATIONS,
    deliveryRetryScheduleMs: Object.freeze(e.DELIVERY_RETRY_SCHEDULE),
    maxRetrySpanHours: e.MAX_RETRY_SPAN_HOURS,
    deliveryTimeoutMs: e.DELIVERY_TIMEOUT_MS,
    deliveryConcurrency: e.DELIVERY_CONCURRENCY,
    deliveryDirectConcurrency: e.DELIVERY_DIRECT_CONCURRENCY,
    deliveryConcurrencyPerUser: e.DELIVERY_CONCURRENCY_PER_USER,
    deliveryConcurrencyPerDestination: e.DELIVERY_CONCURRENCY_PER_DESTINATION,
    deliveryLogLimit: e.DELIVERY_LOG_LIMIT,
    replayRatePerSecond: e.REPLAY_RATE_PER_SECOND,
    circuit: Object.freeze({ failureThreshold: e.CIRCUIT_FAILURE_THRESHOLD, cooldownMs: e.CIRCUIT_COOLDOWN }),
    webhookSecretRotationOverlapSeconds: e.WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS,
    timerMinIntervalSeconds: e.TIMER_MIN_INTERVAL_SECONDS,
    bodyLimitBytes: e.BODY_LIMIT_BYTES,
    freeDailyInvocationsQuota: e.FREE_DAILY_INVOCATIONS_QUOTA,
    freeDailyComputeTimeQuotaMs: e.FREE_DAILY_COMPUTE_TIME_QUOTA_MS,
    sandboxMemoryMb: e.SANDBOX_MEMORY_MB,
    sandboxTimeoutMs: e.SANDBOX_TIMEOUT_MS,
    sandboxAllowedPackages: Object.freeze(e.SANDBOX_ALLOWED_PACKAGES),
    sourceRunConcurrency: e.SOURCE_RUN_CONCURRENCY,
    sourceRunStreamPerUser: e.SOURCE_RUN_STREAM_PER_USER,
    sourceInlineConcurrency: e.SOURCE_INLINE_CONCURRENCY,
    sourceHookConcurrencyPerUser: e.SOURCE_HOOK_CONCURRENCY_PER_USER,
    sourceInlineIsolates: e.SOURCE_INLINE_ISOLATES,
    sourceHttpRatePerSecond: e.SOURCE_HTTP_RATE_PER_SECOND,
    limits: Object.freeze({
      workflows: e.MAX_WORKFLOWS_PER_USER,
      sources: e.MAX_SOURCES_PER_USER,
      components: e.MAX_COMPONENTS_PER_USER,
      webhooks: e.MAX_WEBHOOKS_PER_USER,
      subscriptions: e.MAX_SUBSCRIPTIONS_PER_USER,
      autoSubscriptions: e.MAX_AUTO_SUBSCRIPTIONS_PER_USER,
      componentBytes: e.MAX_COMPONENT_BYTES_PER_USER,
      streams: e.MAX_STREAMS_PER_USER,
      storedBytes: e.MAX_STORED_MB_PER_USER * 1024 * 1024,
      listenersPerEmitter: e.MAX_LISTENERS_PER_EMITTER,
      ingressEventsPerSecond: e.INGRESS_EVENTS_PER_SECOND_PER_USER,
      ingressBurstEvents: e.INGRESS_BURST_EVENTS_PER_USER,
    }),
    filterBudget: Object.freeze({ perEvent: e.FILTER_VISITS_PER_EVENT, perSecondPerUser: e.FILTER_VISITS_PER_SECOND_PER_USER }),
    liveTail: Object.freeze({
      tokenTtlSeconds: e.SSE_TOKEN_TTL_SECONDS,
      heartbeatSeconds: e.SSE_HEARTBEAT_SECONDS,
      maxStreamsPerUser: e.SSE_MAX_STREAMS_PER_USER,
      maxBufferedBytesPerStream: e.SSE_MAX_BUFFERED_BYTES_PER_STREAM,
      maxBufferedBytesPerProcess: e.SSE_MAX_BUFFERED_BYTES_PER_PROCESS,
    }),
    componentFetchMaxBytes: e.COMPONENT_FETCH_MAX_BYTES,
    componentFetchTimeoutMs: e.COMPONENT_FETCH_TIMEOUT_MS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    logLevel: e.LOG_LEVEL,
    logFormat: e.LOG_FORMAT,
    version,
  });
}

/**
 * ENDPOINT_URL, resolved. It exists to give tenants' endpoint pages an origin apart from the
 * dashboard's, so naming PUBLIC_URL's origin is a mistake the operator hears of; so is a listener
 * on a port another one takes.
 */
function endpointUrl(e: Env, publicUrl: string): string {
  const port = e.ENDPOINT_PORT;
  if (port !== undefined && port !== 0) {
    for (const [name, other] of [
      ["PORT", e.PORT],
      ["OPS_PORT", e.OPS_PORT],
    ] as const) {
      if (other === port) throw new ConfigError(`invalid ENDPOINT_PORT: ${port} is ${name} too; give the endpoints a port of their own`);
    }
  }
  if (e.ENDPOINT_URL === undefined) return port === undefined ? publicUrl : `http://localhost:${port}`;
  const url = e.ENDPOINT_URL.replace(/\/+$/, "");
  const origin = originOf(url);
  if (origin === undefined) throw new ConfigError("invalid ENDPOINT_URL: accepts an http(s) URL");
  if (origin === originOf(publicUrl)) {
    throw new ConfigError(
      "invalid ENDPOINT_URL: it names PUBLIC_URL's origin; give endpoints another host or port (or leave ENDPOINT_URL unset)",
    );
  }
  return url;
}

function originOf(url: string): string | undefined {
  try {
    return new URL(url).origin;
  } catch {
    return undefined;
  }
}

/** The shapes of SPEC §8, at most one of which may be set. */
const SHAPE_VARIABLES = ["REDIS_URL", "REDIS_SENTINELS", "REDIS_CLUSTER_NODES"] as const;

/** The Redis deployment shape and HA settings, with the checks that span several variables. */
function redisHaConfig(e: Env): RedisHaConfig {
  const set = SHAPE_VARIABLES.filter((name) => e[name] !== undefined);
  if (set.length > 1) {
    throw new ConfigError(
      `conflicting Redis settings: ${set.join(" and ")} are ${set.length === 2 ? "both" : "all"} set; set only one of ${SHAPE_VARIABLES.join(", ")}`,
    );
  }
  if (e.REDIS_SENTINELS && !e.REDIS_SENTINEL_NAME) {
    throw new ConfigError("invalid REDIS_SENTINELS: needs REDIS_SENTINEL_NAME (the master group the sentinels monitor)");
  }
  for (const name of ["REDIS_SENTINEL_NAME", "REDIS_SENTINEL_PASSWORD"] as const) {
    if (e[name] !== undefined && !e.REDIS_SENTINELS) throw new ConfigError(`invalid ${name}: only applies with REDIS_SENTINELS`);
  }
  if (e.REDIS_MIN_REPLICAS_ACK > 0) {
    if (set.length === 0) {
      throw new ConfigError(
        "invalid REDIS_MIN_REPLICAS_ACK: needs REDIS_URL or REDIS_SENTINELS (the embedded redis-server has no replicas)",
      );
    }
    const requestTimeout = Math.min(e.REDIS_COMMAND_TIMEOUT_MS, e.REDIS_FAILOVER_TIMEOUT_MS);
    if (e.REDIS_REPLICA_ACK_TIMEOUT_MS >= requestTimeout) {
      throw new ConfigError(
        `invalid REDIS_REPLICA_ACK_TIMEOUT_MS: must be below REDIS_COMMAND_TIMEOUT_MS and REDIS_FAILOVER_TIMEOUT_MS (${requestTimeout} ms), which bound the WAIT`,
      );
    }
  }
  const shape: RedisHaConfig["shape"] = e.REDIS_SENTINELS
    ? { kind: "sentinel", sentinels: Object.freeze(e.REDIS_SENTINELS), name: e.REDIS_SENTINEL_NAME as string }
    : e.REDIS_CLUSTER_NODES
      ? { kind: "cluster", nodes: Object.freeze(e.REDIS_CLUSTER_NODES) }
      : { kind: "single" };
  return Object.freeze({
    shape: Object.freeze(shape),
    username: e.REDIS_USERNAME,
    password: e.REDIS_PASSWORD,
    sentinelPassword: e.REDIS_SENTINEL_PASSWORD,
    minReplicasAck: e.REDIS_MIN_REPLICAS_ACK,
    replicaAckTimeoutMs: e.REDIS_REPLICA_ACK_TIMEOUT_MS,
    failoverTimeoutMs: e.REDIS_FAILOVER_TIMEOUT_MS,
  });
}
