import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbeddedRedis } from "../../../src/redis/embedded.js";
import { defineScript, script, writeTogether } from "../../../src/store/script.js";
import { dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";
import { countSocketWrites, writesInCheckPhase } from "../../helpers/socket-writes.js";

/**
 * The script loader against real Redis: EVAL on a socket's first call, EVALSHA after, EVAL again
 * after NOSCRIPT; on an auto-pipelined connection the calls of a tick share one corked write and
 * keep their order.
 */

const prefix = testPrefix();
const connections: Redis[] = [];
function connect(autoPipeline: boolean): Redis {
  const c = new Redis(redisUrl(), { maxRetriesPerRequest: null, enableAutoPipelining: autoPipeline });
  connections.push(c);
  return c;
}
afterAll(async () => {
  const [first] = connections;
  if (first) await dropPrefix(first, prefix);
  await Promise.all(connections.map((c) => c.quit()));
});

/** Appends ARGV[1] to the list KEYS[1] and returns its new length (a unique source per test run). */
const APPEND = script("testScriptAppend", 1, `-- ${randomBytes(6).toString("hex")}\nreturn redis.call('RPUSH', KEYS[1], ARGV[1])`);

/** Answers its keys and arguments as it received them (a unique source per test run). */
const ECHO = script("testScriptEcho", 2, `-- ${randomBytes(6).toString("hex")}\nreturn {KEYS[1], KEYS[2], unpack(ARGV)}`);

describe("store/script defineScript", () => {
  it("frames keys and arguments of any UTF-8 length, numbers and empty strings (EVAL, then EVALSHA)", async () => {
    const redis = connect(true);
    await redis.ping();
    const echo = defineScript(redis, ECHO);
    const keys = [`${prefix}:ключ:{é}`, `${prefix}:🔑`];
    const args = ["", "plain", "ünïcödé ✓ 𝄞", 42, -1.5, "a\r\nb", "x".repeat(70_000)];
    const want = [...keys, "", "plain", "ünïcödé ✓ 𝄞", "42", "-1.5", "a\r\nb", "x".repeat(70_000)];
    // The first call on the socket sends the script (EVAL), the second its digest (EVALSHA).
    expect(await echo(keys, args)).toEqual(want);
    expect(await echo(keys, args)).toEqual(want);
  });

  for (const autoPipeline of [true, false]) {
    it(`keeps the order of the calls of one tick (auto-pipelining ${autoPipeline ? "on" : "off"})`, async () => {
      const redis = connect(autoPipeline);
      await redis.ping();
      const append = defineScript(redis, APPEND);
      const key = `${prefix}:order:${autoPipeline}`;
      const lengths = await Promise.all(Array.from({ length: 50 }, (_, i) => append([key], [String(i)])));
      expect(lengths).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
      expect(await redis.lrange(key, 0, -1)).toEqual(Array.from({ length: 50 }, (_, i) => String(i)));
      // The socket is uncorked once the tick's calls are out (later plain commands still answer).
      await new Promise((r) => setImmediate(r));
      expect(redis.stream.writableCorked).toBe(0);
      expect(await redis.llen(key)).toBe(50);
    });
  }

  it("keeps issue order with auto-pipelined commands of the same tick", async () => {
    const redis = connect(true);
    await redis.ping();
    const append = defineScript(redis, APPEND);
    const key = `${prefix}:mixed`;
    // A plain command waiting in ioredis's auto-pipeline, then script calls, then a plain command.
    await Promise.all([redis.rpush(key, "p1"), append([key], ["s1"]), append([key], ["s2"]), redis.rpush(key, "p2")]);
    // Script calls first in the tick, a plain command after them.
    await Promise.all([append([key], ["s3"]), redis.rpush(key, "p3"), append([key], ["s4"])]);
    expect(await redis.lrange(key, 0, -1)).toEqual(["p1", "s1", "s2", "p2", "s3", "p3", "s4"]);
  });

  it("sends the script again after Redis forgot it (NOSCRIPT), and plain commands of the same tick still answer", async () => {
    // A Redis of its own: a SCRIPT FLUSH of the shared test Redis would reach every other test's scripts.
    const server = await startEmbeddedRedis();
    const redis = new Redis(server.url, { maxRetriesPerRequest: null, enableAutoPipelining: true });
    try {
      await noScriptCase(redis);
    } finally {
      await redis.quit();
      await server.close();
    }
  });

  async function noScriptCase(redis: Redis): Promise<void> {
    await redis.ping();
    const append = defineScript(redis, APPEND);
    const key = `${prefix}:noscript`;
    expect(await append([key], ["a"])).toBe(1);
    expect(await append([key], ["b"])).toBe(2);
    await redis.script("FLUSH");
    const [third, len] = await Promise.all([append([key], ["c"]), redis.llen(key)]);
    expect(third).toBe(3);
    expect(len).toBeGreaterThanOrEqual(2);
    expect(await append([key], ["d"])).toBe(4);
    expect(await redis.lrange(key, 0, -1)).toEqual(["a", "b", "c", "d"]);
  }

  it("refuses a call with the wrong number of keys", () => {
    const append = defineScript(connect(true), APPEND);
    expect(() => append([], ["x"])).toThrow(/takes 1 keys, got 0/);
  });

  it("passes Redis errors through", async () => {
    const redis = connect(true);
    const fail = defineScript(redis, script("testScriptFail", 1, "return redis.error_reply('ERR nope')"));
    await expect(fail([`${prefix}:x`], [])).rejects.toThrow(/nope/);
    // And again, now as EVALSHA on a socket that has the script.
    await expect(fail([`${prefix}:x`], [])).rejects.toThrow(/nope/);
  });

  it("writes the calls made inside writeTogether at once, in one write, even from a setImmediate callback", async () => {
    const redis = connect(true);
    const append = defineScript(redis, APPEND);
    const key = `${prefix}:together`;
    await append([key], ["warm"]); // EVAL once: the calls below are EVALSHA
    const socketWrites = countSocketWrites(redis);
    try {
      // In the check phase, a plain call corks the socket until the next turn's check phase.
      const plain = await writesInCheckPhase(socketWrites, () => append([key], ["a"]));
      expect(plain.writes).toBe(0);
      expect(await plain.value).toBe(2);
      // Inside writeTogether, the calls are written before it returns, in one write.
      const together = await writesInCheckPhase(socketWrites, () => {
        const sent: Promise<unknown>[] = [];
        writeTogether(redis, () => {
          for (const v of ["b", "c", "d"]) sent.push(append([key], [v]));
        });
        return sent;
      });
      expect(together.writes).toBe(1);
      expect(await Promise.all(together.value)).toEqual([3, 4, 5]);
    } finally {
      socketWrites.stop();
    }
    expect(redis.stream.writableCorked).toBe(0);
  });
});
