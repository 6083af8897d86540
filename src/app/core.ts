import { randomFillSync } from "node:crypto";
import { Queue } from "bullmq";
import { Registry } from "prom-client";
import type { Config } from "../config/schema.js";
import { CircuitBreaker } from "../delivery/circuit.js";
import { MAX_CIRCUIT_COOLDOWN_MS } from "../domain/circuit.js";
import { pooledRandomBytes } from "../domain/random-pool.js";
import { maxAttempts } from "../domain/retry-policy.js";
import { MAX_RETRY_DELAYS } from "../domain/webhook-settings.js";
import { slugify } from "../domain/slug.js";
import { HealthEvents } from "../events/health.js";
import { Ingest } from "../events/ingest.js";
import { createGuardedAgent } from "../net/guarded-agent.js";
import type { Logger } from "../observability/logger.js";
import { createMetrics } from "../observability/metrics.js";
import { QUEUES, type QueueName } from "../queue/catalog.js";
import { createAnalyzer } from "../runtime/analyzer.js";
import { logSandboxCrash } from "../runtime/fatal.js";
import { SourceCache } from "../store/source-cache.js";
import { createRuntime } from "../runtime/index.js";
import { createComponentFetcher } from "../services/component-fetcher.js";
import { ComponentService } from "../services/components.js";
import { destinationCheck } from "../services/destinations.js";
import { IngressRate } from "../services/ingress-rate.js";
import { SourceService } from "../services/sources.js";
import { SubscriptionService } from "../services/subscriptions.js";
import { UserDeletion } from "../services/user-deletion.js";
import { UserService } from "../services/users.js";
import { WebhookService } from "../services/webhooks.js";
import { WorkflowService } from "../services/workflows.js";
import { AttemptLog } from "../store/attempt-log.js";
import { PayloadStore } from "../store/payloads.js";
import { CircuitStore } from "../store/circuit.js";
import { ComponentStore } from "../store/components.js";
import type { StoreContext } from "../store/context.js";
import { EventStore } from "../store/events.js";
import { createKeys } from "../store/keys.js";
import { prepareLayout } from "../store/layout-migration.js";
import { RateLimiter } from "../store/rate-limit.js";
import { ReplayStore } from "../store/replays.js";
import { ResourceUsage } from "../store/resource-usage.js";
import { SourceStore } from "../store/sources.js";
import { SubscriptionStore } from "../store/subscriptions.js";
import { UsageCounters } from "../store/usage.js";
import { UserStore } from "../store/users.js";
import { WebhookStore } from "../store/webhooks.js";
import { WorkflowStore } from "../store/workflows.js";
import type { Connections } from "./connections.js";
import type { Shutdown } from "./shutdown.js";

export interface CoreOptions {
  readonly config: Config;
  readonly logger: Logger;
  readonly conns: Connections;
  readonly registryDir: string;
  /** Where the parts opened here register their shutdown steps. */
  readonly shutdown: Shutdown;
}

/**
 * What every role of a process shares: keys, metrics, queues (producers), stores, services, the
 * ingest and the source runtime (not started). Built once by the daemon and by the CLI, so both
 * act through the same graph. Opens nothing that listens or consumes.
 */
