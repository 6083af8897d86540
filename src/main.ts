import path from "node:path";
import pRetry from "p-retry";
import { describeTarget, openCluster, openRedis, redisTarget } from "./app/redis-client.js";
import { ConfigError, loadConfig } from "./config/load.js";
import type { Config } from "./config/schema.js";
import { type Daemon, startDaemon } from "./daemon.js";
import { createLogger } from "./observability/logger.js";
import { packageVersion, projectRoot } from "./paths.js";
import { DataDirInUseError, RedisServerMissingError, startEmbeddedRedis, type EmbeddedRedis } from "./redis/embedded.js";
import { clusterState, evictionPolicy, isClusterNode } from "./store/server-info.js";

/** How long the first contact with Redis may take per attempt (connect, PING, INFO). */
const PROBE_DEADLINE_MS = 3000;
/** Retries of that first contact (with backoff up to 4 s: about 20 s in all) before the start fails. */
const PROBE_RETRIES = 8;

/** An embedded redis-server that goes down more often than this is given up on (the daemon exits 1). */
const EMBEDDED_REDIS_RESTARTS = { maxRestarts: 5, windowMs: 60_000 } as const;
/** How long the give-up may spend stopping the embedded server before the daemon exits anyway. */
const EMBEDDED_GIVE_UP_EXIT_MS = 5000;

/** Process entry point: the only module that reads the environment, listens and installs signal handlers. */
async function main(): Promise<void> {
  const root = projectRoot();
  let config: Config;
  try {
    config = loadConfig(process.env, packageVersion(root));
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`tributary: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  const logger = createLogger(config.logLevel, {}, config.logFormat);

  let embedded: EmbeddedRedis | undefined;
  let redisUrl = config.redisUrl;
  // The embedded server: no REDIS_URL and no other shape (REDIS_SENTINELS, REDIS_CLUSTER_NODES).
  if (!redisUrl && config.redisHa.shape.kind === "single") {
    const dir = path.resolve(config.dataDir, "redis");
    try {
      embedded = await startEmbeddedRedis({
        dir,
        logger,
        // A dead server is started again (same port, password and append-only file); a server
        // that keeps dying is not, and the daemon exits 1 so that its supervisor sees the failure
        // instead of a process answering 503 forever.
        restart: {
          ...EMBEDDED_REDIS_RESTARTS,
          onGiveUp: (err) => {
            logger.fatal({ err: err.message }, "giving up on the embedded redis-server; exiting");
            logger.flush?.();
            // Exit 1 even if stopping the server or releasing the data dir hangs.
            setTimeout(() => process.exit(1), EMBEDDED_GIVE_UP_EXIT_MS).unref();
            void embedded?.close().finally(() => process.exit(1));
          },
        },
      });
    } catch (err) {
      if (err instanceof RedisServerMissingError) {
        process.stderr.write(
          "tributary: REDIS_URL is not set and no redis-server is on PATH: set REDIS_URL=redis://host:6379 or install Redis (apt-get install redis-server)\n",
        );
        process.exit(1);
      }
      if (err instanceof DataDirInUseError) {
        process.stderr.write(`tributary: ${err.message}\n`);
        process.exit(1);
      }
      throw err;
    }
    redisUrl = embedded.url;
    // Not the URL: it carries the password.
    logger.info({ port: embedded.port, pid: embedded.pid, dir }, "started embedded redis-server (append-only file on, password required)");
  }

  // Redis may still be starting (compose, restarts): retry the first contact before giving up.
  // Opened like every other connection (app/redis-client.ts): a Sentinel group is asked for its master.
  const target = redisTarget(config, redisUrl);
  const address = describeTarget(target);
  let clusterNode = false;
  let policy: string | undefined;
  await pRetry(
    async () => {
      // A Cluster is probed with a Cluster client: it reads the slot map from a seed, then PING
      // goes to one of its masters; `cluster_state` must be ok (every slot served).
      const probe =
        target.kind === "cluster"
          ? openCluster(target, { lazyConnect: true, maxRetriesPerRequest: 1 }, { clusterRetryStrategy: () => null })
          : openRedis(target, {
              lazyConnect: true,
              maxRetriesPerRequest: 1,
              retryStrategy: () => null,
              sentinelRetryStrategy: () => null,
            });
      // The socket's own error ("connect ECONNREFUSED …") says more than the command's "Connection
      // is closed."; and an error event without a listener is printed by ioredis with its stack.
      let socketError: Error | undefined;
      probe.on("error", (err: Error) => {
        socketError = err;
      });
      // A stalled server (stopped process, dropped packets) accepts the TCP connection and then
      // answers nothing: without a deadline the first contact, and so the start, would wait forever.
      let timer: NodeJS.Timeout | undefined;
      const stalled = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`Redis accepted the connection but did not answer within ${PROBE_DEADLINE_MS} ms`)),
          PROBE_DEADLINE_MS,
        );
      });
      try {
        await Promise.race([
          (async () => {
            await probe.connect();
            await probe.ping();
            if (target.kind === "cluster") {
              const state = await clusterState(probe);
              if (state !== "ok") throw new Error(`the Redis Cluster reports cluster_state:${state ?? "unknown"}`);
            } else clusterNode = await isClusterNode(probe);
            policy = await evictionPolicy(probe);
          })(),
          stalled,
        ]);
      } catch (err) {
        throw socketError && (err as Error).message === "Connection is closed." ? socketError : err;
      } finally {
        clearTimeout(timer);
        probe.disconnect();
      }
    },
    {
      retries: PROBE_RETRIES,
      minTimeout: 250,
      maxTimeout: 4000,
      onFailedAttempt: ({ attemptNumber, retriesLeft, error }) => {
        if (retriesLeft > 0)
          logger.warn(
            { attemptNumber, redis: address, err: error.message },
            `redis at ${address} is not answering (${error.message}); attempt ${attemptNumber} of ${PROBE_RETRIES + 1}, retrying`,
          );
      },
    },
  ).catch((err: Error) => {
    process.stderr.write(
      `tributary: redis at ${address} did not answer after ${PROBE_RETRIES + 1} attempts (${err.message}): check REDIS_URL (or REDIS_SENTINELS, REDIS_CLUSTER_NODES) and that Redis runs\n`,
    );
    process.exit(1);
  });

  if (policy !== undefined && policy !== "noeviction")
    logger.warn(
      { maxmemoryPolicy: policy },
      "Redis may evict keys at maxmemory (maxmemory-policy is not noeviction): queued deliveries and events can be lost; set maxmemory-policy noeviction",
    );
  if (clusterNode) {
    process.stderr.write(
      "tributary: the Redis server at REDIS_URL is a Redis Cluster node (cluster_enabled:1): set REDIS_CLUSTER_NODES=host:port,... (its nodes) instead of REDIS_URL\n",
    );
    await embedded?.close();
    process.exit(1);
  }

  let stopping = false;
  let daemon: Daemon | undefined;
  const end = (code: number) => process.exit(code);
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down");
    // Kept referenced: a drain stuck on a promise nothing will settle must still end here.
    setTimeout(() => end(1), config.shutdownTimeoutMs * 3);
    await daemon?.close();
    await embedded?.close();
    logger.info("stopped");
    logger.flush?.();
    end(0);
  };
  daemon = await startDaemon({
    config,
    logger,
    redisUrl,
    registryDir: path.join(root, "registry"),
  });
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

main().catch((err) => {
  process.stderr.write(`tributary: failed to start: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
