import type { Server } from "node:http";
import { createApiFeature, type RouteEntry } from "./app/api-feature.js";
import { createConnections } from "./app/connections.js";
import { createCore } from "./app/core.js";
import { redisTarget, requestCommandTimeoutMs } from "./app/redis-client.js";
import { createDeliveryFeature } from "./app/delivery-feature.js";
import { createOpsFeature } from "./app/ops-feature.js";
import { processReadiness } from "./app/readiness.js";
import { Shutdown } from "./app/shutdown.js";
import { welcomeLine } from "./app/welcome.js";
import type { Config } from "./config/schema.js";
import type { Logger } from "./observability/logger.js";
import { QueueMonitor } from "./observability/queue-monitor.js";
import { OutboxStream } from "./store/outbox-stream.js";
import { RunStream } from "./store/run-stream.js";
import type { UserStore } from "./store/users.js";

export interface Daemon {
  readonly server: Server | undefined;
  /** The bound port (useful with PORT=0). */
  readonly port: number;
  /** The ops listener's bound port; undefined without OPS_PORT. */
  readonly opsPort: number | undefined;
  /** The source endpoints' own listener's bound port; undefined without ENDPOINT_PORT (or the api role). */
  readonly endpointPort: number | undefined;
  readonly users: UserStore;
  /** The routes this process serves (empty without the api role). */
  readonly routes: readonly RouteEntry[];
  /** Shuts down in the written order; idempotent. */
  close(): Promise<void>;
}

export interface DaemonOptions {
  readonly config: Config;
  readonly logger: Logger;
  /** REDIS_URL or the embedded server's; ignored when the config names sentinels or cluster nodes. */
  readonly redisUrl: string | undefined;
  readonly registryDir: string;
}

/**
 * The composition root: opens the connections, builds the shared core (app/core.ts) and starts the
 * features of the roles this process runs (ROLES). Every part registers its shutdown step as it is
 * opened (app/shutdown.ts: HTTP, workers, resources, queues, Redis, in that order); a start that
 * fails runs the same steps, so it closes exactly what it opened, and rethrows.
 */
export async function startDaemon(opts: DaemonOptions): Promise<Daemon> {
  const { config, logger } = opts;
  const roles = new Set(config.roles);
  const shutdown = new Shutdown(config.shutdownTimeoutMs, logger);
  try {
    const target = redisTarget(config, opts.redisUrl);
    const conns = createConnections(target, { commandTimeoutMs: requestCommandTimeoutMs(config), logger });
    shutdown.on("redis", "connections", () => conns.closeAll());
    const core = createCore({ config, logger, conns, registryDir: opts.registryDir, shutdown });
    await core.prepare();

    const delivery = roles.has("worker") ? createDeliveryFeature(core, conns, shutdown) : undefined;
    await delivery?.start();
    await core.runtime.start(roles);
    const queues = Object.values(core.queues);
    const monitor = new QueueMonitor(
      queues,
      core.metrics,
      undefined,
      new OutboxStream(conns.commands, conns.fanoutReads, core.keys),
      new RunStream(conns.commands, core.keys, config.sourceRunStreamPerUser),
    );
    monitor.start();
    shutdown.on("workers", "queue monitor", () => monitor.close());

    const ready = processReadiness({ redis: conns.commands, runtime: core.runtime, delivery, analyzer: core.analyzer });
    core.metrics.observeReadiness(ready);
    const api = roles.has("api") ? createApiFeature(core, conns, shutdown, ready) : undefined;
    const port = (await api?.start()) ?? config.port;
    if (api) {
      const { url, msg } = welcomeLine(config, port);
      logger.info({ port, host: config.host, url, roles: [...roles] }, msg);
    }
    // Probes and scrapes of processes without the api role (OPS_PORT); after the roles started.
    const opsPort = config.opsPort === undefined ? undefined : await createOpsFeature(core, shutdown, ready).start(config.opsPort);
    return {
      server: api?.server(),
      port,
      opsPort,
      endpointPort: api?.endpointPort(),
      users: core.stores.users,
      routes: api?.routes() ?? [],
      close: () => shutdown.run(),
    };
  } catch (err) {
    await shutdown.run();
    throw err;
  }
}
