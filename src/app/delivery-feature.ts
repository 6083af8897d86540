import { randomUUID } from "node:crypto";
import { Attempter } from "../delivery/attempt.js";
import { DirectDelivery } from "../delivery/direct.js";
import { DeliveryJobQueue } from "../delivery/jobs.js";
import { createSender } from "../delivery/sender.js";
import { DeliveryWorker } from "../delivery/worker.js";
import { FanoutWorker } from "../events/fanout.js";
import { MaintenanceWorker } from "../events/maintenance.js";
import { ListenerCache } from "../store/listener-cache.js";
import { CircuitBreaker } from "../delivery/circuit.js";
import { CircuitHints } from "../store/circuit-hints.js";
import { KeyedRateLimiter } from "../store/rate-limit.js";
import type { Connections } from "./connections.js";
import type { Core } from "./core.js";
import type { Shutdown } from "./shutdown.js";

/**
 * A direct first attempt in flight this long marks its slot as held by a slow destination: while
 * the oldest one is, fan-out queues deliveries that find no free slot instead of waiting.
 */
const DIRECT_CLOG_MS = 100;

/** Pending outbox entries idle longer than this are taken over from a dead consumer. */
const FANOUT_CLAIM_IDLE_MS = 15_000;

/**
 * The worker role's event path: fan-out reads the outbox and makes first attempts directly while
 * it has slots (delivery/direct.ts); retries and the overflow go through the delivery queue, whose
 * worker, like the direct path, makes every attempt through one Attempter. Also the maintenance
 * worker (event deletion).
 */
export function createDeliveryFeature(core: Core, conns: Connections, shutdown: Shutdown) {
  const { config, logger, metrics, keys, stores, queues } = core;
  // Webhooks and workflows are read from an in-process cache that their changes invalidate over
  // pub/sub (store/listener-cache.ts).
  const listenerCache = new ListenerCache(stores.webhooks, stores.workflows, {
    subscriber: conns.subscriber("listener-changes"),
    channel: keys.listenerChanges(),
    logger,
  });
  shutdown.on("workers", "listener cache", () => listenerCache.stop());
  const sender = createSender({ agent: core.agent, timeoutMs: config.deliveryTimeoutMs });
  shutdown.on("resources", "sender", () => sender.close());
  const webhookRates = new KeyedRateLimiter(conns.commands);
  // Circuit breakers, skipped in Redis for webhooks this process knows clean (store/circuit-hints.ts).
  const circuitHints = new CircuitHints({ subscriber: conns.subscriber("circuit-hints"), channel: keys.circuitChanges(), logger });
  shutdown.on("workers", "circuit hints", () => circuitHints.stop());
  const circuit = new CircuitBreaker({
    store: core.circuitStore,
    jobs: queues.delivery,
    deliveryTimeoutMs: config.deliveryTimeoutMs,
    hints: circuitHints,
    logger,
  });
  shutdown.on("workers", "worker circuit releases", () => circuit.close());
  const attempter = new Attempter({
    sender,
    attemptLog: stores.attemptLog,
    listeners: listenerCache,
    webhooks: stores.webhooks,
    scheduleMs: config.deliveryRetryScheduleMs,
    rateLimit: (userId, webhookId, rate) => webhookRates.take(keys.webhookRate(userId, webhookId), rate),
    circuit,
    logger,
    metrics,
  });
  const deliveryJobs = new DeliveryJobQueue(queues.delivery, core.attempts);
  const worker = new DeliveryWorker({
    connection: conns.workers,
    prefix: keys.bullPrefix,
    concurrency: config.deliveryConcurrency,
    attempter,
    logger,
  });
  const direct =
    config.deliveryDirectConcurrency > 0
      ? new DirectDelivery({ attempter, jobs: deliveryJobs, concurrency: config.deliveryDirectConcurrency, clogMs: DIRECT_CLOG_MS, logger })
      : undefined;
  const fanout = new FanoutWorker({
    blocking: conns.fanoutReads,
    redis: conns.commands,
    keys,
    subscriptions: stores.subscriptions,
    deliveryJobs,
    sourceRunQueue: queues.sourceRun,
    logger,
    metrics,
    consumer: `${process.pid}-${randomUUID().slice(0, 8)}`,
    claimIdleMs: FANOUT_CLAIM_IDLE_MS,
    direct,
  });
  const maintenance = new MaintenanceWorker({ connection: conns.workers, prefix: keys.bullPrefix, events: stores.events, logger });
  // BullMQ workers open their connections when constructed: their close steps go in now.
  shutdown.on("workers", "delivery worker", () => worker.close());
  shutdown.on("workers", "fan-out", () => fanout.close());
  shutdown.on("workers", "maintenance", () => maintenance.close());
  return {
    async start(): Promise<void> {
      // Not awaited: until the subscription is live, listeners are read from Redis.
      void listenerCache.start();
      void circuitHints.start();
      worker.start();
      await fanout.start();
      maintenance.start();
    },
    /** True while every worker of the role runs. */
    running: (): boolean => worker.isRunning() && fanout.isRunning() && maintenance.isRunning(),
  };
}
