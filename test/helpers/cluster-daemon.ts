import { randomBytes } from "node:crypto";
import { freePort } from "../../src/redis/embedded.js";
import type { LocalCluster } from "./cluster.js";
import { type DaemonChild, spawnDaemon, waitForReady } from "./process.js";
import { type Receiver, startReceiver } from "./receiver.js";

/**
 * Daemon processes on a local Redis Cluster (test/helpers/cluster.ts), for the end-to-end cluster
 * tests: `node --import tsx src/main.ts` children (test/helpers/process.ts) with
 * `REDIS_CLUSTER_NODES` set to every node of the cluster, each on ports picked at run time. A
 * process with the api role answers on `PORT`; one without it gets an `OPS_PORT` listener, so
 * every process has a `/readyz` to wait for and to watch (`url` is that listener).
 */

export interface ClusterDaemonOptions {
  /** ROLES (default every role). */
  readonly roles?: string;
  /** REDIS_KEY_PREFIX shared by the processes of one deployment. */
  readonly prefix: string;
  /** ADMIN_TOKEN shared by the processes of one deployment. */
  readonly adminToken: string;
  /** More variables, on top of the test-friendly defaults. */
  readonly env?: Record<string, string>;
  /** How long the process may take to answer /readyz 200 (default 60 s). */
  readonly readyTimeoutMs?: number;
}

/** A fresh prefix and admin token for one deployment. */
export function clusterDeployment(): { prefix: string; adminToken: string } {
  return { prefix: `tc${randomBytes(3).toString("hex")}`, adminToken: `admin-${randomBytes(8).toString("hex")}` };
}

/** Where a daemon's Redis is: a local cluster, or the variables of another shape (e.g. a Sentinel group's `env()`). */
export type DaemonRedis = LocalCluster | Record<string, string>;

const redisEnv = (redis: DaemonRedis): Record<string, string> =>
  "seedList" in redis && typeof redis.seedList === "string" ? { REDIS_CLUSTER_NODES: redis.seedList } : (redis as Record<string, string>);

/** The environment of a daemon process on `redis` (exported for the conformance run). */
export function clusterDaemonEnv(redis: DaemonRedis, port: number, opts: ClusterDaemonOptions): Record<string, string> {
  const roles = opts.roles ?? "api,worker,scheduler";
  return {
    ...redisEnv(redis),
    REDIS_KEY_PREFIX: opts.prefix,
    ADMIN_TOKEN: opts.adminToken,
    HOST: "127.0.0.1",
    PORT: String(port),
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    ROLES: roles,
    ...(roles.split(",").includes("api") ? {} : { OPS_PORT: String(port) }),
    ALLOW_PRIVATE_DESTINATIONS: "true",
    DELIVERY_RETRY_SCHEDULE: "200ms,500ms,1s,2s,4s,8s",
    TIMER_MIN_INTERVAL_SECONDS: "1",
    LOG_LEVEL: "warn",
    SHUTDOWN_TIMEOUT_MS: "3000",
    ...opts.env,
  };
}

/** Spawns one daemon process on `redis` and waits until its /readyz answers 200. */
export async function startClusterDaemon(name: string, redis: DaemonRedis, opts: ClusterDaemonOptions): Promise<DaemonChild> {
  const port = await freePort();
  const d = spawnDaemon(name, clusterDaemonEnv(redis, port, opts));
  const child: DaemonChild = { ...d, url: `http://127.0.0.1:${port}` };
  // waitForReady polls on through an early exit; the exit ends the wait at once instead.
  const exited = d.exited.then((e) => {
    throw new Error(`${name} exited (${e.code ?? e.signal}) before it was ready:\n${d.logs()}`);
  });
  await Promise.race([waitForReady(child, opts.readyTimeoutMs ?? 60_000), exited]);
  exited.catch(() => {});
  return child;
}

/**
 * A loopback receiver that answers 200 and counts each `webhook-id` and each event it saw. Event
 * ids are unique within a user's stream only (two users' events may share one), so an event is
 * named by the path it was sent to (one per user in these tests) and its id: `deliveryKey`.
 */
export interface CountingReceiver extends Receiver {
  /** Requests per `webhook-id` header (one delivery of one event to one webhook). */
  readonly byWebhookId: Map<string, number>;
  /** Requests per `deliveryKey(path, x-tributary-event-id)`. */
  readonly byEvent: Map<string, number>;
}

/** How a `CountingReceiver` names one event sent to one path. */
export const deliveryKey = (path: string, eventId: string): string => `${path} ${eventId}`;

export async function startCountingReceiver(): Promise<CountingReceiver> {
  const byWebhookId = new Map<string, number>();
  const byEvent = new Map<string, number>();
  const rx = await startReceiver((req) => {
    const wid = req.headers["webhook-id"];
    const eid = req.headers["x-tributary-event-id"];
    if (typeof wid === "string") byWebhookId.set(wid, (byWebhookId.get(wid) ?? 0) + 1);
    if (typeof eid === "string") {
      const k = deliveryKey(req.path.split("?")[0] ?? req.path, eid);
      byEvent.set(k, (byEvent.get(k) ?? 0) + 1);
    }
    return { status: 200 };
  });
  return Object.assign(rx, { byWebhookId, byEvent });
}