export function createCore(o: CoreOptions) {
  const { config, logger, conns, shutdown } = o;
  const redis = conns.commands;
  const keys = createKeys(config.keyPrefix, config.outboxShards);
  const ctx: StoreContext = { redis, keys, now: Date.now, randomBytes: pooledRandomBytes((buf) => randomFillSync(buf)) };
  const registry = new Registry();
  const metrics = createMetrics(registry);
  const agent = createGuardedAgent({ allowPrivate: config.allowPrivateDestinations });
  shutdown.on("queues", "agent", () => agent.close());

  // Each queue under its own hash tag (SPEC §8); the delivery queue kept layout 1's `{bull}`.
  const queue = (name: QueueName) => new Queue(name, { connection: conns.queues, prefix: keys.queuePrefix(name) });
  const queues = {
    delivery: queue(QUEUES.delivery),
    sourceRun: queue(QUEUES.sourceRun),
    maintenance: queue(QUEUES.maintenance),
    timers: queue(QUEUES.timers),
  };
  for (const q of Object.values(queues)) {
    q.on("error", (err) => logger.warn({ err: err.message, queue: q.name }, "queue error"));
    shutdown.on("queues", `queue ${q.name}`, () => q.close());
  }

  // Stores that create things enforce the per-user limits atomically (docs/security.md).
  const stores = {
    users: new UserStore(ctx),
    components: new ComponentStore(ctx, config.limits),
    sources: new SourceStore(ctx, config.limits),
    webhooks: new WebhookStore(ctx, config.limits),
    subscriptions: new SubscriptionStore(ctx, config.limits),
    workflows: new WorkflowStore(ctx, config.limits),
    events: new EventStore(redis, keys, undefined, config.limits),
    attemptLog: new AttemptLog(redis, keys, config.deliveryLogLimit, Date.now),
    payloads: new PayloadStore(redis, keys),
    replays: new ReplayStore(ctx),
  };

  // Webhook circuit breakers (SPEC §12): the attempter admits and records through them; a deleted
  // webhook's waiting deliveries are released; the open-circuits gauge reads their index.
  const circuitStore = new CircuitStore(redis, keys, {
    threshold: config.circuit.failureThreshold,
    cooldownMs: config.circuit.cooldownMs,
    maxCooldownMs: MAX_CIRCUIT_COOLDOWN_MS,
  });
  // This one (without hints) releases a deleted webhook's deliveries; the worker role builds its own.
  const circuits = new CircuitBreaker({ store: circuitStore, jobs: queues.delivery, deliveryTimeoutMs: config.deliveryTimeoutMs, logger });
  shutdown.on("workers", "circuit releases", () => circuits.close());
  metrics.observeOpenCircuits(() => circuitStore.countOpen());

  const onSandboxCrash = logSandboxCrash(logger);
  const analyzer = createAnalyzer(config, onSandboxCrash);
  shutdown.on("resources", "analyzer", () => analyzer.close());
  const fetcher = createComponentFetcher({ agent, timeoutMs: config.componentFetchTimeoutMs, maxBytes: config.componentFetchMaxBytes });
  const components = new ComponentService(stores.components, analyzer, fetcher, o.registryDir);
  // Destinations that name a private address are refused when stored, unless they are allowed.
  const checkDestination = destinationCheck(config.allowPrivateDestinations);
  const workflows = new WorkflowService(stores.workflows, stores.subscriptions, stores.events, checkDestination);
  // One token bucket per user for workflow emits and HTTP source requests.
  const { ingressEventsPerSecond: perSecond, ingressBurstEvents: burst } = config.limits;
  const ingressRate = new IngressRate(new RateLimiter(redis, perSecond, burst), (userId) => keys.ingressRate(userId), { perSecond, burst });
  const ingest = new Ingest(stores.events, workflows, metrics, Date.now, ctx.randomBytes, ingressRate);
  // SPEC §12 health events: the Attempter (app/delivery-feature.ts) and PUT /webhooks report here.
  const health = new HealthEvents({ ingest, webhookKey: (userId, id) => keys.webhook(userId, id), logger, metrics });
  // Sources, their components and users' plans as HTTP source requests and runs read them, kept in
  // memory while source changes invalidate them over pub/sub (store/source-cache.ts).
  const sourceCache = new SourceCache(stores.sources, {
    subscriber: conns.subscriber("source-changes"),
    channel: keys.listenerChanges(),
    logger,
  });
  const runtime = createRuntime({
    config,
    logger,
    metrics,
    redis,
    blocking: conns.schedulerReads,
    openBlocking: (name) => conns.blocking(name),
    keys,
    connection: conns.workers,
    agent,
    users: stores.users,
    sourceStore: stores.sources,
    components,
    sourceCache,
    ingest,
    ingressRate,
    timersQueue: queues.timers,
    now: Date.now,
    randomBytes: ctx.randomBytes,
    onSandboxCrash,
  });
  shutdown.on("workers", "runtime", () => runtime.close());
  const sources = new SourceService(stores.sources, components, stores.subscriptions, runtime.lifecycle, {
    endpointUrl: config.endpointUrl,
    timerMinIntervalSeconds: config.timerMinIntervalSeconds,
    now: Date.now,
    randomBytes: ctx.randomBytes,
    slugify,
  });
  const services = {
    components,
    workflows,
    sources,
    webhooks: new WebhookService(stores.webhooks, stores.subscriptions, ctx.randomBytes, {
      secretRotationOverlapMs: config.webhookSecretRotationOverlapSeconds * 1000,
      checkUrl: checkDestination,
      settingRules: { maxRetrySpanHours: config.maxRetrySpanHours },
      health,
      dropEvents: (userId, id) => stores.events.dropEmitter(userId, id),
      circuits: circuitStore,
      onDeleted: (userId, webhookId) => circuits.discard(userId, webhookId),
    }),
    subscriptions: new SubscriptionService(stores.subscriptions, stores.sources, stores.webhooks, workflows),
    users: new UserService(
      stores.users,
      new UsageCounters(redis, keys),
      { dailyInvocations: config.freeDailyInvocationsQuota, dailyComputeMs: config.freeDailyComputeTimeQuotaMs },
      Date.now,
      new ResourceUsage(ctx, stores.components, config.limits),
    ),
    userDeletion: new UserDeletion(stores.users, stores.sources, sources, logger),
  };
  return {
    config,
    logger,
    keys,
    /**
     * Start-up check, before any role starts (daemon and CLI): the layout record agrees with
     * OUTBOX_SHARDS (else LayoutMismatchError), after migrating layout-1 data when there is some.
     */
    async prepare(): Promise<void> {
      const { migrated } = await prepareLayout({ redis, keys, connection: conns.queues, now: Date.now });
      if (migrated) logger.info({ ...migrated }, "migrated the Redis data from key layout 1 to layout 2");
    },
    ctx,
    metrics,
    agent,
    queues,
    stores,
    circuits,
    circuitStore,
    services,
    analyzer,
    ingest,
    health,
    runtime,
    /** Attempts a delivery gets in all (first attempt and retries). */
    // At least as many as the longest retry_schedule a webhook may have: the classifier ends each
    // delivery at its own schedule's end, and the queue must not end it sooner.
    attempts: Math.max(maxAttempts(config.deliveryRetryScheduleMs), MAX_RETRY_DELAYS + 1),
  };
}

export type Core = ReturnType<typeof createCore>;
