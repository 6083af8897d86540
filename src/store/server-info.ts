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
