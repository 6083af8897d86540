import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Queue, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createConnections } from "../../../src/app/connections.js";
import { processReadiness } from "../../../src/app/readiness.js";
import { runCli } from "../../../src/cli/run.js";
import type { RedisTarget } from "../../../src/app/redis-client.js";
import { UnavailableError } from "../../../src/domain/errors.js";
import { createLogger } from "../../../src/observability/logger.js";
import { freePort, redisAnswersPing } from "../../../src/redis/embedded.js";
import { AuthCache } from "../../../src/store/auth-cache.js";
import { createKeys } from "../../../src/store/keys.js";
import { LiveTailStore } from "../../../src/store/live-tail.js";
import { ReplicaAck } from "../../../src/store/replica-ack.js";
import { UserStore } from "../../../src/store/users.js";
import { type LocalCluster, startCluster, useCluster } from "../../helpers/cluster.js";
import { killAll, spawnDaemon, waitForReady } from "../../helpers/process.js";
import { onRedisNode, spawnRedisNode } from "../../helpers/redis-node.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The daemon's connections on a real Redis Cluster (SPEC §8, REDIS_CLUSTER_NODES): every named
 * connection answers (blocking readers on clients of their own, BullMQ on a Cluster, pub/sub), the
 * API key cache survives losing the node its subscriber is on, WAIT counts each master's replicas,
 * readiness, and a whole ROLES=api daemon answering /readyz.
 */

const logger = createLogger("silent");
const none = { username: undefined, password: undefined };
const targetOf = (c: LocalCluster): RedisTarget => ({ kind: "cluster", nodes: c.seeds, auth: none, failoverTimeoutMs: 10_000 });

let cluster: LocalCluster;

beforeAll(async () => {
  cluster = await startCluster({ masters: 3, nodeTimeoutMs: 1000 });
  // Slots of a killed master stay refused; the others keep serving (the configuration we recommend).
  for (const n of cluster.nodes) await onRedisNode(n.port, (r) => r.config("SET", "cluster-require-full-coverage", "no"));
}, 60_000);

afterAll(async () => {
  await killAll();
  await cluster?.stop();
});

