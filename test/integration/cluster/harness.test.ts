import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keySlot, type LocalCluster, startCluster } from "../../helpers/cluster.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The cluster harness itself (test/helpers/cluster.ts), which the cluster tests lean on: 3 masters
 * with a replica each start and are healthy (replication links up); a SIGKILLed master's replica
 * takes over its slots and every live node says cluster_state:ok again within a bound; a write
 * acknowledged by a replica (WAIT 1) before the kill is read back from the new master; the old
 * master restarted rejoins as a replica of its successor.
 */

/** Promotion takes about 2.5 s at node-timeout 1000; the bound leaves room for a loaded machine. */
const FAILOVER_BOUND_MS = 30_000;

let cluster: LocalCluster;
let client: Cluster;

beforeAll(async () => {
  const started = Date.now();
  cluster = await startCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1000 });
  console.info(`[cluster] 3 masters + 3 replicas healthy in ${Date.now() - started} ms`);
  client = new Cluster(cluster.seeds.slice(), {
    scaleReads: "master",
    retryDelayOnFailover: 200,
    retryDelayOnClusterDown: 200,
    redisOptions: { connectTimeout: 1000, commandTimeout: 5000 },
  });
  client.on("error", () => {});
}, 60_000);

afterAll(async () => {
  client?.disconnect();
  await cluster?.stop();
});

describe("the local cluster harness", () => {
  it("starts 3 masters, each with a replica linked to it", async () => {
    expect(cluster.masters).toHaveLength(3);
    expect(cluster.replicas).toHaveLength(3);
    expect(cluster.seedList.split(",")).toHaveLength(6);
    for (const r of cluster.replicas) {
      expect(await cluster.roleOf(r)).toBe("replica");
      const master = cluster.node(r.replicaOf as number);
      expect(r.slots).toEqual(master.slots);
    }
    for (const m of cluster.masters) expect(await cluster.roleOf(m)).toBe("master");
    // Every master's slots are served by it.
    for (const m of cluster.masters) expect((await cluster.masterForSlot(m.slots[0])).port).toBe(m.port);
  });

  it("promotes the replica of a SIGKILLed master, keeps a write the replica acknowledged, and takes the old master back as a replica", async () => {
    const victim = cluster.masters[1];
    if (!victim) throw new Error("no second master");
    // A key on the victim's slots, written and acknowledged by its replica.
    let key = "";
    for (let i = 0; key === ""; i++) if (keySlot(`k${i}`) >= victim.slots[0] && keySlot(`k${i}`) <= victim.slots[1]) key = `k${i}`;
    await client.set(key, "kept");
    const node = client.nodes("master").find((n) => n.options.port === victim.port);
    expect(await node?.call("WAIT", 1, 5000)).toBe(1);

    const killedAt = Date.now();
    await cluster.kill(victim);
    const { newMaster, waitedMs } = await cluster.waitForFailover(victim, FAILOVER_BOUND_MS);
    console.info(`[cluster] replica ${newMaster.port} took over ${victim.port}'s slots ${Date.now() - killedAt} ms after the kill`);
    expect(newMaster.replicaOf).toBe(victim.port);
    expect(waitedMs).toBeLessThan(FAILOVER_BOUND_MS);
    expect(await waitFor(async () => (await client.get(key)) === "kept", { timeoutMs: 15_000, what: "the key via the new master" })).toBe(
      true,
    );

    await cluster.restart(victim);
    await waitFor(async () => (await cluster.roleOf(victim)) === "replica", {
      timeoutMs: 30_000,
      what: "the old master to rejoin as a replica",
    });
    await cluster.waitHealthy(30_000);
    expect((await cluster.masterForSlot(victim.slots[0])).port).toBe(newMaster.port);
  }, 90_000);
});
