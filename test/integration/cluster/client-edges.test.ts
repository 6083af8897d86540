import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createConnections } from "../../../src/app/connections.js";
import type { RedisTarget } from "../../../src/app/redis-client.js";
import { toAppError } from "../../../src/api/middleware/errors.js";
import { UnavailableError } from "../../../src/domain/errors.js";
import { FANOUT_GROUP } from "../../../src/events/fanout.js";
import { createLogger } from "../../../src/observability/logger.js";
import { createKeys } from "../../../src/store/keys.js";
import { ReplicaAck } from "../../../src/store/replica-ack.js";
import { keySlot, type LocalCluster, startCluster, useCluster } from "../../helpers/cluster.js";
import { onRedisNode } from "../../helpers/redis-node.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * Two edges of the daemon's Cluster client that only the end-to-end runs found
 * (docs/decisions.md "Cluster tests"): commands whose key ioredis cannot find (XGROUP) must not be
 * auto-pipelined with commands for other nodes (a fan-out worker's start failed with MOVED), and
 * a WAIT sent to a node the client still takes for a master while it is a replica now (a failed
 * master restarted under its successor) is "not confirmed" (503), not an error (500).
 */

const logger = createLogger("silent");
const targetOf = (c: LocalCluster): RedisTarget => ({
  kind: "cluster",
  nodes: c.seeds,
  auth: { username: undefined, password: undefined },
  failoverTimeoutMs: 10_000,
});

let cluster: LocalCluster;

beforeAll(async () => {
  cluster = await startCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1000 });
}, 60_000);

afterAll(async () => {
  await cluster?.stop();
});

describe("the daemon's Cluster client", () => {
  it("creates the consumer group of every shard outbox at once on the auto-pipelined command client", async () => {
    const conns = createConnections(targetOf(cluster), { commandTimeoutMs: 5000, logger });
    try {
      const keys = createKeys("cledge");
      const streams = Array.from({ length: keys.shards }, (_, i) => keys.shardOutbox(i));
      expect(new Set(streams.map((s) => cluster.nodeForSlot(keySlot(s)).port)).size).toBe(3);
      // In one tick, as OutboxStream.ensureGroup sends them.
      await Promise.all(streams.map((s) => conns.commands.xgroup("CREATE", s, FANOUT_GROUP, "0", "MKSTREAM")));
      const groups = await Promise.all(streams.map((s) => conns.commands.xinfo("GROUPS", s) as Promise<unknown[]>));
      expect(groups.map((g) => g.length)).toEqual(streams.map(() => 1));
    } finally {
      await conns.closeAll();
    }
  }, 30_000);

  it("answers 'not confirmed' when a WAIT reaches a node that became a replica", async () => {
    const conns = createConnections(targetOf(cluster), { commandTimeoutMs: 5000, logger });
    try {
      const commands = conns.commands as Cluster;
      await commands.set("{edge}:k", "v");
      const master = cluster.nodeForSlot(keySlot("{edge}:k"));
      const replica = cluster.replicas.find((r) => r.replicaOf === master.port);
      if (!replica) throw new Error("no replica");
      expect(commands.nodes("master").map((n) => n.options.port)).toContain(master.port);
      // A manual failover: the master becomes its replica's replica; the client is not told.
      await onRedisNode(replica.port, (r) => r.call("CLUSTER", "FAILOVER"));
      await waitFor(async () => (await cluster.roleOf(master)) === "replica", { timeoutMs: 20_000, what: "the manual failover" });
      const ack = new ReplicaAck([commands], 1, 500);
      await expect(ack.confirm(ack.begin())).rejects.toBeInstanceOf(UnavailableError);
    } finally {
      await conns.closeAll();
    }
  }, 60_000);
});

describe("a request-path Cluster client that lost every node", () => {
  const ownCluster = useCluster({ masters: 3 });

  it("fails commands at once while the whole cluster is down (503, not a hang), and serves again once it is back", async () => {
    const own = ownCluster();
    const conns = createConnections(targetOf(own), { commandTimeoutMs: 1000, logger });
    const commands = conns.commands as Cluster;
    try {
      await commands.set("{lost}:k", "v");
      for (const n of own.nodes) await own.kill(n);
      // The first command finds the nodes gone: the client's node pool drains and it reconnects over
      // and over. Without the fix, a command sent then waits in ioredis's offline queue until the
      // cluster is back (measured: the second GET never returned).
      for (let i = 0; i < 3; i++) {
        const outcome = await Promise.race([
          commands.get("{lost}:k").then(
            () => "answered",
            (err: Error) => err,
          ),
          new Promise<string>((r) => setTimeout(() => r("still waiting"), 8_000)),
        ]);
        expect(outcome).toBeInstanceOf(Error);
        expect(toAppError(outcome as Error)).toBeInstanceOf(UnavailableError);
      }
      for (const n of own.nodes) await own.restart(n);
      await waitFor(async () => (await commands.set("{lost}:k", "again").catch(() => undefined)) === "OK", {
        timeoutMs: 30_000,
        what: "the client serving again",
      });
      expect(await commands.get("{lost}:k")).toBe("again");
    } finally {
      await conns.closeAll();
    }
  }, 90_000);
});
