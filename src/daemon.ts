import { randomFillSync, randomUUID } from "node:crypto";
import type { Server } from "node:http";
import { Queue, type ConnectionOptions } from "bullmq";
import { Redis } from "ioredis";
import { Registry } from "prom-client";
import { createApp } from "./api/app.js";
import { deliveryRoutes } from "./api/routes/deliveries.js";
import { eventRoutes } from "./api/routes/events.js";
import type { Config } from "./config/schema.js";
import { Attempter } from "./delivery/attempt.js";
import { AttemptLog } from "./delivery/attempt-log.js";
import { DirectDelivery } from "./delivery/direct.js";
import { DeliveryJobQueue } from "./delivery/jobs.js";
import { createSender } from "./delivery/sender.js";
import { DeliveryWorker } from "./delivery/worker.js";
import { maxAttempts } from "./domain/retry-policy.js";
import { pooledRandomBytes } from "./domain/random-pool.js";
import { slugify } from "./domain/slug.js";
import { FANOUT_GROUP, FanoutWorker } from "./events/fanout.js";
import { Ingest } from "./events/ingest.js";
import { MaintenanceWorker } from "./events/maintenance.js";
import { EventStore } from "./events/store.js";
import { createGuardedAgent } from "./net/guarded-agent.js";
import type { Logger } from "./observability/logger.js";
import { createMetrics } from "./observability/metrics.js";
import { QueueMonitor } from "./observability/queue-monitor.js";
import { QUEUES, type MaintenanceJob } from "./queue/catalog.js";
import { createAnalyzer } from "./runtime/analyzer.js";
import { logSandboxCrash } from "./runtime/fatal.js";
import { createRuntime, type Runtime } from "./runtime/index.js";
import { RateLimiter } from "./runtime/rate-limit.js";
import { ComponentService } from "./services/components.js";
import { createComponentFetcher } from "./services/component-fetcher.js";
import { IngressRate } from "./services/ingress-rate.js";
import { SourceService } from "./services/sources.js";
import { SubscriptionService } from "./services/subscriptions.js";
import { UserDeletion } from "./services/user-deletion.js";
import { UsageReader, UserService } from "./services/users.js";
import { WebhookService } from "./services/webhooks.js";
import { WorkflowService } from "./services/workflows.js";
import { ComponentStore } from "./store/components.js";
import type { StoreContext } from "./store/context.js";
import { createKeys } from "./store/keys.js";
import { ResourceUsage } from "./store/resource-usage.js";
import { SourceStore } from "./store/sources.js";
import { SubscriptionStore } from "./store/subscriptions.js";
import { AuthCache } from "./store/auth-cache.js";
import { ListenerCache } from "./store/listener-cache.js";
import { UserStore } from "./store/users.js";
import { WebhookStore } from "./store/webhooks.js";
import { WorkflowStore } from "./store/workflows.js";

/**
 * A direct first attempt in flight this long marks its slot as held by a slow destination: while
 * the oldest one is, fan-out queues deliveries that find no free slot instead of waiting.
 */
const DIRECT_CLOG_MS = 100;

export interface Daemon {
  readonly server: Server | undefined;
  /** The bound port (useful with PORT=0). */
  readonly port: number;
  readonly users: UserStore;
  /** Shuts down in the written order; idempotent. */
  close(): Promise<void>;
}

export interface DaemonOptions {
  readonly config: Config;
  readonly logger: Logger;
  readonly redisUrl: string;
  readonly registryDir: string;
}

/**
 * The composition root: builds every part from the config and starts the roles this process
 * runs. Shutdown order (SPEC/STYLE): stop accepting HTTP, drain workers with a deadline, close
 * queues, quit Redis.
 */
