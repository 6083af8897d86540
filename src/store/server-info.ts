import type { Cluster } from "ioredis";
import type { RedisClient } from "./context.js";

/**
 * Whether the server is a Redis Cluster node (`INFO cluster`: `cluster_enabled:1`). A single-node
 * client pointed at one fails later with MOVED, or spins on MOVED in its workers; start-up checks
 * this first and refuses with a clear message.
 */
export async function isClusterNode(redis: RedisClient): Promise<boolean> {
  const info = await redis.info("cluster");
  return /^cluster_enabled:1\s*$/m.test(info);
}

/**
 * The server's `maxmemory_policy` (`INFO memory`). Any policy but `noeviction` lets Redis evict
 * keys once `maxmemory` is reached: queued deliveries, their stored payloads, outbox entries.
 */
export async function evictionPolicy(redis: RedisClient): Promise<string | undefined> {
  return /^maxmemory_policy:(\S+)/m.exec(await redis.info("memory"))?.[1];
}

/** A Cluster node's `cluster_state` (`CLUSTER INFO`): "ok" when every slot is served. */
export async function clusterState(node: RedisClient): Promise<string | undefined> {
  return /^cluster_state:(\w+)/m.exec(String(await node.call("CLUSTER", "INFO")))?.[1];
}

/** The `host:port` of every node a Cluster client knows (masters and replicas). */
export function knownClusterNodes(cluster: Cluster): { host: string; port: number }[] {
  return cluster
    .nodes("all")
    .map((n) => ({ host: String(n.options.host), port: Number(n.options.port) }))
    .filter((n) => n.host !== "undefined" && Number.isInteger(n.port));
}