describe("connections on a 3-master Redis Cluster", () => {
  it("opens every named connection and each answers: commands, queues, blocking readers, subscribers", async () => {
    const conns = createConnections(targetOf(cluster), { commandTimeoutMs: 5000, logger });
    try {
      // Commands spread over every master (auto-pipelined per node).
      const keys = Array.from({ length: 30 }, (_, i) => `conn-test:k${i}`);
      await Promise.all(keys.map((k, i) => conns.commands.set(k, String(i))));
      expect(await Promise.all(keys.map((k) => conns.commands.get(k)))).toEqual(keys.map((_, i) => String(i)));
      expect(await conns.queues.ping()).toBe("PONG");

      // A blocking read on each reader: the command client keeps answering meanwhile.
      const readers = [conns.fanoutReads, conns.schedulerReads, conns.blocking("tail-test")];
      for (const [i, reader] of readers.entries()) {
        const stream = `{conn-test}:stream${i}`;
        const read = reader.xread("BLOCK", 10_000, "STREAMS", stream, "$");
        // The read is sent before the entry is added: wait until the server sees a blocked client.
        await waitFor(async () => /blocked_clients:[1-9]/.test(await infoOfSlotNode(stream)), { what: "the blocked read" });
        await conns.commands.xadd(stream, "*", "n", String(i));
        const reply = (await read) as [string, [string, string[]][]][] | null;
        expect(reply?.[0]?.[1][0]?.[1]).toEqual(["n", String(i)]);
      }

      // BullMQ: a producer on the queue connection, a worker on the workers connection.
      const prefix = "{conn-test-bull}";
      const queue = new Queue("cluster-test", { connection: conns.queues, prefix });
      const done: string[] = [];
      const worker = new Worker(
        "cluster-test",
        async (job) => {
          done.push(String(job.data.n));
        },
        { connection: conns.workers, prefix },
      );
      try {
        await queue.add("j", { n: 1 });
        await waitFor(() => done.length === 1, { timeoutMs: 20_000, what: "the job processed" });
        expect(done).toEqual(["1"]);
      } finally {
        await worker.close();
        await queue.close();
      }

      // A subscriber gets what the command client publishes (on any node).
      const sub = conns.subscriber("sub-test");
      const got: string[] = [];
      sub.on("message", (_ch: string, m: string) => got.push(m));
      await sub.subscribe("conn-test-channel");
      await conns.commands.publish("conn-test-channel", "hello");
      await waitFor(() => got.length === 1, { what: "the message" });
      expect(got).toEqual(["hello"]);

      const ready = processReadiness({
        redis: conns.commands,
        runtime: { running: () => true },
        delivery: undefined,
        analyzer: { healthy: async () => true },
      });
      expect(await ready()).toBe(true);
    } finally {
      await conns.closeAll();
    }
  }, 60_000);

  it("live tail: a reader blocks on its slot's node and CLIENT UNBLOCK reaches it there", async () => {
    const conns = createConnections(targetOf(cluster), { commandTimeoutMs: 5000, logger });
    const keys = createKeys("cltail");
    const store = new LiveTailStore(conns.commands, keys, (name) => conns.blocking(name));
    const reader = store.reader("tail-test");
    try {
      const s = { userId: "u_tail", emitterId: "src_tail", channel: "orders" };
      const key = keys.events(s.userId, s.emitterId, s.channel);
      await waitFor(async () => (await reader.read([s], ["0-0"], 50, 10)).size === 0, { what: "a first read" });
      const started = Date.now();
      const read = reader.read([s], ["0-0"], 20_000, 10);
      await waitFor(async () => /blocked_clients:[1-9]/.test(await infoOfSlotNode(key)), { what: "the blocked read" });
      await store.unblock(reader);
      expect((await read).size).toBe(0);
      expect(Date.now() - started).toBeLessThan(10_000);
      const id = (await conns.commands.xadd(key, "*", "s", JSON.stringify({ p: { n: 1 }, x: "", m: {} }))) as string;
      const got = await reader.read([s], ["0-0"], 5000, 10);
      expect(got.get(0)?.map((e) => e.id)).toEqual([id]);
    } finally {
      reader.close();
      await conns.closeAll();
    }
  }, 60_000);

  it("the CLI runs its users commands on REDIS_CLUSTER_NODES", async () => {
    let out = "";
    let err = "";
    const io = {
      stdout: (t: string) => {
        out += t;
      },
      stderr: (t: string) => {
        err += t;
      },
    };
    const code = await runCli(
      ["users", "list"],
      { REDIS_CLUSTER_NODES: cluster.seedList, REDIS_KEY_PREFIX: "clcli", LOG_LEVEL: "error" },
      io,
    );
    expect({ code, err }).toEqual({ code: 0, err: "" });
    expect(JSON.parse(out)).toEqual([]);
  }, 30_000);

  it("WAIT on a Cluster asks every master: masters without replicas confirm nothing", async () => {
    const conns = createConnections(targetOf(cluster), { commandTimeoutMs: 5000, logger });
    try {
      await conns.commands.set("{wait-test}:k", "1");
      const ack = new ReplicaAck([conns.commands], 1, 200);
      const token = ack.begin();
      await expect(ack.confirm(token)).rejects.toBeInstanceOf(UnavailableError);
    } finally {
      await conns.closeAll();
    }
  }, 30_000);

  it("a revoked API key is refused after the node holding the cache's subscriber was SIGKILLed", async () => {
    const conns = createConnections(targetOf(cluster), { commandTimeoutMs: 5000, logger });
    const keys = createKeys("clconn");
    const users = new UserStore({ redis: conns.commands, keys, now: Date.now, randomBytes });
    const sub = conns.subscriber("key-revocations");
    const cache = new AuthCache(users, { subscriber: sub, channel: keys.apiKeyRevocations(), logger });
    // The key index lives on one master; the subscriber must be on another one (the node killed
    // below), else the lookups themselves would fail: move it until it is (it rotates on reconnect).
    const indexPort = await slotNodePort(keys.apiKeys());
    try {
      const [k1, k2] = ["trib_cluster_test_key_one_0001", "trib_cluster_test_key_two_0002"];
      const d1 = users.digestOf(k1) as string;
      const d2 = users.digestOf(k2) as string;
      await conns.commands.hset(keys.apiKeys(), d1, "u_one", d2, "u_two");
      await cache.start();
      // Bounded: each turn waits for the reconnection to land on the next node (a check made right
      // after `disconnect` could still see the old connection ready and spin).
      for (let turn = 0; sub.options.port === indexPort; turn++) {
        if (turn >= cluster.nodes.length * 2) throw new Error("the subscriber never left the key index's node");
        const before = sub.options.port;
        sub.disconnect(true);
        await waitFor(() => sub.options.port !== before && sub.status === "ready" && cache.isLive(), {
          timeoutMs: 15_000,
          what: "the subscriber back on the next node",
        });
      }
      expect(await cache.authenticate(k1)).toBe("u_one");
      expect(await cache.authenticate(k2)).toBe("u_two");

      const killedPort = sub.options.port;
      const victim = cluster.nodes.find((n) => n.port === killedPort);
      if (!victim) throw new Error(`no node on ${killedPort}`);
      await victim.kill();
      // Revoked by another process right after the loss: the message may be published before the
      // subscriber is back, so the cache must not trust what it held.
      await revoke(conns.commands as unknown as Redis, keys.apiKeyRevocations(), keys.apiKeys(), d1);
      await waitFor(async () => (await cache.authenticate(k1)) === undefined, { timeoutMs: 2000, what: "k1 refused" });

      // The feed is live again, on another node, and messages reach it there.
      await waitFor(() => cache.isLive(), { timeoutMs: 10_000, what: "the feed live on another node" });
      expect(sub.options.port).not.toBe(killedPort);
      expect(await cache.authenticate(k2)).toBe("u_two");
      await revoke(conns.commands as unknown as Redis, keys.apiKeyRevocations(), keys.apiKeys(), d2);
      await waitFor(async () => (await cache.authenticate(k2)) === undefined, { timeoutMs: 2000, what: "k2 refused" });
      expect(await cache.authenticate(k1)).toBeUndefined();
    } finally {
      await cache.stop();
      await conns.closeAll();
    }
  }, 60_000);
});