export async function startDaemon(opts: DaemonOptions): Promise<Daemon> {
  const { config, logger } = opts;
  const roles = new Set(config.roles);
  // Request-path connections fail fast while Redis is down (the API answers 503 instead of
  // hanging); blocking readers and BullMQ workers retry forever, as BullMQ requires.
  // - maxRetriesPerRequest: a command queued while disconnected fails after two reconnect attempts.
  // - commandTimeout: one that gets no reply in time fails too. Without it a stalled Redis (stopped
  //   process, dropped packets: the TCP connection stays up) held every request until it resumed.
  //   A write that timed out may still be applied once Redis resumes: its request answered 503, so
  //   the caller retries; an event is then recorded twice at worst, never acknowledged and lost.
  const failFast = {
    maxRetriesPerRequest: 2,
    commandTimeout: config.redisCommandTimeoutMs,
    enableReadyCheck: true,
    enableAutoPipelining: true,
  } as const;
  const patient = { maxRetriesPerRequest: null, enableReadyCheck: true } as const;
  const redis = new Redis(opts.redisUrl, failFast);
  redis.on("error", (err) => logger.warn({ err: err.message }, "redis connection error"));
  // BullMQ queues get a connection without auto-pipelining: ioredis builds every pipeline by
  // copying each custom command of its connection, and BullMQ defines dozens (about 25 µs per
  // pipeline, measured), so per-command pipelines cost far more than they save there.
  const queueConnection = new Redis(opts.redisUrl, { ...failFast, enableAutoPipelining: false });
  const blocking = new Redis(opts.redisUrl, patient);
  const schedulerBlocking = new Redis(opts.redisUrl, patient);
  const connection: ConnectionOptions = new Redis(opts.redisUrl, patient);
  for (const c of [queueConnection, blocking, schedulerBlocking, connection as Redis]) c.on("error", () => {});
  const keys = createKeys(config.keyPrefix);
  const ctx: StoreContext = { redis, keys, now: Date.now, randomBytes: pooledRandomBytes((buf) => randomFillSync(buf)) };
  const registry = new Registry();
  const metrics = createMetrics(registry);
  const agent = createGuardedAgent({ allowPrivate: config.allowPrivateDestinations });
  const attempts = maxAttempts(config.deliveryRetryScheduleMs);

  const queueOpts = { connection: queueConnection, prefix: keys.bullPrefix };
  const deliveryQueue = new Queue(QUEUES.delivery, queueOpts);
  const sourceRunQueue = new Queue(QUEUES.sourceRun, queueOpts);
  const maintenanceQueue = new Queue(QUEUES.maintenance, queueOpts);
  const timersQueue = new Queue(QUEUES.timers, queueOpts);
  for (const q of [deliveryQueue, sourceRunQueue, maintenanceQueue, timersQueue])
    q.on("error", (err) => logger.warn({ err: err.message }, "queue error"));

  // Stores and services.
  const userStore = new UserStore(ctx);
  // Stores that create things enforce the per-user limits atomically (docs/security.md).
  const componentStore = new ComponentStore(ctx, config.limits);
  const sourceStore = new SourceStore(ctx, config.limits);
  const webhookStore = new WebhookStore(ctx, config.limits);
  const subscriptionStore = new SubscriptionStore(ctx, config.limits);
  const workflowStore = new WorkflowStore(ctx, config.limits);
  const events = new EventStore(redis, keys);
  const attemptLog = new AttemptLog(redis, keys, config.deliveryLogLimit, Date.now);

  const onSandboxCrash = logSandboxCrash(logger);
  const analyzer = createAnalyzer(config, onSandboxCrash);
  const fetcher = createComponentFetcher({ agent, timeoutMs: config.componentFetchTimeoutMs, maxBytes: config.componentFetchMaxBytes });
  const components = new ComponentService(componentStore, analyzer, fetcher, opts.registryDir);
  const workflows = new WorkflowService(workflowStore, subscriptionStore, events);
  // One token bucket per user for workflow emits and HTTP source requests.
  const ingressRate = new IngressRate(
    new RateLimiter(redis, config.limits.ingressEventsPerSecond, config.limits.ingressBurstEvents),
    (userId) => keys.ingressRate(userId),
    { perSecond: config.limits.ingressEventsPerSecond, burst: config.limits.ingressBurstEvents },
  );
  const ingest = new Ingest(events, workflows, metrics, Date.now, ctx.randomBytes, ingressRate);
  const runtime: Runtime = createRuntime({
    config,
    logger,
    metrics,
    redis,
    blocking: schedulerBlocking,
    keys,
    connection,
    prefix: keys.bullPrefix,
    agent,
    users: userStore,
    sourceStore,
    components,
    ingest,
    ingressRate,
    sourceRunQueue,
    timersQueue,
    now: Date.now,
    randomBytes: ctx.randomBytes,
    onSandboxCrash,
  });
  const sources = new SourceService(sourceStore, components, subscriptionStore, runtime.lifecycle, {
    publicUrl: config.publicUrl,
    timerMinIntervalSeconds: config.timerMinIntervalSeconds,
    now: Date.now,
    randomBytes: ctx.randomBytes,
    slugify,
  });
  const webhooks = new WebhookService(webhookStore, subscriptionStore, ctx.randomBytes, {
    secretRotationOverlapMs: config.webhookSecretRotationOverlapSeconds * 1000,
  });
  const subscriptions = new SubscriptionService(subscriptionStore, sourceStore, webhookStore, workflows);
  const users = new UserService(
    userStore,
    new UsageReader(redis, keys),
    { dailyInvocations: config.freeDailyInvocationsQuota, dailyComputeMs: config.freeDailyComputeTimeQuotaMs },
    Date.now,
    new ResourceUsage(ctx, componentStore, config.limits),
  );

  const userDeletion = new UserDeletion(userStore, sourceStore, sources, logger);

  // Workers.
  const closers: (() => Promise<void>)[] = [];
  const sender = createSender({ agent, timeoutMs: config.deliveryTimeoutMs });
  let fanout: FanoutWorker | undefined;
  let deliveryWorker: DeliveryWorker | undefined;
  let maintenance: MaintenanceWorker | undefined;
  if (roles.has("worker")) {
    // Webhooks and workflows are read from an in-process cache that their changes invalidate over
    // pub/sub (store/listener-cache.ts).
    const listenerSubscriber = new Redis(opts.redisUrl, patient);
    listenerSubscriber.on("error", () => {});
    const listenerCache = new ListenerCache(webhookStore, workflowStore, {
      subscriber: listenerSubscriber,
      channel: keys.listenerChanges(),
      logger,
    });
    // Not awaited: until the subscription is live, listeners are read from Redis.
    void listenerCache.start();
    closers.push(() => listenerCache.stop());
    // One Attempter makes every delivery attempt: queued jobs (DeliveryWorker) and fan-out's
    // direct first attempts (DirectDelivery) alike.
    const attempter = new Attempter({
      sender,
      attemptLog,
      listeners: listenerCache,
      webhooks: webhookStore,
      scheduleMs: config.deliveryRetryScheduleMs,
      logger,
      metrics,
    });
    const deliveryJobs = new DeliveryJobQueue(deliveryQueue, attempts);
    deliveryWorker = new DeliveryWorker({
      connection,
      prefix: keys.bullPrefix,
      concurrency: config.deliveryConcurrency,
      attempter,
      logger,
    });
    deliveryWorker.start();
    // Fan-out makes first attempts itself while it has slots (delivery/direct.ts); retries and
    // the overflow go through the delivery queue.
    const direct =
      config.deliveryDirectConcurrency > 0
        ? new DirectDelivery({
            attempter,
            jobs: deliveryJobs,
            concurrency: config.deliveryDirectConcurrency,
            clogMs: DIRECT_CLOG_MS,
            logger,
          })
        : undefined;
    fanout = new FanoutWorker({
      blocking,
      redis,
      keys,
      subscriptions: subscriptionStore,
      deliveryJobs,
      sourceRunQueue,
      logger,
      metrics,
      consumer: `${process.pid}-${randomUUID().slice(0, 8)}`,
      claimIdleMs: 15_000,
      direct,
    });
    await fanout.start();
    maintenance = new MaintenanceWorker({ connection, prefix: keys.bullPrefix, events, logger });
    maintenance.start();
  }
  await runtime.start(roles);
  const monitor = new QueueMonitor([deliveryQueue, sourceRunQueue, maintenanceQueue, timersQueue], metrics, undefined, {
    redis,
    key: keys.outbox(),
    group: FANOUT_GROUP,
  });
  monitor.start();

  // HTTP.
  let server: Server | undefined;
  let port = config.port;
  if (roles.has("api")) {
    // API keys are resolved from an in-process cache that key rotation and user deletion
    // invalidate over pub/sub (store/auth-cache.ts).
    const subscriber = new Redis(opts.redisUrl, patient);
    subscriber.on("error", () => {});
    const authCache = new AuthCache(userStore, { subscriber, channel: keys.apiKeyRevocations(), logger });
    // Not awaited: until the subscription is live, keys are read from Redis.
    void authCache.start();
    closers.push(() => authCache.stop());
    const app = createApp({
      authenticator: authCache,
      logger,
      metrics,
      adminToken: config.adminToken,
      bodyLimitBytes: config.bodyLimitBytes,
      users,
      components,
      sources,
      subscriptions,
      webhooks,
      workflows,
      purgeUser: (userId: string) => userDeletion.delete(userId),
      ready: async () =>
        redis.status === "ready" &&
        (await redis.ping()) === "PONG" &&
        runtime.running() &&
        [fanout, deliveryWorker, maintenance].every((part) => part === undefined || part.isRunning()) &&
        // Creating components needs the compiler; one that cannot build a trivial component is not ready.
        (await analyzer.healthy()),
      endpoints: runtime.endpoints,
      v1Modules: [
        eventRoutes({
          events,
          ingest,
          sources,
          workflows,
          version: config.version,
          enqueueMaintenance: async (job: MaintenanceJob) => {
            await maintenanceQueue.add(job.kind, job, {
              removeOnComplete: true,
              removeOnFail: 1000,
              attempts: 3,
              backoff: { type: "exponential", delay: 1000 },
            });
          },
        }),
        deliveryRoutes({ webhooks, log: attemptLog, queue: deliveryQueue, attempts }),
      ],
    });
    server = await new Promise<Server>((resolve, reject) => {
      const s = app.listen(config.port, config.host, () => resolve(s));
      s.once("error", reject);
    });
    server.keepAliveTimeout = 65_000;
    const addr = server.address();
    if (addr && typeof addr === "object") port = addr.port;
    logger.info({ port, host: config.host, roles: [...roles] }, "tributary listening");
  }

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      const deadline = <T>(p: Promise<T>) =>
        Promise.race([p, new Promise<void>((r) => setTimeout(r, config.shutdownTimeoutMs).unref())]).catch((err) =>
          logger.warn({ err }, "shutdown step failed"),
        );
      // 1. Stop accepting HTTP.
      if (server) {
        const s = server;
        await deadline(new Promise<void>((r) => s.close(() => r())));
        s.closeAllConnections?.();
      }
      // 2. Drain workers (in-flight attempts finish or time out).
      monitor.close();
      await deadline(
        Promise.all([fanout?.close(), deliveryWorker?.close(), maintenance?.close(), runtime.close(), ...closers.map((c) => c())]),
      );
      await sender.close();
      analyzer.close();
      // 3. Close queues.
      await deadline(Promise.all([deliveryQueue.close(), sourceRunQueue.close(), maintenanceQueue.close(), timersQueue.close()]));
      await agent.close().catch(() => {});
      // 4. Quit Redis.
      await Promise.all([redis, queueConnection, blocking, schedulerBlocking, connection as Redis].map((c) => c.quit().catch(() => {})));
    })();
    return closing;
  };
  return { server, port, users: userStore, close };
}
