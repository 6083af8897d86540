import path from "node:path";
import { Cluster } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { formatPlacement, shardPlacement } from "../../../src/cli/layout-commands.js";
import { runCli } from "../../../src/cli/run.js";
import { createKeys } from "../../../src/store/keys.js";
import { slotOf } from "../../../src/store/shard-layout.js";
import { type LocalCluster, startCluster } from "../../helpers/cluster.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";

/** `tributary cluster shards`: shard -> hash tag -> slot -> node. */

let cluster: LocalCluster | undefined;
const prefix = testPrefix();

afterAll(async () => {
  await cluster?.stop();
  const redis = connectRedis();
  await dropPrefix(redis, prefix);
  redis.disconnect();
});

describe("tributary cluster shards", () => {
  it("prints each shard's tag and slot, on 'this node' of a single Redis", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      ["cluster", "shards"],
      { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: prefix, OUTBOX_SHARDS: "4", LOG_LEVEL: "silent" },
      { stdout: (t) => out.push(t), stderr: (t) => err.push(t) },
      { registryDir: path.resolve(import.meta.dirname, "../../../registry") },
    );
    expect(code, err.join("")).toBe(0);
    const keys = createKeys(prefix, 4);
    const lines = out.join("").trimEnd().split("\n");
    expect(lines[0]).toMatch(/^SHARD\s+TAG\s+SLOT\s+NODE$/);
    expect(lines.slice(1)).toHaveLength(4);
    keys.shardTags.forEach((tag, i) => {
      expect(lines[i + 1]?.split(/\s{2,}/)).toEqual([String(i), tag, String(slotOf(`{${tag}}`)), "this node"]);
    });
  });

  it("names the master owning each shard's slot on a Redis Cluster", async () => {
    cluster = await startCluster({ masters: 3 });
    const client = new Cluster([...cluster.seeds], { lazyConnect: false });
    try {
      const keys = createKeys(prefix, 6);
      const rows = await shardPlacement(client, keys);
      expect(rows.map((r) => r.tag)).toEqual(keys.shardTags);
      for (const r of rows) expect(r.node).toBe(`127.0.0.1:${cluster.nodeForSlot(r.slot).port}`);
      // Balanced tags: 6 shards over 3 masters, 2 each.
      expect(new Set(rows.map((r) => r.node)).size).toBe(3);
      expect(formatPlacement(rows).split("\n")[1]).toContain(rows[0]?.node);
    } finally {
      client.disconnect();
    }
  }, 60_000);
});
