import { describe, expect, it } from "vitest";
import { parseHostList } from "../../../src/config/host-list.js";
import { ConfigError, loadConfig } from "../../../src/config/load.js";

describe("parseHostList (REDIS_SENTINELS, REDIS_CLUSTER_NODES)", () => {
  it("reads host:port lists, with spaces, names, IPv4 and bracketed IPv6", () => {
    expect(parseHostList("127.0.0.1:26379, sentinel-2.example:26380 ,[::1]:7000")).toEqual({
      ok: true,
      nodes: [
        { host: "127.0.0.1", port: 26379 },
        { host: "sentinel-2.example", port: 26380 },
        { host: "::1", port: 7000 },
      ],
    });
    expect(parseHostList("a:1,")).toEqual({ ok: true, nodes: [{ host: "a", port: 1 }] });
  });
  it.each([
    ["", "accepts a comma list of host:port"],
    [" , ", "accepts a comma list of host:port"],
    ["localhost", 'not "localhost"'],
    ["localhost:0", 'not "localhost:0"'],
    ["localhost:65536", 'not "localhost:65536"'],
    ["::1:7000", 'not "::1:7000"'],
    ["redis://a:1", 'not "redis://a:1"'],
    ["a:1,A:1", "names A:1 twice"],
  ])("refuses %j", (text, message) => {
    const r = parseHostList(text);
    expect(r.ok).toBe(false);
    expect(r.ok ? "" : r.message).toContain(message);
  });
});

describe("loadConfig: Redis deployment shapes (SPEC §8)", () => {
  const error = (env: Record<string, string>): string => {
    try {
      loadConfig(env);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as Error).message;
    }
    throw new Error("expected a ConfigError");
  };

  it("defaults to one node, no WAIT, 1 s ack timeout, 10 s failover bound", () => {
    expect(loadConfig({}).redisHa).toEqual({
      shape: { kind: "single" },
      username: undefined,
      password: undefined,
      sentinelPassword: undefined,
      minReplicasAck: 0,
      replicaAckTimeoutMs: 1000,
      failoverTimeoutMs: 10_000,
    });
  });

  it("reads a Sentinel shape with credentials and WAIT settings", () => {
    const c = loadConfig({
      REDIS_SENTINELS: "10.0.0.1:26379,10.0.0.2:26379",
      REDIS_SENTINEL_NAME: "mymaster",
      REDIS_PASSWORD: "p@ss:word",
      REDIS_USERNAME: "tributary",
      REDIS_MIN_REPLICAS_ACK: "1",
      REDIS_REPLICA_ACK_TIMEOUT_MS: "500",
      REDIS_FAILOVER_TIMEOUT_MS: "3000",
    });
    expect(c.redisUrl).toBeUndefined();
    expect(c.redisHa).toMatchObject({
      shape: {
        kind: "sentinel",
        name: "mymaster",
        sentinels: [
          { host: "10.0.0.1", port: 26379 },
          { host: "10.0.0.2", port: 26379 },
        ],
      },
      username: "tributary",
      password: "p@ss:word",
      minReplicasAck: 1,
      replicaAckTimeoutMs: 500,
      failoverTimeoutMs: 3000,
    });
  });

  it("reads Cluster seed nodes", () => {
    expect(loadConfig({ REDIS_CLUSTER_NODES: "a:7000,b:7001" }).redisHa.shape).toEqual({
      kind: "cluster",
      nodes: [
        { host: "a", port: 7000 },
        { host: "b", port: 7001 },
      ],
    });
  });

  it.each([
    [{ REDIS_URL: "redis://r:6379", REDIS_SENTINELS: "s:26379", REDIS_SENTINEL_NAME: "m" }, ["REDIS_URL", "REDIS_SENTINELS"]],
    [{ REDIS_URL: "redis://r:6379", REDIS_CLUSTER_NODES: "c:7000" }, ["REDIS_URL", "REDIS_CLUSTER_NODES"]],
    [{ REDIS_SENTINELS: "s:26379", REDIS_SENTINEL_NAME: "m", REDIS_CLUSTER_NODES: "c:7000" }, ["REDIS_SENTINELS", "REDIS_CLUSTER_NODES"]],
    [
      { REDIS_URL: "redis://r:6379", REDIS_SENTINELS: "s:26379", REDIS_SENTINEL_NAME: "m", REDIS_CLUSTER_NODES: "c:7000" },
      ["REDIS_URL", "REDIS_SENTINELS", "REDIS_CLUSTER_NODES"],
    ],
  ])("refuses more than one shape, naming the variables (%j)", (env, names) => {
    const message = error(env);
    expect(message).not.toContain("\n");
    expect(message).toMatch(/^conflicting Redis settings: /);
    for (const n of names) expect(message.split(";")[0]).toContain(n);
  });

  it("refuses REDIS_SENTINELS without REDIS_SENTINEL_NAME, and sentinel settings without sentinels", () => {
    expect(error({ REDIS_SENTINELS: "s:26379" })).toMatch(/^invalid REDIS_SENTINELS: needs REDIS_SENTINEL_NAME/);
    expect(error({ REDIS_SENTINEL_NAME: "m" })).toMatch(/^invalid REDIS_SENTINEL_NAME: only applies with REDIS_SENTINELS/);
    expect(error({ REDIS_URL: "redis://r:6379", REDIS_SENTINEL_PASSWORD: "x" })).toMatch(/^invalid REDIS_SENTINEL_PASSWORD/);
  });

  it("refuses malformed lists and values, naming the variable", () => {
    expect(error({ REDIS_SENTINELS: "s", REDIS_SENTINEL_NAME: "m" })).toMatch(
      /^invalid REDIS_SENTINELS: accepts a comma list of host:port/,
    );
    expect(error({ REDIS_CLUSTER_NODES: "c:70000" })).toMatch(/^invalid REDIS_CLUSTER_NODES: /);
    expect(error({ REDIS_MIN_REPLICAS_ACK: "-1" })).toMatch(/^invalid REDIS_MIN_REPLICAS_ACK: /);
    expect(error({ REDIS_REPLICA_ACK_TIMEOUT_MS: "0" })).toMatch(/^invalid REDIS_REPLICA_ACK_TIMEOUT_MS: /);
  });

  it("refuses a WAIT that cannot be satisfied or that outlasts the request's Redis deadline", () => {
    expect(error({ REDIS_MIN_REPLICAS_ACK: "1" })).toMatch(/^invalid REDIS_MIN_REPLICAS_ACK: .*embedded/);
    expect(error({ REDIS_URL: "redis://r:6379", REDIS_MIN_REPLICAS_ACK: "1", REDIS_REPLICA_ACK_TIMEOUT_MS: "5000" })).toMatch(
      /^invalid REDIS_REPLICA_ACK_TIMEOUT_MS: must be below .*\(5000 ms\)/,
    );
    expect(
      error({
        REDIS_URL: "redis://r:6379",
        REDIS_MIN_REPLICAS_ACK: "1",
        REDIS_REPLICA_ACK_TIMEOUT_MS: "900",
        REDIS_FAILOVER_TIMEOUT_MS: "800",
      }),
    ).toMatch(/\(800 ms\)/);
    expect(loadConfig({ REDIS_URL: "redis://r:6379", REDIS_MIN_REPLICAS_ACK: "1" }).redisHa.minReplicasAck).toBe(1);
  });
});
