import { ReplicaAck } from "../store/replica-ack.js";
import { randomUUID } from "node:crypto";
import { Attempter } from "../delivery/attempt.js";
import { ReplayDriver } from "../delivery/bulk-replay.js";
import { DirectDelivery } from "../delivery/direct.js";
import { FairGate } from "../delivery/fair-gate.js";
import { DeliveryJobQueue } from "../delivery/jobs.js";
import { createSender } from "../delivery/sender.js";
import { DeliveryWorker } from "../delivery/worker.js";
import { destinationKey } from "../domain/fair-slots.js";
import { FanoutWorker } from "../events/fanout.js";
import { FilterBudgetReports } from "../events/filter-budget-report.js";
import { MaintenanceWorker } from "../events/maintenance.js";
import { ListenerCache } from "../store/listener-cache.js";
import { CircuitBreaker } from "../delivery/circuit.js";
import { CircuitHints } from "../store/circuit-hints.js";
import { WebhookRateLimiter } from "../store/rate-limit.js";
import type { Connections } from "./connections.js";
import type { Core } from "./core.js";
import type { Shutdown } from "./shutdown.js";

/**
 * An attempt in flight this long marks its slot as held by a slow destination: while the oldest
 * one holding the slots a delivery needs is, that delivery is queued or put off instead of waiting.
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
  const webhookRates = new WebhookRateLimiter(conns.commands, keys);
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
    rateLimit: webhookRates,
    health: core.health,
    circuit,
    payloads: stores.payloads,
    logger,
    metrics,
  });
  const deliveryJobs = new DeliveryJobQueue(queues.delivery, core.attempts, stores.payloads);
  // Per-user and per-destination caps on attempts in flight, shared by both paths of this
  // process (docs/decisions.md "Delivery fairness"); the destination is read from the listener cache.
  const gate = new FairGate({
    directSlots: config.deliveryDirectConcurrency,
    perUser: config.deliveryConcurrencyPerUser,
    perDestination: config.deliveryConcurrencyPerDestination,
    clogMs: DIRECT_CLOG_MS,
    destinationOf: async (job) =>
      destinationKey(
        job.listenerKind === "webhook"
          ? (await listenerCache.get(job.userId, job.listenerId))?.url
          : (await listenerCache.workflow(job.userId, job.listenerId))?.trigger_url,
        job.listenerId,
      ),
    metrics,
  });
  const worker = new DeliveryWorker({
    connection: conns.workers,
    prefix: keys.queuePrefix("delivery"),
    concurrency: config.deliveryConcurrency,
    attempter,
    gate,
    logger,
  });
  const direct = config.deliveryDirectConcurrency > 0 ? new DirectDelivery({ attempter, jobs: deliveryJobs, gate, logger }) : undefined;
  const fanout = new FanoutWorker({
    blocking: conns.fanoutReads,
    // On a Redis Cluster each shard outbox is read on a connection of its own.
    openBlocking: (name) => conns.blocking(name),
    redis: conns.commands,
    keys,
    subscriptions: stores.subscriptions,
    deliveryJobs,
    sourceRuns: core.runtime.runs,
    logger,
    metrics,
    consumer: `${process.pid}-${randomUUID().slice(0, 8)}`,
    claimIdleMs: FANOUT_CLAIM_IDLE_MS,
    direct,
    // REDIS_MIN_REPLICAS_ACK: what an outbox entry caused is on replicas before the entry is acknowledged.
    replicas:
      config.redisHa.minReplicasAck > 0
        ? new ReplicaAck([conns.commands, conns.queues], config.redisHa.minReplicasAck, config.redisHa.replicaAckTimeoutMs)
        : undefined,
    filterBudget: config.filterBudget,
    overBudget: new FilterBudgetReports({
      ingest: core.ingest,
      keys,
      limits: config.filterBudget,
      logger,
      randomBytes: core.ctx.randomBytes,
    }),
  });
  // Bulk replays are queued by the worker process holding the driver lease (delivery/bulk-replay.ts).
  const replayDriver = new ReplayDriver({
    replays: stores.replays,
    log: stores.attemptLog,
    jobs: deliveryJobs,
    queue: queues.delivery,
    ratePerSecond: config.replayRatePerSecond,
    owner: `${process.pid}-${randomUUID()}`,
    logger,
  });
  shutdown.on("workers", "replay driver", () => replayDriver.close());
  const maintenance = new MaintenanceWorker({
    connection: conns.workers,
    prefix: keys.queuePrefix("maintenance"),
    events: stores.events,
    payloads: stores.payloads,
    logger,
  });
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
      replayDriver.start();
    },
    /** True while every worker of the role runs. */
    running: (): boolean => worker.isRunning() && fanout.isRunning() && maintenance.isRunning(),
  };
}
