import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { createKeys } from "../../../src/store/keys.js";
import { claimLayout, LayoutMismatchError } from "../../../src/store/layout.js";
import { prepareLayout } from "../../../src/store/layout-migration.js";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { killAll, spawnDaemon } from "../../helpers/process.js";
import { connectRedis, dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";

/** The layout record (SPEC §8): OUTBOX_SHARDS written at first start, checked at every start. */

let redis: Redis;
const prefixes: string[] = [];

beforeAll(() => {
  redis = connectRedis();
});

afterEach(async () => {
  await killAll();
  for (const p of prefixes.splice(0)) await dropPrefix(redis, p);
});

afterAll(() => {
  redis?.disconnect();
});

const fresh = (): string => {
  const p = testPrefix();
  prefixes.push(p);
  return p;
};

describe("the layout record", () => {
  it("is written by the first start with version 2 and OUTBOX_SHARDS", async () => {
    let td: TestDaemon | undefined;
    try {
      td = await startTestDaemon({ OUTBOX_SHARDS: "8" });
      prefixes.push(td.prefix);
      expect(await redis.hgetall(createKeys(td.prefix, 8).layout())).toEqual({ version: "2", outbox_shards: "8" });
    } finally {
      await td?.daemon.close();
    }
  });

  it("holds the first writer's value when first starts race", async () => {
    const prefix = fresh();
    const claims = await Promise.all([4, 8, 16, 32].map((n) => claimLayout(redis, createKeys(prefix, n))));
    expect(new Set(claims.map((c) => c.outboxShards)).size).toBe(1);
    const stored = Number(await redis.hget(createKeys(prefix).layout(), "outbox_shards"));
    expect(claims.every((c) => c.outboxShards === stored && c.version === 2)).toBe(true);
  });

  it("refuses a start whose OUTBOX_SHARDS differs, naming both values", async () => {
    const prefix = fresh();
    await prepareLayout({ redis, keys: createKeys(prefix, 16), connection: redis, now: Date.now });
    const other = prepareLayout({ redis, keys: createKeys(prefix, 4), connection: redis, now: Date.now });
    await expect(other).rejects.toThrow(LayoutMismatchError);
    await expect(other).rejects.toThrow(/OUTBOX_SHARDS=4 .*OUTBOX_SHARDS=16/);
    // The record is left as it was.
    expect(await redis.hgetall(createKeys(prefix).layout())).toEqual({ version: "2", outbox_shards: "16" });
  });

  it("makes the daemon process exit 1 with a message naming OUTBOX_SHARDS and the stored value", async () => {
    const prefix = fresh();
    await claimLayout(redis, createKeys(prefix, 16));
    const port = await freePort();
    const child = spawnDaemon("mismatch", {
      REDIS_URL: redisUrl(),
      REDIS_KEY_PREFIX: prefix,
      OUTBOX_SHARDS: "12",
      PORT: String(port),
      HOST: "127.0.0.1",
      LOG_LEVEL: "silent",
    });
    const exit = await child.exited;
    expect(exit.code, child.logs()).toBe(1);
    expect(child.logs()).toMatch(/OUTBOX_SHARDS=12 but this deployment was created with OUTBOX_SHARDS=16/);
  }, 60_000);
});
