import type { Cluster } from "ioredis";
import { describe, expect, it } from "vitest";
import { createConnections } from "../../../src/app/connections.js";
import type { RedisTarget } from "../../../src/app/redis-client.js";
import { createLogger } from "../../../src/observability/logger.js";
import { keySlot, useCluster } from "../../helpers/cluster.js";
import { countSocketWrites, incrsFromCheckPhase } from "../../helpers/socket-writes.js";

/**
 * The daemon's request-path Cluster client batches the commands of one event-loop tick into one
 * socket write per node (app/redis-client.ts `TickBatchedCluster`, docs/performance.md "Redis
 * Cluster"), in the order they were issued, with replies as without batching; and a command for a
 * key of another node in the same tick goes to that node.
 */

const logger = createLogger("silent");

const localCluster = useCluster({ masters: 3 });

/** The daemon's request-path connections to the local cluster. */
function connectCommands(cluster: ReturnType<typeof localCluster>) {
  const target: RedisTarget = {
    kind: "cluster",
    nodes: cluster.seeds,
    auth: { username: undefined, password: undefined },
    failoverTimeoutMs: 10_000,
  };
  const conns = createConnections(target, { commandTimeoutMs: 5000, logger });
  return { conns, commands: conns.commands as Cluster };
}

describe("the request-path Cluster client", () => {
  it("sends one tick's commands to a node in one socket write, in order, and each to the node of its key", async () => {
    const cluster = localCluster();
    const { conns, commands } = connectCommands(cluster);
    try {
      // Keys on two different masters.
      const here = "{tb-a}:n";
      const there = ["{tb-b}:n", "{tb-c}:n", "{tb-d}:n", "{tb-e}:n"].find(
        (k) => cluster.nodeForSlot(keySlot(k)).port !== cluster.nodeForSlot(keySlot(here)).port,
      );
      if (there === undefined) throw new Error("no key on another master");
      // The client is ready (slots known, node connections up).
      await Promise.all([commands.del(here), commands.del(there)]);
      const node = commands.nodes("master").find((n) => n.options.port === cluster.nodeForSlot(keySlot(here)).port);
      if (!node) throw new Error("no connection to the key's master");
      const flushes = countSocketWrites(node);
      let replies: unknown[];
      try {
        // In one tick: 50 commands to one node, interleaved with commands to another.
        const sent: Promise<unknown>[] = [];
        for (let i = 0; i < 50; i++) {
          sent.push(commands.incr(here));
          if (i % 10 === 0) sent.push(commands.incr(there));
        }
        replies = await Promise.all(sent);
      } finally {
        flushes.stop();
      }
      // Issue order is kept per node: the n-th INCR answers n.
      expect(replies.filter((_, i) => i % 11 !== 1)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
      expect(replies.filter((_, i) => i % 11 === 1)).toEqual([1, 2, 3, 4, 5]);
      expect(await commands.get(there)).toBe("5");
      // One write for the tick (without batching: one per command, 50).
      expect(flushes.count()).toBeLessThanOrEqual(2);
    } finally {
      await conns.closeAll();
    }
  }, 60_000);

  it("writes what writeTogether sends from a setImmediate callback at once, in one write per node", async () => {
    const cluster = localCluster();
    const { conns, commands } = connectCommands(cluster);
    try {
      const key = "{tb-together}:n";
      await commands.del(key);
      const node = commands.nodes("master").find((n) => n.options.port === cluster.nodeForSlot(keySlot(key)).port);
      if (!node) throw new Error("no connection to the key's master");
      const flushes = countSocketWrites(node);
      try {
        const { plain, together } = await incrsFromCheckPhase(commands, flushes, key);
        // A plain command in the check phase waits for the next turn's uncork.
        expect(plain.writes).toBe(0);
        expect(plain.value).toBe(1);
        expect(together.writes).toBe(1);
        expect(together.values).toEqual([2, 3, 4]);
      } finally {
        flushes.stop();
      }
    } finally {
      await conns.closeAll();
    }
  }, 60_000);
});
