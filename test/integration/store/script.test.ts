import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EmbeddedRedis, startEmbeddedRedis } from "../../../src/redis/embedded.js";
import { defineScript, script } from "../../../src/store/script.js";

/**
 * The script loader against a Redis of its own (a SCRIPT FLUSH on the shared test Redis would
 * touch every other test's scripts): scripts go out as plain EVAL/EVALSHA, define nothing on the
 * connection, and survive a flushed script cache.
 */
let server: EmbeddedRedis;
let redis: Redis;

beforeAll(async () => {
  server = await startEmbeddedRedis();
  redis = new Redis(server.url, { maxRetriesPerRequest: null, enableAutoPipelining: true });
});

afterAll(async () => {
  await redis?.quit();
  await server?.close();
});

const INCR_BY = script("testIncrBy", 1, "return redis.call('INCRBY', KEYS[1], ARGV[1])");

describe("defineScript", () => {
  it("runs the script, batched calls in order, and defines no custom command on the connection", async () => {
    const incr = defineScript(redis, INCR_BY);
    expect(await incr(["k1"], [2])).toBe(2);
    expect(await Promise.all([incr(["k1"], [1]), incr(["k1"], [10])])).toEqual([3, 13]);
    expect(Object.keys(redis.scriptsSet)).toEqual([]);
    expect("testIncrBy" in redis).toBe(false);
  });

  it("sends the source again once Redis has forgotten the script (NOSCRIPT)", async () => {
    const incr = defineScript(redis, INCR_BY);
    expect(await incr(["k2"], [1])).toBe(1);
    await redis.script("FLUSH");
    expect(await incr(["k2"], [1])).toBe(2);
    expect(await incr(["k2"], [1])).toBe(3);
  });

  it("passes on the script's own errors, and refuses a wrong key count", async () => {
    const failing = defineScript(redis, script("testFail", 1, "return redis.error_reply('BOOM nope')"));
    await failing(["k3"], []).catch(() => {});
    await expect(failing(["k3"], [])).rejects.toThrow(/BOOM/);
    expect(() => defineScript(redis, INCR_BY)(["a", "b"], [1])).toThrow(/takes 1 keys/);
  });
});
