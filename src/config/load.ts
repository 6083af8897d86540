import { envSchema, type Config } from "./schema.js";

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
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    opsPort: e.OPS_PORT,
    redisUrl: e.REDIS_URL,
    keyPrefix: e.REDIS_KEY_PREFIX,
    redisCommandTimeoutMs: e.REDIS_COMMAND_TIMEOUT_MS,
    dataDir: e.DATA_DIR,
    publicUrl: (e.PUBLIC_URL ?? `http://localhost:${e.PORT}`).replace(/\/+$/, ""),
    adminToken: e.ADMIN_TOKEN,
    roles: Object.freeze([...new Set(e.ROLES)]),
    allowPrivateDestinations: e.ALLOW_PRIVATE_DESTINATIONS,
    deliveryRetryScheduleMs: Object.freeze(e.DELIVERY_RETRY_SCHEDULE),
    deliveryTimeoutMs: e.DELIVERY_TIMEOUT_MS,
    deliveryConcurrency: e.DELIVERY_CONCURRENCY,
    deliveryDirectConcurrency: e.DELIVERY_DIRECT_CONCURRENCY,
    deliveryLogLimit: e.DELIVERY_LOG_LIMIT,
    webhookSecretRotationOverlapSeconds: e.WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS,
    timerMinIntervalSeconds: e.TIMER_MIN_INTERVAL_SECONDS,
    bodyLimitBytes: e.BODY_LIMIT_BYTES,
    freeDailyInvocationsQuota: e.FREE_DAILY_INVOCATIONS_QUOTA,
    freeDailyComputeTimeQuotaMs: e.FREE_DAILY_COMPUTE_TIME_QUOTA_MS,
    sandboxMemoryMb: e.SANDBOX_MEMORY_MB,
    sandboxTimeoutMs: e.SANDBOX_TIMEOUT_MS,
    sandboxAllowedPackages: Object.freeze(e.SANDBOX_ALLOWED_PACKAGES),
    sourceRunConcurrency: e.SOURCE_RUN_CONCURRENCY,
    sourceInlineConcurrency: e.SOURCE_INLINE_CONCURRENCY,
    sourceHttpRatePerSecond: e.SOURCE_HTTP_RATE_PER_SECOND,
    limits: Object.freeze({
      workflows: e.MAX_WORKFLOWS_PER_USER,
      sources: e.MAX_SOURCES_PER_USER,
      components: e.MAX_COMPONENTS_PER_USER,
      webhooks: e.MAX_WEBHOOKS_PER_USER,
      subscriptions: e.MAX_SUBSCRIPTIONS_PER_USER,
      autoSubscriptions: e.MAX_AUTO_SUBSCRIPTIONS_PER_USER,
      componentBytes: e.MAX_COMPONENT_BYTES_PER_USER,
      listenersPerEmitter: e.MAX_LISTENERS_PER_EMITTER,
      ingressEventsPerSecond: e.INGRESS_EVENTS_PER_SECOND_PER_USER,
      ingressBurstEvents: e.INGRESS_BURST_EVENTS_PER_USER,
    }),
    liveTail: Object.freeze({
      tokenTtlSeconds: e.SSE_TOKEN_TTL_SECONDS,
      heartbeatSeconds: e.SSE_HEARTBEAT_SECONDS,
      maxStreamsPerUser: e.SSE_MAX_STREAMS_PER_USER,
    }),
    componentFetchMaxBytes: e.COMPONENT_FETCH_MAX_BYTES,
    componentFetchTimeoutMs: e.COMPONENT_FETCH_TIMEOUT_MS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    logLevel: e.LOG_LEVEL,
    version,
  });
}
