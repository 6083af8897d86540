import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis";
import type { HostPort } from "../config/host-list.js";
import type { Config } from "../config/schema.js";

/**
 * Where the Redis of a deployment is (SPEC §8): one node (REDIS_URL or the embedded server), a
 * Sentinel-monitored master group, or a Redis Cluster. Built from the configuration once
 * (`redisTarget`); every connection of the daemon, the CLI and the start-up probe is opened from
 * it by `openRedis`, so all of them follow a failover the same way.
 */
export type RedisTarget =
  | { readonly kind: "single"; readonly url: string; readonly auth: RedisAuth }
  | {
      readonly kind: "sentinel";
      readonly sentinels: readonly HostPort[];
      readonly name: string;
      readonly auth: RedisAuth;
      readonly sentinelPassword: string | undefined;
      readonly failoverTimeoutMs: number;
    }
  | { readonly kind: "cluster"; readonly nodes: readonly HostPort[]; readonly auth: RedisAuth; readonly failoverTimeoutMs: number };

export interface RedisAuth {
  readonly username: string | undefined;
  readonly password: string | undefined;
}

/** A Cluster deployment is refused until the key space is sharded (README "Scaling out"). */
export class ClusterNotSupportedError extends Error {
  constructor() {
    super(
      'REDIS_CLUSTER_NODES: Redis Cluster is not supported yet (the key space is not sharded across slots; see README "Scaling out"); use REDIS_URL or REDIS_SENTINELS',
    );
    this.name = "ClusterNotSupportedError";
  }
}

/** The target of a configuration; `url` is REDIS_URL or the embedded server's, for the single shape. */
export function redisTarget(config: Pick<Config, "redisHa">, url: string | undefined): RedisTarget {
  const ha = config.redisHa;
  const auth = { username: ha.username, password: ha.password };
  switch (ha.shape.kind) {
    case "sentinel":
      return {
        kind: "sentinel",
        sentinels: ha.shape.sentinels,
        name: ha.shape.name,
        auth,
        sentinelPassword: ha.sentinelPassword,
        failoverTimeoutMs: ha.failoverTimeoutMs,
      };
    case "cluster":
      return { kind: "cluster", nodes: ha.shape.nodes, auth, failoverTimeoutMs: ha.failoverTimeoutMs };
    default:
      if (url === undefined) throw new Error("no Redis URL: set REDIS_URL, REDIS_SENTINELS or start the embedded server");
      return { kind: "single", url, auth };
  }
}

/** The request-path command deadline: REDIS_COMMAND_TIMEOUT_MS, never past REDIS_FAILOVER_TIMEOUT_MS. */
export function requestCommandTimeoutMs(config: Pick<Config, "redisCommandTimeoutMs" | "redisHa">): number {
  return Math.min(config.redisCommandTimeoutMs, config.redisHa.failoverTimeoutMs);
}

/** `url` with the username/password of `auth` (which win over the URL's own). */
function withAuth(url: string, auth: RedisAuth): string {
  if (auth.username === undefined && auth.password === undefined) return url;
  const u = new URL(url);
  if (auth.username !== undefined) u.username = encodeURIComponent(auth.username);
  if (auth.password !== undefined) u.password = encodeURIComponent(auth.password);
  return u.toString();
}

/** A replica that was the master answers writes with READONLY until the client reconnects. */
const isReadOnly = (err: Error): boolean => err.message.startsWith("READONLY");

/**
 * Opens one connection to `target` with `options` (the caller's profile: fail-fast or patient).
 * - single: exactly as before this module existed (`new Redis(url, options)`); REDIS_USERNAME and
 *   REDIS_PASSWORD, when set, replace those of the URL.
 * - sentinel: the master of the group, asked of the sentinels at every (re)connection; a sentinel
 *   subscription (`failoverDetector`) reconnects at once on +switch-master; a READONLY answer (the
 *   node was demoted under us) reconnects and resends the command; a node that does not answer a
 *   connection attempt is given up after REDIS_FAILOVER_TIMEOUT_MS.
 * - cluster: throws `ClusterNotSupportedError` (see `openCluster` for the client it will use).
 */
export function openRedis(target: RedisTarget, options: RedisOptions): Redis {
  switch (target.kind) {
    case "single":
      return new Redis(withAuth(target.url, target.auth), options);
    case "sentinel":
      return new Redis({
        ...options,
        sentinels: target.sentinels.map((s) => ({ host: s.host, port: s.port })),
        name: target.name,
        role: "master",
        ...(target.auth.username === undefined ? {} : { username: target.auth.username }),
        ...(target.auth.password === undefined ? {} : { password: target.auth.password }),
        ...(target.sentinelPassword === undefined ? {} : { sentinelPassword: target.sentinelPassword }),
        failoverDetector: true,
        connectTimeout: target.failoverTimeoutMs,
        sentinelCommandTimeout: Math.min(target.failoverTimeoutMs, 2000),
        reconnectOnError: (err) => (isReadOnly(err) ? 2 : false),
      });
    case "cluster":
      throw new ClusterNotSupportedError();
  }
}

/**
 * The Cluster client the daemon will use once the key space is sharded (not used yet: the daemon
 * refuses REDIS_CLUSTER_NODES). Reads and writes go to masters (`scaleReads: "master"`: a replica
 * may lag behind an acknowledged write); MOVED/ASK are followed, CLUSTERDOWN and TRYAGAIN retried
 * (a failover or a slot migration), every node is reached with the deployment's credentials.
 */
export function openCluster(target: Extract<RedisTarget, { kind: "cluster" }>, redisOptions: RedisOptions): Cluster {
  const options: ClusterOptions = {
    scaleReads: "master",
    enableReadyCheck: true,
    enableAutoPipelining: redisOptions.enableAutoPipelining ?? false,
    retryDelayOnFailover: 200,
    retryDelayOnClusterDown: 300,
    retryDelayOnTryAgain: 100,
    maxRedirections: 16,
    redisOptions: {
      ...redisOptions,
      enableAutoPipelining: undefined,
      ...(target.auth.username === undefined ? {} : { username: target.auth.username }),
      ...(target.auth.password === undefined ? {} : { password: target.auth.password }),
      connectTimeout: target.failoverTimeoutMs,
      reconnectOnError: (err) => (isReadOnly(err) ? 2 : false),
    },
    lazyConnect: redisOptions.lazyConnect ?? false,
  };
  return new Cluster(
    target.nodes.map((n) => ({ host: n.host, port: n.port })),
    options,
  );
}
