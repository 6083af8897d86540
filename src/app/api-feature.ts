import type { Server } from "node:http";
import type Koa from "koa";
import { createApp, createEndpointApp, type RouteEntry, routeTable } from "../api/app.js";
export type { RouteEntry } from "../api/app.js";
import { queueBoard } from "../api/queue-board.js";
import { deliveryRoutes } from "../api/routes/deliveries.js";
import { eventRoutes } from "../api/routes/events.js";
import { liveTailRoutes } from "../api/routes/live-tail.js";
import { randomBase62 } from "../domain/ids.js";
import { LiveTail } from "../events/live-tail.js";
import { LiveTailStore } from "../store/live-tail.js";
import { sourceEndpoints } from "../api/routes/source-endpoints.js";
import type { MaintenanceJob } from "../queue/catalog.js";
import { AuthCache } from "../store/auth-cache.js";
import { ReplicaAck } from "../store/replica-ack.js";
import { replicatedWrites } from "../api/middleware/replicated.js";
import type { Connections } from "./connections.js";
import type { Core } from "./core.js";
import type { Shutdown } from "./shutdown.js";

/** Maintenance jobs (event deletion) are retried a few times, then kept for inspection. */
const MAINTENANCE_JOB_OPTS = {
  removeOnComplete: true,
  removeOnFail: 1000,
  attempts: 3,
  backoff: { type: "exponential", delay: 1000 },
} as const;

/**
 * The api role: the HTTP server (REST API, source endpoints, ops routes). `ready` is the readiness
 * of the whole process (/readyz).
 */
export function createApiFeature(core: Core, conns: Connections, shutdown: Shutdown, ready: () => Promise<boolean>) {
  const { config, logger, stores, services, queues } = core;
  // API keys are resolved from an in-process cache that key rotation and user deletion
  // invalidate over pub/sub (store/auth-cache.ts).
  const authCache = new AuthCache(stores.users, {
    subscriber: conns.subscriber("key-revocations"),
    channel: core.keys.apiKeyRevocations(),
    logger,
  });
  shutdown.on("workers", "auth cache", () => authCache.stop());
  // The live tail (SPEC §9): its streams end first at shutdown, so the server can close.
  const random = core.ctx.randomBytes;
  const tail = new LiveTail(new LiveTailStore(conns.commands, core.keys, (name) => conns.blocking(name)), {
    heartbeatMs: config.liveTail.heartbeatSeconds * 1000,
    tokenTtlMs: config.liveTail.tokenTtlSeconds * 1000,
    maxStreamsPerUser: config.liveTail.maxStreamsPerUser,
    maxBufferedBytesPerStream: config.liveTail.maxBufferedBytesPerStream,
    maxBufferedBytesPerProcess: config.liveTail.maxBufferedBytesPerProcess,
    keyHolder: (digest) => stores.users.userOfDigest(digest),
    newToken: () => `sse_${randomBase62(32, random)}`,
    newStreamId: () => randomBase62(16, random),
    now: Date.now,
    logger,
    metrics: core.metrics,
  });
  shutdown.on("http", "live tail", () => tail.close());
  // A rotated key's streams end as soon as this process learns of the rotation.
  authCache.onRevoked((digest) => tail.revoked(digest));
  const live = liveTailRoutes({
    tail,
    authenticator: authCache,
    keyDigest: (key) => stores.users.digestOf(key),
    sources: services.sources,
    workflows: services.workflows,
  });
  // REDIS_MIN_REPLICAS_ACK: the connections a request writes through are the commands (stores,
  // ingest) and the queue producers (source runs, replays, maintenance jobs).
  const { minReplicasAck, replicaAckTimeoutMs } = config.redisHa;
  const acknowledgeWrites =
    minReplicasAck > 0 ? replicatedWrites(new ReplicaAck([conns.commands, conns.queues], minReplicasAck, replicaAckTimeoutMs)) : undefined;
  const endpoints = sourceEndpoints(core.runtime.requests, { bodyLimitBytes: config.bodyLimitBytes, logger, metrics: core.metrics });
  const app = createApp({
    authenticator: authCache,
    ...(acknowledgeWrites ? { acknowledgeWrites } : {}),
    logger,
    metrics: core.metrics,
    adminToken: config.adminToken,
    publicUrl: config.publicUrl,
    bodyLimitBytes: config.bodyLimitBytes,
    ...services,
    purgeUser: (userId: string) => services.userDeletion.delete(userId),
    ready,
    liveTail: live,
    version: config.version,
    // The dashboard exists only where the admin API does.
    queueBoard: config.adminToken ? queueBoard(Object.values(queues), logger) : undefined,
    endpoints,
    v1Modules: [
      eventRoutes({
        events: stores.events,
        ingest: core.ingest,
        sources: services.sources,
        workflows: services.workflows,
        webhooks: services.webhooks,
        version: config.version,
        enqueueMaintenance: async (job: MaintenanceJob) => {
          await queues.maintenance.add(job.kind, job, MAINTENANCE_JOB_OPTS);
        },
      }),
      live.v1,
      deliveryRoutes({
        webhooks: services.webhooks,
        log: stores.attemptLog,
        replays: stores.replays,
        queue: queues.delivery,
        attempts: core.attempts,
      }),
    ],
  });
  // ENDPOINT_PORT: the endpoints' own origin. The main listener keeps serving them too, so URLs
  // given out before ENDPOINT_URL was set keep working (docs/decisions.md).
  const endpointApp =
    config.endpointPort === undefined
      ? undefined
      : createEndpointApp({ logger, metrics: core.metrics, endpoints, ...(acknowledgeWrites ? { acknowledgeWrites } : {}) });
  let server: Server | undefined;
  let endpointPort: number | undefined;
  /** Listens on HOST:`port` and registers the shutdown steps; resolves with the bound port. */
  const listen = async (koa: Koa, port: number, name: string): Promise<[Server, number]> => {
    const s = await new Promise<Server>((resolve, reject) => {
      const listening = koa.listen(port, config.host, () => resolve(listening));
      listening.once("error", reject);
    });
    s.keepAliveTimeout = 65_000;
    shutdown.on("http", name, async () => {
      await new Promise<void>((r) => s.close(() => r()));
    });
    // Connections still open when the close step ends (or times out) are cut.
    shutdown.on("workers", `${name} connections`, () => s.closeAllConnections?.());
    const addr = s.address();
    return [s, addr && typeof addr === "object" ? addr.port : port];
  };
  return {
    /** Listens (and on ENDPOINT_PORT, when set); resolves with the main listener's bound port. */
    async start(): Promise<number> {
      // Not awaited: until the subscription is live, keys are read from Redis.
      void authCache.start();
      const [main, port] = await listen(app, config.port, "server");
      server = main;
      if (endpointApp && config.endpointPort !== undefined) {
        [, endpointPort] = await listen(endpointApp, config.endpointPort, "endpoint server");
        logger.info({ port: endpointPort, host: config.host, endpointUrl: config.endpointUrl }, "source endpoints listening");
      }
      return port;
    },
    server: (): Server | undefined => server,
    /** The endpoints' own listener's bound port; undefined without ENDPOINT_PORT. */
    endpointPort: (): number | undefined => endpointPort,
    /** Every route+method the app serves (the OpenAPI tests compare it with the document). */
    routes: (): readonly RouteEntry[] => routeTable(app),
  };
}