describe("a 1-master cluster with a replica", () => {
  let small: LocalCluster;
  let replica: { port: number; kill(): Promise<void>; dir: string } | undefined;

  beforeAll(async () => {
    small = await startCluster({ masters: 1 });
    replica = await addReplica(small);
  }, 60_000);

  afterAll(async () => {
    await replica?.kill();
    if (replica) rmSync(replica.dir, { recursive: true, force: true });
    await small?.stop();
  });

  it("REDIS_MIN_REPLICAS_ACK: a write is confirmed by the master's replica, and not by two", async () => {
    const conns = createConnections(targetOf(small), { commandTimeoutMs: 5000, logger });
    try {
      // Connected first: the client's first connection adds its nodes (counted as a topology change).
      await Promise.all([conns.commands.ping(), conns.queues.ping()]);
      const one = new ReplicaAck([conns.commands, conns.queues], 1, 2000);
      const t1 = one.begin();
      await conns.commands.set("{ack}:k", "v");
      await conns.queues.set("{ack}:q", "v");
      await one.confirm(t1);
      const two = new ReplicaAck([conns.commands], 2, 200);
      const t2 = two.begin();
      await conns.commands.set("{ack}:k", "w");
      await expect(two.confirm(t2)).rejects.toThrow(/reached 1 of 2/);
    } finally {
      await conns.closeAll();
    }
  }, 30_000);
});

describe("the daemon on REDIS_CLUSTER_NODES", () => {
  // A cluster of its own: the revocation test above SIGKILLs a master, and the daemon's start-up
  // writes the layout record, whose slot may be on that master.
  const ownCluster = useCluster({ masters: 3 });

  it("starts with ROLES=api and answers /readyz 200", async () => {
    const port = await freePort();
    const d = spawnDaemon("cluster-api", {
      REDIS_CLUSTER_NODES: ownCluster().seedList,
      ROLES: "api",
      PORT: String(port),
      HOST: "127.0.0.1",
      REDIS_KEY_PREFIX: "clapi",
      LOG_LEVEL: "warn",
    });
    await waitForReady(d, 60_000);
    await d.kill();
  }, 90_000);
});

/** HDEL of a key's digest and its revocation message, as a rotation does (one global MULTI). */
async function revoke(redis: Redis, channel: string, index: string, digest: string): Promise<void> {
  await redis.multi().hdel(index, digest).publish(channel, digest).exec();
}

/** The port of the master serving `key` (as created: nothing moved slots). */
async function slotNodePort(key: string): Promise<number> {
  const { keySlot } = await import("../../helpers/cluster.js");
  return cluster.nodeForSlot(keySlot(key)).port;
}

async function infoOfSlotNode(key: string): Promise<string> {
  return onRedisNode(await slotNodePort(key), (r) => r.info("clients"));
}

/** Starts one more cluster node and makes it a replica of `c`'s first master, synced. */
async function addReplica(c: LocalCluster): Promise<{ port: number; kill(): Promise<void>; dir: string }> {
  const master = c.nodes[0];
  if (!master) throw new Error("no master");
  const port = await freePort();
  let busPort = await freePort();
  while (busPort === port) busPort = await freePort();
  const dir = mkdtempSync(path.join(os.tmpdir(), "tributary-replica-"));
  const p = spawnRedisNode(
    [
      ...["--port", String(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-port", String(busPort)],
      ...["--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no", "--dir", dir],
    ],
    `replica-${port}`,
  );
  await waitFor(() => redisAnswersPing(port), { timeoutMs: 15_000, what: "the replica node" });
  await onRedisNode(master.port, (r) => r.call("CLUSTER", "MEET", "127.0.0.1", port, busPort));
  const id = String(await onRedisNode(master.port, (r) => r.call("CLUSTER", "MYID")));
  await waitFor(() => onRedisNode(port, async (r) => (await r.call("CLUSTER", "REPLICATE", id)) === "OK").catch(() => false), {
    timeoutMs: 15_000,
    what: "CLUSTER REPLICATE",
  });
  await waitFor(() => onRedisNode(port, async (r) => /master_link_status:up/.test(await r.info("replication"))), {
    timeoutMs: 15_000,
    what: "the replica in sync",
  });
  return { port, dir, kill: () => p.signal("SIGKILL") };
}
