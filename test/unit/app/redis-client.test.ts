import { Cluster, Redis } from "ioredis";
import { describe, expect, it } from "vitest";
import {
  clusterRedirections,
  openCluster,
  openRedis,
  type RedisTarget,
  TickBatchedRedis,
  TickBatchedSentinelRedis,
  redisTarget,
  requestCommandTimeoutMs,
} from "../../../src/app/redis-client.js";
import { loadConfig } from "../../../src/config/load.js";

/** The connection factory's options, read off real (not connected: lazyConnect) ioredis clients. */

const lazy = { lazyConnect: true, maxRetriesPerRequest: 2, commandTimeout: 5000 } as const;

describe("redisTarget", () => {
  it("is the URL for one node, the sentinels for Sentinel, the seeds for Cluster", () => {
    expect(redisTarget(loadConfig({}), "redis://127.0.0.1:6379")).toMatchObject({ kind: "single", url: "redis://127.0.0.1:6379" });
    const s = redisTarget(loadConfig({ REDIS_SENTINELS: "a:26379", REDIS_SENTINEL_NAME: "m", REDIS_PASSWORD: "pw" }), undefined);
    expect(s).toMatchObject({ kind: "sentinel", name: "m", sentinels: [{ host: "a", port: 26379 }], auth: { password: "pw" } });
    expect(redisTarget(loadConfig({ REDIS_CLUSTER_NODES: "c:7000" }), undefined)).toMatchObject({ kind: "cluster" });
  });
  it("bounds request commands by REDIS_FAILOVER_TIMEOUT_MS too", () => {
    expect(requestCommandTimeoutMs(loadConfig({}))).toBe(5000);
    expect(requestCommandTimeoutMs(loadConfig({ REDIS_FAILOVER_TIMEOUT_MS: "2000" }))).toBe(2000);
  });
});

describe("openRedis", () => {
  const none = { username: undefined, password: undefined };

  it("opens one node exactly as a plain `new Redis(url, options)` when no credentials are set", () => {
    const url = "redis://:secret@127.0.0.1:6390/2";
    const made = openRedis({ kind: "single", url, auth: none }, lazy);
    const plain = new Redis(url, lazy);
    expect(made.options).toEqual(plain.options);
    made.disconnect();
    plain.disconnect();
  });

  it("lets REDIS_USERNAME/REDIS_PASSWORD win over the URL's, whatever they contain", () => {
    const made = openRedis(
      { kind: "single", url: "redis://old:x@127.0.0.1:6390", auth: { username: "app", password: "p@ss:/w#rd" } },
      lazy,
    );
    expect(made.options).toMatchObject({ username: "app", password: "p@ss:/w#rd", host: "127.0.0.1", port: 6390 });
    made.disconnect();
  });

  it("asks the sentinels for the master, follows failovers and reconnects on READONLY", () => {
    const target: RedisTarget = {
      kind: "sentinel",
      sentinels: [
        { host: "10.0.0.1", port: 26379 },
        { host: "10.0.0.2", port: 26380 },
      ],
      name: "mymaster",
      auth: { username: undefined, password: "pw" },
      sentinelPassword: "spw",
      failoverTimeoutMs: 3000,
    };
    const made = openRedis(target, lazy);
    expect(made.options).toMatchObject({
      sentinels: [
        { host: "10.0.0.1", port: 26379 },
        { host: "10.0.0.2", port: 26380 },
      ],
      name: "mymaster",
      role: "master",
      password: "pw",
      sentinelPassword: "spw",
      failoverDetector: true,
      connectTimeout: 3000,
      // the caller's profile survives
      maxRetriesPerRequest: 2,
      commandTimeout: 5000,
    });
    const reconnect = made.options.reconnectOnError as (err: Error) => boolean | 1 | 2;
    expect(reconnect(new Error("READONLY You can't write against a read only replica."))).toBe(2);
    expect(reconnect(new Error("ERR wrong number of arguments"))).toBe(false);
    made.disconnect();
  });

  it("gives a tick-batched client, with ioredis's auto-pipeline off, when auto-pipelining is asked for (one node and Sentinel)", () => {
    const single = openRedis({ kind: "single", url: "redis://127.0.0.1:6390", auth: none }, { ...lazy, enableAutoPipelining: true });
    const sentinel = openRedis(
      {
        kind: "sentinel",
        sentinels: [{ host: "a", port: 26379 }],
        name: "m",
        auth: none,
        sentinelPassword: undefined,
        failoverTimeoutMs: 1000,
      },
      { ...lazy, enableAutoPipelining: true },
    );
    expect(single).toBeInstanceOf(TickBatchedRedis);
    expect(sentinel).toBeInstanceOf(TickBatchedSentinelRedis);
    for (const c of [single, sentinel]) {
      expect(c.options).toMatchObject({ enableAutoPipelining: false, maxRetriesPerRequest: 2, commandTimeout: 5000 });
      c.disconnect();
    }
    // Without it, a plain client.
    const plain = openRedis({ kind: "single", url: "redis://127.0.0.1:6390", auth: none }, lazy);
    expect(plain).not.toBeInstanceOf(TickBatchedRedis);
    plain.disconnect();
  });

  it("refuses a Cluster target: a one-node client to one Cluster node would spin on MOVED", () => {
    expect(() => openRedis({ kind: "cluster", nodes: [{ host: "c", port: 7000 }], auth: none, failoverTimeoutMs: 1000 }, lazy)).toThrow(
      /openCluster/,
    );
  });
});

describe("openCluster", () => {
  it("reads and writes on masters, retries CLUSTERDOWN/TRYAGAIN and carries the credentials to every node", () => {
    const c = openCluster(
      { kind: "cluster", nodes: [{ host: "127.0.0.1", port: 7000 }], auth: { username: "app", password: "pw" }, failoverTimeoutMs: 4000 },
      { ...lazy, enableAutoPipelining: true },
    );
    expect(c).toBeInstanceOf(Cluster);
    // Auto-pipelining asked for: the client batches each tick's writes per node itself, not through
    // ioredis's Cluster auto-pipeline (test/integration/cluster/tick-batching.test.ts).
    expect(c.options).toMatchObject({ scaleReads: "master", enableAutoPipelining: false, lazyConnect: true });
    expect(c.options.retryDelayOnClusterDown).toBeGreaterThan(0);
    expect(c.options.retryDelayOnTryAgain).toBeGreaterThan(0);
    expect(c.options.redisOptions).toMatchObject({ username: "app", password: "pw", connectTimeout: 4000, maxRetriesPerRequest: 2 });
    // Retries outlast a failover bounded by REDIS_FAILOVER_TIMEOUT_MS (node timeout + election).
    expect((c.options.maxRedirections ?? 0) * (c.options.retryDelayOnFailover ?? 0)).toBeGreaterThan(4000);
    expect(c.options.maxRedirections).toBe(clusterRedirections(4000));
    c.disconnect();
  });
});
